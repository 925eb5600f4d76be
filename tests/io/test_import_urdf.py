"""URDF import through yourdfpy (``xsim.io.importers.urdf``) on pybullet_data's robots, which no one here
wrote: links with their inertials, joints with their axes and limits, collision geometry, a 2 s rollout
and a USD export; bad files are refused naming the file and the element."""

import os
import sys

import numpy as np
import pytest

import xsim
from xsim.io.importers.parts import body_parts
from xsim.io.usd import colliders_of, write_usd
from xsim.sim.builder import ModelBuilder
from xsim.sim.kinematics import eval_fk
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers.xpbd.solver import SolverXPBD

yourdfpy = pytest.importorskip("yourdfpy", reason="URDF import needs yourdfpy: pip install 'xsim[urdf]'")
pybullet_data = pytest.importorskip("pybullet_data", reason="the URDF test files are pybullet's: pip install 'xsim[test]'")
DATA = pybullet_data.getDataPath()


def urdf_file(name: str) -> str:
    return os.path.join(DATA, name)


ROBOTS = {
    # file: (add_urdf keywords, ground); r2d2 has collision cylinders, which xsim lacks (skipped explicitly),
    # and its overlapping parts touch each other (xsim has no self-collision filter yet): its rollout is
    # collision-free
    "kuka_iiwa/model.urdf": ({}, False),
    "laikago/laikago_toes_zup.urdf": ({"floating": True, "xform": ((0.0, 0.0, 0.6), (0.0, 0.0, 0.0, 1.0))}, True),
    "r2d2.urdf": ({"floating": True, "collision": False, "xform": ((0.0, 0.0, 0.6), (0.0, 0.0, 0.0, 1.0))}, False),
}


@pytest.mark.parametrize("name", list(ROBOTS))
def test_pybullet_robot_loads_simulates_two_seconds_and_exports_usd(name, tmp_path):
    kw, ground = ROBOTS[name]
    b = ModelBuilder()
    if ground:
        b.add_ground_plane()
    info = b.add_urdf(urdf_file(name), **kw)
    model = b.finalize()
    robot = yourdfpy.URDF.load(urdf_file(name), load_meshes=False, build_scene_graph=False).robot
    assert sorted(info.body) == sorted(link.name for link in robot.links)
    assert model.body_label == [b.bodies[k]["label"] for k in range(model.body_count)]
    masses = {link.name: link.inertial.mass if link.inertial is not None and link.inertial.mass else 0.0
              for link in robot.links}
    np.testing.assert_allclose([model.body_mass.numpy()[info.body[n]] for n in masses], list(masses.values()),
                               rtol=1e-6)
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, substeps=4, iterations=4)
    frames = []
    for _ in range(200):
        solver.step(s0, s1, None, 0.01)
        s0, s1 = s1, s0
        frames.append(s0.body_q.numpy())
    q = np.stack(frames)
    assert np.all(np.isfinite(q))
    if ground:  # it fell onto the ground and stays above it (within 1 cm) and near where it fell
        assert q[-1, :, 2].min() > -0.01 and np.abs(q[-1, 0, :2]).max() < 0.5
    out = write_usd(tmp_path / "robot.usda", np.zeros((len(q), 0, 3)), parts=[], colliders=colliders_of(model),
                    bodies=body_parts(b), body_q=q)
    from pxr import Usd

    stage = Usd.Stage.Open(str(out))
    assert stage.GetEndTimeCode() == len(q) - 1
    assert all(stage.GetPrimAtPath(f"/World/Bodies/{p.name}") for p in body_parts(b))


def test_kuka_joints_and_forward_kinematics_equal_yourdfpys():
    urdf = yourdfpy.URDF.load(urdf_file("kuka_iiwa/model.urdf"), load_meshes=False)
    b = ModelBuilder()
    info = b.add_urdf(urdf_file("kuka_iiwa/model.urdf"))
    model = b.finalize(dtype=xsim.float64)
    joints = [j for j in urdf.robot.joints if j.type != "fixed"]
    assert model.joint_label == [j.name for j in joints]
    np.testing.assert_allclose(model.joint_limit.numpy(), [[j.limit.lower, j.limit.upper] for j in joints])
    cfg = np.random.default_rng(3).uniform(-1.0, 1.0, len(joints))
    urdf.update_cfg(cfg)
    state = model.state()
    eval_fk(model, xsim.array(cfg, dtype=xsim.float64), xsim.zeros(len(cfg), dtype=xsim.float64), state)
    q = state.body_q.numpy()
    for link, k in info.body.items():
        want = urdf.get_transform(link)
        np.testing.assert_allclose(q[k, :3], want[:3, 3], atol=1e-9)
        np.testing.assert_allclose(quat_to_matrix(q[k, 3:]), want[:3, :3], atol=1e-9)


def test_collision_geometry_becomes_shapes_and_cylinders_need_an_explicit_skip():
    with pytest.raises(xsim.AssetError, match=r"r2d2\.urdf: link 'right_leg' ?: collision geometry 'cylinder'|"
                                              r"r2d2\.urdf: link '\w+': collision geometry 'cylinder'"):
        ModelBuilder().add_urdf(urdf_file("r2d2.urdf"))
    b = ModelBuilder()
    info = b.add_urdf(urdf_file("r2d2.urdf"), unsupported_geoms="skip")
    assert len(info.skipped) == 6 and all("cylinder" in why for _, why in info.skipped)
    kinds = sorted(b.shapes[k]["type"] for _, k in info.shape)
    assert len(kinds) == 10  # 5 boxes, 1 sphere, 4 meshes (the gripper's STL fingers)


BAD_JOINT = """<robot name="r"><link name="a"><inertial><mass value="1"/><inertia ixx="1" iyy="1" izz="1" ixy="0"
ixz="0" iyz="0"/></inertial></link><joint name="j" type="revolute"><parent link="a"/><child link="ghost"/>
<axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint></robot>"""
PLANAR = BAD_JOINT.replace('type="revolute"', 'type="planar"').replace('link="ghost"', 'link="b"').replace(
    "</robot>", '<link name="b"><inertial><mass value="1"/><inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" '
    'iyz="0"/></inertial></link></robot>')


def test_bad_urdf_is_refused_naming_file_and_element(tmp_path):
    with pytest.raises(xsim.AssetError, match=r"<string>: joint 'j': link 'ghost' is not defined"):
        ModelBuilder().add_urdf(BAD_JOINT)
    with pytest.raises(xsim.AssetError, match=r"<string>: joint 'j' is planar: that needs a D6 joint"):
        ModelBuilder().add_urdf(PLANAR)
    broken = tmp_path / "broken.urdf"
    broken.write_text("<robot name='r'><link name='a'>")
    with pytest.raises(xsim.AssetError, match=r"broken\.urdf: not well-formed XML: .*line 1"):
        ModelBuilder().add_urdf(str(broken))
    with pytest.raises(xsim.AssetError, match=r"nothing\.urdf: no such file"):
        ModelBuilder().add_urdf(str(tmp_path / "nothing.urdf"))


def test_missing_yourdfpy_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "yourdfpy", None)
    with pytest.raises(ImportError, match=r"pip install 'xsim\[urdf\]'"):
        ModelBuilder().add_urdf(urdf_file("kuka_iiwa/model.urdf"))
