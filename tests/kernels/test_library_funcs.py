"""The library funcs written in the kernel language (xsim/kernels/funcs_math.py, funcs_transform.py):
forward values against numpy and scipy.spatial.transform.Rotation (Warp's conventions: quaternions
x, y, z, w; extrinsic Euler sequences), in float64 and for a few in float32. Their gradients are
checked in tests/autodiff/test_library_func_gradients.py."""

import itertools

import numpy as np
import pytest
from scipy.spatial.transform import Rotation, Slerp

import xsim

pytestmark = pytest.mark.cpu_only
N = 12
RNG = np.random.default_rng(7)
F64 = xsim.float64


def unit_quats(n=N):
    q = RNG.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def same_rotation(got, want):
    """Quaternions equal up to their sign (q and -q are one rotation)."""
    s = np.sign(np.sum(got * want, axis=1, keepdims=True))
    np.testing.assert_allclose(got * s, want, atol=1e-12)


@xsim.kernel
def norms(v: xsim.array(dtype=xsim.vec3d), out: xsim.array(dtype=F64, ndim=2), sn: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    out[i, 0] = xsim.norm_l1(v[i])
    out[i, 1] = xsim.norm_l2(v[i])
    out[i, 2] = xsim.norm_huber(v[i])
    out[i, 3] = xsim.norm_huber(v[i], 0.5)
    out[i, 4] = xsim.norm_pseudo_huber(v[i])
    out[i, 5] = xsim.norm_pseudo_huber(v[i], 0.5)
    sn[i] = xsim.smooth_normalize(v[i], 0.5)


@xsim.kernel
def norm_l1_f32(v: xsim.array(dtype=xsim.vec4), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = xsim.norm_l1(v[i]) + xsim.norm_huber(v[i])


def test_vector_norms_match_numpy():
    v = RNG.uniform(-1.0, 1.0, (N, 3)) * RNG.choice([0.2, 2.0], (N, 1))
    out = xsim.zeros((N, 6), dtype=F64)
    sn = xsim.zeros(N, dtype=xsim.vec3d)
    xsim.launch(norms, N, inputs=[xsim.array(v, dtype=xsim.vec3d), out, sn])
    n2 = np.linalg.norm(v, axis=1)

    def huber(d):
        return np.where(n2 <= d, 0.5 * n2 ** 2, d * (n2 - 0.5 * d))

    def pseudo(d):
        return d * np.sqrt(1 + n2 ** 2 / d ** 2)

    want = np.stack([np.abs(v).sum(1), n2, huber(1.0), huber(0.5), pseudo(1.0), pseudo(0.5)], axis=1)
    assert (n2 > 1.0).any() and (n2 < 0.5).any()  # both branches of the Huber norm
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-13)
    np.testing.assert_allclose(sn.numpy(), v / pseudo(0.5)[:, None], rtol=1e-13)


def test_norms_follow_the_vector_scalar_type():
    v = RNG.uniform(-1.0, 1.0, (N, 4)).astype(np.float32)
    out = xsim.zeros(N, dtype=float)
    xsim.launch(norm_l1_f32, N, inputs=[xsim.array(v, dtype=xsim.vec4), out])
    n2 = np.linalg.norm(v, axis=1)
    want = np.abs(v).sum(1) + np.where(n2 <= 1, 0.5 * n2 ** 2, n2 - 0.5)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


@xsim.kernel
def searches(arr: xsim.array(dtype=F64), values: xsim.array(dtype=F64), out: xsim.array(dtype=xsim.int32, ndim=2)):
    i = xsim.tid()
    out[i, 0] = xsim.lower_bound(arr, values[i])
    out[i, 1] = xsim.lower_bound(arr, 2, 7, values[i])


def test_lower_bound_matches_searchsorted_clamped_to_the_last_index_as_in_warp():
    arr = np.sort(RNG.integers(0, 6, 10).astype(float))  # with repeated values
    values = np.concatenate([np.unique(arr), [-1.0, 2.5, 9.0]])
    out = xsim.zeros((len(values), 2), dtype=xsim.int32)
    xsim.launch(searches, len(values), inputs=[xsim.array(arr, dtype=F64), xsim.array(values, dtype=F64), out])
    np.testing.assert_array_equal(out.numpy()[:, 0], np.minimum(np.searchsorted(arr, values, side="left"), 9))
    np.testing.assert_array_equal(out.numpy()[:, 1], 2 + np.minimum(np.searchsorted(arr[2:7], values, side="left"), 4))
    assert out.numpy()[-1].tolist() == [9, 6]  # 9.0 is past every element: the last index of the range


# ---------------------------------------------------------------------------------------------
# quaternions

SEQUENCES = [s for s in itertools.product(range(3), repeat=3) if s[0] != s[1] and s[1] != s[2]]


@xsim.kernel
def euler(e: xsim.array(dtype=xsim.vec3d), q: xsim.array(dtype=xsim.quatd), i: int, j: int, k: int,
          from_e: xsim.array(dtype=xsim.quatd), to_e: xsim.array(dtype=xsim.vec3d),
          rpy: xsim.array(dtype=xsim.quatd)):
    t = xsim.tid()
    from_e[t] = xsim.quat_from_euler(e[t], i, j, k)
    to_e[t] = xsim.quat_to_euler(q[t], i, j, k)
    rpy[t] = xsim.quat_rpy(e[t][0], e[t][1], e[t][2])


@xsim.kernel
def rpy_angles(q: xsim.array(dtype=xsim.quatd), to_rpy: xsim.array(dtype=xsim.vec3d)):
    """Apart from ``euler``: at gimbal lock roll and yaw are decided by rounding, not host-computable."""
    t = xsim.tid()
    to_rpy[t] = xsim.quat_to_rpy(q[t])


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


@pytest.mark.parametrize("seq", SEQUENCES, ids=["".join("xyz"[a] for a in s) for s in SEQUENCES])
def test_euler_angles_match_scipy_extrinsic_sequences(seq):
    i, j, k = seq
    e = RNG.uniform(-1.4, 1.4, (N, 3))
    q = unit_quats()
    outs = [xsim.zeros(N, dtype=t) for t in (xsim.quatd, xsim.vec3d, xsim.quatd, xsim.vec3d)]
    xsim.launch(euler, N, inputs=[xsim.array(e, dtype=xsim.vec3d), xsim.array(q, dtype=xsim.quatd), i, j, k,
                                  *outs[:3]])
    xsim.launch(rpy_angles, N, inputs=[xsim.array(q, dtype=xsim.quatd), outs[3]])
    name = "".join("xyz"[a] for a in seq)
    same_rotation(outs[0].numpy(), Rotation.from_euler(name, e[:, [i, j, k]]).as_quat())
    angles = Rotation.from_quat(q).as_euler(name)
    third = k if i != k else 3 - i - j
    got = outs[1].numpy()[:, [i, j, third]]
    np.testing.assert_allclose(_wrap(got - angles), 0.0, atol=1e-9)
    same_rotation(outs[2].numpy(), Rotation.from_euler("xyz", e).as_quat())
    np.testing.assert_allclose(outs[3].numpy(), Rotation.from_quat(q).as_euler("xyz"), atol=1e-9)


def test_quat_to_euler_round_trips_at_gimbal_lock():
    e = np.array([[0.3, np.pi / 2, -0.4], [1.0, -np.pi / 2, 0.2]])
    q = Rotation.from_euler("xyz", e).as_quat()
    outs = [xsim.zeros(2, dtype=t) for t in (xsim.quatd, xsim.vec3d, xsim.quatd)]
    xsim.launch(euler, 2, inputs=[xsim.array(e, dtype=xsim.vec3d), xsim.array(q, dtype=xsim.quatd), 0, 1, 2, *outs])
    back = Rotation.from_euler("xyz", outs[1].numpy()).as_quat()
    same_rotation(back, q)


@xsim.kernel
def rotations(a: xsim.array(dtype=xsim.quatd), b: xsim.array(dtype=xsim.quatd), t: xsim.array(dtype=F64),
              m: xsim.array(dtype=xsim.mat33d), m4: xsim.array(dtype=xsim.mat44d),
              axis: xsim.array(dtype=xsim.vec3d), angle: xsim.array(dtype=F64), slerp: xsim.array(dtype=xsim.quatd),
              from_m: xsim.array(dtype=xsim.quatd), from_m4: xsim.array(dtype=xsim.quatd),
              axis_b: xsim.array(dtype=xsim.vec3d), angle_b: xsim.array(dtype=F64),
              from_scaled: xsim.array(dtype=xsim.quatd)):
    i = xsim.tid()
    ax, an = xsim.quat_to_axis_angle(a[i])
    axis[i] = ax
    angle[i] = an
    ax = xsim.vec3d()
    an = F64(0.0)
    xsim.quat_to_axis_angle(b[i], ax, an)  # Warp's output-argument form
    axis_b[i] = ax
    angle_b[i] = an
    slerp[i] = xsim.quat_slerp(a[i], b[i], t[i])
    from_m[i] = xsim.quat_from_matrix(m[i])
    from_m4[i] = xsim.quat_from_matrix(m4[i])
    from_scaled[i] = xsim.quat_from_matrix(F64(2.5) * m[i])  # not a rotation: still a unit quaternion (Warp's)


def test_axis_angle_slerp_and_from_matrix_match_scipy():
    a, b = unit_quats(), unit_quats()
    # matrices of rotations that exercise every branch of the square-root choice: near the identity
    # and half turns about x, y and z
    qm = np.concatenate([unit_quats(N - 4), Rotation.from_rotvec(np.pi * 0.95 * np.eye(3)).as_quat(),
                         Rotation.from_rotvec([[0.1, 0.0, 0.0]]).as_quat()])
    m = Rotation.from_quat(qm).as_matrix()
    m4 = np.tile(np.eye(4), (N, 1, 1))
    m4[:, :3, :3] = m
    m4[:, :3, 3] = RNG.normal(size=(N, 3))
    t = RNG.uniform(0, 1, N)
    outs = [xsim.zeros(N, dtype=ty) for ty in (xsim.vec3d, F64, xsim.quatd, xsim.quatd, xsim.quatd, xsim.vec3d, F64,
                                               xsim.quatd)]
    xsim.launch(rotations, N, inputs=[xsim.array(a, dtype=xsim.quatd), xsim.array(b, dtype=xsim.quatd),
                                      xsim.array(t, dtype=F64), xsim.array(m, dtype=xsim.mat33d),
                                      xsim.array(m4, dtype=xsim.mat44d), *outs])
    axis, angle, slerp, from_m, from_m4, axis_b, angle_b, from_scaled = (o.numpy() for o in outs)
    np.testing.assert_allclose(axis * angle[:, None], Rotation.from_quat(a).as_rotvec(), atol=1e-12)
    np.testing.assert_allclose(axis_b * angle_b[:, None], Rotation.from_quat(b).as_rotvec(), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(from_scaled, axis=1), 1.0, rtol=1e-14)
    assert np.all((angle >= 0) & (angle <= np.pi))
    want = np.stack([Slerp([0, 1], Rotation.from_quat([a[n], b[n]]))(t[n]).as_quat() for n in range(N)])
    same_rotation(slerp, want)
    same_rotation(from_m, qm)
    same_rotation(from_m4, qm)


@xsim.kernel
def twists(axis: xsim.array(dtype=xsim.vec3d), q: xsim.array(dtype=xsim.quatd), tw: xsim.array(dtype=xsim.quatd),
           angle: xsim.array(dtype=F64), signed_angle: xsim.array(dtype=F64)):
    i = xsim.tid()
    tw[i] = xsim.quat_twist(axis[i], q[i])
    angle[i] = xsim.quat_twist_angle(axis[i], q[i])
    signed_angle[i] = xsim.quat_twist_angle_signed(axis[i], q[i])


def test_quat_twist_recovers_the_twist_of_a_swing_twist_product():
    axis = RNG.normal(size=(N, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    perp = np.cross(axis, RNG.normal(size=(N, 3)))
    perp /= np.linalg.norm(perp, axis=1, keepdims=True)
    theta = RNG.uniform(-2.5, 2.5, N)
    twist = Rotation.from_rotvec(axis * theta[:, None])
    q = (Rotation.from_rotvec(perp * RNG.uniform(-1, 1, (N, 1))) * twist).as_quat()
    tw, angle, signed = xsim.zeros(N, dtype=xsim.quatd), xsim.zeros(N, dtype=F64), xsim.zeros(N, dtype=F64)
    xsim.launch(twists, N, inputs=[xsim.array(axis, dtype=xsim.vec3d), xsim.array(q, dtype=xsim.quatd), tw, angle,
                                   signed])
    same_rotation(tw.numpy(), twist.as_quat())
    w_sign = np.sign(q[:, 3])
    np.testing.assert_allclose(angle.numpy(), np.where(w_sign > 0, np.abs(theta), 2 * np.pi - np.abs(theta)),
                               atol=1e-12)
    # q and -q: the signed angle keeps the direction, shifted by a full turn when q[3] < 0
    np.testing.assert_allclose(signed.numpy(), np.where(w_sign > 0, theta, theta - 2 * np.pi * np.sign(theta)),
                               atol=1e-12)


# ---------------------------------------------------------------------------------------------
# transforms and spatial vectors


@xsim.kernel
def matrices(x: xsim.array(dtype=xsim.transformd), s: xsim.array(dtype=xsim.vec3d),
             to_m: xsim.array(dtype=xsim.mat44d), comp: xsim.array(dtype=xsim.mat44d),
             from_m: xsim.array(dtype=xsim.transformd), dp: xsim.array(dtype=xsim.vec3d),
             dq: xsim.array(dtype=xsim.quatd), ds: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    to_m[i] = xsim.transform_to_matrix(x[i])
    c = xsim.transform_compose(xsim.transform_get_translation(x[i]), xsim.transform_get_rotation(x[i]), s[i])
    comp[i] = c
    from_m[i] = xsim.transform_from_matrix(to_m[i])
    p, q, sc = xsim.transform_decompose(c)
    dp[i] = p
    dq[i] = q
    ds[i] = sc


def test_transform_matrices_compose_and_decompose():
    q = unit_quats()
    x = np.concatenate([RNG.normal(size=(N, 3)), q], axis=1)
    s = RNG.uniform(0.3, 2.0, (N, 3))
    outs = [xsim.zeros(N, dtype=t) for t in (xsim.mat44d, xsim.mat44d, xsim.transformd, xsim.vec3d, xsim.quatd,
                                            xsim.vec3d)]
    xsim.launch(matrices, N, inputs=[xsim.array(x, dtype=xsim.transformd), xsim.array(s, dtype=xsim.vec3d), *outs])
    to_m, comp, from_m, dp, dq, ds = (o.numpy() for o in outs)
    want = np.tile(np.eye(4), (N, 1, 1))
    want[:, :3, :3] = Rotation.from_quat(q).as_matrix()
    want[:, :3, 3] = x[:, :3]
    np.testing.assert_allclose(to_m, want, atol=1e-12)
    want[:, :3, :3] *= s[:, None, :]
    np.testing.assert_allclose(comp, want, atol=1e-12)
    np.testing.assert_allclose(from_m[:, :3], x[:, :3], atol=1e-12)
    same_rotation(from_m[:, 3:], q)
    np.testing.assert_allclose(dp, x[:, :3], atol=1e-12)
    same_rotation(dq, q)
    np.testing.assert_allclose(ds, s, atol=1e-12)


@xsim.kernel
def spatial(a: xsim.array(dtype=xsim.spatial_vectord), b: xsim.array(dtype=xsim.spatial_vectord),
            x: xsim.array(dtype=xsim.transformd), r: xsim.array(dtype=xsim.vec3d),
            out: xsim.array(dtype=xsim.spatial_vectord, ndim=2), dots: xsim.array(dtype=F64),
            vel: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    out[i, 0] = xsim.spatial_cross(a[i], b[i])
    out[i, 1] = xsim.spatial_cross_dual(a[i], b[i])
    out[i, 2] = xsim.transform_twist(x[i], a[i])
    out[i, 3] = xsim.transform_wrench(x[i], a[i])
    dots[i] = xsim.spatial_dot(a[i], b[i])
    vel[i] = xsim.velocity_at_point(a[i], r[i]) + xsim.spatial_top(b[i]) - xsim.spatial_bottom(b[i])
    out[i, 5] = xsim.spatial_vectord(xsim.spatial_bottom(a[i]), xsim.spatial_top(a[i]))
    xf = xsim.transform_get_rotation(x[i])
    rot = xsim.quat_to_matrix(xf)
    out[i, 4] = xsim.spatial_adjoint(rot, xsim.skew(xsim.transform_get_translation(x[i])) * rot) * a[i]


def test_spatial_algebra_and_frame_changes_match_numpy():
    a, b = RNG.normal(size=(N, 6)), RNG.normal(size=(N, 6))
    q = unit_quats()
    x = np.concatenate([RNG.normal(size=(N, 3)), q], axis=1)
    r = RNG.normal(size=(N, 3))
    out, dots, vel = xsim.zeros((N, 6), dtype=xsim.spatial_vectord), xsim.zeros(N, dtype=F64), \
        xsim.zeros(N, dtype=xsim.vec3d)
    xsim.launch(spatial, N, inputs=[xsim.array(a, dtype=xsim.spatial_vectord),
                                    xsim.array(b, dtype=xsim.spatial_vectord), xsim.array(x, dtype=xsim.transformd),
                                    xsim.array(r, dtype=xsim.vec3d), out, dots, vel])
    wa, va, wb, vb = a[:, :3], a[:, 3:], b[:, :3], b[:, 3:]
    rot = Rotation.from_quat(q)
    p = x[:, :3]
    got = out.numpy()
    np.testing.assert_allclose(got[:, 0], np.hstack([np.cross(wa, wb), np.cross(va, wb) + np.cross(wa, vb)]),
                               atol=1e-12)
    np.testing.assert_allclose(got[:, 1], np.hstack([np.cross(wa, wb) + np.cross(va, vb), np.cross(wa, vb)]),
                               atol=1e-12)
    w2, v2 = rot.apply(wa), rot.apply(va)
    np.testing.assert_allclose(got[:, 2], np.hstack([w2, v2 + np.cross(p, w2)]), atol=1e-12)
    np.testing.assert_allclose(got[:, 3], np.hstack([w2 + np.cross(p, v2), v2]), atol=1e-12)
    np.testing.assert_allclose(got[:, 4], got[:, 2], atol=1e-12)
    np.testing.assert_array_equal(got[:, 5], np.hstack([va, wa]))  # spatial_vector(top, bottom)  # the adjoint matrix moves twists the same way
    np.testing.assert_allclose(dots.numpy(), (a * b).sum(1), atol=1e-12)
    np.testing.assert_allclose(vel.numpy(), va + np.cross(wa, r) + wb - vb, atol=1e-12)


# two articulations: joints 0-3 (parents -1, 0, 0, 2; dofs 1, 2, 1, 3) and joints 4-5 (a chain of 1-dof joints)
PARENTS = np.array([-1, 0, 0, 2, -1, 4], dtype=np.int32)
QD_START = np.array([0, 1, 3, 4, 7, 8, 9], dtype=np.int32)
ART_JOINTS = [(0, 4), (4, 2)]


@xsim.kernel
def articulation_matrices(s: xsim.array(dtype=xsim.spatial_vectord), parents: xsim.array(dtype=xsim.int32),
                          qd_start: xsim.array(dtype=xsim.int32), inertia: xsim.array(dtype=xsim.spatial_matrixd),
                          joints: xsim.array(dtype=xsim.int32, ndim=2), jac: xsim.array(dtype=F64),
                          mass: xsim.array(dtype=F64)):
    a = xsim.tid()
    xsim.spatial_jacobian(s, parents, qd_start, joints[a, 0], joints[a, 1], joints[a, 2], jac)
    xsim.spatial_mass(inertia, joints[a, 0], joints[a, 1], joints[a, 3], mass)


def articulation_reference(s, inertia):
    """The Jacobian and mass blocks of ART_JOINTS in numpy (-1 where nothing is written), with the
    (joint_start, joint_count, J_start, M_start) of each."""
    jacs, masses, starts, j_at, m_at = [], [], [], 0, 0
    for first, count in ART_JOINTS:
        cols = slice(QD_START[first], QD_START[first + count])
        jac = np.full((6 * count, cols.stop - cols.start), -1.0)
        for i in range(count):
            j = first + i
            while j != -1:  # every ancestor's motion subspace moves joint i
                jac[6 * i:6 * i + 6, QD_START[j] - cols.start:QD_START[j + 1] - cols.start] = s[QD_START[j]:
                                                                                                  QD_START[j + 1]].T
                j = PARENTS[j]
        mass = np.full((6 * count, 6 * count), -1.0)
        for b in range(count):
            mass[6 * b:6 * b + 6, 6 * b:6 * b + 6] = inertia[first + b]
        jacs.append(jac.ravel())
        masses.append(mass.ravel())
        starts.append((first, count, j_at, m_at))
        j_at, m_at = j_at + jac.size, m_at + mass.size
    return np.concatenate(jacs), np.concatenate(masses), np.array(starts, dtype=np.int32)


def test_spatial_jacobian_and_mass_fill_the_articulation_blocks_like_numpy():
    s, inertia = RNG.normal(size=(9, 6)), RNG.normal(size=(6, 6, 6))
    want_j, want_m, starts = articulation_reference(s, inertia)
    jac, mass = xsim.full(want_j.size, -1.0, dtype=F64), xsim.full(want_m.size, -1.0, dtype=F64)
    xsim.launch(articulation_matrices, len(ART_JOINTS), inputs=[
        xsim.array(s, dtype=xsim.spatial_vectord), xsim.array(PARENTS, dtype=xsim.int32),
        xsim.array(QD_START, dtype=xsim.int32), xsim.array(inertia, dtype=xsim.spatial_matrixd),
        xsim.array(starts, dtype=xsim.int32), jac, mass])
    np.testing.assert_array_equal(jac.numpy(), want_j)
    np.testing.assert_array_equal(mass.numpy(), want_m)
    assert (want_j == -1.0).sum() == (168 - 66) + (24 - 18)  # entries off each joint's ancestor path stay


@xsim.kernel
def setters(x: xsim.array(dtype=xsim.transformd), p: xsim.array(dtype=xsim.vec3d), q: xsim.array(dtype=xsim.quatd),
            out: xsim.array(dtype=xsim.transformd, ndim=2)):
    i = xsim.tid()
    t = x[i]
    xsim.transform_set_translation(t, p[i])
    out[i, 0] = t
    xsim.transform_set_rotation(t, q[i])
    out[i, 1] = t
    out[i, 2] = x[i]


def test_transform_setters_rebind_the_local_transform():
    x, p, q = RNG.normal(size=(N, 7)), RNG.normal(size=(N, 3)), RNG.normal(size=(N, 4))
    out = xsim.zeros((N, 3), dtype=xsim.transformd)
    xsim.launch(setters, N, inputs=[xsim.array(x, dtype=xsim.transformd), xsim.array(p, dtype=xsim.vec3d),
                                    xsim.array(q, dtype=xsim.quatd), out])
    got = out.numpy()
    np.testing.assert_array_equal(got[:, 0], np.hstack([p, x[:, 3:]]))
    np.testing.assert_array_equal(got[:, 1], np.hstack([p, q]))
    np.testing.assert_array_equal(got[:, 2], x)


def test_a_setter_on_an_array_element_is_refused_naming_the_line():
    @xsim.kernel(module="lib15_refused_setter")
    def bad(x: xsim.array(dtype=xsim.transform), p: xsim.vec3):
        xsim.transform_set_translation(x[0], p)

    with pytest.raises(xsim.CompileError, match="must be a local variable name") as info:
        xsim.launch(bad, 1, inputs=[xsim.zeros(1, dtype=xsim.transform), xsim.vec3(1.0, 2.0, 3.0)])
    assert f"{__file__}:{bad.pyfunc.__code__.co_firstlineno + 2}" in str(info.value)
