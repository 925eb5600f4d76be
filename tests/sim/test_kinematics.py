"""Joint coordinates: ``State.joint_q``/``joint_qd`` (Newton's layout), ``eval_ik`` from body
states, ``eval_fk`` back, the solver keeping them current, and their gradients (float64 vs FD)."""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder, eval_fk, eval_ik
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD

ROT_X90 = (np.sin(np.pi / 4), 0.0, 0.0, np.cos(np.pi / 4))


def every_joint_chain(requires_grad=False):
    """A chain hanging from the world through one joint of each type (free at the root), with
    offset joint frames and coms, so every term of the kinematics is exercised."""
    b = ModelBuilder()
    bodies = []
    for k in range(5):
        body = b.add_body(((0.1 * k, 0.0, -0.5 * k), (0.0, 0.0, 0.0, 1.0)))
        # an off-centre box: the com is not the body origin
        b.add_shape_box(body, xform=((0.05, 0.02, -0.1), (0.0, 0.0, 0.0, 1.0)), hx=0.1, hy=0.08, hz=0.2)
        bodies.append(body)
    b.add_joint_free(bodies[0], parent_xform=((0.0, 0.0, 1.0), ROT_X90))
    b.add_joint_revolute(bodies[0], bodies[1], parent_xform=((0.1, 0.0, -0.25), ROT_X90),
                         child_xform=((0.0, 0.0, 0.25), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 0.6, 0.8))
    b.add_joint_prismatic(bodies[1], bodies[2], parent_xform=((0.0, 0.1, -0.3), (0.0, 0.0, 0.0, 1.0)),
                          child_xform=((0.0, 0.0, 0.2), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 0.0, 1.0))
    b.add_joint_ball(bodies[2], bodies[3], parent_xform=((0.0, 0.0, -0.3), ROT_X90),
                     child_xform=((0.0, 0.0, 0.2), (0.0, 0.0, 0.0, 1.0)))
    b.add_joint_fixed(bodies[3], bodies[4], parent_xform=((0.1, 0.0, -0.3), (0.0, 0.0, 0.0, 1.0)),
                      child_xform=((0.0, 0.0, 0.2), (0.0, 0.0, 0.0, 1.0)))
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def random_coordinates(model, rng):
    q = np.zeros(model.joint_coord_count)
    qd = rng.normal(size=model.joint_dof_count)
    def quat():
        v = rng.normal(size=4)
        return v / np.linalg.norm(v)
    q[0:3] = rng.normal(size=3)
    q[3:7] = quat()
    q[7] = rng.uniform(-2.5, 2.5)   # revolute
    q[8] = rng.uniform(-0.3, 0.3)   # prismatic
    q[9:13] = quat()                # ball
    return q, qd


def test_layout_follows_newtons_counts_per_joint_type():
    model = every_joint_chain()
    # free 7/6, revolute 1/1, prismatic 1/1, ball 4/3, fixed 0/0
    assert model.joint_q_start.tolist() == [0, 7, 8, 9, 13, 13]
    assert model.joint_qd_start.tolist() == [0, 6, 7, 8, 11, 11]
    state = model.state()
    assert state.joint_q.shape == (13,) and state.joint_qd.shape == (11,)


def test_fk_then_ik_returns_the_coordinates_for_every_joint_type():
    model = every_joint_chain()
    rng = np.random.default_rng(3)
    state = model.state()
    for _ in range(5):
        q, qd = random_coordinates(model, rng)
        eval_fk(model, xsim.array(q, dtype=xsim.float64), xsim.array(qd, dtype=xsim.float64), state)
        eval_ik(model, state)
        q2, qd2 = state.joint_q.numpy(), state.joint_qd.numpy()
        for s in (slice(3, 7), slice(9, 13)):  # q and -q are one rotation: compare with w >= 0
            q[s] *= np.sign(q[s][3])
        np.testing.assert_allclose(q2, q, atol=1e-10)
        np.testing.assert_allclose(qd2, qd, atol=1e-10)


def test_fk_places_each_joint_frame_on_its_parents_and_moves_bodies_rigidly():
    """Check eval_fk against the definition directly: the child joint frame (world) equals the
    parent joint frame times the joint motion, and the body velocities are those of that motion
    (finite differences of the poses in time along q + qd t)."""
    model = every_joint_chain()
    rng = np.random.default_rng(4)
    q, qd = random_coordinates(model, rng)
    state = model.state()
    eval_fk(model, xsim.array(q, dtype=xsim.float64), xsim.array(qd, dtype=xsim.float64), state)
    poses, vel = state.body_q.numpy(), state.body_qd.numpy()
    com = model.body_com.numpy()
    # revolute joint 1: the child's joint frame is the parent's turned by q[7] about the axis
    xp, xc = model.joint_X_p.numpy()[1], model.joint_X_c.numpy()[1]

    def world(body, local):  # a point given in the com frame of ``body``
        return poses[body, :3] + quat_to_matrix(poses[body, 3:]) @ (com[body] + local)
    np.testing.assert_allclose(world(0, xp[:3]), world(1, xc[:3]), atol=1e-12)
    # velocities: advance the coordinates by qd dt (quaternion entries by their rate) and difference
    dt = 1e-6
    q2 = q.copy()
    q2[7] += qd[6] * dt
    q2[8] += qd[7] * dt
    state2 = model.state()
    eval_fk(model, xsim.array(q2, dtype=xsim.float64), xsim.array(np.zeros_like(qd), dtype=xsim.float64), state2)
    qd_only = qd.copy()
    qd_only[:6] = 0.0   # free joint held: its coordinates did not move
    qd_only[8:11] = 0.0  # ball joint held
    state3 = model.state()
    eval_fk(model, xsim.array(q, dtype=xsim.float64), xsim.array(qd_only, dtype=xsim.float64), state3)
    p2 = state2.body_q.numpy()
    for body in (1, 2, 3):
        com_now = poses[body, :3] + quat_to_matrix(poses[body, 3:]) @ com[body]
        com_next = p2[body, :3] + quat_to_matrix(p2[body, 3:]) @ com[body]
        np.testing.assert_allclose((com_next - com_now) / dt, state3.body_qd.numpy()[body, :3], atol=1e-5)
    assert np.all(np.isfinite(vel))


