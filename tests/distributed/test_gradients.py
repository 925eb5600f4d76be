"""Data-parallel gradients (examples/fit_many.py): the summed loss and gradient of three recorded
scenes computed in Ray tasks equal the sequential computation to 1e-12 (float64), and the gradient
is the summed loss's finite-difference derivative."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from xsim.distributed import scene_loss_and_grad, summed_loss_and_grad

EXAMPLE = Path(__file__).parents[2] / "examples" / "fit_many.py"


@pytest.fixture(scope="module")
def scene_files(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("xsim_example_fit_many", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_scenes(tmp_path_factory.mktemp("fit_many"))


X = np.log([2.0e-3, 15.0])   # log stretch and bend compliance, between the guess and the hidden values


def test_distributed_loss_and_gradient_equal_the_sequential_ones(local_ray, scene_files):
    loss, grad = summed_loss_and_grad(scene_files, X)
    seq_loss, seq_grad = summed_loss_and_grad(scene_files, X, distributed=False)
    assert loss == pytest.approx(seq_loss, rel=1e-12, abs=0.0)
    np.testing.assert_allclose(grad, seq_grad, rtol=1e-12, atol=0.0)
    # every scene contributes: the sum is not one scene's term
    terms = [scene_loss_and_grad(f, X)[0] for f in scene_files]
    assert len(scene_files) == 3 and min(terms) > 0.0 and loss == pytest.approx(sum(terms), rel=1e-12)


def test_the_summed_gradient_is_the_finite_difference_derivative(scene_files):
    _, grad = summed_loss_and_grad(scene_files, X, distributed=False)
    eps = 1e-6
    for i in range(2):
        step = np.eye(2)[i] * eps
        up = summed_loss_and_grad(scene_files, X + step, distributed=False)[0]
        down = summed_loss_and_grad(scene_files, X - step, distributed=False)[0]
        assert grad[i] == pytest.approx((up - down) / (2 * eps), rel=1e-5)
