"""Codegen: typed SSA IR -> one C++ source per module, with a forward and an adjoint entry point
per kernel, shared by the CPU and CUDA targets (only the entry-point wrappers differ). A
``subarray`` op (``a[i]`` of an N-d array) is a view of the remaining dimensions, a ``slice`` op
(``a[lo:hi:step]``) a strided view of some rows; the gradient of a view is the same view of the array's
grad buffer.

The adjoint body first replays the forward (array stores and atomics are skipped: their effect is
already in memory; those into an array read back after the write run again, into the tape's copy of it) and then walks the statements in reverse, accumulating ``a<id> += ...`` into
the adjoint of every value (each starts at -0, ``cpp.adj_zero``, so the first accumulation compiles to an
assignment). Dynamic loops are reversed one iteration at a time; the values of the
carried variables at iteration k are recovered in closed form (range induction variables, break
flags) or by replaying the loop from its start, so no per-iteration storage is needed.

Each op kind's forward and adjoint code sits in ``codegen_ops.py``; this file walks the blocks, loops
and branches around them and assembles the kernel's entry points.
"""

from __future__ import annotations

import math

from .. import types as T
from . import ir
from .codegen_ops import op_code
from .cpp import PARAM_PREFIX, adj_zero, cfield, ctype, is_diff, literal, native_name
from .ir import Block, If, Loop, Op, Var

PACKED_FORWARD_MAX_OPS = 400
# 400, not 200: the cloth's solve_bending (394 ops) gets its packed adjoint, 7.6% fewer instructions than the
# strided one (callgrind) for about 0.4 s more g++ CPU on the solver's module (3.5 s -> 3.9 s)
PACKED_BACKWARD_MAX_OPS = 400
# A library of many small kernels (more than PACKED_MODULE_MAX_KERNELS kernels whose bodies, entry points
# aside, come to more than PACKED_MODULE_MAX_CHARS characters of C++: test files, Warp's among them) gets
# no packed variants at all. They were 43% of g++'s time on xsim's 114-kernel, 588 kB gradient test module
# (15.0 s CPU, 8.6 s without); a solver's modules (at most 5 kernels, up to 471 kB) keep theirs.
PACKED_MODULE_MAX_CHARS = 150_000
PACKED_MODULE_MAX_KERNELS = 32
# The op kinds of a kernel whose adjoint may run two threads interleaved (KernelCodegen.two_thread_adjoint):
# their replay writes no memory and their reverse pass writes only gradient buffers. No custom op, even a
# func_grad body without loops or stores: the cloth's solve_distance_into_positions (207 ops) took 1.12x the
# time with both allowed (prof_bwd, alternating runs, 1 thread, 2026-11-25); the 12% it gained earlier was
# measured while func_grad adjoints started at +0 (now -0: Calls.adjoint_start).
TWO_THREAD_OPS = frozenset({"call", "construct", "cast", "extract", "insert", "row", "set_row", "field_get",
                            "field_set", "load", "store", "atomic", "tid", "shape", "select", "and", "or",
                            "identity"})
TWO_THREAD_MAX_OPS = 200
# Builtins that are calls into the C math library (native/xsim_math.h, xsim_mathlib.h): the compiler can neither
# vectorize a loop around them (contraction and libmvec's other roundings are off) nor schedule across them.
LIBM_CALLS = frozenset({"sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "exp", "log",
                        "log2", "log10", "pow", "cbrt", "erf", "erfc", "erfinv", "erfcinv"})
CHECKPOINTS = 32  # carried-value checkpoints per dynamic loop in the adjoint (per thread, on the stack)


