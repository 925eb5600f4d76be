"""`xsim optimize` and the [optimize] table: the two shipped fitting scenes recover their hidden
values (loss down >= 100x, parameters within 5%), the outputs are written, and bad [optimize]
tables are refused with the key path."""

from pathlib import Path

import numpy as np
import pytest
import tomllib

import xsim
from xsim import SceneError
from xsim.cli import main
from xsim.io import load_scene, simulate
from xsim.optim.scene import run_optimize
from xsim.io.scene import _check_scene

REPO = Path(__file__).parents[2]
SCENES = REPO / "scenes"


def test_xsim_optimize_throws_the_ball_through_the_hoop(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)                      # [optimize].output = "out", relative to here
    assert main(["optimize", str(SCENES / "throw_ball.toml")]) == 0
    captured = capsys.readouterr()
    assert "loss=" in captured.err and "10/10" in captured.err     # the progress bar shows the loss
    fitted = load_scene(tmp_path / "out" / "throw_ball_fitted.toml")
    np.testing.assert_allclose(fitted.bodies[0]["velocity"], (2.0, -1.0, 4.5), rtol=0.05)
    assert fitted.optimize is None
    for name in ("throw_ball_loss.png", "throw_ball_fitted.usda"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    losses = [float(w) for w in captured.out.split("loss ")[1].split()[:3:2]]
    assert losses[0] / losses[1] >= 100.0


def test_fit_drape_recovers_stretch_and_bend(tmp_path):
    scene = load_scene(SCENES / "fit_drape.toml")
    scene.optimize.output = tmp_path
    result = run_optimize(scene)
    assert result.losses[0] / result.losses[-1] >= 100.0
    assert abs(result.values["cloth[0].compliance.stretch"] / 1.0e-3 - 1.0) < 0.05
    assert abs(result.values["cloth[0].compliance.bend"] / 30.0 - 1.0) < 0.05
    fitted = tomllib.loads(result.scene_file.read_text())
    assert fitted["cloth"][0]["compliance"]["stretch"] == result.values["cloth[0].compliance.stretch"]
    assert "optimize" not in fitted


def test_recorded_drape_is_the_hidden_compliances_rollout():
    raw = tomllib.loads((SCENES / "fit_drape.toml").read_text())
    raw.pop("optimize")
    raw["cloth"][0]["compliance"].update(stretch=1.0e-3, bend=30.0)
    scene = _check_scene(raw, SCENES / "fit_drape.toml")
    run = simulate(scene, model=scene.builder().finalize(device="cpu", dtype=xsim.float64))
    np.testing.assert_allclose(np.load(SCENES / "fit_drape_target.npz")["positions"], run.frames, atol=1e-12)


BALL = """
[sim]
frames = 10
[[body]]
name = "ball"
[[body.shape]]
type = "sphere"
radius = 0.1
[[cloth]]
name = "sheet"
grid = { dim = [2, 2], cell = [0.1, 0.1] }
"""


@pytest.mark.parametrize("optimize,key,message", [
    ('optimizer = "adamw"\n', "optimize.optimizer", 'expected one of "lbfgs", "adam", "sgd"'),
    ('iteration = 3\n', "optimize.iteration", "did you mean 'iterations'?"),
    ('[[optimize.parameter]]\nkey = "cloth[3].compliance.stretch"\n', "optimize.parameter[0].key",
     "expected an existing cloth (the scene has 1 [[cloth]] tables)"),
    ('[[optimize.parameter]]\nkey = "cloth[0].compliance.strech"\n', "optimize.parameter[0].key",
     "expected one of cloth[N].compliance.stretch"),
    ('[[optimize.parameter]]\nkey = "body[0].velocity"\nlog = true\n', "optimize.parameter[0].log",
     "expected false for a vector value"),
    ('[[optimize.parameter]]\nkey = "body[0].velocity"\nbounds = [1.0, -1.0]\n', "optimize.parameter[0].bounds",
     "expected [lower, upper] with lower < upper"),
    ('[[optimize.parameter]]\nkey = "cloth[0].compliance.bend"\nlog = true\nbounds = [0.0, 1.0]\n',
     "optimize.parameter[0].bounds", "expected a lower bound > 0 for a log-space value"),
    ('[[optimize.target]]\ntype = "point"\nbody = "bal"\nframe = 5\nposition = [0, 0, 0]\n',
     "optimize.target[0].body", "expected the name of a body: ball"),
    ('[[optimize.target]]\ntype = "point"\nbody = "ball"\nframe = 50\nposition = [0, 0, 0]\n',
     "optimize.target[0].frame", "expected a frame <= 10"),
    ('[[optimize.target]]\ntype = "recorded"\nfile = "nope.npz"\nframes = [1]\n', "optimize.target[0].file",
     "expected an existing NPZ or USD file"),
])
def test_bad_optimize_tables_name_the_key_path(tmp_path, optimize, key, message):
    default_param = '[[optimize.parameter]]\nkey = "body[0].velocity"\n'
    default_target = '[[optimize.target]]\ntype = "point"\nbody = "ball"\nframe = 5\nposition = [0, 0, 0]\n'
    text = BALL + "[optimize]\n" + optimize
    if "optimize.parameter" not in optimize:
        text += default_param
    if "optimize.target" not in optimize:
        text += default_target
    path = tmp_path / "s.toml"
    path.write_text(text)   # plain [optimize] keys first, then its sub-tables, as TOML needs
    with pytest.raises(SceneError) as info:
        load_scene(path)
    assert info.value.key == key
    assert message in str(info.value)


def test_a_particle_target_beyond_the_cloth_is_refused_when_run(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(BALL + '[optimize]\n[[optimize.parameter]]\nkey = "cloth[0].velocity"\n'
                    '[[optimize.target]]\ntype = "point"\ncloth = "sheet"\nparticle = 9\nframe = 5\n'
                    'position = [0, 0, 0]\n')
    scene = load_scene(path)
    scene.optimize.output = tmp_path
    with pytest.raises(SceneError, match=r"optimize.target\[0\].particle: expected a particle index < 9"):
        run_optimize(scene)


def test_a_log_space_value_must_start_positive(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(BALL + '[optimize]\n[[optimize.parameter]]\nkey = "cloth[0].compliance.stretch"\nlog = true\n'
                    '[[optimize.target]]\ntype = "point"\ncloth = "sheet"\nparticle = 3\nframe = 5\n'
                    'position = [0, 0, 0]\n')
    scene = load_scene(path)
    scene.optimize.output = tmp_path
    with pytest.raises(SceneError, match=r"optimize.parameter\[0\].log: expected a positive starting value of "
                                         r"cloth\[0\].compliance.stretch"):
        run_optimize(scene)


def test_optimize_without_an_optimize_table_is_an_error(capsys):
    assert main(["optimize", str(SCENES / "flag.toml")]) == 2
    assert "no [optimize] table" in capsys.readouterr().err


@pytest.mark.parametrize("settings", ['optimizer = "sgd"\nlearning_rate = 1.5\nmomentum = 0.3\niterations = 20',
                                      'optimizer = "adam"\nlearning_rate = 0.3\niterations = 60'])
def test_sgd_and_adam_also_fit_the_throw(tmp_path, settings):
    text = (SCENES / "throw_ball.toml").read_text().replace('optimizer = "lbfgs"\niterations = 10', settings)
    assert settings in text
    path = tmp_path / "throw.toml"
    path.write_text(text)
    scene = load_scene(path)
    scene.optimize.output = tmp_path
    result = run_optimize(scene)
    assert len(result.losses) == scene.optimize.iterations + 1
    assert result.losses[0] / result.losses[-1] >= 100.0
    np.testing.assert_allclose(result.values["body[0].velocity"], (2.0, -1.0, 4.5), rtol=0.05)


def test_a_cloth_velocity_fits_positions_recorded_in_a_usd_file(tmp_path):
    from xsim.io import write_usd

    cloth = "[sim]\nframes = 6\n[[cloth]]\nname = \"sheet\"\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\n"
    recorded = tmp_path / "recorded.toml"
    recorded.write_text(cloth.replace('name = "sheet"', 'name = "sheet"\nvelocity = [0.5, -0.25, 1.0]'))
    hidden = load_scene(recorded)
    run = simulate(hidden)
    write_usd(tmp_path / "recorded.usda", run.frames, hidden.parts, [], fps=60.0)
    path = tmp_path / "fit.toml"
    path.write_text(cloth + '[optimize]\n[[optimize.parameter]]\nkey = "cloth[0].velocity"\n'
                    '[[optimize.target]]\ntype = "recorded"\nfile = "recorded.usda"\nframes = [3, 6]\n')
    scene = load_scene(path)
    scene.optimize.output = tmp_path / "out"
    result = run_optimize(scene)
    assert result.losses[0] / result.losses[-1] >= 100.0
    np.testing.assert_allclose(result.values["cloth[0].velocity"], (0.5, -0.25, 1.0), rtol=1e-4)


def test_a_recorded_npz_of_the_wrong_shape_is_refused(tmp_path):
    np.savez(tmp_path / "bad.npz", positions=np.zeros((7, 4, 3)))
    path = tmp_path / "fit.toml"
    path.write_text("[sim]\nframes = 6\n[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\n"
                    '[optimize]\n[[optimize.parameter]]\nkey = "cloth[0].velocity"\n'
                    '[[optimize.target]]\ntype = "recorded"\nfile = "bad.npz"\nframes = [3]\n')
    scene = load_scene(path)
    scene.optimize.output = tmp_path
    with pytest.raises(SceneError, match=r"optimize.target\[0\].file: expected positions of shape "
                                         r"\(frames \+ 1, 9, 3\), found shape \(7, 4, 3\)"):
        run_optimize(scene)
