"""Frontend: a kernel's Python source -> typed SSA IR (``ir.py``).

Names map to SSA values in a symbol table; assignment rebinds a name, so aliases (``w = v``) and
component writes (``w[0] = s`` makes a new value) are correct by construction. ``@xsim.func``
calls are inlined at their call site with their arguments' types (so funcs are generic for free),
``if`` merges the two symbol tables with phis, and ``break``/``continue``/``return`` become
boolean flags that guard the statements after them, leaving every block with a single exit.
"""

from __future__ import annotations

import ast
import builtins as _pybuiltins
import inspect
import math
import textwrap
import types as _pytypes
from typing import Any

import numpy as np

from .. import types as T
from ..errors import CompileError
from . import ir
from .builtins import BUILTINS, resolve_overload
from .ir import Block, Carried, If, Loop, Op, Var

MAX_UNROLL = 16
MAX_UNROLL_OPS = 1500

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "mul", ast.BitAnd: "bit_and", ast.BitOr: "bit_or",
           ast.BitXor: "bit_xor", ast.LShift: "lshift", ast.RShift: "rshift"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
_ATOMICS = ("atomic_add", "atomic_sub", "atomic_min", "atomic_max")
_UNSUPPORTED = {
    ast.Lambda: "lambdas", ast.ListComp: "list comprehensions", ast.SetComp: "set comprehensions",
    ast.DictComp: "dict comprehensions", ast.GeneratorExp: "generator expressions", ast.Try: "try/except",
    ast.With: "with blocks", ast.Global: "global statements", ast.Nonlocal: "nonlocal statements",
    ast.Delete: "del", ast.ClassDef: "class definitions", ast.Import: "imports", ast.ImportFrom: "imports",
    ast.FunctionDef: "nested function definitions", ast.Yield: "yield", ast.Await: "await",
    ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets", ast.JoinedStr: "f-strings", ast.Raise: "raise",
    ast.AsyncFor: "async for", ast.AsyncWith: "async with", ast.Starred: "star expressions",
    ast.NamedExpr: "walrus assignment", ast.Assert: "assert",
}


class Ref:
    """A compile-time Python object met in a kernel: a module, func, type, builtin, constant."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


class _Source:
    """Where one function's code lives: its AST, file, line offset and the names it can see."""

    def __init__(self, pyfunc):
        self.pyfunc = pyfunc
        lines, first = inspect.getsourcelines(pyfunc)
        self.file = inspect.getsourcefile(pyfunc) or "<unknown>"
        self.line0 = first - 1
        self.lines = lines
        src = textwrap.dedent("".join(lines))
        self.indent = len(lines[0]) - len(lines[0].lstrip())
        tree = ast.parse(src)
        self.tree = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        self.names = dict(pyfunc.__globals__)
        if pyfunc.__closure__:
            for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
                try:
                    self.names[name] = cell.cell_contents
                except ValueError:
                    pass

    def error(self, node, msg: str) -> CompileError:
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + self.indent
        src_line = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return CompileError(msg, self.file, self.line0 + line, col, src_line)

    def lineno(self, node) -> int:
        return self.line0 + getattr(node, "lineno", 1)


class _Frame:
    """The state of one function body being built: its symbols, flags and the loop it is in."""

    def __init__(self, source: _Source, is_kernel: bool):
        self.src = source
        self.is_kernel = is_kernel
        self.sym: dict[str, Any] = {}
        self.flags: list[str] = ["$ret"]
        self.loop_vars: set[str] = set()
        self.ret_type = None


def _false():
    return Var(T.bool_, const=False)