class KernelCodegen:
    """Generates the C++ of one kernel from its IR."""

    def __init__(self, kir: ir.KernelIR, debug: bool = False):
        self.k = kir
        self.debug = debug
        self.name = kir.name
        self.array_ids: dict[str, int] = {}
        self.lane = ""  # suffix of every C++ name of a thread's values: the two-thread adjoint's second is "_1"
        self.two_thread = False  # whether the adjoint has a two-thread body (set by generate)
        self.labels = ir.ArrayLabels(kir)
        self.grad_expr: dict[int, str] = {}  # a traced array or struct -> the C++ of its gradient
        self.tid_vars = []
        self.strided_views: set[int] = set()  # slice views (and views of them): never packed
        for p in kir.params:
            if p.var.id in self.labels.traced:
                self.grad_expr[p.var.id] = f"G.{PARAM_PREFIX}{p.name}"
        self.defs = {}
        for s in ir.walk(kir.body):
            if isinstance(s, Op):
                if s.out is not None:
                    self.defs[s.out.id] = s
                if s.kind == "tid":
                    self.tid_vars.append(s.out)
                if s.kind == "slice" or s.kind == "subarray" and s.args[0].id in self.strided_views:
                    self.strided_views.add(s.out.id)
                if s.out is not None and s.out.id in self.labels.traced:
                    self.grad_expr[s.out.id] = self.grad_of_part(s)
        self.shared_arrays = self._shared_arrays(kir)
        self.strided_rows = self._strided_rows(kir)

    # -- names ---------------------------------------------------------------------------------

    def v(self, var: Var) -> str:
        return f"v{var.id}{self.lane}"

    def a(self, var: Var) -> str:
        return f"a{var.id}{self.lane}"

    def tid(self, dim: int) -> str:
        return f"tid_{dim}{self.lane}"

    def grad_of_part(self, op: Op) -> str:
        """The C++ of the gradient of a traced view or field (``op.out``): the same part of its base's (of
        a struct with a field set, its base's: the arrays read through it are base's)."""
        if op.kind == "call":  # a grad_view call (mesh_get): its native twin gives the gradient views
            return f"xs::{op.attrs['grad_view']}({self.v(op.args[0])})"
        g = self.grad_expr[op.args[0].id]
        if op.kind == "field_set":
            return g
        if op.kind == "slice":
            return self.slice_expr(g, op)
        if op.kind == "subarray":
            return f"xs::subarray({g}, {', '.join(f'(int64_t){self.v(i)}' for i in op.args[1:])})"
        if op.kind == "load":  # an element of an array of structs holding arrays: its gradient mirror's
            return self.access(op.args[0], op.args[1:], op.out.type, op.line, desc=g)
        return f"{g}.{cfield(op.attrs['field'])}"

    def array_id(self, arr: Var) -> int:
        return self.array_ids.setdefault(self.labels.label(arr), len(self.array_ids))

    def access(self, arr: Var, idx: list[Var], elem_t, line: int, desc: str | None = None, contig=True) -> str:
        d = desc or self.v(arr)
        ids = ", ".join(f"(int64_t){self.v(i)}" for i in idx)
        ct = ctype(elem_t)
        if self.debug:
            return f"xs::at_chk<{ct}>({d}, {self.array_id(arr)}, {line}, {ids})"
        if arr.id in self.strided_views:  # a slice's rows are strided even when its array is packed
            return f"xs::at<{ct}>({d}, {ids})"
        return f"xs::at_sel<XS_CONTIG, {ct}>({d}, {ids})"

    # -- declarations ---------------------------------------------------------------------------

    def declarations(self, adjoint: bool) -> list[str]:
        out = []
        seen = set()
        for p in self.k.params:
            expr = f"P.{PARAM_PREFIX}{p.name}"
            out.append(f"const {ctype(p.type)}& {self.v(p.var)} = {expr};")
            seen.add(p.var.id)
            if adjoint and is_diff(p.type):
                out.append(f"{ctype(p.type)} {self.a(p.var)} = {adj_zero(p.type)};")
        for s in ir.walk(self.k.body):
            if isinstance(s, Op) and s.kind == "local_array":  # the storage of a stack array (see codegen_ops)
                out.append(f"{ctype(s.out.type.dtype)} s{s.out.id}[{math.prod(s.attrs['shape'])}];")
        for var in self.all_vars():
            if var.id in seen:
                continue
            seen.add(var.id)
            if isinstance(var.type, T.ArrayType):
                out.append(f"{ctype(var.type)} {self.v(var)} = {{}};")
                continue
            init = literal(var.const, var.type) if var.is_const else "{}"
            out.append(f"{ctype(var.type)} {self.v(var)} = {init};")
            if adjoint and is_diff(var.type):
                out.append(f"{ctype(var.type)} {self.a(var)} = {adj_zero(var.type)};")
        return out

    def all_vars(self, block: Block | None = None):
        """Every value of the kernel (of ``block`` when given), each once."""
        found = {}

        def add(v):
            if isinstance(v, Var) and v.id not in found:
                found[v.id] = v
        for s in ir.walk(self.k.body if block is None else block):
            if isinstance(s, Op):
                for x in s.args:
                    add(x)
                add(s.out)
                if s.kind == "grad_of":
                    for x in (*s.attrs["params"], *s.attrs["outs"], s.attrs["result"]):
                        add(x)
                if s.kind == "custom":
                    for x in (*s.attrs["results"], *s.attrs["adj_rets"], s.attrs.get("replay_out")):
                        add(x)
                    for x, acc in s.attrs["accums"]:
                        add(x)
                        add(acc)
            elif isinstance(s, If):
                add(s.cond)
                for o, x, y in s.phis:
                    add(o)
                    add(x)
                    add(y)
            elif isinstance(s, Loop):
                add(s.cond)
                for c in s.carried:
                    add(c.var)
                    add(c.init)
                    add(c.next)
        return found.values()

    # -- forward ----------------------------------------------------------------------------------

    def forward(self, block: Block, replay: bool, out: list[str], ind: str):
        for s in block.stmts:
            if isinstance(s, Op):
                op_code(s.kind).forward(self, s, replay, out, ind)
            elif isinstance(s, If):
                out.append(f"{ind}if ({self.v(s.cond)}) {{")
                self.forward(s.then, replay, out, ind + "    ")
                for o, x, _ in s.phis:
                    out.append(f"{ind}    {self.v(o)} = {self.v(x)};")
                out.append(f"{ind}}} else {{")
                self.forward(s.orelse, replay, out, ind + "    ")
                for o, _, y in s.phis:
                    out.append(f"{ind}    {self.v(o)} = {self.v(y)};")
                out.append(f"{ind}}}")
            elif isinstance(s, Loop):
                self.forward_loop(s, replay, out, ind)

    def loop_update(self, loop: Loop, out, ind):
        for c in loop.carried:
            out.append(f"{ind}const {ctype(c.var.type)} n{c.var.id} = {self.v(c.next)};")
        for c in loop.carried:
            out.append(f"{ind}{self.v(c.var)} = n{c.var.id};")

    def forward_loop(self, loop: Loop, replay: bool, out, ind):
        for c in loop.carried:
            out.append(f"{ind}{self.v(c.var)} = {self.v(c.init)};")
        if replay:
            out.append(f"{ind}n_iter{loop.id} = 0;")
        out.append(f"{ind}for (;;) {{")
        inner = ind + "    "
        self.forward(loop.cond_block, replay, out, inner)
        out.append(f"{inner}if (!{self.v(loop.cond)}) break;")
        self.forward(loop.body, replay, out, inner)
        if replay:
            out.append(f"{inner}++n_iter{loop.id};")
        out.append(f"{inner}{{")
        self.loop_update(loop, out, inner + "    ")
        out.append(f"{inner}}}")
        out.append(f"{ind}}}")

    def slice_expr(self, base: str, op: Op) -> str:
        """The C++ view a ``slice`` op takes of array ``base``: per subscript a ``slice_dim`` (a slice keeps
        its dimension) or a ``take_dim`` (an index drops it)."""
        expr, operands, dim = base, iter(op.args[1:]), 0
        for part in op.attrs["parts"]:
            if part[0] == "i":
                expr = f"xs::take_dim({expr}, {dim}, (int64_t){self.v(next(operands))})"
                continue
            lo, hi, step = (f"(int64_t){self.v(next(operands))}" for _ in range(3))
            expr = f"xs::slice_dim({expr}, {dim}, {lo}, {hi}, {step}, {str(part[1]).lower()}, {str(part[2]).lower()})"
            dim += 1
        return expr

    def path_expr(self, base: str, op: Op, comps: list[Var]) -> str:
        expr = base
        it = iter(comps)
        for kind, name in op.attrs["path"]:
            if kind == "field":
                expr = f"{expr}.{cfield(name)}"
            else:
                expr = f"xs::comp({expr}, {self.v(next(it))})"
        return expr

    # -- reverse ----------------------------------------------------------------------------------

    def reverse(self, block: Block, out: list[str], ind: str):
        for s in reversed(block.stmts):
            if isinstance(s, Op):
                op_code(s.kind).adjoint(self, s, out, ind)
            elif isinstance(s, If):
                out.append(f"{ind}if ({self.v(s.cond)}) {{")
                for o, x, _ in s.phis:
                    if is_diff(o.type):
                        out.append(f"{ind}    xs::accum({self.a(x)}, {self.a(o)});")
                self.reverse(s.then, out, ind + "    ")
                out.append(f"{ind}}} else {{")
                for o, _, y in s.phis:
                    if is_diff(o.type):
                        out.append(f"{ind}    xs::accum({self.a(y)}, {self.a(o)});")
                self.reverse(s.orelse, out, ind + "    ")
                out.append(f"{ind}}}")
            elif isinstance(s, Loop):
                self.reverse_loop(s, out, ind)

    def reverse_loop(self, loop: Loop, out, ind):
        i2 = ind + "    "
        k, lid = f"k{loop.id}", loop.id
        replay = any(c.restore == "replay" for c in loop.carried)
        if replay:
            # checkpoint the carried values every `stride` iterations, so that recovering the
            # values of iteration k replays at most one stride instead of the whole loop
            out.append(f"{ind}stride{lid} = (n_iter{lid} + {CHECKPOINTS} - 1) / {CHECKPOINTS}; "
                       f"if (stride{lid} < 1) stride{lid} = 1;")
            for c in loop.carried:
                out.append(f"{ind}{self.v(c.var)} = {self.v(c.init)};")
            out.append(f"{ind}for (int64_t j{lid} = 0; j{lid} < n_iter{lid}; ++j{lid}) {{")
            out.append(f"{i2}if (j{lid} % stride{lid} == 0) {{")
            for c in loop.carried:
                out.append(f"{i2}    ck{lid}_{c.var.id}[j{lid} / stride{lid}] = {self.v(c.var)};")
            out.append(f"{i2}}}")
            self.replay_iteration(loop, out, i2)
            out.append(f"{ind}}}")
        out.append(f"{ind}for (int64_t {k} = n_iter{lid} - 1; {k} >= 0; --{k}) {{")
        if replay:
            # from the checkpoint before k, replay up to and including iteration k: one copy of the body
            out.append(f"{i2}const int64_t c{lid} = {k} / stride{lid};")
            for c in loop.carried:
                out.append(f"{i2}{self.v(c.var)} = ck{lid}_{c.var.id}[c{lid}];")
            out.append(f"{i2}for (int64_t j{lid} = c{lid} * stride{lid}; ; ++j{lid}) {{")
            self.forward(loop.cond_block, True, out, i2 + "    ")
            self.forward(loop.body, True, out, i2 + "    ")
            out.append(f"{i2}    if (j{lid} == {k}) break;")
            out.append(f"{i2}    {{")
            self.loop_update(loop, out, i2 + "        ")
            out.append(f"{i2}    }}")
            out.append(f"{i2}}}")
        else:
            for c in loop.carried:
                if c.restore == "induction":
                    _, start, step = loop.induction
                    out.append(f"{i2}{self.v(c.var)} = ({ctype(c.var.type)})({self.v(start)} + {k} * "
                               f"{self.v(step)});")
                else:  # a flag (false while the body runs) or a value the body does not read
                    out.append(f"{i2}{self.v(c.var)} = {{}};")
            self.forward(loop.cond_block, True, out, i2)
            self.forward(loop.body, True, out, i2)
        for var in ir.defined_vars(loop.body):
            if is_diff(var.type):
                out.append(f"{i2}{self.a(var)} = {adj_zero(var.type)};")
        diff = [c for c in loop.carried if is_diff(c.var.type)]
        for c in diff:
            out.append(f"{i2}const {ctype(c.var.type)} t{c.var.id} = {self.a(c.var)};")
        for c in diff:
            out.append(f"{i2}{self.a(c.var)} = {adj_zero(c.var.type)};")
        for c in diff:
            out.append(f"{i2}xs::accum({self.a(c.next)}, t{c.var.id});")
        self.reverse(loop.body, out, i2)
        out.append(f"{ind}}}")
        for c in diff:
            out.append(f"{ind}xs::accum({self.a(c.init)}, {self.a(c.var)}); {self.a(c.var)} = {adj_zero(c.var.type)};")

    def replay_iteration(self, loop: Loop, out, ind):
        """One iteration of ``loop`` without stores (its condition first: it may rebind names the body
        reads, as ``hash_grid_query_next(query, index)`` does), then the carried update."""
        self.forward(loop.cond_block, True, out, ind)
        self.forward(loop.body, True, out, ind)
        out.append(f"{ind}{{")
        self.loop_update(loop, out, ind + "    ")
        out.append(f"{ind}}}")

    def exclusive(self, arr: Var, idx: list[Var]) -> bool:
        """True when no other thread can touch the element: ``arr`` is one of ``strided_rows``, or the
        leading indices are this thread's own tid (``a[i]``, or a row ``a[i, k]`` of a 1-d launch)
        and every access of the array (by its label: however a kernel reaches it) is so indexed. Never
        through a sub-array view: its indices are not the array's leading ones."""
        if arr.id in self.labels.view_base or "[]" in self.labels.label(arr):  # elements' arrays may be one
            return False
        if arr.id in self.strided_rows:
            return True
        if self.labels.label(arr) in self.shared_arrays:
            return False
        return self.own_row(idx)

    def own_row(self, idx: list[Var]) -> bool:
        tids = self.tid_vars
        return bool(tids) and len(idx) >= len(tids) and all(i is t for i, t in zip(idx, tids))

    def _shared_arrays(self, kir: ir.KernelIR) -> set[str]:
        """Labels of the arrays some access of which is not at this thread's own tid."""
        out = set()
        for s in ir.walk(kir.body):
            if isinstance(s, Op) and s.kind in ("subarray", "slice"):
                out.add(self.labels.label(s.args[0]))  # a view reaches rows of other threads through its own indices
            elif isinstance(s, Op) and s.kind in ir.TILE_ACCESSES:
                out.add(self.labels.label(s.args[0]))  # a tile spans other threads' elements
            elif isinstance(s, Op) and s.kind in ("load", "store", "atomic", "grad_add") and s.args:
                n = s.attrs.get("ndim", len(s.args) - 1) if s.kind != "load" else len(s.args) - 1
                if not self.own_row(s.args[1:1 + n]):
                    out.add(self.labels.label(s.args[0]))
        return out

    def _affine_tid(self, var: Var) -> tuple[int, int] | None:
        """(a, b) when ``var`` is ``a * tid + b`` of a 1-d launch with compile-time ints a, b, else None."""
        if any(var is t for t in self.tid_vars):
            return 1, 0
        op = self.defs.get(var.id)
        if op is None or op.kind != "call" or len(op.args) != 2 or op.attrs["overload"].native not in ("mul", "add"):
            return None
        consts = [x.const for x in op.args if x.is_const and type(x.const) is int]
        rest = [self._affine_tid(x) for x in op.args if not (x.is_const and type(x.const) is int)]
        if len(consts) != 1 or len(rest) != 1 or rest[0] is None:
            return None
        (a, b), c = rest[0], consts[0]
        return (a * c, b * c) if op.attrs["overload"].native == "mul" else (a, b + c)

    def _strided_rows(self, kir: ir.KernelIR) -> set[int]:
        """Ids of the array parameters that every access indexes first by ``a * tid + b`` with one
        ``a`` and ``0 <= b < a`` (``entries[2 * c]``, ``entries[2 * c + 1]``) in a 1-d launch: thread
        t owns rows a t .. a t + a - 1, so their adjoints add without atomics. Any other use of an
        array (an argument of a call, an array that is not a parameter) disqualifies it."""
        tid_ops = [s for s in ir.walk(kir.body) if isinstance(s, Op) and s.kind == "tid"]
        if not tid_ops or any(s.attrs.get("ndim") != 1 for s in tid_ops):
            return set()
        params = {p.var.id for p in kir.params if isinstance(p.type, T.ArrayType)}
        strides: dict[int, set] = {}
        bad = set()
        for s in ir.walk(kir.body):
            if not isinstance(s, Op):
                continue
            for pos, x in enumerate(s.args):
                if not isinstance(x.type, T.ArrayType):
                    continue
                if x.id not in params:
                    return set()  # an array from a struct field or a select: give up on the whole kernel
                form = self._affine_tid(s.args[1]) if pos == 0 and s.kind in ("load", "store", "atomic") \
                    and len(s.args) > 1 else None
                if form is None or not 0 <= form[1] < form[0]:
                    bad.add(x.id)
                else:
                    strides.setdefault(x.id, set()).add(form[0])
        return {i for i, a in strides.items() if i not in bad and len(a) == 1}

    # -- assembly ----------------------------------------------------------------------------------

    def tid_setup(self, ind: str, t: str = "t") -> list[str]:
        n, r = self.k.tid_dims, f"r_{self.lane}"
        if n <= 1:
            return [f"{ind}const int64_t {self.tid(0)} = {t};"]
        lines = [f"{ind}int64_t {r} = {t};"]
        for d in reversed(range(n)):
            lines.append(f"{ind}const int64_t {self.tid(d)} = {r} % D.shape[{d}]; {r} /= D.shape[{d}];")
        return lines

    def packed_variants(self) -> tuple[bool, bool]:
        """Whether the forward and backward bodies get a second, packed-array instantiation. It pays
        for small streaming kernels (vectorised loads); for large bodies it would only double the
        compile time, so they keep the strided accessors, which are valid for packed arrays too."""
        forward = sum(1 for _ in ir.walk(self.k.body, ("fwd",)))  # a custom gradient's body is the adjoint's
        size = sum(1 for _ in ir.walk(self.k.body))
        return forward <= PACKED_FORWARD_MAX_OPS, size <= PACKED_BACKWARD_MAX_OPS

    def two_thread_adjoint(self, target: str) -> bool:
        """Whether the CPU adjoint also gets a body for two consecutive threads: both replays, then
        both reverse passes (``two_thread_backward``). A kernel calling the C math library (sin, exp:
        ``LIBM_CALLS``) is never vectorized, and one thread's adjoint is a long chain of dependent
        operations waiting on its replay's calls, longer than the core's out-of-order window reaches:
        one thread at a time leaves the core mostly idle. Two interleaved, bench/vec3_backward.py's
        backward took 11-15% less time, with the same instructions. Every operation of a thread runs as
        before, so its gradient keeps its bits. Each thread's reverse pass still runs in thread order;
        what moves is the second thread's replay, ahead of the first's reverse pass, so only kernels
        whose replay writes nothing and whose reverse pass writes only gradient buffers get it (no
        dynamic loop, no custom or native code, no stores or atomics replayed into the tape's copy),
        only where the launch's gradient buffers overlap none of its arrays (``disjoint_check``), and
        only small bodies: the second copy costs registers and compile time (g++ took 0.4-0.7 s more
        per kernel of bench/kernels_compile.py when every one of them had it, which is why kernels
        without such calls, which gain less, keep one thread at a time)."""
        if target != "cpu" or self.debug or self.k.adjoint_error is not None:
            return False
        for p in self.k.params:
            t = p.type
            if isinstance(t, T.IndexedArrayType) or T.is_struct(t) and t._has_arrays:
                return False
        size, libm = 0, False
        for s in ir.walk(self.k.body):
            size += 1
            if isinstance(s, Loop):
                return False
            if isinstance(s, Op):
                if s.kind not in TWO_THREAD_OPS or s.attrs.get("replayed"):
                    return False
                libm = libm or s.kind == "call" and s.attrs["overload"].native in LIBM_CALLS
        return libm and size <= TWO_THREAD_MAX_OPS

    def disjoint_check(self) -> str:
        """C++ that is true when no gradient buffer of the launch overlaps an array it reads (a
        gradient passed as an input): then no reverse pass writes what a replay reads."""
        arrays = [p for p in self.k.params if isinstance(p.type, T.ArrayType)]
        diff = [p for p in arrays if is_diff(p.type.dtype)]
        return " && ".join(
            f"xs::disjoint(P.{PARAM_PREFIX}{p.name}, {p.type.ndim}, sizeof({ctype(p.type.dtype)}), "
            f"G.{PARAM_PREFIX}{g.name}, {g.type.ndim}, sizeof({ctype(g.type.dtype)}))"
            for p in arrays for g in diff) or "true"

    def adjoint_body(self) -> tuple[list[str], list[str], list[str]]:
        """The adjoint's declarations, replay and reverse pass of one thread (names suffixed by ``lane``)."""
        rep: list[str] = []
        self.forward(self.k.body, True, rep, "    ")
        rev: list[str] = []
        self.reverse(self.k.body, rev, "    ")
        decl = ["    " + d for d in self.declarations(adjoint=True)]
        return decl, rep, rev

    def two_thread_backward(self) -> list[str]:
        """The adjoint of threads t and t + 1: both replays, then both reverse passes."""
        first = self.adjoint_body()
        self.lane = "_1"
        try:
            second = self.adjoint_body()
            tid_second = self.tid_setup("    ", "t + 1")
        finally:
            self.lane = ""
        name = self.name
        return (["template <bool XS_CONTIG>",
                 (f"XS_FUNC void {name}_backward2(const {name}_args& P, const {name}_args& G, int64_t t, "
                  "const xs::launch_dims& D) {"), "    (void)D; (void)G;"]
                + self.tid_setup("    ") + tid_second + first[0] + second[0]
                + first[1] + second[1] + first[2] + second[2] + ["}"])

    def generate(self, target: str = "cpu") -> str:
        """The kernel's forward body and, where it has one, its adjoint, as one C++ text."""
        forward, backward = self.generate_halves(target)
        return forward + ("\n" + backward if backward else "")

    def generate_halves(self, target: str = "cpu") -> tuple[str, str]:
        """The C++ of the kernel's forward body, and of its adjoint ("" where it has none): a CPU module
        compiles the two as separate libraries (``cpu.build``). Both come from one pass, so the array ids of
        debug-mode reports are the same in each."""
        name = self.name
        self.two_thread = self.two_thread_adjoint(target)  # the entry points read it (module_sources)
        fwd: list[str] = []
        self.forward(self.k.body, False, fwd, "    ")
        forward = ["template <bool XS_CONTIG>",
                   f"XS_FUNC void {name}_forward(const {name}_args& P, int64_t t, const xs::launch_dims& D) {{",
                   "    (void)D;"]
        forward += self.tid_setup("    ")
        forward += ["    " + d for d in self.declarations(adjoint=False)]
        forward += fwd
        forward.append("}")
        body: list[str] = []
        if self.k.adjoint_error is None:
            decl, rep, rev = self.adjoint_body()
            body += ["template <bool XS_CONTIG>",
                     (f"XS_FUNC void {name}_backward(const {name}_args& P, const {name}_args& G, int64_t t, "
                     "const xs::launch_dims& D) {"), "    (void)D; (void)G;"]
            body += self.tid_setup("    ")
            body += decl
            for lp in ir.walk(self.k.body):
                if isinstance(lp, Loop):
                    body.append(f"    int64_t n_iter{lp.id} = 0, stride{lp.id} = 1; (void)stride{lp.id};")
                    if any(c.restore == "replay" for c in lp.carried):
                        body += [f"    {ctype(c.var.type)} ck{lp.id}_{c.var.id}[{CHECKPOINTS}];" for c in lp.carried]
            body += rep + rev
            body.append("}")
            if self.two_thread:
                body += self.two_thread_backward()
        return "\n".join(forward), "\n".join(body)


