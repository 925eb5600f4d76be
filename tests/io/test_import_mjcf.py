"""MJCF import through MuJoCo's compiler (``xsim.io.importers.mjcf``): gymnasium's robot files, which no
one here wrote, come in with MuJoCo's compiled masses, inertias, axes and rest pose; a contacts-off
rollout follows ``mj_step``; unsupported content is refused naming the file and the element."""

import os
import sys
import warnings

import numpy as np
import pytest

import xsim
from xsim.sim.builder import ModelBuilder
from xsim.sim.kinematics import eval_fk
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers.xpbd.solver import SolverXPBD

mujoco = pytest.importorskip("mujoco", reason="MJCF import needs MuJoCo: pip install 'xsim[mjcf]'")
gymnasium = pytest.importorskip("gymnasium", reason="the MJCF test files are gymnasium's: pip install 'xsim[test]'")
ASSETS = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets")


def asset(name: str) -> str:
    return os.path.join(ASSETS, f"{name}.xml")


def load(source, **kw):
    b = ModelBuilder()
    info = b.add_mjcf(source, **kw)
    return b.finalize(dtype=xsim.float64), info


def xyzw(wxyz):
    return np.concatenate([wxyz[..., 1:], wxyz[..., :1]], axis=-1)


GYMNASIUM = ["inverted_pendulum", "inverted_double_pendulum", "reacher", "ant", "half_cheetah", "hopper", "walker2d",
             "swimmer", "humanoid"]


@pytest.mark.parametrize("name", GYMNASIUM)
def test_gymnasium_model_equals_mujoco_compiled_model(name):
    mj = mujoco.MjModel.from_xml_path(asset(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the D6 joints' damping and armature not applied (listed)
        model, info = load(mj)
    d = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, d)
    nb = mj.nbody - 1
    assert model.body_count == nb and info.body == {b: b - 1 for b in range(1, mj.nbody)}
    # MuJoCo's names; an unnamed body is body<id>
    assert model.body_label == [mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}"
                                for b in range(1, mj.nbody)]
    np.testing.assert_allclose(model.body_mass.numpy(), mj.body_mass[1:], rtol=1e-6)
    np.testing.assert_allclose(model.body_com.numpy(), mj.body_ipos[1:], rtol=1e-6, atol=1e-12)
    inertia = np.stack([quat_to_matrix(xyzw(mj.body_iquat[b])) @ np.diag(mj.body_inertia[b])
                        @ quat_to_matrix(xyzw(mj.body_iquat[b])).T for b in range(1, mj.nbody)])
    np.testing.assert_allclose(model.body_inertia.numpy(), inertia, rtol=1e-6, atol=1e-6 * np.abs(inertia).max())
    # rest pose: body frames are MuJoCo's xpos / xquat at qpos0 (a quaternion up to its sign)
    q = model.body_q.numpy()
    np.testing.assert_allclose(q[:, :3], d.xpos[1:], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(q[:, 3:] * xyzw(d.xquat[1:]), axis=1)), 1.0, rtol=1e-9)
    # joint axes and anchors in the world, limits, and joint_q = qpos
    xp, jp = model.joint_X_p.numpy(), model.joint_parent.numpy()
    axes = model.joint_axis.numpy()
    limits = model.joint_limit.numpy()
    rows = {jm: (jx, None) for jm, jx in info.joint.items()}
    for jx, ids in info.d6.items():  # a D6 joint: slides are its linear rows 0.., hinges its angular rows 3..
        assert model.joint_label[jx] == "+".join(mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_JOINT, i) for i in ids)
        slides = [i for i in ids if mj.jnt_type[i] == 2]
        rows.update({i: (jx, 6 * jx + (slides.index(i) if i in slides else 3 + ids.index(i) - len(slides)))
                     for i in ids})
    d6_axes, d6_limits = model.joint_d6_axis.numpy(), model.joint_d6_limit.numpy()
    for jm, (jx, row) in rows.items():
        if row is None:
            assert model.joint_label[jx] == mujoco.mj_id2name(mj, mujoco.mjtObj.mjOBJ_JOINT, jm)
        if mj.jnt_type[jm] in (2, 3):  # slide, hinge
            axis, limit = (axes[jx], limits[jx]) if row is None else (d6_axes[row], d6_limits[row])
            parent = jp[jx]
            pose = q[parent] if parent >= 0 else np.array([0, 0, 0, 0, 0, 0, 1.0])
            rot = quat_to_matrix(pose[3:])
            com = model.body_com.numpy()[parent] if parent >= 0 else np.zeros(3)
            frame_rot = rot @ quat_to_matrix(xp[jx, 3:])
            np.testing.assert_allclose(frame_rot @ axis, d.xaxis[jm], atol=1e-9)
            if mj.jnt_type[jm] == 3:  # a hinge's anchor: its joint frame's origin, moved by a D6's slides at qpos0
                moved = np.zeros(3)
                for i in info.d6.get(jx, []):
                    if mj.jnt_type[i] == 2:
                        moved += mj.qpos0[mj.jnt_qposadr[i]] * d6_axes[rows[i][1]]
                anchor = pose[:3] + rot @ (com + xp[jx, :3] + quat_to_matrix(xp[jx, 3:]) @ moved)
                np.testing.assert_allclose(anchor, d.xanchor[jm], atol=1e-9)
            if mj.jnt_limited[jm]:
                np.testing.assert_allclose(limit, mj.jnt_range[jm], rtol=1e-12)
    jq, _ = info.joint_coordinates(model, mj.qpos0)
    np.testing.assert_allclose(model.joint_q.numpy(), jq, atol=1e-9)


