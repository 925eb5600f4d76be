"""Rigid-body kernels of the XPBD solver: integration, applying accumulated corrections, and
deriving velocities from pose changes (Mueller et al. 2020, "Detailed Rigid Body Simulation with
Extended Position Based Dynamics", algorithm 2), plus the generic ``@xsim.func`` helpers that the
contact and joint kernels share.

Inside a step the solver works with each body's *centre-of-mass frame*, because bodies rotate about
their com, held as the com frame at the step start (``X0``, world) and the pose ``Xc``: the com's
displacement since then and the body's rotation; ``body_q`` (the body frame) is converted at the start
and end of a step. Every constraint measures its geometry relative to a point near it (``pair_origin``:
one of its bodies' step-start com), never as small differences of large world coordinates: in float32
18 m from the origin a position has steps of 1.9 um and a substep of 1/1800 s moves a resting box by
about that much under gravity: contact depths and friction displacements taken from world coordinates
would be mostly rounding, and Coulomb's law would fail (a box sticking on a ramp steeper than its
friction angle, creeping on a shallower one). The displacements within a step keep their digits;
positions are rounded to world coordinates once a step, in ``body_frame_at_end``.

Corrections are accumulated per body in a ``vector(8)`` row (dx: 0..2, dq: 3..6, count: 7) with
``atomic_add``; see ``rigid_solver.py`` for why (Jacobi with averaging).
"""

import xsim
from xsim.collision.narrow_phase import body_frame
from xsim.sim.generic import Float, Floats, Mat33s, Transforms, Vec3, Vec3s, Vec6s, Vec8s

from .bundles import BodyArrays

# -------------------------------------------------------------------------------------------------
# generic helpers (inlined with their arguments' types, so one definition serves float32/float64)


@xsim.func
def load_body(b: int, Xc: Transforms, X0: Transforms, origin, inv_mass: Floats, inv_inertia: Mat33s):
    """(com position relative to ``origin``, rotation, inverse mass, inverse inertia) of body ``b``
    (``xsim.collision.narrow_phase.body_frame`` for the pose; the world, -1, is a static body at the
    world's origin). One definition for every kernel family (contacts, joints)."""
    x, q = body_frame(b, Xc, X0, origin)
    im = inv_mass.dtype(0.0)
    ii = inv_inertia.dtype()
    if b >= 0:
        im = inv_mass[b]
        ii = inv_inertia[b]
    return x, q, im, ii


@xsim.func
def world_pose(b: int, Xc: Transforms, X0: Transforms):
    """Body ``b``'s com frame in world coordinates: its step-start position ``X0[b].p`` plus its
    displacement ``Xc[b].p``, with the rotation ``Xc[b].q``."""
    pose = Xc[b]
    return xsim.transformation(X0[b].p + pose.p, pose.q)


@xsim.func
def split_mass(b: int, inv_mass, inv_inertia, split):
    """Mass splitting (Tonge et al. 2012): body ``b``'s inverse mass and inertia times its number of
    constraints in this pass (``split[b]``, at least 1), as each constraint sees its share of the
    body. Summing the constraints' corrections and dividing by that number (``apply_body_deltas``)
    then applies every constraint's impulse to the whole body: momentum is conserved between two
    bodies with different numbers of constraints (without it a double pendulum gains energy)."""
    s = type(inv_mass)(1.0)
    if b >= 0:
        s = xsim.max(split[b], s)
    return inv_mass * s, inv_inertia * s


@xsim.func
def load_split_body(b: int, Xc: Transforms, X0: Transforms, origin, inv_mass: Floats, inv_inertia: Mat33s,
                    split: Floats):
    """``load_body`` with the inverse mass and inertia split by ``split`` (``split_mass``), as every
    constraint solve sees its bodies."""
    x, q, im, ii = load_body(b, Xc, X0, origin, inv_mass, inv_inertia)
    im, ii = split_mass(b, im, ii, split)
    return x, q, im, ii


@xsim.func
def relative_point_velocity(va, wa, ra, vb, wb, rb):
    """Velocity of body a's point at arm ``ra`` relative to body b's point at arm ``rb`` (bodies
    moving at (``va``, ``wa``) and (``vb``, ``wb``))."""
    return va + xsim.cross(wa, ra) - vb - xsim.cross(wb, rb)


