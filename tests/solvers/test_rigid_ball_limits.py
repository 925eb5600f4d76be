"""Swing (cone) and twist limits of ball joints in SolverXPBD (Mueller et al. 2020, sec. 3.4): the
limits hold in every direction, the attachment point holds while they act, the twist limit adds no
swing, and gradients through an active cone limit match central finite differences (float64)."""

import itertools

import numpy as np
import pytest
from test_rigid import weighted_pose

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD

IDENTITY = (0.0, 0.0, 0.0, 1.0)
DT = 1.0 / 60.0




def swing_twist(q, axis):
    """(swing, twist) in degrees of the rotation q (x, y, z, w) about the unit ``axis`` (the child
    joint frame relative to an identity parent frame), by the swing-twist decomposition."""
    q = np.asarray(q, dtype=np.float64)
    swing = np.arccos(np.clip(np.dot(axis, quat_to_matrix(q) @ axis), -1.0, 1.0))
    s, w = np.dot(q[:3], axis), q[3]
    if w < 0.0:
        s, w = -s, -w
    return np.degrees(swing), np.degrees(2.0 * np.arctan2(s, w))


def link(pivot, offset, axis, gravity=(0.0, 0.0, -9.81), ang_vel=(0.0, 0.0, 0.0), requires_grad=False, **limits):
    """A box link whose centre is ``offset`` (m) from a world ``pivot``, on a ball joint whose frames
    are identity rotations (so the joint starts at zero swing and twist) with ``axis`` and ``limits``.
    The link starts rotating at ``ang_vel`` about the pivot (its centre moves accordingly)."""
    b = ModelBuilder(gravity=gravity)
    pivot, offset = np.asarray(pivot, np.float64), np.asarray(offset, np.float64)
    body = b.add_body((tuple(pivot + offset), IDENTITY), ang_vel=ang_vel,
                      lin_vel=tuple(np.cross(ang_vel, offset)))
    b.add_shape_box(body, hx=0.3, hy=0.05, hz=0.08)  # unequal inertias: corrections are not isotropic
    b.add_joint_ball(-1, body, parent_xform=(tuple(pivot), IDENTITY), child_xform=(tuple(-offset), IDENTITY),
                     axis=axis, **limits)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad), pivot, offset


def trajectory(model, seconds, substeps=10):
    """Each step's body_q of body 0 (numpy (steps, 7))."""
    solver = SolverXPBD(model, substeps=substeps, iterations=1)
    a, b = model.state(), model.state()
    out = []
    for _ in range(round(seconds / DT)):
        solver.step(a, b, None, DT)
        a, b = b, a
        out.append(a.body_q.numpy()[0].copy())
    return np.array(out)


def pivot_error(poses, pivot, offset):
    """Largest distance (m) between the link's attachment point and the world pivot."""
    return max(np.linalg.norm(p[:3] - quat_to_matrix(p[3:]) @ offset - pivot) for p in poses)


# -- swing ---------------------------------------------------------------------------------------------


def test_horizontal_pendulum_rests_on_a_30_degree_cone_and_falls_past_it_without():
    axis = np.array([1.0, 0.0, 0.0])  # along the link, which starts horizontal: swing 0
    cone = np.radians(30.0)
    limited, pivot, offset = link((0.0, 0.0, 1.0), (0.3, 0.0, 0.0), axis, cone_limit=cone)
    free, _, _ = link((0.0, 0.0, 1.0), (0.3, 0.0, 0.0), axis)
    poses = trajectory(limited, 2.0)
    swings = [swing_twist(p[3:], axis)[0] for p in poses]
    assert max(swings) < 30.5
    assert abs(swings[-1] - 30.0) < 0.5  # gravity holds it on the cone's edge
    assert pivot_error(poses, pivot, offset) < 1e-3
    assert max(swing_twist(p[3:], axis)[0] for p in trajectory(free, 2.0)) > 80.0


