"""Broad phase of the rigid contacts: which shape pairs can touch during a step, and which of their
candidate contacts to test, found on the host with numpy once per step.

Each shape gets a world axis-aligned box at the step start, grown by half the contact margin plus
the distance its points can travel in the step (its body's speed and spin at the step start); a
sweep along the axis where the shapes spread most, then the two other axes, gives the overlapping
pairs in O(n log n + pairs) instead of testing all n^2 / 2 pairs (worlds swept apart, so copies of a
scene laid on each other stay linear). Planes are infinite: each is tested against every other
shape's box along its normal. ``eligible`` then keeps the pairs that may collide at all. What does
not change from step to step is found once: shapes with no eligible pair take no part (a model with
none, such as joined links, skips the broad phase), and a model with few eligible pairs tests that
fixed list in one pass each step instead of sweeping (the sweep's fixed cost dominates there).
``candidate_contacts`` lists every contact a kept pair offers (its shapes' points and segment
contacts, see ``contacts_rigid.py``), the ``contact_depths`` kernel measures them and
``within_reach`` keeps those that can touch during the step: closer than the pair's reach, grown by
twice the deepest penetration of either body at the step start (resolving it moves the body: a box
set down 2 cm into another turns onto corners that were apart).

All of this is selection, not arithmetic on the state: which contacts exist is a constant of the
backward pass (as in ``contacts_rigid.py``), so nothing here is on the Tape.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from xsim.sim.rigid import JOINT_FREE, SEGMENT_CONTACTS, point_roles
from xsim.sim.shapes import (
    SHAPE_BOX,
    SHAPE_CAPSULE,
    SHAPE_CONE,
    SHAPE_CONVEX_MESH,
    SHAPE_CYLINDER,
    SHAPE_ELLIPSOID,
    SHAPE_MESH,
    SHAPE_PLANE,
    SHAPE_SPHERE,
)

_TYPES = (SHAPE_PLANE, SHAPE_SPHERE, SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH, SHAPE_CYLINDER, SHAPE_CONE,
          SHAPE_ELLIPSOID, SHAPE_CONVEX_MESH)
_POINT_SETS = (SHAPE_MESH, SHAPE_CONVEX_MESH)  # shapes whose extent is that of their points


# the rotation matrix of a quaternion, entry by entry: base + scale * (product one + sign * product two),
# the products taken from the quaternion's outer product (x, y, z, w = 0, 1, 2, 3)
_ROT_FIRST = (np.array([1, 0, 0, 0, 0, 1, 0, 1, 0]), np.array([1, 1, 2, 1, 0, 2, 2, 2, 0]))
_ROT_SECOND = (np.array([2, 2, 1, 2, 2, 0, 1, 0, 1]), np.array([2, 3, 3, 3, 2, 3, 3, 3, 1]))
_ROT_SIGN = np.array([1.0, -1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0])
_ROT_BASE = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
_ROT_SCALE = np.array([-2.0, 2.0, 2.0, 2.0, -2.0, 2.0, 2.0, 2.0, -2.0])


def _rotations(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (n, 3, 3) of unit quaternions q (n, 4), (x, y, z, w)."""
    outer = q[:, :, None] * q[:, None, :]
    inner = outer[:, _ROT_FIRST[0], _ROT_FIRST[1]] + _ROT_SIGN * outer[:, _ROT_SECOND[0], _ROT_SECOND[1]]
    return (_ROT_BASE + _ROT_SCALE * inner).reshape(-1, 3, 3)


_NEXT, _LAST = np.array([1, 2, 0]), np.array([2, 0, 1])
# 12-bit masks of a box's edges: their bit values, each mask's number of set bits and its k-th set bit
# (at 12 mask + k: gathers with 1-D indices are several times faster than with pairs of them)
_EDGE_BITS = 1 << np.arange(12, dtype=np.int64)
_MASKS = (np.arange(1 << 12)[:, None] >> np.arange(12)) & 1
_POPCOUNT = _MASKS.sum(1)
_NTH_BIT = np.argsort(1 - _MASKS, axis=1, kind="stable").ravel()
_IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])


