"""``Mesh.refit`` on the mesh's device (``geometry.py``): the BVH's boxes and the pseudo-normals of the sign
test recomputed from the current points by kernels, with no copy of the points to the host.

The boxes: leaves from their triangles, then the inner nodes one depth at a time, deepest first (one launch
per depth: a node's children are one deeper). The pseudo-normals, in float64 as the definition below: each
face's unit normal and corner angles, then per vertex and per edge-of-a-face a sum over adjacency listed
once, when the mesh is built, in ascending corner order, so every refit adds the same terms in the same
order. The launches are not recorded on a Tape: as in Warp, query gradients do not reach the mesh's points.

Definitions (the sign test of ``native/xsim_geometry.h`` reads them): a face's normal is its unit normal, zero
where its cross product is zero; a corner's angle is the angle between its two edges, zero where one has zero
length; a vertex normal is the sum over its corners of angle * face normal; an edge normal, for each of the
three edges of each face (edge k joins corners k and k+1), the sum of the normals of the faces with that edge
(the same two vertices, either way round).

Imported by ``Mesh`` when it is first built: this module imports xsim (the kernel language's names), which
imports ``geometry``.
"""

from __future__ import annotations

import numpy as np

import xsim

from .geometry import BvhNode

Nodes = xsim.array(dtype=BvhNode)


@xsim.func
def lower(a: xsim.vec3, b: xsim.vec3):
    """The componentwise minimum (a NaN in ``b`` is passed over), as a select: xsim.min's NaN rule branches,
    and over scattered points those branches mispredict (a leaf launch ran 6x slower)."""
    return xsim.vec3(xsim.where(b[0] < a[0], b[0], a[0]), xsim.where(b[1] < a[1], b[1], a[1]),
                     xsim.where(b[2] < a[2], b[2], a[2]))


@xsim.func
def upper(a: xsim.vec3, b: xsim.vec3):
    """The componentwise maximum, as ``lower``."""
    return xsim.vec3(xsim.where(b[0] > a[0], b[0], a[0]), xsim.where(b[1] > a[1], b[1], a[1]),
                     xsim.where(b[2] > a[2], b[2], a[2]))


@xsim.kernel(enable_backward=False)
def fit_leaf_boxes(points: xsim.array(dtype=xsim.vec3), indices: xsim.array(dtype=xsim.int32),
                   prims: xsim.array(dtype=xsim.int32), leaf_node: xsim.array(dtype=xsim.int32),
                   leaf_start: xsim.array(dtype=xsim.int32), nodes: Nodes):
    """The box of leaf ``tid`` (node ``leaf_node[tid]``): the corners of its triangles
    ``prims[leaf_start[tid]:leaf_start[tid + 1]]``."""
    j = xsim.tid()
    lo = points[indices[3 * prims[leaf_start[j]]]]
    hi = lo
    for t in range(leaf_start[j], leaf_start[j + 1]):
        f = prims[t]
        for k in range(3):
            p = points[indices[3 * f + k]]
            lo = lower(lo, p)
            hi = upper(hi, p)
    n = leaf_node[j]
    nodes[n].lo = lo
    nodes[n].hi = hi


@xsim.kernel(enable_backward=False)
def fit_inner_boxes(inner_node: xsim.array(dtype=xsim.int32), inner_right: xsim.array(dtype=xsim.int32),
                    first: int, nodes: Nodes):
    """The box of inner node ``inner_node[first + tid]``: the union of its children's, the next node and
    ``inner_right[first + tid]`` (fitted by an earlier launch)."""
    j = first + xsim.tid()
    n = inner_node[j]
    r = inner_right[j]
    nodes[n].lo = lower(nodes[n + 1].lo, nodes[r].lo)
    nodes[n].hi = upper(nodes[n + 1].hi, nodes[r].hi)


@xsim.func
def corner_angle(e1: xsim.vec3d, e2: xsim.vec3d, l1: xsim.float64, l2: xsim.float64):
    """The angle (radians) between the edges ``e1``, ``e2`` (of lengths ``l1``, ``l2``) leaving a corner, 0
    where one has zero length."""
    denom = l1 * l2
    cos = xsim.float64(1.0)
    if denom > xsim.float64(0.0):
        cos = xsim.dot(e1, e2) / denom
    return xsim.acos(cos)  # acos clamps to [-1, 1]


@xsim.kernel(enable_backward=False)
def face_normals_and_angles(points: xsim.array(dtype=xsim.vec3), indices: xsim.array(dtype=xsim.int32),
                            normals: xsim.array(dtype=xsim.vec3d), angles: xsim.array(dtype=xsim.float64)):
    """Face ``tid``'s unit normal (zero for a degenerate face) and its three corner angles, in float64 (each
    edge's length once: -(a - c) is c - a exactly, so the angles are those of the definition)."""
    f = xsim.tid()
    a = xsim.vec3d(points[indices[3 * f]])
    b = xsim.vec3d(points[indices[3 * f + 1]])
    c = xsim.vec3d(points[indices[3 * f + 2]])
    ab = b - a
    bc = c - b
    ca = a - c
    l_ab = xsim.length(ab)
    l_bc = xsim.length(bc)
    l_ca = xsim.length(ca)
    normals[f] = xsim.normalize(xsim.cross(ab, -ca))
    angles[3 * f] = corner_angle(ab, -ca, l_ab, l_ca)
    angles[3 * f + 1] = corner_angle(bc, -ab, l_bc, l_ab)
    angles[3 * f + 2] = corner_angle(ca, -bc, l_ca, l_bc)


