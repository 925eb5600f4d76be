"""Conservation in the rigid solver: joints and contacts between bodies with different numbers of
constraints exchange equal and opposite impulses (mass splitting), so a free chain keeps its
momentum and a double pendulum does not gain energy."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD

G = 9.81
LINK = 0.5
ALONG_X = (0.0, np.sin(np.pi / 4), 0.0, np.cos(np.pi / 4))  # turns a capsule's z axis onto x


def link_chain(n, anchored, gravity=(0.0, 0.0, -G), masses=None):
    """``n`` capsule links along x joined end to end by hinges about y; the first hangs from the
    world at the origin when ``anchored``."""
    b = ModelBuilder(gravity=gravity)
    for k in range(n):
        body = b.add_body(((LINK * (k + 0.5), 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
                          mass=None if masses is None else masses[k])
        b.add_shape_capsule(body, xform=((0.0, 0.0, 0.0), ALONG_X), radius=0.03, half_height=0.5 * LINK - 0.03)
        if k or anchored:
            b.add_joint_revolute(k - 1, body, parent_xform=((0.5 * LINK if k else 0.0, 0.0, 0.0),
                                                            (0.0, 0.0, 0.0, 1.0)),
                                 child_xform=((-0.5 * LINK, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0))
    return b


def energy(model, state):
    m, inertia, com = model.body_mass.numpy(), model.body_inertia.numpy(), model.body_com.numpy()
    q, qd = state.body_q.numpy(), state.body_qd.numpy()
    e = 0.0
    for i in range(model.body_count):
        r = quat_to_matrix(q[i, 3:])
        v, w = qd[i, :3], qd[i, 3:]
        e += 0.5 * m[i] * v @ v + 0.5 * w @ (r @ inertia[i] @ r.T) @ w + m[i] * G * (q[i, :3] + r @ com[i])[2]
    return e


def test_double_pendulum_released_from_horizontal_never_gains_energy():
    """XPBD dissipates a little; it must not create energy. Without mass splitting the upper link
    (two joints) took half of each impulse the lower link (one joint) took, and this pendulum
    gained 17% of m g L / 2 within half a second, whatever the number of substeps."""
    model = link_chain(2, anchored=True).finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=40, iterations=1)
    scale = model.body_mass.numpy().sum() * G * LINK / 2
    a, b = model.state(), model.state()
    e0 = energy(model, a)
    gains = []
    for _ in range(60):
        solver.step(a, b, None, 1.0 / 60.0)
        a, b = b, a
        gains.append((energy(model, a) - e0) / scale)
    assert max(gains) < 2e-3, max(gains)
    assert gains[-1] > -0.05  # and it does not lose much either


def free_chain_momenta(masses, substeps):
    """Three links in free fall without gravity, the middle one in two joints, the ends in one, thrown
    spinning about y: the total linear momentum and the angular momentum about the centre of mass after
    the first step (the joints first pull the links' velocities together) and a second later."""
    b = link_chain(3, anchored=False, gravity=(0.0, 0.0, 0.0), masses=masses)
    for k, body in enumerate(b.bodies):
        body["lin_vel"] = np.array([0.3, 0.0, 1.5 * (k - 1)])
        body["ang_vel"] = np.array([0.0, 2.0 + k, 0.0])
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=substeps, iterations=1)
    m, inertia = model.body_mass.numpy(), model.body_inertia.numpy()

    def momenta(state):
        q, qd = state.body_q.numpy(), state.body_qd.numpy()
        p = (m[:, None] * qd[:, :3]).sum(axis=0)
        c = (m[:, None] * q[:, :3]).sum(axis=0) / m.sum()  # the coms are the body origins here
        ang = sum(np.cross(q[i, :3] - c, m[i] * qd[i, :3])
                  + quat_to_matrix(q[i, 3:]) @ inertia[i] @ quat_to_matrix(q[i, 3:]).T @ qd[i, 3:]
                  for i in range(3))
        return p, ang

    a, s = model.state(), model.state()
    solver.step(a, s, None, 1.0 / 60.0)
    start = momenta(s)
    a, s = s, a
    for _ in range(60):
        solver.step(a, s, None, 1.0 / 60.0)
        a, s = s, a
    return start, momenta(a)


