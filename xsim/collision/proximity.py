"""Which particles are near which particles and cloth triangles: the candidates of the particle-particle
and cloth self contacts that ``xsim.solvers.xpbd.self_contact`` resolves, found once per substep.

Candidates are found at the predicted positions of a substep within a ``margin`` (m) that covers how
far the particles can still move during its iterations, and kept in fixed-capacity rows:

- ``pairs[i]``: the particles within ``r_i + r_j + margin`` of particle i, for pairs with at least one
  free particle (one in no constraint: ``particle_roles``); a cloth's or a soft body's own particles
  never meet each other through this path (they are neighbours on their mesh; a cloth meets itself
  through its triangles, below);
- ``vertex_tris[v]``: the self-colliding triangles within ``thickness + margin`` of vertex v, not its own,
  as ``2 t + crease``: crease pairs (of one cloth, within ``REST_EXCLUSION`` thicknesses of each other in
  the rest shape: in the flat cloth they would touch, they are mesh neighbours) keep only ``CREASE``
  thicknesses apart, so that a sharp fold cannot pass through itself while the flat cloth pushes
  nothing apart; the nearest ``CAPACITY`` where there are more; sorted;
- ``corners[corner_first[q]:corner_first[q + 1]]``: each contact (v, k-th triangle of v's row) that
  particle q is a corner of, encoded ``4 (v CAPACITY + k) + corner``, sorted (complete: a segment per
  particle, however many).

Every row is in a fixed order (the hash grid's, which is built by a stable sort, and sorted rows), so a
step repeats bit for bit whatever the threads. A vertex row keeps its nearest ``CAPACITY`` triangles (a
vertex of a cloth folded in four touches about 20).

The hash grids are ``xsim.HashGrid``s (of the particles, and of the self-colliding triangles' centroids),
built on the host from the predicted positions (one copy of them per detection); the queries are kernels. Which candidates exist is a selection, not arithmetic on the
state: nothing here is on the Tape.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

import xsim

CAPACITY = 32  # candidates per row
# same-cloth pairs closer than this many thicknesses in the rest shape (its mesh neighbours: in the flat
# cloth they would touch) are crease pairs: they keep only CREASE thicknesses apart, so a sharp crease
# cannot fold through itself while the flat cloth pushes nothing apart
REST_EXCLUSION = 1.25
CREASE = 0.05
STEP_REUSE = 1.0  # a step's rows serve all its substeps while twice its motion stays within this many slacks

Points = xsim.array(dtype=xsim.vec3)
Reals = xsim.array(dtype=xsim.float32)
Ints = xsim.array(dtype=int)
Ints2 = xsim.array(dtype=int, ndim=2)
Reals2 = xsim.array(dtype=xsim.float32, ndim=2)

FREE, MEMBER, NO_CONTACT = 1, 0, -1  # particle_roles


def particle_roles(model) -> tuple[np.ndarray, np.ndarray]:
    """(role, body) of each particle (numpy int32): ``FREE`` for a particle in no constraint and no
    triangle, ``MEMBER`` for one of a cloth, soft body or particle chain (``body``: its connected
    component over the constraints and triangles; -1 for free ones), ``NO_CONTACT`` for every particle
    where ``model.particle_contact`` is off."""
    n = model.particle_count
    arity = {"spring": 2, "bending": 4, "area": 3, "tet": 4}
    rows = [getattr(model, f"{k}_indices").numpy().reshape(-1, w).astype(np.int64) for k, w in arity.items()]
    rows.append(np.asarray(model.tri_indices, dtype=np.int64).reshape(-1, 3))
    # each row's particles joined to its first: the components are the bodies
    a = np.concatenate([np.repeat(r[:, 0], r.shape[1] - 1) for r in rows])
    b = np.concatenate([r[:, 1:].ravel() for r in rows])
    graph = scipy.sparse.coo_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
    _, body = scipy.sparse.csgraph.connected_components(graph, directed=False)
    joined = np.zeros(n, dtype=bool)
    joined[a] = joined[b] = True
    role = np.where(joined, MEMBER, FREE).astype(np.int32)
    body = np.where(joined, body, -1).astype(np.int32)
    if not model.particle_contact:
        role[:] = NO_CONTACT
    return role, body


@xsim.func
def meets(wa: int, wb: int):
    """Whether worlds ``wa`` and ``wb`` interact: the same world, or either global (-1)."""
    return wa < 0 or wb < 0 or wa == wb


@xsim.kernel(enable_backward=False)
def find_particle_pairs(grid: xsim.uint64, x: Points, radius: Reals, world: Ints, role: Ints, margin: float,
                        reach: float, pairs: Ints2, pair_count: Ints):
    """``pairs[i]``: the particles j within r_i + r_j + ``margin`` of particle i at ``x`` (m), in the grid's
    order, where one of the two is free (``particle_roles``); ``reach``: the grid query's radius, at least
    r_i + max r + margin."""
    i = xsim.tid()
    found = 0
    ri = role[i]
    if ri >= 0:
        p = x[i]
        query = xsim.hash_grid_query(grid, p, reach)
        j = 0
        while xsim.hash_grid_query_next(query, j):
            near = xsim.length(x[j] - p) < radius[i] + radius[j] + margin
            if near and j != i and role[j] >= 0 and ri + role[j] > 0 and meets(world[i], world[j]) \
                    and found < pairs.shape[1]:
                pairs[i, found] = j
                found += 1
    pair_count[i] = found


@xsim.func
def closest_weights(p, a, b, c):
    """The barycentric weights (u, v, w) of the point u a + v b + w c of triangle (a, b, c) closest to
    ``p`` (Ericson 2004, by Voronoi regions): all three > 0 inside the face, one 0 on an edge, two on a
    corner."""
    zero = p[0] - p[0]
    one = zero + 1.0
    ab = b - a
    ac = c - a
    ap = p - a
    d1 = xsim.dot(ab, ap)
    d2 = xsim.dot(ac, ap)
    if d1 <= 0.0 and d2 <= 0.0:
        return type(p)(one, zero, zero)
    bp = p - b
    d3 = xsim.dot(ab, bp)
    d4 = xsim.dot(ac, bp)
    if d3 >= 0.0 and d4 <= d3:
        return type(p)(zero, one, zero)
    vc = d1 * d4 - d3 * d2
    if vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        s = d1 / (d1 - d3)
        return type(p)(one - s, s, zero)
    cp = p - c
    d5 = xsim.dot(ab, cp)
    d6 = xsim.dot(ac, cp)
    if d6 >= 0.0 and d5 <= d6:
        return type(p)(zero, zero, one)
    vb = d5 * d2 - d1 * d6
    if vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        s = d2 / (d2 - d6)
        return type(p)(one - s, zero, s)
    va = d3 * d6 - d5 * d4
    if va <= 0.0 and d4 - d3 >= 0.0 and d5 - d6 >= 0.0:
        s = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        return type(p)(zero, one - s, s)
    inv = one / (va + vb + vc)
    return type(p)(one - (vb + vc) * inv, vb * inv, vc * inv)


@xsim.kernel(enable_backward=False)
def triangle_centroids(x: Points, tris: Ints2, centroids: Points):
    """The centroid of each self-colliding triangle at ``x``, for the grid the vertices query."""
    t = xsim.tid()
    centroids[t] = (x[tris[t, 0]] + x[tris[t, 1]] + x[tris[t, 2]]) * (1.0 / 3.0)


@xsim.kernel(enable_backward=False)
def find_vertex_triangles(grid: xsim.uint64, x: Points, rest: Points, thickness: Reals, world: Ints, body: Ints,
                          tris: Ints2, centroids: Points, margin: float, reach: float, vertex_tris: Ints2,
                          distance: Reals2, vertex_count: Ints):
    """``vertex_tris[v]``: the nearest (at most the row's capacity) of the self-colliding triangles t within
    th = (thickness_v + thickness_t) / 2 + ``margin`` of self-colliding vertex v at ``x``, not those it is a
    corner of, as ``2 t + crease``: crease 1 for one of the same body within ``REST_EXCLUSION`` th of it at
    the ``rest`` positions, which must be within ``CREASE`` th + margin;
    sorted by triangle afterwards (``sort_vertex_rows``). ``grid``: the triangles' ``centroids``, queried
    within ``reach`` (the largest thickness, margin and triangle size); ``distance``: scratch, the
    candidates' distances."""
    v = xsim.tid()
    found = 0
    if thickness[v] > 0.0:
        p = x[v]
        cap = vertex_tris.shape[1]
        query = xsim.hash_grid_query(grid, p, reach)
        t = 0
        while xsim.hash_grid_query_next(query, t):
            ia = tris[t, 0]
            ib = tris[t, 1]
            ic = tris[t, 2]
            # the grid offers the centroids of 27 cells: the reach's sphere drops most, cheaply
            if xsim.length(centroids[t] - p) < reach and v != ia and v != ib and v != ic \
                    and meets(world[v], world[ia]):
                th = 0.5 * (thickness[v] + thickness[ia])
                a = x[ia]
                b = x[ib]
                c = x[ic]
                k = closest_weights(p, a, b, c)
                d = xsim.length(p - (a * k[0] + b * k[1] + c * k[2]))
                if d < th + margin:
                    crease = 0
                    if body[v] == body[ia]:
                        pr = rest[v]
                        kr = closest_weights(pr, rest[ia], rest[ib], rest[ic])
                        q = rest[ia] * kr[0] + rest[ib] * kr[1] + rest[ic] * kr[2]
                        if xsim.length(pr - q) < REST_EXCLUSION * th:
                            crease = 1
                    if d < th * xsim.where(crease == 1, CREASE, 1.0) + margin:
                        e = 2 * t + crease
                        if found < cap:
                            vertex_tris[v, found] = e
                            distance[v, found] = d
                            found += 1
                        else:  # full: the farthest gives way to a nearer one
                            far = 0
                            for j in range(1, cap):
                                if distance[v, j] > distance[v, far]:
                                    far = j
                            if d < distance[v, far]:
                                vertex_tris[v, far] = e
                                distance[v, far] = d
    vertex_count[v] = found


@xsim.kernel(enable_backward=False)
def sort_vertex_rows(vertex_tris: Ints2, vertex_count: Ints):
    """Each vertex's row of triangles in ascending order."""
    v = xsim.tid()
    count = vertex_count[v]
    for k in range(1, count):
        t = vertex_tris[v, k]
        j = k - 1
        while j >= 0 and vertex_tris[v, j] > t:
            vertex_tris[v, j + 1] = vertex_tris[v, j]
            j -= 1
        vertex_tris[v, j + 1] = t


@xsim.kernel(enable_backward=False)
def count_corners(vertex_tris: Ints2, vertex_count: Ints, tris: Ints2, corner_count: Ints):
    """How many contacts (vertex v, a triangle of v's row) each particle is a triangle corner of (atomic
    counts: integers, whatever the threads' order)."""
    v = xsim.tid()
    for k in range(vertex_count[v]):
        t = vertex_tris[v, k] // 2
        for c in range(3):
            xsim.atomic_add(corner_count, tris[t, c], 1)


@xsim.kernel(enable_backward=False)
def scan_corners(corner_count: Ints, corner_first: Ints, cursor: Ints):
    """``corner_first``: the exclusive prefix sum of ``corner_count`` (n + 1 entries), ``cursor`` its first n:
    where ``place_corners`` writes each particle's entries. One thread."""
    total = 0
    for q in range(corner_count.shape[0]):
        corner_first[q] = total
        cursor[q] = total
        total += corner_count[q]
    corner_first[corner_count.shape[0]] = total


@xsim.kernel(enable_backward=False)
def place_corners(vertex_tris: Ints2, vertex_count: Ints, tris: Ints2, cursor: Ints, corners: Ints):
    """Each contact (v, the k-th triangle of v's row) written for each corner q of the triangle into q's
    segment of ``corners`` as ``4 (v K + k) + c`` (K: the rows' capacity, c: q's corner 1..3), in any order
    (``sort_corners`` orders each segment)."""
    v = xsim.tid()
    width = vertex_tris.shape[1]
    for k in range(vertex_count[v]):
        t = vertex_tris[v, k] // 2
        for c in range(3):
            slot = xsim.atomic_add(cursor, tris[t, c], 1)
            corners[slot] = 4 * (v * width + k) + c + 1


@xsim.kernel(enable_backward=False)
def sort_corners(corner_first: Ints, corners: Ints):
    """Each particle's segment of corner entries in ascending order."""
    q = xsim.tid()
    first = corner_first[q]
    for k in range(first + 1, corner_first[q + 1]):
        e = corners[k]
        j = k - 1
        while j >= first and corners[j] > e:
            corners[j + 1] = corners[j]
            j -= 1
        corners[j + 1] = e


class Proximity:
    """The candidate rows of one model's particles (module docstring), found by ``find`` each substep.
    Tables that do not change (roles, bodies, self-colliding triangles, rest positions) are made here,
    once."""

    def __init__(self, model):
        self.model = m = model
        n = m.particle_count
        dev = m.device
        role, body = particle_roles(m)
        thickness = m.particle_thickness.numpy().astype(np.float64) if n else np.zeros(0)
        tris = np.asarray(m.tri_indices, dtype=np.int32).reshape(-1, 3)
        tris = tris[(thickness[tris] > 0.0).all(axis=1)] if len(tris) else tris
        self.pairs_on = n > 1 and bool((role == FREE).any())
        self.self_on = len(tris) > 0
        self.on = self.pairs_on or self.self_on
        self.tris = xsim.array(tris.reshape(-1, 3), dtype=int, device=dev)
        self._tris_np = tris.reshape(-1, 3)
        self.tri_count = len(tris)
        self._radius = m.particle_radius.numpy().astype(np.float64) if n else np.zeros(0)
        self._dynamic = m.particle_inv_mass.numpy() > 0.0
        self._thickness = thickness
        self._role = xsim.array(role, dtype=int, device=dev)
        self._body = xsim.array(body, dtype=int, device=dev)
        self._radius32 = xsim.array(self._radius.astype(np.float32), dtype=xsim.float32, device=dev)
        self._thickness32 = xsim.array(thickness.astype(np.float32), dtype=xsim.float32, device=dev)
        self._rest = xsim.array(m.particle_q.numpy().astype(np.float32).reshape(-1, 3), dtype=xsim.vec3, device=dev)
        cells = int(np.clip(np.ceil((2.0 * max(n, 1)) ** (1.0 / 3.0)), 8, 64))
        self._grid = xsim.HashGrid(cells, cells, cells, device=dev) if self.pairs_on else None
        self._tri_grid = xsim.HashGrid(cells, cells, cells, device=dev) if self.self_on else None
        self._centroids = xsim.zeros(len(tris), dtype=xsim.vec3, device=dev)
        self._empty_rows = xsim.zeros((n, 0), dtype=int, device=dev)
        self._zero_counts = xsim.zeros(n, dtype=int, device=dev)
        self._distance = None
        self._corner_count = xsim.zeros(n, dtype=int, device=dev)
        self._cursor = xsim.zeros(n, dtype=int, device=dev)
        self._no_corners = xsim.zeros(0, dtype=int, device=dev)
        self._no_corner_first = xsim.zeros(n + 1, dtype=int, device=dev)
        r_max = float(self._radius.max(initial=0.0))
        th_max = float(thickness.max(initial=0.0))
        self._slack = 0.5 * max(r_max, th_max)
        self._r_max, self._th_max = r_max, th_max
        if self.self_on:
            x = m.particle_q.numpy().reshape(-1, 3)[tris]
            self._tri_size = float(np.linalg.norm(x - x.mean(axis=1, keepdims=True), axis=2).max())
        else:
            self._tri_size = 0.0

    def find(self, x, x_pred, new) -> Rows:
        """The candidate rows of a substep from its start ``x`` and predicted positions ``x_pred``;
        ``new(key, shape, dtype)``: the solver's allocator (new arrays where a Tape records the rows'
        readers)."""
        n = self.model.particle_count
        return self._find(x.numpy().reshape(n, 3).astype(np.float64),
                          x_pred.numpy().reshape(n, 3).astype(np.float64), new)

    def find_for_step(self, x, v, dt: float, new) -> Rows | None:
        """The candidate rows of a whole step of ``dt`` s from positions ``x`` and velocities ``v``, found once
        for every substep, where the particles move slowly: twice the farthest free-flight motion of the step
        within ``STEP_REUSE`` of the slack. None where they move faster (find them each substep)."""
        m = self.model
        n = m.particle_count
        start = x.numpy().reshape(n, 3).astype(np.float64)
        pred = start + v.numpy().reshape(n, 3).astype(np.float64) * dt
        pred[self._dynamic] += np.asarray(m.gravity) * (0.5 * dt * dt)
        moved = _farthest(pred - start)
        if 2.0 * moved > STEP_REUSE * self._slack:
            return None
        return self._find(start, pred, new)

    def _find(self, start: np.ndarray, pred: np.ndarray, new) -> Rows:
        m = self.model
        n = m.particle_count
        moved = _farthest(pred - start)
        margin = 2.0 * moved + self._slack
        points = xsim.array(pred.astype(np.float32), dtype=xsim.vec3, device=m.device)
        pair_reach = 2.0 * self._r_max + margin
        tri_reach = self._th_max + margin
        rows = Rows(self)
        if self.pairs_on:
            self._grid.build(points, pair_reach)
            rows.pairs = new("self:pairs", (n, CAPACITY), int)
            rows.pair_count = new("self:pair_count", n, int)
            xsim.launch(find_particle_pairs, n, inputs=[self._grid.id, points, self._radius32, m.particle_world,
                                                        self._role, margin, pair_reach],
                        outputs=[rows.pairs, rows.pair_count], record_tape=False)
        if self.self_on:
            corners = pred[self._tris_np]  # the triangles' size now (they stretch), not at rest
            size = _farthest((corners - corners.mean(axis=1, keepdims=True)).reshape(-1, 3))
            reach = size + tri_reach
            xsim.launch(triangle_centroids, self.tri_count, inputs=[points, self.tris], outputs=[self._centroids],
                        record_tape=False)
            self._tri_grid.build(self._centroids, reach)
            rows.vertex_tris = new("self:vertex_tris", (n, CAPACITY), int)
            rows.vertex_tri_count = new("self:vertex_tri_count", n, int)
            distance = self._distance if self._distance is not None else xsim.empty(
                (n, CAPACITY), dtype=xsim.float32, device=m.device)
            self._distance = distance
            xsim.launch(find_vertex_triangles, n, inputs=[
                self._tri_grid.id, points, self._rest, self._thickness32, m.particle_world, self._body, self.tris,
                self._centroids, margin, reach], outputs=[rows.vertex_tris, distance, rows.vertex_tri_count],
                record_tape=False)
            xsim.launch(sort_vertex_rows, n, inputs=[], outputs=[rows.vertex_tris, rows.vertex_tri_count],
                        record_tape=False)
            rows.corner_first = new("self:corner_first", n + 1, int)
            rows.corners = new("self:corners", 3 * CAPACITY * n, int)
            count, cursor = self._corner_count, self._cursor
            count.zero_untracked()
            launch = {"record_tape": False}
            xsim.launch(count_corners, n, inputs=[rows.vertex_tris, rows.vertex_tri_count, self.tris],
                        outputs=[count], **launch)
            xsim.launch(scan_corners, 1, inputs=[count], outputs=[rows.corner_first, cursor], **launch)
            xsim.launch(place_corners, n, inputs=[rows.vertex_tris, rows.vertex_tri_count, self.tris, cursor],
                        outputs=[rows.corners], **launch)
            xsim.launch(sort_corners, n, inputs=[rows.corner_first], outputs=[rows.corners], **launch)
        return rows


def _farthest(d: np.ndarray) -> float:
    """The longest of the displacements ``d`` (n, 3), m, over the finite ones: a NaN or inf position is the
    kernels' to report (check mode names the first launch that reads it), not a grid's to choke on."""
    with np.errstate(invalid="ignore", over="ignore"):
        lengths = np.sqrt((d * d).sum(axis=1))
    return float(lengths[np.isfinite(lengths)].max(initial=0.0))


class Rows:
    """One substep's candidate rows (``Proximity.find``); empty rows where a kind is off."""

    def __init__(self, proximity: Proximity):
        p = proximity
        self.pairs = self.vertex_tris = p._empty_rows
        self.pair_count = self.vertex_tri_count = p._zero_counts
        self.corners = p._no_corners
        self.corner_first = p._no_corner_first
        self.tris = p.tris
