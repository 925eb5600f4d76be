"""Joint kernels of the XPBD solver (Mueller et al. 2020, sec. 3.3 and 3.4): fixed, revolute,
prismatic and ball joints, position limits and drives, as positional and angular corrections with
generalized inverse masses.

Each joint is one thread that solves its own constraints one after the other on local copies of
its two bodies' poses (angular alignment, limits, drive, then the attachment points), and adds its
total correction of each body to the solver's per-body accumulator (see ``rigid_solver.py``).
Hard constraints (alignment, attachment, limits) have zero compliance; alignment of rotations
and of attachment points is an exact 3x3 solve with the bodies' inverse mass/inertia matrices
(smooth where the error is zero, so its gradient is exact there too); a drive towards
``target_q`` has compliance 1 / ``target_ke`` and keeps its Lagrange multiplier across the
iterations of a substep. Velocity drives (``target_kd`` towards ``target_qd``) act in the
velocity pass as implicit damping.

The revolute joint angle is the rotation of the child joint frame about the parent joint frame's
axis, measured between the frames' reference directions (perpendicular to the axis): 0 when the
joint frames coincide; likewise the prismatic offset is along the parent frame's axis.
"""

import functools
from types import SimpleNamespace

import xsim
from xsim import types as T
from xsim.sim.rigid import JOINT_BALL, JOINT_FREE, JOINT_PRISMATIC, JOINT_REVOLUTE

from .rigid_kernels import (
    angular_inv_mass,
    apply_impulse,
    apply_positional,
    body_loader,
    generalized_inv_mass,
    inv_inertia_mul,
    rotate_by,
    split_qd,
)

# -------------------------------------------------------------------------------------------------
# generic helpers


@xsim.func
def world_inv_inertia(q, inv_inertia):
    """R I^-1 R^T: the world-frame inverse inertia of a body with rotation ``q``."""
    r = xsim.quat_to_matrix(q)
    return r * inv_inertia * xsim.transpose(r)


@xsim.func
def point_inv_mass(q, inv_mass, inv_inertia, r):
    """K = E/m - [r]x I^-1 [r]x: the velocity change at the arm ``r`` per unit impulse (3x3)."""
    d = r - r
    d[0] = inv_mass
    d[1] = inv_mass
    d[2] = inv_mass
    s = xsim.skew(r)
    return xsim.diag(d) - s * world_inv_inertia(q, inv_inertia) * s


@xsim.func
def align_rotation(qa, iia, qb, iib, corr):
    """Rotate body b relative to body a by the rotation vector ``corr`` (rad) exactly: the
    angular impulse solves (Ia^-1 + Ib^-1) p = corr. A 3x3 solve rather than a correction along
    corr / |corr|, so it stays smooth (and its gradient exact) where the error is zero."""
    ka = world_inv_inertia(qa, iia)
    kb = world_inv_inertia(qb, iib)
    k = ka + kb
    if xsim.determinant(k) > 0.0:
        p = xsim.inverse(k) * corr
        qb = rotate_by(qb, kb * p)
        qa = rotate_by(qa, ka * (-p))
    return qa, qb


@xsim.func
def align_points(xa, qa, ima, iia, ra, xb, qb, imb, iib, rb, corr):
    """Move the attachment point of body b (arm ``rb``) relative to that of body a (arm ``ra``)
    by ``corr`` (m) exactly: the impulse solves (Ka + Kb) p = corr (3x3, smooth at zero error)."""
    k = point_inv_mass(qa, ima, iia, ra) + point_inv_mass(qb, imb, iib, rb)
    if xsim.determinant(k) > 0.0:
        p = xsim.inverse(k) * corr
        xb, qb = apply_positional(xb, qb, imb, iib, rb, p)
        xa, qa = apply_positional(xa, qa, ima, iia, ra, -p)
    return xa, qa, xb, qb


