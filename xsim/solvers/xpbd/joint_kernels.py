"""Joint kernels of the XPBD solver (Mueller et al. 2020, sec. 3.3 and 3.4): fixed, revolute,
prismatic, ball, distance and D6 joints, position limits and drives, as positional and angular corrections with
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

The attachment points' error is measured at the current poses and corrected along the arms of the
substep's start (its Jacobian there), as SHAKE/RATTLE apply a constraint's force along its gradient at
the step's start: a pendulum then keeps its energy, its error second order in the substep (measured,
``docs/rigid.md``). Arms at the predicted poses (plain PBD) damp a
swing at first order, by about ``Omega^2 h / 2``; a joint with an armature keeps them (``solve_joints``).

A revolute or prismatic joint's ``armature`` a (kg m^2 or kg) is inertia of its own coordinate q,
kinetic energy a dq/dt^2 / 2. Implicit Euler adds a (q - q~)^2 / (2 h^2) to what a substep minimizes,
q~ = q + h dq/dt at the substep start, as a body's inertia adds its distance to its predicted pose:
so the armature is a compliant constraint q = q~ of compliance h^2 / a, solved with its own
multiplier like a drive (a revolute's together with the attachment point, which would otherwise undo
most of its turn about the body's com). A velocity drive on such a joint joins it there, implicitly:
kd (q - q0 - h target_qd)^2 / (2 h) added, the two make one constraint of compliance h^2 / (a + kd h)
towards q0 + h (a dq/dt + kd h target_qd) / (a + kd h), and the velocity pass leaves the joint alone.
Like every constraint of the Jacobi pass, a chain of joints whose armatures outweigh their bodies
needs iterations to converge.

The revolute joint angle is the rotation of the child joint frame about the parent joint frame's
axis, measured between the frames' reference directions (perpendicular to the axis): 0 when the
joint frames coincide; likewise the prismatic offset is along the parent frame's axis. A ball
joint may limit its swing (the angle between the parent's and the child's axis, corrected about
their cross product) and its twist (the swing-twist decomposition's rotation about the child's
axis, corrected about the axes' bisector, which leaves the swing alone), as in sec. 3.4; these two
hard rows are solved together with the attachment point (``align_points``), so that holding the
point does not undo them. A distance joint is one hard row along the line between its two points,
active while their distance is outside [min, max] (the joint's limits). A D6 joint locks what its
axes leave: with one angular axis it is a hinge about it (the revolute rows), with two the parent's
first axis is kept perpendicular to the child's second, with three nothing; each angle (the Euler
angles of ``kinematics.d6_angles``) is limited by a hard row about the axis that turns it alone, and
the attachment point may move along the linear axes within their limits.
"""

import xsim
from xsim.collision.narrow_phase import pair_origin
from xsim.sim.generic import Float, Floats, Transforms, Vec6s, Vec8s
from xsim.sim.kinematics import d6_angles, d6_basis, hinge_angle
from xsim.sim.rigid import JOINT_BALL, JOINT_D6, JOINT_DISTANCE, JOINT_FREE, JOINT_PRISMATIC, JOINT_REVOLUTE

from .bundles import BodyArrays, JointArrays
from .rigid_kernels import (
    angular_inv_mass,
    apply_impulse,
    apply_positional,
    body_velocity,
    generalized_inv_mass,
    inv_inertia_mul,
    load_body,
    load_split_body,
    point_inv_mass,
    relative_point_velocity,
    rotate_by,
    world_inv_inertia,
)

