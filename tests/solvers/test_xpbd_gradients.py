"""Whole-rollout gradients of SolverXPBD against central finite differences (float64).

The scene is a small cloth with stretch, shear and bending constraints that falls onto the
ground and onto a sphere; the loss weighs its final positions and velocities with fixed random
weights. Contacts switch on during the rollout, but the set of active contacts does not change
under the tiny finite-difference perturbations, so the rollout is smooth where it is probed.
"""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

STEPS = 40
DT = 1.0 / 120.0


@xsim.kernel
def weighted_sum(q: xsim.array(dtype=xsim.vec3d), qd: xsim.array(dtype=xsim.vec3d),
                 wq: xsim.array(dtype=xsim.vec3d), wqd: xsim.array(dtype=xsim.vec3d),
                 loss: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.dot(q[i], wq[i]) + xsim.dot(qd[i], wqd[i]))


def make_model(requires_grad=True):
    b = ModelBuilder()
    b.add_cloth_grid(pos=(-0.15, -0.15, 0.08), rot=(0.0871557, 0.0, 0.0, 0.9961947), vel=(0.3, 0.1, -1.2),
                     dim_x=3, dim_y=3, cell_x=0.1, cell_y=0.1, mass=0.05, stretch_compliance=1e-3,
                     shear_compliance=2e-3, bend_compliance=5.0, particle_radius=0.01)
    b.add_ground_plane(mu=0.4)
    b.add_collider_sphere((0.12, 0.05, -0.02), 0.07, mu=0.3)
    return b.finalize(requires_grad=requires_grad, dtype=xsim.float64)


def rollout(model, qd0, weights, tape=None):
    """Loss after STEPS steps from the model's initial positions and velocities ``qd0``."""
    solver = SolverXPBD(model, substeps=2, iterations=5)
    s = model.state()
    s.particle_qd = qd0
    states = [s]
    for _ in range(STEPS):
        nxt = model.state()
        solver.step(states[-1], nxt, None, DT)
        states.append(nxt)
    loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    xsim.launch(weighted_sum, model.particle_count, inputs=[states[-1].particle_q, states[-1].particle_qd,
                                                            weights[0], weights[1]], outputs=[loss])
    return loss, states


@pytest.fixture(scope="module")
def problem():
    model = make_model()
    rng = np.random.default_rng(7)
    n = model.particle_count
    weights = [xsim.array(rng.normal(size=(n, 3)), dtype=xsim.vec3d),
               xsim.array(rng.normal(size=(n, 3)) * 0.1, dtype=xsim.vec3d)]
    qd0 = xsim.array(model.particle_qd.numpy() + rng.normal(size=(n, 3)) * 0.05, dtype=xsim.vec3d,
                     requires_grad=True)
    with xsim.Tape() as tape:
        loss, states = rollout(model, qd0, weights)
    tape.backward(loss)
    return model, weights, qd0, loss, states


def fd(model, weights, qd0, array, index, component, eps=1e-7):
    """Central difference of the loss in one float component of ``array``."""
    host = array.numpy()
    old = host[index][component] if host.ndim > 1 else host[index]
    values = []
    for sign in (1.0, -1.0):
        if host.ndim > 1:
            host[index, component] = old + sign * eps
        else:
            host[index] = old + sign * eps
        loss, _ = rollout(model, xsim.array(qd0.numpy(), dtype=xsim.vec3d), weights)
        values.append(loss.numpy()[0])
    if host.ndim > 1:
        host[index, component] = old
    else:
        host[index] = old
    return (values[0] - values[1]) / (2 * eps)


def assert_close(analytic, numeric, scale):
    assert abs(analytic - numeric) <= 1e-4 * abs(numeric) + 1e-8 * scale, (analytic, numeric)


def test_the_rollout_touches_ground_and_sphere(problem):
    model, _, _, _, states = problem
    z = np.stack([s.particle_q.numpy()[:, 2] for s in states])
    assert z.min() < 0.0105 and (z[-1] < 0.0105).sum() >= 2  # resting on the ground (radius 0.01)
    centre = model.shape_xform.numpy()[0, :3]  # the sphere collider: shape 0 (the ground is the last)
    d = np.linalg.norm(states[-1].particle_q.numpy() - centre, axis=1)
    assert d.min() < 0.07 + 0.0105


