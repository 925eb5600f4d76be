"""Tetrahedral soft bodies in SolverXPBD (xsim/solvers/xpbd/tetrahedra.py): rest and free flight exact, an
inverted element recovered, a tet's stiffness independent of its neighbours, and whole-rollout gradients
with respect to positions, Young's modulus, Poisson's ratio and damping against float64 central differences
(single tets to 1e-6, a 5x5x5 block's 50-step rollout to 1%)."""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

Q0 = (0.0, 0.0, 0.0, 1.0)


@xsim.kernel
def weighted_sum(q: xsim.array(dtype=xsim.vec3d), qd: xsim.array(dtype=xsim.vec3d),
                 wq: xsim.array(dtype=xsim.vec3d), wqd: xsim.array(dtype=xsim.vec3d),
                 loss: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.dot(q[i], wq[i]) + xsim.dot(qd[i], wqd[i]))


def run(model, steps: int, dt: float, substeps: int = 2, iterations: int = 5, q0=None, qd0=None):
    """The states of ``steps`` steps from the model's initial state (or ``q0``/``qd0``)."""
    solver = SolverXPBD(model, substeps=substeps, iterations=iterations)
    s = model.state()
    if q0 is not None:
        s.particle_q = q0
    if qd0 is not None:
        s.particle_qd = qd0
    states = [s]
    for _ in range(steps):
        nxt = model.state()
        solver.step(states[-1], nxt, None, dt)
        states.append(nxt)
    return states


def block(dim=1, E=2e4, nu=0.3, damp=0.0, gravity=(0.0, 0.0, -9.81), requires_grad=False, fix_left=False):
    b = ModelBuilder(gravity=gravity)
    b.add_soft_grid(pos=(0.0, 0.0, 0.5), rot=Q0, vel=(0.0, 0.0, 0.0), dim_x=dim, dim_y=dim, dim_z=dim,
                    cell_x=0.1 / dim, cell_y=0.1 / dim, cell_z=0.1 / dim, density=500.0, youngs_modulus=E,
                    poisson_ratio=nu, k_damp=damp, fix_left=fix_left)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def test_a_block_at_rest_stays_at_rest_and_falls_freely_in_one_piece():
    model = block(dim=2, gravity=(0.0, 0.0, 0.0))
    x0 = model.particle_q.numpy()
    assert np.abs(run(model, 30, 1 / 60)[-1].particle_q.numpy() - x0).max() < 1e-12
    model = block(dim=2)
    t = 30 / 60
    x = run(model, 30, 1 / 60)[-1].particle_q.numpy()
    np.testing.assert_allclose(x - x0, np.tile([0.0, 0.0, -0.5 * 9.81 * t * t], (len(x), 1)), atol=1e-10)


def test_mass_comes_from_density_and_rest_volume():
    model = block(dim=3)
    assert model.tet_count == 5 * 27
    np.testing.assert_allclose(model.tet_rest_volume.numpy().sum(), 1e-3, rtol=1e-12)
    np.testing.assert_allclose(model.particle_mass.numpy().sum(), 0.5, rtol=1e-12)


def test_a_squashed_and_an_inverted_tet_recover_their_rest_shape_without_nan():
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    rest = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.1, 0.0], [0.0, 0.0, 0.1]])
    b.add_soft_mesh(pos=(0.0, 0.0, 0.0), rot=Q0, scale=1.0, vel=(0.0, 0.0, 0.0), vertices=rest,
                    indices=[0, 1, 2, 3], density=1000.0, youngs_modulus=1e4, poisson_ratio=0.4, k_damp=50.0)
    model = b.finalize(dtype=xsim.float64)
    for apex in ((0.0, 0.0, 0.0), (0.02, 0.03, -0.05)):  # flat (det F = 0), then through (det F < 0)
        q0 = rest.copy()
        q0[3] = apex
        x = run(model, 120, 1 / 60, substeps=4, iterations=10, q0=xsim.array(q0, dtype=xsim.vec3d))[-1]
        x = x.particle_q.numpy()
        assert np.isfinite(x).all()
        d = x[1:] - x[0]
        assert np.linalg.det(d.T) / 6.0 == pytest.approx(1e-3 / 6.0, rel=0.02)


def test_a_tets_stiffness_does_not_depend_on_its_neighbours():
    """Mass splitting: the stretch of a hanging bar from a lone column of cells and the same bar meshed
    finer across (more tets per vertex) agree, as they must for the same material. (With 20 substeps of 20
    iterations they stretch 2.4 and 3.2% too far, with 20 of 40 0.9 and 1.0%: XPBD's static answer needs the
    iterations to converge.)"""
    def stretch(n):
        b = ModelBuilder(gravity=(0.0, -9.81, 0.0))
        b.add_soft_grid(pos=(0.0, 0.0, 0.0), rot=Q0, vel=(0.0, 0.0, 0.0), dim_x=n, dim_y=4, dim_z=n,
                        cell_x=0.05 / n, cell_y=0.1, cell_z=0.05 / n, density=1000.0, youngs_modulus=2e5,
                        poisson_ratio=0.0, k_damp=2e3, fix_top=True)
        model = b.finalize(dtype=xsim.float64)
        x = run(model, 60, 1 / 60, substeps=20, iterations=40)[-1].particle_q.numpy()
        x0 = model.particle_q.numpy()
        return -(x - x0)[np.abs(x0[:, 1]) < 1e-9, 1].mean()

    exact = 1000.0 * 9.81 * 0.4 ** 2 / (2 * 2e5)  # rho g L^2 / (2 E) at nu = 0
    one, two = stretch(1), stretch(2)
    assert one == pytest.approx(exact, rel=0.02) and two == pytest.approx(exact, rel=0.02)
    assert one == pytest.approx(two, rel=0.01)


