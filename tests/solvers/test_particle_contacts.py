"""Particles against shapes through one contact path (``xsim/solvers/xpbd/particle_contacts.py``):
planes with any normal and offset, several particles per shape and several shapes per particle,
against exact answers (rest height, Coulomb sliding, restitution), float64 finite differences of a
rollout through tilted-plane contacts, static ``add_shape_*`` shapes meeting particles and bodies,
and the builder's messages for bad shapes."""

import contextlib

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

G = 9.81
R = 0.05  # particle radius, m


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def tilted(theta):
    """The unit normal of a plane tilted by ``theta`` about x (it rises towards -y)."""
    return np.array([0.0, np.sin(theta), np.cos(theta)])


def run(model, steps, substeps=4, iterations=4, dt=1.0 / 60.0, record=None):
    """Step ``model`` from its initial state; ``record(k, state)`` after each step. Returns the last State."""
    solver = SolverXPBD(model, substeps=substeps, iterations=iterations)
    a, b = model.state(), model.state()
    for k in range(steps):
        solver.step(a, b, None, dt)
        a, b = b, a
        if record is not None:
            record(k, a)
    return a


def test_particles_slide_along_the_corner_of_the_ground_and_a_wall_plane_touching_both():
    """Three particles on the frictionless ground moving into a wall x = -0.2 (a plane facing +x; no
    bounce) and along it at 0.5, 1 and 2 m/s: they end touching both shapes, at x = -0.2 + r and z = r,
    having slid along the corner at their own speed (the two normals are orthogonal: exact)."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.0)
    b.add_shape_plane((2.0, 0.0, 0.0, 0.4), mu=0.0)  # 2 x + 0.4 = 0: the normal is normalized
    speeds = (0.5, 1.0, 2.0)
    for k, vy in enumerate(speeds):
        b.add_particle((0.0, 0.3 * k, R), vel=(-1.5, vy, 0.0), mass=0.1, radius=R)
    steps, dt = 30, 1.0 / 60.0
    final = run(b.finalize(dtype=xsim.float64), steps=steps, dt=dt)
    expected = [[-0.2 + R, 0.3 * k + vy * steps * dt, R] for k, vy in enumerate(speeds)]
    np.testing.assert_allclose(final.particle_q.numpy(), expected, atol=1e-9)
    np.testing.assert_allclose(final.particle_qd.numpy()[:, :2], [[0.0, vy] for vy in speeds], atol=1e-9)


def test_static_friction_holds_particles_on_a_plane_steeper_than_nothing_but_below_atan_mu():
    theta, mu = 0.4, 0.6  # tan(0.4) = 0.42 < 0.6: they stick
    n = tilted(theta)
    b = ModelBuilder()
    b.add_shape_plane(xform=((0.0, 0.0, 0.2), (-np.sin(theta / 2), 0.0, 0.0, np.cos(theta / 2))), mu=mu)
    on_plane = [np.array([0.1, 0.0, 0.2]), np.array([-0.2, 0.3, 0.2 - 0.3 * np.tan(theta)])]
    for p in on_plane:
        b.add_particle(p + R * n, mass=0.2, radius=R)
    q = run(b.finalize(dtype=xsim.float64), steps=60).particle_q.numpy()
    np.testing.assert_allclose(q, [p + R * n for p in on_plane], atol=1e-9)


def test_particles_slide_down_a_tilted_plane_at_g_sin_minus_mu_g_cos():
    """Coulomb sliding: the velocity along the slope grows at exactly g (sin theta - mu cos theta)."""
    theta, mu, dt = 0.5, 0.3, 1.0 / 60.0
    n = tilted(theta)
    down = np.array([0.0, np.cos(theta), -np.sin(theta)])  # along the slope, downhill
    b = ModelBuilder()
    b.add_shape_plane((*n, -0.1), mu=mu)
    for x in (-0.5, 0.0, 0.5):
        b.add_particle(np.array([x, 0.0, 0.0]) + (0.1 + R) * n, mass=0.1, radius=R)
    speeds = {}
    run(b.finalize(dtype=xsim.float64), steps=40, dt=dt,
        record=lambda k, s: speeds.__setitem__(k, s.particle_qd.numpy() @ down))
    accel = (speeds[39] - speeds[9]) / (30 * dt)
    np.testing.assert_allclose(accel, G * (np.sin(theta) - mu * np.cos(theta)), rtol=1e-9)


@pytest.mark.parametrize("e", [0.0, 0.5])
def test_particles_leave_a_tilted_plane_at_restitution_times_their_approach_speed_with_coulomb_friction(e):
    """Without gravity, particles hitting a tilted plane at 3 m/s with tangential speeds 2 and 0.5 m/s:
    the normal speed becomes e * 3, the tangential one drops by mu (1 + e) 3 or to zero."""
    mu, speed = 0.3, 3.0
    n = unit((0.3, -0.4, 1.0))
    t = unit(np.cross(n, (1.0, 0.0, 0.0)))
    point = np.array([0.2, -0.1, 0.5])
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_shape_plane((*(2.0 * n), -2.0 * n @ point), mu=mu, restitution=e)
    tangential = (2.0, 0.5)
    for k, vt in enumerate(tangential):
        b.add_particle(point + 0.3 * n + 0.5 * k * t, vel=-speed * n + vt * t, mass=1.0, radius=R)
    solver_steps = 12
    final = run(b.finalize(dtype=xsim.float64), steps=solver_steps, substeps=10, iterations=2)
    v = final.particle_qd.numpy()
    np.testing.assert_allclose(v @ n, [e * speed] * 2, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(v @ t, [max(0.0, vt - mu * (1.0 + e) * speed) for vt in tangential], atol=1e-3)
    assert np.all((final.particle_q.numpy() - point) @ n >= R - 1e-9)  # never inside the plane


@pytest.mark.parametrize("kind", ["plane", "box"])
@pytest.mark.parametrize("e", [0.0, 0.5])
def test_particles_and_a_box_land_on_a_plane_as_on_a_box_at_restitution_times_the_impact_speed(kind, e):
    """Two particles (tangential speeds 2 and 0.5 m/s) and a body box land at 3 m/s, mid-substep, on the
    ground (a plane) or on a static box's top face: each leaves its landing step with normal speed e times
    its impact speed (restitution 0: none) and, for the particles, Coulomb's tangential speed
    v_t - mu (1 + e) v_n. A plane of restitution 0 had no velocity pass: the particles left the landing step
    still approaching at 1.37 m/s, having lost only the position pass's friction."""
    mu, h = 0.3, 1.0 / 240.0
    b = ModelBuilder()
    if kind == "plane":
        b.add_shape_plane(mu=mu, restitution=e)
    else:
        b.add_shape_box(-1, ((0.0, 0.0, -0.5), (0.0, 0.0, 0.0, 1.0)), hx=2.0, hy=2.0, hz=0.5, mu=mu, restitution=e)
    tangential = (2.0, 0.5)
    for k, vt in enumerate(tangential):
        b.add_particle((-0.5, 0.3 * k, 0.1337), vel=(vt, 0.0, -3.0), mass=0.1, radius=R)
    body = b.add_body(((0.5, 0.0, 0.1837), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1, mu=mu, restitution=e)
    model = b.finalize(dtype=xsim.float64)
    solver = SolverXPBD(model, substeps=1, iterations=4)
    a, nxt = model.state(), model.state()
    a.body_qd.numpy()[0] = [0.0, 0.0, -3.0, 0.0, 0.0, 0.0]
    landed = {}
    for _ in range(12):
        before = np.r_[a.particle_qd.numpy()[:, 2], a.body_qd.numpy()[0, 2]]
        solver.step(a, nxt, None, h)
        a, nxt = nxt, a
        v = np.r_[a.particle_qd.numpy()[:, 0], a.particle_qd.numpy()[:, 2], a.body_qd.numpy()[0, 2]]
        for j in range(3):
            if j not in landed and v[2 + j] > before[j] + 1.0:
                landed[j] = (before[j] - G * h, v[j] if j < 2 else 0.0, v[2 + j])
    assert sorted(landed) == [0, 1, 2]
    for j, (vn_pre, vt, vn) in landed.items():
        assert vn_pre < -3.0
        assert vn == pytest.approx(-e * vn_pre, abs=1e-9)
        if j < 2:
            assert vt == pytest.approx(max(0.0, tangential[j] + mu * (1.0 + e) * vn_pre), abs=1e-9)


def test_a_static_shape_box_meets_particles_and_a_body():
    """A static box added with ``add_shape_box(-1, ...)`` (not only ``add_collider_box``): a particle and
    a body sphere dropped on it both come to rest on its top face."""
    b = ModelBuilder()
    b.add_shape_box(-1, ((0.0, 0.0, 0.5), (0.0, 0.0, 0.0, 1.0)), hx=1.0, hy=1.0, hz=0.1)
    b.add_particle((-0.5, 0.0, 0.8), mass=0.1, radius=R)
    body = b.add_body(((0.5, 0.0, 0.9), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_sphere(body, radius=0.1)
    final = run(b.finalize(dtype=xsim.float64), steps=60)
    np.testing.assert_allclose(final.particle_q.numpy()[0], [-0.5, 0.0, 0.6 + R], atol=1e-9)
    np.testing.assert_allclose(final.body_q.numpy()[0, :3], [0.5, 0.0, 0.7], atol=2e-3)


@pytest.mark.parametrize("kind", ["cylinder", "cone", "ellipsoid"])
def test_particles_rest_on_the_new_static_shapes_and_on_bodies_of_them(kind):
    """A particle dropped on a static cylinder's cap, a cone's base (turned over) or an ellipsoid's top
    rests on it at its own radius; another dropped on a body (a cylinder on a cap, an ellipsoid on its
    shortest axis, on the ground) too."""
    b = ModelBuilder()
    b.add_ground_plane()
    if kind == "cylinder":
        b.add_shape_cylinder(-1, xform=((0.0, 0.0, 0.5), (0.0, 0.0, 0.0, 1.0)), radius=0.2, half_height=0.1)
    elif kind == "cone":
        b.add_shape_cone(-1, xform=((0.0, 0.0, 0.5), (1.0, 0.0, 0.0, 0.0)), radius=0.2, half_height=0.1)
    else:
        b.add_shape_ellipsoid(-1, xform=((0.0, 0.0, 0.5), (0.0, 0.0, 0.0, 1.0)), rx=0.3, ry=0.2, rz=0.1)
    top = [0.0 if kind == "ellipsoid" else 0.05, 0.0, 0.6 + R]
    b.add_particle((top[0], 0.0, 0.8), mass=0.01, radius=R)
    body = b.add_body(((1.0, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0)))
    if kind == "ellipsoid":
        b.add_shape_ellipsoid(body, rx=0.3, ry=0.2, rz=0.1)
    else:
        b.add_shape_cylinder(body, radius=0.2, half_height=0.1)
    b.add_particle((1.0, 0.0, 0.5), mass=0.01, radius=R)
    final = run(b.finalize(dtype=xsim.float64), steps=90)
    x = final.particle_q.numpy()
    np.testing.assert_allclose(x[0], top, atol=1e-6)
    np.testing.assert_allclose(x[1], [1.0, 0.0, 0.2 + R], atol=2e-3)  # on the body (which sinks a little)


def slide_loss(params, tape=None):
    """Two particles landing on a tilted plane (restitution) and sliding, 12 steps on ``tape`` if given:
    (the weighted sum of their final positions, the model, the first and last State, the weights).
    ``params``: initial velocity of particle 0 (3), the plane's frame (7: set as given, not normalized),
    mu, restitution."""
    b = ModelBuilder()
    b.add_shape_plane(mu=params[10], restitution=params[11])
    b.add_particle((0.0, 0.0, 0.1), vel=params[:3], mass=0.1, radius=R)
    b.add_particle((0.3, 0.1, 0.08), vel=(0.0, 0.4, -1.0), mass=0.2, radius=R)
    model = b.finalize(dtype=xsim.float64, requires_grad=True)
    model.shape_xform.numpy()[0] = params[3:10]  # the host view of a CPU array
    state = model.state(requires_grad=True)
    start = state
    solver = SolverXPBD(model, substeps=3, iterations=3)
    with tape if tape is not None else contextlib.nullcontext():
        for _ in range(12):
            nxt = model.state(requires_grad=True)
            solver.step(state, nxt, None, 1.0 / 60.0)
            state = nxt
    w = np.array([[0.3, -0.7, 1.1], [0.5, 0.2, -0.4]])
    return float(np.sum(state.particle_q.numpy() * w)), model, start, state, w


def test_rollout_gradients_through_a_tilted_plane_match_finite_differences():
    """Every parameter, the plane's quaternion in all four directions: a shape's rotation is its quaternion
    normalized, so scaling it changes nothing and its gradient along q is zero. (Unnormalized, a push-out
    along the plane's normal left a depth of the order of the scale's error for the next iteration: a kink
    at unit q, where the tape gave -0.70 and central differences -2.21 along q.)"""
    q = unit((0.12, -0.05, 0.0, 1.0))
    p0 = np.r_[0.4, 0.2, -2.0, 0.0, 0.0, 0.02, q, 0.35, 0.3]
    tape = xsim.Tape()
    loss, model, start, state, w = slide_loss(p0, tape)
    tape.backward(grads={state.particle_q: w})
    analytic = np.r_[start.particle_qd.grad.numpy()[0], model.shape_xform.grad.numpy()[0],
                     model.shape_mu.grad.numpy()[0], model.shape_restitution.grad.numpy()[0]]
    assert np.all(np.abs(analytic[[0, 1, 2, 5, 10, 11]]) > 1e-3)  # velocity, height, friction and bounce all act
    eps = 1e-6
    numeric = np.array([(slide_loss(p0 + eps * d)[0] - slide_loss(p0 - eps * d)[0]) / (2 * eps)
                        for d in np.eye(len(p0))])
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-6)
    assert abs(analytic[6:10] @ q) < 1e-9
    assert slide_loss(np.r_[p0[:6], 1.3 * q, p0[10:]])[0] == pytest.approx(loss, abs=1e-12)


@pytest.mark.parametrize("call, error, message", [
    (lambda b: b.add_shape_plane((0.0, 0.0, 0.0, 1.0)), ValueError,
     r"add_shape_plane: the plane's normal \(a, b, c\) must not be zero"),
    (lambda b: b.add_shape_plane((0.0, 0.0, 1.0)), ValueError, r"add_shape_plane: plane must be 4 finite numbers"),
    (lambda b: b.add_shape_plane((0.0, np.nan, 1.0, 0.0)), ValueError, r"add_shape_plane: plane must be 4 finite"),
    (lambda b: b.add_shape_plane(body=0), ValueError, r"add_shape_plane: planes are static; body must be -1, got 0"),
    (lambda b: b.add_shape_sphere(3, radius=0.1), IndexError,
     r"add_shape_sphere: body 3 out of range \(-1: static; there are 1 bodies\)"),
    (lambda b: b.add_shape_box(-2), IndexError, r"add_shape_box: body -2 out of range"),
    (lambda b: b.add_shape_capsule(-1, restitution=1.5), ValueError,
     r"add_shape_capsule: restitution must be in \[0, 1\], got 1.5"),
])
def test_bad_shapes_are_refused_with_a_message_naming_the_call(call, error, message):
    b = ModelBuilder()
    b.add_body()
    with pytest.raises(error, match=message):
        call(b)


def test_add_collider_is_a_static_shape_and_the_ground_a_plane_with_any_normal_after_them():
    b = ModelBuilder()
    s = b.add_collider_sphere((0.0, 0.0, 1.0), 0.5)
    b.add_ground_plane(height=0.25)
    p = b.add_shape_plane((0.0, -2.0, 0.0, 1.0))  # the plane y = 0.5, facing -y
    m = b.finalize(dtype=xsim.float64)
    assert (s, p) == (0, 1) and m.shape_body.numpy().tolist() == [-1, -1, -1] and m.shape_count == 3
    xform = m.shape_xform.numpy()
    np.testing.assert_allclose(xform[2, :3], [0.0, 0.0, 0.25])  # the ground: last, z up
    np.testing.assert_allclose(xform[1, :3], [0.0, 0.5, 0.0], atol=1e-15)
    z_axis = 2.0 * np.cross(xform[1, 3:6], [0.0, 0.0, 1.0])
    np.testing.assert_allclose([0.0, 0.0, 1.0] + xform[1, 6] * z_axis + np.cross(xform[1, 3:6], z_axis),
                               [0.0, -1.0, 0.0], atol=1e-15)