def test_gradient_wrt_initial_velocities_matches_finite_differences(problem):
    model, weights, qd0, _, _ = problem
    g = qd0.grad.numpy()
    scale = np.abs(g).max()
    assert scale > 0.005
    for i in range(model.particle_count):
        for c in range(3):
            assert_close(g[i, c], fd(model, weights, qd0, qd0, i, c), scale)


def test_gradient_wrt_a_stretch_compliance_matches_finite_differences(problem):
    model, weights, qd0, _, _ = problem
    g = model.spring_compliance.grad.numpy()
    scale = np.abs(g).max()
    for c in np.argsort(-np.abs(g))[:3]:
        assert_close(g[c], fd(model, weights, qd0, model.spring_compliance, c, None, eps=1e-9), scale)


def test_gradient_wrt_the_collider_position_matches_finite_differences(problem):
    model, weights, qd0, _, _ = problem
    g = model.shape_xform.grad.numpy()[0, :3]  # the sphere collider's position
    scale = np.abs(g).max()
    assert scale > 1e-3
    for c in range(3):
        assert_close(g[c], fd(model, weights, qd0, model.shape_xform, 0, c), scale)


def test_mesh_collider_rollout_gradient_matches_finite_differences():
    """A particle lands on a tilted trimesh slab and slides (two substeps per step): the gradient
    of its final position with respect to the slab's position."""
    import trimesh
    b = ModelBuilder()
    b.add_collider_mesh(trimesh.creation.box(extents=(2.0, 2.0, 0.2)), pos=(0.0, 0.0, -0.1),
                        rot=(0.0, 0.1305262, 0.0, 0.9914449), mu=0.2)
    b.add_particle((0.1, 0.05, 0.15), vel=(0.2, 0.1, -0.5), radius=0.02)
    model = b.finalize(requires_grad=True, dtype=xsim.float64)
    w = xsim.array(np.array([[0.3, -0.7, 1.1]]), dtype=xsim.vec3d)
    zero = xsim.zeros(1, dtype=xsim.vec3d)

    def loss_of(tape=None):
        solver = SolverXPBD(model, substeps=2, iterations=3)
        states = [model.state()]
        for _ in range(30):
            states.append(model.state())
            solver.step(states[-2], states[-1], None, DT)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        xsim.launch(weighted_sum, 1, inputs=[states[-1].particle_q, states[-1].particle_qd, w, zero], outputs=[loss])
        return loss, states

    with xsim.Tape() as tape:
        loss, states = loss_of()
    tape.backward(loss)
    assert states[-1].particle_q.numpy()[0, 2] < 0.1  # it did land on the slab
    g = model.shape_xform.grad.numpy()[0, :3].copy()  # the slab's position
    assert np.abs(g).max() > 0.1
    host = model.shape_xform.numpy()
    for c in range(3):
        values = []
        for sign in (1.0, -1.0):
            host[0, c] += sign * 1e-7
            values.append(loss_of()[0].numpy()[0])
            host[0, c] -= sign * 1e-7
        assert_close(g[c], (values[0] - values[1]) / 2e-7, np.abs(g).max())