@xsim.func
def quat_from_vector(q_like, v):
    """The pure quaternion (v, 0), of the type of ``q_like``."""
    return type(q_like)(v[0], v[1], v[2], 0.0)


@xsim.func
def rotate_by(q, omega):
    """Rotate the orientation ``q`` by the small rotation vector ``omega`` (rad): q + (omega, 0) q / 2,
    normalized (Mueller et al. 2020, eq. 8 and 9)."""
    return xsim.normalize(q + quat_from_vector(q, omega) * q * 0.5)


@xsim.func
def inv_inertia_mul(q, inv_inertia, v):
    """World inverse inertia times ``v``: R I^-1 R^T v, with ``inv_inertia`` in the body frame."""
    return xsim.quat_rotate(q, inv_inertia * xsim.quat_rotate_inv(q, v))


@xsim.func
def generalized_inv_mass(q, inv_mass, inv_inertia, r, n):
    """w = 1/m + (r x n)^T I^-1 (r x n): the inverse mass a body opposes to a correction along the unit
    vector ``n`` at the arm ``r`` from its com (Mueller et al. 2020, eq. 2)."""
    rn = xsim.cross(r, n)
    return inv_mass + xsim.dot(rn, inv_inertia_mul(q, inv_inertia, rn))


@xsim.func
def world_inv_inertia(q, inv_inertia):
    """R I^-1 R^T: the inverse inertia ``inv_inertia`` (body frame) in world axes at the rotation ``q``; where a
    kernel uses one body's rotation several times (a shape pair's contacts), one product instead of two
    rotations per use (``inv_inertia_mul``)."""
    r = xsim.quat_to_matrix(q)
    return r * inv_inertia * xsim.transpose(r)


@xsim.func
def inv_mass_along(inv_mass, world_inv_inertia, r, n):
    """``generalized_inv_mass`` with the inverse inertia in world axes (``world_inv_inertia``): (w, the
    rotation vector I^-1 (r x n) that a unit impulse along ``n`` at ``r`` gives the body, which
    ``apply_positional`` and ``apply_impulse`` would recompute)."""
    u = world_inv_inertia * xsim.cross(r, n)
    return inv_mass + xsim.dot(xsim.cross(r, n), u), u


@xsim.func
def point_inv_mass(inv_mass, world_inv_inertia, r):
    """K = E/m - [r]x I^-1 [r]x: the displacement (or velocity) change of a body's point at the arm ``r`` per
    unit positional impulse (kg m) there (3x3; the inverse inertia in world axes, ``world_inv_inertia``)."""
    d = type(r)(inv_mass, inv_mass, inv_mass)
    s = xsim.skew(r)
    return xsim.diag(d) - s * world_inv_inertia * s


@xsim.func
def body_inv_mass_along(inv_mass, inv_inertia, q, arm, n):
    """``inv_mass_along`` at a rotation ``q`` used once, from the arm in the body's frame (``arm``, m) and
    ``inv_inertia`` in it: (w, I^-1 (r x n) in world axes), with two rotations instead of four."""
    c = xsim.cross(arm, xsim.quat_rotate_inv(q, n))
    u = inv_inertia * c
    return inv_mass + xsim.dot(c, u), xsim.quat_rotate(q, u)


@xsim.func
def angular_inv_mass(q, inv_inertia, n):
    """w = n^T I^-1 n for a rotation about the unit axis ``n`` (eq. 5)."""
    return xsim.dot(n, inv_inertia_mul(q, inv_inertia, n))


@xsim.func
def apply_positional(x, q, inv_mass, inv_inertia, r, p):
    """Apply the positional impulse ``p`` (kg m) at arm ``r``: x += p/m, q += (I^-1 (r x p), 0) q / 2."""
    return x + p * inv_mass, rotate_by(q, inv_inertia_mul(q, inv_inertia, xsim.cross(r, p)))


@xsim.func
def apply_impulse(v, w, q, inv_mass, inv_inertia, r, p):
    """Apply the velocity impulse ``p`` (kg m/s) at arm ``r``: v += p/m, w += I^-1 (r x p)."""
    return v + p * inv_mass, w + inv_inertia_mul(q, inv_inertia, xsim.cross(r, p))


