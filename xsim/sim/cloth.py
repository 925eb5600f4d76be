"""Cloth topology on the host (numpy): grid triangulation, unique edges, bending stencils and the
weights of the isometric bending model.

Isometric bending (Bergou et al. 2006, "A quadratic bending model for inextensible surfaces";
Wardetzky et al. 2007): for an interior edge (x0, x1) with opposite vertices x2 (triangle
x0 x1 x2) and x3 (triangle x0 x1 x3), the vector ``C(x) = sum_k K_k x_k`` with the cotangent
weights

    K = (cot a1 + cot b1, cot a0 + cot b0, -(cot a0 + cot a1), -(cot b0 + cot b1))

(a_i, b_i: the rest angles at x_i in the two triangles) is a discrete mean-curvature vector. It
vanishes on every flat configuration and under rigid motions, and the bending energy is
``3 / (A0 + A1) * |C|^2 / 2`` per unit stiffness. The model assumes a flat rest shape: a curved
mesh is bent towards flat.
"""

from __future__ import annotations

import numpy as np


def grid_triangles(dim_x: int, dim_y: int) -> np.ndarray:
    """Triangles (2 * dim_x * dim_y, 3) of a grid of (dim_x + 1) x (dim_y + 1) vertices indexed
    ``y * (dim_x + 1) + x``, counter-clockwise seen from +z, one diagonal per cell."""
    tris = []
    for y in range(dim_y):
        for x in range(dim_x):
            i0 = y * (dim_x + 1) + x
            i1, i2, i3 = i0 + 1, i0 + dim_x + 2, i0 + dim_x + 1
            tris.append((i0, i1, i2))
            tris.append((i0, i2, i3))
    return np.array(tris, dtype=np.int64).reshape(-1, 3)


def edges_and_stencils(tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique edges (e, 2), bending stencils (b, 4) = (v0, v1, opposite0, opposite1)) of a
    triangle mesh; stencils exist for edges shared by exactly two triangles. Edges (v0 < v1) come in the
    order the triangles' sides (a, b), (b, c), (c, a) first meet them, a stencil's opposites in the order
    of their triangles (array operations: a loop over 2 million triangles took 16 s)."""
    t = np.asarray(tris, dtype=np.int64).reshape(-1, 3)
    if len(t) == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros((0, 4), dtype=np.int64)
    u, v, w = t.ravel(), t[:, [1, 2, 0]].ravel(), t[:, [2, 0, 1]].ravel()  # side (u, v) of each, opposite w
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    _, first, side_edge, count = np.unique(lo * (int(t.max()) + 1) + hi, return_index=True, return_inverse=True,
                                           return_counts=True)
    order = np.argsort(first, kind="stable")  # unique edges by first appearance
    edges = np.stack([lo[first[order]], hi[first[order]]], axis=1)
    by_edge = np.lexsort((np.arange(len(side_edge)), side_edge))  # sides grouped by edge, each group in order
    group = np.cumsum(count) - count
    shared = order[count[order] == 2]  # edges of exactly two triangles, by first appearance
    o0, o1 = w[by_edge[group[shared]]], w[by_edge[group[shared] + 1]]
    stencils = np.stack([lo[first[shared]], hi[first[shared]], o0, o1], axis=1)
    return edges, stencils


def _cot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cotangent of the angle between vectors a and b."""
    cr = np.linalg.norm(np.cross(a, b), axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(cr, 1e-300)


def isometric_bending_weights(x: np.ndarray, stencils: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(K (b, 4) cotangent weights, A0 + A1 (b,) rest areas of the two triangles) of each
    stencil at rest positions ``x`` (n, 3)."""
    x0, x1, x2, x3 = (x[stencils[:, k]] for k in range(4))
    e = x1 - x0
    cot_a0 = _cot(e, x2 - x0)
    cot_a1 = _cot(-e, x2 - x1)
    cot_b0 = _cot(e, x3 - x0)
    cot_b1 = _cot(-e, x3 - x1)
    k = np.stack([cot_a1 + cot_b1, cot_a0 + cot_b0, -(cot_a0 + cot_a1), -(cot_b0 + cot_b1)], axis=1)
    area = 0.5 * (np.linalg.norm(np.cross(e, x2 - x0), axis=1) + np.linalg.norm(np.cross(e, x3 - x0), axis=1))
    return k, area


def triangle_areas(x: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """Rest area (m^2) of each triangle."""
    u = x[tris[:, 1]] - x[tris[:, 0]]
    v = x[tris[:, 2]] - x[tris[:, 0]]
    return 0.5 * np.linalg.norm(np.cross(u, v), axis=1)


def vertex_areas(x: np.ndarray, tris: np.ndarray) -> np.ndarray:
    """A third of the rest area of the triangles around each vertex (m^2, (n,)): its lumped share."""
    return np.bincount(tris.ravel(), weights=np.repeat(triangle_areas(x, tris) / 3.0, 3), minlength=len(x))


def edge_areas(x: np.ndarray, tris: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """A third of the rest area of the triangles beside each of ``edges`` (e, 2) (m^2, (e,)); they
    sum to the mesh's area."""
    index = {(int(a), int(b)): k for k, (a, b) in enumerate(edges.tolist())}
    share = triangle_areas(x, tris) / 3.0
    out = np.zeros(len(edges))
    for t, (a, b, c) in enumerate(tris.tolist()):
        for u, v in ((a, b), (b, c), (c, a)):
            out[index[(min(u, v), max(u, v))]] += share[t]
    return out
