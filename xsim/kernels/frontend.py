"""Frontend: a kernel's Python source -> typed SSA IR (``ir.py``).

Names map to SSA values in a symbol table; assignment rebinds a name, so aliases (``w = v``) and
component writes (``w[0] = s`` makes a new value) are correct by construction. ``@xsim.func``
calls are inlined at their call site with their arguments' types (so funcs are generic for free),
``if`` merges the two symbol tables with phis, and ``break``/``continue``/``return`` become
boolean flags that guard the statements after them, leaving every block with a single exit.

Forward semantics are Python's (tests/reference.py runs the same source on the host), with
Warp's integer rules: integers wrap at their width, ``/`` and ``%`` truncate, ``//`` floors, and a
division by zero has a defined result (``native/xsim_math.h``: ``x / 0 == x // 0 == 0``, ``x % 0 ==
x``; debug mode raises ``ZeroDivisionError``). A loop variable keeps its last value after the loop.
An integer constant that does not fit its type is refused (``check_fits``).
"""

from __future__ import annotations

import ast
import typing

import numpy as np

from .. import types as T
from ..errors import (
    CompileError,
    WarpCodegenAttributeError,
    WarpCodegenError,
    WarpCodegenTypeError,
    WarpCodegenValueError,
)
from . import ir
from .builtins import BUILTINS, resolve_overload
from .builtins_geometry import QUERY_NEXT, for_each_query
from .calls import Calls
from .expressions import Expressions
from .ir import Block, Carried, If, Loop, Op, Var
from .scope import (
    _ADJOINT,
    _BINOPS,
    _PY_FOLD,
    MAX_UNROLL,
    MAX_UNROLL_OPS,
    BuiltinRef,
    GradOf,
    Ref,
    _assigned_names,
    _false,
    _Frame,
    _is_attr_chain,
    _resolve_annotation,
    _Source,
    annotations,
    unsupported_message,
)
from .static import Statics

_AUGASSIGN_ATOMICS = {"add": "atomic_add", "sub": "atomic_sub", "bit_and": "atomic_and", "bit_or": "atomic_or",
                      "bit_xor": "atomic_xor"}


