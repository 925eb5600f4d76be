"""SolverXPBD against analytic results: free fall, pendulum period, XPBD compliance, friction
stopping distance, and contacts that never let a particle sink more than its radius."""

import numpy as np
import pytest
import trimesh

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

G = 9.81


def simulate(builder, steps, dt, dtype=xsim.float64, control=None, **solver_args):
    """Positions (steps + 1, n, 3) and the final State of a rollout."""
    model = builder.finalize(dtype=dtype)
    solver = SolverXPBD(model, **solver_args)
    s0, s1 = model.state(), model.state()
    xs = [s0.particle_q.numpy().copy()]
    for _ in range(steps):
        solver.step(s0, s1, control, dt)
        s0, s1 = s1, s0
        xs.append(s0.particle_q.numpy().copy())
    return np.array(xs), s0


@xsim.kernel
def particle_coordinate(q: xsim.array(dtype=xsim.vec3d), index: int, axis: int, out: xsim.array(dtype=xsim.float64)):
    out[0] = q[index][axis]


def differentiated_coordinate(builder, steps, dt, index, axis, **solver_args):
    """Coordinate ``axis`` (m) of particle ``index`` after a rollout recorded on a tape and differentiated:
    (its value, the model, whose arrays hold its gradients)."""
    model = builder.finalize(dtype=xsim.float64, requires_grad=True)
    solver = SolverXPBD(model, **solver_args)
    tape = xsim.Tape()
    with tape:
        states = [model.state()]
        for _ in range(steps):
            states.append(model.state())
            solver.step(states[-2], states[-1], None, dt)
        out = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        xsim.launch(particle_coordinate, 1, inputs=[states[-1].particle_q, index, axis], outputs=[out])
    tape.backward(out)
    return out.numpy()[0], model


@pytest.mark.parametrize("substeps", [1, 3])
def test_free_fall_matches_constant_acceleration_exactly(substeps):
    b = ModelBuilder()
    b.add_particle((0.5, -1.0, 2.0), vel=(1.0, 0.25, 3.0), mass=0.7)
    xs, state = simulate(b, 60, 1.0 / 60.0, substeps=substeps)
    t = np.arange(61) / 60.0
    expected = np.array([0.5, -1.0, 2.0]) + np.outer(t, [1.0, 0.25, 3.0]) + np.outer(0.5 * t * t, [0.0, 0.0, -G])
    np.testing.assert_allclose(xs[:, 0], expected, rtol=0, atol=1e-11)
    np.testing.assert_allclose(state.particle_qd.numpy()[0], [1.0, 0.25, 3.0 - G], rtol=0, atol=1e-11)


def test_free_fall_in_float32_matches_to_float_precision():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 1.0), vel=(0.0, 0.0, 2.0))
    xs, _ = simulate(b, 30, 1.0 / 30.0, dtype=xsim.float32)
    t = np.arange(31) / 30.0
    np.testing.assert_allclose(xs[:, 0, 2], 1.0 + 2.0 * t - 0.5 * G * t * t, rtol=0, atol=2e-5)


def test_pinned_particle_stays_put_and_free_one_falls():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 1.0), mass=0.0)
    p = b.add_particle((1.0, 0.0, 1.0))
    b.pin_particle(p)
    b.add_particle((2.0, 0.0, 1.0))
    xs, _ = simulate(b, 10, 0.01)
    np.testing.assert_array_equal(xs[-1, :2], xs[0, :2])
    assert xs[-1, 2, 2] == pytest.approx(1.0 - 0.5 * G * 0.1 ** 2, abs=1e-12)


@pytest.mark.parametrize("substeps, iterations", [(10, 1), (4, 4)])
def test_stiff_pendulum_swings_with_the_small_angle_period(substeps, iterations):
    b = ModelBuilder()
    pivot = b.add_particle((0.0, 0.0, 1.0), mass=0.0)
    theta, length = 0.05, 1.0
    bob = b.add_particle((length * np.sin(theta), 0.0, 1.0 - length * np.cos(theta)), mass=1.0)
    b.add_distance_constraint(pivot, bob)
    dt = 1.0 / 60.0
    xs, _ = simulate(b, 600, dt, substeps=substeps, iterations=iterations)
    x = xs[:, 1, 0]
    up = np.where((x[:-1] < 0.0) & (x[1:] >= 0.0))[0]
    crossings = (up + x[up] / (x[up] - x[up + 1])) * dt  # linear interpolation of the zero crossing
    assert len(crossings) >= 4
    period = np.diff(crossings).mean()
    assert period == pytest.approx(2.0 * np.pi * np.sqrt(length / G), rel=0.01)
    # the constraint holds: the bob stays on the circle
    np.testing.assert_allclose(np.linalg.norm(xs[:, 1] - xs[:, 0], axis=1), length, atol=1e-9)


