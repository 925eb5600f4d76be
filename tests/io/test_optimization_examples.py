"""The optimization examples, reduced: the loss drops at least 100x and the hidden parameters come
back within 5%, with gradients taken through whole solver rollouts on a Tape."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"xsim_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


throw_particle = load_example("throw_particle")
fit_cloth_compliance = load_example("fit_cloth_compliance")
fit_soft_material = load_example("fit_soft_material")


def test_throw_gradient_is_the_flight_time_times_twice_the_miss():
    # Free flight: landing = start + v T + gravity term, so d|miss|^2/dv = 2 T miss exactly.
    thrower = throw_particle.Thrower(steps=20)
    target = np.array([1.0, 2.0, 0.5])
    velocity = np.array([0.5, 1.0, 2.0])
    loss, grad = thrower.loss_and_grad(velocity, target)
    _, final = thrower.landing_point(velocity)
    miss = final.particle_q.numpy()[0].astype(np.float64) - target
    assert loss == pytest.approx(miss @ miss, rel=1e-6)
    np.testing.assert_allclose(grad, 2.0 * throw_particle.FLIGHT * miss, rtol=1e-5)


def test_throw_particle_recovers_the_hidden_velocity():
    velocity, losses = throw_particle.fit(iterations=8, steps=20, verbose=False)
    assert losses[0] / losses[-1] >= 100.0
    np.testing.assert_allclose(velocity, throw_particle.HIDDEN_VELOCITY, rtol=0.05)


@pytest.mark.parametrize("cells", [(4, 2), (8, 4)])
def test_fit_cloth_material_recovers_the_same_stiffnesses_on_two_meshes(cells):
    cloth = fit_cloth_compliance.SwingingCloth(cells=cells, frames=20, observed=(10, 20), substeps=4, iterations=4)
    found, losses = fit_cloth_compliance.fit(cloth, iterations=10, verbose=False)
    assert losses[0] / losses[-1] >= 100.0
    for name, hidden in fit_cloth_compliance.HIDDEN.items():
        assert abs(found[name] / hidden - 1.0) < 0.05, (name, found[name], hidden)


def test_cloth_material_gradient_matches_finite_differences():
    """The gradient with respect to the log stiffnesses, through the builder's conversion to
    per-edge compliances and a whole rollout, against central differences of the loss (float64)."""
    cloth = fit_cloth_compliance.SwingingCloth(cells=(4, 2), frames=10, observed=(5, 10), substeps=2, iterations=3)
    target = cloth.target(3.0e3, 0.03)
    x = np.log([1.5e3, 0.06])
    _, grad = cloth.loss_and_grad(x, target)
    eps = 1e-5
    for i in range(2):
        e = np.zeros(2)
        e[i] = eps
        fd = (cloth.loss_and_grad(x + e, target)[0] - cloth.loss_and_grad(x - e, target)[0]) / (2 * eps)
        np.testing.assert_allclose(grad[i], fd, rtol=1e-4)


def test_fit_soft_material_recovers_youngs_modulus_and_poisson_ratio_on_the_same_mesh():
    E, nu, losses = fit_soft_material.fit(1, iterations=20)
    assert E == pytest.approx(fit_soft_material.TRUE_E, rel=0.02)
    assert nu == pytest.approx(fit_soft_material.TRUE_NU, rel=0.02)
    assert losses[0] / losses[-1] > 1000.0
