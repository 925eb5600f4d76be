"""Which of a kernel's input arrays its adjoint needs the values of, and when.

The tape refuses a backward pass when an array a launch read was overwritten before it (the adjoint would
replay the forward on the new values). That is only wrong where the adjoint uses those values: in
``y[i] = x[i] * c[i]`` the gradient of ``x`` needs ``c``'s values and that of ``c`` needs ``x``'s, so when ``c``
has no gradient, ``x`` may be overwritten freely (Warp's FFT examples reuse scratch arrays so). This module
finds, for each array label the kernel reads, the labels whose gradients need its values, or ``"*"`` where any
gradient does (its values steer indices, branches or loops). A label absent from the result is never needed.

It follows values forward from the loads: an op's result depends on its arguments' sources. An op whose adjoint
reads no argument values (sums, component moves, loads and stores, casts, the tile transforms) adds nothing;
a product's adjoint reads each factor for the other's gradient; any other differentiable call reads all its
arguments for all their gradients. Non-differentiable values (ints, bools) that an op takes are needed always.
Kernels with custom or native adjoint code get ``None``: every read is needed.
"""

from __future__ import annotations

from .. import types as T
from . import ir
from .cpp import is_diff
from .ir import If, Loop, Op

ALWAYS = "*"

# op kinds whose adjoint reads none of their arguments' values (array element and component moves)
_VALUE_FREE = frozenset({"construct", "extract", "insert", "row", "set_row", "field_get", "field_set", "identity",
                         "cast", "slice", "subarray", "tid", "shape", "select", "and", "or", *ir.ARRAY_ACCESSES})
# calls whose adjoint reads no argument values (linear maps)
_LINEAR = frozenset({"add", "sub", "neg", "pos", "tile_fft", "tile_ifft", "tile_transpose", "tile_sum",
                     "tile_of_value", "tile_of_components"})
# calls linear in each of their two arguments: each factor's gradient reads the other factor
_BILINEAR = frozenset({"mul", "mat_vec", "vec_mat", "cw_mul", "dot", "cross", "outer"})
# op kinds this analysis does not follow (their adjoint is code it cannot read)
_OPAQUE = frozenset({"custom", "native", "grad_of", "grad_add"})


def adjoint_reads(kir: ir.KernelIR) -> dict[str, list[str]] | None:
    """{read label: the labels whose gradients need its values, or ["*"]}, or None when unknown (all needed)."""
    label = ir.ArrayLabels(kir).label
    src: dict[int, frozenset] = {}
    needs: dict[str, set] = {}

    def of(v) -> frozenset:
        return src.get(v.id, frozenset())

    def need(labels, receivers) -> None:
        for name in labels:
            needs.setdefault(name, set()).update(receivers)

    def flow(v, sources) -> bool:
        old = of(v)
        new = old | sources
        src[v.id] = new
        return new != old

    def visit(block) -> bool:
        changed = False
        for s in block.stmts:
            if isinstance(s, Op):
                if s.kind in _OPAQUE:
                    raise _Opaque
                values = [a for a in s.args if not isinstance(a.type, T.ArrayType)]
                for a in values:
                    if not is_diff(a.type):
                        need(of(a), {ALWAYS})
                sources = frozenset().union(*(of(a) for a in values))
                if s.kind in ir.ARRAY_LOADS:
                    sources |= {label(s.args[0])}
                if s.out is not None:
                    changed |= flow(s.out, sources)
                diff = [a for a in values if is_diff(a.type)]
                if s.kind == "call":
                    ov = s.attrs["overload"]
                    if not ov.differentiable or ov.native in _LINEAR:
                        continue
                    if ov.native in _BILINEAR and len(diff) == 2:
                        need(of(diff[0]), of(diff[1]))
                        need(of(diff[1]), of(diff[0]))
                        continue
                elif s.kind == "atomic" and s.attrs["fn"] in ("atomic_add", "atomic_sub"):
                    continue
                elif s.kind == "atomic":  # min/max, cas, exch: the adjoint compares with what ended up stored
                    need(sources | {label(s.args[0])}, {ALWAYS})
                    continue
                elif s.kind in _VALUE_FREE:
                    continue
                receivers = frozenset().union(*(of(a) for a in diff))
                need(sources, receivers)
            elif isinstance(s, If):
                need(of(s.cond), {ALWAYS})
                changed |= visit(s.then) | visit(s.orelse)
                for out, a, b in s.phis:
                    changed |= flow(out, of(a) | of(b) | of(s.cond))
            elif isinstance(s, Loop):
                step = True
                while step:  # to a fixed point: sources only grow, and there are finitely many labels
                    step = False
                    for c in s.carried:
                        step |= flow(c.var, of(c.init) | (of(c.next) if c.next is not None else frozenset()))
                    step |= visit(s.cond_block)
                    if s.cond is not None:
                        need(of(s.cond), {ALWAYS})
                    step |= visit(s.body)
                    changed |= step
        return changed

    try:
        visit(kir.body)
    except _Opaque:
        return None
    return {name: sorted(r) for name, r in sorted(needs.items()) if r}


class _Opaque(Exception):
    """A custom or native adjoint: what it reads is not known."""


def values_needed(receivers: list[str] | None, with_grad: set[str]) -> bool:
    """Whether an array read under a label with these ``receivers`` (adjoint_reads' entry, None: absent from it)
    matters to this launch's adjoint, given the labels of its arrays that have gradients."""
    if receivers is None:
        return False
    return ALWAYS in receivers or any(r in with_grad for r in receivers)