def run_starts(ids: np.ndarray) -> np.ndarray:
    """The first index of each run of equal values in ``ids`` (n,), ints (a sorted list's groups)."""
    new = np.empty(len(ids), dtype=bool)
    new[:1] = True
    np.not_equal(ids[1:], ids[:-1], out=new[1:])
    return np.flatnonzero(new)


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products a b of quaternions (n, 4), (x, y, z, w)."""
    av, aw, bv, bw = a[:, :3], a[:, 3:], b[:, :3], b[:, 3:]
    cross = av[:, _NEXT] * bv[:, _LAST] - av[:, _LAST] * bv[:, _NEXT]
    return np.concatenate([aw * bv + bw * av + cross, aw * bw - np.sum(av * bv, 1, keepdims=True)], 1)


def _sweep_pairs(lo: np.ndarray, hi: np.ndarray, group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (a, b) of the boxes [lo, hi] (n, 3) that overlap (and, with ``group`` (n,) ints,
    are of the same group): sort and sweep along the axis where the boxes' centres spread most, then
    check the other two axes. Groups (worlds) sweep apart: copies of a scene laid on each other do not
    make every shape a candidate of every other."""
    n = len(lo)
    axis = int(np.argmax(np.var(lo + hi, axis=0))) if n > 1 else 0
    if group is None:
        order = np.argsort(lo[:, axis], kind="stable")
        start = lo[order, axis]
        # box k of the sorted order overlaps, along the axis, the boxes after it that start before it ends
        end = np.searchsorted(start, hi[order, axis], side="right")
    else:
        # complex numbers sort by real part, then imaginary part: (group, start) keys, compared exactly
        order = np.lexsort((lo[:, axis], group))
        key = group[order] + 1j * lo[order, axis]
        end = np.searchsorted(key, group[order] + 1j * hi[order, axis], side="right")
    count = np.maximum(end - np.arange(n) - 1, 0)
    i = np.repeat(np.arange(n), count)
    j = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count) + i + 1
    a, b = order[i], order[j]
    # one axis at a time on the pairs still in, the swept one last (what the sweep left of it is NaNs):
    # columns gathered with 1-D indices, several times faster than rows of (n, 3) arrays
    lo_t, hi_t = lo.T.copy(), hi.T.copy()
    for k in (*(k for k in range(3) if k != axis), axis):
        keep = (lo_t[k][a] <= hi_t[k][b]) & (lo_t[k][b] <= hi_t[k][a])
        a, b = a[keep], b[keep]
    return a, b


