"""Library funcs of the kernel language for rotations, rigid transforms and spatial vectors, written
in it (inlined, so their adjoints are generated). Conventions are Warp's: quaternions (x, y, z, w),
transforms (p, q) mapping x to p + rotate(q, x), spatial vectors (angular top, linear bottom).
Every func follows the scalar type of its arguments (float16/32/64)."""

from __future__ import annotations

import xsim  # resolved when a kernel calling these compiles, after xsim is fully imported

from .builtins import OUTPUT_ARGS
from .kernel import func

__all__ = [
    "quat_from_euler",
    "quat_from_matrix",
    "quat_rpy",
    "quat_slerp",
    "quat_to_axis_angle",
    "quat_to_euler",
    "quat_to_rpy",
    "quat_twist",
    "quat_twist_angle",
    "quat_twist_angle_signed",
    "spatial_adjoint",
    "spatial_bottom",
    "spatial_cross",
    "spatial_cross_dual",
    "spatial_dot",
    "spatial_jacobian",
    "spatial_mass",
    "spatial_top",
    "transform_compose",
    "transform_decompose",
    "transform_from_matrix",
    "transform_to_matrix",
    "transform_twist",
    "transform_wrench",
    "velocity_at_point",
]

# ---------------------------------------------------------------------------------------------
# building values of the arguments' scalar type


@func
def _quat_of(x, y, z, w):
    q = xsim.quat_identity(dtype=type(w))
    q[0] = x
    q[1] = y
    q[2] = z
    q[3] = w
    return q


@func
def _transform_of(p, q):
    t = xsim.transform_identity(dtype=type(q[3]))
    for k in range(3):
        t[k] = p[k]
    for k in range(4):
        t[k + 3] = q[k]
    return t


@func
def _axis_rotation(axis: int, angle):
    """The rotation by ``angle`` (radians) about coordinate axis 0, 1 or 2."""
    q = xsim.quat_identity(dtype=type(angle))
    h = 0.5 * angle
    q[axis] = xsim.sin(h)
    q[3] = xsim.cos(h)
    return q


# ---------------------------------------------------------------------------------------------
# quaternions


@func
def quat_rpy(roll, pitch, yaw):
    """The rotation by roll, pitch and yaw (radians) about the fixed x, y and z axes, in that order."""
    return _axis_rotation(2, yaw) * (_axis_rotation(1, pitch) * _axis_rotation(0, roll))


@func
def quat_from_euler(e, i: int, j: int, k: int):
    """The rotation about the fixed axes i, then j, then k by the angles e[i], e[j], e[k] (radians)."""
    return _axis_rotation(k, e[k]) * (_axis_rotation(j, e[j]) * _axis_rotation(i, e[i]))


@func
def quat_to_euler(q, i: int, j: int, k: int):
    """Angles ``e`` with ``quat_from_euler(e, i, j, k)`` the rotation ``q`` (Tait-Bryan sequences, i != k);
    for proper sequences (i == k) e[i], e[j], e[3 - i - j] hold the first, second and third angle.
    Bernardes and Viollet's direct method (PLoS ONE 17(11), 2022); at gimbal lock the first angle is 0."""
    proper = i == k
    kk = k
    if proper:
        kk = 3 - i - j
    sign = float((i - j) * (j - kk) * (kk - i)) / 2.0  # Levi-Civita symbol of (i, j, kk)
    qi = q[i]
    qj = q[j]
    qk = q[kk] * type(q[3])(sign)
    a = q[3]
    b = qi
    c = qj
    d = qk
    if not proper:
        a = q[3] - qj
        b = qi + qk
        c = qj + q[3]
        d = qk - qi
    n2 = a * a + b * b + c * c + d * d
    t2 = xsim.acos(2.0 * (a * a + b * b) / n2 - 1.0)
    tp = xsim.atan2(b, a)
    tm = xsim.atan2(d, c)
    t1 = tp * 0.0
    t3 = tp * 0.0
    if xsim.abs(t2) < 1.0e-6:
        t3 = 2.0 * tp
    elif xsim.abs(t2 - 3.141592653589793) < 1.0e-6:
        t3 = 2.0 * tm
    else:
        t1 = tp - tm
        t3 = tp + tm
    if not proper:
        t2 -= 1.5707963267948966
        t3 *= type(q[3])(sign)
    e = xsim.vector(t1, t1, t1)
    e[i] = t1
    e[j] = t2
    e[kk] = t3
    return e


@func
def quat_to_rpy(q):
    """(roll, pitch, yaw) in radians of the rotation ``q``, the inverse of ``quat_rpy`` away from pitch = +-pi/2."""
    x = q[0]
    y = q[1]
    z = q[2]
    w = q[3]
    roll = xsim.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = xsim.asin(xsim.clamp(2.0 * (w * y - z * x), -1.0, 1.0))
    yaw = xsim.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return xsim.vector(roll, pitch, yaw)


