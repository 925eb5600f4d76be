"""Frontend, part 2: expressions (names, attributes, subscripts: array elements, sub-array views and
slices of vectors and matrices; operators, short-circuit boolean operators and ternaries) and writes
into array elements, as a mixin of ``Frontend``."""

from __future__ import annotations

import ast
import builtins as _pybuiltins
import itertools
import math
import types as _pytypes

import numpy as np

from .. import types as T
from ..errors import (
    WarpCodegenAttributeError,
    WarpCodegenDtypeError,
    WarpCodegenIndexError,
    WarpCodegenKeyError,
    WarpCodegenTypeError,
    WarpCodegenValueError,
)
from .ir import Var
from .scope import (
    _BINOPS,
    _CMPOPS,
    BuiltinRef,
    Ref,
    _adjoint_marker,
    _describe,
    _is_attr_chain,
    unsupported_message,
)


def _library_name(name: str):
    """An xsim builtin, library func or value type named without the module prefix (``expect_eq(...)``,
    ``vec3(...)``), which Warp's kernels may do; None for any other name."""
    import xsim  # the package imports this module: look it up when a kernel compiles

    from .kernel import Function
    obj = getattr(xsim, name, None)
    if isinstance(obj, (BuiltinRef, Function)) or isinstance(obj, type) and T.is_value_type(obj):
        return obj
    return None


class ArrayShape(tuple):
    """An array's ``.shape`` in a kernel: its dims' sizes; an index past its dims reads 0, as Warp's
    ``shape_t`` does (``a.shape[1]`` of a 1-d array)."""


def is_array_slice(node) -> bool:
    """``a[lo:hi]``, ``a[lo:hi, j]``...: a subscript with a slice in it."""
    s = node.slice
    return isinstance(s, ast.Slice) or isinstance(s, ast.Tuple) and any(isinstance(e, ast.Slice) for e in s.elts)


