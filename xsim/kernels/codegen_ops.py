"""The C++ of each IR op kind, its forward and its adjoint side by side: one ``OpCode`` per kind in ``OPS``.

``forward`` writes the op's statement (``replay``: inside the adjoint's replay of the forward, where
array stores and atomics are skipped unless marked ``replayed``); ``adjoint`` accumulates the adjoint
of its output into those of its inputs (``a<id> += ...``). Both append lines to ``out`` at indent
``ind`` and use the kernel's ``KernelCodegen`` (``cg``) for value names, array access and nested blocks.

Op kinds (see ``ir.Op``): call, construct, cast, extract, insert, row, set_row, field_get,
field_set, load, store, atomic, tile_load, tile_store, tile_atomic, slice, subarray, tid, shape, select,
and, or, identity, custom, native, grad_add (a func_grad body's ``adjoint[arr][i] += v``: adds into the
array's gradient; only in grad blocks, which run backward), grad_of (``grad(f)(x)``: the func's derivative
computed in the forward code; kernels without an adjoint).
"""

from __future__ import annotations

import math

from .. import types as T
from .cpp import adj_zero, cfield, ctype, is_diff, native_name
from .ir import Op

OPS: dict[str, OpCode] = {}


def handles(*kinds: str):
    """Registers the decorated ``OpCode`` class as the code of the op ``kinds``."""
    def register(cls):
        for k in kinds:
            OPS[k] = cls()
        return cls
    return register


def op_code(kind: str) -> OpCode:
    """The code of op kind ``kind``."""
    code = OPS.get(kind)
    if code is None:
        raise AssertionError(f"unknown op {kind}")
    return code


class OpCode:
    """An op kind's forward statement and its adjoint (none by default: not differentiable)."""

    def forward(self, cg, op: Op, replay: bool, out: list[str], ind: str):
        raise NotImplementedError

    def adjoint(self, cg, op: Op, out: list[str], ind: str):
        pass


