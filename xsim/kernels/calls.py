"""Frontend, part 3: calls: builtins (with the special forms: tid, len, where, atomics,
identities), type constructors (fill, copy, keyword and positional struct forms) and casts, ``*x``
arguments, and ``@xsim.func`` calls inlined at the call site (with custom gradients from
``@xsim.func_grad``), as a mixin of ``Frontend``."""

from __future__ import annotations

import ast
import inspect
import math
import typing
from dataclasses import replace

from .. import types as T
from ..errors import (
    WarpCodegenAttributeError,
    WarpCodegenIndexError,
    WarpCodegenTypeError,
    WarpCodegenValueError,
)
from .builtins import ARG_NAMES, BUILTINS, SPECIAL_FORMS, store_to_arguments
from .builtins_random import DEFAULTS, SAMPLERS, STATEFUL
from .codegen import is_diff
from .ir import ARRAY_ACCESSES, Block, Loop, Op, Var
from .ir import walk as ir_walk
from .scope import (
    ATOMICS,
    BuiltinRef,
    GradOf,
    Ref,
    _describe,
    _false,
    _Frame,
    _resolve_annotation,
    annotations,
)


def _array_class():
    from ..array import array  # the host layer's class, named in kernels as Warp's wp.array(ptr=...)
    return array


def _zeros_function():
    from ..array import zeros  # the host layer's function, named in kernels as Warp's stack-array wp.zeros
    return zeros


MAX_LOCAL_ARRAY_BYTES = 64 * 1024  # per thread: past this, stack arrays would overflow a CUDA thread's stack