@pytest.mark.parametrize("dt", [1.0 / 30.0, 1.0 / 120.0])
@pytest.mark.parametrize("iterations", [1, 7])
def test_compliant_hanging_spring_stretches_by_m_g_alpha(dt, iterations):
    mass, alpha, length = 0.5, 1e-3, 1.0
    b = ModelBuilder()
    b.particle_damping = 5.0  # settles faster; damping does not move the equilibrium
    top = b.add_particle((0.0, 0.0, 0.0), mass=0.0)
    bob = b.add_particle((0.0, 0.0, -length), mass=mass)
    b.add_spring(top, bob, compliance=alpha)
    xs, _ = simulate(b, round(4.0 / dt), dt, iterations=iterations)
    stretch = -xs[-1, 1, 2] - length
    assert stretch == pytest.approx(mass * G * alpha, rel=1e-9)


def test_hanging_spring_stretch_gradient_wrt_compliance_is_m_g():
    """stretch = m g alpha at rest, so d stretch / d alpha = m g once the rollout has settled."""
    mass, alpha, length, dt = 0.5, 1e-3, 1.0, 1.0 / 30.0
    b = ModelBuilder()
    b.particle_damping = 5.0
    top = b.add_particle((0.0, 0.0, 0.0), mass=0.0)
    b.add_spring(top, b.add_particle((0.0, 0.0, -length), mass=mass), compliance=alpha)
    _, model = differentiated_coordinate(b, round(4.0 / dt), dt, 1, 2)
    assert -model.spring_compliance.grad.numpy()[0] == pytest.approx(mass * G, rel=1.5e-13)  # measured 1.4e-14


@pytest.mark.parametrize("mu", [0.5, 0.2])
def test_stopping_distance_gradient_wrt_friction_is_minus_v0_squared_over_two_mu_squared_g(mu):
    """The gradient is the derivative of the discrete rollout (central differences; measured within 2.2e-6),
    and that is the closed form's to within one step of the n = v0 / (mu g dt) to the stop: the stop falls
    inside a step, and the sticking branch's position does not move with mu (measured 0.71 / n, 0.76 / n)."""
    v0, radius, dt = 2.0, 0.01, 1.0 / 600.0

    def stop(mu_):
        b = ModelBuilder()
        b.add_ground_plane(mu=mu_)
        b.add_particle((0.0, 0.0, radius), vel=(v0, 0.0, 0.0), radius=radius)
        return differentiated_coordinate(b, int(1.2 * v0 / (mu * G) / dt), dt, 0, 0)

    gradient = stop(mu)[1].shape_mu.grad.numpy()[0]
    eps = 1e-7
    assert gradient == pytest.approx((stop(mu + eps)[0] - stop(mu - eps)[0]) / (2.0 * eps), rel=1e-5)
    assert gradient == pytest.approx(-v0 * v0 / (2.0 * mu * mu * G), rel=mu * G * dt / v0)


@pytest.mark.parametrize("mu", [0.5, 0.2])
def test_sliding_particle_stops_after_v0_squared_over_two_mu_g(mu):
    v0, radius = 2.0, 0.01
    b = ModelBuilder()
    b.add_ground_plane(mu=mu)
    b.add_particle((0.0, 0.0, radius), vel=(v0, 0.0, 0.0), radius=radius)
    dt = 1.0 / 600.0
    stop_time = v0 / (mu * G)
    xs, state = simulate(b, int(1.2 * stop_time / dt), dt)
    # measured 2.1e-6 and 3.8e-7 from v0^2 / (2 mu g): the time step's share
    assert xs[-1, 0, 0] == pytest.approx(v0 * v0 / (2.0 * mu * G), rel=2e-5)
    assert state.particle_qd.numpy()[0, 0] == 0.0  # static friction holds it
    np.testing.assert_allclose(xs[:, 0, 2], radius, atol=1e-12)  # it never sinks