@xsim.func
def push_along(x, q, inv_mass, d, u, s):
    """``apply_positional`` of the impulse ``d * s`` (kg m) where ``u`` is the rotation vector a unit impulse
    along ``d`` gives the body (``inv_mass_along``, ``body_inv_mass_along``): x += d s / m, q turned by u s."""
    return x + d * s * inv_mass, rotate_by(q, u * s)


@xsim.func
def impulse_along(v, w, inv_mass, d, u, s):
    """``apply_impulse`` of the impulse ``d * s`` (kg m/s), ``u`` as in ``push_along``: v += d s / m, w += u s."""
    return v + d * s * inv_mass, w + u * s


@xsim.func
def split_qd(qd, v_like):
    """(linear, angular) velocities from a spatial vector (linear first, Newton's convention)."""
    return type(v_like)(qd[0], qd[1], qd[2]), type(v_like)(qd[3], qd[4], qd[5])


@xsim.func
def body_velocity(b: int, qd, x_like):
    """(linear, angular) velocity of body ``b`` from the spatial velocities ``qd``; zero for the
    world (-1). ``x_like``: a vec3 of the wanted type."""
    v = type(x_like)()
    w = type(x_like)()
    if b >= 0:
        v, w = split_qd(qd[b], x_like)
    return v, w


# -------------------------------------------------------------------------------------------------
# kernels (generic over the scalar type; the solver takes them from ``generic.specialized``)


@xsim.func
def predicted_body(pose, qd_i, inv_mass, inertia, inv_inertia, gravity, h):
    """Explicit substep prediction (Mueller et al. 2020, alg. 2) of a body at ``pose`` moving at ``qd_i``:
    v += g h, x += v h, w += h I^-1 (-w x I w) (gyroscopic term, body frame, at the midpoint), q += h (w, 0)
    q / 2; a kinematic body (``inv_mass`` 0) turns by exactly |w| h. Returns the predicted pose and the
    predicted velocities (the pre-solve velocities of restitution)."""
    q = pose.q
    x = pose.p
    v, w = split_qd(qd_i, x)
    if inv_mass > 0.0:
        v = v + gravity * h
        # Euler's equations I dw/dt = -w x I w (body frame) by the implicit midpoint rule, which keeps the
        # energy and |L| of a free tumble (both quadratic in w); the fixed point contracts by about h |w|
        wb = xsim.quat_rotate_inv(q, w)
        wm = wb
        for _ in range(4):
            wm = wb - inv_inertia * xsim.cross(wm, inertia * wm) * (h * 0.5)
        w = w + xsim.quat_rotate(q, (wm - wb) * 2.0)  # only the change goes back through q (rounding)
        q = rotate_by(q, w * h)
    else:  # kinematic: exactly |w| h about w, as prescribed (rotate_by turns by 2 atan(|w| h / 2))
        speed = xsim.length(w)
        if speed > 0.0:
            q = xsim.normalize(xsim.quat_from_axis_angle(w / speed, speed * h) * q)
    x = x + v * h
    return xsim.transformation(x, q), type(qd_i)(v[0], v[1], v[2], w[0], w[1], w[2])


@xsim.func
def step_start_pose(x0, pose, com, residual):
    """A body's first pose of a step: the com's displacement from its step-start position ``x0`` (rounded
    world coordinates, ``body_to_com_frame`` of the body frame ``pose``), that is what the stored position
    lost to rounding (``residual``, ``body_frame_at_end``) and what computing ``x0`` did, and the rotation."""
    d = residual + ((pose.p - x0) + xsim.quat_rotate(pose.q, com))
    return xsim.transformation(d, pose.q)


@xsim.func
def body_frame_at_end(pose, x0, com):
    """A body's frame at the step's end from its com displacement ``pose`` since its step-start com
    position ``x0``: p = x0 + dx - R com, rounded to the array's precision, and what that rounding lost
    (m: computed exactly, since x0 - p is a difference of nearby numbers), which the next step starts from
    (``step_start_pose``). Compensated so, a float32 body 1 km from the origin moving at 1 m/s travels v t
    to float32 rounding of its path; rounded every step, it would lose up to 0.2% of each step's motion
    (at 1 ms steps) for good."""
    arm = xsim.quat_rotate(pose.q, com)
    p = x0 + (pose.p - arm)
    return xsim.transformation(p, pose.q), ((x0 - p) + pose.p) - arm