@pytest.mark.parametrize("masses", [None, (1.0, 3.0, 0.5)])
def test_free_chain_keeps_its_linear_momentum_and_its_angular_momentum(masses):
    """The joints exchange equal and opposite impulses, so the linear momentum stays constant to rounding,
    and the angular momentum about the centre of mass within 1e-6 of itself over a second at 10 substeps
    (measured 3.5e-7 and 5.3e-7; 4e-8 and 1.4e-7 at 20). A spin re-derived from the whole rotation of a
    substep, the corrections' with the prediction's, drifted 0.9% and 0.6% (first order in the substep)."""
    (p0, l0), (p1, l1) = free_chain_momenta(masses, 10)
    np.testing.assert_allclose(p1, p0, atol=1e-9)
    assert np.linalg.norm(l1 - l0) < 1e-6 * np.linalg.norm(l0)


@pytest.mark.parametrize("restitution", [0.0, 1.0])
def test_box_hit_from_both_sides_at_once_conserves_momentum(restitution):
    """No gravity: two spheres of different masses and speeds hit a free box from opposite sides in
    the same substep. The box is in two contacts, each sphere in one; every contact's impulse must
    reach both of its bodies in full, so momentum is conserved to rounding."""
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    box = b.add_body(((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=2.0)
    b.add_shape_box(box, hx=0.2, hy=0.2, hz=0.2, mu=0.0, restitution=restitution)
    for x, v, m in ((-0.5, 3.0, 1.0), (0.3 + 0.2 / 3.0, -1.0, 0.5)):  # both arrive after 1/15 s
        s = b.add_body(((x, 0.02, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=m, lin_vel=(v, 0.0, 0.0))
        b.add_shape_sphere(s, radius=0.1, mu=0.0, restitution=restitution)
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=10, iterations=1)
    m = model.body_mass.numpy()
    a, s = model.state(), model.state()
    p0 = (m[:, None] * a.body_qd.numpy()[:, :3]).sum(axis=0)
    for _ in range(30):
        solver.step(a, s, None, 1.0 / 60.0)
        a, s = s, a
    qd = a.body_qd.numpy()
    # they did collide: every body's velocity along x changed by more than 0.5 m/s (the least, the box's at
    # e = 0: 0.72), and they leave in their order, the box between the spheres (none went through another)
    assert np.all(np.abs(qd[:, 0] - [0.0, 3.0, -1.0]) > 0.5)
    assert qd[1, 0] <= qd[0, 0] <= qd[2, 0]
    np.testing.assert_allclose((m[:, None] * qd[:, :3]).sum(axis=0), p0, atol=1e-9)


@pytest.mark.parametrize("joint, hx, hy, arm", [
    ("revolute", 0.01, 0.01, 1.0),  # Newton's pendulum: a 1 cm body 1 m below the hinge
    ("ball", 0.05, 0.4, 0.4),  # a rod 0.8 m long hung from its end: a compound pendulum
])
def test_a_pendulum_keeps_its_period_and_its_energy_at_the_default_iterations(joint, hx, hy, arm):
    """Newton's pendulum scene (test_physics_verification.py: 0.05 rad, dt = 1 ms, 3.5 periods) at xsim's
    default substeps and iterations, in float32. Newton's check: the swing follows the small-angle solution
    theta0 cos(Omega t), Omega^2 = m g d / I_p (I_p about the pivot), with a mean error under 0.5% of the
    amplitude. That solution is itself 0.11% off the exact swing (a 0.05 rad pendulum is slower by
    theta0^2 / 16), so the swing is also held to the exact solution of theta'' = -Omega^2 sin(theta) (scipy,
    1e-12): within 0.15% (measured 0.10% and 0.12%, a phase lag of half a substep, Omega h / 2, that 4
    substeps cut to 0.025%; no amplitude is lost). The energy stays within 1% of the swing energy
    m g d (1 - cos theta0) (measured 0.2%)."""
    g, theta0, dt = 10.0, 0.05, 1e-3
    b = ModelBuilder(gravity=(0.0, -g, 0.0))
    q0 = (0.0, 0.0, np.sin(theta0 / 2), np.cos(theta0 / 2))
    body = b.add_body(((arm * np.sin(theta0), -arm * np.cos(theta0), 0.0), q0))
    b.add_shape_box(body, hx=hx, hy=hy, hz=hx)
    frames = {"parent_xform": ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
              "child_xform": ((0.0, arm, 0.0), (0.0, 0.0, 0.0, 1.0))}
    if joint == "revolute":
        b.add_joint_revolute(-1, body, axis=(0.0, 0.0, 1.0), **frames)
    else:
        b.add_joint_ball(-1, body, **frames)
    model = b.finalize(dtype=xsim.float32)
    solver = SolverXPBD(model)
    m = float(model.body_mass.numpy()[0])
    i_p = float(model.body_inertia.numpy()[0][2, 2]) + m * arm * arm
    omega = np.sqrt(m * g * arm / i_p)
    steps = int(3.5 * 2.0 * np.pi / omega / dt)
    a, s = model.state(), model.state()
    angles, rates = np.empty(steps), np.empty(steps)
    for k in range(steps):
        solver.step(a, s, None, dt)
        a, s = s, a
        x = a.body_q.numpy()[0].astype(np.float64)
        angles[k] = np.arctan2(x[0], -x[1])
        rates[k] = a.body_qd.numpy()[0, 5]
    t = dt * np.arange(1, steps + 1)
    assert np.mean(np.abs(angles - theta0 * np.cos(omega * t))) < 0.005 * theta0
    exact = solve_ivp(lambda _, y: [y[1], -omega * omega * np.sin(y[0])], (0.0, t[-1]), [theta0, 0.0],
                      t_eval=t, rtol=1e-12, atol=1e-14).y[0]
    assert np.mean(np.abs(angles - exact)) < 0.0015 * theta0
    energy = 0.5 * i_p * rates ** 2 - m * g * arm * np.cos(angles)
    swing = m * g * arm * (1.0 - np.cos(theta0))
    assert np.abs(energy + m * g * arm * np.cos(theta0)).max() < 0.01 * swing


@pytest.mark.parametrize("dtype", [xsim.float32, xsim.float64])
@pytest.mark.parametrize("spin", [(0.0, 0.0, 10.0), (1.0, 0.5, 10.0), (0.3, 10.0, 0.2)])
def test_a_spinning_free_body_keeps_its_energy(spin, dtype):
    """A free box (0.6 x 0.4 x 0.2 m) spun about its major axis, off it, and near its unstable middle axis
    (a tumble), no gravity, 2 s at 10 substeps: the kinetic energy stays within 1e-5 (measured 0 about the
    axis, 2e-6 tumbling in float32, 6e-12 in float64) and the angular momentum within 1e-3 of itself
    (measured 0 about the axis, 7.6e-4 tumbling, from the first-order update of the orientation). An
    explicit gyroscopic step gained 1.6% of the tumble's energy in these 2 s, and re-deriving the spin
    from two float32 orientations every substep 6.5e-4 about the axis."""
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    body = b.add_body(((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), ang_vel=spin)
    b.add_shape_box(body, hx=0.3, hy=0.2, hz=0.1)
    model = b.finalize(dtype=dtype)
    inertia = model.body_inertia.numpy()[0].astype(np.float64)

    def energy_and_momentum(state):
        r = quat_to_matrix(state.body_q.numpy()[0, 3:].astype(np.float64))
        w = state.body_qd.numpy()[0, 3:].astype(np.float64)
        world = r @ inertia @ r.T
        return 0.5 * w @ world @ w, world @ w

    solver = SolverXPBD(model, substeps=10)
    a, s = model.state(), model.state()
    e0, l0 = energy_and_momentum(a)
    for _ in range(120):
        solver.step(a, s, None, 1.0 / 60.0)
        a, s = s, a
    e1, l1 = energy_and_momentum(a)
    assert abs(e1 - e0) < 1e-5 * e0
    assert np.linalg.norm(l1 - l0) < 1e-3 * np.linalg.norm(l0)