def param_struct(name: str, params) -> str:
    fields = "\n".join(f"    {ctype(p.type)} {PARAM_PREFIX}{p.name};" for p in params) or "    char unused_;"
    return f"struct {name}_args {{\n{fields}\n}};"


def struct_definition(t) -> str:
    fields = []
    accums = []
    atomics = []
    for name, ft in t._fields.items():
        fname = cfield(name)
        fields.append(f"    {ctype(ft)} {fname};")
        if not isinstance(ft, T.ArrayType):
            accums.append(f"xs::accum(d.{fname}, s.{fname});")
            scalar = ft if T.is_scalar(ft) else getattr(ft, "_scalar", None)
            if ft is T.bool_:  # a flag has no sum (and CUDA no atomic add of bools)
                continue
            if scalar is not None and T.is_int(scalar) and scalar._np.itemsize < 4:
                # CUDA has no atomic add of 8/16-bit ints: read, combine and write, as Warp's += on them
                atomics.append(f"xs::accum(p->{fname}, v.{fname});")
            else:
                atomics.append(f"xs::grad_add(&p->{fname}, v.{fname});")
    c = t._ctype
    # The field accumulations are qualified: for a nested struct field, an unqualified call would
    # find both xs::accum and (by argument-dependent lookup) its global twin, an ambiguity.
    # atomic_add(array of structs, i, value) calls xs::atomic_add qualified, so it has an xs twin too.
    # The global-namespace twins are what the gradient templates of xsim_core.h (grad_add,
    # grad_add_exclusive, defined before any struct) find, by argument-dependent lookup, for
    # arrays of structs.
    return (f"struct {c} {{\n" + "\n".join(fields) + "\n};\n"
            f"namespace xs {{ XS_FUNC void accum({c}& d, const {c}& s) {{ "
            + " ".join(accums) + " (void)d; (void)s; } }\n"
            f"XS_FUNC void accum({c}& d, const {c}& s) {{ xs::accum(d, s); }}\n"
            f"namespace xs {{ XS_FUNC {c} atomic_add({c}* p, const {c}& v) {{ {c} old = *p; {' '.join(atomics)} "
            "(void)v; return old; } }\n"
            f"XS_FUNC {c} atomic_add({c}* p, const {c}& v) {{ return xs::atomic_add(p, v); }}")