@xsim.func
def corrected_body(pose, d, e, coupled: int, x_prev, q_pred, pred, inv_mass, relaxation, inv_h, lin_damping,
                   ang_damping):
    """A body at ``pose`` moved by the mean of its accumulated corrections ``d``, divided by max(1, count),
    plus with ``coupled`` the mean of the particles' ``e`` (times ``relaxation``; see ``rigid_solver.py``),
    and its velocities from the pose change since the substep start ``x_prev``, with implicit damping:
    v = (x - x_prev) / h; w = w_pred + u(q q_pred^-1) / h, the predicted spin ``pred`` plus the corrections'
    rotation since the predicted rotation ``q_pred``, where u(dq) = 2 vec(dq) / dq_w inverts ``rotate_by``
    (the short way). A free body thus keeps its predicted spin exactly rather than re-deriving it from two
    float32 orientations, and a correction that undoes the predicted rotation leaves w = 0. A kinematic
    body (``inv_mass`` 0, its inverse inertia 0 too) keeps its predicted pose and velocity ``pred``.
    Returns the new pose and velocities."""
    out_pose = pose
    out_qd = pred
    if inv_mass != 0.0:
        x = pose.p
        q = pose.q
        if d[7] > 0.0 or coupled != 0:
            d = d * (relaxation / xsim.max(d[7], 1.0))
            if coupled != 0:
                d = d + e * (relaxation / xsim.max(e[7], 1.0))
            x = x + type(x)(d[0], d[1], d[2])
            q = xsim.normalize(q + type(q)(d[3], d[4], d[5], d[6]))
        v = (x - x_prev) * (inv_h / (1.0 + lin_damping / inv_h))
        dq = q * xsim.quat_inverse(q_pred)
        cos_half = dq[3]
        scale = 2.0 * inv_h
        if cos_half < 0.0:
            scale = -scale
            cos_half = -cos_half
        # a correction turns by less than pi (cos_half > 0); the floor guards a sum of corrections
        w = (type(x)(pred[3], pred[4], pred[5]) + type(x)(dq[0], dq[1], dq[2]) * (scale / xsim.max(cos_half, 1.0e-3))) \
            * (1.0 / (1.0 + ang_damping / inv_h))
        out_pose = xsim.transformation(x, q)
        out_qd = type(pred)(v[0], v[1], v[2], w[0], w[1], w[2])
    return out_pose, out_qd


@xsim.func
def corrected_velocity(qd_i, d, e, coupled: int):
    """Velocities ``qd_i`` plus the mean of the accumulated velocity corrections ``d`` (dv: 0..2, dw: 3..5,
    count: 7), plus with ``coupled`` the mean of the particles' ``e``, as ``corrected_body`` does with
    positions."""
    d = d * (1.0 / xsim.max(d[7], 1.0))
    if coupled != 0:
        d = d + e * (1.0 / xsim.max(e[7], 1.0))
    return type(qd_i)(qd_i[0] + d[0], qd_i[1] + d[1], qd_i[2] + d[2], qd_i[3] + d[3], qd_i[4] + d[4],
                      qd_i[5] + d[5])


# -------------------------------------------------------------------------------------------------
# kernels (generic over the scalar type; the solver takes them from ``generic.specialized``). The first
# substep's prediction and the step's last update also convert between body and com frames, in the
# same launch: a step of a few bodies costs its launches, not its arithmetic.


@xsim.kernel
def start_step(X0: Transforms, X: Transforms, com: Vec3s, residual: Vec3s, qd: Vec6s, bodies: BodyArrays,
               gravity: Vec3, h: Float, Xc_out: Transforms, Xc_pred: Transforms, qd_pred: Vec6s):
    """The step's first poses ``Xc_out`` (``step_start_pose`` of the body frames ``X`` with their rounding
    ``residual``, relative to the step-start com frames ``X0``) and the first substep's prediction from them
    (``predicted_body``)."""
    i = xsim.tid()
    start = step_start_pose(X0[i].p, X[i], com[i], residual[i])
    Xc_out[i] = start
    pose, vel = predicted_body(start, qd[i], bodies.inv_mass[i], bodies.inertia[i], bodies.inv_inertia[i],
                               gravity, h)
    Xc_pred[i] = pose
    qd_pred[i] = vel


