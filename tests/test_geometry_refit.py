"""``Mesh.refit`` on the device (xsim/geometry_refit.py): the BVH's boxes and the sign test's pseudo-normals
equal small numpy references to float32 rounding, and queries after a refit answer as a mesh built anew on
the moved points."""

import numpy as np
import pytest
import trimesh

import xsim as wp
from xsim.geometry import _build_bvh

# ---------------------------------------------------------------------------------------------
# numpy references


def node_boxes(nodes, perm, tri):
    """Each node's box: the bounds of the triangles ``tri`` (n, 3, 3) it covers, which in depth-first order
    are ``perm[first:first of the node after its subtree]``."""
    ends = np.append(nodes["first"], len(perm))[nodes["escape"]]
    lo = np.stack([tri[perm[s:e]].min(axis=(0, 1)) for s, e in zip(nodes["first"], ends)])
    hi = np.stack([tri[perm[s:e]].max(axis=(0, 1)) for s, e in zip(nodes["first"], ends)])
    return lo, hi


def pseudo_normals(points, tris):
    """Angle-weighted vertex normals and the 3 edge normals of each face (edge k joins corners k and k+1),
    float64 then rounded: sums of the faces' unit normals (zero for a zero cross product), a corner weighted
    by its angle (zero at a zero-length edge)."""
    p = points.astype(np.float64)[tris]
    n = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    length = np.linalg.norm(n, axis=1, keepdims=True)
    n = np.divide(n, length, out=np.zeros_like(n), where=length > 0)
    weights = np.empty((len(p), 3))
    for k in range(3):
        e1, e2 = p[:, (k + 1) % 3] - p[:, k], p[:, (k + 2) % 3] - p[:, k]
        denom = np.linalg.norm(e1, axis=1) * np.linalg.norm(e2, axis=1)
        cos = np.divide(np.einsum("ij,ij->i", e1, e2), denom, out=np.ones(len(p)), where=denom > 0)
        weights[:, k] = np.arccos(np.clip(cos, -1.0, 1.0))
    corner_normals = (weights[:, :, None] * n[:, None, :]).reshape(-1, 3)
    vertex = np.stack([np.bincount(tris.ravel(), corner_normals[:, i], len(points)) for i in range(3)], 1)
    a, b = tris, np.roll(tris, -1, axis=1)
    _, edge = np.unique((np.minimum(a, b).astype(np.int64) * len(points) + np.maximum(a, b)).ravel(),
                        return_inverse=True)
    edge_sum = np.stack([np.bincount(edge.ravel(), np.repeat(n, 3, axis=0)[:, i]) for i in range(3)], 1)
    return vertex.astype(np.float32), edge_sum[edge.ravel()].astype(np.float32)


def deformed_sphere(seed=0):
    """An icosphere (320 faces) and the same vertices randomly moved, with two degenerate faces added: one
    with two corners at one place (after the move), one naming a vertex twice."""
    tm = trimesh.creation.icosphere(subdivisions=2)
    rng = np.random.default_rng(seed)
    pts = np.concatenate([tm.vertices, [[0.1, 0.2, 0.3], [0.4, -0.1, 0.2], [0.1, 0.2, 0.3]]]).astype(np.float32)
    k = len(tm.vertices)
    tris = np.concatenate([tm.faces, [[k, k + 1, k + 2], [0, 5, 0]]]).astype(np.int32)
    moved = (pts + rng.normal(scale=0.1, size=pts.shape)).astype(np.float32)
    moved[k + 2] = moved[k]
    return pts, moved, tris


def refitted_mesh(pts, moved, tris, leaf_size=None):
    mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32), bvh_leaf_size=leaf_size)
    mesh.points.assign(moved)
    mesh.refit()
    return mesh


# ---------------------------------------------------------------------------------------------
# the refit against the references


@pytest.mark.parametrize("leaf_size", [1, 2, 4])
def test_refit_boxes_are_the_bounds_of_the_triangles_under_each_node(leaf_size):
    pts, moved, tris = deformed_sphere()
    mesh = refitted_mesh(pts, moved, tris, leaf_size)
    nodes = mesh._nodes.numpy()
    built, perm, _ = _build_bvh(pts[tris].mean(axis=1), leaf_size)
    for field in ("first", "count", "right", "escape"):  # the refit keeps the tree
        np.testing.assert_array_equal(nodes[field], built[field])
    lo, hi = node_boxes(built, perm, moved[tris])
    np.testing.assert_array_equal(nodes["lo"], lo)
    np.testing.assert_array_equal(nodes["hi"], hi)


