"""The particle constraints' Jacobi bookkeeping, owned by ``SolverXPBD``: one table row per
constraint kind, and the slot layout the solver builds from the Model's plain constraint arrays.

A kind ``name`` is described by the Model's ``{name}_count``, ``{name}_indices`` (count, arity)
and its parameter arrays; its kernel takes
``(entries, indices, slot, *params, lam, start, inv_h, relaxation, damped) -> (lam_out, delta)``
(``start``: the entries at the substep start, see ``substep_start``);
its last parameter is its damping (a kind with none skips the damping term, ``damped`` False:
see ``kernels.solve_distance``).
Adding a kind means: the builder and the Model's arrays, a kernel, and one row of ``KINDS``.

Layout. Every constraint end is one entry: kind blocks follow each other in ``KINDS`` order, and
constraint c of a kind of arity k owns entries ``block + k c .. block + k c + k - 1``. Every
particle owns one row of ``delta`` with one column (slot) per constraint end it is; ``count`` is
its number of slots.

Mass splitting (Tonge et al. 2012): each constraint sees a particle's inverse mass times the
particle's count, and the particle moves by the mean of its corrections. A constraint's
correction then reaches the particle in full, so the Jacobi iteration's fixed point is the XPBD
solution (``C + alpha/h^2 lambda = 0`` with ``x = x_pred + M^-1 grad C^T lambda``) whatever else
touches the particle; without it each compliance was multiplied by the particle's count. Pinned
particles (inverse mass 0) stay at 0 whatever their count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import xsim
from xsim import types as T
from xsim.kernels import recording
from xsim.sim.generic import specialized

from . import tetrahedra


@dataclass(frozen=True)
class ConstraintKind:
    """One kind of particle constraint: the Model's arrays are ``{name}_count``,
    ``{name}_indices`` (count, ``arity``) and ``params``; ``kernel`` names its kernel in ``kernels.py``;
    its multiplier has ``lam_size`` components (1: a scalar, else a vector); ``module``: the solver module
    that defines its kernels (None: ``kernels.py``); with ``shape_flag`` its kernel
    takes one more bool after ``damped``: whether its first parameter requires grad (the chain rule
    skips that gradient otherwise). ``adjoint`` names its written-out backward pass (``backward``), taking
    ``(particle entries, corrections' gradients, indices, *params, lam, start, inv_h, relaxation, damped[, flag],
    lam_out_grad, take_lam_out, lam_grad, *param_grads, start_grad, entries_grad)`` (``positions_adjoint``
    gives the first two); a kind without one gets the generated adjoint of ``{kernel}_into_positions``, the
    same function as its kernel followed by its share of ``apply_corrections``."""

    name: str
    arity: int
    params: tuple[str, ...]
    kernel: str
    lam_size: int = 1
    shape_flag: bool = False
    adjoint: str | None = None
    module: str | None = None


KINDS = (
    ConstraintKind("spring", 2, ("spring_rest_length", "spring_compliance", "spring_damping"), "solve_distance",
                   adjoint="solve_distance_adjoint"),
    ConstraintKind("bending", 4, ("bending_weights", "bending_compliance", "bending_damping"), "solve_bending", 3,
                   shape_flag=True, adjoint="solve_bending_adjoint"),
    ConstraintKind("area", 3, ("area_rest", "area_compliance", "area_damping"), "solve_area"),
    ConstraintKind("tet", 4, ("tet_rest_inv", "tet_rest_volume", "tet_youngs_modulus", "tet_poisson_ratio",
                              "tet_damping"), "solve_tet", 10, module=tetrahedra.__name__),
)


def slot_layout(n: int, groups: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """For ``n`` particles and each kind's index array (m, k): (slot count per particle (n,), each
    kind's slot (m, k): the ``delta`` column of each end in its particle's row, entry index
    (n, width): the entry of each of a particle's slots)."""
    owner = np.concatenate([g.ravel() for g in groups]) if groups else np.zeros(0, dtype=np.int64)
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n)
    column = np.empty(len(owner), dtype=np.int64)
    column[order] = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
    entry = np.zeros((n, max(1, int(counts.max(initial=0)))), dtype=np.int32)
    entry[owner, column] = np.arange(len(owner))
    slots, at = [], 0
    for g in groups:
        slots.append(column[at:at + g.size].reshape(g.shape))
        at += g.size
    return counts, slots, entry