# -------------------------------------------------------------------------------------------------
# generic helpers


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
def align_points(xa, qa, ima, iia, ra, xb, qb, imb, iib, rb, corr, n1, c1, n2, c2, alpha1):
    """Move the attachment point of body b (arm ``rb``) relative to that of body a (arm ``ra``)
    by ``corr`` (m) and, in the same solve, rotate b relative to a by ``c1`` about ``n1`` and ``c2``
    about ``n2`` (rad; orthogonal unit axes, or zero for no such row): the ball joint's limits, or
    (row 1 with compliance ``alpha1`` / h^2 > 0, its multiplier's increment returned) an armature.
    Solved at once because a rotation about a body's centre moves its attachment point, and a
    later point correction would undo most of it. Impulses: a point impulse p and angular
    impulses t along the axes N = [n1 n2] solve [[K, C^T N], [N^T C, N^T W N]] [p, t] = [corr, c]
    with K = Ka + Kb (3x3 point inverse masses), W = Ia^-1 + Ib^-1, C = Ib^-1 [rb]x + Ia^-1 [ra]x:
    t from the 2x2 Schur complement, then p. Without rows t = 0 and p = K^-1 corr (exact, smooth
    at zero error)."""
    ka = world_inv_inertia(qa, iia)
    kb = world_inv_inertia(qb, iib)
    k = point_inv_mass(ima, ka, ra) + point_inv_mass(imb, kb, rb)
    t1 = c1 * 0.0
    if xsim.determinant(k) > 0.0:
        kinv = xsim.inverse(k)
        ct = xsim.transpose(kb * xsim.skew(rb) + ka * xsim.skew(ra))
        g1 = ct * n1
        g2 = ct * n2
        w = ka + kb
        # a missing row (zero axis) gets 1 on its diagonal and nothing else: its impulse is 0
        s11 = xsim.dot(n1, w * n1) - xsim.dot(g1, kinv * g1) + 1.0 - xsim.dot(n1, n1) + alpha1
        s22 = xsim.dot(n2, w * n2) - xsim.dot(g2, kinv * g2) + 1.0 - xsim.dot(n2, n2)
        s12 = xsim.dot(n1, w * n2) - xsim.dot(g1, kinv * g2)
        e1 = c1 - xsim.dot(g1, kinv * corr)
        e2 = c2 - xsim.dot(g2, kinv * corr)
        det = s11 * s22 - s12 * s12
        torque = type(n1)()
        if det > 0.0:
            t1 = (e1 * s22 - e2 * s12) / det
            torque = n1 * t1 + n2 * ((e2 * s11 - e1 * s12) / det)
        p = kinv * (corr - ct * torque)
        xb = xb + p * imb
        qb = rotate_by(qb, kb * (xsim.cross(rb, p) + torque))
        xa = xa - p * ima
        qa = rotate_by(qa, ka * (-(xsim.cross(ra, p) + torque)))
    return xa, qa, xb, qb, t1


@xsim.func
def rotate_along(qa, iia, qb, iib, n, c, lam, alpha):
    """Scalar angular constraint about the unit axis ``n``: rotate b relative to a by ``c`` (rad)
    with compliance ``alpha`` (divided by h^2) and multiplier ``lam`` so far. Returns (qa, qb,
    multiplier increment)."""
    w = angular_inv_mass(qa, iia, n) + angular_inv_mass(qb, iib, n)
    dlam = type(c)(0.0)
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
    dlam = type(c)(0.0)
    if w + alpha > 0.0:
        dlam = (c - alpha * lam) / (w + alpha)
        xb, qb = apply_positional(xb, qb, imb, iib, rb, n * dlam)
        xa, qa = apply_positional(xa, qa, ima, iia, ra, n * (-dlam))
    return xa, qa, xb, qb, dlam


@xsim.func
def twist_angle(qjp, qjc, axis):
    """The twist (rad, in [-pi, pi]) of the child joint frame relative to the parent's about
    ``axis``: the swing-twist decomposition rel = swing * twist, twist about ``axis``. Undefined
    (0/0) at a swing of pi: callers skip it there."""
    rel = xsim.quat_inverse(qjp) * qjc
    s = rel[0] * axis[0] + rel[1] * axis[1] + rel[2] * axis[2]
    w = rel[3]
    if w < 0.0:  # q and -q are one rotation: take the one whose twist lies in [-pi, pi]
        s = -s
        w = -w
    return 2.0 * xsim.atan2(s, w)


