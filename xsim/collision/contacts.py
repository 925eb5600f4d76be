"""``Contacts``: the rigid contacts a ``CollisionPipeline`` found for one state, under Newton's field names
where Newton has them, plus what the XPBD solver reads to solve them."""

from __future__ import annotations

import numpy as np

import xsim


class Contacts:
    """The candidate contacts of one ``CollisionPipeline.collide`` (every contact that can touch during
    the step it was found for), grouped by shape pair.

    Newton's names (filled by ``collide``; each array holds ``rigid_contact_max`` rows, the first
    ``rigid_contact_count[0]`` in use):

    - ``rigid_contact_count``: array(int) [1], the number of contacts;
    - ``rigid_contact_shape0`` / ``rigid_contact_shape1``: array(int), the shape whose point touches
      and the shape whose surface it meets;
    - ``rigid_contact_point0`` / ``rigid_contact_point1``: array(vec3), those points (m) in their bodies'
      frames (static shapes: world), at the state's poses;
    - ``rigid_contact_normal``: array(vec3), the unit normal from shape 0 towards shape 1 (world).

    ``rigid_contact_depth`` (xsim's own, m, < 0 apart) is the penetration at those poses. The solver
    recomputes every contact's geometry from the current poses in each of its passes (that is what makes
    contacts differentiable); these arrays are the state's, for looking at.

    What the solver reads (host numpy, ``count`` rows): ``pairs`` (n_pairs, 4) the shape pairs with
    contacts (shape a, shape b, whether a's points meet b, whether b's meet a), ``pair`` each contact's
    row in ``pairs``, ``index`` its index in its pair (``xsim.collision.pairs.contact_roles``), ``first``
    each pair's first contact, ``keys`` each contact's (a, b, index) as one int64."""

    def __init__(self, model, device=None):
        self.model = model
        self.device = model.device if device is None else device
        self.rigid_contact_max = 0
        self.rigid_contact_count = xsim.zeros(1, dtype=int, device=self.device)
        self._fields(0)
        self.count = 0
        self.pairs = np.zeros((0, 4), dtype=np.int64)
        self.pair = self.index = self.first = self.keys = np.zeros(0, dtype=np.int64)
        self.body_q = None  # the host body_q (com frames) the contacts were found from

    def _fields(self, rows: int) -> None:
        """Newton's per-contact arrays with room for ``rows`` contacts."""
        v3 = xsim.types.vector(3, self.model.dtype)
        self.rigid_contact_max = rows
        self.rigid_contact_shape0 = xsim.full(rows, -1, dtype=int, device=self.device)
        self.rigid_contact_shape1 = xsim.full(rows, -1, dtype=int, device=self.device)
        self.rigid_contact_point0 = xsim.zeros(rows, dtype=v3, device=self.device)
        self.rigid_contact_point1 = xsim.zeros(rows, dtype=v3, device=self.device)
        self.rigid_contact_normal = xsim.zeros(rows, dtype=v3, device=self.device)
        self.rigid_contact_depth = xsim.zeros(rows, dtype=self.model.dtype, device=self.device)

    def set(self, pairs: np.ndarray, pair: np.ndarray, index: np.ndarray, first: np.ndarray, keys: np.ndarray,
            body_q: np.ndarray | None) -> None:
        """Hold a new contact set (the pipeline's), Newton's arrays not yet filled."""
        self.pairs, self.pair, self.index, self.first, self.keys = pairs, pair, index, first, keys
        self.count = len(pair)
        self.body_q = body_q

    def clear(self) -> None:
        self.set(np.zeros((0, 4), dtype=np.int64), *(np.zeros(0, dtype=np.int64) for _ in range(3)),
                 np.zeros(0, dtype=np.int64), None)
