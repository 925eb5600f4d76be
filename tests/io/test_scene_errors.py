"""A malformed scene file raises xsim.SceneError naming the file, the key path, what was expected
and what was found."""

import textwrap
from pathlib import Path

import pytest

import xsim
from xsim.io import load_scene

CLOTH = """
[[cloth]]
grid = { dim = [4, 4], cell = [0.1, 0.1] }
"""

# (scene text, key path in the message, expected-fragment, found-fragment)
CASES = {
    "unknown key suggests the close match": (
        CLOTH + "compliance = { strech = 1.0e-6 }\n",
        "cloth[0].compliance.strech", "one of the keys stretch, shear, bend", "did you mean 'stretch'?"),
    "unknown top-level table suggests the close match": (
        "[[cloths]]\nmass = 1.0\n", "cloths", "[[cloth]]", "did you mean 'cloth'?"),
    "wrong type for a number": (
        '[sim]\ndt = "fast"\n', "sim.dt", "a number > 0", '"fast" (a string)'),
    "negative mass in the second cloth": (
        CLOTH + CLOTH + "mass = -0.5\n", "cloth[1].mass", "a number > 0", "-0.5 (a float)"),
    "negative compliance names the nested key path": (
        CLOTH + CLOTH + "compliance = { stretch = -1.0 }\n",
        "cloth[1].compliance.stretch", "a number >= 0", "-1.0 (a float)"),
    "stiffness and compliance for the same stretch": (
        CLOTH + "stiffness = { stretch = 50.0 }\ncompliance = { shear = 1e-3 }\n",
        "cloth[0].stiffness.stretch", "either stiffness.stretch or compliance.shear", "both"),
    "stiffness and compliance for the same bending": (
        CLOTH + "stiffness = { bend = 0.01 }\ncompliance = { bend = 10.0 }\n",
        "cloth[0].stiffness.bend", "either stiffness.bend or compliance.bend", "both"),
    "a zero stiffness": (
        CLOTH + "stiffness = { stretch = 0.0 }\n", "cloth[0].stiffness.stretch", "a number > 0", "0.0 (a float)"),
    "negative damping": (
        CLOTH + "damping = { bend = -1.0 }\n", "cloth[0].damping.bend", "a number >= 0", "-1.0 (a float)"),
    "density and mass": (
        CLOTH + "density = 0.2\nmass = 0.01\n", "cloth[0].density", "either density or mass", "both"),
    "gravity of the wrong length": (
        "[sim]\ngravity = [0.0, -9.81]\n", "sim.gravity", "an array of 3 numbers", "[0.0, -9.81] (an array of 2)"),
    "an element of a vector of the wrong type": (
        '[sim]\ngravity = [0.0, 0.0, "down"]\n', "sim.gravity[2]", "a number", '"down" (a string)'),
    "zero substeps": (
        "[sim]\nsubsteps = 0\n", "sim.substeps", "an integer >= 1", "0 (an integer)"),
    "fractional substeps": (
        "[sim]\nsubsteps = 2.5\n", "sim.substeps", "an integer >= 1", "2.5 (a float)"),
    "a boolean is not a number": (
        "[sim]\nframes = true\n", "sim.frames", "an integer >= 1", "true (a boolean)"),
    "misspelled collider type": (
        '[[collider]]\ntype = "shpere"\n', "collider[0].type", '"sphere"', "did you mean 'sphere'?"),
    "restitution above one": (
        '[[collider]]\ntype = "sphere"\ncenter = [0.0, 0.0, 0.0]\nradius = 1.0\nrestitution = 1.5\n',
        "collider[0].restitution", "a number >= 0 and <= 1", "1.5 (a float)"),
    "missing collider type": (
        "[[collider]]\nradius = 1.0\n", "collider[0].type", '"ground"', "the key is missing"),
    "missing required key": (
        '[[collider]]\ntype = "sphere"\ncenter = [0.0, 0.0, 0.0]\n', "collider[0].radius",
        "a value (radius in metres)", "nothing (the key is missing)"),
    "key of another collider type": (
        '[[collider]]\ntype = "box"\ncenter = [0.0, 0.0, 0.0]\nhalf_extents = [1.0, 1.0, 1.0]\nradius = 1.0\n',
        "collider[0].radius", "center, half_extents, rotation", "an unknown key"),
    "cloth with both a grid and a mesh": (
        CLOTH + 'mesh = "cloth.obj"\n', "cloth[0]", "exactly one of grid", "both"),
    "cloth with neither a grid nor a mesh": (
        "[[cloth]]\nmass = 0.1\n", "cloth[0]", "exactly one of grid", "neither"),
    "pin on an edge that does not exist": (
        CLOTH + 'pin = ["up"]\n', "cloth[0].pin[0]", '"left", "right", "top", "bottom"', '"up" (a string)'),
    "no copies of the scene": (
        "replicate = 0\n" + CLOTH, "replicate", "an integer >= 1", "0 (an integer)"),
    "spacing of two numbers": (
        "replicate = 4\nspacing = [1.0, 2.0]\n" + CLOTH, "spacing", "an array of 3", "[1.0, 2.0]"),
    "grid with zero cells": (
        "[[cloth]]\ngrid = { dim = [0, 4], cell = [0.1, 0.1] }\n", "cloth[0].grid.dim[0]", "an integer >= 1",
        "0 (an integer)"),
    "a body without shapes": (
        "[[body]]\nmass = 1.0\n", "body[0].shape", "a value (an array of tables [[body.shape]])",
        "nothing (the key is missing)"),
    "a joint without its type": (
        "[[joint]]\nparent = 0\n", "joint[0].type", '"revolute"', "the key is missing"),
    "duplicate names": (
        CLOTH + 'name = "a"\n' + CLOTH + 'name = "a"\n', "cloth[1].name", "a name not used before",
        "already the name of cloth[0]"),
    "a zero quaternion": (
        CLOTH + "rotation = [0.0, 0.0, 0.0, 0.0]\n", "cloth[0].rotation", "a non-zero quaternion", "(an array of 4)"),
    "a rotation that is neither form": (
        CLOTH + "rotation = 90.0\n", "cloth[0].rotation", "{axis = [x, y, z], degrees = a}", "90.0 (a float)"),
    "an unknown device": (
        '[sim]\ndevice = "gpu"\n', "sim.device", '"cpu" or "cuda:N"', '"gpu" (a string)'),
    "an output file that is not USD": (
        '[output]\nusd = "out/x.txt"\n', "output.usd", ".usda, .usdc or .usd", '"out/x.txt"'),
    "a table where an array of tables belongs": (
        "[cloth]\nmass = 1.0\n", "cloth", "an array of tables [[cloth]]", "a table"),
    "an array where a table belongs": (
        "[[sim]]\ndt = 0.01\n", "sim", "a table [sim]", "(an array of 1)"),
    "shear compliance on a mesh cloth": (
        '[[cloth]]\nmesh = "sheet.obj"\ncompliance = { shear = 1.0 }\n', "cloth[0].compliance.shear",
        "grids only", "1.0 (a float)"),
}


