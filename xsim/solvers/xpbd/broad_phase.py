"""Broad phase of the rigid contacts: which shape pairs can touch during a step, and which of their
candidate contacts to test, found on the host with numpy once per step.

Each shape gets a world axis-aligned box at the step start, grown by half the contact margin plus
the distance its points can travel in the step (its body's speed and spin at the step start); a
sweep along the axis where the shapes spread most, then the two other axes, gives the overlapping
pairs in O(n log n + pairs) instead of testing all n^2 / 2 pairs. Planes are infinite: each is
tested against every other shape's box along its normal. ``eligible`` then keeps the pairs that
may collide at all; ``candidate_contacts`` lists every contact a kept pair offers (its shapes'
points and segment contacts, see ``contacts_rigid.py``), the ``contact_depths`` kernel measures them
and ``within_reach`` keeps those that can touch during the step: closer than the pair's reach, grown
by twice the deepest penetration of either body at the step start (resolving it moves the body: a
box set down 2 cm into another turns onto corners that were apart).

All of this is selection, not arithmetic on the state: which contacts exist is a constant of the
backward pass (as in ``contacts_rigid.py``), so nothing here is on the Tape.
"""

from __future__ import annotations

import numpy as np

from xsim.sim.rigid import JOINT_FREE, SEGMENT_CONTACTS, point_roles
from xsim.sim.shapes import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH, SHAPE_PLANE, SHAPE_SPHERE

_TYPES = (SHAPE_PLANE, SHAPE_SPHERE, SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH)