@xsim.kernel
def integrate_bodies(Xc: Transforms, qd: Vec6s, bodies: BodyArrays, gravity: Vec3, h: Float, Xc_pred: Transforms,
                     qd_pred: Vec6s):
    """A substep's prediction (``predicted_body``) from the poses ``Xc`` and velocities ``qd``."""
    i = xsim.tid()
    pose, vel = predicted_body(Xc[i], qd[i], bodies.inv_mass[i], bodies.inertia[i], bodies.inv_inertia[i],
                               gravity, h)
    Xc_pred[i] = pose
    qd_pred[i] = vel


@xsim.kernel
def apply_body_deltas(Xc: Transforms, delta: Vec8s, pdelta: Vec8s, coupled: int, Xc_prev: Transforms,
                      Xc_pred: Transforms, qd_pred: Vec6s, inv_mass: Floats, relaxation: Float, inv_h: Float,
                      lin_damping: Float, ang_damping: Float, Xc_out: Transforms, qd_out: Vec6s):
    """An iteration's update of the poses ``Xc`` by their corrections ``delta`` (and with ``coupled`` the
    particles' ``pdelta``) and the velocities from it (``corrected_body``; ``Xc_prev``: the substep's start,
    ``Xc_pred``, ``qd_pred``: its prediction)."""
    i = xsim.tid()
    pose, vel = corrected_body(Xc[i], delta[i], pdelta[i], coupled, Xc_prev[i].p, Xc_pred[i].q, qd_pred[i],
                               inv_mass[i], relaxation, inv_h, lin_damping, ang_damping)
    Xc_out[i] = pose
    qd_out[i] = vel


@xsim.kernel
def apply_last_body_deltas(Xc: Transforms, delta: Vec8s, pdelta: Vec8s, coupled: int, Xc_prev: Transforms,
                           Xc_pred: Transforms, qd_pred: Vec6s, inv_mass: Floats, relaxation: Float, inv_h: Float,
                           lin_damping: Float, ang_damping: Float, X0: Transforms, com: Vec3s, Xc_out: Transforms,
                           qd_out: Vec6s, X_out: Transforms, residual_out: Vec3s):
    """``apply_body_deltas`` of a step's last iteration when no velocity pass follows, with the body frames
    ``X_out`` and their rounding ``residual_out`` at the step's end (``body_frame_at_end``; ``X0``: the
    step-start com frames)."""
    i = xsim.tid()
    pose, vel = corrected_body(Xc[i], delta[i], pdelta[i], coupled, Xc_prev[i].p, Xc_pred[i].q, qd_pred[i],
                               inv_mass[i], relaxation, inv_h, lin_damping, ang_damping)
    Xc_out[i] = pose
    qd_out[i] = vel
    frame, residual = body_frame_at_end(pose, X0[i].p, com[i])
    X_out[i] = frame
    residual_out[i] = residual


@xsim.kernel
def apply_velocity_deltas(qd: Vec6s, delta: Vec8s, pdelta: Vec8s, coupled: int, qd_out: Vec6s):
    """A velocity pass's update of the velocities ``qd`` (``corrected_velocity``)."""
    i = xsim.tid()
    qd_out[i] = corrected_velocity(qd[i], delta[i], pdelta[i], coupled)


@xsim.kernel
def apply_last_velocity_deltas(qd: Vec6s, delta: Vec8s, pdelta: Vec8s, coupled: int, Xc: Transforms,
                               X0: Transforms, com: Vec3s, qd_out: Vec6s, X_out: Transforms, residual_out: Vec3s):
    """``apply_velocity_deltas`` of a step's last substep, with the body frames ``X_out`` and their rounding
    ``residual_out`` at the step's end from the poses ``Xc`` (``body_frame_at_end``)."""
    i = xsim.tid()
    qd_out[i] = corrected_velocity(qd[i], delta[i], pdelta[i], coupled)
    frame, residual = body_frame_at_end(Xc[i], X0[i].p, com[i])
    X_out[i] = frame
    residual_out[i] = residual


@xsim.kernel
def body_to_com_frame(X: Transforms, com: Vec3s, Xc_out: Transforms):
    """Com frames from body frames: x_com = p + R com."""
    i = xsim.tid()
    pose = X[i]
    Xc_out[i] = xsim.transformation(pose.p + xsim.quat_rotate(pose.q, com[i]), pose.q)