@handles("call")
class Call(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, args, v = op.out, op.args, cg.v
        if cg.debug and op.attrs["overload"].name in ("div", "floordiv", "mod") and T.is_int(args[-1].type):
            out.append(f"{ind}xs::check_divisor({v(args[-1])}, {op.line});")
        out.append(f"{ind}{v(o)} = xs::{op.attrs['overload'].native}({', '.join(v(a) for a in args)});")

    def adjoint(self, cg, op, out, ind):
        o, args, v, a = op.out, op.args, cg.v, cg.a
        ov = op.attrs["overload"]
        if not ov.differentiable or not is_diff(o.type) or not any(is_diff(x.type) for x in args):
            return
        # an argument without adjoint (an integer: noise's state, pnoise's periods) gets a {} placeholder
        call_args = [v(x) for x in args] + [v(o)] + [a(x) if is_diff(x.type) else "{}" for x in args] + [a(o)]
        out.append(f"{ind}xs::adj_{ov.native}({', '.join(call_args)});")


@handles("construct")
class Construct(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = {self.expr(cg, op.out.type, op.args)};")

    @staticmethod
    def expr(cg, t, args) -> str:
        if not args:
            return f"{ctype(t)}{{}}"
        vals = [cg.v(a) for a in args]
        if t._kind in ("vector", "quat"):
            return f"{ctype(t)}{{{{{', '.join(vals)}}}}}"
        if t._kind == "matrix":
            r, c = t._shape
            rows = ", ".join("{" + ", ".join(vals[i * c:(i + 1) * c]) + "}" for i in range(r))
            return f"{ctype(t)}{{{{{rows}}}}}"
        if t._kind == "transform":
            return f"{ctype(t)}{{{{{{{', '.join(vals[:3])}}}}}, {{{{{', '.join(vals[3:])}}}}}}}"
        raise AssertionError(t)

    def adjoint(self, cg, op, out, ind):
        o = op.out
        if not is_diff(o.type) or T.is_struct(o.type):
            return
        for i, x in enumerate(op.args):
            out.append(f"{ind}{cg.a(x)} += xs::comp({cg.a(o)}, {i});")


@handles("cast")
class Cast(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = xs::cast_to<{ctype(op.out.type)}>({cg.v(op.args[0])});")

    def adjoint(self, cg, op, out, ind):
        o, x = op.out, op.args[0]
        if is_diff(o.type) and is_diff(x.type):
            out.append(f"{ind}xs::accum({cg.a(x)}, xs::cast_to<{ctype(x.type)}>({cg.a(o)}));")


@handles("extract")
class Extract(OpCode):
    def forward(self, cg, op, replay, out, ind):
        v, args = cg.v, op.args
        out.append(f"{ind}{v(op.out)} = xs::comp({v(args[0])}, {v(args[1])});")

    def adjoint(self, cg, op, out, ind):
        if is_diff(op.out.type):
            out.append(f"{ind}xs::comp({cg.a(op.args[0])}, {cg.v(op.args[1])}) += {cg.a(op.out)};")


@handles("insert")
class Insert(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, args, v = op.out, op.args, cg.v
        out.append(f"{ind}{v(o)} = {v(args[0])}; xs::comp({v(o)}, {v(args[1])}) = {v(args[2])};")

    def adjoint(self, cg, op, out, ind):
        o, args, v, a = op.out, op.args, cg.v, cg.a
        if is_diff(o.type):
            out.append(f"{ind}{a(args[2])} += xs::comp({a(o)}, {v(args[1])}); "
                       f"xs::comp({a(o)}, {v(args[1])}) = {adj_zero(o.type._scalar)}; xs::accum({a(args[0])}, {a(o)});")


@handles("row")
class Row(OpCode):
    def forward(self, cg, op, replay, out, ind):
        v, args = cg.v, op.args
        out.append(f"{ind}{v(op.out)} = xs::row({v(args[0])}, {v(args[1])});")

    def adjoint(self, cg, op, out, ind):
        o, args = op.out, op.args
        if is_diff(o.type):
            out.append(f"{ind}for (int j = 0; j < {o.type._length}; ++j) "
                       f"{cg.a(args[0])}.c[{cg.v(args[1])}][j] += {cg.a(o)}.c[j];")


@handles("set_row")
class SetRow(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, args, v = op.out, op.args, cg.v
        out.append(f"{ind}{v(o)} = {v(args[0])}; xs::set_row({v(o)}, {v(args[1])}, {v(args[2])});")

    def adjoint(self, cg, op, out, ind):
        o, args, v, a = op.out, op.args, cg.v, cg.a
        if is_diff(o.type):
            out.append(f"{ind}for (int j = 0; j < {args[2].type._length}; ++j) {{ "
                       f"{a(args[2])}.c[j] += {a(o)}.c[{v(args[1])}][j]; "
                       f"{a(o)}.c[{v(args[1])}][j] = {adj_zero(o.type._scalar)}; }} "
                       f"xs::accum({a(args[0])}, {a(o)});")


@handles("field_get")
class FieldGet(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = {cg.v(op.args[0])}.{cfield(op.attrs['field'])};")

    def adjoint(self, cg, op, out, ind):
        if is_diff(op.out.type):
            out.append(f"{ind}xs::accum({cg.a(op.args[0])}.{cfield(op.attrs['field'])}, {cg.a(op.out)});")


@handles("field_set")
class FieldSet(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, args, v = op.out, op.args, cg.v
        out.append(f"{ind}{v(o)} = {v(args[0])}; {v(o)}.{cfield(op.attrs['field'])} = {v(args[1])};")

    def adjoint(self, cg, op, out, ind):
        o, args, a = op.out, op.args, cg.a
        f = cfield(op.attrs["field"])
        if is_diff(args[1].type):
            out.append(f"{ind}xs::accum({a(args[1])}, {a(o)}.{f}); {a(o)}.{f} = {adj_zero(args[1].type)};")
        out.append(f"{ind}xs::accum({a(args[0])}, {a(o)});")


@handles("load")
class Load(OpCode):
    def forward(self, cg, op, replay, out, ind):
        arr, idx = op.args[0], op.args[1:]
        out.append(f"{ind}{cg.v(op.out)} = {cg.access(arr, idx, op.out.type, op.line)};")

    def adjoint(self, cg, op, out, ind):
        o, arr, idx = op.out, op.args[0], op.args[1:]
        g = cg.grad_expr.get(arr.id)
        if g is None or not is_diff(o.type):
            return
        target = cg.access(arr, idx, o.type, op.line, desc=g)
        out.append(f"{ind}{grad_add(cg, arr, idx, g, target, cg.a(o))}")


def grad_add(cg, arr, idx, g: str, target: str, value: str) -> str:
    """The C++ statement adding ``value`` to the gradient element ``target`` of ``arr`` (gradient
    descriptor ``g``): an atomic where threads can collide, else a plain add where the buffer exists."""
    if cg.exclusive(arr, idx):
        return f"xs::grad_add_exclusive({g}.data ? &({target}) : nullptr, {value});"
    return f"if ({g}.data) xs::grad_add(&({target}), {value});"


def write_operands(op: Op) -> tuple:
    """(array, indices, value, components) of a ``store``, ``atomic`` or ``grad_add`` op."""
    n = op.attrs["ndim"]
    return op.args[0], op.args[1:1 + n], op.args[1 + n], op.args[2 + n:]


def grad_element(cg, op: Op) -> tuple[str, str] | None:
    """The C++ of a ``store``'s or ``atomic``'s array gradient and of the written element in it; None
    when the array has no gradient buffer or the value no adjoint."""
    arr, idx, value, comps = write_operands(op)
    g = cg.grad_expr.get(arr.id)
    if g is None or not is_diff(value.type):
        return None
    return g, cg.path_expr(cg.access(arr, idx, arr.type.dtype, op.line, desc=g), op, comps)


@handles("store")
class Store(OpCode):
    def forward(self, cg, op, replay, out, ind):
        if replay and not op.attrs.get("replayed"):  # a replayed one writes the tape's copy of the array
            return
        arr, idx, value, comps = write_operands(op)
        target = cg.path_expr(cg.access(arr, idx, arr.type.dtype, op.line), op, comps)
        out.append(f"{ind}{target} = {cg.v(value)};")

    def adjoint(self, cg, op, out, ind):
        grad = grad_element(cg, op)
        if grad is not None:
            (g, target), (arr, _, value, _) = grad, write_operands(op)
            # the array's own flags say whether its gradient is retained (an indexed array's never is)
            flags = "0" if isinstance(arr.type, T.IndexedArrayType) else f"{cg.v(arr)}.flags"
            out.append(f"{ind}xs::grad_take({cg.a(value)}, {g}.data ? &({target}) : nullptr, {flags});")


@handles("atomic")
class Atomic(OpCode):
    def forward(self, cg, op, replay, out, ind):
        if replay and not op.attrs.get("replayed"):  # a replayed one writes the tape's copy of the array
            return
        arr, idx, value, comps = write_operands(op)
        operands = cg.v(value)
        if op.attrs["fn"] == "atomic_cas":  # its compare follows the value; its element is a scalar
            operands, comps = f"{cg.v(comps[0])}, {cg.v(value)}", []
        target = cg.path_expr(cg.access(arr, idx, arr.type.dtype, op.line), op, comps)
        out.append(f"{ind}{cg.v(op.out)} = xs::{op.attrs['fn']}(&({target}), {operands});")

    def adjoint(self, cg, op, out, ind):
        grad = grad_element(cg, op)
        if grad is None:
            return
        (g, target), (arr, idx, value, comps) = grad, write_operands(op)
        a, fn = cg.a, op.attrs["fn"]
        if fn == "atomic_add":
            out.append(f"{ind}if ({g}.data) xs::accum({a(value)}, {target});")
        elif fn == "atomic_sub":
            out.append(f"{ind}if ({g}.data) xs::accum({a(value)}, xs::neg({target}));")
        elif fn in ("atomic_min", "atomic_max"):  # to the value that ended up stored
            prim = cg.path_expr(cg.access(arr, idx, arr.type.dtype, op.line), op, comps)
            out.append(f"{ind}if ({g}.data) xs::adj_atomic_minmax({cg.v(value)}, {prim}, {a(value)}, {target});")


_TILE_NATIVE = {"tile_load": "tile_load", "tile_store": "tile_store", "tile_atomic": "tile_atomic_add"}


@handles(*_TILE_NATIVE)
class TileAccess(OpCode):
    """A tile's load from, store into or atomic add into an array (``builtins_tile.py``): args ``[array,
    offsets..., (tile)]``. The native functions take two offsets whatever the array's dimension (a 1-d
    array's in the second) and the dimension as a template argument; a store or atomic is skipped in the
    replay unless marked ``replayed``, as ``Store``'s and ``Atomic``'s are."""

    @staticmethod
    def call_args(cg, op) -> tuple[str, str]:
        arr = op.args[0]
        tile = op.out.type if op.kind == "tile_load" else op.args[-1].type
        offsets = [f"(int64_t){cg.v(x)}" for x in op.args[1:1 + arr.type.ndim]]
        if len(offsets) == 1:
            offsets = ["0", *offsets]
        return f"<{ctype(tile._dtype)}, {tile._rows}, {tile._cols}, {arr.type.ndim}>", ", ".join(offsets)

    def forward(self, cg, op, replay, out, ind):
        if replay and op.kind != "tile_load" and not op.attrs.get("replayed"):
            return
        targs, offsets = self.call_args(cg, op)
        args = [cg.v(op.args[0]), offsets] + ([cg.v(op.args[-1])] if op.kind != "tile_load" else [])
        result = f"{cg.v(op.out)} = " if op.out is not None else ""
        out.append(f"{ind}{result}xs::{_TILE_NATIVE[op.kind]}{targs}({', '.join(args)});")

    def adjoint(self, cg, op, out, ind):
        g = cg.grad_expr.get(op.args[0].id)
        moved = op.out if op.kind == "tile_load" else op.args[-1]  # the tile whose adjoint the array's meets
        if g is None or not is_diff(moved.type):
            return
        targs, offsets = self.call_args(cg, op)
        flags = f", {cg.v(op.args[0])}.flags" if op.kind == "tile_store" else ""  # grad_take keeps a retained grad
        out.append(f"{ind}xs::adj_{_TILE_NATIVE[op.kind]}{targs}({g}, {offsets}, {cg.a(moved)}{flags});")


@handles("slice")
class Slice(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = {cg.slice_expr(cg.v(op.args[0]), op)};")


@handles("array_ptr")
class ArrayPtr(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = (uint64_t){cg.v(op.args[0])}.data;")


@handles("array_from_ptr")
class ArrayFromPtr(OpCode):
    def forward(self, cg, op, replay, out, ind):
        t, v = op.out.type, cg.v
        dims = ", ".join(f"(int64_t){v(d)}" for d in op.args[1:])
        out.append(f"{ind}{v(op.out)} = xs::array_from_ptr<{ctype(t.dtype)}, {t.ndim}>({v(op.args[0])}, {dims});")


@handles("local_array")
class LocalArray(OpCode):
    """A stack array (``zeros(shape, dtype)`` in a kernel): its storage ``s<id>`` is declared with the
    kernel's values (``Codegen.declarations``), so views of it live as long as the thread; each time the
    op runs (once per loop iteration in a loop) the storage is zeroed again."""

    def forward(self, cg, op, replay, out, ind):
        t, shape, v = op.out.type, op.attrs["shape"], cg.v
        dims = ", ".join(str(n) for n in shape)
        out.append(f"{ind}for (int64_t k = 0; k < {math.prod(shape)}; ++k) s{op.out.id}[k] = {ctype(t.dtype)}{{}};")
        out.append(f"{ind}{v(op.out)} = xs::array_from_ptr<{ctype(t.dtype)}, {t.ndim}>((uint64_t)s{op.out.id}, "
                   f"{dims});")


@handles("subarray")
class Subarray(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, args, v = op.out, op.args, cg.v
        ids = ", ".join(f"(int64_t){v(i)}" for i in args[1:])
        if cg.debug:
            out.append(f"{ind}{v(o)} = xs::subarray_chk({v(args[0])}, {cg.array_id(args[0])}, {op.line}, {ids});")
        else:
            out.append(f"{ind}{v(o)} = xs::subarray({v(args[0])}, {ids});")


@handles("tid")
class Tid(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = (int32_t){cg.tid(op.attrs['dim'])};")


@handles("shape")
class Shape(OpCode):
    def forward(self, cg, op, replay, out, ind):
        out.append(f"{ind}{cg.v(op.out)} = (int32_t){cg.v(op.args[0])}.shape[{op.attrs['dim']}];")


@handles("select")
class Select(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, args, v = op.out, op.args, cg.v
        out.append(f"{ind}{v(o)} = {v(args[0])} ? {v(args[1])} : {v(args[2])};")

    def adjoint(self, cg, op, out, ind):
        o, args, a = op.out, op.args, cg.a
        if is_diff(o.type):
            out.append(f"{ind}if ({cg.v(args[0])}) xs::accum({a(args[1])}, {a(o)}); "
                       f"else xs::accum({a(args[2])}, {a(o)});")


@handles("and", "or")
class Logical(OpCode):
    def forward(self, cg, op, replay, out, ind):
        v, args = cg.v, op.args
        sym = "&&" if op.kind == "and" else "||"
        out.append(f"{ind}{v(op.out)} = {v(args[0])} {sym} {v(args[1])};")


@handles("identity")
class Identity(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o, v = op.out, cg.v
        out.append(f"{ind}{v(o)} = {{}}; for (int i = 0; i < {o.type._shape[0]}; ++i) {v(o)}.c[i][i] = 1;")


@handles("grad_add")
class GradAdd(OpCode):
    def forward(self, cg, op, replay, out, ind):
        arr, idx, value, _ = write_operands(op)
        g = cg.grad_expr.get(arr.id)
        if g is not None:
            target = cg.access(arr, idx, arr.type.dtype, op.line, desc=g)
            out.append(f"{ind}{grad_add(cg, arr, idx, g, target, cg.v(value))}")


@handles("grad_of")
class GradOf(OpCode):
    def forward(self, cg, op, replay, out, ind):
        """``grad(f)(args)``: the func's body and its reverse run right here, in a scope of their own whose
        adjoints start at zero (the result's at one); the outputs are the adjoints of the parameters."""
        params, body = op.attrs["params"], op.attrs["fwd"]
        inner = ind + "    "
        out.append(f"{ind}{{")
        ids = {p.id for p in params}
        for var in [*params, *(x for x in cg.all_vars(body) if x.id not in ids)]:
            if is_diff(var.type):
                out.append(f"{inner}{ctype(var.type)} {cg.a(var)} = {{}};")
        for p, x in zip(params, op.args):
            out.append(f"{inner}{cg.v(p)} = {cg.v(x)};")
        cg.forward(body, False, out, inner)
        out.append(f"{inner}{cg.a(op.attrs['result'])} = 1;")
        cg.reverse(body, out, inner)
        for p, o in zip(params, op.attrs["outs"]):
            out.append(f"{inner}{cg.v(o)} = {cg.a(p)};")
        out.append(f"{ind}}}")


@handles("custom")
class Custom(OpCode):
    def forward(self, cg, op, replay, out, ind):
        if replay and op.attrs.get("replay") is not None:  # a func_replay body stands in for the func
            cg.forward(op.attrs["replay"], True, out, ind)
            out.append(f"{ind}{cg.v(op.out)} = {cg.v(op.attrs['replay_out'])};")
        else:
            cg.forward(op.attrs["fwd"], replay, out, ind)

    def adjoint(self, cg, op, out, ind):
        o, v, a = op.out, cg.v, cg.a
        if op.attrs["grad"] is None:  # no func_grad: the adjoint of the func_replay body
            if is_diff(o.type):
                out.append(f"{ind}xs::accum({a(op.attrs['replay_out'])}, {a(o)});")
            cg.reverse(op.attrs["replay"], out, ind)
            return
        for r, adj_r in zip(op.attrs["results"], op.attrs["adj_rets"]):
            out.append(f"{ind}{v(adj_r)} = {a(r) if is_diff(r.type) else '{}'};")
        # the func_grad body runs once, in the backward pass: its array stores and atomics happen there
        cg.forward(op.attrs["grad"], False, out, ind)
        for x, acc in op.attrs["accums"]:
            out.append(f"{ind}xs::accum({a(x)}, {v(acc)});")


@handles("native")
class Native(OpCode):
    def forward(self, cg, op, replay, out, ind):
        o = op.out
        call = f"{native_name(op.attrs['fn'])}({', '.join(cg.v(x) for x in op.args)})"
        out.append(f"{ind}{cg.v(o)} = {call};" if o is not None else f"{ind}{call};")

    def adjoint(self, cg, op, out, ind):
        o, args, v, a = op.out, op.args, cg.v, cg.a
        if op.attrs["fn"].adj_snippet is None or not (
                any(is_diff(x.type) for x in args) or o is not None and is_diff(o.type)):
            return
        # parameters without an adjoint (integers) and a missing result get a local placeholder
        spare = [(x.type, f"nz{i}") for i, x in enumerate(args) if not is_diff(x.type)]
        if o is None or not is_diff(o.type):
            spare.append((o.type if o is not None else T.int32, "nzr"))
        adj = [a(x) if is_diff(x.type) else f"nz{i}" for i, x in enumerate(args)]
        adj.append(a(o) if o is not None and is_diff(o.type) else "nzr")
        decl = " ".join(f"{ctype(t)} {n}{{}};" for t, n in spare)
        out.append(f"{ind}{{ {decl} adj_{native_name(op.attrs['fn'])}("
                   f"{', '.join([v(x) for x in args] + adj)}); }}")