class ParticleConstraints:
    """The solver's view of a Model's particle constraints: slot layout, mass-splitting counts,
    zero multipliers, and one Jacobi projection pass over every kind (``project``)."""

    def __init__(self, model, kernels):
        m = self.model = model
        self.kernels = kernels
        n = m.particle_count
        self.kinds = [k for k in KINDS if getattr(m, f"{k.name}_count") > 0]
        groups = [getattr(m, f"{k.name}_indices").numpy().astype(np.int64).reshape(-1, k.arity) for k in self.kinds]
        counts, slots, entry = slot_layout(n, groups)
        self.width = entry.shape[1]
        self.entry_count = max(1, int(counts.sum()))

        def arr(data, dtype):
            return xsim.array(np.asarray(data), dtype=dtype, device=m.device)

        self.slot_count = arr(counts.astype(np.int32), int)
        self.split = arr(np.maximum(counts, 1).astype(np.float64), m.dtype)
        # 1 / count in the model's precision, as apply_corrections computes it (the adjoints multiply by it)
        one = np.ones(1, dtype=m.dtype._np)
        self.inv_count = arr(one / np.maximum(counts, 1).astype(m.dtype._np), m.dtype)
        self.entry_index = arr(entry, int)
        self.slots = {k.name: arr(s.astype(np.int32), int) for k, s in zip(self.kinds, slots)}
        self.blocks, at = {}, 0
        for k, g in zip(self.kinds, groups):
            self.blocks[k.name] = (at, at + g.size)
            at += g.size
        # the damping term reads the substep start's entries: left out for kinds without damping, unless
        # their damping array requires grad (then the gradient with respect to a zero damping is exact)
        self.damped = {}
        for k in self.kinds:
            damping = getattr(m, k.params[-1])
            self.damped[k.name] = damping.requires_grad or bool(np.any(damping.numpy() != 0.0))
        self.zero_lambda = {k.name: xsim.zeros(getattr(m, f"{k.name}_count"),
                                               dtype=m.dtype if k.lam_size == 1 else T.vector(k.lam_size, m.dtype),
                                               device=m.device) for k in self.kinds}
        self.any_damped = any(self.damped.values())
        self._no_start = xsim.empty(0, dtype=T.vector(4, m.dtype), device=m.device)
        self._views: dict = {}
        # the backward pass's buffers (``backward``): per-entry gradients, per-particle entries, correction gradients
        self._work = None
        self._no_grad = {dtype: xsim.empty(0, dtype=dtype, device=m.device)
                         for dtype in (m.dtype, *(T.vector(k, m.dtype) for k in {3, 4, *(kind.lam_size for kind in KINDS if kind.lam_size > 1)}))}

    def gather(self, x, entries, record_tape: bool = True):
        """``x``'s entries (position, split inverse mass) into ``entries`` (``entry_count``)."""
        m = self.model
        xsim.launch(self.kernels.gather_entries, m.particle_count, inputs=[
            x, m.particle_inv_mass, self.split, self.slot_count, self.entry_index], outputs=[entries],
            record_tape=record_tape)
        return entries

    def substep_start(self, new, x_start):
        """The entries at the substep start ``x_start``, which the damping terms read: gathered once per
        substep, so the constraint kernels read their own rows (plain adds in their adjoints) instead of
        x_start's (atomic adds); an empty array when no kind is damped."""
        if not self.any_damped:
            return self._no_start
        return self.gather(x_start, new("start_entries", self.entry_count, T.vector(4, self.model.dtype)))

    def project(self, new, x, start, lam: dict, inv_h: float, relaxation: float, entries, delta, x_next) -> dict:
        """One Jacobi pass of every kind at positions ``x`` (``start``: ``substep_start``'s entries) into
        ``x_next``: ``x``'s entries gathered into ``entries`` (``entry_count``), corrections into ``delta``
        (n, width), their mean added to ``x`` (``apply_corrections``); returns the new multipliers.
        ``new(key, shape, dtype)`` gives the multipliers' arrays (the solver's fresh-or-scratch allocator).

        These launches run off the Tape: it records in their place one ``backward`` of the pass, which
        takes the gradients of ``x_next`` and the new multipliers to those of ``x``, the multipliers, the
        substep start's entries and the model's arrays. ``entries`` and ``delta`` are therefore scratch
        buffers that every iteration overwrites: no adjoint reads them."""
        m, k = self.model, self.kernels
        n = m.particle_count
        self.gather(x, entries, record_tape=False)
        out = {}
        for kind in self.kinds:
            count = getattr(m, f"{kind.name}_count")
            lam_out = new("lam_" + kind.name, count, lam[kind.name].dtype, avoid=(lam[kind.name],))
            xsim.launch(getattr(self._kernels(kind), kind.kernel), count, inputs=[
                self._view(entries, kind.name), getattr(m, f"{kind.name}_indices"), self.slots[kind.name],
                *self._tail(kind, lam[kind.name], start, inv_h, relaxation)], outputs=[lam_out, delta],
                record_tape=False)
            out[kind.name] = lam_out
        xsim.launch(k.apply_corrections, n, inputs=[x, delta, self.slot_count, m.particle_inv_mass],
                    outputs=[x_next], record_tape=False)
        tape = recording.current()
        if tape is not None:
            lam_in = {name: lam[name] for name in out}
            used = [x, m.particle_inv_mass, *lam_in.values(), start,
                    *(getattr(m, p) for kind in self.kinds for p in kind.params)]
            tape.record_func(lambda: self.backward(x, start, lam_in, out, inv_h, relaxation, x_next),
                             [a for a in used if a.requires_grad], outputs=[x_next, *out.values()])
        return out

    def _tail(self, kind: ConstraintKind, lam, start, inv_h: float, relaxation: float) -> list:
        """A kind's kernel arguments after its slots: parameters, multipliers, start entries, scalars, flags."""
        params = [getattr(self.model, p) for p in kind.params]
        return [*params, lam, self._view(start, kind.name) if start.shape[0] else start, inv_h, relaxation,
                self.damped[kind.name], *((params[0].requires_grad,) if kind.shape_flag else ())]

    def backward(self, x, start, lam: dict, lam_out: dict, inv_h: float, relaxation: float, x_next) -> None:
        """The backward pass of one ``project``, run by the Tape: from the gradients of ``x_next`` and
        ``lam_out`` (taken: zeroed, as a store's adjoint does, unless they retain their gradient) to those
        of ``x``, ``lam``, ``start`` and the model's arrays (added). ``positions_adjoint`` passes x_next's
        gradient to x and gives each particle's entry and correction gradient; each kind's ``adjoint`` kernel
        then stores its ends' gradients into their entries of a per-entry buffer, and ``gather_entries_adjoint``
        sums each particle's entries. A kind without an ``adjoint`` gets the generated adjoint of its
        ``{kernel}_into_positions`` first, on entries gathered again. Checked against the generated adjoints of
        ``keep_positions`` and ``{kernel}_into_positions`` and against finite differences
        (tests/solvers/test_xpbd_kernels.py)."""
        m, k = self.model, self.kernels
        n = m.particle_count
        if self._work is None:  # the last: the entries gathered again for kinds without an adjoint kernel
            self._work = tuple(xsim.empty(size, dtype=dtype, device=m.device) for size, dtype in (
                (self.entry_count, start.dtype), (n, start.dtype), (n, T.vector(3, m.dtype)),
                (self.entry_count if any(kind.adjoint is None for kind in self.kinds) else 0, start.dtype)))
        g, particle_entries, corrections_grad, gathered = self._work
        tails = {kind.name: self._tail(kind, lam[kind.name], start, inv_h, relaxation) for kind in self.kinds}
        start_grads = {kind.name: self._view(start.grad, kind.name) if start.shape[0] and start.requires_grad
                       else self._no_grad[start.dtype] for kind in self.kinds}
        generated = [kind for kind in self.kinds if kind.adjoint is None]
        if generated:  # they add to the entries' gradients and read x_next's before positions_adjoint takes it
            self.gather(x, gathered, record_tape=False)
            for kind in generated:
                block = self._view(g, kind.name)
                block.zero_untracked()
                xsim.launch(getattr(self._kernels(kind), kind.kernel + "_into_positions"),
                            getattr(m, f"{kind.name}_count"),
                            inputs=[self._view(gathered, kind.name), getattr(m, f"{kind.name}_indices"),
                                    *tails[kind.name], self.slot_count],
                            outputs=[lam_out[kind.name], x_next],
                            adj_inputs=[block, None, *(_grad_or_none(getattr(m, p)) for p in kind.params),
                                        _grad_or_none(lam[kind.name]),
                                        start_grads[kind.name] if start.shape[0] else None,
                                        None, None, None, *((None,) if kind.shape_flag else ()), None],
                            adj_outputs=[lam_out[kind.name].grad, x_next.grad], adjoint=True, record_tape=False)
        xsim.launch(k.positions_adjoint, n, inputs=[
            x, m.particle_inv_mass, self.split, self.inv_count, not x_next.retain_grad, x_next.grad, x.grad,
            particle_entries, corrections_grad], record_tape=False)
        for kind in self.kinds:
            if kind.adjoint is None:
                continue
            out = lam_out[kind.name]
            grads = [self._grad(getattr(m, p)) for p in kind.params]
            rest = grads[1:] if kind.shape_flag else grads
            xsim.launch(getattr(k, kind.adjoint), getattr(m, f"{kind.name}_count"), inputs=[
                particle_entries, corrections_grad, getattr(m, f"{kind.name}_indices"), *tails[kind.name], out.grad,
                not out.retain_grad, self._grad(lam[kind.name]), *((grads[0],) if kind.shape_flag else ()), *rest,
                start_grads[kind.name], self._view(g, kind.name)], record_tape=False)
        xsim.launch(k.gather_entries_adjoint, n, inputs=[
            self.entry_index, self.slot_count, self.split, g, x.grad, self._grad(m.particle_inv_mass)],
            record_tape=False)

    def _kernels(self, kind: ConstraintKind):
        """The solver kernels (bound to the model's scalar type) of the module defining ``kind``'s."""
        if kind.module is None:
            return self.kernels
        return specialized(kind.module, self.model.dtype)

    def _grad(self, a):
        """``a``'s gradient, or an empty array of its type (the adjoint kernels skip empty gradients)."""
        return a.grad if a.requires_grad else self._no_grad[a.dtype]

    def _view(self, entries, name: str):
        """``entries``' block of kind ``name``; views of scratch arrays (which come back every
        iteration) are kept."""
        start, stop = self.blocks[name]
        if start == 0 and stop == entries.shape[0]:
            return entries
        if entries.requires_grad and not entries._scratch:
            return entries[start:stop]
        view = self._views.get((id(entries), name))
        if view is None or view[0] is not entries:
            view = self._views[(id(entries), name)] = (entries, entries[start:stop])
        return view[1]


def _grad_or_none(a):
    return a.grad if a.requires_grad else None