class Frontend:
    """Builds the IR of one kernel (and everything it calls)."""

    def __init__(self, kernel_func, options: dict | None = None):
        self.options = options or {}
        self.block = Block()
        self.frames: list[_Frame] = []
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.skipped_funcs: set[str] = set()
        self.tid_dims = 0
        self.loop_count = 0
        self.inline_depth = 0
        self.param_names: dict[int, str] = {}
        self.kernel_func = kernel_func

    # ------------------------------------------------------------------------------------------
    # entry point

    def build_kernel(self, name: str) -> ir.KernelIR:
        src = _Source(self.kernel_func)
        frame = _Frame(src, is_kernel=True)
        self.frames.append(frame)
        params = []
        ann = annotations(self.kernel_func)
        for a in src.tree.args.args:
            if a.arg not in ann:
                raise src.error(a, f"kernel parameter '{a.arg}' needs a type annotation")
            t = _resolve_annotation(ann[a.arg])
            if t is None:
                raise src.error(a, f"kernel parameter '{a.arg}' has unsupported type {ann[a.arg]!r}; expected "
                                   "a scalar, vector, matrix, quat, transform, struct or array type")
            v = Var(t, hint=a.arg)
            self.param_names[v.id] = a.arg
            frame.sym[a.arg] = v
            params.append(ir.Param(a.arg, t, v))
        if src.tree.args.vararg or src.tree.args.kwarg or src.tree.args.kwonlyargs:
            raise src.error(src.tree, "kernels take plain positional parameters only")
        frame.sym["$ret"] = _false()
        self.stmts(src.tree.body)
        self.frames.pop()
        return ir.KernelIR(name=name, params=params, body=self.block, tid_dims=self.tid_dims,
                           reads=self.reads, writes=self.writes, source_file=src.file,
                           first_line=src.line0 + 1, skipped_funcs=sorted(self.skipped_funcs))

    @property
    def f(self) -> _Frame:
        return self.frames[-1]

    def err(self, node, msg) -> CompileError:
        return self.f.src.error(node, msg)

    # ------------------------------------------------------------------------------------------
    # emission helpers

    def emit(self, kind, out_type, args, node=None, **attrs) -> Var | None:
        out = Var(out_type) if out_type is not None else None
        line = self.f.src.lineno(node) if node is not None else 0
        self.block.stmts.append(Op(kind, out, list(args), attrs, line))
        return out

    def const(self, value, t=None) -> Var:
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
            return Var(t, const=py)
        raise TypeError(t)

    def convert(self, v: Var, t, node) -> Var:
        """Implicitly convert ``v`` to type ``t``: only weak literals (and identical types) convert."""
        if v.type is t:
            return v
        if v.weak and T.is_scalar(t):
            if T.is_int(t) and isinstance(v.const, float):
                raise self.err(node, f"cannot use the float literal {v.const!r} where {T.type_name(t)} is expected")
            if t is T.bool_:
                raise self.err(node, f"cannot use the number {v.const!r} where bool is expected")
            return self.const(v.const, t)
        if v.weak and T.is_composite(t):
            return self.emit("construct", t, [self.convert(v, t._scalar, node)] * T.num_components(t), node)
        raise self.err(node, f"type mismatch: expected {T.type_name(t)}, got {T.type_name(v.type)}")

    def cast(self, v: Var, t, node) -> Var:
        """Explicit conversion (``float(x)``, ``int(x)``, ``xsim.float64(x)``, ``vec3d(v)``)."""
        if v.type is t:
            return v
        if v.is_const and T.is_scalar(t) and T.is_scalar(v.type):
            return self.const(v.const if t is not T.bool_ else bool(v.const), t) if not (
                T.is_int(t) and isinstance(v.const, float)) else self.const(int(v.const), t)
        if T.is_scalar(t) and T.is_scalar(v.type) or (
                T.is_composite(t) and T.is_composite(v.type) and t._shape == v.type._shape):
            return self.emit("cast", t, [v], node)
        raise self.err(node, f"cannot convert {T.type_name(v.type)} to {T.type_name(t)}")

    def as_bool(self, v, node) -> Var:
        if not isinstance(v, Var):
            raise self.err(node, "expected a boolean condition")
        if v.type is T.bool_:
            return v
        if T.is_scalar(v.type):
            if v.is_const:
                return self.const(bool(v.const))
            return self.call_builtin("ne", [v, self.const(0)], node)
        raise self.err(node, f"a condition must be a bool or a number, got {T.type_name(v.type)}")

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
        if all(a.is_const and T.is_scalar(a.type) and a.type is not T.bool_ for a in args) and name in _PY_FOLD \
                and len({a.type for a in args}) == 1 and name in ("lt", "le", "gt", "ge", "eq", "ne"):
            return self.const(_PY_FOLD[name](*[a.const for a in args]))
        found = resolve_overload(name, [a.type for a in args])
        if found is None:
            given = ", ".join(T.type_name(a.type) for a in args)
            b = BUILTINS.get(name)
            expected = b.signatures() if b else "no such builtin"
            raise self.err(node, f"no overload of '{name}' takes ({given}); expected one of: {expected}")
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
        """The OR of the active exit flags (break/continue/return), or None outside any."""
        vals = [self.f.sym[n] for n in self.f.flags if n in self.f.sym]
        out = None
        for v in vals:
            if v.is_const and not v.const:
                continue
            if out is None:
                out = v
            elif v.is_const or out.is_const:
                out = v if out.is_const else out
            else:
                out = self.emit("or", T.bool_, [out, v])
        return out if out is not None else _false()

    def stmt(self, node):
        kind = type(node)
        if kind in _UNSUPPORTED:
            raise self.err(node, f"{_UNSUPPORTED[kind]} are not supported in kernels")
        method = getattr(self, "stmt_" + kind.__name__, None)
        if method is None:
            raise self.err(node, f"unsupported statement '{kind.__name__}' in a kernel")
        method(node)

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

    def cast_checked(self, v, t, node):
        if v.type is not t:
            raise self.err(node, f"type mismatch: annotated {T.type_name(t)}, got {T.type_name(v.type)}")
        return v

    def stmt_AugAssign(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, "unsupported in-place operator")
        target = node.target
        if isinstance(target, ast.Subscript) and _is_attr_chain(target.value):
            marker = self.expr(target.value)
            if isinstance(marker, Ref) and marker.obj is _ADJOINT:
                self.accumulate_adjoint(target, op, node)
                return
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            base = self.array_element_target(target)
            if base is not None and op in ("add", "sub"):
                arr, idx, path = base
                value = self.value(node.value)
                self.atomic("atomic_" + op, arr, idx, path, value, node)
                return
        current = self.value(target)
        rhs = self.value(node.value)
        self.assign(target, self.binop(op, current, rhs, node), node)

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            if target.id in self.f.loop_vars:
                raise self.err(target, f"cannot assign to the loop variable '{target.id}'")
            if isinstance(value, Ref):
                raise self.err(node, f"cannot assign {value.obj!r} to a variable inside a kernel")
            if isinstance(value, Var) and value.is_const and value.weak:
                value = Var(value.type, const=value.const, weak=True)
            self.f.sym[target.id] = value
        elif isinstance(target, ast.Tuple):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                n = len(value) if isinstance(value, tuple) else 1
                raise self.err(node, f"cannot unpack {n} value(s) into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            self.assign_component(target, self.single(value, node), node)
        else:
            raise self.err(target, "unsupported assignment target")

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
        if isinstance(target, ast.Attribute):
            if T.is_struct(t):
                ft = t._fields.get(target.attr)
                if ft is None:
                    raise self.err(target, f"struct {t.__name__} has no field '{target.attr}'")
                value = self.convert(value, ft, node) if not isinstance(ft, T.ArrayType) else value
                return self.emit("field_set", t, [base, value], node, field=target.attr)
            index = self.swizzle_index(t, target)
            value = self.convert(value, t._scalar, node)
            return self.emit("insert", t, [base, self.const(index, T.int32), value], node)
        idx = self.subscript_indices(target)
        if T.is_matrix(t) and len(idx) == 1:
            row = self.convert(value, T.vector(t._shape[1], t._scalar), node)
            return self.emit("set_row", t, [base, self.index_var(idx[0], target), row], node)
        flat = self.flat_component(t, idx, target)
        value = self.convert(value, t._scalar, node)
        return self.emit("insert", t, [base, flat, value], node)

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
                raise self.err(node, "a kernel cannot return a value (write the result into an output array)")
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
        if isinstance(t, tuple):
            if not isinstance(v, tuple) or len(v) != len(t):
                raise self.err(node, "return value does not match the annotated tuple")
            return tuple(self.convert_tree(x, y, node) for x, y in zip(v, t))
        if isinstance(v, tuple):
            raise self.err(node, f"returns a tuple but is annotated -> {T.type_name(t)}")
        return self.convert(v, t, node) if v.weak or v.type is t else self.cast_checked(v, t, node)

    # ------------------------------------------------------------------------------------------
    # loops

    def stmt_For(self, node):
        if node.orelse:
            raise self.err(node, "for/else is not supported")
        if not isinstance(node.target, ast.Name):
            raise self.err(node.target, "a for loop needs a single loop variable")
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
            raise self.err(it, "kernels loop only over range(...)")
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.err(it, "range() takes 1 to 3 positional arguments")
        args = [self.value(a) for a in it.args]
        for a, n in zip(args, it.args):
            if not T.is_int(a.type):
                raise self.err(n, f"range() needs integers, got {T.type_name(a.type)}")
        start, stop, step = (self.const(0), args[0], self.const(1)) if len(args) == 1 else (
            (args[0], args[1], self.const(1)) if len(args) == 2 else tuple(args))
        name = node.target.id
        if all(a.is_const for a in (start, stop, step)):
            if step.const == 0:
                raise self.err(it, "range() step must not be zero")
            values = range(start.const, stop.const, step.const)
            if len(values) <= MAX_UNROLL and self.try_unrolled_loop(name, values, node):
                return
        strong = next((a for a in (start, stop, step) if not a.weak), None)
        itype = strong.type if strong is not None else T.int32
        start, stop, step = (self.convert(a, itype, it) if a.weak else a for a in (start, stop, step))
        if len({start.type, stop.type, step.type}) != 1:
            raise self.err(it, "range() arguments must have one integer type")
        self.dynamic_loop(node, node.body, induction=(name, start, stop, step))

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
        f.sym.pop(name, None)
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
        assigned = _assigned_names(body)
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
        inits = {}
        for n in names + extra:
            init = f.sym.get(n)
            if n == "$retval" and init is None:
                if n not in types:
                    continue
                init = self.zero_value(types[n], node)
            if not isinstance(init, Var):
                continue
            t = types.get(n, init.type)
            if init.type is not t:
                init = self.convert(init, t, node) if init.weak else init
                if init.type is not t:
                    raise self.err(node, f"'{n}' is {T.type_name(init.type)} before the loop but "
                                         f"{T.type_name(t)} inside it; give it one type")
            inits[n] = init
        ind_var = None
        if induction is not None:
            iname, start, stop, step = induction
            ind_var = Var(start.type, hint=iname)
            carried.append(Carried(ind_var, start, None, restore="induction"))
        named: dict[str, Carried] = {}
        for n, init in inits.items():
            if trial and init.weak and n not in types:
                f.sym[n] = init  # first trial: let the literal meet the values it is combined with
                continue
            v = Var(init.type, hint=n if not n.startswith("$") else "")
            named[n] = Carried(v, init, None)
            carried.append(named[n])
            f.sym[n] = v
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
        new_types = {}  # the carried types a trial build found: a weak literal keeps the type it had
        for n in inits:
            nxt = f.sym.get(n)
            if not isinstance(nxt, Var):
                raise self.err(node, f"'{n}' must keep a value in every path through the loop")
            c = named.get(n)
            new_types[n] = (c.var.type if c is not None else inits[n].type) if nxt.weak else nxt.type
            if trial:
                continue
            if nxt.type is not c.var.type and nxt.weak:
                nxt = self.convert(nxt, c.var.type, node)
            if nxt.type is not c.var.type:
                raise self.err(node, f"'{n}' changes type inside the loop ({T.type_name(c.var.type)} -> "
                                     f"{T.type_name(nxt.type)})")
            c.next = nxt
        if trial and "$retval" not in inits and isinstance(f.sym.get("$retval"), Var):
            new_types["$retval"] = f.sym["$retval"].type
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
        for n, c in named.items():
            f.sym[n] = c.var
        if "$brk" in outer_sym:
            f.sym["$brk"] = outer_sym["$brk"]
        else:
            f.sym.pop("$brk", None)
        if "$cont" in outer_sym:
            f.sym["$cont"] = outer_sym["$cont"]
        else:
            f.sym.pop("$cont", None)
        return None

    def zero_value(self, t, node) -> Var:
        if T.is_scalar(t):
            return self.const(0, t)
        return self.emit("construct", t, [], node)

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
                             "assigned only in one branch or inside a loop is not defined after it)")

    def global_value(self, obj, node):
        if isinstance(obj, (bool, int, float, np.generic)) and not isinstance(obj, np.ndarray):
            return self.const(obj)
        return Ref(obj)

    def expr_Attribute(self, node):
        base = self.expr(node.value)
        if isinstance(base, Ref):
            obj = base.obj
            if not hasattr(obj, node.attr):
                raise self.err(node, f"{_describe(obj)} has no attribute '{node.attr}'")
            return self.global_value(getattr(obj, node.attr), node)
        if isinstance(base, tuple):
            raise self.err(node, "tuples have no attributes")
        t = base.type
        if isinstance(t, T.ArrayType):
            if node.attr == "shape":
                return tuple(self.emit("shape", T.int32, [base], node, dim=d) for d in range(t.ndim))
            raise self.err(node, f"arrays have no attribute '{node.attr}' in kernels (use .shape or len())")
        if T.is_struct(t):
            ft = t._fields.get(node.attr)
            if ft is None:
                raise self.err(node, f"struct {t.__name__} has no field '{node.attr}'")
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
        raise self.err(node, f"{T.type_name(t)} has no component '{node.attr}'")

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
                    raise self.err(node, f"index {v.const} out of range for {T.type_name(t)}")
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
            raise self.err(node, f"index {i.const} out of range for {T.type_name(t)} ({n} components)")
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

    def accumulate_adjoint(self, target, op, node):
        if op != "add" or not isinstance(target.slice, ast.Name):
            raise self.err(node, "write adjoint[x] += value, with x a parameter of the func")
        key = "$adj:" + target.slice.id
        if key not in self.f.sym:
            raise self.err(target, f"'{target.slice.id}' is not a differentiable parameter of the func")
        self.f.sym[key] = self.binop("add", self.f.sym[key], self.value(node.value), node)

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
            elif result.is_const or c.is_const:
                result = c if (result.is_const and result.const) else result
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
    # calls

    def expr_Call(self, node):
        fn = self.expr(node.func)
        if not isinstance(fn, Ref):
            raise self.err(node, "only funcs, builtins and types can be called in kernels")
        obj = fn.obj
        from .kernel import Function, Kernel  # the decorators' objects
        if isinstance(obj, Kernel):
            raise self.err(node, f"cannot call the kernel '{obj.key}' from a kernel; make it an @xsim.func")
        if isinstance(obj, Function):
            return self.call_func(obj, node)
        if isinstance(obj, BuiltinRef):
            return self.call_named_builtin(obj.name, node)
        if isinstance(obj, type) and (T.is_value_type(obj)):
            return self.construct(obj, node)
        if obj is T.vector or obj is T.matrix:
            return self.generic_composite(obj, node)
        if obj in (float, int, bool):
            args = self.plain_args(node)
            if len(args) != 1:
                raise self.err(node, f"{obj.__name__}() takes one argument")
            return self.cast(args[0], T.resolve(obj), node)
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
        return [self.value(a) for a in node.args]

    def call_named_builtin(self, name, node):
        special = getattr(self, "builtin_" + name, None)
        if special is not None:
            return special(node)
        if name not in BUILTINS:
            raise self.err(node, f"'{name}' is not a kernel builtin")
        args = self.plain_args(node)
        return self.call_builtin(name, args, node)

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

    def _atomic_call(self, name, node):
        args = [self.expr(a) for a in node.args]
        if node.keywords or len(args) < 3:
            raise self.err(node, f"{name}(array, index..., value) takes an array, its indices and a value")
        arr = args[0]
        if not (isinstance(arr, Var) and isinstance(arr.type, T.ArrayType)):
            raise self.err(node, f"{name}() needs an array as its first argument")
        idx = [self.index_var(self.single(i, node), node) for i in args[1:-1]]
        if len(idx) != arr.type.ndim:
            raise self.err(node, f"{name}() on a {arr.type.ndim}-d array needs {arr.type.ndim} indices")
        return self.atomic(name, arr, idx, [], self.single(args[-1], node), node)

    def builtin_atomic_add(self, node):
        return self._atomic_call("atomic_add", node)

    def builtin_atomic_sub(self, node):
        return self._atomic_call("atomic_sub", node)

    def builtin_atomic_min(self, node):
        return self._atomic_call("atomic_min", node)

    def builtin_atomic_max(self, node):
        return self._atomic_call("atomic_max", node)

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
        args = [self.value(a) for a in node.args]
        if size_kw not in kw:
            if make is T.matrix:
                raise self.err(node, "matrix() needs shape=(rows, cols)")
            if len(args) < 2:
                raise self.err(node, "vector() needs length= unless it is given its components")
            kw["length"] = len(args)
        dtype = kw.get("dtype")
        if dtype is None:
            strong = next((a.type for a in args if not a.weak), None)
            dtype = getattr(strong, "_scalar", strong) or T.float32
        try:
            t = make(kw[size_kw], dtype)
        except (TypeError, ValueError) as e:
            raise self.err(node, f"{make.__name__}(): {e}") from None
        return self.construct(t, node, args)

    def construct(self, t, node, args=None):
        """``vec3(x, y, z)``, ``vec3(s)``, ``vec3()``, ``vec3d(v)``, ``mat22(a, b, c, d)``,
        ``transform(p, q)``, ``MyStruct()``, and scalar casts like ``float64(x)``; ``args`` when
        the caller has already evaluated them."""
        if T.is_struct(t):
            if node.args:
                raise self.err(node, f"struct {t.__name__} is built with keyword arguments or none")
            v = self.emit("construct", t, [], node)
            for kw in node.keywords:
                if kw.arg not in t._fields:
                    raise self.err(kw, f"struct {t.__name__} has no field '{kw.arg}'")
                val = self.value(kw.value)
                ft = t._fields[kw.arg]
                v = self.emit("field_set", t, [v, self.convert(val, ft, kw) if not isinstance(ft, T.ArrayType)
                                               else val], node, field=kw.arg)
            return v
        args = self.plain_args(node) if args is None else args
        if T.is_scalar(t):
            if len(args) != 1:
                raise self.err(node, f"{T.type_name(t)}() takes one argument")
            return self.cast(args[0], t, node)
        n = T.num_components(t)
        s = t._scalar
        if not args:
            return self.emit("construct", t, [], node)
        if t._kind == "transform" and len(args) == 2:
            p = self.convert(args[0], T.vector(3, s), node) if args[0].weak else args[0]
            q = args[1]
            if p.type is not T.vector(3, s) or q.type is not T.quaternion(s):
                raise self.err(node, f"{T.type_name(t)}(p, q) needs a {T.type_name(T.vector(3, s))} and a "
                                     f"{T.type_name(T.quaternion(s))}")
            comps = [self.emit("extract", s, [p, self.const(i, T.int32)], node) for i in range(3)]
            comps += [self.emit("extract", s, [q, self.const(i, T.int32)], node) for i in range(4)]
            return self.emit("construct", t, comps, node)
        if len(args) == 1 and T.is_composite(args[0].type):
            a = args[0]
            if T.num_components(a.type) != n:
                raise self.err(node, f"cannot build {T.type_name(t)} from {T.type_name(a.type)}")
            return a if a.type is t else self.emit("cast", t, [a], node)
        if len(args) == 1 and t._kind in ("vector",):
            return self.emit("construct", t, [self.convert_or_cast(args[0], s, node)] * n, node)
        if T.is_matrix(t) and len(args) == t._shape[0] and all(T.is_vector(a.type) for a in args):
            raise self.err(node, f"build a matrix from vectors with matrix_from_rows(...) or "
                                 f"matrix_from_cols(...), or pass {n} scalars to {T.type_name(t)}()")
        if len(args) != n:
            raise self.err(node, f"{T.type_name(t)}() takes {n} components (or none), got {len(args)}")
        return self.emit("construct", t, [self.convert_or_cast(a, s, node) for a in args], node)

    def convert_or_cast(self, v, s, node):
        if v.type is s:
            return v
        if v.weak:
            return self.convert(v, s, node)
        raise self.err(node, f"component type mismatch: expected {T.type_name(s)}, got {T.type_name(v.type)}")

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
                        raise self.err(n, f"struct {t.__name__} has no field '{n.attr}'")
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

    # ------------------------------------------------------------------------------------------
    # funcs: inlined at the call site

    def call_func(self, func, node):
        args = [self.expr(a) for a in node.args]
        args = [a if isinstance(a, tuple) else self.single(a, node) for a in args]
        kw = {k.arg: self.value(k.value) for k in node.keywords}
        overload = func.resolve(args, kw)
        if overload is None:
            given = ", ".join(T.type_name(a.type) if isinstance(a, Var) else "tuple" for a in args)
            raise self.err(node, f"no overload of func '{func.key}' takes ({given}); expected "
                                 f"{func.signatures()}")
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
                v = self.convert(v, t, node) if v.weak else v
            frame.sym[name] = v
        frame.sym["$ret"] = _false()
        rt = ann.get("return")
        if rt is not None:
            frame.ret_type = _resolve_annotation(rt) if not isinstance(rt, tuple) else tuple(
                _resolve_annotation(x) for x in rt)
        if overload.custom_grad is not None or not overload.differentiable:
            return self.call_custom_grad(overload, frame, node)
        self.frames.append(frame)
        self.inline_depth += 1
        try:
            self.stmts(src.tree.body)
        finally:
            self.inline_depth -= 1
            self.frames.pop()
        result = frame.sym.get("$retval")
        if result is None:
            return Var(T.bool_, const=False) if rt is None else self.zero_value(frame.ret_type, node)
        return result

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
        if not isinstance(result, Var):
            what = "a custom gradient" if overload.differentiable else "differentiable=False"
            raise self.err(node, f"a func with {what} must return one value")
        if overload.custom_grad is None:
            self.block = outer
            self.skipped_funcs.add(overload.pyfunc.__qualname__)
            op = Op("custom", result, [], {"fwd": fwd, "grad": Block(), "adj_ret": Var(result.type, hint="adj_ret"),
                                           "accums": []}, self.f.src.lineno(node))
            self.block.stmts.append(op)
            return result
        # the grad body: params bound to the forward inputs and to the result's adjoint
        src = overload.custom_grad.source()
        gframe = _Frame(src, is_kernel=False)
        adj_ret = Var(result.type, hint="adj_ret")
        params = [a.arg for a in src.tree.args.args]
        extra = [p for p in params if p not in inputs]
        if len(extra) != 1:
            raise src.error(src.tree, "a func_grad takes the func's parameters plus one adjoint of the result")
        for p in params:
            gframe.sym[p] = inputs.get(p, adj_ret)
        gframe.sym["$ret"] = _false()
        grad = Block()
        self.block = grad
        diff_inputs = {n: v for n, v in inputs.items() if isinstance(v, Var) and not isinstance(v.type, T.ArrayType)}
        for n, v in diff_inputs.items():
            gframe.sym["$adj:" + n] = self.zero_value(v.type, node)
        self.frames.append(gframe)
        self.stmts(src.tree.body)
        self.frames.pop()
        self.block = outer
        accums = [(v, gframe.sym["$adj:" + n]) for n, v in diff_inputs.items()]
        op = Op("custom", result, [], {"fwd": fwd, "grad": grad, "adj_ret": adj_ret, "accums": accums},
                self.f.src.lineno(node))
        self.block.stmts.append(op)
        return result

    def adjoint_slot(self, node):
        raise self.err(node, "adjoint[...] can only be used as the target of += in a func_grad body")