# Debug mode: a thread stops at the first reported error (an out-of-bounds index), so a huge launch
# with a bad index ends at once instead of running to the end. Volatile: other threads set it.
_STOP_ON_ERROR = "if (*(volatile int32_t*)&xs_error.code) break; "


def _shape_refusal(params, checks) -> str:
    """The C++ condition under which a launch indexes past an array that every thread indexes by its
    ``tid()``: ``checks`` are ``KernelIR.tid_indexed``'s [parameter index, axis, tid component], compared
    with the launch shape ``D`` (padded with 1s) and the argument struct ``P``. The same test as
    ``launch._shape_test``, made where it costs the launch nothing."""
    return " || ".join(f"D.shape[{d}] > P.{PARAM_PREFIX}{params[i].name}.shape[{axis}]" for i, axis, d in checks)


def _cpu_entry(name: str, kind: str, packed: bool = True, debug: bool = False,
               two_thread: str | None = None, shape_refusal: str = "") -> list[str]:
    """One CPU entry point, taking the launch buffer of ``launch.cpu_buffer``: launch shape (4 x
    int64), thread count (int64), OpenMP threads and packed flag (2 x int32), the argument struct at
    byte 48 and, for the adjoint, the gradient struct at the next 8-byte boundary.

    A launch the pacer gives one thread (``threads.Pacer``: its work, measured per kernel, is too small to
    wake the workers for) runs serially without entering OpenMP (whose setup costs about a microsecond
    even when it decides not to fork); others get one static chunk per thread, however few threads the
    launch has (a few hundred rigid contact pairs can be milliseconds of work). The range function
    copies the argument structs into locals, so array stores cannot alias them and g++ keeps scalars
    and data pointers in registers. Its packed variant counts threads in int32 (what tid() is in the
    language), which keeps array indices affine in the loop counter, so g++ vectorizes the loop;
    launches beyond int32 take the strided variant, which is valid for packed arrays too. ``two_thread``:
    for an adjoint with a two-thread body (``KernelCodegen.two_thread_adjoint``), the C++ condition
    under which the packed variant runs its threads two at a time.

    The entry returns 0, or 1 without running a thread when bit 1 of the packed flag asks for the shape
    check and ``shape_refusal`` (``_shape_refusal``) holds: the CPU fast path (``launch._launch_fast``)
    checks a launch's shapes here rather than in Python, where one call of the test cost about 0.1 us."""
    adj = kind == "backward"
    rng = f"{name}_{kind}_range"
    g_param, g_copy, g_arg = ((f"const {name}_args& G0, ", f" const {name}_args G = G0;", "G, ") if adj
                              else ("", "", ""))
    call = f"(P, {g_arg}D, b, e)"
    stop = _STOP_ON_ERROR if debug else ""
    out = ["template <bool XS_CONTIG>",
           (f"static __attribute__((noinline)) void {rng}(const {name}_args& P0, {g_param}"
            "const xs::launch_dims& D0, int64_t b, int64_t e) {"),
           f"    const {name}_args P = P0;{g_copy} const xs::launch_dims D = D0;"]
    out.append("    if constexpr (XS_CONTIG) {")
    if two_thread is None:
        out.append(f"        for (int32_t t = (int32_t)b; t < (int32_t)e; ++t) {{ {stop}{name}_{kind}<true>(P, {g_arg}t, D); }}")
    else:  # the packed variant only: the strided one would cost a third copy of the body to compile
        out += ["        int32_t t = (int32_t)b;",
                f"        if (e - b > 1 && ({two_thread}))",
                f"            for (; t + 1 < (int32_t)e; t += 2) {{ {name}_{kind}2<true>(P, {g_arg}t, D); }}",
                f"        for (; t < (int32_t)e; ++t) {{ {name}_{kind}<true>(P, {g_arg}t, D); }}"]
    out += ["    } else {",
            f"        for (int64_t t = b; t < e; ++t) {{ {stop}{name}_{kind}<false>(P, {g_arg}t, D); }}",
            "    }",
            "}",
           f'extern "C" XS_EXPORT int32_t {name}_cpu_{kind}(const char* L) {{',
           f"    xs::launch_dims D; int64_t n; int32_t cfg[2]; {name}_args P;" + (f" {name}_args G;" if adj else ""),
           "    __builtin_memcpy(&D, L, 32); __builtin_memcpy(&n, L + 32, 8); __builtin_memcpy(cfg, L + 40, 8);",
           "    __builtin_memcpy(&P, L + 48, sizeof P);"]
    if adj:
        out.append("    __builtin_memcpy(&G, L + 48 + ((sizeof P + 7) & ~(size_t)7), sizeof G);")
    # without a packed variant, never name it: naming it would instantiate it
    dispatch = f"if (contig) {rng}<true>{call}; else {rng}<false>{call};" if packed else f"{rng}<false>{call};"
    if shape_refusal:
        out.append(f"    if ((cfg[1] & 2) && ({shape_refusal})) return 1;")
    out += [f"    const bool contig = {'(cfg[1] & 1) && n <= INT32_MAX' if packed else 'false'}; (void)contig;",
            "    const int nt = cfg[0] > 1 && n > 64 ? cfg[0] : 1;  // a chunk is a multiple of 64 threads",
            "    if (nt == 1) {",
            f"        int64_t b = 0, e = n; {dispatch}",
            "        return 0;",
            "    }",
            "    const int64_t chunk = ((n + nt - 1) / nt + 63) / 64 * 64;  // vector loops start aligned",
            "    #pragma omp parallel for schedule(static, 1) num_threads(nt)",
            "    for (int c = 0; c < nt; ++c) {",
            "        const int64_t b = c * chunk, e = b + chunk < n ? b + chunk : n;",
            f"        if (b < e) {{ {dispatch} }}",
            "    }",
            "    return 0;",
            "}"]
    return out