class Calls:
    """Call building; relies on the emission helpers of ``Frontend``."""

    def array_from_ptr(self, node):
        """Warp's ``array(ptr=p, shape=(n, ...), dtype=T)`` in a kernel: a view of the packed row-major
        elements at address ``p`` (a uint64, e.g. another array's ``.ptr``); ``dtype`` defaults to float32.
        Nothing checks the address: it is the caller's, as in Warp; and, as there, such an array has no
        gradient (a backward pass passes nothing through it)."""
        kw = {k.arg: k.value for k in node.keywords}
        if node.args or not {"ptr", "shape"} <= set(kw) or set(kw) - {"ptr", "shape", "dtype"}:
            raise self.err(node, "an array in a kernel is made as array(ptr=address, shape=(n, ...), dtype=T), "
                                 "all by keyword")
        ptr = self.value(kw["ptr"])
        if not T.is_int(ptr.type):
            raise self.err(kw["ptr"], f"array(ptr=...) takes an address (uint64), got {T.type_name(ptr.type)}",
                           WarpCodegenTypeError)
        ptr = self.cast(ptr, T.uint64, node)
        shape = kw["shape"]
        dims = self.expr(shape) if not isinstance(shape, ast.Tuple) else [self.value(e) for e in shape.elts]
        dims = [self.index_var(d, shape) for d in (dims if isinstance(dims, (tuple, list)) else [dims])]
        if not 1 <= len(dims) <= 4:
            raise self.err(shape, f"array(ptr=...) takes 1 to 4 dims, got {len(dims)}")
        dtype = T.float32
        if "dtype" in kw:
            ref = self.expr(kw["dtype"])
            dtype = T.resolve(ref.obj) if isinstance(ref, Ref) else None
            if dtype is None or not T.is_value_type(dtype):
                raise self.err(kw["dtype"], "array(ptr=...): dtype must be a type (float32, vec3, a struct...)",
                               WarpCodegenTypeError)
        return self.emit("array_from_ptr", T.ArrayType(dtype, len(dims)), [ptr, *dims], node)

    def local_array(self, node):
        """Warp's ``zeros(shape=N, dtype=T)`` in a kernel or func: a zeroed per-thread array of a shape known at
        compile time (an int or a tuple of 1 to 4), on the thread's stack. It is an array like any other
        (indexing, views, len/shape, passed to funcs, which see their writes); it has no gradient buffer, so a
        kernel using one has no adjoint (``module.adjoint_refusal`` says where)."""
        kw = {k.arg: k.value for k in node.keywords}
        given = dict(zip(("shape", "dtype"), node.args))
        if len(node.args) > 2 or set(kw) - {"shape", "dtype"} or set(given) & set(kw):
            raise self.err(node, "zeros() in a kernel takes shape and dtype: zeros(shape=N, dtype=T)")
        given.update(kw)
        if set(given) != {"shape", "dtype"}:
            raise self.err(node, "zeros() in a kernel needs both shape and dtype: zeros(shape=N, dtype=T)")
        shape_node = given["shape"]
        shape = self.constant_ints(shape_node, "the `shape` argument must be specified as a constant when "
                                               "zero-initializing an array")
        if not 1 <= len(shape) <= 4 or min(shape) < 1:
            raise self.err(shape_node, f"zeros() in a kernel takes 1 to 4 dimensions of at least 1, got "
                                       f"shape {tuple(shape)}", WarpCodegenValueError)
        ref = self.expr(given["dtype"])
        dtype = T.resolve(ref.obj) if isinstance(ref, Ref) else None
        if dtype is None or not T.is_value_type(dtype):
            raise self.err(given["dtype"], "zeros(): dtype must be a type (float32, vec3, a struct...)",
                           WarpCodegenTypeError)
        np_dtype = getattr(dtype, "_np", None)  # None: a struct holding arrays (an 80-byte view each)
        elem = np_dtype.itemsize * math.prod(getattr(dtype, "_shape", None) or (1,)) if np_dtype is not None \
            else 80 * len(dtype._fields)
        size = math.prod(shape) * elem
        if size > MAX_LOCAL_ARRAY_BYTES:
            raise self.err(node, f"zeros(shape={tuple(shape)}) of {T.type_name(dtype)} takes {size} bytes per "
                                 f"thread, over the {MAX_LOCAL_ARRAY_BYTES} a stack array may take")
        out = self.emit("local_array", T.ArrayType(dtype, len(shape)), [], node, shape=tuple(shape))
        self.local_shapes[out.id] = tuple(shape)
        return out

    def constant_ints(self, node, message: str) -> tuple[int, ...]:
        """The ints of ``node``, an int or a tuple of ints known at compile time (literals, module constants,
        static values), as a tuple; ``message`` is the error for anything else."""
        if isinstance(node, (ast.Tuple, ast.List)):
            values = [self.expr(part) for part in node.elts]
        else:
            value = self.expr(node)  # one int, or a tuple constant (``shape=TILE_SHAPE``)
            values = list(value.obj) if isinstance(value, Ref) and isinstance(value.obj, tuple) else [value]
        out = []
        for d in values:
            if isinstance(d, (Ref, Var)):
                d = d.obj if isinstance(d, Ref) else d.const if d.is_const else None
            if isinstance(d, bool) or not hasattr(d, "__index__"):
                raise self.err(node, message)
            out.append(d.__index__())
        return tuple(out)

    def check_local_index(self, arr: Var, idx: list[Var], node):
        """A constant index out of a stack array's (or its view's) compile-time shape is an error here."""
        shape = self.local_shapes.get(arr.id)
        if shape is None:
            return
        for d, (i, n) in enumerate(zip(idx, shape)):
            if i.is_const and not 0 <= i.const < n:
                raise self.err(node, f"index {i.const} out of range for dimension {d} of the stack array "
                                     f"'{self.array_name(arr)}' of shape {shape}", WarpCodegenIndexError)

    # ------------------------------------------------------------------------------------------
    # calls

    def expr_Call(self, node):
        static = self.static_call(node)
        if static is not None:
            return static
        node.func._xs_callee = True  # a missing name there is a missing function
        # a code transformer may bind the callee to a func itself (Warp's ``warp_func`` node attribute)
        fn = Ref(node.func.warp_func) if hasattr(node.func, "warp_func") else self.expr(node.func)
        if not isinstance(fn, Ref):
            raise self.err(node, "only funcs, builtins and types can be called in kernels")
        obj = fn.obj
        from .kernel import Function, Kernel, NativeFunction  # the decorators' objects
        if isinstance(obj, Kernel):
            raise self.err(node, f"cannot call the kernel '{obj.key}' from a kernel; make it an @xsim.func")
        if isinstance(obj, Function):
            return self.call_func(obj, node)
        if isinstance(obj, GradOf):
            return self.call_grad_of(obj, node)
        if isinstance(obj, NativeFunction):
            return self.call_native(obj, node)
        if isinstance(obj, BuiltinRef):
            return self.call_named_builtin(obj.name, node)
        if isinstance(obj, type) and getattr(obj, "_kind", None) == "transform" and node.keywords:
            return self.transformation_value(node, obj)
        if isinstance(obj, type) and (T.is_value_type(obj)):
            return self.construct(obj, node)
        if obj is T.vector or obj is T.matrix:
            return self.generic_composite(obj, node)
        if obj is _array_class():
            return self.array_from_ptr(node)
        if obj is _zeros_function():
            return self.local_array(node)
        if obj is T.transformation:
            return self.transformation_value(node)
        if obj is T.quaternion:
            return self.quaternion_value(node)
        if obj in (float, int, bool):
            args = self.plain_args(node)
            if len(args) != 1:
                raise self.err(node, f"{obj.__name__}() takes one argument")
            return self.cast(args[0], T.resolve(obj), node)
        if obj is type:  # type(x): the type of a value, e.g. to make a literal of a generic's type
            args = self.plain_args(node)
            if len(args) != 1:
                raise self.err(node, "type() takes one argument")
            return Ref(args[0].type)
        if obj in (min, max, abs, len, round, pow):
            return self.call_named_builtin(obj.__name__, node)
        if obj is range:
            raise self.err(node, "range() can only be used in a for loop")
        if obj is print:
            raise self.err(node, "print() is not supported in kernels; write the values to an output array and "
                                 "print them on the host")
        if callable(obj):
            raise self.err(node, f"cannot call the Python function '{getattr(obj, '__name__', obj)}' in a kernel; "
                                 "decorate it with @xsim.func or use a builtin")
        raise self.err(node, f"{_describe(obj)} is not callable")

    def plain_args(self, node) -> list[Var]:
        if node.keywords:
            raise self.err(node, "keyword arguments are not supported here")
        return self.arg_values(node)

    def arg_values(self, node, tuples: bool = False) -> list:
        """The positional arguments of a call, each ``*x`` spread into its parts; ``tuples`` lets a
        tuple through as one argument (funcs take them)."""
        out = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                out += self.starred(a)
            elif tuples:
                v = self.expr(a)
                out.append(v if isinstance(v, tuple) else self.single(v, a))
            else:
                out.append(self.value(a))
        return out

    def starred(self, node) -> list[Var]:
        """``*x`` in a call, as in Warp: the items of a tuple, the components of a vector, quat or
        transform (also of a slice of one), the rows of a matrix, or the elements ``*a[i:j]`` of a 1-d
        array with constant, non-negative bounds."""
        inner = node.value
        if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Slice):
            arr = self.expr(inner.value)
            if isinstance(arr, Var) and isinstance(arr.type, T.ArrayType):
                return self.starred_array(arr, inner)
        v = self.expr(inner)
        if isinstance(v, tuple):
            return [self.single(x, node) for x in v]
        v = self.single(v, node)
        t = v.type
        if T.is_matrix(t):
            return [self.emit("row", T.vector(t._shape[1], t._scalar), [v, self.const(i, T.int32)], node)
                    for i in range(t._shape[0])]
        if T.is_composite(t):
            return [self.emit("extract", t._scalar, [v, self.const(i, T.int32)], node) for i in range(t._shape[0])]
        if isinstance(t, T.ArrayType):
            raise self.err(node, "Starred expressions apply to arrays only if they are sliced with bounds known at "
                                 "compile-time, e.g. *a[0:3]", WarpCodegenTypeError)
        raise self.err(node, "Starred expressions are only supported for tuples, vectors, quaternions, transforms, "
                             f"matrices and sliced 1-d arrays, got {T.type_name(t)}", WarpCodegenTypeError)

    def starred_array(self, arr: Var, node) -> list[Var]:
        sl = node.slice
        if arr.type.ndim != 1:
            raise self.err(node, f"*array[i:j] needs a 1-d array, got {arr.type.ndim} dimensions",
                           WarpCodegenValueError)
        if sl.upper is None:
            raise self.err(node, "*array[i:j] requires explicit upper bound (the length of an array is not known "
                                 "when the kernel compiles)", WarpCodegenValueError)
        lo, hi, step = (default if x is None else self.const_int(x)
                        for x, default in ((sl.lower, 0), (sl.upper, 0), (sl.step, 1)))
        if lo < 0 or hi < 0:
            raise self.err(node, "*array[i:j] slice bounds cannot be negative for arrays", WarpCodegenValueError)
        if step <= 0:
            raise self.err(node, "*array[i:j:k] slice step cannot be negative (or zero) for arrays",
                           WarpCodegenValueError)
        self.reads.add(arr)
        return [self.emit("load", arr.type.dtype, [arr, self.const(k, T.int32)], node) for k in range(lo, hi, step)]

    def call_named_builtin(self, name, node):
        special = getattr(self, "builtin_" + name, None)
        if special is not None:
            return special(node)
        if name in ATOMICS:
            return self.atomic_call(name, node)
        if name in SPECIAL_FORMS:
            return SPECIAL_FORMS[name](self, node)
        if name in STATEFUL:
            return self.call_stateful(name, node)
        if name not in BUILTINS:
            raise self.err(node, f"'{name}' is not a kernel builtin")
        return self.call_builtin(name, self.builtin_args(name, node), node)

    def builtin_args(self, name, node) -> list[Var]:
        """The arguments of a builtin call in parameter order, keywords placed by Warp's parameter names."""
        args = self.arg_values(node)
        if not node.keywords:
            return args
        names = ARG_NAMES.get(name)
        if names is None:
            raise self.err(node, f"{name}() takes positional arguments only")
        slots = self.place_keywords(node, name, names, dict(zip(names, args)), len(names), self.value)
        return [slots[n] for n in names]

    def place_keywords(self, node, name: str, names, slots: dict, required: int, convert) -> dict:
        """``slots`` (parameter name -> positional argument) with the call's keywords added, each as ``convert`` of
        its node, by Warp's parameter ``names``; the first ``required`` of them must be given."""
        for kw in node.keywords:
            if kw.arg not in names:
                raise self.err(kw, f"{name}() has no parameter '{kw.arg}' (it takes {', '.join(names)})",
                               WarpCodegenTypeError)
            if kw.arg in slots:
                raise self.err(kw, f"{name}() got parameter '{kw.arg}' twice", WarpCodegenTypeError)
            slots[kw.arg] = convert(kw.value)
        missing = [n for n in names[:required] if n not in slots]
        if missing:
            raise self.err(node, f"{name}() is missing the argument(s) {', '.join(missing)}", WarpCodegenTypeError)
        return slots

    def call_stateful(self, name, node):
        """A builtin taking a uint32 random state first (``randf(state, ...)``, ``noise(state, x)``).
        A sampler also gives the advanced state, and the name ``state`` (when the state is a name) is
        rebound to it, so later draws, branches and loops see it as Warp's ``uint32&`` does."""
        args = self.plain_args(node)
        if not args or args[0].type is not T.uint32:
            raise self.err(node, f"{name}() takes a uint32 random state (from rand_init) as its first argument",
                           WarpCodegenTypeError)
        overload = None
        for o in STATEFUL[name]:
            full = args + [self.const(d) for d in DEFAULTS[id(o)][len(args) - len(o.params):]] \
                if len(o.params) - len(DEFAULTS[id(o)]) <= len(args) < len(o.params) else args
            if len(o.params) == len(full) and all(a.type is p or a.weak for a, p in zip(full, o.params)):
                overload, args = o, [self.convert(a, p, node) for a, p in zip(full, o.params)]
                break
        if overload is None:
            given = ", ".join(T.type_name(a.type) for a in args)
            raise self.err(node, f"no overload of '{name}' takes ({given}); expected one of: "
                                 f"{BUILTINS[name].signatures()}", WarpCodegenTypeError)
        if name not in SAMPLERS:
            return self.emit("call", overload.returns, args, node, overload=overload)
        value = self.emit("call", overload.returns, args, node, overload=replace(overload, native="rv_" + name))
        state = self.emit("call", T.uint32, args, node, overload=replace(overload, native="rs_" + name))
        if isinstance(node.args[0], ast.Name) and node.args[0].id in self.f.sym:
            self.f.sym[node.args[0].id] = state
        return value

    def builtin_tid(self, node):
        if node.args or node.keywords:
            raise self.err(node, "tid() takes no arguments")
        parent = getattr(node, "_xs_targets", 1)
        n = parent
        if self.tid_dims and self.tid_dims != n:
            raise self.err(node, f"tid() is unpacked into {n} indices here but {self.tid_dims} elsewhere")
        self.tid_dims = n
        vals = tuple(self.emit("tid", T.int32, [], node, dim=d, ndim=n) for d in range(n))
        return vals[0] if n == 1 else vals

    def builtin_len(self, node):
        args = self.plain_args(node)
        if len(args) != 1:
            raise self.err(node, "len() takes one argument")
        a = args[0]
        if isinstance(a.type, T.ArrayType):
            return self.emit("shape", T.int32, [a], node, dim=0)
        if T.is_composite(a.type):
            return self.const(a.type._shape[0], T.int32)
        raise self.err(node, f"len() of {T.type_name(a.type)}")

    def builtin_where(self, node):
        args = self.plain_args(node)
        if len(args) != 3:
            raise self.err(node, "where(cond, a, b) takes three arguments")
        cond = self.as_bool(args[0], node)
        a, b = self.unify_weak(args[1], args[2], node)
        if a.type is not b.type:
            raise self.err(node, f"where() branches differ: {T.type_name(a.type)} and {T.type_name(b.type)}")
        return self.emit("select", a.type, [cond, a, b], node)

    def builtin_select(self, node):
        """Warp's older ``select(cond, value_if_false, value_if_true)``."""
        args = self.plain_args(node)
        if len(args) != 3:
            raise self.err(node, "select(cond, if_false, if_true) takes three arguments")
        cond = self.as_bool(args[0], node)
        a, b = self.unify_weak(args[2], args[1], node)
        if a.type is not b.type:
            raise self.err(node, f"select() branches differ: {T.type_name(a.type)} and {T.type_name(b.type)}")
        return self.emit("select", a.type, [cond, a, b], node)

    def atomic_call(self, name, node):
        """``name(array, index..., value)``; ``atomic_cas(array, index..., compare, value)``."""
        args = [self.expr(a) for a in node.args]
        values = 2 if name == "atomic_cas" else 1
        usage = "compare, value" if values == 2 else "value"
        if node.keywords or len(args) < 2 + values:
            raise self.err(node, f"{name}(array, index..., {usage}) takes an array, its indices and a {usage}")
        arr = args[0]
        if not (isinstance(arr, Var) and isinstance(arr.type, T.ArrayType)):
            raise self.err(node, f"{name}() needs an array as its first argument")
        idx = [self.index_var(self.single(i, node), node) for i in args[1:-values]]
        if len(idx) != arr.type.ndim:
            raise self.err(node, f"{name}() on a {arr.type.ndim}-d array needs {arr.type.ndim} indices")
        operands = [self.single(a, node) for a in args[-values:]]
        return self.atomic(name, arr, idx, [], operands[-1], node, compare=operands[0] if values == 2 else None)

    def builtin_identity(self, node):
        n, dtype = self.static_kwargs(node, ("n", "dtype"), {"dtype": T.float32})
        return self.emit("identity", T.matrix((n, n), T.resolve(dtype)), [], node)

    def builtin_quat_identity(self, node):
        (dtype,) = self.static_kwargs(node, ("dtype",), {"dtype": T.float32})
        t = T.quaternion(T.resolve(dtype))
        return self.emit("construct", t, [self.const(0, t._scalar)] * 3 + [self.const(1, t._scalar)], node)

    def builtin_transform_identity(self, node):
        (dtype,) = self.static_kwargs(node, ("dtype",), {"dtype": T.float32})
        t = T.transformation(T.resolve(dtype))
        z, one = self.const(0, t._scalar), self.const(1, t._scalar)
        return self.emit("construct", t, [z] * 6 + [one], node)

    def builtin_transform(self, node):
        return self.construct(T.transform, node)

    def builtin_matrix_from_rows(self, node):
        return self._matrix_from(node, rows=True)

    def builtin_matrix_from_cols(self, node):
        return self._matrix_from(node, rows=False)

    def _matrix_from(self, node, rows: bool):
        vecs = self.plain_args(node)
        if not vecs or any(not T.is_vector(v.type) or v.type is not vecs[0].type for v in vecs):
            raise self.err(node, "expects vectors of one type")
        n, vt = len(vecs), vecs[0].type
        shape = (n, vt._length) if rows else (vt._length, n)
        t = T.matrix(shape, vt._scalar)
        comps = []
        for i in range(shape[0]):
            for j in range(shape[1]):
                v, k = (vecs[i], j) if rows else (vecs[j], i)
                comps.append(self.emit("extract", vt._scalar, [v, self.const(k, T.int32)], node))
        return self.emit("construct", t, comps, node)

    def static_kwargs(self, node, names, defaults):
        vals = dict(defaults)
        for name, a in zip(names, node.args):
            vals[name] = self.eval_static(a)
        for kw in node.keywords:
            if kw.arg not in names:
                raise self.err(kw, f"unexpected keyword '{kw.arg}'")
            vals[kw.arg] = self.eval_static(kw.value)
        missing = [n for n in names if n not in vals]
        if missing:
            raise self.err(node, f"missing argument(s): {', '.join(missing)}")
        return [vals[n] for n in names]

    def eval_static(self, node):
        v = self.expr(node)
        if isinstance(v, Ref):
            return v.obj
        if isinstance(v, Var) and v.is_const:
            return v.const
        if isinstance(v, tuple) and all(isinstance(x, Var) and x.is_const for x in v):
            return tuple(x.const for x in v)  # e.g. shape=(3, 3)
        raise self.err(node, "expected a compile-time constant")

    def generic_composite(self, make, node):
        """Warp's ``vector(a, b, c)``, ``vector(s, length=3)``, ``vector(length=3, dtype=float64)``,
        ``matrix(a, b, c, d, shape=(2, 2))``, ``matrix(shape=(3, 3), dtype=float64)``: the type
        comes from the keywords, else from the components (float32 for bare literals)."""
        size_kw = "length" if make is T.vector else "shape"
        kw = {}
        for k in node.keywords:
            if k.arg not in (size_kw, "dtype"):
                raise self.err(k, f"{make.__name__}() takes the keywords {size_kw}= and dtype=, not '{k.arg}'")
            kw[k.arg] = self.eval_static(k.value)
        args = self.arg_values(node)
        if size_kw not in kw:
            if len(args) == 1 and getattr(args[0].type, "_kind", None) == ("vector" if make is T.vector else "matrix"):
                kw[size_kw] = args[0].type._shape[0] if make is T.vector else args[0].type._shape  # a copy
            elif make is T.matrix:
                raise self.err(node, "matrix() needs shape=(rows, cols) unless it is given a matrix")
            elif not args:
                raise self.err(node, "vector(): the `length` argument must be specified when zero-initializing a "
                                     "vector")
            elif len(args) < 2:
                raise self.err(node, "vector() needs length= unless it is given its components or a vector")
            else:
                kw["length"] = len(args)
        dtype = kw.get("dtype")
        if dtype is None:
            strong = next((a.type for a in args if not a.weak), None)
            dtype = getattr(strong, "_scalar", strong) or T.float32
            if len(args) > 1 and _mixed_types(args):
                given = ", ".join(T.type_name(a.type) for a in args)
                raise self.err(node, f"{make.__name__}({given}) without dtype=: all values given when constructing "
                                     f"a {make.__name__} must have the same type", WarpCodegenTypeError)
        try:
            t = make(kw[size_kw], dtype)
        except (TypeError, ValueError) as e:
            raise self.err(node, f"{make.__name__}(): {e}") from None
        return self.construct(t, node, args)

    def transformation_value(self, node, t=None):
        """Warp's ``transformation(p, q, dtype=...)`` (also by keyword, or seven components) in a kernel, and
        a transform type's ``transform(p=..., q=...)`` (``t``): the scalar type is ``t``'s, else ``dtype``, else
        that of the arguments; a part given by keyword alone leaves the other zero (p) or the identity (q)."""
        kw = {k.arg: k for k in node.keywords}
        allowed = ("p", "q") if t is not None else ("p", "q", "dtype")
        bad = set(kw) - set(allowed)
        if bad:
            raise self.err(kw[bad.pop()], f"{'transformation' if t is None else T.type_name(t)}() takes the "
                                          f"keywords {', '.join(k + '=' for k in allowed)}", WarpCodegenTypeError)
        args = self.arg_values(node)
        parts = {k: self.value(kw[k].value) for k in ("p", "q") if k in kw}
        clash = [k for k in parts if len(args) > 2 or k in ("p", "q")[:len(args)]]
        if clash:
            raise self.err(node, f"multiple values for argument '{clash[0]}'", WarpCodegenTypeError)
        given = args + list(parts.values())
        if not given:
            raise self.err(node, "transformation() in a kernel needs p and q (or use transform_identity())")
        t = t or T.transformation(self.dtype_of(kw.get("dtype"), given))
        if parts:
            s = t._scalar
            zero, one = self.const(0.0, s), self.const(1.0, s)
            p = args[0] if args else parts.get("p") or self.emit("construct", T.vector(3, s), [zero] * 3, node)
            q = parts.get("q") or self.emit("construct", T.quaternion(s), [zero, zero, zero, one], node)
            given = [p, q]
        return self.construct(t, node, given)

    def quaternion_value(self, node):
        """Warp's ``quaternion(x, y, z, w)``, ``quaternion(ijk, real)``, ``quaternion(q, dtype=float16)`` (a
        cast) and ``quaternion(dtype=...)`` (zero) in a kernel."""
        kw = {k.arg: k for k in node.keywords}
        if set(kw) - {"dtype"}:
            raise self.err(node, "quaternion() takes only the keyword dtype=", WarpCodegenTypeError)
        args = self.arg_values(node)
        return self.construct(T.quaternion(self.dtype_of(kw.get("dtype"), args)), node, args)

    def dtype_of(self, dtype_kw, args) -> type:
        """The scalar type of a generic constructor: its ``dtype=`` keyword (an ``ast.keyword`` or None),
        else that of its first typed argument, else float32 (bare literals)."""
        if dtype_kw is not None:
            return T.resolve(self.eval_static(dtype_kw.value))
        strong = next((a.type for a in args if not a.weak), T.float32)
        return getattr(strong, "_scalar", strong)

    def construct(self, t, node, args=None):
        """``vec3(x, y, z)``, ``vec3(s)``, ``vec3()``, ``vec3d(v)``, ``mat22(a, b, c, d)``,
        ``transform(p, q)``, ``MyStruct()``, and scalar casts like ``float64(x)``; ``args`` when
        the caller has already evaluated them."""
        if T.is_struct(t):
            return self.construct_struct(t, node)
        args = self.plain_args(node) if args is None else args
        if T.is_scalar(t):
            if len(args) != 1:
                raise self.err(node, f"{T.type_name(t)}() takes one argument")
            return self.cast(args[0], t, node)
        n = T.num_components(t)
        s = t._scalar
        if not args:
            return self.emit("construct", t, [], node)
        if t._kind == "transform" and len(args) == 2 and T.is_composite(args[0].type):
            p = self.convert(args[0], T.vector(3, s), node) if args[0].weak else args[0]
            q = args[1]
            if p.type is not T.vector(3, s) or q.type is not T.quaternion(s):
                raise self.err(node, f"{T.type_name(t)}(p, q) needs a {T.type_name(T.vector(3, s))} and a "
                                     f"{T.type_name(T.quaternion(s))}")
            comps = [self.emit("extract", s, [p, self.const(i, T.int32)], node) for i in range(3)]
            comps += [self.emit("extract", s, [q, self.const(i, T.int32)], node) for i in range(4)]
            return self.emit("construct", t, comps, node)
        if t._kind == "vector" and n == 6 and len(args) == 2 and all(a.type is T.vector(3, s) for a in args):
            # spatial_vector(w, v): the angular and the linear half
            return self.emit("construct", t, [self.emit("extract", s, [a, self.const(i, T.int32)], node)
                                              for a in args for i in range(3)], node)
        if len(args) == 1 and T.is_composite(args[0].type):
            a = args[0]
            if t._kind == "transform" and a.type is not t:  # Warp's: vectors cast, transforms do not
                raise self.err(node, f"copy constructing a transform requires matching source and target dtypes, "
                                     f"got `{T.type_name(a.type._scalar)}` and `{T.type_name(s)}`",
                               WarpCodegenTypeError)
            if a.type._shape != t._shape:
                # Warp's wording, which names the lengths the other way round
                what = (f": incompatible vector of length {t._shape[0]} given when copy constructing a vector of "
                        f"length {a.type._shape[0]}") if t._kind == a.type._kind == "vector" else ""
                raise self.err(node, f"cannot build {T.type_name(t)} from {T.type_name(a.type)}{what}")
            return a if a.type is t else self.emit("cast", t, [a], node)
        if len(args) == 1 and t._kind in ("vector", "matrix", "transform"):  # filled with one value
            return self.emit("construct", t, [self.convert_or_cast(args[0], s, node, t)] * n, node)
        if t._kind == "quat" and len(args) == 2 and T.is_vector(args[0].type):  # quat(ijk, real)
            ijk = args[0]
            if ijk.type is not T.vector(3, s):
                raise self.err(node, f"{T.type_name(t)}(ijk, real) needs a {T.type_name(T.vector(3, s))}, got "
                                     f"{T.type_name(ijk.type)}", WarpCodegenTypeError)
            comps = [self.emit("extract", s, [ijk, self.const(i, T.int32)], node) for i in range(3)]
            return self.emit("construct", t, comps + [self.convert_or_cast(args[1], s, node, t)], node)
        if T.is_matrix(t) and len(args) == t._shape[0] and all(T.is_vector(a.type) for a in args):
            raise self.err(node, f"build a matrix from vectors with matrix_from_rows(...) or "
                                 f"matrix_from_cols(...), or pass {n} scalars to {T.type_name(t)}()")
        if len(args) != n:
            what = {"vector": f": incompatible number of values given ({len(args)}) when constructing a vector of "
                              f"length {n}",
                    "transform": f": incompatible number of values given ({len(args)}) when constructing a "
                                 f"transform; expected 0, 1, or 7"}.get(t._kind, "")
            raise self.err(node, f"{T.type_name(t)}() takes {n} components (or none), got {len(args)}{what}")
        return self.emit("construct", t, [self.convert_or_cast(a, s, node, t) for a in args], node)

    def construct_struct(self, t, node) -> Var:
        """``S()`` (zeroed), ``S(a, b)`` (fields in declaration order), ``S(b=..., a=...)`` or both; fields
        not given are zero."""
        names = list(t._fields)
        args = self.arg_values(node)
        if len(args) > len(names):
            raise self.err(node, f"struct {t.__name__} has {len(names)} field(s), got {len(args)} values",
                           WarpCodegenTypeError)
        given = list(zip(names, args, [node] * len(args)))
        for kw in node.keywords:
            if kw.arg not in t._fields:
                raise self.err(kw, f"struct {t.__name__} has no field '{kw.arg}'", WarpCodegenAttributeError)
            if any(kw.arg == g[0] for g in given):
                raise self.err(kw, f"struct field '{kw.arg}' is given twice", WarpCodegenTypeError)
            given.append((kw.arg, self.value(kw.value), kw))
        v = self.emit("construct", t, [], node)
        for name, val, where in given:
            ft = t._fields[name]
            if isinstance(ft, T.ArrayType):
                if val.type != ft:
                    raise self.err(where, f"struct field '{name}' is {T.type_name(ft)}, got {T.type_name(val.type)}",
                                   WarpCodegenTypeError)
            else:
                val = self.convert(val, ft, where)
            v = self.set_field(v, name, val, node)
        return v

    def convert_or_cast(self, v, s, node, t=None):
        """A component of a constructor (of type ``t``) as the scalar type ``s``: a literal converts (an integer
        wraps into an integer type, as Warp's constructors do: ``vec3ub(-1)``), any other value must be of type
        ``s``."""
        if v.type is s:
            return v
        if v.weak and T.is_int(s) and isinstance(v.const, int):
            return self.const(T.wrap_int(v.const, s), s, node)
        if v.weak:
            return self.convert(v, s, node)
        what = {"vector": "vector", "matrix": "matrix", "quat": "quaternion", "transform": "transformation"}.get(
            getattr(t, "_kind", None), "value")
        raise self.err(node, f"component type mismatch: got {T.type_name(v.type)}; all values used to initialize "
                             f"this {what} are expected to be of the type `{T.type_name(s)}`", WarpCodegenTypeError)

    # ------------------------------------------------------------------------------------------
    # funcs: inlined at the call site

    def call_func(self, func, node):
        n_in = func.outputs_after
        if n_in is not None and len(node.args) > n_in and not node.keywords:
            # Warp's output-argument form, ``quat_to_axis_angle(q, axis, angle)``: the trailing arguments
            # are local variables that receive the parts of the result
            result = self.inline_func(func, [self.value(a) for a in node.args[:n_in]], {}, node)
            parts = result if isinstance(result, tuple) else (result,)
            if len(node.args) - n_in != len(parts):
                raise self.err(node, f"{func.key}() with output arguments takes {n_in} input(s) and "
                                     f"{len(parts)} output variable(s), got {len(node.args)} arguments")
            store_to_arguments(self, node, node.args[n_in:], list(parts))
            return _false()
        args = self.arg_values(node, tuples=True)
        kw = {k.arg: self.value(k.value) for k in node.keywords}
        return self.inline_func(func, args, kw, node)

    def inline_func(self, func, args: list, kw: dict, node):
        """The func ``func`` inlined here on the values ``args`` and ``kw``: its result."""
        overload = func.resolve(args, kw)
        if overload is None:
            given = ", ".join(T.type_name(a.type) if isinstance(a, Var) else "tuple" for a in args)
            raise self.err(node, f"no overload of func '{func.key}' takes ({given}); expected "
                                 f"{func.signatures()}", WarpCodegenTypeError)
        if self.inline_depth > 32:
            raise self.err(node, f"func '{func.key}' calls itself too deeply (recursion is not supported)")
        src = overload.source()
        sig = inspect.signature(overload.pyfunc)
        try:
            bound = sig.bind(*args, **kw)
        except TypeError as e:
            raise self.err(node, f"func '{func.key}': {e}") from None
        bound.apply_defaults()
        frame = _Frame(src, is_kernel=False)
        ann = annotations(overload.pyfunc)
        for name, v in bound.arguments.items():
            if not isinstance(v, Var):
                v = self.single(Ref(v), node) if not isinstance(v, tuple) else v
            t = _resolve_annotation(ann.get(name)) if name in ann else None
            if t is not None and isinstance(v, Var) and not isinstance(t, T.ArrayType):
                v = self.typed(v, t, node) if v.weak else v
            frame.sym[name] = v
        frame.sym["$ret"] = _false()
        rt = ann.get("return")
        if typing.get_origin(rt) is tuple:  # -> tuple[int, vec3]
            rt = typing.get_args(rt)
        if rt is not None:
            frame.ret_type = _resolve_annotation(rt) if not isinstance(rt, tuple) else tuple(
                _resolve_annotation(x) for x in rt)
            frame.ret_ann = ann["return"]
        if not self.grad_bodies and (overload.custom_grad is not None or overload.replay is not None
                                     or not overload.differentiable):
            return self.call_custom_grad(overload, frame, node)
        self.frames.append(frame)
        self.inline_depth += 1
        try:
            self.stmts(src.tree.body)
        finally:
            self.inline_depth -= 1
            self.frames.pop()
        result = frame.sym.get("$retval")
        open_end = _falls_through(src.tree.body) if rt is not None or result is not None else None
        if open_end is not None:
            raise src.error(open_end, f"func '{func.key}' can reach its end without returning a value (it "
                                  f"{'declares a return type' if rt is not None else 'returns a value elsewhere'}); "
                                  f"every path must end in a return")
        if result is None:
            return Var(T.bool_, const=False)
        return result

    def builtin_grad(self, node):
        """``grad(f)``: the derivative of the func or math builtin ``f``, called like it (Warp's ``wp.grad``)."""
        from .kernel import Function
        if len(node.args) != 1 or node.keywords:
            raise self.err(node, "grad() takes one func")
        f = self.expr(node.args[0])
        if not (isinstance(f, Ref) and (isinstance(f.obj, Function) or isinstance(f.obj, BuiltinRef)
                                        and f.obj.name in BUILTINS)):
            raise self.err(node, "grad() takes an @xsim.func or a math builtin (sqrt, atan2...)",
                           WarpCodegenTypeError)
        return Ref(GradOf(f.obj, ast.unparse(node)))

    def call_grad_of(self, g: GradOf, node):
        """``grad(f)(x, y...)``: the adjoints of ``f``'s parameters at these arguments for a unit adjoint
        of its (float) result, one value per parameter (a tuple for several), computed in the forward code
        by the func's reverse pass."""
        if self.options.get("enable_backward", True) and not self.grad_bodies:
            raise self.err(node, f"{g.text} in a kernel needs enable_backward=False on the kernel, or a func_grad "
                                 "body (the derivative of a derivative is not generated)")
        args = self.plain_args(node)
        params = []
        for a in args:
            a = self.typed(a, T.float32, node) if a.weak else a
            if not is_diff(a.type) or T.is_struct(a.type):
                raise self.err(node, f"{g.text} differentiates float (scalar, vector, matrix...) parameters, got "
                                     f"{T.type_name(a.type)}", WarpCodegenTypeError)
            params.append(Var(a.type, hint="grad_arg"))
        outer, body = self.block, Block()
        self.block = body
        try:
            result = (self.call_builtin(g.func.name, list(params), node) if isinstance(g.func, BuiltinRef)
                      else self.inline_func(g.func, params, {}, node))
        finally:
            self.block = outer
        if not (isinstance(result, Var) and T.is_float(result.type)):
            raise self.err(node, f"{g.text} needs a func returning one float scalar", WarpCodegenTypeError)
        for s in ir_walk(body):
            if isinstance(s, Loop) or isinstance(s, Op) and s.kind in (
                    "grad_add", "subarray", "custom", *ARRAY_ACCESSES):
                raise self.err(node, f"{g.text}: xsim differentiates funcs of plain values here (no loops, array "
                                     "accesses or funcs with custom gradients)")
        outs = [Var(p.type, hint="grad") for p in params]
        self.block.stmts.append(Op("grad_of", None, [self.typed(a, p.type, node) if a.weak else a
                                                     for a, p in zip(args, params)],
                                   {"fwd": body, "params": params, "outs": outs, "result": result},
                                   self.f.src.lineno(node)))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def call_native(self, fn, node):
        """A ``func_native`` call: one ``native`` op (its C++ function is emitted once per module)."""
        try:
            bound = inspect.signature(fn.pyfunc).bind(*[self.value(a) for a in node.args], **{
                k.arg: self.value(k.value) for k in node.keywords})
        except TypeError as e:
            raise self.err(node, f"func_native '{fn.key}': {e}", WarpCodegenTypeError) from None
        bound.apply_defaults()
        args = []
        for name, t in fn.params:
            v = bound.arguments[name]
            v = self.typed(v, t, node) if isinstance(v, Var) and v.weak else self.single(Ref(v), node) if not \
                isinstance(v, Var) else v
            if v.type is not t:
                raise self.err(node, f"func_native '{fn.key}' parameter '{name}' is {T.type_name(t)}, got "
                                     f"{T.type_name(v.type)}", WarpCodegenTypeError)
            args.append(v)
        out = Var(fn.ret) if fn.ret is not None else None
        self.block.stmts.append(Op("native", out, args, {"fn": fn}, self.f.src.lineno(node)))
        if fn.adj_snippet is None:
            self.skipped_funcs.add(fn.key)
        return out if out is not None else Var(T.bool_, const=False)

    def call_custom_grad(self, overload, frame: _Frame, node):
        """A func with ``@xsim.func_grad``: its body runs forward with no adjoint of its own; the
        grad func's body, run in the reverse pass, adds into ``adjoint[arg]``. A func declared with
        ``differentiable=False`` is the same with an empty grad body."""
        outer = self.block
        inputs = {n: v for n, v in frame.sym.items() if not n.startswith("$")}
        fwd = Block()
        self.block = fwd
        self.frames.append(frame)
        self.stmts(frame.src.tree.body)
        self.frames.pop()
        result = frame.sym.get("$retval")
        results = list(result) if isinstance(result, tuple) else [] if result is None else [result]
        if not all(isinstance(r, Var) for r in results) or (overload.replay is not None and len(results) != 1) or (
                not results and overload.custom_grad is None):
            what = ("a custom gradient" if overload.custom_grad is not None else "a func_replay"
                    if overload.differentiable else "differentiable=False")
            raise self.err(node, f"a func with {what} must return {'one value' if overload.replay else 'values'}")
        replay = self.replay_body(overload, inputs, results[0], node) if overload.replay is not None else {}
        adj_rets = [Var(r.type, hint="adj_ret") for r in results]
        attrs = {"fwd": fwd, "results": results, "adj_rets": adj_rets, "accums": [], **replay}
        out = results[0] if len(results) == 1 else None
        if overload.custom_grad is None:
            self.block = outer
            if not overload.differentiable:
                self.skipped_funcs.add(overload.pyfunc.__qualname__)
            # differentiable with a replay and no func_grad: the adjoint is that of the replay body
            attrs["grad"] = None if replay and overload.differentiable else Block()
            self.block.stmts.append(Op("custom", out, [], attrs, self.f.src.lineno(node)))
            return result
        result = _false() if result is None else result  # a func that returns nothing (writes arrays)
        # the grad body: its parameters are the func's inputs, then one adjoint per result, by position
        src = overload.custom_grad.source()
        gframe = _Frame(src, is_kernel=False)
        params = [a.arg for a in src.tree.args.args]
        if len(params) != len(inputs) + len(results):
            raise src.error(src.tree, f"a func_grad takes the func's {len(inputs)} parameters plus one adjoint "
                                      f"per result ({len(results)}), not {len(params)} parameters")
        gframe.sym.update(zip(params, [*inputs.values(), *adj_rets]))
        gframe.sym["$ret"] = _false()
        attrs["grad"] = self.block = Block()
        diff_inputs = {p: v for p, v in zip(params, inputs.values()) if isinstance(v, Var) and is_diff(v.type)}
        for p, v in diff_inputs.items():
            gframe.sym["$adj:" + p] = self.adjoint_start(v.type, node)
        reads = set(self.reads)
        self.frames.append(gframe)
        self.grad_bodies += 1  # funcs it calls are inlined plainly (a grad may call its own func)
        try:
            self.stmts(src.tree.body)
        finally:
            self.grad_bodies -= 1
        self.frames.pop()
        self.reads = reads  # the grad body runs backward: it reads arrays as the forward pass left them
        self.block = outer
        attrs["accums"] = [(v, gframe.sym["$adj:" + p]) for p, v in diff_inputs.items()]
        self.block.stmts.append(Op("custom", out, [], attrs, self.f.src.lineno(node)))
        return result

    def adjoint_start(self, t, node) -> Var:
        """The value a func_grad body's ``adjoint[x]`` starts from: -0 in every float32/float64 component,
        as the generated adjoints (``cpp.adj_zero``), so that g++ folds the first ``+=`` into an assignment
        and an adjoint the body never adds to into nothing; from +0 it must keep both adds (0 + -0 is +0).
        The cloth's distance adjoint took 16% less time (the func_grad adds into nine adjoints, most of
        them once). Other types (integers, halves, structs) start at zero."""
        scalar = t if T.is_scalar(t) else getattr(t, "_scalar", None)
        if scalar is not T.float32 and scalar is not T.float64 or T.is_struct(t):
            return self.zero_value(t, node)
        if T.is_scalar(t):
            return self.const(-0.0, t)
        return self.emit("construct", t, [self.const(-0.0, scalar) for _ in range(math.prod(t._shape))], node)

    def replay_body(self, overload, inputs: dict, result: Var, node) -> dict:
        """The ``@xsim.func_replay`` body of a func, built on the func's inputs (by position): what the
        backward pass runs instead of the func to recover its result."""
        src = overload.replay.source()
        params = [a.arg for a in src.tree.args.args]
        if len(params) != len(inputs):
            raise src.error(src.tree, f"a func_replay takes the {len(inputs)} parameters of its func")
        frame = _Frame(src, is_kernel=False)
        frame.sym.update(zip(params, inputs.values()))
        frame.sym["$ret"] = _false()
        outer, block, reads = self.block, Block(), set(self.reads)
        self.block = block
        self.frames.append(frame)
        self.stmts(src.tree.body)
        self.frames.pop()
        # the replay reads arrays as the forward pass left them (what it wrote, e.g. an atomic's result): they
        # are not inputs the tape must keep as they were before the launch
        self.reads = reads
        out = frame.sym.get("$retval")
        if isinstance(out, Var) and out.type is not result.type:
            out = self.convert(out, result.type, node) if out.weak else out
        self.block = outer
        if not isinstance(out, Var) or out.type is not result.type:
            raise src.error(src.tree, f"a func_replay must return one value of its func's type "
                                      f"({T.type_name(result.type)})")
        return {"replay": block, "replay_out": out}

    def adjoint_slot(self, node):
        raise self.err(node, "adjoint[...] can only be used as the target of += in a func_grad body")