# -- gradients ---------------------------------------------------------------------------------------------


def fd(loss_of, host: np.ndarray, index, eps: float) -> float:
    """Central difference of ``loss_of()`` in ``host[index]`` (a view of a model or state array)."""
    old = np.copy(host[index])
    host[index] = old + eps
    up = loss_of()
    host[index] = old - eps
    down = loss_of()
    host[index] = old
    return (up - down) / (2 * eps)


def rollout_loss(model, q0, weights, steps, dt, **kw):
    states = run(model, steps, dt, q0=q0, **kw)
    loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    xsim.launch(weighted_sum, model.particle_count, inputs=[states[-1].particle_q, states[-1].particle_qd, *weights],
                outputs=[loss])
    return loss


def gradient_problem(model, steps, dt, seed, **kw):
    rng = np.random.default_rng(seed)
    n = model.particle_count
    weights = [xsim.array(rng.normal(size=(n, 3)), dtype=xsim.vec3d),
               xsim.array(rng.normal(size=(n, 3)) * 0.1, dtype=xsim.vec3d)]
    q0 = xsim.array(model.particle_q.numpy() + rng.normal(size=(n, 3)) * 0.004, dtype=xsim.vec3d,
                    requires_grad=True)
    with xsim.Tape() as tape:
        loss = rollout_loss(model, q0, weights, steps, dt, **kw)
    tape.backward(loss)

    def loss_of():
        return rollout_loss(model, xsim.array(q0.numpy(), dtype=xsim.vec3d), weights, steps, dt, **kw).numpy()[0]
    return q0, loss_of


@pytest.mark.parametrize("damp", [0.0, 30.0])
def test_single_tet_gradients_match_float64_central_differences(damp):
    b = ModelBuilder()
    rest = np.array([[0.0, 0.0, 0.0], [0.1, 0.01, 0.0], [0.02, 0.1, 0.0], [0.01, 0.02, 0.1]])
    b.add_soft_mesh(pos=(0.0, 0.0, 1.0), rot=Q0, scale=1.0, vel=(0.0, 0.0, 0.0), vertices=rest, indices=[0, 1, 2, 3],
                    density=1000.0, youngs_modulus=5e3, poisson_ratio=0.3, k_damp=damp)
    b.pin_particle(0)
    model = b.finalize(dtype=xsim.float64, requires_grad=True)
    q0, loss_of = gradient_problem(model, 6, 1 / 60, seed=3, substeps=2, iterations=3)
    checks = [(q0.grad.numpy(), q0.numpy(), (i, c), 1e-6) for i in range(1, 4) for c in range(3)]
    checks += [(model.tet_youngs_modulus.grad.numpy(), model.tet_youngs_modulus.numpy(), 0, 1e-3),
               (model.tet_poisson_ratio.grad.numpy(), model.tet_poisson_ratio.numpy(), 0, 1e-6)]
    if damp:
        checks.append((model.tet_damping.grad.numpy(), model.tet_damping.numpy(), 0, 1e-5))
    scale = max(abs(g[i]) for g, _, i, _ in checks)
    assert abs(model.tet_youngs_modulus.grad.numpy()[0]) * 5e3 > 1e-3 * scale  # the material matters here
    for grad, host, index, eps in checks:
        assert grad[index] == pytest.approx(fd(loss_of, host, index, eps), rel=1e-6, abs=1e-9 * scale), index


def test_a_5x5x5_block_rollout_gradient_matches_central_differences():
    """50 steps of a block pinned on one side, swinging down and back: the gradients of a weighted sum of
    its final positions and velocities with respect to E, nu and some initial positions (the issue asks 1%;
    they agree to 1e-7)."""
    model = block(dim=5, E=1e4, nu=0.35, damp=5.0, requires_grad=True, fix_left=True)
    q0, loss_of = gradient_problem(model, 50, 1 / 60, seed=5, substeps=2, iterations=4)
    E = model.tet_youngs_modulus
    nu = model.tet_poisson_ratio
    gE, gnu = E.grad.numpy(), nu.grad.numpy()
    # one tet's material, and all tets' together (the whole block's E and nu, as a fit moves them)
    host_E, host_nu = E.numpy(), nu.numpy()
    # measured agreement: 1e-7 relative or better; the issue asks 1%
    assert gE[7] == pytest.approx(fd(loss_of, host_E, 7, 1e-1), rel=1e-4)
    assert gnu[7] == pytest.approx(fd(loss_of, host_nu, 7, 1e-6), rel=1e-4)
    assert gE.sum() == pytest.approx(fd(loss_of, host_E, slice(None), 1e-1), rel=1e-4)
    assert gnu.sum() == pytest.approx(fd(loss_of, host_nu, slice(None), 1e-6), rel=1e-4)
    g = q0.grad.numpy()
    host = q0.numpy()
    for i in np.argsort(-np.abs(g).max(axis=1))[:3]:
        c = int(np.argmax(np.abs(g[i])))
        assert g[i, c] == pytest.approx(fd(loss_of, host, (i, c), 1e-6), rel=1e-4)
