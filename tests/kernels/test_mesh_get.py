"""``mesh_get(id)`` in kernels and funcs (Warp's ``Mesh`` value): its ``points``, ``velocities`` and
``indices`` read as numpy indexes them, and the gradients of reads of points and velocities reach
the arrays' ``grad`` buffers, checked against float64 finite differences of a numpy reference.
Writes through it run forward but refuse the adjoint."""

import numpy as np
import pytest
import trimesh

import xsim as wp
from xsim.array import intermediate

# ---------------------------------------------------------------------------------------------
# kernels (module level: compiled once)


@wp.kernel
def gather_corners(mesh: wp.uint64, corners: wp.array2d(dtype=wp.vec3), corner_vel: wp.array2d(dtype=wp.vec3),
                   sizes: wp.array(dtype=int)):
    t = wp.tid()
    m = wp.mesh_get(mesh)
    for k in range(3):
        i = m.indices[3 * t + k]
        corners[t, k] = m.points[i]
        if m.velocities.shape[0] > 0:
            corner_vel[t, k] = m.velocities[i]
    if t == 0:
        sizes[0] = m.points.shape[0]
        sizes[1] = m.velocities.shape[0]
        sizes[2] = m.indices.shape[0]


@wp.func
def weighted_area(mesh: wp.uint64, t: int, w: wp.vec3):
    m = wp.mesh_get(mesh)
    a = m.points[m.indices[3 * t]]
    b = m.points[m.indices[3 * t + 1]]
    c = m.points[m.indices[3 * t + 2]]
    v = m.velocities[m.indices[3 * t]]
    return wp.length(wp.cross(b - a, c - a)) * (1.0 + wp.dot(w, a)) + wp.dot(v, v) * wp.dot(b, c)


@wp.kernel
def area_loss(mesh: wp.uint64, weights: wp.array(dtype=wp.vec3), loss: wp.array(dtype=float)):
    t = wp.tid()
    wp.atomic_add(loss, 0, weighted_area(mesh, t, weights[t]))


@wp.kernel
def lift_points(mesh: wp.uint64, dz: float, heights: wp.array(dtype=float)):
    i = wp.tid()
    m = wp.mesh_get(mesh)
    p = m.points[i]
    m.points[i] = p + wp.vec3(0.0, 0.0, dz)
    wp.atomic_add(heights, 0, p[2])


def weighted_area_np(pts, vel, tris, w):
    """The reference of ``area_loss`` in float64: (n,3) points and velocities, (t,3) triangles, (t,3) weights."""
    a, b, c = pts[tris[:, 0]], pts[tris[:, 1]], pts[tris[:, 2]]
    v = vel[tris[:, 0]]
    area2 = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    return float(np.sum(area2 * (1.0 + np.sum(w * a, 1)) + np.sum(v * v, 1) * np.sum(b * c, 1)))


def _sphere(seed: int):
    tm = trimesh.creation.icosphere(subdivisions=1)
    rng = np.random.default_rng(seed)
    pts = (tm.vertices * rng.uniform(0.8, 1.2, (len(tm.vertices), 1))).astype(np.float32)
    vel = rng.normal(size=pts.shape).astype(np.float32) * 0.5
    return pts, vel, tm.faces.astype(np.int32)


# ---------------------------------------------------------------------------------------------
# forward


def test_mesh_get_reads_points_velocities_and_indices_as_numpy_indexes_them():
    pts, vel, tris = _sphere(1)
    nt = len(tris)
    for velocities in (vel, None):
        mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32),
                       None if velocities is None else wp.array(velocities, dtype=wp.vec3))
        corners, corner_vel = wp.zeros((nt, 3), dtype=wp.vec3), wp.zeros((nt, 3), dtype=wp.vec3)
        sizes = wp.zeros(3, dtype=int)
        wp.launch(gather_corners, nt, [mesh.id, corners, corner_vel, sizes])
        np.testing.assert_array_equal(corners.numpy(), pts[tris])
        nv = 0 if velocities is None else len(pts)
        assert sizes.numpy().tolist() == [len(pts), nv, 3 * nt]
        want_vel = np.zeros((nt, 3, 3), np.float32) if velocities is None else vel[tris]
        np.testing.assert_array_equal(corner_vel.numpy(), want_vel)


def test_writes_through_mesh_get_change_the_points_forward():
    pts, _, tris = _sphere(2)
    points = wp.array(pts, dtype=wp.vec3)
    mesh = wp.Mesh(points, wp.array(tris.ravel(), dtype=wp.int32))
    heights = wp.zeros(1, dtype=float)
    wp.launch(lift_points, len(pts), [mesh.id, 0.25, heights])
    np.testing.assert_array_equal(points.numpy(), pts + np.float32([0, 0, 0.25]))
    np.testing.assert_allclose(heights.numpy()[0], pts[:, 2].astype(np.float64).sum(), atol=1e-5)


# ---------------------------------------------------------------------------------------------
# gradients against float64 finite differences