@xsim.func
def limit_violation(value, lower, upper):
    """How far ``value`` must move to enter [lower, upper] (0 inside)."""
    out = type(value)(0.0)
    if value < lower:
        out = lower - value
    elif value > upper:
        out = upper - value
    return out


# -------------------------------------------------------------------------------------------------
# kernels (generic over the scalar type; the solver takes them from ``generic.specialized``)


@xsim.func
def add_pose_delta(delta: Vec8s, b: int, dx, dq):
    """Add body ``b``'s position change ``dx`` and rotation change ``dq`` to its accumulator row, counted once."""
    if b >= 0:
        xsim.atomic_add(delta, b, delta.dtype(dx[0], dx[1], dx[2], dq[0], dq[1], dq[2], dq[3], 1.0))


@xsim.func
def wrap_angle(x):
    """``x`` (rad) moved by a whole number of turns into [-pi, pi]."""
    return xsim.atan2(xsim.sin(x), xsim.cos(x))


@xsim.func
def prismatic_offset(xp, qp, xc, qc, jp, jc, axis):
    """(offset of the child's attachment point along the parent's axis (m), the axis in the world, the
    arms of the two attachment points) of a prismatic joint at these com poses."""
    r_p = xsim.quat_rotate(qp, jp.p)
    r_c = xsim.quat_rotate(qc, jc.p)
    a = xsim.quat_rotate(qp * jp.q, axis)
    return xsim.dot(xc + r_c - xp - r_p, a), a, r_p, r_c


@xsim.kernel
def predict_joint_coordinates(Xc: Transforms, X0: Transforms, qd: Vec6s, bodies: BodyArrays, joints: JointArrays,
                              target_qd: Floats, h: Float, q_pred: Floats):
    """Where the armature of each revolute or prismatic joint pulls its coordinate (rad or m):
    q + h (a dq/dt + kd h target_qd) / (a + kd h) from the substep start (module docstring)."""
    j = xsim.tid()
    kind = joints.type[j]
    out = h * 0.0
    if joints.armature[j] > 0.0 and (kind == JOINT_REVOLUTE or kind == JOINT_PRISMATIC):
        rate = h * 0.0
        bp = joints.parent[j]
        bc = joints.child[j]
        zero = type(joints.axis[j])()
        xp, qp, _, _ = load_body(bp, Xc, X0, zero, bodies.inv_mass, bodies.inv_inertia)
        xc, qc, _, _ = load_body(bc, Xc, X0, zero, bodies.inv_mass, bodies.inv_inertia)
        vp, wp = body_velocity(bp, qd, xp)
        vc, wc = body_velocity(bc, qd, xc)
        jp = joints.X_p[j]
        jc = joints.X_c[j]
        if kind == JOINT_REVOLUTE:
            theta, a = hinge_angle(qp * jp.q, qc * jc.q, joints.axis[j])
            out = theta
            rate = xsim.dot(wc - wp, a)
        else:
            s, a, r_p, r_c = prismatic_offset(xp, qp, xc, qc, jp, jc, joints.axis[j])
            d = xc + r_c - xp - r_p
            rate = xsim.dot(relative_point_velocity(vc, wc, r_c, vp, wp, r_p), a) + xsim.dot(d, xsim.cross(wp, a))
            out = s
        arm = joints.armature[j]
        kdh = joints.target_kd[j] * h
        out = out + h * (arm * rate + kdh * target_qd[j]) / (arm + kdh)
    q_pred[j] = out


