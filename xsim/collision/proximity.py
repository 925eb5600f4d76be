"""Which particles are near which particles, cloth triangles and edges: the candidates of the
particle-particle and cloth self contacts that ``xsim.solvers.xpbd.self_contact`` resolves, found once per
substep (once per step where the particles move slowly: ``Proximity.find_for_step``).

Candidates are found at the predicted positions within a ``margin`` (m) that covers how far the particles
can still move during the iterations: twice the farthest predicted motion plus a slack of a quarter of the
largest radius or thickness. They are kept in rows:

- ``pairs[i]``: the particles within ``r_i + r_j + margin`` of particle i, for pairs with at least one
  free particle (one in no constraint: ``particle_roles``); a cloth's or a soft body's own particles
  never meet each other through this path (they are neighbours on their mesh; a cloth meets itself
  through its triangles, below);
- ``vertex_tris[v]``: the self-colliding triangles within ``thickness + margin`` of vertex v, not its own,
  as ``2 t + crease``: crease pairs (of one cloth, within ``REST_EXCLUSION`` thicknesses of each other in
  the rest shape: in the flat cloth they would touch, they are mesh neighbours) keep only ``CREASE``
  thicknesses apart, so that a sharp fold cannot pass through itself while the flat cloth pushes
  nothing apart; the nearest ``CAPACITY`` where there are more; sorted;
- ``edge_edges[e]``: edges f sharing no particle with e whose segments come within their distance plus the
  margin of e's, as ``2 f + crease`` like the triangles, the nearest ``EDGE_CAPACITY``, sorted: e's crease
  partners (listed once, when the model is made: ``crease_partners``) and, where an edge is longer than
  twice its thickness, every edge near it (a shorter edge cannot pass through another one while its ends
  keep their thickness from the other's triangles: an edge piercing a triangle has an end within half its
  length of it); ``edge_corners[edge_corner_first[q]:edge_corner_first[q + 1]]``: the
  edge-edge contacts particle q is an end of, ``4 (e EDGE_CAPACITY + k) + role`` (0, 1: e's ends);
- ``corners[corner_first[q]:corner_first[q + 1]]``: each contact (v, k-th triangle of v's row) that
  particle q is a corner of, encoded ``4 (v CAPACITY + k) + corner``, sorted (complete: a segment per
  particle, however many).

Every row is in a fixed order (the hash grid's, which is built by a stable sort, and sorted rows), so a
step repeats bit for bit whatever the threads. A vertex row keeps its nearest ``CAPACITY`` triangles (a
vertex of a cloth folded in four touches about 20).

The hash grids are ``xsim.HashGrid``s (of the particles, the self-colliding triangles' centroids and the
long edges' midpoints), built on the host from the predicted positions (one copy of them per detection);
the queries are kernels. Which candidates exist is a selection, not arithmetic on the state: nothing here
is on the Tape.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import scipy.spatial

import xsim

CAPACITY = 32  # candidates per row
EDGE_CAPACITY = 16  # edges per edge's row
# same-cloth pairs closer than this many thicknesses in the rest shape (its mesh neighbours: in the flat
# cloth they would touch) are crease pairs: they keep only CREASE thicknesses apart, so a sharp crease
# cannot fold through itself while the flat cloth pushes nothing apart
REST_EXCLUSION = 1.25
CREASE = 0.05
STEP_REUSE = 2.0  # a step's rows serve all its substeps while twice its motion stays within this many slacks

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


@xsim.func
def segment_closest(a, b, c, d):
    """The parameters (s, t) in [0, 1] of the closest points a + s (b - a) and c + t (d - c) of segments ab
    and cd (Ericson 2004, 5.1.9); a degenerate segment's parameter is 0."""
    zero = a[0] - a[0]
    d1 = b - a
    d2 = d - c
    r = a - c
    aa = xsim.dot(d1, d1)
    ee = xsim.dot(d2, d2)
    f = xsim.dot(d2, r)
    s = zero
    t = zero
    if aa > 0.0 and ee > 0.0:
        cc = xsim.dot(d1, r)
        bb = xsim.dot(d1, d2)
        denom = aa * ee - bb * bb
        if denom > 0.0:
            s = xsim.clamp((bb * f - cc * ee) / denom, zero, zero + 1.0)
        t = (bb * s + f) / ee
        if t < 0.0:
            t = zero
            s = xsim.clamp(-cc / aa, zero, zero + 1.0)
        elif t > 1.0:
            t = zero + 1.0
            s = xsim.clamp((bb - cc) / aa, zero, zero + 1.0)
    elif ee > 0.0:
        t = xsim.clamp(f / ee, zero, zero + 1.0)
    elif aa > 0.0:
        s = xsim.clamp(-xsim.dot(d1, r) / aa, zero, zero + 1.0)
    return s, t


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
    sorted by triangle afterwards (``sort_rows``). ``grid``: the triangles' ``centroids``, queried
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
def sort_rows(rows: Ints2, count: Ints):
    """Each row's first ``count`` entries in ascending order (the vertices' triangles, the edges' edges)."""
    v = xsim.tid()
    for k in range(1, count[v]):
        t = rows[v, k]
        j = k - 1
        while j >= 0 and rows[v, j] > t:
            rows[v, j + 1] = rows[v, j]
            j -= 1
        rows[v, j + 1] = t


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


