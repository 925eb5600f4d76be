"""``CollisionPipeline(model).collide(state, contacts)``: the rigid contacts of a state, as in Newton. The
broad phase (``broad_phase.py``) lists the shape pairs that can touch during a step and every contact
they offer, the narrow phase (``narrow_phase.contact_depths``) measures those at the state's poses, and
the ones within reach are kept (``BroadPhase.within_reach``), grouped by pair: what ``SolverXPBD.step``
solves. Which contacts exist is a selection, not arithmetic on the state: nothing here is on the tape
(the solver recomputes every kept contact's geometry from the current poses, differentiably).
"""

from __future__ import annotations

import numpy as np

import xsim
from xsim import types as T
from xsim.sim.generic import specialized
from xsim.sim.uploads import Uploads

from . import narrow_phase
from .broad_phase import BroadPhase, run_starts
from .contacts import Contacts
from .narrow_phase import ShapeArrays

DEFAULT_DT = 1.0 / 60.0  # s: the step ``collide`` reaches over when none is given


class CollisionPipeline:
    """The rigid contacts of ``model``'s shapes, state by state (see the module docstring).

    ``rigid_contact_margin`` (m; default the model's): pairs closer than this, plus how far their
    shapes can move in the step, are kept. ``dt`` (s): the step that ``collide`` reaches over by
    default (a contact set found for a shorter step than the solver takes can miss fast bodies)."""

    def __init__(self, model, rigid_contact_margin: float | None = None, dt: float = DEFAULT_DT):
        self.model = model
        self.dt = float(dt)
        self.broad = BroadPhase(model, margin=rigid_contact_margin)
        self.kernels = specialized(narrow_phase.__name__, model.dtype)
        s = model.dtype
        self._tf = T.transformation(s)
        self._uploads = Uploads(model.device)
        # contact keys: (shape a, shape b, index in the pair), index below a pair's most points + 144 edge pairs
        self.max_index = 2 * int(model.shape_point_count.numpy().max(initial=0)) + 144
        self._no_residual = xsim.zeros(model.body_count, dtype=T.vector(3, s), device=model.device)

    def contacts(self) -> Contacts:
        """A new, empty ``Contacts`` for ``collide`` to fill."""
        return Contacts(self.model)

    def collide(self, state, contacts: Contacts, *, dt: float | None = None) -> Contacts:
        """The contacts of ``state`` (its ``body_q``, ``body_qd``) into ``contacts``, with Newton's fields
        filled: every contact that can touch during a step of ``dt`` (s; default the pipeline's). Returns
        ``contacts``."""
        m, k = self.model, self.kernels
        nb = m.body_count
        x0 = xsim.empty(nb, dtype=self._tf, device=m.device)
        xc = xsim.empty(nb, dtype=self._tf, device=m.device)
        residual = getattr(state, "body_q_residual", None)
        if nb:
            xsim.launch(k.state_frames, nb, inputs=[state.body_q, m.body_com,
                                                    self._no_residual if residual is None else residual],
                        outputs=[x0, xc], record_tape=False)
        frames = xsim.empty(m.shape_count, dtype=self._tf, device=m.device)
        if m.shape_count:
            xsim.launch(k.unit_shape_frames, m.shape_count, inputs=[m.shape_xform], outputs=[frames],
                        record_tape=False)
        shapes = ShapeArrays(**{f: frames if f == "xform" else getattr(m, "shape_" + f) for f in ShapeArrays._fields})
        self.find(x0, xc, state.body_qd, frames, shapes, self.dt if dt is None else dt, contacts)
        self._fill(x0, xc, shapes, contacts)
        return contacts

    def find(self, x0, xc, qd, shape_frames, shapes, dt: float, contacts: Contacts) -> Contacts:
        """The contacts that can touch during a step of ``dt`` from com frames ``x0`` (world) and
        displacements ``xc`` (``narrow_phase.body_frame``), velocities ``qd`` and unit shape frames
        ``shape_frames`` (``shapes``: the model's shape arrays with them), into ``contacts``: the broad
        phase's candidates (host), measured by ``contact_depths`` and kept where within reach, grouped by
        shape pair. The solver's own search (it passes its step's frames)."""
        contacts.clear()
        m, k, broad = self.model, self.kernels, self.broad
        if not len(broad.active):
            return contacts
        body_q = x0.numpy()
        pairs, reach, spin = broad.find_pairs(body_q, qd.numpy(), shape_frames.numpy(), m.shape_size.numpy(), dt)
        contacts.body_q = body_q
        if not len(pairs):
            return contacts
        s, put = m.dtype, self._uploads.put
        pairs_dev, reach_dev = put("pairs", pairs, int), put("reach", reach, s)

        def edges_near(box_pairs):
            near = self._uploads.buffer("near", 24 * len(box_pairs), int)
            xsim.launch(k.box_edges_near, 24 * len(box_pairs), inputs=[
                xc, x0, shapes, put("box_pairs", pairs[box_pairs], int), put("box_reach", reach[box_pairs], s)],
                outputs=[near], record_tape=False)
            return near.numpy()[:24 * len(box_pairs)].reshape(len(box_pairs), 2, 12).astype(bool)
        pair, index = broad.candidate_contacts(pairs, edges_near)
        depth = self._uploads.buffer("depth", len(pair), s)
        xsim.launch(k.contact_depths, len(pair), inputs=[
            xc, x0, shapes, pairs_dev, put("pair", pair, int), put("index", index, int), reach_dev,
            put("spin", spin, s)], outputs=[depth], record_tape=False)
        depth = depth.numpy()[:len(pair)].astype(np.float64)
        kept = np.flatnonzero(broad.within_reach(pairs, pair, depth, reach))
        if not len(kept):
            return contacts
        # the pairs left with contacts, renumbered in order
        pair = pair[kept]  # sorted
        first = run_starts(pair)
        used = pair[first]
        pair = np.repeat(np.arange(len(first)), np.diff(first, append=len(pair)))
        a, b = pairs[used[pair], 0].astype(np.int64), pairs[used[pair], 1].astype(np.int64)
        keys = (a * m.shape_count + b) * self.max_index + index[kept]
        contacts.set(pairs[used], pair, index[kept], first, keys, body_q)
        return contacts

    def _fill(self, x0, xc, shapes, contacts: Contacts) -> None:
        """Newton's per-contact arrays of ``contacts`` at the poses ``x0``/``xc``."""
        n = contacts.count
        if contacts.rigid_contact_max < n:
            contacts._fields(n)
        contacts.rigid_contact_count.assign(np.array([n], dtype=np.int32))
        if not n:
            return
        m = self.model
        xsim.launch(self.kernels.contact_fields, n, inputs=[
            xc, x0, m.body_com, shapes, xsim.array(contacts.pairs.astype(np.int32), dtype=int, device=m.device),
            xsim.array(contacts.pair.astype(np.int32), dtype=int, device=m.device),
            xsim.array(contacts.index.astype(np.int32), dtype=int, device=m.device)],
            outputs=[contacts.rigid_contact_shape0, contacts.rigid_contact_shape1, contacts.rigid_contact_point0,
                     contacts.rigid_contact_point1, contacts.rigid_contact_normal, contacts.rigid_contact_depth],
            record_tape=False)