@xsim.kernel(enable_backward=False)
def gather_vertex_normals(normals: xsim.array(dtype=xsim.vec3d), angles: xsim.array(dtype=xsim.float64),
                          corner_start: xsim.array(dtype=xsim.int32), corners: xsim.array(dtype=xsim.int32),
                          vertex_normals: xsim.array(dtype=xsim.vec3)):
    """Vertex ``tid``'s pseudo-normal: over its corners ``corners[corner_start[tid]:corner_start[tid + 1]]``
    (3 * face + corner), the sum of angle * face normal."""
    v = xsim.tid()
    s = xsim.vec3d()
    for j in range(corner_start[v], corner_start[v + 1]):
        c = corners[j]
        s += angles[c] * normals[c // 3]
    vertex_normals[v] = xsim.vec3(s)


@xsim.kernel(enable_backward=False)
def gather_edge_normals(normals: xsim.array(dtype=xsim.vec3d), edge_of_slot: xsim.array(dtype=xsim.int32),
                        edge_start: xsim.array(dtype=xsim.int32), edge_faces: xsim.array(dtype=xsim.int32),
                        edge_normals: xsim.array(dtype=xsim.vec3)):
    """The pseudo-normal of edge ``tid % 3`` of face ``tid // 3``: the sum of the normals of the faces
    ``edge_faces[edge_start[e]:edge_start[e + 1]]`` that share it (``e = edge_of_slot[tid]``)."""
    slot = xsim.tid()
    e = edge_of_slot[slot]
    s = xsim.vec3d()
    for j in range(edge_start[e], edge_start[e + 1]):
        s += normals[edge_faces[j]]
    edge_normals[slot] = xsim.vec3(s)


def _int32s(a: np.ndarray, device) -> xsim.array:
    """``a`` as an int32 array on ``device``."""
    return xsim.array(np.ascontiguousarray(a, np.int32), dtype=xsim.int32, device=device)


def _starts(keys: np.ndarray, count: int) -> np.ndarray:
    """The CSR offsets (count + 1) of entries grouped by ``keys``, each in [0, count)."""
    return np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=count))])


class MeshRefit:
    """What a refit launches over, listed once from the tree (``nodes``, ``depth``: ``geometry._build_bvh``)
    and the triangles (``tris``: (num_tris, 3) vertex indices): the leaves with their triangle ranges, the
    inner nodes by depth, deepest first, and the corners of each vertex and the faces of each edge, in
    ascending order."""

    def __init__(self, nodes: np.ndarray, depth: np.ndarray, tris: np.ndarray, num_points: int, device):
        self.device = device
        leaf = np.flatnonzero(nodes["count"] > 0)
        self.leaf_node = _int32s(leaf, device)
        self.leaf_start = _int32s(np.append(nodes["first"][leaf], len(tris)), device)  # leaves tile the order
        inner = np.flatnonzero(nodes["count"] == 0)
        inner = inner[np.argsort(-depth[inner], kind="stable")]
        self.inner_node, self.inner_right = _int32s(inner, device), _int32s(nodes["right"][inner], device)
        per_depth = np.bincount(depth[inner])[::-1] if len(inner) else np.zeros(0, np.int64)
        self.levels = [(int(end - n), int(n)) for end, n in zip(np.cumsum(per_depth), per_depth)]  # (first, count)
        corners = tris.ravel()
        self.corner_start = _int32s(_starts(corners, num_points), device)
        self.corners = _int32s(np.argsort(corners, kind="stable"), device)
        a, b = tris, np.roll(tris, -1, axis=1)
        keys = (np.minimum(a, b).astype(np.int64) * num_points + np.maximum(a, b)).ravel()
        edges, edge_of_slot = np.unique(keys, return_inverse=True)
        edge_of_slot = edge_of_slot.ravel()
        self.edge_of_slot = _int32s(edge_of_slot, device)
        self.edge_start = _int32s(_starts(edge_of_slot, len(edges)), device)
        self.edge_faces = _int32s(np.argsort(edge_of_slot, kind="stable") // 3, device)
        self.face_normals = xsim.empty(len(tris), dtype=xsim.vec3d, device=device)
        self.angles = xsim.empty(3 * len(tris), dtype=xsim.float64, device=device)

    def _launch(self, kernel, n: int, *args) -> None:
        xsim.launch(kernel, n, inputs=list(args), device=self.device, record_tape=False)

    def __call__(self, points: xsim.array, indices: xsim.array, prims: xsim.array, nodes: xsim.array,
                 vertex_normals: xsim.array, edge_normals: xsim.array) -> None:
        """Refit the boxes of ``nodes`` (array(BvhNode)) and the pseudo-normals to ``points``."""
        self._launch(fit_leaf_boxes, self.leaf_node.shape[0], points, indices, prims, self.leaf_node,
                     self.leaf_start, nodes)
        for first, count in self.levels:
            self._launch(fit_inner_boxes, count, self.inner_node, self.inner_right, first, nodes)
        self._launch(face_normals_and_angles, self.face_normals.shape[0], points, indices, self.face_normals,
                     self.angles)
        self._launch(gather_vertex_normals, vertex_normals.shape[0], self.face_normals, self.angles,
                     self.corner_start, self.corners, vertex_normals)
        self._launch(gather_edge_normals, edge_normals.shape[0], self.face_normals, self.edge_of_slot,
                     self.edge_start, self.edge_faces, edge_normals)