def test_swing_limit_holds_in_an_arbitrary_direction():
    axis = np.array([0.0, 0.0, -1.0])  # hanging link; it is kicked about a tilted axis
    omega = 5.0 * np.array([1.0, 2.0, 0.5]) / np.linalg.norm([1.0, 2.0, 0.5])
    limited, pivot, offset = link((0.0, 0.0, 1.0), (0.0, 0.0, -0.3), axis, ang_vel=omega,
                                  cone_limit=np.radians(20.0))
    free, _, _ = link((0.0, 0.0, 1.0), (0.0, 0.0, -0.3), axis, ang_vel=omega)
    poses = trajectory(limited, 1.5)
    swings = np.array([swing_twist(p[3:], axis)[0] for p in poses])
    assert swings.max() < 20.5 and swings.max() > 19.5  # it reached the cone and stayed inside
    assert pivot_error(poses, pivot, offset) < 1e-3
    assert max(swing_twist(p[3:], axis)[0] for p in trajectory(free, 1.5)) > 30.0


# -- twist ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spin, stop", [(4.0, 40.0), (-4.0, -20.0)])
def test_twist_limit_stops_a_spinning_link_without_swinging_it(spin, stop):
    axis = np.array([0.0, 0.0, -1.0])  # a hanging link spun about its own (vertical) axis
    limited, pivot, offset = link((0.0, 0.0, 1.0), (0.0, 0.0, -0.3), axis, ang_vel=tuple(spin * axis),
                                  cone_limit=np.radians(45.0), twist_lower=np.radians(-20.0),
                                  twist_upper=np.radians(40.0))
    poses = trajectory(limited, 1.0)
    swing, twist = np.array([swing_twist(p[3:], axis) for p in poses]).T
    assert np.abs(twist).max() < abs(stop) + 0.5
    assert abs(twist[-1] - stop) < 0.5
    assert swing.max() < 0.5
    assert pivot_error(poses, pivot, offset) < 1e-3


def momentum(model, state):
    """(total linear momentum, angular momentum about the origin, centre of mass) of the bodies."""
    q, qd = state.body_q.numpy(), state.body_qd.numpy()
    m, inertia, com = model.body_mass.numpy(), model.body_inertia.numpy(), model.body_com.numpy()
    linear, angular, centre = np.zeros(3), np.zeros(3), np.zeros(3)
    for k in range(model.body_count):
        r = quat_to_matrix(q[k, 3:])
        x = q[k, :3] + r @ com[k]
        linear += m[k] * qd[k, :3]
        angular += r @ inertia[k] @ r.T @ qd[k, 3:] + m[k] * np.cross(x, qd[k, :3])
        centre += m[k] * x / m.sum()
    return linear, angular, centre


def test_limits_between_two_free_bodies_hold_and_conserve_momentum():
    # no gravity, no world: a box spun against another about the joint axis (tilted away from both
    # boxes' principal axes, so it also precesses into the cone) stops at the twist limit
    axis = np.array([1.0, 1.0, 0.0]) / np.sqrt(2.0)
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    parent = b.add_body(((0.0, 0.0, 0.0), IDENTITY))
    b.add_shape_box(parent, hx=0.2, hy=0.1, hz=0.05)
    child = b.add_body(((0.4, 0.4, 0.0), IDENTITY), ang_vel=tuple(3.0 * axis))
    b.add_shape_box(child, hx=0.15, hy=0.1, hz=0.1)
    b.add_joint_ball(parent, child, parent_xform=((0.2, 0.2, 0.0), IDENTITY),
                     child_xform=((-0.2, -0.2, 0.0), IDENTITY), axis=axis, cone_limit=np.radians(10.0),
                     twist_lower=-0.2, twist_upper=0.3)
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=10, iterations=1)
    s0, s1 = model.state(), model.state()
    swings = []
    for _ in range(60):
        solver.step(s0, s1, None, DT)
        s0, s1 = s1, s0
        q = s0.body_q.numpy()
        rp, rc = quat_to_matrix(q[0, 3:]), quat_to_matrix(q[1, 3:])
        assert np.linalg.norm(q[0, :3] + rp @ [0.2, 0.2, 0] - q[1, :3] - rc @ [-0.2, -0.2, 0]) < 1e-3
        swings.append(swing_twist(_quat_mul(_quat_conj(q[0, 3:]), q[1, 3:]), axis)[0])
    swing, twist = swing_twist(_quat_mul(_quat_conj(q[0, 3:]), q[1, 3:]), axis)
    assert abs(twist - np.degrees(0.3)) < 0.5
    assert max(swings) < 10.5 and swing > 9.5  # it precessed onto the cone's edge
    # the limits' impulses are internal: momentum stays (linear exactly, angular to XPBD's accuracy)
    p0, l0, c0 = momentum(model, model.state())
    p1, l1, c1 = momentum(model, s0)
    assert np.linalg.norm(p1 - p0) < 1e-9 and np.linalg.norm(c1 - c0) < 1e-9
    assert np.linalg.norm(l1 - l0) < 0.01 * np.linalg.norm(l0)