def test_gradient_wrt_damping_and_compliance_of_a_damped_cloth_matches_finite_differences():
    """A hanging cloth whose particles sit in many constraints (mass splitting) with stretch and
    bend damping: the gradient of a rollout's loss with respect to one spring's and one bending
    stencil's damping (from zero for one of them) and compliance."""
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=3, dim_y=2,
                     cell_x=0.1, cell_y=0.1, mass=0.02, fix_left=True, stretch_compliance=2e-3, shear_compliance=5e-3,
                     bend_compliance=20.0, stretch_damping=0.5, bend_damping=0.02)
    b.spring_damping[0] = 0.0
    model = b.finalize(requires_grad=True, dtype=xsim.float64)
    rng = np.random.default_rng(11)
    n = model.particle_count
    weights = [xsim.array(rng.normal(size=(n, 3)), dtype=xsim.vec3d), xsim.array(rng.normal(size=(n, 3)) * 0.1,
                                                                               dtype=xsim.vec3d)]

    def loss_of():
        solver = SolverXPBD(model, substeps=2, iterations=4)
        states = [model.state()]
        for _ in range(20):
            states.append(model.state())
            solver.step(states[-2], states[-1], None, DT)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        xsim.launch(weighted_sum, n, inputs=[states[-1].particle_q, states[-1].particle_qd, *weights], outputs=[loss])
        return loss

    with xsim.Tape() as tape:
        loss = loss_of()
    tape.backward(loss)
    for array, index in ((model.spring_damping, 0), (model.spring_damping, 5), (model.bending_damping, 1),
                         (model.spring_compliance, 3), (model.bending_compliance, 2)):
        eps = 1e-5 * abs(array.numpy()[index]) or 1e-6
        g = array.grad.numpy()
        host = array.numpy()
        values = []
        for sign in (1.0, -1.0):
            host[index] += sign * eps
            values.append(loss_of().numpy()[0])
            host[index] -= sign * eps
        numeric = (values[0] - values[1]) / (2 * eps)
        assert abs(numeric) > 1e-6
        assert_close(g[index], numeric, np.abs(g).max())


def test_a_solver_reuses_a_dead_tapes_arrays_and_never_a_live_ones():
    model = make_model()
    solver = SolverXPBD(model, substeps=2, iterations=3)
    rng = np.random.default_rng(11)
    seed = rng.normal(size=(model.particle_count, 3))

    def record():
        states = [model.state(requires_grad=True) for _ in range(4)]
        tape = xsim.Tape()
        with tape:
            for i in range(3):
                solver.step(states[i], states[i + 1], None, DT)
        return tape, states

    def backward(tape, states):
        tape.backward(grads={states[-1].particle_q: seed})
        return states[0].particle_qd.grad.numpy().copy()

    first = backward(*record())  # its tape and states are dropped here
    arrays = sum(len(r) for r in solver.buffers._rings.values())
    live_tape, live_states = record()
    assert sum(len(r) for r in solver.buffers._rings.values()) == arrays  # all reused
    third = backward(*record())  # the live tape's arrays are taken: new ones
    assert sum(len(r) for r in solver.buffers._rings.values()) == 2 * arrays
    np.testing.assert_array_equal(backward(live_tape, live_states), first)
    np.testing.assert_array_equal(third, first)


def test_the_unzeroed_gradient_pool_gives_the_gradients_of_the_zeroed_one(monkeypatch):
    """The solver's intermediates are ``written_first``, so the backward pass reuses their gradient
    buffers without zeroing them; with the promise withdrawn (every reused buffer zeroed) the
    gradients are the same to the bit."""
    from xsim.array import intermediate
    from xsim.solvers.xpbd import buffers as buffers_module

    grads = []
    for written_first in (True, False):
        rng = np.random.default_rng(5)
        monkeypatch.setattr(buffers_module, "intermediate",
                            lambda shape, dtype, device, written_first=False, scratch=False, keep=written_first:
                            intermediate(shape, dtype, device, written_first=keep, scratch=scratch))
        model = make_model()
        n = model.particle_count
        weights = [xsim.array(np.random.default_rng(7).normal(size=(n, 3)), dtype=xsim.vec3d),
                   xsim.array(np.ones((n, 3)) * 0.1, dtype=xsim.vec3d)]
        qd0 = xsim.array(model.particle_qd.numpy() + rng.normal(size=(n, 3)) * 0.05, dtype=xsim.vec3d,
                         requires_grad=True)
        with xsim.Tape() as tape:
            loss, _ = rollout(model, qd0, weights)
        tape.backward(loss)
        grads.append([qd0.grad.numpy().copy()] + [getattr(model, name).grad.numpy().copy() for name in (
            "spring_rest_length", "spring_compliance", "bending_compliance", "particle_inv_mass")])
    for with_pool, zeroed in zip(*grads):
        assert np.abs(zeroed).max() > 0.0
        np.testing.assert_array_equal(with_pool, zeroed)