def _mixed_types(args: list) -> bool:
    """Whether the components of a ``vector(...)``/``matrix(...)`` without ``dtype=`` disagree: two types, or a
    literal of another kind (``vector(1.0, 2)``); a literal of the same kind takes the other components' type."""
    def kind(t):
        return "float" if T.is_float(t) else "int" if T.is_int(t) else T.type_name(t)
    return len({a.type for a in args if not a.weak}) > 1 or len({kind(a.type) for a in args}) > 1


def _falls_through(body: list):
    """The statement where a path through ``body`` ends without a ``return`` (the last statement, or
    an ``if`` without ``else`` whose test can fail), or None when every path returns. Loops may run
    zero times, so a ``return`` inside one does not count; a ``while True:`` that no ``break`` leaves
    ends only by returning."""
    if any(isinstance(s, ast.Return) or _loops_forever(s) for s in body):
        return None
    for s in body:
        if isinstance(s, ast.If) and _falls_through(s.body) is None and s.orelse and _falls_through(s.orelse) is None:
            return None
    last = body[-1]
    if isinstance(last, ast.If):
        inner = _falls_through(last.body)
        if inner is not None:
            return inner
        return _falls_through(last.orelse) if last.orelse else last
    return last


def _loops_forever(s) -> bool:
    """Whether ``s`` is a ``while`` with a constant true test and no ``break`` of its own (a ``break`` in
    a loop nested in it leaves that loop only)."""
    if not (isinstance(s, ast.While) and isinstance(s.test, ast.Constant) and s.test.value):
        return False

    def breaks(stmts) -> bool:
        for x in stmts:
            if isinstance(x, ast.Break):
                return True
            if isinstance(x, ast.If) and (breaks(x.body) or breaks(x.orelse)):
                return True
        return False
    return not breaks(s.body)
