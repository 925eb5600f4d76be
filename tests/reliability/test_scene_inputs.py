"""Reliability, scene files: every value a float32 model cannot hold, every time step the solver
cannot divide by, every grid too large to build and every file that is not a TOML file is a
``xsim.SceneError`` naming the file and the key path (``xsim check`` exits with 2), never a
traceback, a hang or a silently wrong model."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import xsim
from xsim.cli import main
from xsim.io import load_scene

CLOTH = "[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 0.1] }\n"
SPHERE = '[[collider]]\ntype = "sphere"\ncenter = [0.0, 0.0, 0.0]\nradius = 0.5\n'
BOX = '[[collider]]\ntype = "box"\ncenter = [0.0, 0.0, 0.0]\nhalf_extents = [0.5, 0.5, 0.5]\n'
CAPSULE = '[[collider]]\ntype = "capsule"\ncenter = [0.0, 0.0, 0.0]\nradius = 0.1\nhalf_height = 0.5\n'
GROUND = '[[collider]]\ntype = "ground"\n'
BODY = '[[body]]\nname = "a"\nposition = [0.0, 0.0, 1.0]\n'
BALL = '[[body.shape]]\ntype = "sphere"\nradius = 0.1\n'
BOXSHAPE = '[[body.shape]]\ntype = "box"\nhalf_extents = [0.1, 0.1, 0.1]\n'
JOINT = '[[joint]]\ntype = "revolute"\nchild = "a"\n'
BALLJOINT = '[[joint]]\ntype = "ball"\nchild = "a"\n'
REPO = Path(__file__).parents[2]
RANGE = "within float32's normal range"
FINITE = "within float32's range (a magnitude at most 3.4e+38)"

# (scene text, key path named, a fragment of what was expected)
REFUSED = {
    # time step: non-finite, unrepresentable, or a substep whose h^2 / 1/h^2 leave float32
    "dt nan": ("[sim]\ndt = nan\n", "sim.dt", RANGE),
    "dt inf": ("[sim]\ndt = inf\n", "sim.dt", RANGE),
    "dt -inf": ("[sim]\ndt = -inf\n", "sim.dt", RANGE),
    "dt 1e-300": ("[sim]\ndt = 1e-300\n", "sim.dt", RANGE),
    "dt 1e-45 (a float32 denormal)": ("[sim]\ndt = 1e-45\n", "sim.dt", RANGE),
    "dt 1e-20 (1/h^2 overflows)": ("[sim]\ndt = 1e-20\n", "sim.dt", "1/h^2 finite and non-zero in float32"),
    "dt 1e30 (h^2 overflows)": ("[sim]\ndt = 1e30\n", "sim.dt", "h^2 and 1/h^2"),
    "dt 1e39": ("[sim]\ndt = 1e39\n", "sim.dt", RANGE),
    "dt 0": ("[sim]\ndt = 0.0\n", "sim.dt", "a number > 0"),
    "dt negative": ("[sim]\ndt = -0.01\n", "sim.dt", "a number > 0"),
    "substeps 10**18 (h too small)": ("[sim]\nsubsteps = 1000000000000000000\n", "sim.dt", "substeps"),
    "fps nan": ("[output]\nfps = nan\n", "output.fps", RANGE),
    "fps 1e39": ("[output]\nfps = 1e39\n", "output.fps", RANGE),
    # gravity
    "gravity nan": ("[sim]\ngravity = [0.0, 0.0, nan]\n", "sim.gravity[2]", FINITE),
    "gravity -inf": ("[sim]\ngravity = [-inf, 0.0, 0.0]\n", "sim.gravity[0]", FINITE),
    "gravity 1e39": ("[sim]\ngravity = [0.0, 1e39, 0.0]\n", "sim.gravity[1]", FINITE),
    "gravity integer beyond float64": ("[sim]\ngravity = [0, 0, " + "9" * 400 + "]\n", "sim.gravity[2]", FINITE),
    # cloth values
    "cloth mass nan": (CLOTH + "mass = nan\n", "cloth[0].mass", RANGE),
    "cloth mass inf": (CLOTH + "mass = inf\n", "cloth[0].mass", RANGE),
    "cloth mass 1e300": (CLOTH + "mass = 1e300\n", "cloth[0].mass", RANGE),
    "cloth mass 1e-40 (1/mass is inf in float32)": (CLOTH + "mass = 1e-40\n", "cloth[0].mass", RANGE),
    "cloth mass -0.0": (CLOTH + "mass = -0.0\n", "cloth[0].mass", "a number > 0"),
    "stretch compliance nan": (CLOTH + "compliance = { stretch = nan }\n", "cloth[0].compliance.stretch", FINITE),
    "bend compliance 1e39": (CLOTH + "compliance = { bend = 1e39 }\n", "cloth[0].compliance.bend", FINITE),
    "shear compliance inf": (CLOTH + "compliance = { shear = inf }\n", "cloth[0].compliance.shear", FINITE),
    "stretch compliance whose alpha / h^2 overflows": (
        CLOTH + "compliance = { stretch = 1e36 }\n", "cloth[0].compliance.stretch", "compliance / h^2"),
    "particle radius nan": (CLOTH + "particle_radius = nan\n", "cloth[0].particle_radius", RANGE),
    "particle radius denormal": (CLOTH + "particle_radius = 1e-39\n", "cloth[0].particle_radius", RANGE),
    "grid cell nan": ("[[cloth]]\ngrid = { dim = [2, 2], cell = [nan, 0.1] }\n", "cloth[0].grid.cell[0]", RANGE),
    "grid cell 1e39": ("[[cloth]]\ngrid = { dim = [2, 2], cell = [0.1, 1e39] }\n", "cloth[0].grid.cell[1]", RANGE),
    "grid of 10**12 cells": ("[[cloth]]\ngrid = { dim = [1000000, 1000000], cell = [0.1, 0.1] }\n",
                             "cloth[0].grid.dim", "fit in memory"),
    "grid of 10**10 cells": ("[[cloth]]\ngrid = { dim = [100000, 100000], cell = [0.1, 0.1] }\n",
                             "cloth[0].grid.dim", "fit in memory"),
    "grid of 2**62 cells": ("[[cloth]]\ngrid = { dim = [4611686018427387904, 1], cell = [0.1, 0.1] }\n",
                            "cloth[0].grid.dim", "fit in memory"),
    "cloth velocity nan": (CLOTH + "velocity = [nan, 0.0, 0.0]\n", "cloth[0].velocity[0]", FINITE),
    "cloth position inf": (CLOTH + "position = [0.0, inf, 0.0]\n", "cloth[0].position[1]", FINITE),
    # rotations: zero or huge refused (others are normalised, see below)
    "zero quaternion": (CLOTH + "rotation = [0.0, 0.0, 0.0, 0.0]\n", "cloth[0].rotation", "a non-zero quaternion"),
    "huge quaternion": (CLOTH + "rotation = [1e300, 0.0, 0.0, 0.0]\n", "cloth[0].rotation[0]", FINITE),
    "quaternion beyond float32": (CLOTH + "rotation = [0.0, 0.0, 1e39, 1.0]\n", "cloth[0].rotation[2]", FINITE),
    "nan quaternion": (CLOTH + "rotation = [nan, 0.0, 0.0, 1.0]\n", "cloth[0].rotation[0]", FINITE),
    "zero rotation axis": (CLOTH + "rotation = { axis = [0.0, 0.0, 0.0], degrees = 90.0 }\n",
                           "cloth[0].rotation.axis", "a non-zero axis"),
    "nan rotation angle": (CLOTH + "rotation = { axis = [0.0, 0.0, 1.0], degrees = nan }\n",
                           "cloth[0].rotation.degrees", FINITE),
    "huge rotation axis": (CLOTH + "rotation = { axis = [1e39, 0.0, 0.0], degrees = 90.0 }\n",
                           "cloth[0].rotation.axis[0]", FINITE),
    # colliders
    "sphere radius nan": (SPHERE.replace("0.5", "nan"), "collider[0].radius", RANGE),
    "sphere radius 1e39": (SPHERE.replace("0.5", "1e39"), "collider[0].radius", RANGE),
    "sphere center inf": (SPHERE.replace("[0.0, 0.0, 0.0]", "[0.0, 0.0, inf]"), "collider[0].center[2]", FINITE),
    "box half extent nan": (BOX.replace("[0.5, 0.5, 0.5]", "[0.5, nan, 0.5]"), "collider[0].half_extents[1]",
                            RANGE),
    "box zero rotation": (BOX + "rotation = [0.0, 0.0, 0.0, 0.0]\n", "collider[0].rotation", "non-zero"),
    "capsule half height inf": (CAPSULE.replace("half_height = 0.5", "half_height = inf"),
                                "collider[0].half_height", RANGE),
    "ground height nan": (GROUND + "height = nan\n", "collider[0].height", FINITE),
    "ground restitution inf": (GROUND + "restitution = inf\n", "collider[0].restitution", FINITE),
    "collider friction nan": (SPHERE + "mu = nan\n", "collider[0].mu", FINITE),
    # bodies and joints
    "body mass nan": (BODY + "mass = nan\n" + BALL, "body[0].mass", RANGE),
    "body mass 1e39": (BODY + "mass = 1e39\n" + BALL, "body[0].mass", RANGE),
    "body mass denormal (0 would make it kinematic)": (BODY + "mass = 1e-40\n" + BALL, "body[0].mass", RANGE),
    "body velocity nan": (BODY + "velocity = [nan, 0.0, 0.0]\n" + BALL, "body[0].velocity[0]", FINITE),
    "body angular velocity inf": (BODY + "angular_velocity = [0.0, 0.0, inf]\n" + BALL,
                                  "body[0].angular_velocity[2]", FINITE),
    "body density denormal": (BODY + "density = 1e-40\n" + BALL, "body[0].density", RANGE),
    "body zero rotation": (BODY + "rotation = [0.0, 0.0, 0.0, 0.0]\n" + BALL, "body[0].rotation", "non-zero"),
    "shape radius nan": (BODY + BALL.replace("0.1", "nan"), "body[0].shape[0].radius", RANGE),
    "shape half extents 1e39": (BODY + BOXSHAPE.replace("[0.1, 0.1, 0.1]", "[0.1, 0.1, 1e39]"),
                                "body[0].shape[0].half_extents[2]", RANGE),
    "shape zero rotation": (BODY + BALL + "rotation = [0.0, 0.0, 0.0, 0.0]\n", "body[0].shape[0].rotation",
                            "non-zero"),
    "shape restitution nan": (BODY + BALL + "restitution = nan\n", "body[0].shape[0].restitution", FINITE),
    "joint anchor nan": (BODY + BALL + JOINT + "anchor = [nan, 0.0, 0.0]\n", "joint[0].anchor[0]", FINITE),
    "joint axis zero": (BODY + BALL + JOINT + "axis = [0.0, 0.0, 0.0]\n", "joint[0].axis", "non-zero axis"),
    "joint axis nan": (BODY + BALL + JOINT + "axis = [0.0, nan, 1.0]\n", "joint[0].axis[1]", FINITE),
    "joint limits nan": (BODY + BALL + JOINT + "limits = [nan, 1.0]\n", "joint[0].limits[0]", FINITE),
    "joint drive stiffness inf": (BODY + BALL + JOINT + "drive = { stiffness = inf }\n",
                                  "joint[0].drive.stiffness", FINITE),
    "ball cone limit nan": (BODY + BALL + BALLJOINT + "cone_limit = nan\n", "joint[0].cone_limit", FINITE),
    # outputs named in the file
    "preview that is not a PNG": ('[output]\npreview = "out/p.jpg"\n', "output.preview", ".png"),
}


@pytest.mark.parametrize("text,key,expected", REFUSED.values(), ids=REFUSED.keys())
def test_unrepresentable_value_is_a_scene_error_naming_the_key(tmp_path, capsys, text, key, expected):
    path = tmp_path / "scene.toml"
    path.write_text(text)
    with pytest.raises(xsim.SceneError) as info:
        load_scene(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: expected "), message
    assert expected in message
    assert info.value.key == key
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"xsim: error: {path}: {key}: expected ")
    assert path.read_text() == text


# (rotation as written, the unit quaternion the scene holds)
NORMALISED = {
    "scaled identity": ("[0.0, 0.0, 0.0, 2.0]", (0.0, 0.0, 0.0, 1.0)),
    "large but representable": ("[0.0, 0.0, 1e30, 1e30]", (0.0, 0.0, 0.5 ** 0.5, 0.5 ** 0.5)),
    "tiny but representable": ("[3e-30, 0.0, 4e-30, 0.0]", (0.6, 0.0, 0.8, 0.0)),
    "rounded": ("[0.0, 0.0, 0.7071, 0.7071]", (0.0, 0.0, 0.5 ** 0.5, 0.5 ** 0.5)),
}


@pytest.mark.parametrize("written,unit", NORMALISED.values(), ids=NORMALISED.keys())
def test_nonzero_quaternion_is_normalised(tmp_path, written, unit):
    path = tmp_path / "scene.toml"
    path.write_text(CLOTH + f"rotation = {written}\n" + BOX + f"rotation = {written}\n")
    scene = load_scene(path)
    assert scene.cloths[0]["rotation"] == pytest.approx(unit, abs=1e-12)
    assert scene.colliders[0]["rotation"] == pytest.approx(unit, abs=1e-12)


ACCEPTED = {
    "small dt": ("[sim]\ndt = 1e-6\n", lambda s: s.sim.dt == 1e-6),
    "dt at the float32 edge for 10 substeps": ("[sim]\ndt = 2e-18\n", lambda s: s.sim.dt == 2e-18),
    "negative zero gravity": ("[sim]\ngravity = [-0.0, 0.0, -9.81]\n", lambda s: s.sim.gravity == (0.0, 0.0, -9.81)),
    "large representable mass": (CLOTH + "mass = 1e30\n", lambda s: s.cloths[0]["mass"] == 1e30),
    "tiny representable mass": (CLOTH + "mass = 1e-30\n", lambda s: s.cloths[0]["mass"] == 1e-30),
    "zero compliance": (CLOTH + "compliance = { stretch = 0.0, bend = 0.0 }\n",
                        lambda s: s.cloths[0]["compliance"]["bend"] == 0.0),
    # below float32's normal range only rounds towards 0 where 0 means nothing else
    "denormal gravity": ("[sim]\ngravity = [0.0, 1e-45, -9.81]\n", lambda s: s.sim.gravity[1] == 1e-45),
    "denormal compliance": (CLOTH + "compliance = { stretch = 1e-45 }\n",
                            lambda s: s.cloths[0]["compliance"]["stretch"] == 1e-45),
    "denormal position": (CLOTH + "position = [1e-300, 0.0, 0.0]\n", lambda s: s.cloths[0]["position"][0] == 1e-300),
    "an empty file is an empty scene": ("", lambda s: not s.cloths and not s.colliders and not s.bodies),
}


@pytest.mark.parametrize("text,check", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_representable_value_is_accepted(tmp_path, text, check):
    path = tmp_path / "scene.toml"
    path.write_text(text)
    assert check(load_scene(path))


def test_model_of_tiny_mass_keeps_finite_inverse_masses(tmp_path):
    import numpy as np

    path = tmp_path / "scene.toml"
    path.write_text(CLOTH + "mass = 1e-30\n")
    model = load_scene(path).builder().finalize()
    inv = model.particle_inv_mass.numpy()
    assert np.isfinite(inv).all() and inv == pytest.approx(1e30, rel=1e-6)


# -- files that are not TOML files -----------------------------------------------------------------


def xsim_check_in_a_subprocess(path, cwd) -> subprocess.CompletedProcess:
    """``python -m xsim check path``, killed after 60 s: for the files that would hang or be read
    forever without the check (a blocked open cannot be interrupted reliably in-process)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        return subprocess.run([sys.executable, "-m", "xsim", "check", str(path)], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"xsim check {path} hung")


