"""Which triangles of a mesh cross each other: an independent reference for cloth self-collision tests.

Written in numpy and scipy only, with no xsim code, so that a test can check a cloth simulated by
xsim against something xsim did not compute. Coordinates are in metres (any consistent unit works:
nothing here depends on scale).

Narrow phase: the interval test of T. Moller, "A Fast Triangle-Triangle Intersection Test",
Journal of Graphics Tools 2(2), 1997, vectorized over candidate pairs. It runs without the paper's
epsilon: a pair is decided by the signs of the plane distances as computed in float64, so a
near-miss of 1e-9 m on unit-sized triangles is a miss. Triangles are closed sets: touching at a
point, along an edge or over an area counts as intersecting.

- Coplanar pairs (every vertex of one triangle exactly on the other's plane): the paper's 2D test
  in the axis-aligned plane where the triangle's projection is largest: the pair meets if two
  edges meet or one triangle holds a vertex of the other. Pairs that are coplanar in exact
  arithmetic but not in float64 (rotated copies of one plane) take the general path, where the
  line the two planes share is ill-conditioned: their answer is only as good as rounding allows.
- Degenerate triangles (edge cross product exactly zero: collinear or coincident vertices) have no
  plane. Such a triangle is taken as the union of its three edges (segments, of zero length for a
  point), each tested against the other triangle, so a collapsed triangle that pierces another is
  still reported. A pair of two degenerate triangles is reported as not intersecting: neither has
  an inside to pierce, and two segments in space meet only in measure-zero configurations.

Broad phase: axis-aligned bounding boxes, paired with a k-d tree on the box centres (max norm);
boxes far larger than the median (a stretched triangle) are paired by brute force, so one of
them cannot make the tree's search radius, and the work, grow for all the others.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

_PAIRS_PER_BATCH = 100_000  # narrow-phase batch: keeps the temporaries near 100 MB
_BRUTE_CELLS = 4_000_000  # box comparisons per brute-force batch
_LARGE_BOX = 4.0  # a box whose half-width is over this many medians is paired by brute force


def intersecting_pairs(points: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """Pairs (i < j) of triangles of one mesh that intersect, sorted; shape (k, 2), int64.

    points: (n, 3) vertex positions, metres; tris: (m, 3) vertex indices. Pairs that share a vertex
    index are skipped (neighbours always touch there); coincident vertices with different indices
    are not shared, and such neighbours are reported.
    """
    points, tris = _mesh(points, tris)
    i, j = _overlapping_boxes(*_boxes(points, tris), *_boxes(points, tris))
    keep = i < j
    i, j = i[keep], j[keep]
    shared = (tris[i][:, :, None] == tris[j][:, None, :]).any(axis=(1, 2))
    i, j = i[~shared], j[~shared]
    hit = _triangles_intersect(points[tris[i]], points[tris[j]])
    return _sorted_pairs(i[hit], j[hit])


def intersecting_pairs_between(points_a: np.ndarray, tris_a: np.ndarray, points_b: np.ndarray,
                               tris_b: np.ndarray) -> np.ndarray:
    """Pairs (i, j) of triangle i of mesh a and triangle j of mesh b that intersect, sorted; (k, 2).

    points_*: (n, 3) vertex positions, metres; tris_*: (m, 3) vertex indices. The meshes share no
    vertices, so no pair is skipped.
    """
    points_a, tris_a = _mesh(points_a, tris_a)
    points_b, tris_b = _mesh(points_b, tris_b)
    i, j = _overlapping_boxes(*_boxes(points_a, tris_a), *_boxes(points_b, tris_b))
    hit = _triangles_intersect(points_a[tris_a[i]], points_b[tris_b[j]])
    return _sorted_pairs(i[hit], j[hit])


def _mesh(points, tris) -> tuple[np.ndarray, np.ndarray]:
    points = np.asarray(points, dtype=np.float64)
    tris = np.asarray(tris, dtype=np.int64).reshape(-1, 3)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"points must have shape (n, 3), got {points.shape}")
    return points, tris


def _sorted_pairs(i: np.ndarray, j: np.ndarray) -> np.ndarray:
    order = np.lexsort((j, i))
    return np.stack([i[order], j[order]], axis=1).astype(np.int64).reshape(-1, 2)


# ---- broad phase ------------------------------------------------------------------------------

def _boxes(points: np.ndarray, tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    corners = points[tris]
    return corners.min(axis=1), corners.max(axis=1)


def _overlapping_boxes(lo_a, hi_a, lo_b, hi_b) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (into a, into b) of boxes that overlap or touch; every pair once."""
    empty = np.zeros(0, dtype=np.int64)
    if len(lo_a) == 0 or len(lo_b) == 0:
        return empty, empty
    half_a, half_b = 0.5 * (hi_a - lo_a).max(axis=1), 0.5 * (hi_b - lo_b).max(axis=1)
    typical = np.median(np.concatenate([half_a, half_b]))
    large_a, large_b = half_a > _LARGE_BOX * typical, half_b > _LARGE_BOX * typical
    small_a, small_b = np.flatnonzero(~large_a), np.flatnonzero(~large_b)
    found = [_brute_force_pairs(np.flatnonzero(large_a), lo_a, hi_a, lo_b, hi_b)]
    j, i = _brute_force_pairs(np.flatnonzero(large_b), lo_b, hi_b, lo_a[small_a], hi_a[small_a])
    found.append((small_a[i], j))
    if len(small_a) and len(small_b):
        # overlapping boxes have centres at most the two half-widths apart on every axis
        radius = (half_a[small_a].max() + half_b[small_b].max()) * (1.0 + 1e-9)
        tree_a = cKDTree(0.5 * (lo_a[small_a] + hi_a[small_a]))
        tree_b = cKDTree(0.5 * (lo_b[small_b] + hi_b[small_b]))
        near = tree_a.sparse_distance_matrix(tree_b, radius, p=np.inf, output_type="ndarray")
        i, j = small_a[near["i"]], small_b[near["j"]]
        keep = _boxes_overlap(lo_a[i], hi_a[i], lo_b[j], hi_b[j])
        found.append((i[keep], j[keep]))
    return (np.concatenate([f[0] for f in found]).astype(np.int64),
            np.concatenate([f[1] for f in found]).astype(np.int64))