def entry_points(name: str, has_adjoint: bool, target: str, packed: tuple[bool, bool] = (True, True),
                 debug: bool = False, grid_stride: bool = True, two_thread: str | None = None,
                 shape_refusal: str = "", half: str = "both") -> str:
    """The thin per-target wrappers: an OpenMP loop on the CPU, a grid-stride loop on CUDA (or with
    ``grid_stride`` False one index per thread, the grid covering the launch).
    ``packed`` says whether the forward/backward bodies get their packed-array variant; ``two_thread``
    and ``shape_refusal`` (CPU): see ``_cpu_entry``; ``half`` (CPU): "forward" or "backward" for that
    entry point alone (``HALVES``)."""
    if target == "cpu":
        out = _cpu_entry(name, "forward", packed[0], debug, shape_refusal=shape_refusal) if half != "backward" else []
        if has_adjoint and half != "forward":
            out += _cpu_entry(name, "backward", packed[1], debug, two_thread)
        return "\n".join(out)
    # a launch stops at the first out-of-bounds report: the loop breaks, a lone index returns
    stop = (_STOP_ON_ERROR if grid_stride else _STOP_ON_ERROR.replace("break", "return")) if debug else ""
    loop = ("    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (int64_t)gridDim.x * "
            "blockDim.x) {") if grid_stride else \
        "    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n    if (t < n) {"
    out = [f'extern "C" __global__ void {name}_cuda_forward({name}_args P, xs::launch_dims D, int64_t n, int contig) {{',
           loop,
           (f"        {stop}if (contig) {name}_forward<true>(P, t, D); else {name}_forward<false>(P, t, D);" if packed[0]
            else f"        {stop}{name}_forward<false>(P, t, D);"),
           "    }", "}"]
    if has_adjoint:
        out += [(f'extern "C" __global__ void {name}_cuda_backward({name}_args P, {name}_args G, xs::launch_dims D, '
                "int64_t n, int contig) {"),
                loop,
                (f"        {stop}if (contig) {name}_backward<true>(P, G, t, D); else {name}_backward<false>(P, G, t, D);"
                 if packed[1] else f"        {stop}{name}_backward<false>(P, G, t, D);"),
                "    }", "}"]
    return "\n".join(out)


