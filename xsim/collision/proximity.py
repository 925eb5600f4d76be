"""Which particles are near which particles and cloth triangles: the candidates of the particle-particle
and cloth self contacts that ``xsim.solvers.xpbd.self_contact`` resolves, found once per substep.

Candidates are found at the predicted positions of a substep within a ``margin`` (m) that covers how
far the particles can still move during its iterations, and kept in fixed-capacity rows:

- ``pairs[i]``: the particles within ``r_i + r_j + margin`` of particle i, for pairs with at least one
  free particle (one in no constraint: ``particle_roles``); a cloth's or a soft body's own particles
  never meet each other through this path (they are neighbours on their mesh; a cloth meets itself
  through its triangles, below);
- ``tri_vertices[t]``: the vertices within ``thickness + margin`` of self-colliding triangle t, not
  its own, and, for a vertex of the same cloth, not within twice the thickness of it in the rest
  shape (those touch the triangle in the flat cloth itself: its mesh neighbours);
- ``vertex_tris[v]``: the same pairs by vertex, sorted by triangle.

Every row is in a fixed order (the hash grid's, which is built by a stable sort, and sorted rows), so a
step repeats bit for bit whatever the threads. A row holds at most ``CAPACITY`` candidates; more are
dropped (the nearest are not preferred), which the capacity makes rare: a vertex of a cloth folded
in four meets about 20 triangles.

The hash grid is ``xsim.HashGrid``, built on the host from the predicted positions (one copy of them
per substep); the queries are kernels. Which candidates exist is a selection, not arithmetic on the
state: nothing here is on the Tape.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph

import xsim

CAPACITY = 32  # candidates per row

Points = xsim.array(dtype=xsim.vec3)
Reals = xsim.array(dtype=xsim.float32)
Ints = xsim.array(dtype=int)
Ints2 = xsim.array(dtype=int, ndim=2)

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
def find_vertex_triangles(grid: xsim.uint64, x: Points, rest: Points, thickness: Reals, world: Ints, body: Ints,
                          tris: Ints2, margin: float, reach: float, tri_vertices: Ints2, tri_count: Ints,
                          vertex_tris: Ints2, vertex_count: Ints):
    """Rows ``tri_vertices[t]`` of self-colliding triangle ``tris[t]`` and, by atomic claims (sorted
    afterwards by ``sort_vertex_rows``), ``vertex_tris[v]``: the self-colliding vertices v (thickness > 0)
    within (thickness_v + thickness_t) / 2 + ``margin`` of the triangle at ``x``, not its corners, and for
    one of the same body not within twice that distance of it at the ``rest`` positions. ``reach``: the
    query's radius beyond the triangle's bounding sphere."""
    t = xsim.tid()
    ia = tris[t, 0]
    ib = tris[t, 1]
    ic = tris[t, 2]
    a = x[ia]
    b = x[ib]
    c = x[ic]
    g = (a + b + c) * (1.0 / 3.0)
    rho = xsim.max(xsim.max(xsim.length(a - g), xsim.length(b - g)), xsim.length(c - g))
    found = 0
    query = xsim.hash_grid_query(grid, g, rho + reach)
    v = 0
    while xsim.hash_grid_query_next(query, v):
        if v != ia and v != ib and v != ic and thickness[v] > 0.0 and meets(world[v], world[ia]):
            th = 0.5 * (thickness[v] + thickness[ia])
            p = x[v]
            k = closest_weights(p, a, b, c)
            if xsim.length(p - (a * k[0] + b * k[1] + c * k[2])) < th + margin:
                near_at_rest = False
                if body[v] == body[ia]:
                    pr = rest[v]
                    kr = closest_weights(pr, rest[ia], rest[ib], rest[ic])
                    q = rest[ia] * kr[0] + rest[ib] * kr[1] + rest[ic] * kr[2]
                    near_at_rest = xsim.length(pr - q) < 2.0 * th
                if not near_at_rest and found < tri_vertices.shape[1]:
                    tri_vertices[t, found] = v
                    found += 1
                    slot = xsim.atomic_add(vertex_count, v, 1)
                    if slot < vertex_tris.shape[1]:
                        vertex_tris[v, slot] = t
    tri_count[t] = found


@xsim.kernel(enable_backward=False)
def sort_vertex_rows(vertex_tris: Ints2, vertex_count: Ints):
    """Each vertex's row of triangles in ascending order (the atomic claims of ``find_vertex_triangles``
    filled it in any order), its count clamped to the row's capacity."""
    v = xsim.tid()
    count = xsim.min(vertex_count[v], vertex_tris.shape[1])
    for k in range(1, count):
        t = vertex_tris[v, k]
        j = k - 1
        while j >= 0 and vertex_tris[v, j] > t:
            vertex_tris[v, j + 1] = vertex_tris[v, j]
            j -= 1
        vertex_tris[v, j + 1] = t
    vertex_count[v] = count


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
        self.tri_count = len(tris)
        # each vertex's self-colliding triangles (a CSR over particles), for the triangle side of a contact
        owner = tris.ravel().astype(np.int64)
        order = np.argsort(owner, kind="stable")
        self.vertex_first = xsim.array(np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n))]).astype(
            np.int32), dtype=int, device=dev)
        self.vertex_tri = xsim.array((order // 3).astype(np.int32) if len(order) else np.zeros(1, np.int32),
                                     dtype=int, device=dev)
        self._radius = m.particle_radius.numpy().astype(np.float64) if n else np.zeros(0)
        self._thickness = thickness
        self._role = xsim.array(role, dtype=int, device=dev)
        self._body = xsim.array(body, dtype=int, device=dev)
        self._radius32 = xsim.array(self._radius.astype(np.float32), dtype=xsim.float32, device=dev)
        self._thickness32 = xsim.array(thickness.astype(np.float32), dtype=xsim.float32, device=dev)
        self._rest = xsim.array(m.particle_q.numpy().astype(np.float32).reshape(-1, 3), dtype=xsim.vec3, device=dev)
        cells = int(np.clip(np.ceil((2.0 * max(n, 1)) ** (1.0 / 3.0)), 8, 64))
        self._grid = xsim.HashGrid(cells, cells, cells, device=dev) if self.on else None
        self._empty_rows = xsim.zeros((n, 0), dtype=int, device=dev)
        self._zero_counts = xsim.zeros(n, dtype=int, device=dev)
        self._empty_tri_rows = xsim.zeros((0, 0), dtype=int, device=dev)
        self._no_tris = xsim.zeros(0, dtype=int, device=dev)
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
        m = self.model
        n = m.particle_count
        start = x.numpy().reshape(n, 3).astype(np.float64)
        pred = x_pred.numpy().reshape(n, 3).astype(np.float64)
        moved = float(np.sqrt(((pred - start) ** 2).sum(axis=1)).max(initial=0.0))
        margin = 2.0 * moved + self._slack
        points = xsim.array(pred.astype(np.float32), dtype=xsim.vec3, device=m.device)
        pair_reach = 2.0 * self._r_max + margin
        tri_reach = self._th_max + margin
        self._grid.build(points, max(pair_reach, self._tri_size + tri_reach))
        rows = Rows(self)
        if self.pairs_on:
            rows.pairs = new("self:pairs", (n, CAPACITY), int)
            rows.pair_count = new("self:pair_count", n, int)
            xsim.launch(find_particle_pairs, n, inputs=[self._grid.id, points, self._radius32, m.particle_world,
                                                        self._role, margin, pair_reach],
                        outputs=[rows.pairs, rows.pair_count], record_tape=False)
        if self.self_on:
            rows.tri_vertices = new("self:tri_vertices", (self.tri_count, CAPACITY), int)
            rows.tri_vertex_count = new("self:tri_vertex_count", self.tri_count, int)
            rows.vertex_tris = new("self:vertex_tris", (n, CAPACITY), int)
            rows.vertex_tri_count = new("self:vertex_tri_count", n, int)
            rows.vertex_tri_count.zero_untracked()
            xsim.launch(find_vertex_triangles, self.tri_count, inputs=[
                self._grid.id, points, self._rest, self._thickness32, m.particle_world, self._body, self.tris,
                margin, tri_reach], outputs=[rows.tri_vertices, rows.tri_vertex_count, rows.vertex_tris,
                                             rows.vertex_tri_count], record_tape=False)
            xsim.launch(sort_vertex_rows, n, inputs=[], outputs=[rows.vertex_tris, rows.vertex_tri_count],
                        record_tape=False)
        return rows


class Rows:
    """One substep's candidate rows (``Proximity.find``); empty rows where a kind is off."""

    def __init__(self, proximity: Proximity):
        p = proximity
        self.pairs = self.vertex_tris = p._empty_rows
        self.pair_count = self.vertex_tri_count = p._zero_counts
        self.tri_vertices = p._empty_tri_rows
        self.tri_vertex_count = p._no_tris
        self.tris = p.tris
        self.vertex_first = p.vertex_first
        self.vertex_tri = p.vertex_tri
