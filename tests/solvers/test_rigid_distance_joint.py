"""Distance joints (``add_joint_distance``, Newton's meaning): the distance between two points kept within
[min, max], rotation free; a rigid one is a point-mass pendulum whatever the body's inertia."""

import numpy as np
from test_rigid import check_velocity_gradient  # same folder (pytest puts it on sys.path)

import xsim
from xsim.sim.builder import ModelBuilder
from xsim.sim.kinematics import eval_fk, eval_ik
from xsim.solvers.xpbd.solver import SolverXPBD

G = 9.81


def hanging(length: float, angle: float, lo: float, hi: float, requires_grad: bool = False):
    """A 1 kg body (its com the joint point) ``length`` m from a world point, ``angle`` rad from straight down."""
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    body = b.add_body(((length * np.sin(angle), 0.0, -length * np.cos(angle)), (0.0, 0.0, 0.0, 1.0)), mass=1.0,
                      com=(0.0, 0.0, 0.0), inertia=np.diag([2e-3, 1e-3, 3e-3]))
    b.add_joint_distance(-1, body, None, None, min_distance=lo, max_distance=hi)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def run(model, seconds: float, dt: float = 1e-3, substeps: int = 10):
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, substeps=substeps, iterations=1)
    xs = []
    for _ in range(round(seconds / dt)):
        solver.step(s0, s1, None, dt)
        s0, s1 = s1, s0
        xs.append(s0.body_q.numpy()[0, :3].copy())
    return np.array(xs), s0


def test_rigid_distance_pendulum_swings_at_the_point_mass_period():
    length, angle, dt = 1.0, 0.05, 1e-3
    xs, _ = run(hanging(length, angle, length, length), 6.0, dt)
    x = xs[:, 0]
    up = np.flatnonzero((x[:-1] < 0.0) & (x[1:] >= 0.0))
    crossings = (up + 1 - x[up] / (x[up + 1] - x[up])) * dt
    period = np.diff(crossings).mean()
    small_angle = 2.0 * np.pi * np.sqrt(length / G)
    # measured: 1.6e-4 above the small-angle period, the amplitude's own theta0^2 / 16 = 1.6e-4
    assert abs(period / small_angle - 1.0) < 5e-3
    np.testing.assert_allclose(np.linalg.norm(xs, axis=1), length, rtol=1e-9)


def test_distance_inside_its_range_is_free_and_the_end_of_the_range_holds():
    # a rope 1 m long from a body 0.5 m below its anchor: free fall until the rope is taut
    xs, _ = run(hanging(0.5, 0.0, 0.0, 1.0), 0.5)
    t_taut = np.sqrt(2.0 * 0.5 / G)  # 0.319 s
    k = round(0.25 / 1e-3) - 1
    np.testing.assert_allclose(xs[k, 2], -0.5 - 0.5 * G * 0.25 ** 2, rtol=1e-3)
    assert t_taut < 0.5 and np.linalg.norm(xs[-1]) <= 1.0 + 1e-9 and np.linalg.norm(xs[-1]) > 0.99
    # and a strut: min_distance keeps it from coming closer than 0.8 m (pushed from 0.9 m towards the anchor)
    model = hanging(0.9, 0.0, 0.8, -1.0)
    s = model.state()
    s.body_qd = xsim.array([[0.0, 0.0, 2.0, 0.0, 0.0, 0.0]], dtype=xsim.vector(6, xsim.float64))
    solver = SolverXPBD(model, substeps=10, iterations=1)
    s1 = model.state()
    solver.step(s, s1, None, 0.1)
    assert np.linalg.norm(s1.body_q.numpy()[0, :3]) >= 0.8 - 1e-9


def test_distance_joint_coordinates_round_trip_through_eval_fk_and_eval_ik():
    model = hanging(1.0, 0.3, 1.0, 1.0)
    assert model.joint_coord_count == 7 and model.joint_dof_count == 6
    q = np.array([0.2, -0.4, 0.8, *np.array([0.1, 0.2, -0.3, 0.9]) / np.linalg.norm([0.1, 0.2, -0.3, 0.9])])
    qd = np.array([0.3, -0.2, 0.1, 1.0, -2.0, 0.5])
    state = model.state()
    eval_fk(model, xsim.array(q, dtype=xsim.float64), xsim.array(qd, dtype=xsim.float64), state)
    np.testing.assert_allclose(state.body_q.numpy()[0], q, atol=1e-12)
    back_q, back_qd = xsim.zeros(7, dtype=xsim.float64), xsim.zeros(6, dtype=xsim.float64)
    eval_ik(model, state, back_q, back_qd)
    np.testing.assert_allclose(back_q.numpy(), q, atol=1e-12)
    np.testing.assert_allclose(back_qd.numpy(), qd, atol=1e-12)


def test_pose_gradient_through_a_taut_distance_joint_matches_finite_differences():
    model = hanging(1.0, 0.4, 1.0, 1.0, requires_grad=True)
    check_velocity_gradient(model, [[0.3, 0.2, 0.1, 0.5, -0.3, 0.2]], 10, 1.0 / 60.0)