@xsim.kernel(enable_backward=False)
def edge_midpoints(x: Points, edges: Ints2, midpoints: Points):
    """The midpoint of each self-colliding edge at ``x``, for the grid the edges query."""
    e = xsim.tid()
    midpoints[e] = (x[edges[e, 0]] + x[edges[e, 1]]) * 0.5


@xsim.func
def keep_nearest(rows: Ints2, distance: Reals2, e: int, found: int, entry: int, gap: float):
    """Row ``e`` with ``entry`` at distance ``gap`` added: appended while the row has room, else in place of
    its farthest entry if nearer. Returns the row's new count."""
    cap = rows.shape[1]
    if found < cap:
        rows[e, found] = entry
        distance[e, found] = gap
        return found + 1
    far = 0
    for j in range(1, cap):
        if distance[e, j] > distance[e, far]:
            far = j
    if gap < distance[e, far]:
        rows[e, far] = entry
        distance[e, far] = gap
    return found


@xsim.func
def edge_gap(x: Points, ia: int, ib: int, ic: int, jd: int):
    """The distance between segments x[ia] x[ib] and x[ic] x[jd]."""
    a = x[ia]
    b = x[ib]
    c = x[ic]
    d = x[jd]
    s, t = segment_closest(a, b, c, d)
    return xsim.length(a + (b - a) * s - (c + (d - c) * t))


@xsim.func
def is_crease_partner(crease_first: Ints, crease_edge: Ints, e: int, f: int):
    """Whether edges e and f are crease partners (listed with the lower of the two)."""
    lo = xsim.min(e, f)
    hi = xsim.max(e, f)
    partner = False
    for k in range(crease_first[lo], crease_first[lo + 1]):
        if crease_edge[k] == hi:
            partner = True
    return partner


@xsim.kernel(enable_backward=False)
def find_edge_pairs(grid: xsim.uint64, use_grid: int, x: Points, thickness: Reals, world: Ints, edges: Ints2,
                    midpoints: Points, crease_first: Ints, crease_edge: Ints, margin: float, reach: float,
                    edge_edges: Ints2, distance: Reals2, edge_count: Ints):
    """``edge_edges[e]``: the nearest (at most the row's capacity) edges f whose segments come within their
    distance plus ``margin`` of e's at ``x``, as ``2 f + crease``: e's crease partners (``crease_edge[
    crease_first[e]:crease_first[e + 1]]``, f > e: of its cloth, within ``REST_EXCLUSION`` thicknesses at
    rest), which keep ``CREASE`` of the thickness, and, where e is longer than twice its thickness (then
    the vertex-triangle contacts of its ends cannot keep it from crossing another edge), every other edge
    sharing no particle with e from the grid of ``midpoints`` within ``reach``, each pair once (by the
    longer, or the lower index of two long ones); ``distance``: scratch."""
    e = xsim.tid()
    ia = edges[e, 0]
    ib = edges[e, 1]
    found = 0
    for k in range(crease_first[e], crease_first[e + 1]):
        f = crease_edge[k]
        th = 0.5 * (thickness[ia] + thickness[edges[f, 0]]) * CREASE
        gap = edge_gap(x, ia, ib, edges[f, 0], edges[f, 1])
        if gap < th + margin:
            found = keep_nearest(edge_edges, distance, e, found, 2 * f + 1, gap)
    if use_grid != 0 and xsim.length(x[ib] - x[ia]) > 2.0 * thickness[ia]:
        query = xsim.hash_grid_query(grid, midpoints[e], reach)
        f = 0
        while xsim.hash_grid_query_next(query, f):
            ic = edges[f, 0]
            jd = edges[f, 1]
            other_long = xsim.length(x[jd] - x[ic]) > 2.0 * thickness[ic]
            if (f > e or not other_long) and f != e and xsim.length(midpoints[f] - midpoints[e]) < reach \
                    and ia != ic and ia != jd and ib != ic and ib != jd and meets(world[ia], world[ic]) \
                    and not is_crease_partner(crease_first, crease_edge, e, f):
                gap = edge_gap(x, ia, ib, ic, jd)
                if gap < 0.5 * (thickness[ia] + thickness[ic]) + margin:
                    found = keep_nearest(edge_edges, distance, e, found, 2 * f, gap)
    edge_count[e] = found