@func
def quat_to_axis_angle(q):
    """(unit axis, angle in [0, pi]) of the rotation ``q``: the axis flips with the sign of w."""
    v = xsim.vector(q[0], q[1], q[2])
    axis = xsim.normalize(v)
    if q[3] < 0.0:
        axis = -axis
    return axis, 2.0 * xsim.atan2(xsim.length(v), xsim.abs(q[3]))


quat_to_axis_angle.outputs_after = 1  # also quat_to_axis_angle(q, axis, angle), as in Warp
OUTPUT_ARGS["quat_to_axis_angle"] = lambda n: range(1, n)


@func
def quat_slerp(a, b, t):
    """Spherical interpolation from rotation ``a`` (t = 0) to ``b`` (t = 1) along the shorter arc."""
    axis, angle = quat_to_axis_angle(xsim.quat_inverse(a) * b)
    return a * xsim.quat_from_axis_angle(axis, t * angle)


@func
def quat_from_matrix(m):
    """The rotation of a 3x3 rotation matrix (or of the top-left block of a 4x4 one); Shepperd's method,
    taking the square root of the largest of 1 + trace and the diagonal-led sums, normalised (as Warp's, so a
    matrix that is not quite a rotation still gives a unit quaternion)."""
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr >= 0.0:
        h = xsim.sqrt(tr + 1.0)
        s = 0.5 / h
        q = _quat_of((m[2, 1] - m[1, 2]) * s, (m[0, 2] - m[2, 0]) * s, (m[1, 0] - m[0, 1]) * s, 0.5 * h)
    elif m[1, 1] > m[0, 0] and m[1, 1] >= m[2, 2]:
        h = xsim.sqrt(m[1, 1] - (m[2, 2] + m[0, 0]) + 1.0)
        s = 0.5 / h
        q = _quat_of((m[0, 1] + m[1, 0]) * s, 0.5 * h, (m[1, 2] + m[2, 1]) * s, (m[0, 2] - m[2, 0]) * s)
    elif m[2, 2] > m[0, 0] and m[2, 2] > m[1, 1]:
        h = xsim.sqrt(m[2, 2] - (m[0, 0] + m[1, 1]) + 1.0)
        s = 0.5 / h
        q = _quat_of((m[2, 0] + m[0, 2]) * s, (m[1, 2] + m[2, 1]) * s, 0.5 * h, (m[1, 0] - m[0, 1]) * s)
    else:
        h = xsim.sqrt(m[0, 0] - (m[1, 1] + m[2, 2]) + 1.0)
        s = 0.5 / h
        q = _quat_of(0.5 * h, (m[0, 1] + m[1, 0]) * s, (m[2, 0] + m[0, 2]) * s, (m[2, 1] - m[1, 2]) * s)
    return xsim.normalize(q)


@func
def quat_twist(axis, q):
    """The twist of ``q`` about the unit ``axis`` (its swing-twist decomposition), a unit quaternion."""
    proj = axis * xsim.dot(xsim.vector(q[0], q[1], q[2]), axis)
    return xsim.normalize(_quat_of(proj[0], proj[1], proj[2], q[3]))


@func
def quat_twist_angle(axis, q):
    """The unsigned angle (radians) of the twist of ``q`` about the unit ``axis``."""
    return 2.0 * xsim.atan2(xsim.abs(xsim.dot(axis, xsim.vector(q[0], q[1], q[2]))), q[3])


@func
def quat_twist_angle_signed(axis, q):
    """The signed angle (radians, right-handed about the unit ``axis``) of the twist of ``q``: in [-pi, pi]
    for ``q[3] >= 0``, and ``q``'s sign matters, as for ``quat_twist_angle``."""
    return 2.0 * xsim.atan2(xsim.dot(axis, xsim.vector(q[0], q[1], q[2])), q[3])


# ---------------------------------------------------------------------------------------------
# transforms


@func
def transform_to_matrix(xform):
    """The 4x4 homogeneous matrix [R p; 0 1] of a transform."""
    one = xform[6] * 0.0 + 1.0
    return transform_compose(xsim.transform_get_translation(xform), xsim.transform_get_rotation(xform),
                             xsim.vector(one, one, one))


@func
def transform_compose(position, rotation, scale):
    """The 4x4 matrix [R diag(scale) position; 0 1] of a position, a rotation and per-axis scales."""
    r = xsim.quat_to_matrix(rotation)
    z = position[0] * 0.0
    return xsim.matrix(r[0, 0] * scale[0], r[0, 1] * scale[1], r[0, 2] * scale[2], position[0],
                       r[1, 0] * scale[0], r[1, 1] * scale[1], r[1, 2] * scale[2], position[1],
                       r[2, 0] * scale[0], r[2, 1] * scale[1], r[2, 2] * scale[2], position[2],
                       z, z, z, z + 1.0, shape=(4, 4))


