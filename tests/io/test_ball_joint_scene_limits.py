"""Ball joint swing and twist limits in scene files: ``cone_limit`` and ``twist_limits`` of a
``[[joint]]`` of type "ball" land in the model, and malformed ones are scene errors."""

import textwrap

import numpy as np
import pytest

import xsim
from xsim.io import load_scene
from xsim.sim.rigid import NO_LIMIT

LINKS = """
[[body]]
name = "a"
position = [0.0, 0.0, 1.0]
[[body.shape]]
type = "box"
half_extents = [0.05, 0.05, 0.2]
[[body]]
name = "b"
position = [0.0, 0.0, 0.6]
[[body.shape]]
type = "box"
half_extents = [0.05, 0.05, 0.2]
"""


def write(tmp_path, text):
    path = tmp_path / "scene.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_ball_joint_cone_and_twist_limits_land_in_the_model(tmp_path):
    path = write(tmp_path, LINKS + """
        [[joint]]
        type = "ball"
        child = "a"
        anchor = [0.0, 0.0, 1.2]
        cone_limit = 0.5
        twist_limits = [-0.25, 0.75]
        [[joint]]
        type = "ball"
        parent = "a"
        child = "b"
        anchor = [0.0, 0.0, 0.8]
        """)
    model = load_scene(path).builder().finalize(device="cpu", dtype=xsim.float64)
    np.testing.assert_allclose(model.joint_cone_limit.numpy(), [0.5, NO_LIMIT])
    np.testing.assert_allclose(model.joint_limit.numpy(), [[-0.25, 0.75], [-NO_LIMIT, NO_LIMIT]])
    np.testing.assert_allclose(model.joint_axis.numpy(), [[0.0, 0.0, 1.0]] * 2)


BALL = LINKS + '[[joint]]\ntype = "ball"\nchild = "a"\n'


@pytest.mark.parametrize("text, key, expected, found", [
    (BALL + "cone_limit = -0.1\n", "joint[0].cone_limit", "a number >= 0", "-0.1 (a float)"),
    (BALL + "twist_limits = [0.5, -0.5]\n", "joint[0].twist_limits", "lower <= upper", "[0.5, -0.5]"),
    (BALL + "twist_limits = 0.5\n", "joint[0].twist_limits", "an array [lower, upper] of 2 numbers", "0.5"),
    (LINKS + '[[joint]]\ntype = "revolute"\nchild = "a"\ncone_limit = 0.5\n', "joint[0].cone_limit",
     "one of the keys", "an unknown key"),
])
def test_malformed_ball_limits_are_scene_errors_naming_the_key(tmp_path, text, key, expected, found):
    path = write(tmp_path, text)
    with pytest.raises(xsim.SceneError) as info:
        load_scene(path)
    err = info.value
    assert str(err).startswith(f"{path}: {key}: expected ")
    assert expected in err.expected and found in str(err), str(err)