def _loss_and_grads(pts, vel, tris, w, velocities_grad=True):
    points = wp.array(pts, dtype=wp.vec3, requires_grad=True)
    velocities = wp.array(vel, dtype=wp.vec3, requires_grad=velocities_grad)
    weights = wp.array(w, dtype=wp.vec3, requires_grad=True)
    mesh = wp.Mesh(points, wp.array(tris.ravel(), dtype=wp.int32), velocities)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(area_loss, len(tris), [mesh.id, weights, loss])
    tape.backward(loss)
    return loss.numpy()[0], points, velocities, weights


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        g[idx] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def test_gradients_of_reads_through_mesh_get_reach_points_and_velocities_grad():
    pts, vel, tris = _sphere(3)
    w = np.random.default_rng(4).normal(size=(len(tris), 3)).astype(np.float32) * 0.3
    value, points, velocities, weights = _loss_and_grads(pts, vel, tris, w)
    p64, v64, w64 = (x.astype(np.float64) for x in (pts, vel, w))
    np.testing.assert_allclose(value, weighted_area_np(p64, v64, tris, w64), rtol=1e-5)
    want_p = _fd(lambda p: weighted_area_np(p, v64, tris, w64), p64)
    want_v = _fd(lambda v: weighted_area_np(p64, v, tris, w64), v64)
    want_w = _fd(lambda x: weighted_area_np(p64, v64, tris, x), w64)
    assert np.abs(want_p).max() > 1 and np.abs(want_v).max() > 1
    np.testing.assert_allclose(points.grad.numpy(), want_p, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(velocities.grad.numpy(), want_v, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(weights.grad.numpy(), want_w, rtol=1e-4, atol=1e-4)


def test_an_array_without_grad_gets_none_and_the_others_still_theirs():
    pts, vel, tris = _sphere(5)
    w = np.zeros((len(tris), 3), np.float32)
    _, points, velocities, _ = _loss_and_grads(pts, vel, tris, w, velocities_grad=False)
    assert velocities.grad is None
    p64, v64 = pts.astype(np.float64), vel.astype(np.float64)
    want_p = _fd(lambda p: weighted_area_np(p, v64, tris, w.astype(np.float64)), p64)
    np.testing.assert_allclose(points.grad.numpy(), want_p, rtol=1e-4, atol=1e-4)


def test_new_points_assigned_to_the_mesh_receive_the_gradient():
    pts, vel, tris = _sphere(6)
    mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3), wp.array(tris.ravel(), dtype=wp.int32),
                   wp.array(vel, dtype=wp.vec3))
    moved = (pts * 1.1).astype(np.float32)
    mesh.points = wp.array(moved, dtype=wp.vec3, requires_grad=True)
    w = np.zeros((len(tris), 3), np.float32)
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(area_loss, len(tris), [mesh.id, wp.array(w, dtype=wp.vec3), loss])
    tape.backward(loss)
    v64 = vel.astype(np.float64)
    want = _fd(lambda p: weighted_area_np(p, v64, tris, w.astype(np.float64)), moved.astype(np.float64))
    np.testing.assert_allclose(mesh.points.grad.numpy(), want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# what is refused


def test_backward_through_a_write_via_mesh_get_is_refused_naming_the_line():
    pts, _, tris = _sphere(7)
    points = wp.array(pts, dtype=wp.vec3, requires_grad=True)
    mesh = wp.Mesh(points, wp.array(tris.ravel(), dtype=wp.int32))
    heights = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(lift_points, len(pts), [mesh.id, 0.5, heights])
    with pytest.raises(wp.CompileError, match=r"test_mesh_get.py:\d+: array 'mesh_get\(mesh\).points' is written "
                                              r"through a mesh id, which the backward pass cannot differentiate"):
        tape.backward(heights)


def test_backward_after_the_points_were_overwritten_is_refused():
    pts, vel, tris = _sphere(8)
    points = wp.array(pts, dtype=wp.vec3, requires_grad=True)
    mesh = wp.Mesh(points, wp.array(tris.ravel(), dtype=wp.int32), wp.array(vel, dtype=wp.vec3))
    loss = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(area_loss, len(tris), [mesh.id, wp.zeros(len(tris), dtype=wp.vec3), loss])
    wp.launch(lift_points, len(pts), [mesh.id, 0.5, wp.zeros(1, dtype=float)])  # the launch finds the mesh's points
    with pytest.raises(RuntimeError, match=r"array 'mesh_get\(mesh\).points' read by kernel 'area_loss' was "
                                           r"overwritten afterwards \(last by 'lift_points'\)"):
        tape.backward(loss)


def test_backward_through_a_mesh_id_that_is_no_kernel_parameter_is_refused():
    @wp.kernel(module="unique")
    def first_point_norm(ids: wp.array(dtype=wp.uint64), out: wp.array(dtype=float)):
        out[0] = wp.length(wp.mesh_get(ids[0]).points[0])

    pts, _, tris = _sphere(9)
    mesh = wp.Mesh(wp.array(pts, dtype=wp.vec3, requires_grad=True), wp.array(tris.ravel(), dtype=wp.int32))
    out = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(first_point_norm, 1, [wp.array([mesh.id], dtype=wp.uint64), out])
    np.testing.assert_allclose(out.numpy()[0], np.linalg.norm(pts[0]), rtol=1e-6)
    with pytest.raises(wp.CompileError, match=r"array 'mesh_get\(<v\d+>\).points' is read through a mesh id that "
                                              r"is not a kernel parameter"):
        tape.backward(out)


def test_mesh_get_is_checked_at_compile_time_and_intermediates_are_refused():
    @wp.kernel(module="unique")
    def no_id(x: float, out: wp.array(dtype=float)):
        m = wp.mesh_get(x)
        out[0] = m.points[0].x

    with pytest.raises(wp.CompileError, match=r"mesh_get\(\) needs the mesh id \(uint64\) as argument 1"):
        wp.launch(no_id, 1, [1.5, wp.zeros(1, dtype=float)])
    with pytest.raises(ValueError, match=r"Mesh points must not be an intermediate \(xsim.array.intermediate\)"):
        wp.Mesh(intermediate(3, wp.vec3), wp.array(np.int32([0, 1, 2]), dtype=wp.int32))