def _brute_force_pairs(rows, lo_a, hi_a, lo_b, hi_b) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (row of a, index into b) of overlapping boxes, for the few rows of a listed."""
    found_i, found_j = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    step = max(1, _BRUTE_CELLS // max(len(lo_b), 1))
    for start in range(0, len(rows), step):
        r = rows[start:start + step]
        overlap = _boxes_overlap(lo_a[r, None], hi_a[r, None], lo_b[None], hi_b[None])
        k, j = np.nonzero(overlap)
        found_i.append(r[k])
        found_j.append(j)
    return np.concatenate(found_i), np.concatenate(found_j)


def _boxes_overlap(lo_a, hi_a, lo_b, hi_b) -> np.ndarray:
    return ((lo_a <= hi_b) & (lo_b <= hi_a)).all(axis=-1)


# ---- narrow phase: Moller's test --------------------------------------------------------------

def _triangles_intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether triangle a[k] meets triangle b[k]; a, b: (k, 3 vertices, 3), metres."""
    hit = np.zeros(len(a), dtype=bool)
    for start in range(0, len(a), _PAIRS_PER_BATCH):
        part = slice(start, start + _PAIRS_PER_BATCH)
        hit[part] = _triangles_intersect_batch(a[part], b[part])
    return hit


def _triangles_intersect_batch(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    normal_a, normal_b = _normals(a), _normals(b)
    flat_a, flat_b = ~normal_a.any(axis=1), ~normal_b.any(axis=1)
    dist_a = _plane_distances(a, normal_b, b[:, 0])  # a's vertices from b's plane (scaled by |n_b|)
    dist_b = _plane_distances(b, normal_a, a[:, 0])
    side_a, side_b = np.sign(dist_a), np.sign(dist_b)
    # a zero normal gives zero distances, so only a real plane can separate the pair
    apart = _one_side(side_a) | _one_side(side_b)
    coplanar = ~side_a.any(axis=1) | ~side_b.any(axis=1)
    hit = np.zeros(len(a), dtype=bool)
    solid = ~apart & ~flat_a & ~flat_b
    m = solid & ~coplanar
    hit[m] = _line_intervals_overlap(a[m], b[m], normal_a[m], normal_b[m], dist_a[m], dist_b[m],
                                     side_a[m], side_b[m])
    m = solid & coplanar
    hit[m] = _planar_overlap(_project(a[m], normal_a[m]), _project(b[m], normal_a[m]))
    m = ~apart & flat_a & ~flat_b
    hit[m] = _edges_hit_triangle(a[m], b[m], normal_b[m])
    m = ~apart & flat_b & ~flat_a
    hit[m] = _edges_hit_triangle(b[m], a[m], normal_a[m])
    return hit


def _normals(t: np.ndarray) -> np.ndarray:
    return np.cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0])