@xsim.func
def rotate_along(qa, iia, qb, iib, n, c, lam, alpha):
    """Scalar angular constraint about the unit axis ``n``: rotate b relative to a by ``c`` (rad)
    with compliance ``alpha`` (divided by h^2) and multiplier ``lam`` so far. Returns (qa, qb,
    multiplier increment)."""
    w = angular_inv_mass(qa, iia, n) + angular_inv_mass(qb, iib, n)
    dlam = c - c
    if w + alpha > 0.0:
        dlam = (c - alpha * lam) / (w + alpha)
        qb = rotate_by(qb, inv_inertia_mul(qb, iib, n * dlam))
        qa = rotate_by(qa, inv_inertia_mul(qa, iia, n * (-dlam)))
    return qa, qb, dlam


@xsim.func
def move_along(xa, qa, ima, iia, ra, xb, qb, imb, iib, rb, n, c, lam, alpha):
    """Scalar positional constraint along the unit vector ``n``: move b's attachment point
    relative to a's by ``c`` (m), compliance ``alpha`` / h^2. Returns (xa, qa, xb, qb, dlam)."""
    w = generalized_inv_mass(qa, ima, iia, ra, n) + generalized_inv_mass(qb, imb, iib, rb, n)
    dlam = c - c
    if w + alpha > 0.0:
        dlam = (c - alpha * lam) / (w + alpha)
        xb, qb = apply_positional(xb, qb, imb, iib, rb, n * dlam)
        xa, qa = apply_positional(xa, qa, ima, iia, ra, n * (-dlam))
    return xa, qa, xb, qb, dlam


@xsim.func
def reference_direction(axis):
    """A unit vector perpendicular to ``axis`` (joint frame), the zero of the joint angle."""
    e = axis - axis
    if xsim.abs(axis[0]) < 0.9:
        e[0] = 1.0
    else:
        e[1] = 1.0
    return xsim.normalize(xsim.cross(axis, e))


@xsim.func
def hinge_angle(qjp, qjc, axis):
    """The signed angle (rad) of the child joint frame about the parent frame's ``axis``."""
    ref = reference_direction(axis)
    a = xsim.quat_rotate(qjp, axis)
    bp = xsim.quat_rotate(qjp, ref)
    bc = xsim.quat_rotate(qjc, ref)
    return xsim.atan2(xsim.dot(xsim.cross(bp, bc), a), xsim.dot(bp, bc)), a


@xsim.func
def limit_violation(value, lower, upper):
    """How far ``value`` must move to enter [lower, upper] (0 inside)."""
    out = value - value
    if value < lower:
        out = lower - value
    elif value > upper:
        out = upper - value
    return out


# -------------------------------------------------------------------------------------------------
# kernels


