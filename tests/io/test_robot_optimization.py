"""examples/kuka_reach.py, reduced: the gradient of an imported URDF arm's flange miss with respect to its
joint drive targets, through a whole rollout on a Tape, equals central finite differences, and descent
along it brings the flange to the point."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("yourdfpy", reason="URDF import needs yourdfpy: pip install 'xsim[urdf]'")
pytest.importorskip("pybullet_data", reason="the KUKA arm is pybullet's: pip install 'xsim[test]'")

_spec = importlib.util.spec_from_file_location("xsim_example_kuka_reach",
                                               Path(__file__).parents[2] / "examples" / "kuka_reach.py")
kuka_reach = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kuka_reach)


def test_flange_miss_gradient_wrt_drive_targets_matches_finite_differences():
    arm = kuka_reach.Kuka(seconds=0.2)
    goal = arm.flange_at((0.9, -0.6))
    targets = np.array([0.6, -1.0])
    loss, grad = arm.loss_and_grad(targets, goal)
    fd = np.zeros(2)
    for i in range(2):
        e = np.zeros(2)
        e[i] = 1e-6
        miss = [np.sum((arm.flange_at(targets + s * e) - goal) ** 2) for s in (1.0, -1.0)]
        fd[i] = (miss[0] - miss[1]) / 2e-6
    np.testing.assert_allclose(grad, fd, rtol=1e-4)
    assert loss > 1e-3 and np.abs(grad).max() > 1e-3


def test_descent_on_the_drive_targets_brings_the_flange_to_the_point():
    # measured (examples/kuka_reach.py, 30 iterations): 2.0e-2 -> 6.2e-5 m^2 (320x); here 12
    _, losses, _, _ = kuka_reach.fit(iterations=12, verbose=False)
    assert losses[-1] < losses[0] / 10.0