def _rotations(q: np.ndarray) -> np.ndarray:
    """Rotation matrices (n, 3, 3) of unit quaternions q (n, 4), (x, y, z, w)."""
    x, y, z, w = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1)], -2)


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products a b of quaternions (n, 4), (x, y, z, w)."""
    av, aw, bv, bw = a[:, :3], a[:, 3:], b[:, :3], b[:, 3:]
    return np.concatenate([aw * bv + bw * av + np.cross(av, bv), aw * bw - np.sum(av * bv, 1, keepdims=True)], 1)


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
    keep = np.all((lo[a] <= hi[b]) & (lo[b] <= hi[a]), axis=1)
    return a[keep], b[keep]


class BroadPhase:
    """The candidate contacts of a model's shapes, step by step (see the module docstring)."""

    def __init__(self, rigid):
        r = rigid
        self.margin = float(r.rigid_contact_margin)
        self.shape_body = r.shape_body.numpy().astype(np.int64)
        self.shape_type = r.shape_type.numpy().astype(np.int64)
        self.point_count = r.shape_point_count.numpy().astype(np.int64)
        self.bound = r.shape_bound.numpy().astype(np.float64)
        # the extent of each shape's points about their centre, in the shape frame (meshes: fixed)
        starts = r.shape_point_start.numpy()
        points = r.shape_points.numpy().astype(np.float64)
        self.mesh_centre = np.zeros((r.shape_count, 3))
        self.mesh_half = np.zeros((r.shape_count, 3))
        for s in np.flatnonzero(self.shape_type == SHAPE_MESH):
            p = points[starts[s]:starts[s] + self.point_count[s]]
            if len(p):
                self.mesh_centre[s] = 0.5 * (p.min(0) + p.max(0))
                self.mesh_half[s] = 0.5 * (p.max(0) - p.min(0))
        self.shape_world = r.shape_world.numpy().astype(np.int64)
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
        have contacts. The one place that decides whether two shapes interact."""
        ba, bb = self.shape_body[a], self.shape_body[b]
        wa, wb = self.shape_world[a], self.shape_world[b]
        ok = ((wa == wb) | (wa < 0) | (wb < 0)) & (ba != bb) & (self.dynamic[ba] | self.dynamic[bb])
        ok &= self.roles[self.shape_type[a], self.shape_type[b], 0] >= 0
        if len(self.joined):
            ok &= ~np.isin(self._key(np.minimum(ba, bb), np.maximum(ba, bb)), self.joined)
        return ok

    def find_pairs(self, Xc: np.ndarray, qd: np.ndarray, shape_xform: np.ndarray, shape_size: np.ndarray,
                   dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shape pairs that can touch during a step of ``dt`` from the com frames ``Xc`` (nb, 7)
        and velocities ``qd`` (nb, 6): ((pairs, 4) ints: shape a < shape b, whether a's points meet
        b's surface, whether b's meet a's; (pairs,) reach, m: the contact margin plus how far the two
        shapes' points can travel in the step; (pairs,) spin, rad: how far they can turn)."""
        if not len(self.active):
            return self._empty
        act = self.active
        body = self.shape_body[act]
        on_body = body >= 0
        # shape frames in the world, and how far their points can move in the step
        centre = shape_xform[act, :3].astype(np.float64)
        rot = shape_xform[act, 3:].astype(np.float64)
        motion = np.zeros(len(body))
        turn = np.zeros(len(body))
        if on_body.any():
            pose = Xc[body[on_body]].astype(np.float64)
            arm = np.einsum("nij,nj->ni", _rotations(pose[:, 3:]), centre[on_body])
            centre[on_body] = pose[:, :3] + arm
            rot[on_body] = _quat_mul(pose[:, 3:], rot[on_body])
            v = qd[body[on_body]].astype(np.float64)
            turn[on_body] = np.linalg.norm(v[:, 3:], axis=1) * dt
            motion[on_body] = np.linalg.norm(v[:, :3], axis=1) * dt + turn[on_body] * (
                np.linalg.norm(arm, axis=1) + self.bound[act][on_body])
        R = _rotations(rot)
        kind = self.shape_type[act]
        size = shape_size[act].astype(np.float64)
        # half extents: a box's (or a mesh's points') turned with the shape, a capsule's axis turned and
        # grown by its radius, a sphere's radius
        local_half = np.where((kind == SHAPE_BOX)[:, None], size, 0.0)
        local_half[:, 2] = np.where(kind == SHAPE_CAPSULE, size[:, 1], local_half[:, 2])
        local_half = np.where((kind == SHAPE_MESH)[:, None], self.mesh_half[act], local_half)
        radius = np.where((kind == SHAPE_SPHERE) | (kind == SHAPE_CAPSULE), size[:, 0], 0.0)
        mid = centre + np.einsum("nij,nj->ni", R, self.mesh_centre[act])
        half = np.einsum("nij,nj->ni", np.abs(R), local_half) + (radius + 0.5 * self.margin + motion)[:, None]
        # from here on, shapes by their model index: the active ones' rows of the arrays above
        rows = np.zeros(len(self.shape_type), dtype=np.int64)
        rows[act] = np.arange(len(act))
        s = self.solids
        rs = rows[s]
        a, b = _sweep_pairs(mid[rs] - half[rs], mid[rs] + half[rs], self.group)
        a, b = s[a], s[b]
        for p in self.planes:
            # the plane's normal is its frame's z; the other shape's box reaches it when its lowest point
            # along the normal is within the plane's own motion of it
            n = R[rows[p]][:, 2]
            near = (mid[rs] - centre[rows[p]]) @ n - half[rs] @ np.abs(n) < motion[rows[p]] + 0.5 * self.margin
            a = np.concatenate([a, np.full(int(near.sum()), p)])
            b = np.concatenate([b, s[near]])
        a, b = np.minimum(a, b), np.maximum(a, b)
        keep = self.eligible(a, b)
        a, b = a[keep], b[keep]
        order = np.lexsort((b, a))
        a, b = a[order], b[order]
        roles = self.roles[self.shape_type[a], self.shape_type[b]]
        pairs = np.stack([a, b, roles[:, 0], roles[:, 1]], 1)
        ra, rb = rows[a], rows[b]
        return pairs, self.margin + motion[ra] + motion[rb], turn[ra] + turn[rb]

    def candidate_contacts(self, pairs: np.ndarray, edges_near) -> tuple[np.ndarray, np.ndarray]:
        """Every contact the ``pairs`` offer: (pair of each, its index in the pair: a's points, then
        b's, then the pair's segment contacts), ordered by pair. A box-box pair offers only the edge
        pairs whose two edges both come near the other box: ``edges_near(box pair indices)`` gives
        those as (box pairs, 2, 12) bools (the ``box_edges_near`` kernel), not all 144."""
        a, b = pairs[:, 0], pairs[:, 1]
        points = self.point_count[a] * pairs[:, 2] + self.point_count[b] * pairs[:, 3]
        boxes = (self.shape_type[a] == SHAPE_BOX) & (self.shape_type[b] == SHAPE_BOX)
        count = points + np.where(boxes, 0, self.segments[self.shape_type[a], self.shape_type[b]])
        pair = np.repeat(np.arange(len(pairs)), count)
        index = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        box_pairs = np.flatnonzero(boxes)
        if len(box_pairs):
            near = edges_near(box_pairs)
            row, edge = np.nonzero((near[:, 0, :, None] & near[:, 1, None, :]).reshape(len(box_pairs), 144))
            pair = np.concatenate([pair, box_pairs[row]])
            index = np.concatenate([index, points[box_pairs[row]] + edge])
            order = np.lexsort((index, pair))
            pair, index = pair[order], index[order]
        return pair, index

    def within_reach(self, pairs: np.ndarray, pair: np.ndarray, depth: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """Which candidate contacts (of ``pair``, ordered by pair; ``depth``, m, < 0: apart) can touch
        during the step (see the module docstring)."""
        d = np.maximum(depth, 0.0)
        starts = np.flatnonzero(np.diff(pair, prepend=-1))
        deepest = np.zeros(len(pairs))
        deepest[pair[starts]] = np.maximum.reduceat(d, starts)
        ba, bb = self.shape_body[pairs[:, 0]] + 1, self.shape_body[pairs[:, 1]] + 1
        sunk = np.zeros(self.n_keys)  # per body, index 0: the world (it does not move)
        np.maximum.at(sunk, ba, deepest)
        np.maximum.at(sunk, bb, deepest)
        sunk[0] = 0.0
        grown = reach + 2.0 * (sunk[ba] + sunk[bb])
        return depth > -grown[pair]