class Expressions:
    """Expression building; relies on the emission helpers of ``Frontend``."""

    # ------------------------------------------------------------------------------------------
    # expressions

    def expr(self, node):
        kind = type(node)
        refused = unsupported_message(kind)
        if refused is not None:
            raise self.err(node, refused)
        method = getattr(self, "expr_" + kind.__name__, None)
        if method is None:
            raise self.err(node, f"unsupported expression '{kind.__name__}' in a kernel")
        return method(node)

    def unusable_reference(self, obj, node, what: str):
        """The error for an object the kernel's code names but cannot use: data it reads from outside (an
        array, a list...) is a TypeError, as Warp's "Invalid external reference type", since a kernel sees such
        data only through its parameters; a module, type or function is a misused name."""
        if isinstance(obj, (_pytypes.ModuleType, type)) or callable(obj):
            return self.err(node, f"{_describe(obj)} {what}")
        return self.err(node, f"Invalid external reference type: {type(obj)}: {_describe(obj)} {what}; a kernel reads "
                              "arrays and other data through its parameters, pass it as a launch argument",
                        WarpCodegenTypeError)

    def value(self, node) -> Var:
        v = self.expr(node)
        return self.single(v, node)

    def single(self, v, node) -> Var:
        if isinstance(v, Ref):
            obj = v.obj
            if isinstance(obj, (bool, int, float, np.generic)):
                return self.const(obj)
            if T.is_composite(type(obj)):
                comps = [self.const(x, type(obj)._scalar) for x in np.asarray(obj).ravel().tolist()]
                return self.emit("construct", type(obj), comps, node)
            raise self.unusable_reference(obj, node, "is not a value that can be used here")
        if isinstance(v, tuple):
            raise self.err(node, "expected a single value, got a tuple")
        return v

    def expr_Constant(self, node):
        if isinstance(node.value, (bool, int, float)):
            return self.const(node.value)
        if node.value is None:
            raise self.err(node, "None is not a kernel value")
        raise self.err(node, f"unsupported constant {node.value!r} (only numbers and booleans)")

    def expr_Name(self, node):
        f = self.f
        if node.id in f.sym:
            return f.sym[node.id]
        if node.id in f.src.names:
            return self.global_value(f.src.names[node.id], node)
        if hasattr(_pybuiltins, node.id):
            return Ref(getattr(_pybuiltins, node.id))
        library = _library_name(node.id)
        if library is not None:
            return Ref(library)
        raise self.err(node, f"unknown name '{node.id}' (not a local, a parameter or a module global): "
                             f"Referencing undefined symbol: {node.id}", WarpCodegenKeyError)

    def global_value(self, obj, node):
        if isinstance(obj, (bool, int, float, np.generic)) and not isinstance(obj, np.ndarray):
            return self.const(obj)
        return Ref(obj)

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        if isinstance(base, Ref):
            obj = base.obj
            if obj is _xsim_module() and node.attr in ("float", "int"):
                return Ref(getattr(_pybuiltins, node.attr))  # Warp's builtins xsim.float(x), xsim.int(x)
            if isinstance(obj, type) and T.is_composite(obj) and node.attr in ("dtype", "length"):
                # as on values (below): a vector/matrix type's scalar type and its number of components
                return Ref(obj._scalar) if node.attr == "dtype" else self.const(T.num_components(obj))
            if not hasattr(obj, node.attr):
                if getattr(node, "_xs_callee", False):
                    raise self.err(node, f"Could not find function {ast.unparse(node)}: {_describe(obj)} has no "
                                         f"attribute '{node.attr}'", WarpCodegenAttributeError)
                raise self.err(node, f"`{node.attr}` is not an attribute of {_describe(obj)}",
                               WarpCodegenAttributeError)
            return self.global_value(getattr(obj, node.attr), node)
        if isinstance(base, tuple):
            raise self.err(node, "tuples have no attributes", WarpCodegenAttributeError)
        t = base.type
        if node.attr == "dtype" and (isinstance(t, T.ArrayType) or T.is_composite(t)):
            return Ref(t.dtype if isinstance(t, T.ArrayType) else t._scalar)  # element / component type
        if node.attr == "length" and T.is_composite(t):
            return self.const(T.num_components(t))
        if isinstance(t, T.ArrayType):
            if node.attr == "shape":
                return ArrayShape(self.emit("shape", T.int32, [base], node, dim=d) for d in range(t.ndim))
            if node.attr == "ndim":
                return self.const(t.ndim, T.int32)
            if node.attr == "ptr" and type(t) is T.ArrayType:
                return self.emit("array_ptr", T.uint64, [base], node)
            raise self.err(node, f"arrays have no attribute '{node.attr}' in kernels (use .shape, .ndim, .ptr or "
                                 "len())", WarpCodegenAttributeError)
        if T.is_struct(t):
            ft = t._fields.get(node.attr)
            if ft is None:
                # Warp's wording: the name as written and the struct's full name
                raise self.err(node, f"`{node.attr}` is not an attribute of '{ast.unparse(node.value)}' "
                                     f"({t.__module__}.{t.__qualname__})", WarpCodegenAttributeError)
            held = self.struct_fields.get(base.id, {}).get(node.attr)
            if held is not None:
                return held
            out = self.emit("field_get", ft, [base], node, field=node.attr)
            if isinstance(ft, T.ArrayType) or T.is_struct(ft):
                out.hint = f"{self.array_name(base)}.{node.attr}"  # its path, for messages
            return out
        if t._kind == "transform" and node.attr in ("p", "q"):
            name = "transform_get_translation" if node.attr == "p" else "transform_get_rotation"
            return self.call_builtin(name, [base], node)
        index = self.swizzle_index(t, node)
        return self.emit("extract", t._scalar, [base, self.const(index, T.int32)], node)

    def swizzle_index(self, t, node) -> int:
        names = "xyzw"
        if t._kind in ("vector", "quat") and node.attr in names and names.index(node.attr) < t._shape[0]:
            return names.index(node.attr)
        raise self.err(node, f"{T.type_name(t)} has no component '{node.attr}'", WarpCodegenAttributeError)

    def subscript_indices(self, node) -> list:
        s = node.slice
        elts = s.elts if isinstance(s, ast.Tuple) else [s]
        if any(isinstance(e, ast.Slice) for e in elts):
            raise self.err(node, "an array slice in a kernel is a view: read it whole (v = a[lo:hi, j]) and index "
                                 "the view for an element (v[i] = x), or index the array itself")
        return [self.value(e) for e in elts]

    def composite_slice(self, t, node):
        """``v[1:]``, ``v[::-2]``, ``m[:2]``, ``m[1, ::2]`` on a vector, quat, transform or matrix ``t``:
        the type of the sliced value and the flat components it takes (row-major), or None when the
        subscript has no slice. Bounds are compile-time integers, clamped as Python clamps them."""
        s = node.slice
        elts = s.elts if isinstance(s, ast.Tuple) else [s]
        if not any(isinstance(e, ast.Slice) for e in elts) or not T.is_composite(t):
            return None
        shape = t._shape
        if len(elts) > len(shape):
            raise self.err(node, f"{T.type_name(t)} takes at most {len(shape)} indices, got {len(elts)}",
                           WarpCodegenIndexError)
        axes, kept = [], []
        for dim, n in enumerate(shape):
            e = elts[dim] if dim < len(elts) else ast.Slice()
            if isinstance(e, ast.Slice):
                bounds = [None if x is None else self.const_int(x) for x in (e.lower, e.upper, e.step)]
                if bounds[2] == 0:
                    raise self.err(node, "Slice step cannot be zero.", WarpCodegenValueError)
                axes.append(range(*slice(*bounds).indices(n)))
                kept.append(len(axes[-1]))
            else:
                k = self.const_int(e)
                if not -n <= k < n:
                    raise self.err(node, f"index {k} out of range for {T.type_name(t)}", WarpCodegenIndexError)
                axes.append([k % n])
        if 0 in kept:
            raise self.err(node, f"this slice of {T.type_name(t)} is empty", WarpCodegenIndexError)
        strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
        flat = [sum(i * st for i, st in zip(combo, strides)) for combo in itertools.product(*axes)]
        out_t = T.vector(kept[0], t._scalar) if len(kept) == 1 else T.matrix(tuple(kept), t._scalar)
        return out_t, flat

    def const_int(self, node) -> int:
        """A slice bound (or an index beside a slice): a compile-time integer, as in Warp."""
        v = self.value(node)
        if not (v.is_const and T.is_int(v.type)):
            raise self.err(node, "Slice component must be a compile-time constant integer", WarpCodegenValueError)
        return int(v.const)

    def read_slice(self, base: Var, out_t, flat, node) -> Var:
        s = base.type._scalar
        return self.emit("construct", out_t, [self.emit("extract", s, [base, self.const(k, T.int32)], node)
                                              for k in flat], node)

    def group_value(self, value: Var, out_t, node) -> Var:
        """The value written to a slice or a transform's ``.p``/``.q``: exactly that type (as in Warp,
        nothing converts here; the messages are Warp's)."""
        if value.type is out_t:
            return value
        t, n, what = value.type, T.num_components(out_t), T.type_name(out_t)
        if out_t._kind == "matrix" or t._kind not in ("vector", "quat"):
            msg = (f"The provided value is expected to be a {out_t._kind} of shape {out_t._shape}, with dtype "
                   f"{T.type_name(out_t._scalar)}" if out_t._kind == "matrix" else
                   f"The provided value is expected to be a vector of length {n}, with dtype "
                   f"{T.type_name(out_t._scalar)}")
        elif t._length != n:
            msg = f"The length of the provided vector ({t._length}) isn't compatible with the given slice (expected {n})"
        else:
            msg = f"The provided vector is expected to be of length {n} with dtype {T.type_name(out_t._scalar)}"
        # Warp's wording ends the message (its tests match the end)
        raise self.err(node, f"this part of the value is a {what}, got {T.type_name(t)}: {msg}.", WarpCodegenValueError)

    def index_var(self, v: Var, node, write: bool = False) -> Var:
        """``v`` as an index (an integer; a literal becomes int32); ``write``: it indexes an array written to."""
        float_literal = v.weak and isinstance(v.const, float)
        if v.weak and not (write and float_literal):
            v = self.convert(v, T.int32, node)
        if float_literal or not T.is_int(v.type):
            what = "Array slot write indices must be integers" if write else "an index must be an integer"
            raise self.err(node, f"{what}, got {'a float literal' if float_literal else T.type_name(v.type)}",
                           WarpCodegenTypeError)
        return v

    def flat_component(self, t, idx, node) -> Var:
        if T.is_matrix(t):
            if len(idx) != 2:
                raise self.err(node, f"a matrix takes m[i, j] (or m[i] for a row), got {len(idx)} indices")
            r, c = t._shape
            i, j = (self.wrapped_index(self.index_var(x, node), n, t, node) for x, n in zip(idx, (r, c)))
            if i.is_const and j.is_const:
                return self.const(i.const * c + j.const, T.int32)
            return self.call_builtin("add", [self.call_builtin("mul", [self.cast(i, T.int32, node),
                                                                       self.const(c, T.int32)], node),
                                            self.cast(j, T.int32, node)], node)
        if not T.is_composite(t):
            raise self.err(node, f"{T.type_name(t)} cannot be indexed")
        if len(idx) != 1:
            raise self.err(node, f"{T.type_name(t)} takes one index, got {len(idx)}")
        return self.wrapped_index(self.index_var(idx[0], node), T.num_components(t), t, node)

    def wrapped_index(self, i: Var, n: int, t, node) -> Var:
        """A constant index of a component: a negative one counts from the end, as in Python and Warp."""
        if not i.is_const:
            return i
        if not -n <= i.const < n:
            raise self.err(node, f"index {i.const} out of range for {T.type_name(t)} ({n} components)",
                           WarpCodegenIndexError)
        return self.const(i.const % n, T.int32)

    def expr_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, tuple):
            idx = self.value(node.slice)
            if not idx.is_const:
                raise self.err(node, "a tuple can only be indexed with a constant")
            if isinstance(base, ArrayShape) and idx.const >= len(base):
                return self.const(0, T.int32)
            return base[idx.const]
        if isinstance(base, Ref):
            obj = base.obj
            if obj is _adjoint_marker():
                return self.adjoint_slot(node)
            if not T.is_composite(type(obj)):
                raise self.unusable_reference(obj, node, "cannot be indexed in a kernel")
            base = self.single(base, node)  # a constant vector or matrix (of any scalar type, bool too)
        t = base.type
        if isinstance(t, T.ArrayType) and is_array_slice(node):
            return self.array_slice(base, node)
        if isinstance(t, T.ArrayType):
            idx = [self.index_var(i, node) for i in self.subscript_indices(node)]
            if len(idx) > t.ndim:
                raise self.err(node, f"Incorrect number of indices specified for array indexing: array "
                                     f"'{self.array_name(base)}' has {t.ndim} dimension(s) but is indexed with {len(idx)}")
            self.check_local_index(base, idx, node)
            if len(idx) < t.ndim:  # a view of the remaining dimensions, named after the array it views
                view = self.emit("subarray", t.view(t.ndim - len(idx)), [base, *idx], node)
                view.hint = self.array_name(base)
                if base.id in self.local_shapes:
                    self.local_shapes[view.id] = self.local_shapes[base.id][len(idx):]
                return view
            self.reads.add(base)
            return self.emit("load", t.dtype, [base, *idx], node)
        sliced = self.composite_slice(t, node)
        if sliced is not None:
            return self.read_slice(base, *sliced, node)
        idx = self.subscript_indices(node)
        if T.is_matrix(t) and len(idx) == 1:
            i = self.wrapped_index(self.index_var(idx[0], node), t._shape[0], t, node)
            return self.emit("row", T.vector(t._shape[1], t._scalar), [base, i], node)
        return self.emit("extract", t._scalar, [base, self.flat_component(t, idx, node)], node)

    def array_slice(self, base: Var, node):
        """``a[start:stop:step]``, ``a[lo:hi, j]``, ``a[i, ::2]``...: a view of ``a`` (slice bounds clamped as
        Python clamps them, at run time; an index drops its dimension and may be negative), named after the
        array it views; its gradient is the same view of the array's grad. ``parts`` lists per subscript
        ``("s", has_start, has_stop)`` (3 operands) or ``("i",)`` (1 operand)."""
        t = base.type
        if type(t) is not T.ArrayType:
            raise self.err(node, "slice a plain array (an indexed array has no slice views)")
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if len(elts) > t.ndim:
            raise self.err(node, f"Incorrect number of indices specified for array indexing: array "
                                 f"'{self.array_name(base)}' has {t.ndim} dimension(s) but is indexed with {len(elts)}")
        operands, parts = [], []
        for e in elts:
            if not isinstance(e, ast.Slice):
                operands.append(self.index_var(self.value(e), e))
                parts.append(("i",))
                continue
            for part, default in ((e.lower, 0), (e.upper, 0), (e.step, 1)):
                operands.append(self.index_var(self.value(part), part) if part is not None else
                                self.const(default, T.int32))
            if operands[-1].is_const and operands[-1].const == 0:
                raise self.err(node, "Slice step cannot be zero (an array slice in a kernel)", WarpCodegenValueError)
            parts.append(("s", e.lower is not None, e.upper is not None))
        out_t = t.view(t.ndim - sum(p[0] == "i" for p in parts))
        view = self.emit("slice", out_t, [base, *operands], node, parts=tuple(parts))
        view.hint = self.array_name(base)
        return view

    def array_name(self, v: Var) -> str:
        return self.param_names.get(v.id, v.hint or f"%{v.id}")

    def array_element_target(self, target):
        """For a target inside an array element (``a[i]``, ``a[i].x``, ``a[i][1]``, ``a[i].f.y``)
        return (array, indices, component path); None if the target is a local."""
        path = []
        node = target
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Subscript):
                sliced = isinstance(node.value, ast.Subscript) and is_array_slice(node.value) and \
                    _is_attr_chain(node.value.value)  # a[lo:hi:step][i]: through a slice view
                base = self.expr(node.value) if _is_attr_chain(node.value) or sliced or \
                    self.element_field_array(node.value) else None
                if isinstance(base, Var) and isinstance(base.type, T.ArrayType):
                    idx = [self.index_var(i, node, True) for i in self.subscript_indices(node)]
                    path.reverse()
                    while len(idx) < base.type.ndim and path and path[0][0] == "index":  # a[i][j] = a[i, j]
                        sub = path.pop(0)[1]
                        idx += [self.index_var(i, sub, True) for i in self.subscript_indices(sub)]
                    path.reverse()
                    if len(idx) != base.type.ndim:
                        raise self.err(node, "Incorrect number of indices specified for array indexing: array "
                                             f"'{self.array_name(base)}' has {base.type.ndim} dimension(s) but is "
                                             f"indexed with {len(idx)}")
                    return base, idx, list(reversed(path))
                path.append(("index", node))
            else:
                path.append(("attr", node))
            node = node.value
        return None

    def element_field_array(self, node) -> bool:
        """Whether ``node`` is an array field of an array element (``holders[i].values``, ``a[i].s.arr``): an
        array of its own, whose element a target indexes, not a part of the outer array's element. Decided
        from the types alone, before any code for it is made."""
        return isinstance(node, ast.Attribute) and isinstance(self.static_type(node), T.ArrayType)

    def static_type(self, node):
        """The type of a name, field and array-index chain, or None (anything else): no code is made."""
        if isinstance(node, ast.Name):
            v = self.f.sym.get(node.id)
            return v.type if isinstance(v, Var) else None
        if isinstance(node, ast.Attribute):
            t = self.static_type(node.value)
            return t._fields.get(node.attr) if T.is_struct(t) else None
        if isinstance(node, ast.Subscript):
            t = self.static_type(node.value)
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if isinstance(t, T.ArrayType) and len(elts) == t.ndim and not any(isinstance(e, ast.Slice) for e in elts):
                return t.dtype
        return None

    def accumulate_adjoint(self, target, root, op, node, value: Var):
        """``adjoint[x] += e`` (``op`` "add") or ``= e`` (``op`` None), also into a part of x (``adjoint[x.f]``,
        ``adjoint[x.v][0]``, ``adjoint[x.v].y``): the same update of the local ``$adj:x`` that holds x's adjoint
        (``root`` is the adjoint[...]); for an array parameter, ``adjoint[a][i] += e`` adds into its gradient."""
        name = root.slice
        while isinstance(name, ast.Attribute):
            name = name.value
        if op not in ("add", None) or not isinstance(name, ast.Name):
            raise self.err(node, "write adjoint[x] += value or adjoint[x] = value, with x a parameter of the func "
                                 "(or a field or component of one)")
        arr = self.f.sym.get(name.id) if root.slice is name else None
        if isinstance(arr, Var) and isinstance(arr.type, T.ArrayType):  # adjoint[a][i] += e: into a's gradient
            steps = _steps_above(target, root)
            idx = [self.index_var(i, node) for i in self.subscript_indices(steps[0])] \
                if len(steps) == 1 and isinstance(steps[0], ast.Subscript) else []
            if op is None or len(idx) != arr.type.ndim:
                raise self.err(node, f"write adjoint[{name.id}][index] += value with {arr.type.ndim} index(es)")
            value = self.single(value, node)
            value = self.convert(value, arr.type.dtype, node) if value.weak else value
            if value.type is not arr.type.dtype:
                raise self.err(node, f"adjoint[{name.id}] takes {T.type_name(arr.type.dtype)}, got "
                                     f"{T.type_name(value.type)}")
            self.emit("grad_add", None, [arr, *idx, value], node, ndim=len(idx))
            return
        if "$adj:" + name.id not in self.f.sym:
            raise self.err(target, f"'{name.id}' is not a differentiable parameter of the func")
        part = _renamed(root.slice, name, "$adj:" + name.id)
        for step in reversed(_steps_above(target, root)):
            part = ast.copy_location(ast.Subscript(part, step.slice, ast.Load()) if isinstance(step, ast.Subscript)
                                     else ast.Attribute(part, step.attr, ast.Load()), step)
        value = self.single(value, node)
        self.assign(part, value if op is None else self.binop("add", self.value(part), value, node), node)

    def expr_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, "unsupported operator")
        return self.binop(op, self.value(node.left), self.value(node.right), node)

    def user_operator(self, op: str, args: list, node):
        """Warp's operator overloading: the func named like the operator (``add``, ``mul``...) that the
        kernel's code can see, when one of its definitions takes ``args``; else None (the builtin)."""
        from .kernel import Function
        fn = self.f.src.names.get(op)
        if not isinstance(fn, Function):
            return None
        if all(a.weak for a in args):
            # literals alone have no operand to adopt the type of: they are what Warp types them (int32,
            # float32, bool), so `k = 0 ... k + 1` never becomes a float func's call
            args = [Var(T.bool_ if isinstance(a.const, bool) else T.int32 if isinstance(a.const, int) else T.float32)
                    for a in args]
        return fn if fn.resolve(args, {}) is not None else None

    def binop(self, op, a: Var, b: Var, node) -> Var:
        user = self.user_operator(op, [a, b], node)
        if user is not None:
            return self.inline_func(user, [a, b], {}, node)
        if op == "pow" and a.weak and b.weak:
            return self.const(_fold_pow(a.const, b.const))
        if op == "pow" and T.is_float(a.type) and b.is_const and b.weak and float(b.const) == 2.0:
            return self.call_builtin("mul", [a, a], node)
        if op in ("div", "floordiv", "mod") and a.weak and b.weak:
            if b.const == 0:
                raise self.err(node, "division by zero in a constant expression")
            if op == "div":
                if isinstance(a.const, int) and isinstance(b.const, int):
                    return self.const(int(a.const / b.const))
                return self.const(a.const / b.const)
            if op == "floordiv":
                return self.const(a.const // b.const)
            return self.const(math.fmod(a.const, b.const) if isinstance(a.const, float) or isinstance(
                b.const, float) else int(math.fmod(a.const, b.const)))
        return self.call_builtin(op, [a, b], node)

    def expr_UnaryOp(self, node):
        v = self.value(node.operand)
        if isinstance(node.op, ast.USub):
            if v.is_const and v.type is not T.bool_:
                # a typed integer wraps at its width as at run time (-int32(-2**31) is -2**31); a literal
                # keeps its value until an operand or an annotation types it
                neg = T.wrap_int(-v.const, v.type) if T.is_int(v.type) and not v.weak else -v.const
                return Var(v.type, const=neg, weak=v.weak)
            return self.call_builtin("neg", [v], node)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            b = self.as_bool(v, node)
            if b.is_const:
                return self.const(not b.const)
            return self.call_builtin("eq", [b, self.const(False)], node)
        if isinstance(node.op, ast.Invert):
            return self.call_builtin("invert", [v], node)
        raise self.err(node, "unsupported unary operator")

    def expr_BoolOp(self, node):
        """``a and b`` / ``a or b`` evaluate ``b`` only when needed (it may index an array)."""
        is_and = isinstance(node.op, ast.And)
        result = self.as_bool(self.value(node.values[0]), node.values[0])
        for operand in node.values[1:]:
            if result.is_const:
                if result.const != is_and:
                    return result
                result = self.as_bool(self.value(operand), operand)
                continue
            key = f"$bool{id(node)}"
            self.f.sym[key] = result
            cond = result if is_and else self.call_builtin("eq", [result, self.const(False)], node)

            def rhs(operand=operand, key=key):
                self.f.sym[key] = self.as_bool(self.value(operand), operand)
            self.build_if(cond, rhs, lambda: None, node)
            result = self.f.sym.pop(key)
        return result

    def expr_Compare(self, node):
        left = self.value(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            name = _CMPOPS.get(type(op))
            if name is None:
                raise self.err(node, "only <, <=, >, >=, == and != comparisons are supported")
            right = self.value(right_node)
            c = self.call_builtin(name, list(self.compared(left, right, node)), node)
            if result is None:
                result = c
            elif result.is_const:  # a known link decides alone when false, drops out when true
                result = c if result.const else result
            elif c.is_const:
                result = result if c.const else c
            else:
                result = self.emit("and", T.bool_, [result, c], node)
            left = right
        return result

    def compared(self, a: Var, b: Var, node) -> tuple[Var, Var]:
        """The operands of a comparison as Warp compares them: an integer compared with a float becomes
        that float type (``d < radius`` with an int radius compares in float32, so 16777217 equals
        16777216.0f); anything else is compared as it is."""
        if not (isinstance(a, Var) and isinstance(b, Var) and T.is_scalar(a.type) and T.is_scalar(b.type)):
            return a, b
        if T.is_float(a.type) and T.is_int(b.type) and not b.weak:
            return a, self.cast(b, a.type, node)
        if T.is_int(a.type) and T.is_float(b.type) and not a.weak:
            return self.cast(a, b.type, node), b
        return a, b

    def expr_IfExp(self, node):
        """``a if c else b`` evaluates only the chosen side."""
        cond = self.as_bool(self.value(node.test), node.test)
        key = f"$ifexp{id(node)}"

        def side(n):
            def run():
                # value first: a nested ternary replaces self.f.sym while it is evaluated
                v = self.value(n)
                self.f.sym[key] = v
            return run
        self.build_if(cond, side(node.body), side(node.orelse), node)
        return self.f.sym.pop(key)

    def expr_Tuple(self, node):
        return tuple(self.value(e) for e in node.elts)

    # ------------------------------------------------------------------------------------------
    # array element access with gradient rules

    def store(self, arr: Var, idx, path, value: Var, node):
        parts = self.element_group(arr, path, value, node)
        if parts is not None:
            for p, v in parts:
                self.store(arr, idx, p, v, node)
            return
        self.check_local_index(arr, idx, node)
        t = arr.type.dtype
        comp_t, steps = self.resolve_path(t, path, node)
        name = self.array_name(arr)
        if T.is_struct(value.type) and value.type._has_arrays:
            raise self.err(node, f"cannot store a {value.type.__name__}, a struct holding arrays, into an element of "
                                 f"array '{name}' in a kernel: the element would refer to arrays the array does not "
                                 "keep alive; set such elements from Python (holders[i] = Holder(...))")
        self.writes.add(arr)
        if comp_t is not None and T.is_matrix(comp_t) and steps and steps[-1][0] == "row":
            raise self.err(node, "assign matrix rows of array elements one component at a time")
        value = self.convert(value, comp_t, node) if value.weak or value.type is comp_t else value
        if value.type is not comp_t:
            what = (f"Composite slot assignment expects value of type {T.type_name(comp_t)}: cannot store "
                    f"{T.type_name(value.type)} into an '{name}' element component" if steps else
                    f"cannot store {T.type_name(value.type)} into '{name}' element of type {T.type_name(comp_t)}")
            raise self.err(node, what, WarpCodegenTypeError)
        self.emit("store", None, [arr, *idx, value] + [s[1] for s in steps if s[0] == "comp"], node,
                  ndim=len(idx), path=[(s[0], s[1] if s[0] == "field" else None) for s in steps])

    def component_group(self, t, node):
        """A target naming several components of ``t`` at once (a slice ``v[1:]``, or ``.p``/``.q`` of a
        transform): (the type of that part, its flat components), else None."""
        if isinstance(node, ast.Subscript):
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if T.is_matrix(t) and len(elts) == 1 and not isinstance(elts[0], ast.Slice):
                i = self.value(elts[0])
                if i.is_const:  # a row of a matrix: m[1] = v; a runtime row stays a set_row of a local
                    i = self.wrapped_index(self.index_var(i, node), t._shape[0], t, node)
                    c = t._shape[1]
                    return T.vector(c, t._scalar), list(range(i.const * c, (i.const + 1) * c))
            return self.composite_slice(t, node)
        if isinstance(node, ast.Attribute) and getattr(t, "_kind", None) == "transform" and node.attr in ("p", "q"):
            return (T.vector(3, t._scalar), [0, 1, 2]) if node.attr == "p" else (T.quaternion(t._scalar), [3, 4, 5, 6])
        return None

    def element_group(self, arr: Var, path, value: Var, node):
        """For a write into a group of components of an array element (``a[i][1:] = v``, ``a[i].p =
        p``): the paths of the single components and the parts of ``value`` written there, else None."""
        group = self.path_group(arr.type.dtype, path, node)
        if group is None:
            return None
        out_t, flat = group
        value = self.group_value(value, out_t, node)
        return [(path[:-1] + [("flat", k)], self.emit("extract", out_t._scalar, [value, self.const(pos, T.int32)], node))
                for pos, k in enumerate(flat)]

    def atomic(self, fn, arr: Var, idx, path, value: Var, node, compare: Var | None = None):
        """``fn`` (atomic_add, ..., atomic_cas) on a component of ``arr[idx]``; returns the old value. The op's
        arguments: array, indices, value, then atomic_cas's compare, then the component indices."""
        parts = self.element_group(arr, path, value, node)
        if parts is not None:
            for p, v in parts:
                self.atomic(fn, arr, idx, p, v, node)
            return None
        t = arr.type.dtype
        comp_t, steps = self.resolve_path(t, path, node)
        self.writes.add(arr)
        operands = [value] if compare is None else [value, compare]
        for k, x in enumerate(operands):
            operands[k] = x = self.convert(x, comp_t, node) if x.weak else x
            if x.type is not comp_t:
                raise self.err(node, f"{fn}() on '{self.array_name(arr)}' needs {T.type_name(comp_t)}, got "
                                     f"{T.type_name(x.type)}")
        self.check_atomic_type(fn, comp_t, node)
        return self.emit("atomic", comp_t, [arr, *idx, *operands] + [s[1] for s in steps if s[0] == "comp"], node,
                         fn=fn, ndim=len(idx), path=[(s[0], s[1] if s[0] == "field" else None) for s in steps])

    def target_type(self, arr: Var, path, node):
        """The type of the part of an element of ``arr`` that a write target names (see array_element_target)."""
        group = self.path_group(arr.type.dtype, path, node)
        return group[0] if group is not None else self.resolve_path(arr.type.dtype, path, node)[0]

    def path_group(self, dtype, path, node):
        """The component group (see component_group) that the last step of ``path`` into ``dtype`` names, else None."""
        if not path:
            return None
        if len(path) >= 2 and path[-2][0] == path[-1][0] == "index" and len(
                self.subscript_indices(path[-2][1])) == 1 and T.is_matrix(self.resolve_path(dtype, path[:-2], node)[0]):
            return None  # m[r][c]: one element
        t, _ = self.resolve_path(dtype, path[:-1], node)
        return self.component_group(t, path[-1][1])

    @staticmethod
    def has_atomic(fn, t) -> bool:
        """Whether ``fn`` has an atomic for elements of type ``t`` on every target."""
        if T.is_struct(t):
            return fn in ("atomic_add", "atomic_sub")
        if fn in ("atomic_cas", "atomic_exch") and not T.is_scalar(t):
            return False
        return getattr(t, "_scalar", t) in _ATOMIC_SCALARS[fn]

    def check_atomic_type(self, fn, t, node):
        """Refuse element types ``fn`` has no atomic for (the scalar types of Warp's atomics)."""
        if self.has_atomic(fn, t):
            return
        if T.is_struct(t):
            raise self.err(node, f"{fn}() needs scalar, vector or matrix elements, got struct {T.type_name(t)}")
        if fn in ("atomic_cas", "atomic_exch") and not T.is_scalar(t):
            raise self.err(node, f"{fn}() needs scalar elements, got {T.type_name(t)}")
        raise self.err(node, f"{fn}() operations only work on arrays with {_ATOMIC_WORDING[fn]} as the underlying "
                             f"scalar types, but got {T.type_repr(t)} (with scalar type {T.type_repr(t._scalar)})",
                       WarpCodegenDtypeError)

    def resolve_path(self, t, path, node):
        """Walk ``.field`` / ``[i]`` / ``.x`` steps into an element type: (component type, steps)."""
        steps = []
        path = list(path)
        while path:
            kind, n = path.pop(0)
            if kind == "flat":  # one component of a group (see element_group)
                steps.append(("comp", self.const(n, T.int32)))
                t = t._scalar
            elif kind == "attr":
                if T.is_struct(t):
                    if n.attr not in t._fields:
                        raise self.err(n, f"struct {t.__name__} has no field '{n.attr}'",
                                       WarpCodegenAttributeError)
                    steps.append(("field", n.attr))
                    t = t._fields[n.attr]
                    continue
                steps.append(("comp", self.const(self.swizzle_index(t, n), T.int32)))
                t = t._scalar
            else:
                idx = self.subscript_indices(n)
                if T.is_matrix(t) and len(idx) == 1 and path and path[0][0] == "index":  # m[r][c] is m[r, c]
                    idx = idx + self.subscript_indices(path.pop(0)[1])
                if T.is_matrix(t) and len(idx) == 1:
                    raise self.err(n, "write matrix elements of array items as a[i][r, c] or a[i][r][c]")
                steps.append(("comp", self.flat_component(t, idx, n)))
                t = t._scalar
        return t, steps



_WORDS = (T.int32, T.uint32, T.int64, T.uint64)  # the integer types with atomics on every target
_ATOMIC_SCALARS = {
    "atomic_add": (*_WORDS, T.float16, T.bfloat16, T.float32, T.float64, T.bool_),
    "atomic_min": (*_WORDS, T.bfloat16, T.float32, T.float64),
    "atomic_cas": (*_WORDS, T.float32, T.float64),
    "atomic_and": _WORDS,
}
_ATOMIC_SCALARS.update(atomic_sub=_ATOMIC_SCALARS["atomic_add"], atomic_max=_ATOMIC_SCALARS["atomic_min"],
                       atomic_exch=_ATOMIC_SCALARS["atomic_cas"], atomic_or=_WORDS, atomic_xor=_WORDS)
# Warp's words for those sets (its refusal reads the same here)
_ATOMIC_WORDING = {"atomic_add": "[u]int32, [u]int64, float16, bfloat16, float32, or float64",
                   "atomic_min": "[u]int32, [u]int64, bfloat16, float32, or float64",
                   "atomic_cas": "[u]int32, [u]int64, float32, or float64", "atomic_and": "[u]int32 or [u]int64"}
_ATOMIC_WORDING.update(atomic_sub=_ATOMIC_WORDING["atomic_add"], atomic_max=_ATOMIC_WORDING["atomic_min"],
                       atomic_exch=_ATOMIC_WORDING["atomic_cas"], atomic_or=_ATOMIC_WORDING["atomic_and"],
                       atomic_xor=_ATOMIC_WORDING["atomic_and"])


def _renamed(expr, name: ast.Name, new: str):
    """A copy of the attribute chain ``expr`` whose root ``name`` reads ``new`` instead."""
    if expr is name:
        return ast.copy_location(ast.Name(new, ast.Load()), name)
    return ast.copy_location(ast.Attribute(_renamed(expr.value, name, new), expr.attr, ast.Load()), expr)


def _steps_above(target, root) -> list:
    """The subscripts of ``target`` above ``root``, outermost first."""
    out = []
    while target is not root:
        out.append(target)
        target = target.value
    return out


def _xsim_module():
    import xsim
    return xsim


def _fold_pow(a, b):
    """``a ** b`` of two literals. Integers fold as Python does; with a float, as C's pow, as Warp computes
    it at run time: NaN for a negative base and a fractional exponent (Python gives a complex number),
    +-inf for zero to a negative power (Python raises ZeroDivisionError)."""
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        return a ** b
    with np.errstate(all="ignore"):
        return float(np.power(np.float64(a), np.float64(b)))