@func
def transform_decompose(m):
    """(position, rotation, scale) of a 4x4 matrix made by ``transform_compose`` (positive scales)."""
    position = xsim.vector(m[0, 3], m[1, 3], m[2, 3])
    c0 = xsim.vector(m[0, 0], m[1, 0], m[2, 0])
    c1 = xsim.vector(m[0, 1], m[1, 1], m[2, 1])
    c2 = xsim.vector(m[0, 2], m[1, 2], m[2, 2])
    scale = xsim.vector(xsim.length(c0), xsim.length(c1), xsim.length(c2))
    r = xsim.matrix_from_cols(xsim.normalize(c0), xsim.normalize(c1), xsim.normalize(c2))
    return position, quat_from_matrix(r), scale


@func
def transform_from_matrix(m):
    """The transform of a 4x4 matrix [R p; 0 1] with R a rotation."""
    return _transform_of(xsim.vector(m[0, 3], m[1, 3], m[2, 3]), quat_from_matrix(m))


# ---------------------------------------------------------------------------------------------
# spatial vectors (angular top, linear bottom)


@func
def spatial_top(a):
    """The angular (first) half of a spatial vector."""
    return xsim.vector(a[0], a[1], a[2])


@func
def spatial_bottom(a):
    """The linear (second) half of a spatial vector."""
    return xsim.vector(a[3], a[4], a[5])


@func
def _spatial_of(top, bottom):
    return xsim.vector(top[0], top[1], top[2], bottom[0], bottom[1], bottom[2])


@func
def spatial_adjoint(r, s):
    """The 6x6 block matrix [[r, 0], [s, r]] (with r = R, s = skew(p) R it maps twists by the transform (p, R))."""
    m = xsim.matrix(shape=(6, 6), dtype=type(r[0, 0]))
    for i in range(3):
        for j in range(3):
            m[i, j] = r[i, j]
            m[i + 3, j + 3] = r[i, j]
            m[i + 3, j] = s[i, j]
    return m


@func
def spatial_dot(a, b):
    """The dot product of two spatial vectors (all six components)."""
    return xsim.dot(a, b)


@func
def spatial_cross(a, b):
    """The motion cross product a x b: (w_a x w_b, v_a x w_b + w_a x v_b)."""
    wa = spatial_top(a)
    wb = spatial_top(b)
    return _spatial_of(xsim.cross(wa, wb), xsim.cross(spatial_bottom(a), wb) + xsim.cross(wa, spatial_bottom(b)))


@func
def spatial_cross_dual(a, b):
    """The force cross product a x* b: (w_a x t_b + v_a x f_b, w_a x f_b)."""
    wa = spatial_top(a)
    return _spatial_of(xsim.cross(wa, spatial_top(b)) + xsim.cross(spatial_bottom(a), spatial_bottom(b)),
                       xsim.cross(wa, spatial_bottom(b)))


@func
def spatial_jacobian(S, joint_parents, joint_qd_start, joint_start: int, joint_count: int, J_start: int, J):
    """Writes the dense (6 joint_count) x (articulation dofs) Jacobian of an articulation into the row-major
    block of J at J_start: column c of joint block row i is the motion subspace S[c] of every ancestor of
    joint i (joint_parents walk to -1); Warp 0.x's builtin, now the `eval_rigid_jacobian` of featherstone."""
    dof_start = joint_qd_start[joint_start]
    dof_count = joint_qd_start[joint_start + joint_count] - dof_start
    for i in range(joint_count):
        j = joint_start + i
        while j != -1:
            for dof in range(joint_qd_start[j], joint_qd_start[j + 1]):
                for k in range(6):
                    J[J_start + (i * 6 + k) * dof_count + dof - dof_start] = S[dof][k]
            j = joint_parents[j]


@func
def spatial_mass(I_s, joint_start: int, joint_count: int, M_start: int, M):
    """Writes the block-diagonal (6 joint_count)^2 mass matrix of the spatial inertias I_s[joint_start:
    joint_start + joint_count] row-major into M at M_start (Warp 0.x's builtin, featherstone's `spatial_mass`)."""
    stride = joint_count * 6
    for b in range(joint_count):
        inertia = I_s[joint_start + b]
        for i in range(6):
            for j in range(6):
                M[M_start + (b * 6 + i) * stride + b * 6 + j] = inertia[i, j]


@func
def velocity_at_point(qd, r):
    """The linear velocity v + w x r of a point at offset ``r`` from the origin of the twist qd = (w, v)."""
    return spatial_bottom(qd) + xsim.cross(spatial_top(qd), r)


@func
def transform_twist(t, x):
    """A twist x = (w, v) moved by the transform t = (p, R): (R w, R v + p x R w)."""
    w = xsim.quat_rotate(xsim.transform_get_rotation(t), spatial_top(x))
    v = xsim.quat_rotate(xsim.transform_get_rotation(t), spatial_bottom(x))
    return _spatial_of(w, v + xsim.cross(xsim.transform_get_translation(t), w))


@func
def transform_wrench(t, x):
    """A wrench x = (tau, f) moved by the transform t = (p, R): (R tau + p x R f, R f)."""
    f = xsim.quat_rotate(xsim.transform_get_rotation(t), spatial_bottom(x))
    tau = xsim.quat_rotate(xsim.transform_get_rotation(t), spatial_top(x))
    return _spatial_of(tau + xsim.cross(xsim.transform_get_translation(t), f), f)
