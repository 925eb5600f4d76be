"""Restitution and Coulomb friction of particle contacts with static colliders and with body shapes
(``bounce_impulse``), against the exact answers of a point mass hitting a wall, and their gradients
against float64 finite differences through a bouncing rollout and against the closed forms of a wall hit.

The exact answers (no gravity; approach speed V along x, tangential velocity v_t, hit at t_h = d / V, the
particle's surface d = 0.45 m from the wall): it leaves at -e V, its normal impulse is m (1 + e) V, and the
tangential velocity shrinks along itself by mu (1 + e) V while it slides (to zero if that is more: it sticks);
a free body of mass M leaves at (1 + e) V / (1 + M) and the particle at (1 - e M) V / (1 + M) (1 kg). These
hold to rounding (measured within 7e-14 m/s), so they are held at 5e-13 m/s.
"""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

V = 3.0  # m/s, approach speed
EXACT = 5e-13  # m/s (and m): the exact answers hold to rounding, measured within 7e-14


def wall_scene(kind, e, mu=0.0, vt=0.0, gravity=(0.0, 0.0, 0.0), body_mass=0.0, requires_grad=False):
    """A particle (1 kg, r = 5 cm) at the origin moving at (V, vt, 0) towards the face x = 0.5 of a
    box 0.2 m thick: a static collider (``kind`` "collider") or the box shape of a body (``kind``
    "body": kinematic for ``body_mass`` 0)."""
    b = ModelBuilder(gravity=gravity)
    b.add_particle((0.0, 0.0, 0.5), (V, vt, 0.0), mass=1.0, radius=0.05)
    if kind == "body":
        body = b.add_body(((0.6, 0.0, 0.5), (0.0, 0.0, 0.0, 1.0)), mass=body_mass)
        b.add_shape_box(body, hx=0.1, hy=1.0, hz=1.0, mu=mu, restitution=e)
    else:
        b.add_collider_box((0.6, 0.0, 0.5), (0.1, 1.0, 1.0), mu=mu, restitution=e)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def simulate(model, steps=30, dt=1.0 / 60.0):
    solver = SolverXPBD(model, substeps=10, iterations=2)
    a, c = model.state(), model.state()
    for _ in range(steps):
        solver.step(a, c, None, dt)
        a, c = c, a
    return a


@pytest.mark.parametrize("kind", ["collider", "body"])
@pytest.mark.parametrize("e", [0.0, 0.5, 1.0])
def test_a_particle_leaves_a_wall_at_restitution_times_its_approach_speed(kind, e):
    s = simulate(wall_scene(kind, e))
    v = s.particle_qd.numpy()[0]
    np.testing.assert_allclose(v, [-e * V, 0.0, 0.0], rtol=0, atol=EXACT)
    # never inside the wall; 30 steps of 1/60 s: it left the wall's face x = 0.45 at t = 0.45 / V
    assert s.particle_q.numpy()[0][0] == pytest.approx(0.45 - e * V * (0.5 - 0.45 / V), abs=EXACT)


@pytest.mark.parametrize("kind", ["collider", "body"])
@pytest.mark.parametrize("vt", [2.0, 1.0])
def test_oblique_hit_loses_tangential_speed_by_coulomb_friction(kind, vt):
    # exact Coulomb for a point mass: the normal impulse is m (1 + e) V, the tangential speed drops by
    # mu times that per unit mass, or to zero if that is more (it sticks: vt = 1)
    e, mu = 0.5, 0.3
    v = simulate(wall_scene(kind, e, mu=mu, vt=vt)).particle_qd.numpy()[0]
    np.testing.assert_allclose(v, [-e * V, max(0.0, vt - mu * (1.0 + e) * V), 0.0], rtol=0, atol=EXACT)


def test_a_particle_bouncing_off_a_free_body_conserves_momentum_at_that_restitution():
    e, m_body = 0.5, 3.0
    model = wall_scene("body", e, body_mass=m_body)
    s = simulate(model, steps=12)
    vp = s.particle_qd.numpy()[0][0]
    vb = s.body_qd.numpy()[0][0]
    np.testing.assert_allclose(vp, (1.0 - e * m_body) / (1.0 + m_body) * V, rtol=0, atol=EXACT)
    np.testing.assert_allclose(vb, (1.0 + e) / (1.0 + m_body) * V, rtol=0, atol=EXACT)


@xsim.kernel
def particle_loss(q: xsim.array(dtype=xsim.vec3d), qd: xsim.array(dtype=xsim.vec3d),
                  weights: xsim.array(dtype=xsim.float64), loss: xsim.array(dtype=xsim.float64)):
    loss[0] = xsim.float64(0.0)
    for k in range(3):
        loss[0] += weights[k] * q[0][k] + weights[3 + k] * qd[0][k]


WEIGHTS = (1.0, 0.7, -0.4, 0.3, -0.2, 0.1)  # of the final (x, y, z, x', y', z')