class Frontend(Expressions, Calls, Statics):
    """Builds the IR of one kernel (and everything it calls)."""

    def __init__(self, kernel_func, options: dict | None = None):
        self.options = options or {}
        self.block = Block()
        self.frames: list[_Frame] = []
        self.reads: set[Var] = set()  # the arrays loaded (not in func_grad or func_replay bodies)
        self.writes: set[Var] = set()  # the arrays stored into or updated by atomics
        self.local_shapes: dict[int, tuple] = {}  # stack arrays (zeros() in a kernel) and their views -> shape
        self.skipped_funcs: set[str] = set()
        self.handles: dict[str, str] = {}  # parameter -> "mesh" / "hash_grid" when it is used as that id
        self.tid_dims = 0
        self.loop_count = 0
        self.inline_depth = 0
        self.grad_bodies = 0  # > 0 while a func_grad body is built: it runs backward only, never differentiated
        self.param_names: dict[int, str] = {}
        self.struct_fields: dict[int, dict[str, Var]] = {}  # a struct value -> the field values set in it
        self.kernel_func = kernel_func

    # ------------------------------------------------------------------------------------------
    # entry point

    def build_kernel(self, name: str, param_types: dict | None = None) -> ir.KernelIR:
        """The IR of the kernel, its parameters typed by their annotations or by ``param_types`` (a
        generic kernel's specialisation)."""
        src = _Source(self.kernel_func)
        frame = _Frame(src, is_kernel=True)
        self.frames.append(frame)
        params = []
        ann = annotations(self.kernel_func)
        for a in src.tree.args.args:
            if a.arg not in ann:
                raise src.error(a, f"kernel parameter '{a.arg}' needs a type annotation")
            t = param_types[a.arg] if param_types else _resolve_annotation(ann[a.arg])
            if t is None:
                raise src.error(a, f"kernel parameter '{a.arg}' has unsupported type {ann[a.arg]!r}; expected "
                                   "a scalar, vector, matrix, quat, transform, struct or array type")
            v = Var(t, hint=a.arg)
            self.param_names[v.id] = a.arg
            frame.sym[a.arg] = v
            params.append(ir.Param(a.arg, t, v))
        if src.tree.args.vararg or src.tree.args.kwarg or src.tree.args.kwonlyargs:
            raise src.error(src.tree, "kernels take plain positional parameters only")
        if ann.get("return", None) not in (None, type(None)):
            raise src.error(src.tree.returns or src.tree, _KERNEL_RETURNS, WarpCodegenTypeError)
        frame.sym["$ret"] = _false()
        self.stmts(src.tree.body)
        self.frames.pop()
        kir = ir.KernelIR(name=name, params=params, body=self.block, tid_dims=self.tid_dims, source_file=src.file,
                          first_line=src.line0 + 1, skipped_funcs=sorted(self.skipped_funcs),
                          handles=dict(self.handles))
        arrays = ir.ArrayLabels(kir)  # labelled by their paths from the parameters, as a launch finds them
        kir.reads, kir.writes = arrays.paths(self.reads), arrays.paths(self.writes)
        return kir

    @property
    def f(self) -> _Frame:
        return self.frames[-1]

    def err(self, node, msg, kind: type[CompileError] = WarpCodegenError) -> CompileError:
        return self.f.src.error(node, msg, kind)

    # ------------------------------------------------------------------------------------------
    # emission helpers

    def emit(self, kind, out_type, args, node=None, **attrs) -> Var | None:
        out = Var(out_type) if out_type is not None else None
        line = self.f.src.lineno(node) if node is not None else 0
        self.block.stmts.append(Op(kind, out, list(args), attrs, line))
        return out

    def const(self, value, t=None, node=None) -> Var:
        if t is None:
            if isinstance(value, (bool, np.bool_)):
                return Var(T.bool_, const=bool(value))
            if isinstance(value, (int, np.integer)) and not isinstance(value, np.integer):
                return Var(T.int32, const=int(value), weak=True)
            if isinstance(value, float):
                return Var(T.float32, const=float(value), weak=True)
            if isinstance(value, np.generic):
                return Var(T.scalar_from_numpy(value.dtype), const=value.item())
            raise TypeError(value)
        if T.is_scalar(t):
            py = bool(value) if t is T.bool_ else (float(value) if T.is_float(t) else int(value))
            if T.is_int(t):
                self.check_fits(py, t, node)
            return Var(t, const=py)
        raise TypeError(t)

    def check_fits(self, value: int, t, node):
        """An integer constant must fit its type: it is refused, never wrapped silently."""
        lo, hi = np.iinfo(t._np).min, np.iinfo(t._np).max
        if not lo <= value <= hi:
            raise self.err(node, f"the integer {value} does not fit in {T.type_name(t)} ({lo} to {hi})")

    def convert(self, v: Var, t, node) -> Var:
        """Implicitly convert ``v`` to type ``t``: only weak literals (and identical types) convert."""
        if v.type is t:
            if v.weak and v.is_const and T.is_int(t):
                self.check_fits(v.const, t, node)
            return v
        if v.weak and T.is_scalar(t):
            if T.is_int(t) and isinstance(v.const, float):
                raise self.err(node, f"cannot use the float literal {v.const!r} where {T.type_name(t)} is expected")
            if t is T.bool_:
                raise self.err(node, f"cannot use the number {v.const!r} where bool is expected")
            return self.const(v.const, t, node)
        if v.weak and T.is_composite(t):
            return self.emit("construct", t, [self.convert(v, t._scalar, node)] * T.num_components(t), node)
        raise self.err(node, f"type mismatch: expected {T.type_name(t)}, got {T.type_name(v.type)}",
                       WarpCodegenTypeError)

    def typed(self, v: Var, t, node) -> Var:
        """``v`` converted to ``t`` as a value of that type: a literal stops adapting to its operands
        (``int(-2**31) * 3`` wraps in int32, as the annotation or cast says)."""
        v = self.convert(v, t, node)
        return self.const(v.const, t, node) if v.weak and T.is_scalar(t) else v

    def cast(self, v: Var, t, node) -> Var:
        """Explicit conversion (``float(x)``, ``int(x)``, ``xsim.float64(x)``, ``vec3d(v)``)."""
        if v.type is t:
            return self.typed(v, t, node)
        if v.is_const and T.is_scalar(t) and T.is_scalar(v.type):
            if T.is_int(t):  # an explicit conversion wraps, as C's and Warp's (uint32(-1) == 4294967295)
                return self.const(T.wrap_int(int(v.const), t), t, node)
            return self.const(v.const if t is not T.bool_ else bool(v.const), t, node)
        if T.is_scalar(t) and T.is_scalar(v.type) or (
                T.is_composite(t) and T.is_composite(v.type) and t._shape == v.type._shape):
            return self.emit("cast", t, [v], node)
        raise self.err(node, f"cannot convert {T.type_name(v.type)} to {T.type_name(t)}",
                       WarpCodegenTypeError)

    def as_bool(self, v, node) -> Var:
        if not isinstance(v, Var):
            raise self.err(node, "expected a boolean condition")
        if v.type is T.bool_:
            return v
        if T.is_scalar(v.type):
            if v.is_const:
                return self.const(bool(v.const))
            return self.call_builtin("ne", [v, self.const(0)], node)
        if isinstance(v.type, T.ArrayType):  # Warp's `if a:`: false for a null (None) array, which has shape 0
            return self.call_builtin("ne", [self.emit("shape", T.int32, [v], node, dim=0), self.const(0)], node)
        raise self.err(node, f"a condition must be a bool, a number or an array, got {T.type_name(v.type)}",
                       WarpCodegenTypeError)

    def unify_weak(self, a: Var, b: Var, node) -> tuple[Var, Var]:
        """Give weak literals the scalar type of the strong operand they meet."""
        if a.weak and not b.weak and T.is_scalar(a.type):
            target = b.type._scalar if hasattr(b.type, "_scalar") else b.type
            if T.is_scalar(target) and target is not T.bool_:
                a = self.convert(a, target, node)
        elif b.weak and not a.weak and T.is_scalar(b.type):
            target = a.type._scalar if hasattr(a.type, "_scalar") else a.type
            if T.is_scalar(target) and target is not T.bool_:
                b = self.convert(b, target, node)
        elif a.weak and b.weak and a.type is not b.type:
            a, b = self.const(float(a.const)), self.const(float(b.const))
        return a, b

    def call_builtin(self, name: str, args: list[Var], node) -> Var:
        if len(args) == 2:
            args = list(self.unify_weak(args[0], args[1], node))
        elif len(args) > 2:
            strong = next((a for a in args if not a.weak), None)
            if strong is not None:
                args = [self.unify_weak(a, strong, node)[0] if a.weak else a for a in args]
        if all(a.is_const and a.weak for a in args) and name in _PY_FOLD:
            return self.const(_PY_FOLD[name](*[a.const for a in args]))
        for a in args:  # a literal that met no typed operand computes in int32
            if a.weak and T.is_int(a.type):
                self.check_fits(a.const, a.type, node)
        if all(a.is_const and T.is_scalar(a.type) and a.type is not T.bool_ for a in args) and name in _PY_FOLD \
                and len({a.type for a in args}) == 1 and name in ("lt", "le", "gt", "ge", "eq", "ne"):
            return self.const(_PY_FOLD[name](*[a.const for a in args]))
        found = resolve_overload(name, [a.type for a in args])
        if found is None:
            given = ", ".join(T.type_name(a.type) for a in args)
            b = BUILTINS.get(name)
            expected = b.signatures() if b else "no such builtin"
            raise self.err(node, f"no overload of '{name}' takes ({given}); expected one of: {expected}",
                           WarpCodegenTypeError)
        overload, ret = found
        return self.emit("call", ret, args, node, overload=overload)

    # ------------------------------------------------------------------------------------------
    # statements

    def stmts(self, body: list):
        for idx, node in enumerate(body):
            self.stmt(node)
            exiting = self.exit_flag()
            if exiting is None:
                continue
            if exiting.is_const:
                if exiting.const:
                    return  # unconditional break/continue/return: the rest is dead code
                continue
            rest = body[idx + 1:]
            if rest:
                guard = self.call_builtin("eq", [exiting, self.const(False)], node)
                self.build_if(guard, lambda rest=rest: self.stmts(rest), lambda: None, node)
            return

    def exit_flag(self) -> Var | None:
        """The OR of the active exit flags (break/continue/return): a constant when any flag is known
        set (whatever the others hold at runtime) or none can be, else a runtime value."""
        out = None
        for n in self.f.flags:
            v = self.f.sym.get(n)
            if v is None or (v.is_const and not v.const):
                continue
            if v.is_const:
                return v
            out = v if out is None else self.emit("or", T.bool_, [out, v])
        return out if out is not None else _false()

    def stmt(self, node):
        kind = type(node)
        refused = unsupported_message(kind)
        if refused is not None:
            raise self.err(node, refused)
        method = getattr(self, "stmt_" + kind.__name__, None)
        if method is None:
            raise self.err(node, f"unsupported statement '{kind.__name__}' in a kernel")
        try:
            method(node)
        except RecursionError:  # the innermost statement says it; outer ones see the CompileError
            raise self.err(node, "this statement nests too deeply for the compiler (an expression of thousands "
                                 "of terms or levels); split it into several statements, e.g. partial sums") from None

    def stmt_Pass(self, node):
        pass

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.expr(node.value)

    def stmt_Assign(self, node):
        if len(node.targets) != 1:
            raise self.err(node, "chained assignment (a = b = c) is not supported")
        if isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Call):
            node.value._xs_targets = len(node.targets[0].elts)
        value = self.expr(node.value)
        root = self.adjoint_root(node.targets[0])
        if root is not None:
            self.accumulate_adjoint(node.targets[0], root, None, node, value)
            return
        self.assign(node.targets[0], value, node)

    def stmt_AnnAssign(self, node):
        t = _resolve_annotation(self.eval_static(node.annotation))
        if t is None or isinstance(t, T.ArrayType):
            raise self.err(node.annotation, "a local variable annotation must be a scalar, vector, matrix, quat, "
                                            "transform or struct type")
        if node.value is None:
            raise self.err(node, "an annotated local needs a value")
        v = self.value(node.value)
        v = self.convert(v, t, node) if v.weak or v.type is t else self.cast_checked(v, t, node)
        self.assign(node.target, v, node)

    def adjoint_root(self, target):
        """The ``adjoint[...]`` under a write target's component steps (``adjoint[x.v][0]``, ``adjoint[x.v].y``),
        else None."""
        node = target
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            inner = node.value
            if isinstance(node, ast.Subscript) and _is_attr_chain(inner) and (
                    getattr(inner, "attr", None) == "adjoint" or getattr(inner, "id", None) == "adjoint"):
                marker = self.expr(inner)
                return node if isinstance(marker, Ref) and marker.obj is _ADJOINT else None
            node = inner
        return None

    def cast_checked(self, v, t, node):
        if v.type is not t:
            raise self.err(node, f"type mismatch: annotated {T.type_name(t)}, got {T.type_name(v.type)}",
                           WarpCodegenTypeError)
        return v

    def stmt_AugAssign(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, "unsupported in-place operator")
        target = node.target
        root = self.adjoint_root(target)
        if root is not None:
            self.accumulate_adjoint(target, root, op, node, self.value(node.value))
            return
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            base = self.array_element_target(target)
            # as in Warp, += -= &= |= ^= on an array element are atomic, except where the element has no
            # atomic (8- and 16-bit ints): there they read, combine and write back
            if base is not None and op in _AUGASSIGN_ATOMICS and self.has_atomic(
                    _AUGASSIGN_ATOMICS[op], self.target_type(base[0], base[2], node)):
                arr, idx, path = base
                value = self.value(node.value)
                # a func named like the operator that takes these types (Warp's operator overloading) makes
                # it read, combine and write back
                if self.user_operator(op, [Var(self.target_type(arr, path, node)), value], node) is None:
                    self.atomic(_AUGASSIGN_ATOMICS[op], arr, idx, path, value, node)
                    return
                self.assign(target, self.binop(op, self.value(target), value, node), node)
                return
        if isinstance(target, ast.Name) and isinstance(self.f.sym.get(target.id), Ref) and _callable_in_kernel(
                self.f.sym[target.id].obj):
            self.refuse_rebinding(target.id, self.f.sym[target.id], None, node)
        current = self.value(target)
        rhs = self.value(node.value)
        self.assign(target, self.binop(op, current, rhs, node), node)

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            if target.id in self.f.loop_vars:
                raise self.err(target, f"cannot assign to the loop variable '{target.id}'")
            if isinstance(value, Ref) and T.is_composite(type(value.obj)):
                value = self.single(value, node)  # a constant vector or matrix becomes a local value
            old = self.f.sym.get(target.id)
            if isinstance(old, Ref) and _callable_in_kernel(old.obj) and not (
                    isinstance(value, Ref) and value.obj is old.obj):
                self.refuse_rebinding(target.id, old, value, node)
            if isinstance(value, Ref) and not _callable_in_kernel(value.obj):
                raise self.err(node, f"cannot assign {value.obj!r} to a variable inside a kernel")
            if isinstance(value, Var) and value.is_const and value.weak:
                value = Var(value.type, const=value.const, weak=True)
            if isinstance(value, Var) and value.id in self.local_shapes and not value.hint:
                value.hint = target.id  # a stack array (or a view of one) goes by its first name in messages
            self.f.sym[target.id] = value
        elif isinstance(target, ast.Tuple):
            star = next((e for e in target.elts if isinstance(e, ast.Starred)), None)
            if star is not None:
                raise self.err(star, "star expressions are supported only as call arguments in kernels")
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                n = len(value) if isinstance(value, tuple) else 1
                raise self.err(node, f"cannot unpack {n} value(s) into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            self.assign_component(target, self.single(value, node), node)
        else:
            raise self.err(target, "unsupported assignment target")

    def refuse_rebinding(self, name: str, old: Ref, value, node):
        """A func-valued local is a compile-time alias (there are no function pointers): it cannot be rebound."""
        what = "another function" if isinstance(value, Ref) and _callable_in_kernel(value.obj) \
            else "a non-function value"
        held = old.obj.text if isinstance(old.obj, GradOf) else getattr(old.obj, "key", getattr(old.obj, "name", ""))
        raise self.err(node, f"Cannot reassign local '{name}', which holds {held}: rebinding function-valued local "
                             f"'{name}' to {what} is not supported; use a new name")

    def assign_component(self, target, value: Var, node):
        """``base[idx] = value`` / ``base.attr = value``: a store into an array element, or a new
        value of the local it is part of (rebinding that local)."""
        elem = self.array_element_target(target)
        if elem is not None:
            arr, idx, path = elem
            self.store(arr, idx, path, value, node)
            return
        base_node = target.value
        base = self.value(base_node)
        if isinstance(base.type, T.ArrayType):
            raise self.err(target, "cannot assign to an array attribute")
        new = self.insert(base, target, value, node)
        self.assign(base_node, new, node)

    def insert(self, base: Var, target, value: Var, node) -> Var:
        t = base.type
        group = self.component_group(t, target)
        if group is not None:  # v[1:] = ..., m[:, 0] = ..., xform.p = ...
            out_t, flat = group
            value = self.group_value(value, out_t, node)
            for pos, k in enumerate(flat):
                part = self.emit("extract", t._scalar, [value, self.const(pos, T.int32)], node)
                base = self.emit("insert", t, [base, self.const(k, T.int32), part], node)
            return base
        if isinstance(target, ast.Attribute):
            if T.is_struct(t):
                ft = t._fields.get(target.attr)
                if ft is None:
                    raise self.err(target, f"struct {t.__name__} has no field '{target.attr}'",
                                   WarpCodegenAttributeError)
                value = self.convert(value, ft, node) if not isinstance(ft, T.ArrayType) else value
                return self.set_field(base, target.attr, value, node)
            index = self.swizzle_index(t, target)
            value = self.convert(value, t._scalar, node)
            return self.emit("insert", t, [base, self.const(index, T.int32), value], node)
        idx = self.subscript_indices(target)
        if T.is_matrix(t) and len(idx) == 1:
            row = self.convert(value, T.vector(t._shape[1], t._scalar), node)
            i = self.wrapped_index(self.index_var(idx[0], target), t._shape[0], t, target)
            return self.emit("set_row", t, [base, i, row], node)
        flat = self.flat_component(t, idx, target)
        value = self.convert(value, t._scalar, node)
        return self.emit("insert", t, [base, flat, value], node)

    def set_field(self, base: Var, name: str, value: Var, node) -> Var:
        """``base`` with field ``name`` set to ``value``. The values set are remembered, so that reading
        one back (``s = S(a); s.a[i]``, ``S(T(a)).t.a``) is that value: an array then keeps the
        gradient buffer of the parameter it is."""
        out = self.emit("field_set", base.type, [base, value], node, field=name)
        out.hint = base.hint  # the copy goes by its base's path (see ir.ArrayLabels)
        self.struct_fields[out.id] = {**self.struct_fields.get(base.id, {}), name: value}
        return out

    def stmt_If(self, node):
        cond = self.as_bool(self.value(node.test), node.test)
        self.build_if(cond, lambda: self.stmts(node.body), lambda: self.stmts(node.orelse), node)

    def build_if(self, cond: Var, then_fn, else_fn, node):
        if cond.is_const:
            (then_fn if cond.const else else_fn)()
            return
        before = dict(self.f.sym)
        outer = self.block
        then_block, else_block = Block(), Block()
        self.block = then_block
        then_fn()
        then_sym = self.f.sym
        self.f.sym = dict(before)
        self.block = else_block
        else_fn()
        else_sym = self.f.sym
        self.block = outer
        stmt = If(cond, then_block, else_block, [], self.f.src.lineno(node))
        merged = {}
        for name in then_sym.keys() & else_sym.keys():
            a, b = then_sym[name], else_sym[name]
            merged[name] = self.merge(stmt, a, b, name, node)
        for name in then_sym.keys() ^ else_sym.keys():
            # assigned in one branch only: Warp keeps it defined after the if; on the other path xsim gives
            # it the zero of its type (Warp leaves it uninitialised)
            v = then_sym.get(name, else_sym.get(name))
            if not name.startswith("$") and isinstance(v, Var) and T.is_value_type(v.type):
                zero = self.zero_in(stmt.orelse if name in then_sym else stmt.then, v, node)
                merged[name] = self.merge(stmt, *((v, zero) if name in then_sym else (zero, v)), name, node)
        if "$retval" in then_sym.keys() ^ else_sym.keys():
            # returned on one side only: the other side has not returned yet, so the return that
            # follows (guarded by the $ret flag) sets the value for it
            merged["$retval"] = then_sym.get("$retval", else_sym.get("$retval"))
        self.f.sym = merged
        self.block.stmts.append(stmt)

    def merge(self, stmt: If, a, b, name, node):
        if a is b:
            return a
        if isinstance(a, tuple) or isinstance(b, tuple):
            if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)):
                if name == "$retval":
                    raise self.err(node, "the returns of this func give different kinds of value (a tuple and a "
                                         "single value, or tuples of different lengths)")
                raise self.err(node, f"'{name}' has different kinds of value in the two branches")
            return tuple(self.merge(stmt, x, y, name, node) for x, y in zip(a, b))
        if isinstance(a, Ref) or isinstance(b, Ref):
            raise self.err(node, f"'{name}' must be a value in both branches")
        if a.is_const and b.is_const and a.type is b.type and a.const == b.const and a.weak == b.weak:
            return a
        if a.type is not b.type:
            a2, b2 = self.unify_weak_in(stmt, a, b, node)
            if a2.type is not b2.type:
                raise self.err(node, f"'{name}' has type {T.type_name(a.type)} in one branch and "
                                     f"{T.type_name(b.type)} in the other")
            a, b = a2, b2
        if isinstance(a.type, T.ArrayType):
            raise self.err(node, f"the array '{name}' cannot be chosen by a branch")
        out = Var(a.type, hint=name if not name.startswith("$") else "")
        stmt.phis.append((out, a, b))
        return out

    def zero_in(self, block: Block, v: Var, node) -> Var:
        """The zero of ``v``'s type, built at the end of ``block``."""
        if T.is_scalar(v.type):
            return Var(v.type, const=False if v.type is T.bool_ else 0.0 if T.is_float(v.type) else 0,
                       weak=v.weak)
        outer, self.block = self.block, block
        try:
            return self.emit("construct", v.type, [], node)
        finally:
            self.block = outer

    def unify_weak_in(self, stmt: If, a, b, node):
        """Convert a weak literal on one side of a branch merge to the other side's type; the
        conversion is emitted at the end of the branch that produced the literal."""
        def fix(v, t, block):
            outer = self.block
            self.block = block
            r = self.convert(v, t, node)
            self.block = outer
            return r
        if a.weak and not b.weak:
            return fix(a, b.type, stmt.then), b
        if b.weak and not a.weak:
            return a, fix(b, a.type, stmt.orelse)
        return a, b

    def stmt_Break(self, node):
        if "$brk" not in self.f.sym:
            raise self.err(node, "'break' outside a loop")
        self.f.sym["$brk"] = Var(T.bool_, const=True)

    def stmt_Continue(self, node):
        if "$cont" not in self.f.sym:
            raise self.err(node, "'continue' outside a loop")
        self.f.sym["$cont"] = Var(T.bool_, const=True)

    def stmt_Return(self, node):
        f = self.f
        if f.is_kernel:
            if node.value is not None:
                raise self.err(node, _KERNEL_RETURNS, WarpCodegenTypeError)
        elif node.value is not None:
            v = self.expr(node.value)
            if isinstance(v, Ref):
                raise self.err(node, "a func must return values, not Python objects")
            if f.ret_type is not None:
                v = self.convert_tree(v, f.ret_type, node)
            prev = f.sym.get("$retval")
            if isinstance(prev, Var) and isinstance(v, Var) and prev.type is not v.type:
                v = self.unify_ret(prev, v, node)
            f.sym["$retval"] = v
        f.sym["$ret"] = Var(T.bool_, const=True)

    def unify_ret(self, prev: Var, v: Var, node) -> Var:
        if v.weak:
            return self.convert(v, prev.type, node)
        if prev.weak:
            return v
        raise self.err(node, f"this return gives {T.type_name(v.type)} but an earlier return gave "
                             f"{T.type_name(prev.type)}")

    def convert_tree(self, v, t, node):
        """The returned value ``v`` as the func's annotated return type ``t`` (a tuple of types for a
        tuple); a mismatch is refused with the annotation and what the code returns."""
        f = self.f
        head = f"The function `{f.src.pyfunc.__name__}` has its return type annotated as "
        if isinstance(t, tuple):
            if not isinstance(v, tuple) or len(v) != len(t):
                got = f"{len(v)} values" if isinstance(v, tuple) else "a single value"
                raise self.err(node, f"{head}a tuple of {len(t)} elements but the code returns {got}.",
                               WarpCodegenTypeError)
            if any(isinstance(x, tuple) or not (x.type is y or x.weak and self.fits_weak(x, y)) for x, y in zip(v, t)):
                got = ", ".join("tuple" if isinstance(x, tuple) else T.type_name(x.type) for x in v)
                raise self.err(node, f"{head}`{_annotation_name(f.ret_ann)}` but the code returns a tuple with "
                                     f"types `({got})`.", WarpCodegenTypeError)
            return tuple(self.convert(x, y, node) for x, y in zip(v, t))
        if isinstance(v, tuple):
            raise self.err(node, f"{head}`{_annotation_name(f.ret_ann)}` but the code returns {len(v)} values.",
                           WarpCodegenTypeError)
        if isinstance(v, Var) and v.id in self.local_shapes and not isinstance(t, T.FixedArrayType):
            raise self.err(node, f"The function `{f.src.pyfunc.__name__}` returns a fixed-size array whereas it has "
                                 f"its return type annotated as `{_annotation_name(f.ret_ann)}`.", WarpCodegenTypeError)
        if isinstance(t, T.ArrayType) and v.type == t:
            return v  # an array is returned as it is (a fixedarray annotation equals its array type)
        if not (v.type is t or v.weak and self.fits_weak(v, t)):
            raise self.err(node, f"{head}`{_annotation_name(f.ret_ann)}` but the code returns a value of type "
                                 f"`{T.type_name(v.type)}`.", WarpCodegenTypeError)
        return self.convert(v, t, node)

    @staticmethod
    def fits_weak(v: Var, t) -> bool:
        """Whether the literal ``v`` converts implicitly to ``t`` (an int literal to any number, a float
        literal to a float type, either to a composite filled with it)."""
        s = t._scalar if T.is_composite(t) else t
        return T.is_scalar(s) and s is not T.bool_ and not (T.is_int(s) and isinstance(v.const, float))

    # ------------------------------------------------------------------------------------------
    # loops

    def stmt_For(self, node):
        if node.orelse:
            raise self.err(node, "for/else is not supported")
        if not isinstance(node.target, ast.Name):
            raise self.err(node.target, "a for loop needs a single loop variable")
        it = node.iter
        backwards = (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "reversed"
                     and len(it.args) == 1 and not it.keywords)
        if backwards:
            it = it.args[0]
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
            if not backwards:
                query = self.expr(it)
                if isinstance(query, Var) and query.type in QUERY_NEXT:
                    for_each_query(self, node, query)
                    return
            raise self.err(it, "kernels loop only over range(...), reversed(range(...)) or a mesh_query_aabb / "
                               "hash_grid_query query")
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.err(it, "range() takes 1 to 3 positional arguments")
        args = [self.value(a) for a in it.args]
        args = [self.const(int(a.const)) if a.is_const and a.type is T.bool_ else a for a in args]
        for a, n in zip(args, it.args):
            if not T.is_int(a.type):
                raise self.err(n, f"range() needs integers, got {T.type_name(a.type)}")
        start, stop, step = (self.const(0), args[0], self.const(1)) if len(args) == 1 else (
            (args[0], args[1], self.const(1)) if len(args) == 2 else tuple(args))
        if backwards:
            start, stop, step = self.reversed_range(start, stop, step, it)
        name = node.target.id
        forced = self.static_unrolls(node)
        if forced and not all(a.is_const for a in (start, stop, step)):
            raise self.err(it, f"xsim.static() reads the loop variable '{name}', so the loop must be unrolled, "
                               "which needs constant range() bounds")
        if all(a.is_const for a in (start, stop, step)):
            if step.const == 0:
                raise self.err(it, "range() step must not be zero", WarpCodegenValueError)
            values = range(start.const, stop.const, step.const)
            if forced:
                self.unrolled_loop(name, values, node)
                return
            if len(values) <= self.options.get("max_unroll", MAX_UNROLL) and self.try_unrolled_loop(name, values, node):
                return
        strong = next((a for a in (start, stop, step) if not a.weak), None)
        itype = strong.type if strong is not None else T.int32
        start, stop, step = (self.convert(a, itype, it) if a.weak else a for a in (start, stop, step))
        if len({start.type, stop.type, step.type}) != 1:
            raise self.err(it, "range() arguments must have one integer type")
        self.dynamic_loop(node, node.body, induction=(name, start, stop, step))

    def reversed_range(self, start: Var, stop: Var, step: Var, node) -> tuple[Var, Var, Var]:
        """(start, stop, step) of the range that runs ``range(start, stop, step)`` backwards: from its last
        element down by ``step``, ending where it began; n = max(0, ceil((stop - start) / step)) elements,
        computed with the rounding of the step's sign (both are written out when the sign is not known)."""
        if step.is_const and step.const == 0:
            raise self.err(node, "range() step must not be zero", WarpCodegenValueError)
        if all(a.is_const for a in (start, stop, step)):
            r = range(start.const, stop.const, step.const)[::-1]
            return self.const(r.start), self.const(r.stop), self.const(r.step)
        op = lambda name, a, b: self.call_builtin(name, [a, b], node)
        span = op("sub", stop, start)

        def count(sign: int) -> Var:  # elements for a step of this sign (truncating or flooring alike)
            return op("max", self.const(0), op("div", op("add", span, op("sub", step, self.const(sign))), step))
        if step.is_const:
            n = count(1 if step.const > 0 else -1)
        else:
            n = self.emit("select", span.type, [op("gt", step, self.const(0)), count(1), count(-1)], node)
        last = op("add", start, op("mul", op("sub", n, self.const(1)), step))
        return last, op("sub", start, step), self.call_builtin("neg", [step], node)

    def try_unrolled_loop(self, name, values, node) -> bool:
        """Unroll a constant-trip loop unless its unrolled code would exceed ``MAX_UNROLL_OPS``
        statements (inlined funcs make bodies large); then undo and let it be a real loop."""
        sym, mark, reads, writes = dict(self.f.sym), len(self.block.stmts), set(self.reads), set(self.writes)
        self.unrolled_loop(name, values, node)
        if sum(1 for _ in ir.walk(Block(self.block.stmts[mark:]))) <= MAX_UNROLL_OPS:
            return True
        del self.block.stmts[mark:]
        self.f.sym, self.reads, self.writes = sym, reads, writes
        return False

    def unrolled_loop(self, name, values, node):
        f = self.f
        saved = {k: f.sym.get(k) for k in ("$brk", "$cont")}
        f.sym["$brk"] = _false()
        f.flags.append("$brk")
        f.loop_vars.add(name)
        for value in values:
            brk = f.sym["$brk"]
            if brk.is_const and brk.const:
                break
            f.sym["$cont"] = _false()
            f.flags.append("$cont")

            def iteration(value=value):
                f.sym[name] = self.const(value, T.int32)
                self.stmts(node.body)
            if brk.is_const:
                iteration()
            else:
                self.build_if(self.call_builtin("eq", [brk, self.const(False)], node), iteration, lambda: None, node)
            f.flags.remove("$cont")
        f.flags.remove("$brk")
        f.loop_vars.discard(name)
        # as in Python, the loop variable keeps the value of the last iteration that ran (the phis of
        # the break guards merged it), or its value before the loop when no iteration ran
        for k, v in saved.items():
            if v is None:
                f.sym.pop(k, None)
            else:
                f.sym[k] = v

    def stmt_While(self, node):
        if node.orelse:
            raise self.err(node, "while/else is not supported")
        self.dynamic_loop(node, node.body, cond_node=node.test)

    def dynamic_loop(self, node, body, induction=None, cond_node=None):
        """A loop with runtime bounds: the carried values are the names the body assigns that
        exist before the loop (plus the flags); their types are found by a trial build."""
        f = self.f
        # a condition such as hash_grid_query_next(query, index) rebinds names on every iteration too
        assigned = _assigned_names(body + ([cond_node] if cond_node is not None else []))
        if induction is not None and induction[0] in assigned:
            bad = next(n for n in ast.walk(ast.Module(body=body, type_ignores=[]))
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id == induction[0])
            raise self.err(bad, f"cannot assign to the loop variable '{induction[0]}'")
        has_return = any(isinstance(n, ast.Return) for s in body for n in ast.walk(s))
        # arrays are references: a store through one (a[i].x = ...) does not rebind it, and carrying
        # it would cut the array off from its gradient in the adjoint
        names = sorted(n for n in assigned if n in f.sym and isinstance(f.sym[n], Var)
                       and not isinstance(f.sym[n].type, T.ArrayType))
        # "$ret" is carried only when the body can return: carrying it otherwise makes it a runtime
        # flag after the loop, which guards every later statement (and refused array stores there)
        extra = (["$ret"] if has_return else []) + (["$retval"] if has_return and not f.is_kernel else [])
        # a name first assigned in the loop and read after it (as Python and Warp allow) is carried too, from
        # the zero of its type: what it holds when no iteration assigned it (Warp leaves it uninitialised)
        skip = {induction[0]} if induction is not None else set()
        extra += sorted(n for n in assigned & _names_read_after(f.src.tree, node) if n not in f.sym and n not in skip)
        types = {}
        for _ in range(3):  # trial builds until the carried types are stable
            trial = self._loop_body(node, body, names, extra, induction, cond_node, types, trial=True)
            if trial == types:
                break
            types = trial
        self._loop_body(node, body, names, extra, induction, cond_node, types, trial=False)

    def _loop_body(self, node, body, names, extra, induction, cond_node, types, trial):
        f = self.f
        outer_block, outer_sym = self.block, dict(f.sym)
        if trial:
            self.block = Block()
        carried: list[Carried] = []
        # a slot is one carried value: a name, or one element of a tuple a func returns ("$retval", (i,)),
        # so that a tuple returned inside the loop reaches the code after it as a scalar return does
        inits, starts = {}, {}
        for n in names + extra:
            init = f.sym.get(n)
            if init is None:  # "$retval", or a name first assigned in the loop: from the types a trial found
                known = {path: t for (m, path), t in types.items() if m == n}
                if not known:
                    continue
                init = _tree({path: self.zero_value(t, node) for path, t in known.items()})
            starts[n] = init
            for path, leaf in _leaves(init):
                if not isinstance(leaf, Var):
                    continue
                t = types.get((n, path), leaf.type)
                if leaf.type is not t:
                    leaf = self.convert(leaf, t, node) if leaf.weak else leaf
                    if leaf.type is not t:
                        raise self.err(node, f"'{n}' is {T.type_name(leaf.type)} before the loop but "
                                             f"{T.type_name(t)} inside it; give it one type")
                inits[(n, path)] = leaf
        ind_var = after = None
        if induction is not None:
            iname, start, stop, step = induction
            ind_var = Var(start.type, hint=iname)
            carried.append(Carried(ind_var, start, None, restore="induction"))
            after = self.loop_var_after(iname, start.type, node)
            if after is not None:
                carried.append(after)
        named: dict[tuple, Carried] = {}
        for slot, init in inits.items():
            if trial and init.weak and slot not in types:
                f.sym[slot[0]] = _set_leaf(f.sym.get(slot[0], starts[slot[0]]), slot[1], init)  # first trial: let the literal meet
                continue  # the values it is combined with
            v = Var(init.type, hint=slot[0] if not slot[0].startswith("$") else "")
            named[slot] = Carried(v, init, None)
            carried.append(named[slot])
            f.sym[slot[0]] = _set_leaf(f.sym.get(slot[0], starts[slot[0]]), slot[1], v)
        brk = Var(T.bool_)
        carried.append(Carried(brk, _false(), None, restore="false"))
        f.sym["$brk"] = brk
        # condition
        cond_block = Block()
        self.block = cond_block
        if induction is not None:
            iname, start, stop, step = induction
            if step.is_const:
                user_cond = self.call_builtin("lt" if step.const > 0 else "gt", [ind_var, stop], node)
            else:
                pos = self.call_builtin("gt", [step, self.const(0, step.type)], node)
                up = self.call_builtin("lt", [ind_var, stop], node)
                down = self.call_builtin("gt", [ind_var, stop], node)
                user_cond = self.emit("select", T.bool_, [pos, up, down], node)
        else:
            user_cond = self.as_bool(self.value(cond_node), cond_node)
        not_brk = self.call_builtin("eq", [brk, self.const(False)], node)
        ret = f.sym["$ret"]
        not_ret = self.call_builtin("eq", [ret, self.const(False)], node) if not ret.is_const else None
        cond = self.emit("and", T.bool_, [not_brk, user_cond], node)
        if not_ret is not None:
            cond = self.emit("and", T.bool_, [cond, not_ret], node)
        # body
        body_block = Block()
        self.block = body_block
        f.sym["$cont"] = _false()
        f.flags += ["$brk", "$cont"]
        if induction is not None:
            f.sym[induction[0]] = ind_var
            f.loop_vars.add(induction[0])
        self.stmts(body)
        for n, v in outer_sym.items():
            if isinstance(v, Var) and isinstance(v.type, T.ArrayType) and f.sym.get(n) is not v:
                raise self.err(node, f"the array '{n}' cannot be rebound inside a dynamic loop")
        f.flags.remove("$brk")
        f.flags.remove("$cont")
        if induction is not None:
            f.loop_vars.discard(induction[0])
            carried[0].next = self.call_builtin("add", [ind_var, induction[3]], node)
            if after is not None:
                after.next = ind_var
        new_types = {}  # the carried types a trial build found: a weak literal keeps the type it had
        for slot, init in inits.items():
            n = slot[0]
            nxt = _leaf(f.sym.get(n), slot[1])
            if not isinstance(nxt, Var):
                raise self.err(node, f"'{n}' must keep a value in every path through the loop")
            c = named.get(slot)
            new_types[slot] = (c.var.type if c is not None else init.type) if nxt.weak else nxt.type
            if trial:
                continue
            if nxt.type is not c.var.type and nxt.weak:
                nxt = self.convert(nxt, c.var.type, node)
            if nxt.type is not c.var.type:
                raise self.err(node, f"'{n}' changes type inside the loop ({T.type_name(c.var.type)} -> "
                                     f"{T.type_name(nxt.type)})")
            c.next = nxt
        for n in extra:  # first returned, or first assigned, inside the loop
            if trial and not any(m == n for m, _ in inits):
                new_types.update(((n, path), v.type) for path, v in _leaves(f.sym.get(n))
                                 if isinstance(v, Var) and T.is_value_type(v.type))
        carried[-1].next = f.sym["$brk"]
        self.block = outer_block
        if trial:
            f.sym = outer_sym
            return new_types
        self.loop_count += 1
        loop = Loop(carried, cond_block, cond, body_block,
                    induction=(ind_var, induction[1], induction[3]) if induction else None,
                    line=f.src.lineno(node), id=self.loop_count)
        self.block.stmts.append(loop)
        # after the loop: carried names hold their final values; loop-local names are gone
        f.sym = {k: v for k, v in outer_sym.items()}
        for (n, path), c in named.items():
            f.sym[n] = _set_leaf(f.sym.get(n, starts[n]), path, c.var)
        if induction is not None:
            f.sym.pop(induction[0], None)
            if after is not None:
                f.sym[induction[0]] = after.var
        if "$brk" in outer_sym:
            f.sym["$brk"] = outer_sym["$brk"]
        else:
            f.sym.pop("$brk", None)
        if "$cont" in outer_sym:
            f.sym["$cont"] = outer_sym["$cont"]
        else:
            f.sym.pop("$cont", None)
        return None

    def loop_var_after(self, name, itype, node) -> Carried:
        """The value a dynamic loop's variable has after the loop, as in Python: that of the last
        iteration that ran, else its value before the loop. Without a value before the loop (Python
        would raise NameError after a loop that did not run), it is 0 there, as in Warp."""
        before = self.f.sym.get(name)
        if not isinstance(before, Var):
            # as in Warp: with no value before the loop, a loop that did not run leaves it 0
            return Carried(Var(itype, hint=name), self.const(0, itype), None, restore="unread")
        if before.type is not itype and not (before.weak and T.is_int(before.type)):
            raise self.err(node, f"the loop variable '{name}' is {T.type_name(before.type)} before the loop "
                                 f"and {T.type_name(itype)} in it; give the loop its own variable")
        init = self.convert(before, itype, node)
        return Carried(Var(itype, hint=name), init, None, restore="unread")

    def zero_value(self, t, node) -> Var:
        if T.is_scalar(t):
            return self.const(0, t)
        return self.emit("construct", t, [], node)