def rollout_error(mj, seconds: float, substeps: int, seed: int = 0) -> float:
    """Largest |joint_q - qpos| (rad or m) over a contacts-off rollout of ``seconds`` at dt = 1e-4 from a
    perturbed state, xsim (float64) beside ``mj_step``."""
    mj.opt.timestep = 1e-4
    mj.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(seed)
    d.qpos[:] = mj.qpos0 + rng.uniform(-0.3, 0.3, mj.nq)
    for j in np.flatnonzero(mj.jnt_limited):  # inside the limits: MuJoCo's are soft, xsim's hard
        a = mj.jnt_qposadr[j]
        d.qpos[a] = np.clip(d.qpos[a], *(mj.jnt_range[j] + np.array([0.05, -0.05]) * np.diff(mj.jnt_range[j])))
    d.qvel[:] = rng.uniform(-1.0, 1.0, mj.nv)
    b = ModelBuilder(gravity=tuple(mj.opt.gravity))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = b.add_mjcf(mj, collision=False)  # contacts off here too
    model = b.finalize(dtype=xsim.float64)
    s0, s1 = model.state(), model.state()
    jq, jqd = info.joint_coordinates(model, d.qpos, d.qvel)
    eval_fk(model, xsim.array(jq, dtype=xsim.float64), xsim.array(jqd, dtype=xsim.float64), s0)
    solver = SolverXPBD(model, substeps=substeps, iterations=1)
    worst = 0.0
    for _ in range(round(seconds / 1e-4)):
        mujoco.mj_step(mj, d)
        solver.step(s0, s1, None, 1e-4)
        s0, s1 = s1, s0
        worst = max(worst, float(np.abs(s0.joint_q.numpy() - d.qpos).max()))
    return worst


def test_double_pendulum_follows_mj_step_for_half_a_second():
    # measured: 2.6e-4 rad with 4 substeps (1.08e-3 with 1: XPBD is first order in the substep)
    mj = mujoco.MjModel.from_xml_path(asset("inverted_double_pendulum"))
    assert rollout_error(mj, 0.5, substeps=4) < 1.0e-3


def test_eval_fk_places_bodies_where_mujoco_does():
    mj = mujoco.MjModel.from_xml_path(asset("ant"))
    model, info = load(mj)
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(1)
    d.qpos[:] = mj.qpos0 + rng.uniform(-0.4, 0.4, mj.nq)
    d.qpos[3:7] /= np.linalg.norm(d.qpos[3:7])
    d.qvel[:] = rng.uniform(-1.0, 1.0, mj.nv)
    mujoco.mj_forward(mj, d)
    state = model.state()
    jq, jqd = info.joint_coordinates(model, d.qpos, d.qvel)
    eval_fk(model, xsim.array(jq, dtype=xsim.float64), xsim.array(jqd, dtype=xsim.float64), state)
    q, qd = state.body_q.numpy(), state.body_qd.numpy()
    np.testing.assert_allclose(q[:, :3], d.xpos[1:], atol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(q[:, 3:] * xyzw(d.xquat[1:]), axis=1)), 1.0, atol=1e-9)
    # com velocities: MuJoCo's cvel is (angular, linear) at the subtree com of the root; move it to each com
    for b in range(1, mj.nbody):
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_BODY, b, vel, 0)  # (angular, linear) world, at the com
        np.testing.assert_allclose(qd[b - 1, 3:], vel[:3], atol=1e-9)
        np.testing.assert_allclose(qd[b - 1, :3], vel[3:], atol=1e-9)


