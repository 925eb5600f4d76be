"""Two-way coupling of particles (cloth) and rigid bodies in SolverXPBD: momentum exchange, cloth
weight carried by a body, kinematic bodies unaffected, and the gradient of a body's motion with
respect to a particle that hits it (float64 against central finite differences)."""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

G = 9.81


def run(model, solver, steps, dt):
    a, b = model.state(), model.state()
    for _ in range(steps):
        solver.step(a, b, None, dt)
        a, b = b, a
    return a


def particle_hits_sphere(m_particle, m_body, v0, shape="sphere"):
    """No gravity: one particle flying along +x at ``v0`` into a free body at rest."""
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    body = b.add_body(((0.5, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=m_body)
    if shape == "sphere":
        b.add_shape_sphere(body, radius=0.2, mu=0.0)
    else:
        b.add_shape_box(body, hx=0.2, hy=0.2, hz=0.2, mu=0.0)
    b.add_particle((0.0, 0.0, 0.0), vel=(v0, 0.0, 0.0), mass=m_particle, radius=0.02)
    return b.finalize(dtype=xsim.float64, requires_grad=True)


@pytest.mark.parametrize("shape", ["sphere", "box"])
def test_particle_hitting_a_free_body_conserves_momentum_and_sticks_inelastically(shape):
    m, big_m, v0 = 0.2, 1.0, 3.0
    model = particle_hits_sphere(m, big_m, v0, shape)
    final = run(model, SolverXPBD(model, substeps=10, iterations=2), 30, 1.0 / 60.0)
    vp = final.particle_qd.numpy()[0]
    vb = final.body_qd.numpy()[0, :3]
    momentum = m * vp + big_m * vb
    # exact to rounding: measured within 1.4e-14 kg m/s and 1.2e-14 m/s
    np.testing.assert_allclose(momentum, [m * v0, 0.0, 0.0], rtol=0, atol=2e-13)
    # restitution 0 (the shapes' default): they leave together at the common velocity
    common = m * v0 / (m + big_m)
    np.testing.assert_allclose([vb, vp], [[common, 0.0, 0.0]] * 2, rtol=0, atol=2e-13)
    assert np.abs(final.body_qd.numpy()[0, 3:]).max() < 1e-9  # head-on through the centre: no spin


KE_DRIVE, M_BOX = 2000.0, 1.0


def cloth_on_sprung_box():
    """A 1 kg box (0.6 x 0.6 x 0.1 m) on a vertical prismatic drive (ke 2000 N/m, kd 40 N s/m) with a
    5 x 5 cloth (36 particles of 0.04 kg) dropped on it from 1 cm above its top."""
    ke, m_box = KE_DRIVE, M_BOX
    b = ModelBuilder()
    box = b.add_body(((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(box, hx=0.3, hy=0.3, hz=0.05)
    b.add_joint_prismatic(-1, box, parent_xform=((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 0.0, 1.0),
                          target_q=0.0, target_ke=ke, target_kd=40.0)
    cloth_mass = 0.04  # per particle: 36 particles, 1.44 kg in all
    b.add_cloth_grid(pos=(-0.2, -0.2, 1.07), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=5, dim_y=5,
                     cell_x=0.08, cell_y=0.08, mass=cloth_mass, particle_radius=0.01)
    for body in b.bodies:
        body["mass"] = m_box
    return b.finalize(dtype=xsim.float64)


def test_cloth_lying_on_a_sprung_body_weighs_on_its_joint():
    """A box on a vertical prismatic drive (stiffness ke) sags by m g / ke; with a cloth lying on it
    the sag is (m_box + m_cloth) g / ke: the cloth's weight reaches the joint through the contacts."""
    ke, m_box = KE_DRIVE, M_BOX
    model = cloth_on_sprung_box()
    m_cloth = model.particle_mass.numpy().sum()
    final = run(model, SolverXPBD(model, substeps=10, iterations=4), 180, 1.0 / 60.0)
    sag = -final.joint_q.numpy()[0]
    expected = (m_box + m_cloth) * G / ke
    assert abs(sag - expected) < 0.05 * expected, (sag, expected, m_box * G / ke)
    # the cloth lies on the box top
    z = final.particle_q.numpy()[:, 2]
    top = final.body_q.numpy()[0, 2] + 0.05
    assert np.all(np.abs(z - (top + 0.01)) < 2e-3)


def test_cloth_on_a_damped_sprung_body_never_gains_mechanical_energy():
    """After the cloth lands, the box-cloth system has only dissipation (the drive's damping, inelastic
    contact): its mechanical energy (kinetic + gravity + drive spring) must never increase. Velocities
    are the substep means (a particle reports its mean plus g h / 2, a body its mean)."""
    model = cloth_on_sprung_box()
    dt, substeps = 1.0 / 60.0, 10
    solver = SolverXPBD(model, substeps=substeps, iterations=4)
    m_p = model.particle_mass.numpy()
    g = np.array(model.gravity)

    def energy(s):
        v = s.particle_qd.numpy() - g * (0.5 * dt / substeps)
        vb = s.body_qd.numpy()[0]
        z = s.particle_q.numpy()[:, 2]
        return (0.5 * (m_p[:, None] * v * v).sum() + G * (m_p * z).sum() + 0.5 * M_BOX * (vb[:3] @ vb[:3])
                + G * M_BOX * s.body_q.numpy()[0, 2] + 0.5 * KE_DRIVE * s.joint_q.numpy()[0] ** 2)

    a, b = model.state(), model.state()
    energies, landed = [], False
    for _ in range(120):
        solver.step(a, b, None, dt)
        a, b = b, a
        landed = landed or (a.particle_q.numpy()[:, 2].max() < a.body_q.numpy()[0, 2] + 0.05 + 0.01 + 1e-3)
        if landed:
            energies.append(energy(a))
    assert len(energies) > 100
    assert np.abs(a.body_qd.numpy()[0, 3:]).max() < 1e-9  # symmetric: the box does not tilt (no angular energy)
    increase = np.diff(energies)
    assert increase.max() < 1e-6, (increase.max(), int(increase.argmax()))  # J; the swing is ~0.05 J
    assert energies[0] - energies[-1] > 0.05  # the drive's damping did take the landing's energy out


def test_kinematic_body_is_not_pushed_by_particles():
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    body = b.add_body(((0.5, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=0.0)
    b.add_shape_sphere(body, radius=0.2)
    b.add_particle((0.0, 0.0, 0.0), vel=(3.0, 0.0, 0.0), mass=1.0, radius=0.02)
    model = b.finalize(dtype=xsim.float64)
    final = run(model, SolverXPBD(model, substeps=10, iterations=2), 30, 1.0 / 60.0)
    np.testing.assert_array_equal(final.body_q.numpy()[0], [0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert final.particle_q.numpy()[0, 0] <= 0.5 - 0.22 + 1e-9  # stopped at the sphere's surface


@xsim.kernel
def body_x_loss(body_q: xsim.array(dtype=xsim.transformd), loss: xsim.array(dtype=xsim.float64)):
    q = body_q[0]
    loss[0] = q.p[0] + 0.3 * q.p[1] + 0.7 * q.q[2]


def test_body_pose_gradient_wrt_the_velocity_of_a_particle_that_hits_it():
    """An off-centre hit (friction on): the body's final position and spin depend on the particle's
    launch velocity only through the two-way contact."""
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    body = b.add_body(((0.5, 0.05, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=1.0)
    b.add_shape_box(body, hx=0.2, hy=0.2, hz=0.2, mu=0.5)
    # positions and speeds off round numbers: no substep may end exactly touching (a switch, where
    # finite differences straddle two branches)
    b.add_particle((0.013, -0.05, 0.0), vel=(2.93, 0.4, 0.0), mass=0.3, radius=0.02)
    model = b.finalize(dtype=xsim.float64, requires_grad=True)
    solver = SolverXPBD(model, substeps=5, iterations=2)

    def loss_of(v0, tape=None):
        states = [model.state()]
        states[0].particle_qd = xsim.array(v0, dtype=xsim.vec3d, requires_grad=True)
        for _ in range(12):
            states.append(model.state())
            solver.step(states[-2], states[-1], None, 1.0 / 60.0)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        xsim.launch(body_x_loss, 1, inputs=[states[-1].body_q], outputs=[loss])
        return states[0].particle_qd, loss

    v0 = np.array([[2.93, 0.4, 0.0]])
    tape = xsim.Tape()
    with tape:
        v, loss = loss_of(v0)
    tape.backward(loss)
    grad = v.grad.numpy()[0]
    assert abs(grad[0]) > 1e-3  # the body does respond to the particle
    eps = 1e-6
    for k in range(3):
        vp, vm = v0.copy(), v0.copy()
        vp[0, k] += eps
        vm[0, k] -= eps
        fd = (loss_of(vp)[1].numpy()[0] - loss_of(vm)[1].numpy()[0]) / (2 * eps)
        assert abs(grad[k] - fd) < 1e-5 * max(1.0, abs(fd)), (k, grad[k], fd)