def _is_attr_chain(node) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _assigned_names(body) -> set[str]:
    """Names a block of statements assigns (plain, augmented, component and tuple targets)."""
    out = set()
    for s in body:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
                root = n
                while isinstance(root, (ast.Subscript, ast.Attribute)):
                    root = root.value
                if isinstance(root, ast.Name):
                    out.add(root.id)
    return out


def annotations(pyfunc) -> dict:
    """A function's annotations as objects, also when its module uses
    ``from __future__ import annotations`` (they are then strings, evaluated in its globals)."""
    cached = getattr(pyfunc, "__xsim_annotations__", None)
    if cached is None:
        try:
            cached = inspect.get_annotations(pyfunc, eval_str=True)
        except Exception:  # a name the annotation uses is not defined: report it where it is used
            cached = dict(pyfunc.__annotations__)
        pyfunc.__xsim_annotations__ = cached
    return cached


def _resolve_annotation(a):
    if isinstance(a, str):
        return None
    a = T.resolve(a)
    if isinstance(a, T.ArrayType) or T.is_value_type(a):
        return a
    return None


def _describe(obj) -> str:
    if isinstance(obj, _pytypes.ModuleType):
        return f"module '{obj.__name__}'"
    return repr(obj)


class BuiltinRef:
    """What ``xsim.sin`` etc. are in Python: a name the frontend resolves to a builtin."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise TypeError(f"xsim.{self.name} can only be called inside an @xsim.kernel or @xsim.func")

    def __repr__(self):
        return f"<xsim builtin {self.name}>"


class _AdjointMarker:
    """``xsim.adjoint``: in a func_grad body, ``adjoint[x] += value`` accumulates x's gradient."""

    def __getitem__(self, item):
        raise TypeError("xsim.adjoint can only be used inside an @xsim.func_grad body")

    def __repr__(self):
        return "xsim.adjoint"


_ADJOINT = _AdjointMarker()


def _adjoint_marker():
    return _ADJOINT