def _plane_distances(points: np.ndarray, normal: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """normal . (p - origin) for each of the (k, c, 3) points; (k, c)."""
    return np.einsum("kcj,kj->kc", points - origin[:, None], normal)


def _one_side(side: np.ndarray) -> np.ndarray:
    return (side > 0).all(axis=1) | (side < 0).all(axis=1)


def _line_intervals_overlap(a, b, normal_a, normal_b, dist_a, dist_b, side_a, side_b) -> np.ndarray:
    """Both triangles cross the line where their planes meet: do their stretches of it overlap?

    Positions along the line are dot products with its direction, from a common origin (a's first
    vertex), which is the paper's projection without its choice of the largest axis.
    """
    direction = np.cross(normal_a, normal_b)
    origin = a[:, 0]
    lo_a, hi_a = _interval(np.einsum("kcj,kj->kc", a - origin[:, None], direction), dist_a, side_a)
    lo_b, hi_b = _interval(np.einsum("kcj,kj->kc", b - origin[:, None], direction), dist_b, side_b)
    return np.maximum(lo_a, lo_b) <= np.minimum(hi_a, hi_b)


def _interval(along: np.ndarray, dist: np.ndarray, side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stretch of the line a triangle covers, from the two edges that reach the other plane.

    Those edges share the vertex alone on its side of the plane (the paper's case analysis, on
    signs so that tiny distances cannot underflow); neither denominator can be zero once the
    pair is neither separated nor coplanar.
    """
    s0, s1, s2 = side[:, 0], side[:, 1], side[:, 2]
    lone = np.select([s0 * s1 > 0, s0 * s2 > 0, (s1 * s2 > 0) | (s0 != 0), s1 != 0], [2, 1, 0, 1], 2)
    k = np.arange(len(along))
    ends = []
    for other in ((lone + 1) % 3, (lone + 2) % 3):
        p0, p1, d0, d1 = along[k, lone], along[k, other], dist[k, lone], dist[k, other]
        ends.append(p0 + (p1 - p0) * d0 / (d0 - d1))
    return np.minimum(*ends), np.maximum(*ends)


def _edges_hit_triangle(flat: np.ndarray, tri: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """Whether any edge of the degenerate triangle ``flat`` meets ``tri`` (normal: tri's)."""
    hit = np.zeros(len(flat), dtype=bool)
    for e in range(3):
        hit |= _segment_hits_triangle(flat[:, e], flat[:, (e + 1) % 3], tri, normal)
    return hit


def _segment_hits_triangle(p: np.ndarray, q: np.ndarray, tri: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """Whether segment p-q (each (k, 3)) meets the non-degenerate triangle tri (k, 3, 3)."""
    dist = _plane_distances(np.stack([p, q], axis=1), normal, tri[:, 0])
    side = np.sign(dist)
    in_plane = ~side.any(axis=1)
    crosses = (side[:, 0] * side[:, 1] <= 0) & ~in_plane
    hit = np.zeros(len(p), dtype=bool)
    d, m = dist[crosses], crosses
    point = p[m] + (q[m] - p[m]) * (d[:, 0] / (d[:, 0] - d[:, 1]))[:, None]
    hit[m] = _inside(_project(point[:, None], normal[m])[:, 0], _project(tri[m], normal[m]))
    m = in_plane
    hit[m] = _planar_overlap(_project(np.stack([p[m], q[m]], axis=1), normal[m]), _project(tri[m], normal[m]))
    return hit


# ---- planar tests, after dropping the axis where the normal is largest ------------------------

_KEPT_AXES = np.array([[1, 2], [0, 2], [0, 1]])


def _project(points: np.ndarray, normal: np.ndarray) -> np.ndarray:
    """(k, c, 3) points onto the axis plane where a triangle with this normal is largest; (k, c, 2)."""
    kept = _KEPT_AXES[np.abs(normal).argmax(axis=1)]
    return np.take_along_axis(points, kept[:, None, :], axis=2)


def _planar_overlap(shape: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """Whether a segment (k, 2, 2) or triangle (k, 3, 2) meets the triangle tri (k, 3, 2) in 2D."""
    corners = shape.shape[1]
    edges = [(0, 1)] if corners == 2 else [(0, 1), (1, 2), (2, 0)]
    hit = _inside(shape[:, 0], tri)
    if corners == 3:
        hit |= _inside(tri[:, 0], shape)
    for s0, s1 in edges:
        for t in range(3):
            hit |= _segments_meet(shape[:, s0], shape[:, s1], tri[:, t], tri[:, (t + 1) % 3])
    return hit


def _orientation(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Sign of the turn a -> b -> c: +1 counter-clockwise, -1 clockwise, 0 collinear."""
    return np.sign((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0]))


def _inside(p: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """Whether 2D point p is in the closed triangle tri: no two edges see it on opposite sides."""
    turns = np.stack([_orientation(tri[:, e], tri[:, (e + 1) % 3], p) for e in range(3)], axis=1)
    return ~((turns > 0).any(axis=1) & (turns < 0).any(axis=1))


def _segments_meet(p0, p1, q0, q1) -> np.ndarray:
    """Whether closed 2D segments p0-p1 and q0-q1 share a point (zero-length segments included)."""
    d0, d1 = _orientation(q0, q1, p0), _orientation(q0, q1, p1)
    d2, d3 = _orientation(p0, p1, q0), _orientation(p0, p1, q1)
    meet = (d0 * d1 < 0) & (d2 * d3 < 0)
    for d, s0, s1, x in ((d0, q0, q1, p0), (d1, q0, q1, p1), (d2, p0, p1, q0), (d3, p0, p1, q1)):
        meet |= (d == 0) & _in_box(s0, s1, x)
    return meet


def _in_box(s0, s1, x) -> np.ndarray:
    """Whether x lies in the bounding box of s0-s1 (for x collinear with them: on the segment)."""
    return ((np.minimum(s0, s1) <= x) & (x <= np.maximum(s0, s1))).all(axis=1)