def crease_partners(rest: np.ndarray, edges: np.ndarray, thickness: np.ndarray, body: np.ndarray):
    """The crease partners of each edge, as a CSR (first (m + 1,), partner edges): the edges f > e of the
    same body sharing no particle with e whose segments are within ``REST_EXCLUSION`` times their thickness
    of e's in the ``rest`` shape (n, 3), m (``find_edge_pairs``). From a KD-tree of the midpoints, then the
    exact segment distance (numpy)."""
    m = len(edges)
    if m == 0:
        return np.zeros(1, np.int32), np.zeros(1, np.int32)
    a, b = rest[edges[:, 0]], rest[edges[:, 1]]
    mid = 0.5 * (a + b)
    half = 0.5 * float(np.linalg.norm(b - a, axis=1).max())
    pairs = np.array(sorted(scipy.spatial.cKDTree(mid).query_pairs(
        2.0 * half + REST_EXCLUSION * float(thickness.max()))), dtype=np.int64).reshape(-1, 2)
    e, f = pairs[:, 0], pairs[:, 1]
    shared = (edges[e][:, :, None] == edges[f][:, None, :]).any(axis=(1, 2))
    keep = ~shared & (body[edges[e, 0]] == body[edges[f, 0]])
    e, f = e[keep], f[keep]
    gap = _segment_distances(a[e], b[e], a[f], b[f])
    th = 0.5 * (thickness[edges[e, 0]] + thickness[edges[f, 0]])
    keep = gap < REST_EXCLUSION * th
    e, f = e[keep], f[keep]
    order = np.lexsort((f, e))
    e, f = e[order], f[order]
    first = np.concatenate([[0], np.cumsum(np.bincount(e, minlength=m))]).astype(np.int32)
    return first, (f.astype(np.int32) if len(f) else np.zeros(1, np.int32))


def _segment_distances(a, b, c, d) -> np.ndarray:
    """Distances between segments a b and c d, row by row ((k, 3) each, float64): Ericson's closest points."""
    d1, d2, r = b - a, d - c, a - c
    aa, ee = (d1 * d1).sum(1), (d2 * d2).sum(1)
    f, cc, bb = (d2 * r).sum(1), (d1 * r).sum(1), (d1 * d2).sum(1)
    denom = aa * ee - bb * bb
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(denom > 0.0, np.clip((bb * f - cc * ee) / denom, 0.0, 1.0), 0.0)
        t = np.where(ee > 0.0, (bb * s + f) / ee, 0.0)
        low, high = t < 0.0, t > 1.0
        s = np.where(low, np.clip(-cc / aa, 0.0, 1.0), np.where(high, np.clip((bb - cc) / aa, 0.0, 1.0), s))
        t = np.clip(t, 0.0, 1.0)
    return np.linalg.norm(a + d1 * s[:, None] - (c + d2 * t[:, None]), axis=1)


@xsim.func
def edge_pair_particles(edges: Ints2, e: int, entry: int):
    """The four particles of the contact of edge e with the edge of ``entry`` (``2 f + crease``): e's ends,
    then f's."""
    f = entry // 2
    return edges[e, 0], edges[e, 1], edges[f, 0], edges[f, 1]