@functools.cache
def joint_kernels(scalar=T.float32) -> SimpleNamespace:
    """The joint kernels for ``scalar``, compiled together."""
    scalar = T.resolve(scalar)
    v2, v3, qt, tf = T.vector(2, scalar), T.vector(3, scalar), T.quaternion(scalar), T.transformation(scalar)
    v6, v8, m33 = T.vector(6, scalar), T.vector(8, scalar), T.matrix((3, 3), scalar)
    Scalars, Vec2s, Vec3s, Tfs = (xsim.array(dtype=scalar), xsim.array(dtype=v2), xsim.array(dtype=v3),
                                  xsim.array(dtype=tf))
    Vec6s, Vec8s, Mats, Ints = (xsim.array(dtype=v6), xsim.array(dtype=v8), xsim.array(dtype=m33),
                                xsim.array(dtype=int))
    module = f"xsim.solvers.xpbd.joint_kernels_{T.type_name(scalar)}"

    load_joint_body = body_loader(scalar)

    @xsim.func
    def add_pose_delta(delta: Vec8s, b: int, dx, dq):
        if b >= 0:
            xsim.atomic_add(delta, b, v8(dx[0], dx[1], dx[2], dq[0], dq[1], dq[2], dq[3], 1.0))

    @xsim.kernel(module=module)
    def solve_joints(Xc: Tfs, inv_mass: Scalars, inv_inertia: Mats, joint_type: Ints, joint_parent: Ints,
                     joint_child: Ints, joint_X_p: Tfs, joint_X_c: Tfs, joint_axis: Vec3s, joint_limit: Vec2s,
                     target_q: Scalars, target_ke: Scalars, lam: Scalars, inv_h2: scalar,
                     lam_out: Scalars, delta: Vec8s):
        """Position pass of one joint (module docstring); ``lam``: the drive multipliers so far."""
        j = xsim.tid()
        kind = joint_type[j]
        lam_j = lam[j]
        dlam = lam_j - lam_j
        if kind != JOINT_FREE:
            bp = joint_parent[j]
            bc = joint_child[j]
            xp, qp, imp, iip = load_joint_body(bp, Xc, inv_mass, inv_inertia)
            xc, qc, imc, iic = load_joint_body(bc, Xc, inv_mass, inv_inertia)
            xp_in = xp
            qp_in = qp
            xc_in = xc
            qc_in = qc
            jp = joint_X_p[j]
            jc = joint_X_c[j]
            axis = joint_axis[j]
            lim = joint_limit[j]
            ke = target_ke[j]
            alpha = ke - ke
            if ke > 0.0:
                alpha = inv_h2 / ke
            # angular constraints (one inlined copy of each solve serves every joint type: smaller code)
            if kind != JOINT_BALL:
                qjp = qp * jp.q
                qjc = qc * jc.q
                dq = qjp * xsim.quat_inverse(qjc)
                corr = v3(dq[0], dq[1], dq[2]) * 2.0  # fixed, prismatic: align the whole frame
                if dq[3] < 0.0:
                    corr = -corr
                if kind == JOINT_REVOLUTE:  # align the hinge axes only
                    corr = xsim.cross(xsim.quat_rotate(qjc, axis), xsim.quat_rotate(qjp, axis))
                qp, qc = align_rotation(qp, iip, qc, iic, corr)
            if kind == JOINT_REVOLUTE:
                theta, a = hinge_angle(qp * jp.q, qc * jc.q, axis)
                over = limit_violation(theta, lim[0], lim[1])
                if over != 0.0 or ke > 0.0:
                    # the limit when it is violated (hard), else the drive (compliant)
                    c_ang = over
                    lam0 = lam_j - lam_j
                    alpha_used = alpha - alpha
                    if over == 0.0:
                        c_ang = target_q[j] - theta
                        lam0 = lam_j
                        alpha_used = alpha
                    qp, qc, dl = rotate_along(qp, iip, qc, iic, a, c_ang, lam0, alpha_used)
                    if over == 0.0:
                        dlam = dl
            # positional constraints between the attachment points
            r_p = xsim.quat_rotate(qp, jp.p)
            r_c = xsim.quat_rotate(qc, jc.p)
            d = xc + r_c - xp - r_p
            corr = -d
            over = d[0] - d[0]
            if kind == JOINT_PRISMATIC:  # free along the axis, inside the limits
                a = xsim.quat_rotate(qp * jp.q, axis)
                s = xsim.dot(d, a)
                over = limit_violation(s, lim[0], lim[1])
                corr = a * (s + over) - d
            xp, qp, xc, qc = align_points(xp, qp, imp, iip, r_p, xc, qc, imc, iic, r_c, corr)
            if kind == JOINT_PRISMATIC and ke > 0.0 and over == 0.0:
                r_p = xsim.quat_rotate(qp, jp.p)
                r_c = xsim.quat_rotate(qc, jc.p)
                a = xsim.quat_rotate(qp * jp.q, axis)
                s = xsim.dot(xc + r_c - xp - r_p, a)
                xp, qp, xc, qc, dlam = move_along(xp, qp, imp, iip, r_p, xc, qc, imc, iic, r_c, a,
                                                  target_q[j] - s, lam_j, alpha)
            add_pose_delta(delta, bp, xp - xp_in, qp - qp_in)
            add_pose_delta(delta, bc, xc - xc_in, qc - qc_in)
        lam_out[j] = lam_j + dlam

    @xsim.kernel(module=module)
    def solve_joint_velocities(Xc: Tfs, qd: Vec6s, inv_mass: Scalars, inv_inertia: Mats, joint_type: Ints,
                               joint_parent: Ints, joint_child: Ints, joint_X_p: Tfs, joint_X_c: Tfs,
                               joint_axis: Vec3s, target_qd: Scalars, target_kd: Scalars, h: scalar,
                               delta: Vec8s):
        """Velocity drives: implicit damping of the joint's relative speed towards ``target_qd``,
        an impulse kd h (target - speed) / (1 + kd h w); changes go to ``delta``."""
        j = xsim.tid()
        kd = target_kd[j]
        kind = joint_type[j]
        if kd > 0.0 and (kind == JOINT_REVOLUTE or kind == JOINT_PRISMATIC):
            bp = joint_parent[j]
            bc = joint_child[j]
            xp, qp, imp, iip = load_joint_body(bp, Xc, inv_mass, inv_inertia)
            xc, qc, imc, iic = load_joint_body(bc, Xc, inv_mass, inv_inertia)
            vp = v3()
            wp = v3()
            vc = v3()
            wc = v3()
            if bp >= 0:
                vp, wp = split_qd(qd[bp], xp)
            vc, wc = split_qd(qd[bc], xc)
            vp_in = vp
            wp_in = wp
            vc_in = vc
            wc_in = wc
            jp = joint_X_p[j]
            a = xsim.quat_rotate(qp * jp.q, joint_axis[j])
            if kind == JOINT_REVOLUTE:
                w = angular_inv_mass(qp, iip, a) + angular_inv_mass(qc, iic, a)
                speed = xsim.dot(wc - wp, a)
                impulse = kd * h * (target_qd[j] - speed) / (1.0 + kd * h * w)
                wc = wc + inv_inertia_mul(qc, iic, a * impulse)
                wp = wp - inv_inertia_mul(qp, iip, a * impulse)
            else:
                r_p = xsim.quat_rotate(qp, jp.p)
                r_c = xsim.quat_rotate(qc, joint_X_c[j].p)
                w = generalized_inv_mass(qp, imp, iip, r_p, a) + generalized_inv_mass(qc, imc, iic, r_c, a)
                speed = xsim.dot(vc + xsim.cross(wc, r_c) - vp - xsim.cross(wp, r_p), a)
                impulse = kd * h * (target_qd[j] - speed) / (1.0 + kd * h * w)
                vc, wc = apply_impulse(vc, wc, qc, imc, iic, r_c, a * impulse)
                vp, wp = apply_impulse(vp, wp, qp, imp, iip, r_p, a * (-impulse))
            if bp >= 0:
                dv = vp - vp_in
                dw = wp - wp_in
                xsim.atomic_add(delta, bp, v8(dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0, 1.0))
            dv = vc - vc_in
            dw = wc - wc_in
            xsim.atomic_add(delta, bc, v8(dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0, 1.0))

    @xsim.kernel(module=module, enable_backward=False)
    def eval_joint_coordinates(Xc: Tfs, joint_type: Ints, joint_parent: Ints, joint_child: Ints,
                               joint_X_p: Tfs, joint_X_c: Tfs, joint_axis: Vec3s, joint_q: Scalars):
        """``joint_q`` of revolute (angle, rad) and prismatic (offset, m) joints; 0 for the others."""
        j = xsim.tid()
        kind = joint_type[j]
        bp = joint_parent[j]
        xp = v3()
        qp = qt(0.0, 0.0, 0.0, 1.0)
        if bp >= 0:
            xp = Xc[bp].p
            qp = Xc[bp].q
        pose = Xc[joint_child[j]]
        jp = joint_X_p[j]
        jc = joint_X_c[j]
        out = scalar(0.0)
        if kind == JOINT_REVOLUTE:
            out, _axis = hinge_angle(qp * jp.q, pose.q * jc.q, joint_axis[j])
        elif kind == JOINT_PRISMATIC:
            d = pose.p + xsim.quat_rotate(pose.q, jc.p) - xp - xsim.quat_rotate(qp, jp.p)
            out = xsim.dot(d, xsim.quat_rotate(qp * jp.q, joint_axis[j]))
        joint_q[j] = out

    return SimpleNamespace(solve_joints=solve_joints, solve_joint_velocities=solve_joint_velocities,
                           eval_joint_coordinates=eval_joint_coordinates, module=module)