def test_solver_keeps_joint_q_current_as_the_pendulum_angle():
    """A revolute pendulum released at 0.3 rad: state.joint_q after each step is the angle of the
    link (atan2 of its position) and joint_qd its angular velocity."""
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    body = b.add_body(((np.sin(0.3), 0.0, -np.cos(0.3)), (0.0, -np.sin(0.15), 0.0, np.cos(0.15))))
    b.add_shape_sphere(body, radius=0.05)
    b.add_joint_revolute(-1, body, child_xform=((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, -1.0, 0.0))
    model = b.finalize(dtype=xsim.float64)
    assert abs(model.joint_q.numpy()[0] - 0.3) < 1e-12
    solver = SolverXPBD(model, substeps=10, iterations=1)
    a, c = model.state(), model.state()
    for _ in range(30):
        solver.step(a, c, None, 1.0 / 60.0)
        a, c = c, a
        x = a.body_q.numpy()[0, :3]
        assert abs(a.joint_q.numpy()[0] - np.arctan2(x[0], -x[2])) < 1e-9
        v = a.body_qd.numpy()[0, :3]
        rate = (x[0] * v[2] - x[2] * v[0]) / (x[0] ** 2 + x[2] ** 2)  # d/dt atan2(x, -z)
        assert abs(a.joint_qd.numpy()[0] - rate) < 1e-6


def test_joint_coordinate_arrays_are_checked():
    model = every_joint_chain()
    with pytest.raises(ValueError, match="eval_fk: joint_q: expected an array of 13 float64"):
        eval_fk(model, xsim.zeros(12, dtype=xsim.float64), xsim.zeros(11, dtype=xsim.float64), model.state())
    b = ModelBuilder()
    b.add_shape_sphere(b.add_body(), radius=0.1)
    lone = b.finalize()
    assert lone.state().joint_q is None
    with pytest.raises(ValueError, match="no joints"):
        eval_ik(lone, lone.state(), xsim.zeros(1), xsim.zeros(1))


def test_joint_q_and_fk_gradients_match_finite_differences():
    """d(final joint_q and joint_qd) / d(initial joint coordinates set through eval_fk), across a
    20-step rollout of the chain under gravity: the whole loop eval_fk -> solver -> eval_ik."""
    model = every_joint_chain(requires_grad=True)
    solver = SolverXPBD(model, substeps=4, iterations=2)
    rng = np.random.default_rng(5)
    q0, qd0 = random_coordinates(model, rng)
    qd0 *= 0.3
    w_q = rng.normal(size=model.joint_coord_count)
    w_qd = rng.normal(size=model.joint_dof_count)

    def loss_of(q_np, tape=None):
        q = xsim.array(q_np, dtype=xsim.float64, requires_grad=True)
        qd = xsim.array(qd0, dtype=xsim.float64)
        states = [model.state()]
        eval_fk(model, q, qd, states[0])
        for _ in range(20):
            states.append(model.state())
            solver.step(states[-2], states[-1], None, 1.0 / 120.0)
        final = states[-1]
        return q, float(final.joint_q.numpy() @ w_q + final.joint_qd.numpy() @ w_qd), final

    tape = xsim.Tape()
    with tape:
        q, _value, final = loss_of(q0)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        xsim.launch(weighted_sum, 1, inputs=[final.joint_q, xsim.array(w_q, dtype=xsim.float64), final.joint_qd,
                                              xsim.array(w_qd, dtype=xsim.float64)], outputs=[loss])
    tape.backward(loss)
    grad = q.grad.numpy()
    eps = 1e-6
    for k in (0, 2, 4, 7, 8, 10):  # free position and rotation, revolute, prismatic, ball
        qp, qm = q0.copy(), q0.copy()
        qp[k] += eps
        qm[k] -= eps
        fd = (loss_of(qp)[1] - loss_of(qm)[1]) / (2 * eps)
        assert abs(grad[k] - fd) < 1e-5 * max(1.0, abs(fd)), (k, grad[k], fd)


@xsim.kernel
def weighted_sum(a: xsim.array(dtype=xsim.float64), wa: xsim.array(dtype=xsim.float64),
                 b: xsim.array(dtype=xsim.float64), wb: xsim.array(dtype=xsim.float64),
                 loss: xsim.array(dtype=xsim.float64)):
    s = xsim.float64(0.0)
    for i in range(a.shape[0]):
        s += a[i] * wa[i]
    for i in range(b.shape[0]):
        s += b[i] * wb[i]
    loss[0] = s