@xsim.kernel(enable_backward=False)
def count_edge_corners(edge_edges: Ints2, edge_count: Ints, edges: Ints2, corner_count: Ints):
    """How many edge-edge contacts each particle is an end of (atomic counts)."""
    e = xsim.tid()
    for k in range(edge_count[e]):
        pa, pb, pc, pd = edge_pair_particles(edges, e, edge_edges[e, k])
        xsim.atomic_add(corner_count, pa, 1)
        xsim.atomic_add(corner_count, pb, 1)
        xsim.atomic_add(corner_count, pc, 1)
        xsim.atomic_add(corner_count, pd, 1)


@xsim.kernel(enable_backward=False)
def place_edge_corners(edge_edges: Ints2, edge_count: Ints, edges: Ints2, cursor: Ints, corners: Ints):
    """Each edge-edge contact (e, the k-th of e's row) written into the segments of its four particles as
    ``4 (e K + k) + role`` (K: the rows' capacity; role 0, 1: e's ends, 2, 3: the other edge's), in any order
    (``sort_corners`` orders each segment)."""
    e = xsim.tid()
    width = edge_edges.shape[1]
    for k in range(edge_count[e]):
        pa, pb, pc, pd = edge_pair_particles(edges, e, edge_edges[e, k])
        code = 4 * (e * width + k)
        corners[xsim.atomic_add(cursor, pa, 1)] = code
        corners[xsim.atomic_add(cursor, pb, 1)] = code + 1
        corners[xsim.atomic_add(cursor, pc, 1)] = code + 2
        corners[xsim.atomic_add(cursor, pd, 1)] = code + 3


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
        self.self_on = len(tris) > 0
        self.tris = xsim.array(tris.reshape(-1, 3), dtype=int, device=dev)
        self._tris_np = tris.reshape(-1, 3)
        edges = np.unique(np.sort(tris[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1), axis=0) if len(tris) else \
            np.zeros((0, 2), np.int32)
        self._edges_np = edges.astype(np.int32)
        self.edges = xsim.array(self._edges_np.reshape(-1, 2), dtype=int, device=dev)
        self.edge_count = len(edges)
        self.pairs_on = n > 1 and bool((role == FREE).any())
        self.on = self.pairs_on or self.self_on
        _check_memory(m, self.pairs_on, len(tris), self.edge_count)
        rest64 = m.particle_q.numpy().astype(np.float64).reshape(-1, 3)
        first, partner = crease_partners(rest64, self._edges_np, thickness, body)
        self._crease_first = xsim.array(first, dtype=int, device=dev)
        self._crease_edge = xsim.array(partner, dtype=int, device=dev)
        self._edge_thickness = thickness[self._edges_np[:, 0]] if len(edges) else np.zeros(0)
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
        self._edge_grid = xsim.HashGrid(cells, cells, cells, device=dev) if self.self_on else None
        self._midpoints = xsim.zeros(self.edge_count, dtype=xsim.vec3, device=dev)
        self._edge_distance = xsim.empty((self.edge_count, EDGE_CAPACITY), dtype=xsim.float32, device=dev)
        self._no_edge_rows = xsim.zeros((0, 0), dtype=int, device=dev)
        self._no_edge_counts = xsim.zeros(0, dtype=int, device=dev)
        self._empty_rows = xsim.zeros((n, 0), dtype=int, device=dev)
        self._zero_counts = xsim.zeros(n, dtype=int, device=dev)
        self._distance = xsim.empty((n, CAPACITY) if self.self_on else (0, CAPACITY), dtype=xsim.float32, device=dev)
        self._corner_count = xsim.zeros(n, dtype=int, device=dev)
        self._cursor = xsim.zeros(n, dtype=int, device=dev)
        self._no_corners = xsim.zeros(0, dtype=int, device=dev)
        self._no_corner_first = xsim.zeros(n + 1, dtype=int, device=dev)
        r_max = float(self._radius.max(initial=0.0))
        th_max = float(thickness.max(initial=0.0))
        self._slack = 0.25 * max(r_max, th_max)
        self._r_max, self._th_max = r_max, th_max

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
            distance = self._distance
            xsim.launch(find_vertex_triangles, n, inputs=[
                self._tri_grid.id, points, self._rest, self._thickness32, m.particle_world, self._body, self.tris,
                self._centroids, margin, reach], outputs=[rows.vertex_tris, distance, rows.vertex_tri_count],
                record_tape=False)
            xsim.launch(sort_rows, n, inputs=[], outputs=[rows.vertex_tris, rows.vertex_tri_count],
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
            # edges against edges: crease partners always, the grid where an edge is longer than twice its
            # thickness (then its ends' contacts cannot keep it from crossing another edge)
            ends = pred[self._edges_np]
            with np.errstate(invalid="ignore"):
                lengths = np.sqrt(((ends[:, 1] - ends[:, 0]) ** 2).sum(axis=1))
            use_grid = bool((lengths > 2.0 * self._edge_thickness).any())
            edge_reach = 2.0 * 0.5 * _farthest((ends[:, 1] - ends[:, 0]).reshape(-1, 3)) + tri_reach
            xsim.launch(edge_midpoints, self.edge_count, inputs=[points, self.edges], outputs=[self._midpoints],
                        **launch)
            if use_grid:
                self._edge_grid.build(self._midpoints, edge_reach)
            rows.edge_edges = new("self:edge_edges", (self.edge_count, EDGE_CAPACITY), int)
            rows.edge_edge_count = new("self:edge_edge_count", self.edge_count, int)
            xsim.launch(find_edge_pairs, self.edge_count, inputs=[
                self._edge_grid.id, int(use_grid), points, self._thickness32, m.particle_world, self.edges,
                self._midpoints, self._crease_first, self._crease_edge, margin, edge_reach],
                outputs=[rows.edge_edges, self._edge_distance, rows.edge_edge_count], **launch)
            xsim.launch(sort_rows, self.edge_count, inputs=[], outputs=[rows.edge_edges, rows.edge_edge_count],
                        **launch)
            rows.edge_corner_first = new("self:edge_corner_first", n + 1, int)
            rows.edge_corners = new("self:edge_corners", 4 * EDGE_CAPACITY * self.edge_count, int)
            count.zero_untracked()
            xsim.launch(count_edge_corners, self.edge_count, inputs=[rows.edge_edges, rows.edge_edge_count,
                                                                     self.edges], outputs=[count], **launch)
            xsim.launch(scan_corners, 1, inputs=[count], outputs=[rows.edge_corner_first, cursor], **launch)
            xsim.launch(place_edge_corners, self.edge_count, inputs=[rows.edge_edges, rows.edge_edge_count, self.edges,
                                                                     cursor], outputs=[rows.edge_corners], **launch)
            xsim.launch(sort_corners, n, inputs=[rows.edge_corner_first], outputs=[rows.edge_corners], **launch)
        return rows


def bytes_needed(particles: int, pairs: bool, triangles: int, edges: int, scalar_bytes: int) -> int:
    """The memory (bytes) of a model's candidate rows and their scratch slots (``Rows``, the solver's
    ``self:*`` buffers): ``particles`` with pair rows where ``pairs``, ``triangles`` and ``edges`` of
    self-colliding cloth; ``scalar_bytes``: 4 or 8 (the model's float)."""
    vec = 3 * scalar_bytes
    total = particles * CAPACITY * 4 if pairs else 0
    if triangles:
        total += particles * CAPACITY * (4 + 4 + 3 * 4 + 4 * vec + 4)  # rows, distances, corners, slots, hits
        total += edges * EDGE_CAPACITY * (4 + 4 + 4 * 4 + 4 * vec + 4)
        total += triangles * 12
    return total


def _check_memory(model, pairs: bool, self_tris: int, edges: int) -> None:
    """Refuse, before the rows are allocated, a model whose particle contacts (pair rows where ``pairs``,
    ``self_tris`` self-colliding triangles with ``edges`` edges) would need more memory than the machine has
    (``xsim.sim.validate.memory_bytes``)."""
    from xsim.sim import validate

    n = model.particle_count
    need = bytes_needed(n, pairs, self_tris, edges, np.dtype(model.dtype._np).itemsize)
    have = validate.memory_bytes()
    if need > have:
        raise MemoryError(f"particle contacts of {n} particles and {self_tris} self-colliding triangles need "
                          f"{need / 2**30:,.1f} GiB for their candidate rows, more than this machine's "
                          f"{have / 2**30:,.1f} GiB; turn ModelBuilder.particle_contact or self_collision off, "
                          f"or use fewer particles")


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
        self.corners = self.edge_corners = p._no_corners
        self.corner_first = self.edge_corner_first = p._no_corner_first
        self.edge_edges = p._no_edge_rows
        self.edge_edge_count = p._no_edge_counts
        self.tris = p.tris
        self.edges = p.edges