PRELUDE = """#include "xsim.h"
#if defined(XS_CUDA)
#define XS_EXPORT
#else
#define XS_EXPORT __attribute__((visibility("default")))
#endif
"""


def native_definitions(kernel_irs: list[ir.KernelIR]) -> list[str]:
    """The C++ functions of the ``func_native`` snippets the kernels call, each once: the forward
    with the snippet as its body, and ``adj_`` taking the inputs, their adjoints by reference and
    ``adj_ret``."""
    out, seen = [], set()
    for kir in kernel_irs:
        for s in ir.walk(kir.body):
            if not (isinstance(s, Op) and s.kind == "native") or id(s.attrs["fn"]) in seen:
                continue
            fn = s.attrs["fn"]
            seen.add(id(fn))
            name, ret = native_name(fn), ctype(fn.ret) if fn.ret is not None else "void"
            params = ", ".join(f"{ctype(t)} {n}" for n, t in fn.params)
            out.append(f"static XS_FUNC {ret} {name}({params}) {{\n{fn.snippet}\n}}")
            if fn.adj_snippet is not None:
                adj = [f"{ctype(t)} {n}" for n, t in fn.params] + [f"{ctype(t)}& adj_{n}" for n, t in fn.params]
                adj.append(f"{ret if fn.ret is not None else 'int32_t'} adj_ret")
                out.append(f"static XS_FUNC void adj_{name}({', '.join(adj)}) {{\n{fn.adj_snippet}\n}}")
    return out