def _names_read_after(tree, node) -> set[str]:
    """The names that ``tree`` (a function) reads after the end of the statement ``node``, in source order."""
    end = (node.end_lineno, node.end_col_offset)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and (n.lineno, n.col_offset) > end}


def _leaves(v, path: tuple = ()):
    """(path, value) of each non-tuple element of ``v`` (a value or a nested tuple of them); none for None."""
    if isinstance(v, tuple):
        for i, x in enumerate(v):
            yield from _leaves(x, path + (i,))
    elif v is not None:
        yield path, v


def _leaf(v, path: tuple):
    """The element of ``v`` at ``path``, or None where ``v`` does not have that shape."""
    for i in path:
        if not (isinstance(v, tuple) and i < len(v)):
            return None
        v = v[i]
    return v


def _set_leaf(v, path: tuple, x):
    """``v`` with its element at ``path`` replaced by ``x`` (``x`` itself for the empty path)."""
    if not path:
        return x
    return v[:path[0]] + (_set_leaf(v[path[0]], path[1:], x),) + v[path[0] + 1:]


def _tree(leaves: dict):
    """The value or nested tuple whose elements are ``leaves`` ({path: value}, as ``_leaves`` gives them)."""
    if () in leaves:
        return leaves[()]
    n = 1 + max(path[0] for path in leaves)
    return tuple(_tree({p[1:]: v for p, v in leaves.items() if p[0] == i}) for i in range(n))


def _callable_in_kernel(obj) -> bool:
    """A func or builtin, which a local may name (``f = my_func; f(x)``)."""
    from .kernel import Function
    return isinstance(obj, (Function, BuiltinRef, GradOf))

_KERNEL_RETURNS = ("Warp kernels cannot return values. Write results to output arguments, and omit the return "
                   "annotation or use `-> None`.")


def _annotation_name(a) -> str:
    """An annotation as a message shows it: ``int``, ``int16``, ``tuple[int, vec3f]``."""
    if isinstance(a, tuple):
        return f"tuple[{', '.join(_annotation_name(x) for x in a)}]"
    if typing.get_origin(a) is tuple:
        return _annotation_name(typing.get_args(a))
    if a in (int, float, bool):
        return a.__name__
    if isinstance(a, T.ArrayType) and not isinstance(a, T.FixedArrayType):
        return f"Array[{T.type_name(a.dtype)}]"  # Warp's name of an array type
    return T.type_name(a)