def test_frictionless_ground_keeps_the_tangential_velocity():
    b = ModelBuilder()
    b.add_ground_plane(mu=0.0)
    b.add_particle((0.0, 0.0, 0.01), vel=(1.0, 0.5, 0.0))
    xs, _ = simulate(b, 60, 1.0 / 60.0)
    np.testing.assert_allclose(xs[-1, 0, :2], [1.0, 0.5], atol=1e-12)


def test_restitution_bounces_back_at_that_fraction_of_the_impact_speed():
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_ground_plane(mu=0.0, restitution=0.5)
    b.add_particle((0.0, 0.0, 0.05), vel=(0.0, 0.0, -2.0), radius=0.01)
    _, state = simulate(b, 30, 1.0 / 300.0)
    assert state.particle_qd.numpy()[0, 2] == pytest.approx(1.0, rel=1e-9)


def test_dropped_cloth_never_sinks_into_the_ground_more_than_its_radius():
    radius = 0.01
    b = ModelBuilder()
    b.add_ground_plane(mu=0.5)
    b.add_cloth_grid(pos=(-0.4, -0.4, 0.3), rot=(0.2588190, 0.0, 0.0, 0.9659258), vel=(0.0, 0.0, -1.0), dim_x=8,
                     dim_y=8, cell_x=0.1, cell_y=0.1, mass=0.02, stretch_compliance=1e-5, bend_compliance=10.0,
                     particle_radius=radius)
    xs, _ = simulate(b, 120, 1.0 / 60.0, dtype=xsim.float32, substeps=4, iterations=5)
    z = xs[:, :, 2]
    assert z.min() >= radius - 1e-6  # the particle's sphere may touch but never cross the plane
    assert np.all(z[-1] < radius + 1e-3)  # and the cloth ends lying flat on it


def test_cloth_edges_keep_their_length_when_hanging():
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=4, dim_y=4,
                     cell_x=0.1, cell_y=0.1, mass=0.01, fix_left=True)
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=10, iterations=10)
    s0, s1 = model.state(), model.state()
    for _ in range(60):
        solver.step(s0, s1, None, 1.0 / 60.0)
        s0, s1 = s1, s0
    x = s0.particle_q.numpy()
    ij = model.spring_indices.numpy()
    strain = np.linalg.norm(x[ij[:, 0]] - x[ij[:, 1]], axis=1) / model.spring_rest_length.numpy() - 1.0
    assert np.abs(strain).max() < 0.01
    assert x[:, 2].min() < 0.8  # it did fall and hang
    np.testing.assert_array_equal(x[::5], model.particle_q.numpy()[::5])  # the left column is pinned


# -- static colliders --------------------------------------------------------------------------------


def drop_onto(add_collider, top, start=(0.0, 0.0, 0.6), radius=0.02):
    """Drop one particle onto a collider; it must come to rest with its sphere touching ``top``."""
    b = ModelBuilder()
    add_collider(b)
    b.add_particle(start, radius=radius)
    xs, _ = simulate(b, 120, 1.0 / 60.0, substeps=4)
    assert xs[:, 0, 2].min() >= top + radius - 1e-9
    assert xs[-1, 0, 2] == pytest.approx(top + radius, abs=1e-9)
    return xs


def test_particle_rests_on_a_sphere_top():
    drop_onto(lambda b: b.add_collider_sphere((0.0, 0.0, 0.1), 0.2), top=0.3)


def test_particle_rests_on_a_rotated_box_face():
    # rotated 90 degrees about z: the top face is still at z = 0.1 + 0.05
    drop_onto(lambda b: b.add_collider_box((0.0, 0.0, 0.1), (0.3, 0.2, 0.05), rot=(0.0, 0.0, 0.7071068, 0.7071068)),
              top=0.15)