def _quat_mul(a, b):
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz])


def _quat_conj(q):
    return np.array([-q[0], -q[1], -q[2], q[3]])


# -- gradient ------------------------------------------------------------------------------------------


def rollout_loss(model, states, qd0, weights, substeps=5):
    """weights . final body_q after stepping through ``states`` from the initial velocities ``qd0``."""
    solver = SolverXPBD(model, substeps=substeps, iterations=1)
    states[0].body_qd = qd0
    for a, b in itertools.pairwise(states):
        solver.step(a, b, None, DT)
    loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    xsim.launch(weighted_pose, model.body_count, inputs=[states[-1].body_q, weights], outputs=[loss])
    return loss


def test_pose_gradient_through_an_active_cone_limit_matches_finite_differences():
    axis = np.array([1.0, 0.0, 0.0])
    model, _, offset = link((0.0, 0.0, 1.0), (0.3, 0.0, 0.0), axis, cone_limit=np.radians(30.0),
                            requires_grad=True)
    omega = np.array([0.3, -0.4, 0.8])  # a sideways kick: it slides round the cone's edge
    qd0 = np.concatenate([np.cross(omega, offset), omega])[None]
    steps = 30
    weights = xsim.array(np.random.default_rng(5).normal(size=(1, 7)), dtype=xsim.transformd)
    qd = xsim.array(qd0, dtype=xsim.vector(6, xsim.float64), requires_grad=True)
    states = [model.state() for _ in range(steps + 1)]
    tape = xsim.Tape()
    with tape:
        loss = rollout_loss(model, states, qd, weights)
    tape.backward(loss)
    grad = qd.grad.numpy()[0]
    # the limit is active at the end: the link rests on the cone's edge
    assert abs(swing_twist(states[-1].body_q.numpy()[0, 3:], axis)[0] - 30.0) < 0.5
    eps = 1e-6
    fd = np.zeros(6)
    for k in range(6):
        vals = []
        for sgn in (1.0, -1.0):
            q = qd0.copy()
            q[0, k] += sgn * eps
            states = [model.state(requires_grad=False) for _ in range(steps + 1)]
            vals.append(rollout_loss(model, states, xsim.array(q, dtype=xsim.vector(6, xsim.float64)),
                                     weights).numpy()[0])
        fd[k] = (vals[0] - vals[1]) / (2.0 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-4 * np.abs(fd).max())
    assert np.abs(grad).max() > 1e-2


def test_add_joint_ball_rejects_a_negative_cone_and_crossed_twist_limits():
    b = ModelBuilder()
    body = b.add_body()
    with pytest.raises(ValueError, match="cone_limit must be >= 0"):
        b.add_joint_ball(-1, body, cone_limit=-0.1)
    with pytest.raises(ValueError, match="lower limit 0.5 above upper limit -0.5"):
        b.add_joint_ball(-1, body, twist_lower=0.5, twist_upper=-0.5)
    assert b.joints == []
