"""Frontend, part 2: expressions (names, attributes, subscripts, operators, short-circuit boolean
operators and ternaries) and writes into array elements, as a mixin of ``Frontend``."""

from __future__ import annotations

import ast
import builtins as _pybuiltins
import math

import numpy as np

from .. import types as T
from ..errors import WarpCodegenAttributeError, WarpCodegenIndexError, WarpCodegenKeyError
from .ir import Var
from .scope import _BINOPS, _CMPOPS, _UNSUPPORTED, Ref, _adjoint_marker, _describe, _is_attr_chain


class Expressions:
    """Expression building; relies on the emission helpers of ``Frontend``."""

    # ------------------------------------------------------------------------------------------
    # expressions

    def expr(self, node):
        kind = type(node)
        if kind in _UNSUPPORTED:
            raise self.err(node, f"{_UNSUPPORTED[kind]} are not supported in kernels")
        method = getattr(self, "expr_" + kind.__name__, None)
        if method is None:
            raise self.err(node, f"unsupported expression '{kind.__name__}' in a kernel")
        return method(node)

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
            raise self.err(node, f"{_describe(obj)} is not a value that can be used here")
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
        raise self.err(node, f"unknown name '{node.id}' (not a local, a parameter or a module global; a name "
                             "assigned only in one branch or inside a loop is not defined after it)",
                       WarpCodegenKeyError)

    def global_value(self, obj, node):
        if isinstance(obj, (bool, int, float, np.generic)) and not isinstance(obj, np.ndarray):
            return self.const(obj)
        return Ref(obj)

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        if isinstance(base, Ref):
            obj = base.obj
            if not hasattr(obj, node.attr):
                raise self.err(node, f"{_describe(obj)} has no attribute '{node.attr}'",
                               WarpCodegenAttributeError)
            return self.global_value(getattr(obj, node.attr), node)
        if isinstance(base, tuple):
            raise self.err(node, "tuples have no attributes", WarpCodegenAttributeError)
        t = base.type
        if node.attr == "dtype" and (isinstance(t, T.ArrayType) or T.is_composite(t)):
            return Ref(t.dtype if isinstance(t, T.ArrayType) else t._scalar)  # element / component type
        if isinstance(t, T.ArrayType):
            if node.attr == "shape":
                return tuple(self.emit("shape", T.int32, [base], node, dim=d) for d in range(t.ndim))
            raise self.err(node, f"arrays have no attribute '{node.attr}' in kernels (use .shape or len())",
                           WarpCodegenAttributeError)
        if T.is_struct(t):
            ft = t._fields.get(node.attr)
            if ft is None:
                raise self.err(node, f"struct {t.__name__} has no field '{node.attr}'",
                               WarpCodegenAttributeError)
            out = self.emit("field_get", ft, [base], node, field=node.attr)
            if isinstance(ft, T.ArrayType):
                out.hint = f"{self.array_name(base)}.{node.attr}"  # how reads/writes name it
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
        if isinstance(s, ast.Slice):
            raise self.err(node, "slices are not supported in kernels")
        elts = s.elts if isinstance(s, ast.Tuple) else [s]
        return [self.value(e) for e in elts]

    def index_var(self, v: Var, node) -> Var:
        if v.weak:
            v = self.convert(v, T.int32, node)
        if not T.is_int(v.type):
            raise self.err(node, f"an index must be an integer, got {T.type_name(v.type)}")
        return v

    def flat_component(self, t, idx, node) -> Var:
        if T.is_matrix(t):
            if len(idx) != 2:
                raise self.err(node, f"a matrix takes m[i, j] (or m[i] for a row), got {len(idx)} indices")
            r, c = t._shape
            i, j = (self.index_var(x, node) for x in idx)
            for v, n in ((i, r), (j, c)):
                if v.is_const and not 0 <= v.const < n:
                    raise self.err(node, f"index {v.const} out of range for {T.type_name(t)}",
                                   WarpCodegenIndexError)
            if i.is_const and j.is_const:
                return self.const(i.const * c + j.const, T.int32)
            return self.call_builtin("add", [self.call_builtin("mul", [self.cast(i, T.int32, node),
                                                                       self.const(c, T.int32)], node),
                                            self.cast(j, T.int32, node)], node)
        if not T.is_composite(t):
            raise self.err(node, f"{T.type_name(t)} cannot be indexed")
        if len(idx) != 1:
            raise self.err(node, f"{T.type_name(t)} takes one index, got {len(idx)}")
        i = self.index_var(idx[0], node)
        n = T.num_components(t)
        if i.is_const and not 0 <= i.const < n:
            raise self.err(node, f"index {i.const} out of range for {T.type_name(t)} ({n} components)",
                           WarpCodegenIndexError)
        return i

    def expr_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, tuple):
            idx = self.value(node.slice)
            if not idx.is_const:
                raise self.err(node, "a tuple can only be indexed with a constant")
            return base[idx.const]
        if isinstance(base, Ref):
            obj = base.obj
            if obj is _adjoint_marker():
                return self.adjoint_slot(node)
            raise self.err(node, f"{_describe(obj)} cannot be indexed in a kernel")
        t = base.type
        if isinstance(t, T.ArrayType):
            idx = [self.index_var(i, node) for i in self.subscript_indices(node)]
            if len(idx) != t.ndim:
                raise self.err(node, f"array '{self.array_name(base)}' has {t.ndim} dimension(s) but is "
                                     f"indexed with {len(idx)}")
            self.reads.add(self.array_name(base))
            return self.emit("load", t.dtype, [base, *idx], node)
        idx = self.subscript_indices(node)
        if T.is_matrix(t) and len(idx) == 1:
            return self.emit("row", T.vector(t._shape[1], t._scalar), [base, self.index_var(idx[0], node)], node)
        return self.emit("extract", t._scalar, [base, self.flat_component(t, idx, node)], node)

    def array_name(self, v: Var) -> str:
        return self.param_names.get(v.id, v.hint or f"%{v.id}")

    def array_element_target(self, target):
        """For a target inside an array element (``a[i]``, ``a[i].x``, ``a[i][1]``, ``a[i].f.y``)
        return (array, indices, component path); None if the target is a local."""
        path = []
        node = target
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node, ast.Subscript):
                base = self.expr(node.value) if _is_attr_chain(node.value) else None
                if isinstance(base, Var) and isinstance(base.type, T.ArrayType):
                    idx = [self.index_var(i, node) for i in self.subscript_indices(node)]
                    if len(idx) != base.type.ndim:
                        raise self.err(node, f"array '{self.array_name(base)}' has {base.type.ndim} dimension(s) "
                                             f"but is indexed with {len(idx)}")
                    return base, idx, list(reversed(path))
                path.append(("index", node))
            else:
                path.append(("attr", node))
            node = node.value
        return None

    def accumulate_adjoint(self, target, root, op, node):
        """``adjoint[x] += e``, also into a part of x (``adjoint[x.f] += e``, ``adjoint[x.v][0] += e``):
        the same update of the local ``$adj:x`` that holds x's adjoint (``root`` is the adjoint[...])."""
        name = root.slice
        while isinstance(name, ast.Attribute):
            name = name.value
        if op != "add" or not isinstance(name, ast.Name):
            raise self.err(node, "write adjoint[x] += value, with x a parameter of the func (or a field or "
                                 "component of one)")
        arr = self.f.sym.get(name.id) if root.slice is name else None
        if isinstance(arr, Var) and isinstance(arr.type, T.ArrayType):  # adjoint[a][i] += e: into a's gradient
            steps = _steps_above(target, root)
            idx = [self.index_var(i, node) for i in self.subscript_indices(steps[0])] if len(steps) == 1 else []
            if len(idx) != arr.type.ndim:
                raise self.err(node, f"write adjoint[{name.id}][index] += value with {arr.type.ndim} index(es)")
            value = self.value(node.value)
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
            part = ast.copy_location(ast.Subscript(part, step.slice, ast.Load()), step)
        self.assign(part, self.binop("add", self.value(part), self.value(node.value), node), node)

    def expr_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, "unsupported operator")
        return self.binop(op, self.value(node.left), self.value(node.right), node)

    def binop(self, op, a: Var, b: Var, node) -> Var:
        if op == "pow" and a.weak and b.weak:
            return self.const(a.const ** b.const)
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
                return Var(v.type, const=-v.const, weak=v.weak)
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
            c = self.call_builtin(name, [left, right], node)
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
        t = arr.type.dtype
        comp_t, steps = self.resolve_path(t, path, node)
        name = self.array_name(arr)
        self.writes.add(name)
        if comp_t is not None and T.is_matrix(comp_t) and steps and steps[-1][0] == "row":
            raise self.err(node, "assign matrix rows of array elements one component at a time")
        value = self.convert(value, comp_t, node) if value.weak or value.type is comp_t else value
        if value.type is not comp_t:
            raise self.err(node, f"cannot store {T.type_name(value.type)} into '{name}' element "
                                 f"{'component ' if steps else ''}of type {T.type_name(comp_t)}")
        self.emit("store", None, [arr, *idx, value] + [s[1] for s in steps if s[0] == "comp"], node,
                  ndim=len(idx), path=[(s[0], s[1] if s[0] == "field" else None) for s in steps])

    def atomic(self, fn, arr: Var, idx, path, value: Var, node):
        t = arr.type.dtype
        comp_t, steps = self.resolve_path(t, path, node)
        self.writes.add(self.array_name(arr))
        value = self.convert(value, comp_t, node) if value.weak else value
        if value.type is not comp_t:
            raise self.err(node, f"{fn}() on '{self.array_name(arr)}' needs {T.type_name(comp_t)}, got "
                                 f"{T.type_name(value.type)}")
        if fn in ("atomic_min", "atomic_max") and not T.is_scalar(comp_t) and not T.is_composite(comp_t):
            raise self.err(node, f"{fn}() needs scalar or vector elements")
        return self.emit("atomic", comp_t, [arr, *idx, value] + [s[1] for s in steps if s[0] == "comp"], node,
                         fn=fn, ndim=len(idx), path=[(s[0], s[1] if s[0] == "field" else None) for s in steps])

    def resolve_path(self, t, path, node):
        """Walk ``.field`` / ``[i]`` / ``.x`` steps into an element type: (component type, steps)."""
        steps = []
        for kind, n in path:
            if kind == "attr":
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
                if T.is_matrix(t) and len(idx) == 1:
                    raise self.err(n, "write matrix elements of array items as a[i][r, c]")
                steps.append(("comp", self.flat_component(t, idx, n)))
                t = t._scalar
        return t, steps


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
