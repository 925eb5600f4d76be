"""Gradients of the library funcs (xsim/kernels/funcs_math.py, funcs_transform.py) through real
kernels against float64 central finite differences, at points away from their kinks."""

import numpy as np
import pytest

import xsim
from xsim.autodiff import gradcheck

pytestmark = pytest.mark.cpu_only
F64 = xsim.float64
N = 4
RNG = np.random.default_rng(11)


@xsim.kernel
def norms(v: xsim.array(dtype=xsim.vec3d), d: xsim.array(dtype=F64), out: xsim.array(dtype=F64, ndim=2),
          sn: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    out[i, 0] = xsim.norm_l1(v[i])
    out[i, 1] = xsim.norm_l2(v[i])
    out[i, 2] = xsim.norm_huber(v[i], d[i])
    out[i, 3] = xsim.norm_pseudo_huber(v[i], d[i])
    sn[i] = xsim.smooth_normalize(v[i], d[i])


def test_norm_gradients():
    v = RNG.uniform(0.2, 1.0, (N, 3)) * RNG.choice([-1.0, 1.0], (N, 3))
    d = np.array([0.3, 3.0, 0.5, 2.5])  # both sides of the Huber threshold
    args = [xsim.array(v, dtype=xsim.vec3d, requires_grad=True), xsim.array(d, dtype=F64, requires_grad=True),
            xsim.zeros((N, 4), dtype=F64, requires_grad=True), xsim.zeros(N, dtype=xsim.vec3d, requires_grad=True)]
    report = gradcheck(norms, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


@xsim.kernel
def quats(e: xsim.array(dtype=xsim.vec3d), q: xsim.array(dtype=xsim.quatd), b: xsim.array(dtype=xsim.quatd),
          t: xsim.array(dtype=F64), out_q: xsim.array(dtype=xsim.quatd, ndim=2),
          out_v: xsim.array(dtype=xsim.vec3d, ndim=2), out_s: xsim.array(dtype=F64)):
    i = xsim.tid()
    out_q[i, 0] = xsim.quat_from_euler(e[i], 2, 0, 1)
    out_q[i, 1] = xsim.quat_rpy(e[i][0], e[i][1], e[i][2])
    out_q[i, 2] = xsim.quat_slerp(q[i], b[i], t[i])
    out_q[i, 3] = xsim.quat_twist(xsim.normalize(e[i]), q[i])
    out_v[i, 0] = xsim.quat_to_euler(q[i], 0, 1, 2)
    out_v[i, 1] = xsim.quat_to_euler(q[i], 1, 0, 1)
    out_v[i, 2] = xsim.quat_to_rpy(q[i])
    axis, angle = xsim.quat_to_axis_angle(q[i])
    axis_b = xsim.vec3d()
    angle_b = xsim.float64(0.0)
    xsim.quat_to_axis_angle(b[i], axis_b, angle_b)  # the output-argument form
    out_v[i, 3] = axis * angle + axis_b * (xsim.float64(0.5) * angle_b)
    out_s[i] = xsim.quat_twist_angle(xsim.normalize(e[i]), q[i]) + xsim.float64(0.5) * xsim.quat_twist_angle_signed(
        xsim.normalize(e[i]), b[i])


def _unit(n):
    q = RNG.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_quaternion_func_gradients():
    e = RNG.uniform(-1.2, 1.2, (N, 3))
    q, b = _unit(N), _unit(N)
    b *= np.sign((q * b).sum(1))[:, None]
    args = [xsim.array(e, dtype=xsim.vec3d, requires_grad=True), xsim.array(q, dtype=xsim.quatd, requires_grad=True),
            xsim.array(b, dtype=xsim.quatd, requires_grad=True),
            xsim.array(RNG.uniform(0.1, 0.9, N), dtype=F64, requires_grad=True),
            xsim.zeros((N, 4), dtype=xsim.quatd, requires_grad=True),
            xsim.zeros((N, 4), dtype=xsim.vec3d, requires_grad=True), xsim.zeros(N, dtype=F64, requires_grad=True)]
    report = gradcheck(quats, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


@xsim.kernel
def from_matrix(m: xsim.array(dtype=xsim.mat33d), m4: xsim.array(dtype=xsim.mat44d),
                out: xsim.array(dtype=xsim.quatd, ndim=2), x: xsim.array(dtype=xsim.transformd)):
    i = xsim.tid()
    out[i, 0] = xsim.quat_from_matrix(m[i])
    out[i, 1] = xsim.quat_from_matrix(m4[i])
    x[i] = xsim.transform_from_matrix(m4[i])


def test_quat_from_matrix_gradients_in_every_branch():
    from scipy.spatial.transform import Rotation
    # scaled: the normalisation of a matrix that is not a rotation is differentiated too
    m = Rotation.from_rotvec(np.vstack([[0.2, -0.1, 0.3], 2.8 * np.eye(3)])).as_matrix() * 1.3
    m4 = np.tile(np.eye(4), (N, 1, 1))
    m4[:, :3, :3] = m
    m4[:, :3, 3] = RNG.normal(size=(N, 3))
    args = [xsim.array(m, dtype=xsim.mat33d, requires_grad=True), xsim.array(m4, dtype=xsim.mat44d, requires_grad=True),
            xsim.zeros((N, 2), dtype=xsim.quatd, requires_grad=True),
            xsim.zeros(N, dtype=xsim.transformd, requires_grad=True)]
    report = gradcheck(from_matrix, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


@xsim.kernel
def transforms(x: xsim.array(dtype=xsim.transformd), s: xsim.array(dtype=xsim.vec3d),
               a: xsim.array(dtype=xsim.spatial_vectord), b: xsim.array(dtype=xsim.spatial_vectord),
               r: xsim.array(dtype=xsim.vec3d), m: xsim.array(dtype=xsim.mat44d, ndim=2),
               sv: xsim.array(dtype=xsim.spatial_vectord, ndim=2), v: xsim.array(dtype=xsim.vec3d, ndim=2),
               dq: xsim.array(dtype=xsim.quatd), dot: xsim.array(dtype=F64)):
    i = xsim.tid()
    m[i, 0] = xsim.transform_to_matrix(x[i])
    c = xsim.transform_compose(xsim.transform_get_translation(x[i]), xsim.transform_get_rotation(x[i]), s[i])
    m[i, 1] = c
    p, q, sc = xsim.transform_decompose(c)
    v[i, 0] = p
    v[i, 1] = sc
    dq[i] = q
    sv[i, 0] = xsim.spatial_cross(a[i], b[i])
    sv[i, 1] = xsim.spatial_cross_dual(a[i], b[i])
    sv[i, 2] = xsim.transform_twist(x[i], a[i])
    sv[i, 3] = xsim.transform_wrench(x[i], a[i])
    v[i, 2] = xsim.velocity_at_point(a[i], r[i])
    rot = xsim.quat_to_matrix(xsim.transform_get_rotation(x[i]))
    dot[i] = xsim.spatial_dot(a[i], b[i]) + xsim.ddot(xsim.spatial_adjoint(rot, xsim.skew(r[i])), xsim.outer(a[i], b[i]))


def test_transform_and_spatial_gradients():
    x = np.concatenate([RNG.normal(size=(N, 3)), _unit(N)], axis=1)
    x[:, 3:] *= np.sign(x[:, 6:7])  # w > 0: decompose's quat_from_matrix stays in one branch nearby
    args = [xsim.array(x, dtype=xsim.transformd, requires_grad=True),
            xsim.array(RNG.uniform(0.5, 2.0, (N, 3)), dtype=xsim.vec3d, requires_grad=True),
            xsim.array(RNG.normal(size=(N, 6)), dtype=xsim.spatial_vectord, requires_grad=True),
            xsim.array(RNG.normal(size=(N, 6)), dtype=xsim.spatial_vectord, requires_grad=True),
            xsim.array(RNG.normal(size=(N, 3)), dtype=xsim.vec3d, requires_grad=True),
            xsim.zeros((N, 2), dtype=xsim.mat44d, requires_grad=True),
            xsim.zeros((N, 4), dtype=xsim.spatial_vectord, requires_grad=True),
            xsim.zeros((N, 3), dtype=xsim.vec3d, requires_grad=True),
            xsim.zeros(N, dtype=xsim.quatd, requires_grad=True), xsim.zeros(N, dtype=F64, requires_grad=True)]
    report = gradcheck(transforms, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


@xsim.kernel
def set_parts(x: xsim.array(dtype=xsim.transformd), p: xsim.array(dtype=xsim.vec3d), q: xsim.array(dtype=xsim.quatd),
              out: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    t = x[i]
    xsim.transform_set_translation(t, p[i] * 2.0)
    xsim.transform_set_rotation(t, xsim.normalize(q[i]))
    out[i] = xsim.transform_point(t, xsim.transform_get_translation(x[i]))


def test_transform_setter_gradients_reach_the_new_parts_and_the_kept_ones():
    args = [xsim.array(RNG.normal(size=(N, 7)), dtype=xsim.transformd, requires_grad=True),
            xsim.array(RNG.normal(size=(N, 3)), dtype=xsim.vec3d, requires_grad=True),
            xsim.array(RNG.normal(size=(N, 4)), dtype=xsim.quatd, requires_grad=True),
            xsim.zeros(N, dtype=xsim.vec3d, requires_grad=True)]
    report = gradcheck(set_parts, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


@xsim.kernel
def articulation(s: xsim.array(dtype=xsim.spatial_vectord), parents: xsim.array(dtype=xsim.int32),
                 qd_start: xsim.array(dtype=xsim.int32), inertia: xsim.array(dtype=xsim.spatial_matrixd),
                 jac: xsim.array(dtype=F64), mass: xsim.array(dtype=F64)):
    xsim.spatial_jacobian(s, parents, qd_start, 1, 3, 2, jac)  # joints 1-3 after a joint of another articulation
    xsim.spatial_mass(inertia, 1, 3, 5, mass)


def test_spatial_jacobian_and_mass_gradients_reach_the_subspaces_and_inertias():
    args = [xsim.array(RNG.normal(size=(6, 6)), dtype=xsim.spatial_vectord, requires_grad=True),
            xsim.array([-1, -1, 1, 1], dtype=xsim.int32), xsim.array([0, 1, 3, 4, 6], dtype=xsim.int32),
            xsim.array(RNG.normal(size=(4, 6, 6)), dtype=xsim.spatial_matrixd, requires_grad=True),
            xsim.zeros(2 + 18 * 5, dtype=F64, requires_grad=True),
            xsim.zeros(5 + 18 * 18, dtype=F64, requires_grad=True)]
    report = gradcheck(articulation, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)