@pytest.mark.parametrize("text,key,expected,found", CASES.values(), ids=CASES.keys())
def test_malformed_scene_error_names_file_key_expected_and_found(tmp_path, text, key, expected, found):
    (tmp_path / "sheet.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    path = tmp_path / "scene.toml"
    path.write_text(text)
    with pytest.raises(xsim.SceneError) as info:
        load_scene(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}: expected ")
    assert expected in message
    assert found in message
    assert info.value.key == key


def test_bad_toml_syntax_names_line_and_column(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text(textwrap.dedent("""\
        [sim]
        dt = 0.01
        frames = = 3
    """))
    with pytest.raises(xsim.SceneError) as info:
        load_scene(path)
    assert str(info.value).startswith(f"{path}:3:10: bad TOML syntax: ")
    assert (info.value.line, info.value.col) == (3, 10)


def test_missing_mesh_file_names_the_resolved_path(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_text('[[collider]]\ntype = "mesh"\nmesh = "meshes/nothere.obj"\n')
    with pytest.raises(xsim.SceneError) as info:
        load_scene(path)
    message = str(info.value)
    assert message.startswith(f"{path}: collider[0].mesh: expected an existing mesh file")
    assert str(tmp_path / "meshes" / "nothere.obj") in message


def test_unreadable_mesh_file_is_a_scene_error(tmp_path):
    (tmp_path / "junk.obj").write_text("this is not a mesh\n")
    path = tmp_path / "scene.toml"
    path.write_text('[[collider]]\ntype = "mesh"\nmesh = "junk.obj"\n')
    with pytest.raises(xsim.SceneError, match=r"collider\[0\]\.mesh: expected a mesh file"):
        load_scene(path)


def test_missing_scene_file_is_a_scene_error(tmp_path):
    with pytest.raises(xsim.SceneError, match="scene file not found"):
        load_scene(tmp_path / "nothing.toml")


def test_scene_file_content_is_never_evaluated(tmp_path):
    path = tmp_path / "scene.toml"
    marker = tmp_path / "pwned"
    path.write_text(f'[sim]\ndt = "__import__(\'pathlib\').Path(\'{marker}\').touch() or 0.01"\n')
    with pytest.raises(xsim.SceneError, match="sim.dt: expected a number > 0"):
        load_scene(path)
    assert not marker.exists()


def test_shipped_scenes_pass_the_check():
    scenes = sorted((Path(__file__).parents[2] / "scenes").glob("*.toml"))
    assert {p.name for p in scenes} >= {"drape.toml", "flag.toml", "mesh_drop.toml", "box_stack.toml",
                                        "pendulum_chain.toml", "cloth_on_moving_box.toml"}
    for path in scenes:
        scene = load_scene(path)
        assert scene.cloths or scene.bodies or scene.robots or scene.particles, path


def test_replicating_a_scene_with_optimize_is_refused(tmp_path):
    path = tmp_path / "scene.toml"
    path.write_text("replicate = 2\n" + (Path(__file__).parents[2] / "scenes" / "throw_ball.toml").read_text())
    with pytest.raises(xsim.SceneError) as info:
        load_scene(path)
    assert str(info.value).startswith(f"{path}: replicate: expected 1 in a scene with [optimize]")