def bouncing_loss(kind, v0, e, mu, tape=None, falling=True, body_mass=4.0, weights=WEIGHTS):
    """Loss (``weights`` of the final pose and velocity) of a 12-step (0.2 s) rollout in which the particle,
    launched at ``v0`` (under gravity when ``falling``, except against a body, which would fall), bounces
    (sliding) off the wall; with ``tape``, recorded and differentiated."""
    gravity = (0.0, 0.0, -9.81) if falling and kind != "body" else (0.0, 0.0, 0.0)
    model = wall_scene(kind, e, mu=mu, gravity=gravity, body_mass=body_mass, requires_grad=True)
    s = model.state()
    s.particle_qd = xsim.array(np.asarray([v0]), dtype=xsim.vec3d, requires_grad=True)
    solver = SolverXPBD(model, substeps=4, iterations=2)
    loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    with tape if tape is not None else _nothing():
        states = [s]
        for _ in range(12):
            nxt = model.state()
            solver.step(states[-1], nxt, None, 1.0 / 60.0)
            states.append(nxt)
        xsim.launch(particle_loss, 1, inputs=[states[-1].particle_q, states[-1].particle_qd,
                                              xsim.array(weights, dtype=xsim.float64)], outputs=[loss])
    return loss, model, s, states


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("kind", ["collider", "body"])
def test_restitution_and_friction_gradients_match_finite_differences(kind):
    v0, e, mu = np.array([2.9, 2.0, 1.0]), 0.5, 0.3  # the hit falls inside a substep, not at its end
    tape = xsim.Tape()
    loss, model, s, states = bouncing_loss(kind, v0, e, mu, tape)
    assert states[-1].particle_qd.numpy()[0][0] < 0.2 * v0[0]  # it hit the wall
    tape.backward(loss)
    g_e, g_mu = model.shape_restitution.grad.numpy()[0], model.shape_mu.grad.numpy()[0]  # a collider is a shape
    analytic = np.concatenate([s.particle_qd.grad.numpy()[0], [g_e, g_mu]])

    def f(p):
        return bouncing_loss(kind, p[:3], p[3], p[4])[0].numpy()[0]
    p0 = np.concatenate([v0, [e, mu]])
    eps = 1e-6
    numeric = np.array([(f(p0 + eps * d) - f(p0 - eps * d)) / (2 * eps) for d in np.eye(5)])
    assert abs(analytic[3]) > 1e-2 and abs(analytic[4]) > 1e-2  # both terms act
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def wall_hit_jacobian(vx, vy, e, mu):
    """d(x, y, z, x', y', z') / d(V, v_y, v_z, e, mu) of the closed forms at v_z = 0 after T = 0.2 s: the
    particle is at x = 0.45 - e V (T - t_h), y = v_y T - mu (1 + e) (V T - 0.45),
    z = 0.5 + v_z (t_h + (1 - s) (T - t_h)), moving at (-e V, v_y - mu (1 + e) V, (1 - s) v_z), with
    t_h = 0.45 / V and s = mu (1 + e) V / |v_t| the share of its tangential speed friction takes."""
    big_t, t_h = 12 / 60.0, 0.45 / vx
    tau, share = big_t - t_h, mu * (1.0 + e) * vx / vy
    return np.array([
        [-e * big_t, 0.0, 0.0, -vx * tau, 0.0],
        [-mu * (1.0 + e) * big_t, big_t, 0.0, -mu * vx * tau, -(1.0 + e) * vx * tau],
        [0.0, 0.0, t_h + (1.0 - share) * tau, 0.0, 0.0],
        [-e, 0.0, 0.0, -vx, 0.0],
        [-mu * (1.0 + e), 1.0, 0.0, -mu * vx, -(1.0 + e) * vx],
        [0.0, 0.0, 1.0 - share, 0.0, 0.0],
    ])


def wall_hit_gradient(kind, vx, weights):
    """d loss / d(V, v_y, v_z, e, mu) through the rollout of a hit without gravity (e 0.5, mu 0.3)."""
    tape = xsim.Tape()
    loss, model, s, _ = bouncing_loss(kind, np.array([vx, 2.0, 0.0]), 0.5, 0.3, tape, falling=False,
                                      body_mass=0.0, weights=weights)
    tape.backward(loss)
    return np.concatenate([s.particle_qd.grad.numpy()[0],
                           [model.shape_restitution.grad.numpy()[0], model.shape_mu.grad.numpy()[0]]])


@pytest.mark.parametrize("kind", ["collider", "body"])
def test_wall_hit_velocity_gradients_are_the_closed_forms(kind):
    """A static collider or a kinematic body, no gravity: the final velocity's gradients with respect to
    the launch velocity, e and mu are those of the exact answers, wherever in a substep the hit falls."""
    weights = np.array([0.0, 0.0, 0.0, 0.3, -0.2, 0.1])
    closed_form = weights @ wall_hit_jacobian(2.9, 2.0, 0.5, 0.3)
    np.testing.assert_allclose(wall_hit_gradient(kind, 2.9, weights), closed_form, rtol=0, atol=5e-15)


@pytest.mark.parametrize("kind", ["collider", "body"])
def test_wall_hit_pose_gradients_are_the_closed_forms_when_the_hit_ends_a_substep(kind):
    """At V = 3 the hit comes at the end of substep 36 (t_h = 0.15 s), where the rollout's pose is the
    continuous one: its gradients with respect to v_y, v_z, e and mu are those of the closed forms. (Inside a
    substep the particle is held at the wall until the substep ends, and the pose follows that.)"""
    closed_form = np.array(WEIGHTS) @ wall_hit_jacobian(3.0, 2.0, 0.5, 0.3)
    np.testing.assert_allclose(wall_hit_gradient(kind, 3.0, WEIGHTS)[1:], closed_form[1:], rtol=0, atol=5e-15)


def test_restitution_outside_zero_to_one_is_refused_naming_the_call():
    with pytest.raises(ValueError, match=r"add_collider_box: restitution must be in \[0, 1\], got 1.5"):
        ModelBuilder().add_collider_box((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), restitution=1.5)