@pytest.mark.parametrize("name", ["humanoid", "hopper", "reacher"])
def test_eval_fk_places_bodies_where_mujoco_does_through_d6_joints(name):
    # several MuJoCo joints on one body are one D6 joint whose coordinates are their qpos: humanoid's
    # hips and shoulders (2 and 3 hinges), hopper's root (2 slides and a hinge), reacher's target (2 slides)
    mj = mujoco.MjModel.from_xml_path(asset(name))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, info = load(mj)
    assert info.d6
    d = mujoco.MjData(mj)
    rng = np.random.default_rng(2)
    d.qpos[:] = mj.qpos0 + rng.uniform(-0.5, 0.5, mj.nq)
    if mj.jnt_type[0] == 0:
        d.qpos[3:7] /= np.linalg.norm(d.qpos[3:7])
    d.qvel[:] = rng.uniform(-1.0, 1.0, mj.nv)
    mujoco.mj_forward(mj, d)
    state = model.state()
    jq, jqd = info.joint_coordinates(model, d.qpos, d.qvel)
    eval_fk(model, xsim.array(jq, dtype=xsim.float64), xsim.array(jqd, dtype=xsim.float64), state)
    q, qd = state.body_q.numpy(), state.body_qd.numpy()
    np.testing.assert_allclose(q[:, :3], d.xpos[1:], atol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(q[:, 3:] * xyzw(d.xquat[1:]), axis=1)), 1.0, atol=1e-9)
    for b in range(1, mj.nbody):
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(mj, d, mujoco.mjtObj.mjOBJ_BODY, b, vel, 0)
        np.testing.assert_allclose(qd[b - 1], np.concatenate([vel[3:], vel[:3]]), atol=1e-9)
    # and eval_ik reads the coordinates back
    from xsim.sim.kinematics import eval_ik

    back_q, back_qd = xsim.zeros(len(jq), dtype=xsim.float64), xsim.zeros(len(jqd), dtype=xsim.float64)
    eval_ik(model, state, back_q, back_qd)
    np.testing.assert_allclose(back_q.numpy(), jq, atol=1e-9)
    np.testing.assert_allclose(back_qd.numpy(), jqd, atol=1e-9)


SLIDE_AFTER_HINGE = """<mujoco><worldbody><body name="b"><joint name="h" type="hinge"/><joint name="s" type="slide"/>
<geom type="sphere" size=".1"/></body></worldbody></mujoco>"""


def test_joints_a_d6_cannot_model_are_refused_naming_the_body_and_joints():
    with pytest.raises(xsim.AssetError, match=r"<string>: body 'b' has joints h, s: a slide after a hinge"):
        load(SLIDE_AFTER_HINGE)


def test_d6_joint_terms_not_applied_are_listed_and_warned():
    with pytest.warns(UserWarning, match=r"humanoid\.xml: body 'lwaist': abdomen_z: damping 5"):
        _, info = load(asset("humanoid"))
    assert ("abdomen_z", "damping 5 (D6 joints have no drives yet)") in info.unapplied


CYLINDER = """<mujoco><worldbody><geom name="floor" type="plane" size="5 5 .1"/>
<body name="can" pos="0 0 1"><freejoint/><geom name="can_geom" type="cylinder" size=".1 .2"/></body>
</worldbody></mujoco>"""


def test_colliding_cylinder_is_refused_or_skipped_when_asked():
    with pytest.raises(xsim.AssetError, match=r"<string>: geom 'can_geom' of type 'cylinder': xsim has no such shape"):
        load(CYLINDER)
    model, info = load(CYLINDER, unsupported_geoms="skip")
    assert [g for g, _ in info.skipped_geoms] == ["can_geom"]
    assert model.shape_label == ["floor"]
    # the body keeps MuJoCo's mass: the cylinder's, at water density
    np.testing.assert_allclose(model.body_mass.numpy(), [1000.0 * np.pi * 0.1 ** 2 * 0.4], rtol=1e-6)


