"""Restitution and Coulomb friction of particle contacts with static colliders and with body shapes
(``bounce_impulse``), against the exact answers of a point mass hitting a wall, and their gradients
against float64 finite differences through a bouncing rollout."""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

V = 3.0  # m/s, approach speed


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
    assert abs(v[0] - (-e * V)) <= 0.05 * V * max(e, 0.1)
    assert s.particle_q.numpy()[0][0] <= 0.45 + 1e-9  # never inside the wall


@pytest.mark.parametrize("kind", ["collider", "body"])
@pytest.mark.parametrize("vt", [2.0, 1.0])
def test_oblique_hit_loses_tangential_speed_by_coulomb_friction(kind, vt):
    # exact Coulomb for a point mass: the normal impulse is m (1 + e) V, the tangential speed drops by
    # mu times that per unit mass, or to zero if that is more (it sticks)
    e, mu = 0.5, 0.3
    v = simulate(wall_scene(kind, e, mu=mu, vt=vt)).particle_qd.numpy()[0]
    np.testing.assert_allclose(v[0], -e * V, rtol=1e-3)
    np.testing.assert_allclose(v[1], max(0.0, vt - mu * (1.0 + e) * V), atol=1e-3)


def test_a_particle_bouncing_off_a_free_body_conserves_momentum_at_that_restitution():
    e, m_body = 0.5, 3.0
    model = wall_scene("body", e, body_mass=m_body)
    s = simulate(model, steps=12)
    vp = s.particle_qd.numpy()[0][0]
    vb = s.body_qd.numpy()[0][0]
    np.testing.assert_allclose(vp, (1.0 - e * m_body) / (1.0 + m_body) * V, rtol=0.02)
    np.testing.assert_allclose(vb, (1.0 + e) / (1.0 + m_body) * V, rtol=0.02)


@xsim.kernel
def particle_loss(q: xsim.array(dtype=xsim.vec3d), qd: xsim.array(dtype=xsim.vec3d),
                  loss: xsim.array(dtype=xsim.float64)):
    loss[0] = q[0][0] + 0.7 * q[0][1] - 0.4 * q[0][2] + 0.3 * qd[0][0] - 0.2 * qd[0][1] + 0.1 * qd[0][2]


def bouncing_loss(kind, v0, e, mu, tape=None):
    """Loss of a rollout in which the particle, launched at ``v0`` (under gravity, except against the free
    body, which would fall), bounces (sliding) off the wall; with ``tape``, recorded and differentiated."""
    gravity = (0.0, 0.0, 0.0) if kind == "body" else (0.0, 0.0, -9.81)
    model = wall_scene(kind, e, mu=mu, gravity=gravity, body_mass=4.0, requires_grad=True)
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
        xsim.launch(particle_loss, 1, inputs=[states[-1].particle_q, states[-1].particle_qd], outputs=[loss])
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


def test_restitution_outside_zero_to_one_is_refused_naming_the_call():
    with pytest.raises(ValueError, match=r"add_collider_box: restitution must be in \[0, 1\], got 1.5"):
        ModelBuilder().add_collider_box((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), restitution=1.5)
