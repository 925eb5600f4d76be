"""``[[robot]]`` tables of scene files (``xsim.io.robots``): a URDF or MJCF robot placed in a scene, its
joints driven to targets by name; a bad file or joint name is a SceneError naming the key."""

from pathlib import Path

import numpy as np
import pytest

import xsim
from xsim.io import load_scene
from xsim.solvers.xpbd.solver import SolverXPBD

pytest.importorskip("yourdfpy", reason="URDF import needs yourdfpy: pip install 'xsim[urdf]'")
pytest.importorskip("pybullet_data", reason="the robot files are pybullet's: pip install 'xsim[test]'")
SCENE = Path(__file__).parents[2] / "scenes" / "kuka_reach.toml"


def test_kuka_scene_holds_its_joints_at_the_named_targets():
    scene = load_scene(SCENE)
    b = scene.builder()
    model = b.finalize()
    assert [p.name for p in scene.body_parts][:2] == ["kuka_lbr_iiwa_link_0", "kuka_lbr_iiwa_link_1"]
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, substeps=scene.sim.substeps, iterations=scene.sim.iterations)
    for _ in range(150):
        solver.step(s0, s1, None, scene.sim.dt)
        s0, s1 = s1, s0
    q = dict(zip(model.joint_label, s0.joint_q.numpy()))
    # stiff drives (5000 N m/rad) against gravity (tens of N m): within 0.02 rad of the targets
    assert abs(q["lbr_iiwa_joint_2"] - 0.6) < 0.02 and abs(q["lbr_iiwa_joint_4"] + 1.0) < 0.02


def write(tmp_path, robot: str) -> Path:
    path = tmp_path / "robot.toml"
    path.write_text(f"[sim]\nframes = 2\n\n[[robot]]\n{robot}\n")
    return path


def test_mjcf_robot_from_gymnasium_placed_and_fixed():
    pytest.importorskip("mujoco")
    pytest.importorskip("gymnasium")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        scene = load_scene(write(Path(d), 'file = "gymnasium:ant.xml"\nname = "ant"\nposition = [1.0, 0.0, 0.0]\n'
                                          "fixed_base = true"))
    b = scene.builder()
    model = b.finalize()
    assert model.joint_type.numpy()[0] == 3  # the free root welded
    np.testing.assert_allclose(model.body_q.numpy()[0, :3], [1.0, 0.0, 0.75], atol=1e-6)
    assert scene.body_parts[0].name == "ant_torso"


def test_bad_robot_tables_name_the_key(tmp_path):
    with pytest.raises(xsim.SceneError, match=r"robot\[0\]\.joint_targets\.elbow: expected the name of a revolute "
                                              r"or prismatic joint of pybullet_data:kuka_iiwa/model.urdf: lbr_iiwa_joint_1"):
        load_scene(write(tmp_path, 'file = "pybullet_data:kuka_iiwa/model.urdf"\njoint_targets = { elbow = 1.0 }'))
    with pytest.raises(xsim.SceneError, match=r"robot\[0\]\.file: expected a robot file that exists"):
        load_scene(write(tmp_path, 'file = "nowhere.urdf"'))
    with pytest.raises(xsim.SceneError, match=r"robot\[0\]\.file: expected a .urdf or .xml \(MJCF\) file"):
        load_scene(write(tmp_path, 'file = "arm.sdf"'))
    (tmp_path / "broken.urdf").write_text("<robot name='r'><link name='a'>")
    with pytest.raises(xsim.SceneError, match=r"robot\[0\]\.file: expected a URDF file xsim can import.*not well-formed"):
        load_scene(write(tmp_path, 'file = "broken.urdf"'))