HALVES = ("both", "forward", "backward")  # what of a module's kernels a source holds (module_sources)


def module_sources(kernel_irs: list[ir.KernelIR], structs: list, debug: bool, target: str,
                   part_chars: int, half: str = "both") -> tuple[list[str], dict[str, list[str]]]:
    """The C++ source of one module for ``target`` ("cpu" or "cuda") as translation units of about
    ``part_chars`` characters of kernel code each (0: one unit), kernels kept whole and in order, each
    unit with the prelude, structs and native funcs its kernels use; and for each kernel the array labels
    by the ids its debug-mode bounds checks report. ``half`` (CPU): "forward" for the forward entry points
    only, "backward" for the adjoints only (``module_halves``)."""
    sources, labels = module_halves(kernel_irs, structs, debug, target, part_chars, (half,))
    return sources[0], labels


def module_halves(kernel_irs: list[ir.KernelIR], structs: list, debug: bool, target: str, part_chars: int,
                  halves: tuple[str, ...]) -> tuple[list[list[str]], dict[str, list[str]]]:
    """``module_sources`` for each of ``halves`` (``HALVES``) from one codegen pass: each half's code is the
    code that half has in the whole ("both"), which variants a kernel gets decided from the whole, and the
    array ids of debug-mode reports are the same in each. A kernel without an adjoint is not in "backward"."""
    for half in halves:
        if half not in HALVES:
            raise ValueError(f"module_sources(): half must be one of {HALVES}, got {half!r}")
    labels, bodies = {}, []
    for kir in kernel_irs:
        cg = KernelCodegen(kir, debug)
        fwd, bwd = cg.generate_halves(target)
        bodies.append((kir, cg, param_struct(kir.name, kir.params) + "\n\n", fwd, bwd))
        labels[kir.name] = sorted(cg.array_ids, key=cg.array_ids.get)
    whole = sum(len(head) + len(fwd) + len(bwd) + bool(bwd) for _, _, head, fwd, bwd in bodies)
    packed = len(bodies) <= PACKED_MODULE_MAX_KERNELS or whole <= PACKED_MODULE_MAX_CHARS
    picked = {"both": lambda f, b: f + ("\n" + b if b else ""), "forward": lambda f, b: f,
              "backward": lambda f, b: b}
    out = []
    for half in halves:
        kernels = [(kir, head + picked[half](fwd, bwd) + "\n\n" +
                    entry_points(kir.name, kir.adjoint_error is None, target,
                                 cg.packed_variants() if packed else (False, False), debug, kir.grid_stride,
                                 cg.disjoint_check() if cg.two_thread else None,
                                 _shape_refusal(kir.params, kir.tid_indexed), half))
                   for kir, cg, head, fwd, bwd in bodies if half != "backward" or kir.adjoint_error is None]
        out.append(_units(kernels, structs, part_chars))
    return out, labels


def _units(kernels: list, structs: list, part_chars: int) -> list[str]:
    """``kernels`` ((KernelIR, code) in order) as translation units of about ``part_chars`` characters of
    code each (0: one), each with the prelude, the structs and the native funcs its kernels use."""
    groups: list[list] = [[]]
    size = 0
    for kir, text in kernels:
        if part_chars and groups[-1] and size + len(text) > part_chars:
            groups.append([])
            size = 0
        groups[-1].append((kir, text))
        size += len(text)
    head = [PRELUDE] + [struct_definition(t) for t in structs]
    return ["\n\n".join(head + native_definitions([k for k, _ in g]) + [t for _, t in g]) + "\n" for g in groups]