def test_particle_rests_on_a_lying_capsule():
    # capsule axis along x (local z rotated by 90 degrees about y)
    drop_onto(lambda b: b.add_collider_capsule((0.0, 0.0, 0.0), 0.1, 0.5, rot=(0.0, 0.7071068, 0.0, 0.7071068)),
              top=0.1, start=(0.3, 0.0, 0.5))


def test_particle_rests_on_a_trimesh_box():
    mesh = trimesh.creation.box(extents=(1.0, 1.0, 0.2))
    drop_onto(lambda b: b.add_collider_mesh(mesh, pos=(0.0, 0.0, 0.1)), top=0.2, start=(0.1, 0.15, 0.5))


def test_particle_slides_off_a_frictionless_tilted_box():
    b = ModelBuilder()
    b.add_collider_box((0.0, 0.0, 0.0), (1.0, 1.0, 0.1), rot=(0.0, 0.258819, 0.0, 0.9659258), mu=0.0)
    b.add_particle((0.0, 0.0, 0.2))
    xs, _ = simulate(b, 60, 1.0 / 60.0, substeps=4)
    assert xs[-1, 0, 0] > 0.3  # rotated +30 degrees about y, the top face descends towards +x


def test_control_target_drives_pinned_particles():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 1.0), mass=0.0)
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=2)
    control = model.control()
    control.particle_target = xsim.array(np.array([[0.3, 0.0, 1.2]]), dtype=xsim.vec3d)
    s0, s1 = model.state(), model.state()
    solver.step(s0, s1, control, 0.1)
    np.testing.assert_allclose(s1.particle_q.numpy()[0], [0.3, 0.0, 1.2], atol=1e-12)
    np.testing.assert_allclose(s1.particle_qd.numpy()[0], [3.0, 0.0, 2.0], atol=1e-12)


@pytest.mark.parametrize("beta", [2.0, 6.0])
def test_damped_spring_decays_at_the_rate_beta_over_two_m(beta):
    """m x'' = -x / alpha - beta x' (no gravity): the amplitude decays as exp(-beta t / (2 m)) and the
    motion rings at sqrt(1 / (alpha m) - (beta / 2m)^2). Small substeps keep implicit Euler's own
    damping (about omega^2 h / 2 = 0.008/s) far below the physical one."""
    mass, alpha = 1.0, 0.01
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    pin = b.add_particle((0.0, 0.0, 0.0), mass=0.0)
    p = b.add_particle((1.05, 0.0, 0.0), mass=mass)
    b.add_spring(pin, p, rest_length=1.0, compliance=alpha, damping=beta)
    dt = 1.0 / 600.0
    xs, _ = simulate(b, 1500, dt, substeps=10, iterations=1)
    u = xs[:, 1, 0] - 1.0
    peaks = np.where((u[1:-1] > u[:-2]) & (u[1:-1] >= u[2:]) & (u[1:-1] > 0.0))[0] + 1
    assert len(peaks) >= 3
    rate = -np.polyfit(peaks * dt, np.log(u[peaks]), 1)[0]
    assert rate == pytest.approx(beta / (2.0 * mass), rel=0.05)
    omega_d = np.sqrt(1.0 / (alpha * mass) - (beta / (2.0 * mass)) ** 2)
    assert np.diff(peaks).mean() * dt == pytest.approx(2.0 * np.pi / omega_d, rel=0.01)


def test_cloth_stretch_and_bend_damping_settle_a_swinging_cloth():
    def run(damping):
        b = ModelBuilder()
        b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=4, dim_y=2,
                         cell_x=0.1, cell_y=0.1, mass=0.02, fix_left=True, fix_right=True, stretch_compliance=1e-2,
                         shear_compliance=1e-2, stretch_damping=damping, bend_damping=damping)
        xs, state = simulate(b, 150, 1.0 / 60.0, substeps=5, iterations=10)
        return xs[-1], np.abs(state.particle_qd.numpy()).max()

    rest = G * (1.0 / 300.0) / 2.0  # the velocity a resting particle reports (g h / 2, see solver.py)
    x_damped, v_damped = run(1.0)
    _, v_free = run(0.0)
    assert v_damped < rest + 3e-3 and v_free > rest + 0.05  # damped: at rest after 2.5 s; undamped: swinging
    assert x_damped[:, 2].min() < 0.95  # and it did sag
