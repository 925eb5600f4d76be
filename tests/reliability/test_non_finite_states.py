"""A state that turns non-finite is reported after the frame it happens in, naming the frame and the
first such array: by ``xsim run`` in every mode, by ``SolverXPBD.step`` in debug mode (check mode
also names the kernel). Gravity -3e38 m/s^2 over dt = 1 s overflows float32 in the first frame."""

import numpy as np
import pytest

import xsim
from xsim.cli import main
from xsim.errors import NonFiniteError
from xsim.solvers import SolverXPBD

SCENE = ("[sim]\nframes = 3\ndt = 1.0\nsubsteps = 1\niterations = 1\ngravity = [0.0, 0.0, -3e38]\n"
         "[[cloth]]\ngrid = { dim = [1, 1], cell = [0.1, 0.1] }\nposition = [0.0, 0.0, 1.0]\n")


def test_xsim_run_names_the_frame_and_the_array_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nan.toml").write_text(SCENE)
    assert main(["run", "nan.toml", "--out", "n.usda", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("xsim: error: nan.toml: frame 1 (t = 1 s): 'state.particle_q") and "inf" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.toml"]


def builder():
    b = xsim.sim.ModelBuilder(gravity=(0.0, 0.0, -3e38))
    b.add_particle((0.0, 0.0, 1.0), (0.0, 0.0, -3e38), 1.0)  # v + g dt = -6e38: beyond float32
    return b


@pytest.mark.parametrize("mode, names", [("debug", "'state_out.particle_q' holds -inf"),
                                         ("check", "kernel 'integrate_particles' wrote a non-finite value")])
def test_solver_in_debug_and_check_mode_names_the_step_and_the_array(monkeypatch, mode, names):
    monkeypatch.setattr(xsim.config, "mode", mode)
    model = builder().finalize(device="cpu")
    solver = SolverXPBD(model, substeps=1, iterations=1)
    a, b = model.state(), model.state()
    with pytest.raises(NonFiniteError) as info:
        solver.step(a, b, model.control(), 1.0)
    assert str(info.value).startswith(f"SolverXPBD step 1: {names}")


def test_solver_in_release_mode_runs_on_unchecked():
    model = builder().finalize(device="cpu")
    solver = SolverXPBD(model, substeps=1, iterations=1)
    a, b = model.state(), model.state()
    solver.step(a, b, model.control(), 1.0)
    assert not np.isfinite(b.particle_q.numpy()).all()
