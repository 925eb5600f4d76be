"""xsim beside Newton 1.8 on Newton's ``cloth_hanging`` example (XPBD variant, rebuilt in
``bench/cloth_hanging.py``): the cloth stretches as much and swings the same way. Slow (Newton
compiles its kernels and runs single-threaded on the CPU): marked ``newton``, run with
``-m newton`` (as .ci/run does); newton comes with the ``test`` extra."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.newton

if importlib.util.find_spec("newton") is None:
    pytest.skip("needs newton (pip install -e '.[test]')", allow_module_level=True)

_spec = importlib.util.spec_from_file_location("bench_cloth_hanging",
                                               Path(__file__).parents[2] / "bench" / "cloth_hanging.py")
cloth_hanging = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cloth_hanging)


@pytest.fixture(scope="module")
def runs():
    return cloth_hanging.run_xsim(), cloth_hanging.run_newton()


def test_mean_edge_strain_is_within_25_percent_of_newtons(runs):
    xs, nw = runs
    assert xs["strain"][-1] == pytest.approx(nw["strain"][-1], rel=0.25)
    assert xs["strain"].mean() == pytest.approx(nw["strain"].mean(), rel=0.25)


def test_the_cloth_swings_past_its_pinned_edge_as_newtons_does(runs):
    xs, nw = runs
    for run in (xs, nw):
        com = run["com"]
        assert com[0, 1] > 2.0 and com[:, 1].min() < -0.5  # from 2.45 m across the pinned edge (y = 0)
        low = int(np.argmin(com[:, 2]))
        assert com[-1, 2] > com[low, 2] + 0.15  # and up again on the other side
    assert np.abs(xs["com"] - nw["com"]).max() < 0.25  # m, along the whole run