@xsim.kernel
def solve_joints(Xc: Transforms, X0: Transforms, Xs: Transforms, bodies: BodyArrays, joints: JointArrays,
                 target_q: Floats, lam: Floats, q_pred: Floats, lam_arm: Floats, inv_h2: Float, split: Floats,
                 lam_out: Floats, lam_arm_out: Floats, delta: Vec8s):
    """Position pass of one joint (module docstring); ``Xs``: the bodies' poses at the substep's start
    (the attachment's arms); ``lam``: the drive multipliers so far, ``lam_arm`` the armatures'; ``q_pred``:
    the coordinates the armatures carry on to (``predict_joint_coordinates``); ``split``: each body's
    number of constraints in this pass (``split_mass``)."""
    j = xsim.tid()
    kind = joints.type[j]
    lam_j = lam[j]
    dlam = type(lam_j)(0.0)
    arm = joints.armature[j]
    lam_a = lam_arm[j]
    dlam_a = type(lam_j)(0.0)
    if kind != JOINT_FREE:
        bp = joints.parent[j]
        bc = joints.child[j]
        origin = pair_origin(bc, bp, X0)
        xp, qp, imp, iip = load_split_body(bp, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
        xc, qc, imc, iic = load_split_body(bc, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
        xp_in = xp
        qp_in = qp
        xc_in = xc
        qc_in = qc
        jp = joints.X_p[j]
        jc = joints.X_c[j]
        axis = joints.axis[j]
        lim = joints.limit[j]
        ke = joints.target_ke[j]
        alpha = type(ke)(0.0)
        if ke > 0.0:
            alpha = inv_h2 / ke
        # angular constraints (one inlined copy of each solve serves every joint type: smaller code)
        # a D6 joint: free linear and angular axes; with one angular axis it is a hinge about it
        nl = 0
        na = 0
        hinge = 0
        if kind == JOINT_REVOLUTE:
            hinge = 1
        if kind == JOINT_D6:
            nl = joints.d6_dim[2 * j]
            na = joints.d6_dim[2 * j + 1]
            if na == 1:
                hinge = 1
                axis = joints.d6_axis[6 * j + 3]
                lim = joints.d6_limit[6 * j + 3]
        if kind != JOINT_BALL and kind != JOINT_DISTANCE:
            qjp = qp * jp.q
            qjc = qc * jc.q
            dq = qjp * xsim.quat_inverse(qjc)
            corr = type(xp)(dq[0], dq[1], dq[2]) * 2.0  # fixed, prismatic: align the whole frame
            if dq[3] < 0.0:
                corr = -corr
            if hinge == 1:  # align the hinge axes only
                corr = xsim.cross(xsim.quat_rotate(qjc, axis), xsim.quat_rotate(qjp, axis))
            if na == 2:  # two axes: the parent's first stays perpendicular to the child's second
                a_p = xsim.quat_rotate(qjp, joints.d6_axis[6 * j + 3])
                b_c = xsim.quat_rotate(qjc, joints.d6_axis[6 * j + 4])
                n = xsim.cross(a_p, b_c)
                sn = xsim.length(n)
                corr = type(xp)()
                if sn > 0.0:
                    corr = n * (xsim.asin(xsim.clamp(xsim.dot(a_p, b_c), -1.0, 1.0)) / sn)
            if na == 3:
                corr = type(xp)()
            qp, qc = align_rotation(qp, iip, qc, iic, corr)
        if kind == JOINT_D6 and na >= 2:  # each angle's limit, about the axis that turns it alone
            e1, e2, e3, sign = d6_basis(joints.d6_axis, j, na)
            for i in range(3):
                if i < na:
                    qjp = qp * jp.q
                    qjc = qc * jc.q
                    t1, t2, t3 = d6_angles(xsim.quat_inverse(qjp) * qjc, e1, e2, e3)
                    ang = t1
                    w_axis = xsim.quat_rotate(qjp, e1)
                    if i == 1:
                        ang = t2
                        w_axis = xsim.quat_rotate(qjp * xsim.quat_from_axis_angle(e1, t1), e2)
                    if i == 2:
                        ang = t3 * sign
                        w_axis = xsim.quat_rotate(qjc, e3) * sign
                    lim_i = joints.d6_limit[6 * j + 3 + i]
                    over_i = limit_violation(ang, lim_i[0], lim_i[1])
                    if over_i != 0.0:
                        qp, qc, dl = rotate_along(qp, iip, qc, iic, w_axis, over_i, lam_j * 0.0, lam_j * 0.0)
        if hinge == 1:
            theta, a = hinge_angle(qp * jp.q, qc * jc.q, axis)
            over = limit_violation(theta, lim[0], lim[1])
            if over != 0.0 or ke > 0.0:
                # the limit when it is violated (hard), else the drive (compliant)
                c_ang = over
                lam0 = type(lam_j)(0.0)
                alpha_used = type(alpha)(0.0)
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
        over = type(lam_j)(0.0)
        n1 = type(d)()
        n2 = type(d)()
        c1 = over
        c2 = over
        alpha1 = over
        if kind == JOINT_REVOLUTE and arm > 0.0:
            # the armature's inertia, compliance h^2 / armature towards its predicted angle: solved with the
            # attachment point, which would otherwise undo most of each of its turns about the body's com
            theta, n1 = hinge_angle(qp * jp.q, qc * jc.q, axis)
            alpha1 = 1.0 / (arm + joints.target_kd[j] / xsim.sqrt(inv_h2))
            c1 = wrap_angle(q_pred[j] - theta) - alpha1 * lam_a
        if kind == JOINT_BALL:  # swing and twist limits, solved together with the attachment
            qjp = qp * jp.q
            qjc = qc * jc.q
            a_p = xsim.quat_rotate(qjp, axis)
            a_c = xsim.quat_rotate(qjc, axis)
            n = xsim.cross(a_p, a_c)
            sn = xsim.length(n)
            cone = joints.cone_limit[j]
            swing = xsim.atan2(sn, xsim.dot(a_p, a_c))
            if swing > cone and sn > 0.0:  # a relative rotation about a_p x a_c turns the swing at rate 1
                n1 = n / sn
                c1 = cone - swing
            # a relative rotation e about the axes' bisector leaves the swing alone (to first
            # order) and turns the twist by e / cos(swing / 2) (Mueller et al. 2020, 3.4.1)
            half = (a_p + a_c) * 0.5
            cos_half = xsim.length(half)
            if cos_half > 1.0e-6:
                twist_over = limit_violation(twist_angle(qjp, qjc, axis), lim[0], lim[1])
                if twist_over != 0.0:
                    n2 = half / cos_half
                    c2 = twist_over * cos_half
        if kind == JOINT_PRISMATIC:  # free along the axis, inside the limits
            a = xsim.quat_rotate(qp * jp.q, axis)
            s = xsim.dot(d, a)
            over = limit_violation(s, lim[0], lim[1])
            corr = a * (s + over) - d
        if kind == JOINT_D6:  # free along its linear axes, inside their limits
            qjp = qp * jp.q
            for i in range(3):
                if i < nl:
                    a = xsim.quat_rotate(qjp, joints.d6_axis[6 * j + i])
                    s_i = xsim.dot(d, a)
                    lim_i = joints.d6_limit[6 * j + i]
                    corr = corr + a * (s_i + limit_violation(s_i, lim_i[0], lim_i[1]))
        if kind == JOINT_DISTANCE:  # one row along the line between the points, where a limit is passed
            length = xsim.length(d)
            over = limit_violation(length, lim[0], lim[1])
            if over != 0.0 and length > 0.0:
                xp, qp, xc, qc, dl = move_along(xp, qp, imp, iip, r_p, xc, qc, imc, iic, r_c, d / length, over,
                                                lam_j * 0.0, lam_j * 0.0)
        else:
            # the error at these poses, corrected along the arms at the substep's start (module docstring), but
            # with an armature row in the same solve: there the arms at these poses (start arms let the
            # imported ant's legs give way, its torso down on the floor: not understood yet)
            arm_p = r_p
            arm_c = r_c
            if arm == 0.0:
                q_start = qp
                if bp >= 0:
                    q_start = Xs[bp].q
                arm_p = xsim.quat_rotate(q_start, jp.p)
                arm_c = xsim.quat_rotate(Xs[bc].q, jc.p)
            xp, qp, xc, qc, t1 = align_points(xp, qp, imp, iip, arm_p, xc, qc, imc, iic, arm_c, corr, n1, c1, n2,
                                              c2, alpha1)
            if alpha1 > 0.0:
                dlam_a = t1
        if kind == JOINT_PRISMATIC and ke > 0.0 and over == 0.0:
            s, a, r_p, r_c = prismatic_offset(xp, qp, xc, qc, jp, jc, axis)
            xp, qp, xc, qc, dlam = move_along(xp, qp, imp, iip, r_p, xc, qc, imc, iic, r_c, a,
                                              target_q[j] - s, lam_j, alpha)
        if kind == JOINT_PRISMATIC and arm > 0.0:
            s, a, r_p, r_c = prismatic_offset(xp, qp, xc, qc, jp, jc, axis)
            xp, qp, xc, qc, dlam_a = move_along(xp, qp, imp, iip, r_p, xc, qc, imc, iic, r_c, a, q_pred[j] - s,
                                                lam_a, 1.0 / (arm + joints.target_kd[j] / xsim.sqrt(inv_h2)))
        add_pose_delta(delta, bp, xp - xp_in, qp - qp_in)
        add_pose_delta(delta, bc, xc - xc_in, qc - qc_in)
    lam_out[j] = lam_j + dlam
    lam_arm_out[j] = lam_a + dlam_a

@xsim.kernel
def solve_joint_velocities(Xc: Transforms, X0: Transforms, qd: Vec6s, bodies: BodyArrays, joints: JointArrays,
                           target_qd: Floats, h: Float, split: Floats, delta: Vec8s):
    """Velocity drives: implicit damping of the joint's relative speed towards ``target_qd``,
    an impulse kd h (target - speed) / (1 + kd h w); changes go to ``delta``; ``split``: each
    body's number of constraints in the velocity pass (``split_mass``)."""
    j = xsim.tid()
    kd = joints.target_kd[j]
    kind = joints.type[j]
    if kd > 0.0 and joints.armature[j] == 0.0 and (kind == JOINT_REVOLUTE or kind == JOINT_PRISMATIC):
        bp = joints.parent[j]
        bc = joints.child[j]
        origin = pair_origin(bc, bp, X0)
        xp, qp, imp, iip = load_split_body(bp, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
        xc, qc, imc, iic = load_split_body(bc, Xc, X0, origin, bodies.inv_mass, bodies.inv_inertia, split)
        vp, wp = body_velocity(bp, qd, xp)
        vc, wc = body_velocity(bc, qd, xc)
        vp_in = vp
        wp_in = wp
        vc_in = vc
        wc_in = wc
        jp = joints.X_p[j]
        a = xsim.quat_rotate(qp * jp.q, joints.axis[j])
        if kind == JOINT_REVOLUTE:
            w = angular_inv_mass(qp, iip, a) + angular_inv_mass(qc, iic, a)
            speed = xsim.dot(wc - wp, a)
            impulse = kd * h * (target_qd[j] - speed) / (1.0 + kd * h * w)
            wc = wc + inv_inertia_mul(qc, iic, a * impulse)
            wp = wp - inv_inertia_mul(qp, iip, a * impulse)
        else:
            r_p = xsim.quat_rotate(qp, jp.p)
            r_c = xsim.quat_rotate(qc, joints.X_c[j].p)
            w = generalized_inv_mass(qp, imp, iip, r_p, a) + generalized_inv_mass(qc, imc, iic, r_c, a)
            speed = xsim.dot(relative_point_velocity(vc, wc, r_c, vp, wp, r_p), a)
            impulse = kd * h * (target_qd[j] - speed) / (1.0 + kd * h * w)
            vc, wc = apply_impulse(vc, wc, qc, imc, iic, r_c, a * impulse)
            vp, wp = apply_impulse(vp, wp, qp, imp, iip, r_p, a * (-impulse))
        if bp >= 0:
            dv = vp - vp_in
            dw = wp - wp_in
            xsim.atomic_add(delta, bp, delta.dtype(dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0, 1.0))
        dv = vc - vc_in
        dw = wc - wc_in
        xsim.atomic_add(delta, bc, delta.dtype(dv[0], dv[1], dv[2], dw[0], dw[1], dw[2], 0.0, 1.0))