class BroadPhase:
    """The candidate contacts of a model's shapes, step by step (see the module docstring)."""

    def __init__(self, rigid, few: int = 1024, margin: float | None = None):
        """``few``: a model with at most this many pairs of active shapes tests them all each step, else it
        sweeps (box pyramids, 1 thread: 8 boxes 2x faster, 36 boxes 300 -> 226 us, 78 boxes 343 -> 421 us).
        ``margin``: the contact margin (m; default the model's ``rigid_contact_margin``)."""
        r = rigid
        self.margin = float(r.rigid_contact_margin if margin is None else margin)
        self.shape_body = r.shape_body.numpy().astype(np.int64)
        self.shape_type = r.shape_type.numpy().astype(np.int64)
        self.point_count = r.shape_point_count.numpy().astype(np.int64)
        self.bound = r.shape_bound.numpy().astype(np.float64)
        # the extent of each shape's points about their centre, in the shape frame (meshes: fixed)
        starts = r.shape_point_start.numpy()
        points = r.shape_points.numpy().astype(np.float64)
        self.mesh_centre = np.zeros((r.shape_count, 3))
        self.mesh_half = np.zeros((r.shape_count, 3))
        for s in np.flatnonzero(np.isin(self.shape_type, _POINT_SETS)):
            p = points[starts[s]:starts[s] + self.point_count[s]]
            if len(p):
                self.mesh_centre[s] = 0.5 * (p.min(0) + p.max(0))
                self.mesh_half[s] = 0.5 * (p.max(0) - p.min(0))
        self.shape_world = r.shape_world.numpy().astype(np.int64)
        self.contype = np.asarray(r.shape_contype, dtype=np.int64).reshape(-1)
        self.conaffinity = np.asarray(r.shape_conaffinity, dtype=np.int64).reshape(-1)
        inv_mass = r.body_inv_mass.numpy()
        self.dynamic = np.append(inv_mass > 0.0, False)  # index -1: the world
        # pairs of bodies that a joint connects do not collide (a free joint connects nothing)
        kinds, parents, children = r.joint_type.numpy(), r.joint_parent.numpy(), r.joint_child.numpy()
        self.n_keys = r.body_count + 1
        self.joined = np.unique([self._key(min(p, c), max(p, c)) for k, p, c in zip(kinds, parents, children)
                                 if k != JOINT_FREE]).astype(np.int64)
        # per pair of shape types: which side offers points (-1: the pair never touches), segment contacts
        nt = max(_TYPES) + 1
        self.roles = np.full((nt, nt, 2), -1, dtype=np.int64)
        self.segments = np.zeros((nt, nt), dtype=np.int64)
        for ta in _TYPES:
            for tb in _TYPES:
                roles = point_roles(ta, tb)
                if roles is not None:
                    self.roles[ta, tb] = roles
                self.segments[ta, tb] = SEGMENT_CONTACTS.get((ta, tb), 0)
        # only shapes that have a pair at all take part in the sweep (none: a step skips the broad phase)
        active = self._active_shapes()
        self.planes = np.flatnonzero(active & (self.shape_type == SHAPE_PLANE))
        self.solids = np.flatnonzero(active & (self.shape_type != SHAPE_PLANE))
        self.active = np.flatnonzero(active)
        worlds = self.shape_world[self.solids]
        self.group = worlds if len(worlds) and worlds.min() >= 0 and worlds.max() > 0 else None
        self._empty = (np.zeros((0, 4), dtype=np.int64), np.zeros(0), np.zeros(0))
        # per active shape: its row, whether it is on a body, those bodies and their shapes' bounds
        self._rows = np.zeros(len(self.shape_type), dtype=np.int64)
        self._rows[self.active] = np.arange(len(self.active))
        body = self.shape_body[self.active]
        self._on_body = body >= 0
        self._bodies = body[self._on_body]
        self._bound = self.bound[self.active][self._on_body]
        self._meshes = bool(np.any(np.isin(self.shape_type[self.active], _POINT_SETS)))
        self._mesh_centre = self.mesh_centre[self.active]
        self._sizes = None  # the shape sizes that ``_extents`` last saw, and its answer
        self._fixed = self._fixed_pairs(few)

    def _extents(self, shape_size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per active shape: the half extents of its points in its frame, (n, 3) m (a box's, a mesh's, a
        capsule's axis), and the radius they are grown by plus half the margin, (n,) m; recomputed only
        when the sizes (which a rollout may optimise) change."""
        size = shape_size[self.active]
        if self._sizes is None or not np.array_equal(size, self._sizes[0]):
            kind = self.shape_type[self.active]
            size64 = size.astype(np.float64)
            local_half = np.where(np.isin(kind, (SHAPE_BOX, SHAPE_ELLIPSOID))[:, None], size64, 0.0)
            local_half[:, 2] = np.where(kind == SHAPE_CAPSULE, size64[:, 1], local_half[:, 2])
            round_ = np.isin(kind, (SHAPE_CYLINDER, SHAPE_CONE))  # radius across, half height along z
            local_half[round_] = size64[round_][:, [0, 0, 1]]
            local_half = np.where(np.isin(kind, _POINT_SETS)[:, None], self.mesh_half[self.active], local_half)
            radius = np.where((kind == SHAPE_SPHERE) | (kind == SHAPE_CAPSULE), size64[:, 0], 0.0) + 0.5 * self.margin
            self._sizes = (size, local_half, radius)
        return self._sizes[1], self._sizes[2]

    def _active_shapes(self, most: int = 1 << 22) -> np.ndarray:
        """Which shapes are in at least one ``eligible`` pair, (shapes,) bools: every pair of a world
        and every pair with a global shape tested once (all shapes where that is over ``most`` pairs)."""
        n = len(self.shape_type)
        world = self.shape_world
        local = np.flatnonzero(world >= 0)
        order = local[np.argsort(world[local], kind="stable")]
        end = np.searchsorted(world[order], world[order], side="right")
        count = end - np.arange(len(order)) - 1
        glob = np.flatnonzero(world < 0)
        if int(count.sum()) + len(glob) * n > most:
            return np.ones(n, dtype=bool)
        i = np.repeat(np.arange(len(order)), count)
        j = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count) + i + 1
        a = np.concatenate([order[i], np.repeat(glob, n)])
        b = np.concatenate([order[j], np.tile(np.arange(n), len(glob))])
        ok = self.eligible(a, b)
        active = np.zeros(n, dtype=bool)
        active[a[ok]] = True
        active[b[ok]] = True
        return active

    def _key(self, ba, bb):
        """One integer per (lower body, higher body), bodies from -1 (the world)."""
        return (np.asarray(ba) + 1) * self.n_keys + (np.asarray(bb) + 1)

    def eligible(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Which shape pairs (a, b) may collide at all: of the same world (or one of them global, world
        -1), on different bodies, at least one of them dynamic, not connected by a joint, of types that
        have contacts, with a contype bit of one in the conaffinity of the other (``Model.shape_contype``).
        The one place that decides whether two shapes interact."""
        ba, bb = self.shape_body[a], self.shape_body[b]
        wa, wb = self.shape_world[a], self.shape_world[b]
        ok = ((wa == wb) | (wa < 0) | (wb < 0)) & (ba != bb) & (self.dynamic[ba] | self.dynamic[bb])
        ok &= self.roles[self.shape_type[a], self.shape_type[b], 0] >= 0
        if len(self.contype):
            ok &= ((self.contype[a] & self.conaffinity[b]) | (self.contype[b] & self.conaffinity[a])) != 0
        if len(self.joined):
            ok &= ~np.isin(self._key(np.minimum(ba, bb), np.maximum(ba, bb)), self.joined)
        return ok

    def find_pairs(self, Xc: np.ndarray, qd: np.ndarray, shape_xform: np.ndarray, shape_size: np.ndarray,
                   dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shape pairs that can touch during a step of ``dt`` from the com frames ``Xc`` (nb, 7),
        velocities ``qd`` (nb, 6) and shape frames ``shape_xform`` (shapes, 7) whose quaternions are unit (the
        step's ``contacts_rigid.unit_shape_frames``): ((pairs, 4) ints: shape a < shape b, whether a's points meet
        b's surface, whether b's meet a's; (pairs,) reach, m: the contact margin plus how far the two
        shapes' points can travel in the step; (pairs,) spin, rad: how far they can turn)."""
        if not len(self.active):
            return self._empty
        act, on = self.active, self._on_body
        # shape frames in the world, and how far their points can move in the step
        xf = shape_xform[act].astype(np.float64)
        centre, rot = xf[:, :3], xf[:, 3:]
        motion = np.zeros(len(act))
        turn = np.zeros(len(act))
        if len(self._bodies):
            pose = Xc[self._bodies].astype(np.float64)
            turned = _rotations(pose[:, 3:])
            arm = np.einsum("nij,nj->ni", turned, centre[on])
            centre[on] = pose[:, :3] + arm
            v = qd[self._bodies].astype(np.float64)
            turn[on] = np.linalg.norm(v[:, 3:], axis=1) * dt
            motion[on] = np.linalg.norm(v[:, :3], axis=1) * dt + turn[on] * (np.linalg.norm(arm, axis=1) + self._bound)
        if len(self._bodies) and np.all(rot[on] == _IDENTITY):
            # shapes not turned on their bodies: their rotation is their body's (the product with the identity
            # differs at most in the sign of a zero, which no test below can see)
            R = np.empty((len(act), 3, 3))
            R[on] = turned
            R[~on] = _rotations(rot[~on])
        else:
            if len(self._bodies):
                rot[on] = _quat_mul(pose[:, 3:], rot[on])
            R = _rotations(rot)
        local_half, radius = self._extents(shape_size)
        mid = centre + np.einsum("nij,nj->ni", R, self._mesh_centre) if self._meshes else centre
        half = np.einsum("nij,nj->ni", np.abs(R), local_half) + (radius + motion)[:, None]
        # from here on, shapes by their model index: the active ones' rows of the arrays above
        rows, s, rs = self._rows, self.solids, self._rows[self.solids]
        lo, hi = mid[rs] - half[rs], mid[rs] + half[rs]
        # a plane's normal is its frame's z; another shape's box reaches it when its lowest point along the
        # normal is within the plane's own motion of it
        near = [(mid[rs] - centre[rows[p]]) @ n - half[rs] @ np.abs(n) < motion[rows[p]] + 0.5 * self.margin
                for p, n in zip(self.planes, R[rows[self.planes]][:, :, 2])]
        if self._fixed is not None:
            f = self._fixed
            keep = np.empty(len(f.pairs), dtype=bool)
            keep[f.solid] = np.all((lo[f.i] <= hi[f.j]) & (lo[f.j] <= hi[f.i]), axis=1)
            if near:
                keep[~f.solid] = np.concatenate(near)[f.plane_row]
            pairs, ra, rb = f.pairs[keep], f.row_a[keep], f.row_b[keep]
        else:
            a, b = _sweep_pairs(lo, hi, self.group)
            a, b = s[a], s[b]
            for p, close in zip(self.planes, near):
                a = np.concatenate([a, np.full(int(close.sum()), p)])
                b = np.concatenate([b, s[close]])
            a, b = np.minimum(a, b), np.maximum(a, b)
            keep = self.eligible(a, b)
            a, b = a[keep], b[keep]
            order = np.lexsort((b, a))
            a, b = a[order], b[order]
            roles = self.roles[self.shape_type[a], self.shape_type[b]]
            pairs = np.stack([a, b, roles[:, 0], roles[:, 1]], 1)
            ra, rb = rows[a], rows[b]
        return pairs, self.margin + motion[ra] + motion[rb], turn[ra] + turn[rb]

    def _fixed_pairs(self, most: int) -> SimpleNamespace | None:
        """With few shapes, every eligible pair of the active ones, in ``find_pairs``' order, tested as
        a whole each step instead of swept (None with more than ``most`` pairs): ``pairs`` (n, 4) as
        ``find_pairs`` gives them, ``row_a``/``row_b`` their shapes' active rows, ``solid`` whether both
        are solids, then ``i``/``j`` their indices in ``solids``, else ``plane_row`` the index of the
        (plane, solid) test in the planes' tests laid end to end."""
        s, planes = self.solids, self.planes
        ns = len(s)
        if ns * (ns - 1) // 2 + len(planes) * ns > most:
            return None
        i, j = np.triu_indices(ns, 1)
        k = np.arange(len(planes) * ns)
        first = np.concatenate([s[i], planes[k // ns]])
        second = np.concatenate([s[j], s[k % ns]])
        a, b = np.minimum(first, second), np.maximum(first, second)
        keep = np.flatnonzero(self.eligible(a, b))
        keep = keep[np.lexsort((b[keep], a[keep]))]
        a, b = a[keep], b[keep]
        solid = keep < len(i)
        roles = self.roles[self.shape_type[a], self.shape_type[b]]
        return SimpleNamespace(pairs=np.stack([a, b, roles[:, 0], roles[:, 1]], 1), row_a=self._rows[a],
                               row_b=self._rows[b], solid=solid, i=i[keep[solid]], j=j[keep[solid]],
                               plane_row=k[keep[~solid] - len(i)])

    def candidate_contacts(self, pairs: np.ndarray, edges_near) -> tuple[np.ndarray, np.ndarray]:
        """Every contact the ``pairs`` offer: (pair of each, its index in the pair: a's points, then
        b's, then the pair's segment contacts), ordered by pair. A box-box pair offers only the edge
        pairs whose two edges both come near the other box: ``edges_near(box pair indices)`` gives
        those as (box pairs, 2, 12) bools (the ``box_edges_near`` kernel), not all 144. Built in
        order (no sort): each box pair's edge pairs a's edge major, b's minor (index 12 i + j)."""
        a, b = pairs[:, 0], pairs[:, 1]
        points = self.point_count[a] * pairs[:, 2] + self.point_count[b] * pairs[:, 3]
        boxes = (self.shape_type[a] == SHAPE_BOX) & (self.shape_type[b] == SHAPE_BOX)
        count = points + np.where(boxes, 0, self.segments[self.shape_type[a], self.shape_type[b]])
        box_pairs = np.flatnonzero(boxes)
        if len(box_pairs):
            # each box's near edges as a 12-bit mask: the pair's edge pairs are (i-th set bit of a's, j-th of b's)
            bits = edges_near(box_pairs).astype(np.int64) @ _EDGE_BITS
            mask_a, mask_b = bits[:, 0], bits[:, 1]
            nb = _POPCOUNT[mask_b]
            edges = _POPCOUNT[mask_a] * nb
            count[box_pairs] += edges
            row = np.repeat(np.arange(len(box_pairs)), edges)
            first = np.cumsum(edges) - edges
            r = np.arange(len(row)) - np.repeat(first, edges)
            i, j = np.divmod(r, nb[row])
            edge = 12 * _NTH_BIT[12 * mask_a[row] + i] + _NTH_BIT[12 * mask_b[row] + j]
        start = np.cumsum(count) - count
        pair = np.repeat(np.arange(len(pairs)), count)
        index = np.arange(len(pair)) - np.repeat(start, count)
        if len(box_pairs):
            # a box pair's edge pairs follow its points: rows start + points + (0 .. edges - 1)
            at = points[box_pairs]
            index[np.repeat(start[box_pairs] + at, edges) + r] = np.repeat(at, edges) + edge
        return pair, index

    def within_reach(self, pairs: np.ndarray, pair: np.ndarray, depth: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """Which candidate contacts (of ``pair``, ordered by pair; ``depth``, m, < 0: apart) can touch
        during the step (see the module docstring)."""
        d = np.maximum(depth, 0.0)
        starts = run_starts(pair)
        deepest = np.zeros(len(pairs))
        deepest[pair[starts]] = np.maximum.reduceat(d, starts)
        ba, bb = self.shape_body[pairs[:, 0]] + 1, self.shape_body[pairs[:, 1]] + 1
        sunk = np.zeros(self.n_keys)  # per body, index 0: the world (it does not move)
        np.maximum.at(sunk, ba, deepest)
        np.maximum.at(sunk, bb, deepest)
        sunk[0] = 0.0
        grown = reach + 2.0 * (sunk[ba] + sunk[bb])
        return depth > -grown[pair]