def _dev_zero(tmp_path):
    return "/dev/zero"


def _fifo(tmp_path):
    path = tmp_path / "scene.toml"
    os.mkfifo(path)
    return path


def _loop(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def _dangling(tmp_path):
    path = tmp_path / "scene.toml"
    path.symlink_to(tmp_path / "nowhere.toml")
    return path


def _directory(tmp_path):
    path = tmp_path / "scenes.toml"
    path.mkdir()
    return path


def _random_bytes(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_bytes(bytes(range(256)) * 8)
    return path


def _nul_bytes(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_bytes(b"[sim]\ndt = \x00\x00\n")
    return path


def _deep_arrays(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    return path


def _deep_tables(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_text("x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")
    return path


def _long_dotted_key(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_text("[" + ".".join(["a"] * 5000) + "]\n")
    return path


# (how to make the file, fragment of the message)
NOT_TOML = {
    "a FIFO": (_fifo, "is not a regular file (a FIFO)"),
    "/dev/zero": (_dev_zero, "is not a regular file (a character device)"),
    "a symlink loop": (_loop, "is a symlink loop"),
    "a dangling symlink": (_dangling, "scene file not found"),
    "a directory": (_directory, "is a directory"),
    "random bytes": (_random_bytes, "cannot read the scene file"),
    "NUL bytes": (_nul_bytes, "bad TOML syntax"),
    "arrays nested 5000 deep": (_deep_arrays, "nested too deeply"),
    "inline tables nested 5000 deep": (_deep_tables, "nested too deeply"),
    "a 5000-part dotted table name": (_long_dotted_key, "a: expected one of the tables"),
}


@pytest.mark.parametrize("make,fragment", NOT_TOML.values(), ids=NOT_TOML.keys())
def test_a_file_that_is_not_a_toml_scene_is_refused_without_hanging(tmp_path, capsys, make, fragment):
    path = make(tmp_path)
    if make in (_fifo, _dev_zero):
        result = xsim_check_in_a_subprocess(path, tmp_path)
        code, err = result.returncode, result.stderr
    else:
        with pytest.raises(xsim.SceneError) as info:
            load_scene(path)
        assert str(info.value).startswith(f"{path}:")
        code, err = main(["check", str(path)]), capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"xsim: error: {path}:") and err.count("\n") == 1
    assert fragment in err


@pytest.mark.parametrize("how", ["--frames", "sim.frames"])
def test_more_frames_than_memory_holds_are_refused_before_allocating(tmp_path, capsys, how):
    path = tmp_path / "scene.toml"
    frames = 10**15
    path.write_text(CLOTH if how == "--frames" else f"[sim]\nframes = {frames}\n" + CLOTH)
    extra = ["--frames", str(frames)] if how == "--frames" else []
    assert main(["run", str(path), *extra, "--out", str(tmp_path / "o.usda"), "--no-preview", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xsim: error: {path}: sim.frames: expected frames whose positions fit in memory")
    assert f"found {frames} frames, which need " in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene.toml"]