def test_malformed_file_names_the_file_and_mujocos_complaint(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><body name='b'><geom type='sphere' size='-1'/></body></worldbody></mujoco>")
    with pytest.raises(xsim.AssetError, match=r"bad\.xml: MuJoCo cannot compile it"):
        load(str(bad))
    with pytest.raises(xsim.AssetError, match=r"missing\.xml: no such file"):
        load(str(tmp_path / "missing.xml"))


def test_missing_mujoco_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ImportError, match=r"pip install 'xsim\[mjcf\]'"):
        ModelBuilder().add_mjcf(asset("ant"))


def test_floating_false_fixes_the_root_and_xform_moves_the_robot():
    mj = mujoco.MjModel.from_xml_path(asset("ant"))
    model, _ = load(mj, floating=False, xform=((1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0)))
    assert model.joint_type.numpy()[0] == 3  # fixed
    np.testing.assert_allclose(model.body_q.numpy()[0, :3], np.array([1.0, 2.0, 3.0]) + mj.body_pos[1], atol=1e-12)


def lowest_point(builder, body_q) -> float:
    """The lowest point (m) of the bodies' spheres and capsules at poses ``body_q`` (bodies, 7)."""
    low = np.inf
    for sh in builder.shapes:
        if sh["body"] < 0:
            continue
        pose = body_q[sh["body"]]
        rot = quat_to_matrix(pose[3:])
        centre = pose[:3] + rot @ sh["p"]
        axis = rot @ quat_to_matrix(sh["q"])[:, 2]
        half = sh["size"][1] if sh["type"] == 3 else 0.0  # capsule: half height
        low = min(low, centre[2] - abs(axis[2]) * half - sh["size"][0])
    return low


def test_ant_falls_onto_the_ground_and_comes_to_rest_then_exports_usd(tmp_path):
    from xsim.io.importers.parts import body_parts
    from xsim.io.usd import colliders_of, write_usd

    b = ModelBuilder()
    info = b.add_mjcf(asset("ant"))  # the file's floor is a plane shape; its geoms' contype/conaffinity keep
    model = b.finalize()             # the legs off each other and on the floor, as in MuJoCo
    assert b.shapes[info.shape[0]]["type"] == 0
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, substeps=8, iterations=4)
    frames, lows = [], []
    for _ in range(200):  # 2 s
        solver.step(s0, s1, None, 0.01)
        s0, s1 = s1, s0
        frames.append(s0.body_q.numpy())
        lows.append(lowest_point(b, frames[-1]))
    # measured: torso at rest 0.561 m up, speeds 7e-5 after 2 s, lowest point -5.7e-4 m
    assert min(lows) > -0.01
    assert np.abs(s0.body_qd.numpy()).max() < 1e-2
    assert 0.3 < frames[-1][0, 2] < 0.75 and np.abs(frames[-1][0, :2]).max() < 0.05
    q = np.stack(frames)
    out = write_usd(tmp_path / "ant.usda", np.zeros((len(q), 0, 3)), parts=[], colliders=colliders_of(model),
                    bodies=body_parts(b), body_q=q)
    from pxr import Usd

    assert Usd.Stage.Open(str(out)).GetPrimAtPath("/World/Bodies/torso")


def test_humanoid_falls_and_comes_to_rest_on_the_ground_without_exploding_or_sinking():
    # humanoid's hips and shoulders are D6 joints, which carry no damping yet (MjcfImport.unapplied): it settles
    # more slowly than MuJoCo's; measured: largest |body_qd| entry 102 (rad/s, a light limb spun at impact,
    # for a step), 0.13 after 3 s; lowest point -3.2 mm; torso at rest 0.20 m up
    b = ModelBuilder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b.add_mjcf(asset("humanoid"))
    model = b.finalize()
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, substeps=8, iterations=4)
    lows, fastest = [], 0.0
    for _ in range(300):  # 3 s
        solver.step(s0, s1, None, 0.01)
        s0, s1 = s1, s0
        q = s0.body_q.numpy()
        lows.append(lowest_point(b, q))
        fastest = max(fastest, float(np.abs(s0.body_qd.numpy()).max()))
    assert np.all(np.isfinite(q)) and fastest < 200.0
    assert min(lows) > -0.01
    assert np.abs(s0.body_qd.numpy()).max() < 0.5
    # lying on the ground: its torso (a capsule of radius 0.07 m) on the floor or on a limb, not sunk into it;
    # which of the two depends on how the fall went (0.087 m measured since the joints' arms changed)
    assert 0.06 < q[0, 2] < 0.4
