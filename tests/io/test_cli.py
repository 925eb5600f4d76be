"""The xsim command: argument handling, `xsim check`, `xsim info`, the progress bar."""

import io
import subprocess
import sys
from pathlib import Path

import pytest

import xsim
from xsim.cli import Progress, default_scene, main

REPO = Path(__file__).parents[2]


def test_check_accepts_a_good_scene(capsys):
    assert main(["check", str(REPO / "scenes" / "mesh_drop.toml")]) == 0
    out = capsys.readouterr().out
    assert "mesh_drop.toml: ok (1 cloth, 2 colliders, 120 frames of 0.0166667 s)" in out


def test_check_reports_a_bad_scene_with_exit_status_2(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text("[sim]\nsubstep = 4\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xsim: error: {path}: sim.substep: expected one of the keys")
    assert "did you mean 'substeps'?" in err


def test_python_dash_m_xsim_runs_the_cli():
    result = subprocess.run([sys.executable, "-m", "xsim", "check", "scenes/flag.toml"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "xsim: scenes/flag.toml: ok (1 cloth, 2 colliders, 150 frames of 0.0166667 s)"


def test_info_names_devices_compiler_and_cache(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("XSIM_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert {"xsim", "device cpu", "devices cuda", "compiler", "kernel cache"} <= set(lines)
    assert str(tmp_path / "cache") in lines["kernel cache"]
    assert "g++" in lines["compiler"] or "clang++" in lines["compiler"]


@pytest.mark.parametrize("argv,message", [
    (["run", "--frames", "0"], "expected at least 1 frame, got 0"),
    (["run", "--frames", "ten"], "expected a whole number of frames, got 'ten'"),
    (["run", "--device", "gpu"], "expected \"cpu\" or \"cuda:N\" (e.g. cuda:0), got 'gpu'"),
    (["walk"], "invalid choice: 'walk'"),
    ([], "the following arguments are required"),
])
def test_bad_arguments_exit_with_usage_message(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_run_of_a_missing_scene_is_a_one_line_error(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert capsys.readouterr().err == f"xsim: error: {tmp_path / 'nope.toml'}: scene file not found\n"


def test_default_scene_is_the_shipped_drape(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)                      # no scenes/ here: falls back to the checkout's
    assert default_scene() == REPO / "scenes" / "drape.toml"


def test_progress_bar_counts_frames_and_stays_silent_on_short_runs():
    quiet = Progress(total=5, substeps=1, stream=io.StringIO(), delay=60.0)
    for k in range(1, 6):
        quiet(k, 5)
    assert quiet.stream.getvalue() == ""
    shown = Progress(total=5, substeps=1, stream=io.StringIO(), delay=0.0)
    for k in range(1, 6):
        shown(k, 5, loss=0.25)
    text = shown.stream.getvalue()
    assert "5/5" in text and "frame/s" in text and "loss=0.25" in text and text.endswith("\n")


def test_a_frame_of_many_substeps_moves_the_bar_in_fractions_of_a_frame():
    """A first frame of 10^7 substeps showed nothing for as long as it ran: substep reports move the bar
    (throttled to ``refresh_seconds``; here 0), the frame's end is the frame count's."""
    shown = Progress(total=5, substeps=1000, stream=io.StringIO(), delay=0.0)
    shown.refresh_seconds = 0.0
    shown.substep(1, 250, 1000)
    assert "0.25/5" in shown.stream.getvalue() and "frame/s" in shown.stream.getvalue()
    shown.substep(1, 1000, 1000)  # the last substep leaves the frame to __call__
    assert shown.bar.n == 0.25
    shown(1, 5)
    assert shown.bar.n == 1
    throttled = Progress(total=5, substeps=1000, stream=io.StringIO(), delay=0.0)
    throttled.substep(1, 1, 1000)
    throttled.substep(1, 2, 1000)  # within refresh_seconds of the first: not shown
    assert throttled.bar.n == 0.001


def test_simulate_reports_every_substep_of_every_frame(tmp_path):
    from xsim.io.rollout import simulate
    from xsim.io.scene import load_scene
    path = tmp_path / "s.toml"
    path.write_text("[sim]\nframes = 2\nsubsteps = 3\n[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\n")
    calls = []
    simulate(load_scene(path), on_substep=lambda *a: calls.append(a))
    assert calls == [(1, 1, 3), (1, 2, 3), (1, 3, 3), (2, 1, 3), (2, 2, 3), (2, 3, 3)]


@xsim.kernel
def _concrete_kernel(x: xsim.array(dtype=float)):
    x[xsim.tid()] = 1.0


def test_compiling_is_its_own_phase_before_the_first_frame(tmp_path, monkeypatch, capsys):
    # A fresh kernel cache: the solver's modules must compile, and the run says so before any frame.
    from xsim.kernels import module as kmodule

    pending = [kmodule.get_module("xsim.solvers.xpbd.kernels_float32")]  # one the cloth solver launches
    monkeypatch.setattr(kmodule, "pending_modules", lambda prefix, dev, debug, backward=False: pending)
    scene = tmp_path / "s.toml"
    scene.write_text("[sim]\nframes = 3\n[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\n")
    assert main(["run", str(scene), "--progress", "--no-preview", "--out", str(tmp_path / "s.usda")]) == 0
    err = capsys.readouterr().err
    assert err.index("compiling solver kernels (first run only, 1 modules)...") < err.index("3/3")


def test_pending_modules_are_the_ones_missing_from_the_kernel_cache(tmp_path, monkeypatch):
    from xsim.device import get_device
    from xsim.kernels.module import build_modules, get_module, pending_modules

    name = _concrete_kernel.module_name
    monkeypatch.setattr(get_module(name), "builds", {})
    monkeypatch.setenv("XSIM_CACHE_DIR", str(tmp_path / "cache"))
    cpu = get_device("cpu")
    assert name in [m.name for m in pending_modules(name, cpu, False)]
    build_modules(pending_modules(name, cpu, False), cpu, False)
    assert pending_modules(name, cpu, False) == []


def test_a_run_compiles_ahead_only_the_modules_its_solver_was_handed(monkeypatch):
    """A rigid solver made earlier in the process registered the rigid modules; a cloth scene's run builds
    its own solver's modules ahead of the first frame, not those (nor the other precision's)."""
    from xsim.io.rollout import simulate
    from xsim.io.scene import load_scene
    from xsim.kernels import module as kmodule
    from xsim.solvers import SolverXPBD

    rigid = load_scene(REPO / "scenes" / "box_stack.toml")
    SolverXPBD(rigid.builder().finalize(device="cpu", dtype=xsim.float64))
    every = [m for m in kmodule._MODULES.values() if m.name.startswith("xsim.") and m.kernels]
    assert any("contacts_rigid_float64" in m.name for m in every)
    monkeypatch.setattr(kmodule, "pending_modules", lambda *a, **k: every)  # as if none were in the cache
    built = []
    monkeypatch.setattr(kmodule, "build_modules", lambda modules, *a, **k: built.extend(m.name for m in modules))
    simulate(load_scene(REPO / "scenes" / "drape.toml"), frames=1, device="cpu")
    assert sorted(built) == ["xsim.solvers.xpbd.kernels_float32", "xsim.solvers.xpbd.particle_contacts_float32"]


@pytest.mark.skipif(xsim.is_cuda_available(), reason="this machine has a GPU")
def test_run_on_cuda_without_a_gpu_says_what_is_missing(capsys):
    assert main(["run", str(REPO / "scenes" / "flag.toml"), "--device", "cuda:0", "--frames", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("xsim: error: device 'cuda:0' needs CUDA, but ")
    assert err.count("\n") == 1


def test_run_with_a_gif_preview_writes_an_animation(tmp_path, capsys):
    import imageio.v3 as iio

    scene = tmp_path / "s.toml"
    scene.write_text("[sim]\nframes = 4\n[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\n")
    gif = tmp_path / "s.gif"
    assert main(["run", str(scene), "--quiet", "--preview", str(gif), "--out", str(tmp_path / "s.usda")]) == 0
    assert iio.imread(gif, index=None).shape[0] == 5          # frames 0..4
    assert f"wrote {gif}" in capsys.readouterr().out