def test_refit_pseudo_normals_equal_the_float64_definition_rounded_to_float32():
    pts, moved, tris = deformed_sphere()
    mesh = refitted_mesh(pts, moved, tris)
    vertex, edge = pseudo_normals(moved, tris)
    got_vertex, got_edge = mesh._vertex_normals.numpy(), mesh._edge_normals.numpy()
    np.testing.assert_allclose(got_vertex, vertex, rtol=2**-23, atol=2**-40)
    np.testing.assert_allclose(got_edge, edge, rtol=2**-23, atol=2**-40)
    k = len(tris) - 2  # the degenerate faces add nothing: their edges' normals are their neighbours' alone
    assert (got_edge[3 * k:] == edge[3 * k:]).all() and np.abs(got_vertex[-3:]).max() == 0
    assert np.abs(got_edge[3 * k:3 * k + 3]).max() == 0


# ---------------------------------------------------------------------------------------------
# queries after a refit


@wp.kernel
def query_mesh(mesh: wp.uint64, points: wp.array(dtype=wp.vec3), dirs: wp.array(dtype=wp.vec3),
               closest: wp.array2d(dtype=wp.vec3), signs: wp.array2d(dtype=float), ray_t: wp.array(dtype=float),
               ray_face: wp.array(dtype=int)):
    i = wp.tid()
    p = points[i]
    q = wp.mesh_query_point(mesh, p, 1.0e6)
    closest[i, 0] = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    signs[i, 0] = q.sign
    q = wp.mesh_query_point_sign_normal(mesh, p, 1.0e6)
    closest[i, 1] = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    signs[i, 1] = q.sign
    q = wp.mesh_query_point_no_sign(mesh, p, 1.0e6)
    closest[i, 2] = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    r = wp.mesh_query_ray(mesh, p, dirs[i], 1.0e6)
    ray_t[i] = wp.where(r.result, r.t, -1.0)
    ray_face[i] = wp.where(r.result, r.face, -1)


def run_queries(mesh, queries, dirs):
    n = len(queries)
    out = [wp.zeros((n, 3), dtype=wp.vec3), wp.zeros((n, 2), dtype=float), wp.zeros(n, dtype=float),
           wp.zeros(n, dtype=int)]
    wp.launch(query_mesh, n, [mesh.id, wp.array(queries, dtype=wp.vec3), wp.array(dirs, dtype=wp.vec3), *out])
    return [a.numpy() for a in out]


def test_queries_after_a_refit_answer_as_a_mesh_built_on_the_moved_points():
    pts, moved, tris = deformed_sphere(seed=1)
    rng = np.random.default_rng(2)
    queries = rng.uniform(-1.5, 1.5, size=(500, 3)).astype(np.float32)
    dirs = rng.normal(size=(500, 3)).astype(np.float32)
    refit = run_queries(refitted_mesh(pts, moved, tris), queries, dirs)
    fresh = run_queries(wp.Mesh(wp.array(moved, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32)), queries,
                        dirs)
    closest, signs, ray_t, ray_face = refit
    np.testing.assert_allclose(closest, fresh[0], atol=1e-6)  # a face tied with another may be either
    np.testing.assert_array_equal(signs, fresh[1])
    np.testing.assert_array_equal(ray_t, fresh[2])
    np.testing.assert_array_equal(ray_face, fresh[3])
    assert (signs < 0).any() and (signs > 0).any() and (ray_face >= 0).sum() > 100


@wp.kernel
def scale_points(points: wp.array(dtype=wp.vec3), s: float, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = s * points[i]


@wp.kernel
def distance_loss(mesh: wp.uint64, queries: wp.array(dtype=wp.vec3), loss: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, queries[i], 1.0e6)
    wp.atomic_add(loss, 0, wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - queries[i]))


def test_a_refit_inside_a_tape_is_not_recorded_and_leaves_the_query_gradients_alone():
    pts, moved, tris = deformed_sphere(seed=3)
    rng = np.random.default_rng(4)
    queries_np = rng.uniform(-2, 2, size=(64, 3)).astype(np.float32)
    grads = []
    for inside in (True, False):
        mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32))
        queries = wp.array(queries_np, dtype=wp.vec3, requires_grad=True)
        loss = wp.zeros(1, dtype=float, requires_grad=True)
        tape = wp.Tape()
        with tape:
            wp.launch(scale_points, len(pts), [wp.array(moved, dtype=wp.vec3), 1.5, mesh.points])
        if not inside:
            mesh.refit()
        with tape:
            if inside:
                mesh.refit()
            wp.launch(distance_loss, len(queries_np), [mesh.id, queries, loss])
        assert len(tape.records) == 2
        tape.backward(loss)
        grads.append(queries.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    assert np.abs(grads[0]).min() > 0
