"""Objectives over chosen parameters (whole arrays, slices, one shared value, log space), checked
against float64 central finite differences of the same rollout; scipy's L-BFGS-B on a rollout."""

import numpy as np
import pytest

import xsim
from xsim.autodiff import checkpointed_rollout
from xsim.optim import Objective, Parameter, add_squared_distance, minimize, new_loss
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

STEPS, DT = 8, 1.0 / 60.0


def cloth():
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=3, dim_y=2,
                     cell_x=0.1, cell_y=0.1, mass=0.01, fix_left=True, stretch_compliance=2e-3,
                     shear_compliance=2e-3, bend_compliance=10.0)
    model = b.finalize(device="cpu", dtype=xsim.float64, requires_grad=True)
    return model, SolverXPBD(model, substeps=2, iterations=3), model.state()


def objective(checkpointed: bool):
    model, solver, state0 = cloth()
    rng = np.random.default_rng(0)
    target = state0.particle_q.numpy() + rng.normal(scale=0.05, size=state0.particle_q.numpy().shape)
    control = model.control()

    def loss_of(state):
        loss = new_loss(state.particle_q)
        add_squared_distance(loss, state.particle_q, target)
        return loss

    def simulate():
        if checkpointed:
            return checkpointed_rollout(lambda a, b, i: solver.step(a, b, control, DT), state0, STEPS, loss_of,
                                        segment=3, state_factory=model.state)
        states = [state0] + [model.state() for _ in range(STEPS)]
        for k in range(STEPS):
            solver.step(states[k], states[k + 1], control, DT)
        return loss_of(states[-1])

    params = [Parameter(model.spring_compliance, shared=True, log=True, name="stretch"),
              Parameter(state0.particle_qd, index=slice(4, 8), name="velocity"),
              Parameter(model.bending_compliance, log=True, name="bend")]
    return Objective(simulate, params)


@pytest.mark.parametrize("checkpointed", [False, True])
def test_objective_gradient_matches_finite_differences(checkpointed):
    obj = objective(checkpointed)
    x = obj.x0() + np.random.default_rng(1).normal(scale=0.1, size=obj.size)
    assert obj.size == 1 + 4 * 3 + len(obj.params[2].rows)
    loss, grad = obj(x)
    eps = 1e-6
    fd = np.empty_like(grad)
    for i in range(len(x)):
        e = np.zeros_like(x)
        e[i] = eps
        fd[i] = (obj(x + e)[0] - obj(x - e)[0]) / (2 * eps)
    assert np.abs(grad[:13]).min() > 0   # the checked entries are not trivially zero
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.abs(grad).max())
    assert obj(x)[0] == pytest.approx(loss, rel=1e-12)


def test_shared_value_writes_every_entry_times_its_scale():
    model, _, _ = cloth()
    n = model.spring_compliance.shape[0]
    p = Parameter(model.spring_compliance, shared=True, scale=np.arange(1, n + 1))
    p.set_value(np.array([0.5]))
    np.testing.assert_allclose(model.spring_compliance.numpy(), 0.5 * np.arange(1, n + 1))
    assert p.value() == pytest.approx([0.5])


def test_bad_parameter_choices_are_refused():
    model, _, _ = cloth()
    with pytest.raises(ValueError, match="selects no element"):
        Parameter(model.spring_compliance, index=slice(0, 0))
    with pytest.raises(ValueError, match="positive values"):
        Parameter(model.spring_compliance, log=True, bounds=(-1.0, 1.0))
    with pytest.raises(ValueError, match="leave no room"):
        Parameter(model.spring_compliance, bounds=(2.0, 1.0))
    obj = Objective(lambda: xsim.zeros(3), [Parameter(model.spring_compliance)])
    with pytest.raises(TypeError, match="one-element loss array"):
        obj(obj.x0())


def test_minimize_lbfgsb_throws_a_particle_onto_a_target():
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_particle(pos=(0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), mass=1.0, radius=0.05)
    model = b.finalize(device="cpu", dtype=xsim.float64, requires_grad=True)
    solver, control, state0 = SolverXPBD(model, substeps=1, iterations=1), model.control(), model.state()
    hidden = np.array([2.0, -1.0, 4.5])
    steps = 20
    dt = 1.0 / steps

    def landing():
        states = [state0] + [model.state() for _ in range(steps)]
        for k in range(steps):
            solver.step(states[k], states[k + 1], control, dt)
        return states[-1].particle_q

    state0.particle_qd[:] = [hidden]
    target = landing().numpy()
    state0.particle_qd[:] = [(0.0, 0.0, 0.0)]

    def simulate():
        q = landing()
        loss = new_loss(q)
        add_squared_distance(loss, q, target)
        return loss

    result = minimize(simulate, [Parameter(state0.particle_qd, bounds=(-10.0, 10.0))], maxiter=20)
    assert result.losses[0] / result.losses[-1] >= 1e6
    np.testing.assert_allclose(result.fitted[0], hidden, rtol=1e-4)
    np.testing.assert_allclose(state0.particle_qd.numpy()[0], hidden, rtol=1e-4)


def test_minimize_takes_a_plain_function_with_a_start():
    result = minimize(lambda x: (float((x - 3.0) @ (x - 3.0)), 2.0 * (x - 3.0)), x0=np.zeros(2), maxiter=10)
    np.testing.assert_allclose(result.x, [3.0, 3.0], atol=1e-8)
    assert result.losses[0] == 18.0
    with pytest.raises(ValueError, match="needs x0"):
        minimize(lambda x: (0.0, x))
