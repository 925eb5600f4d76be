"""MJCF robots through MuJoCo's own compiler: ``add_mjcf(builder, source, ...)`` compiles the file (or
string, ``MjSpec`` or ``MjModel``) with MuJoCo, so defaults, classes, includes, ``fromto``, inferred
inertias and ``ref`` are MuJoCo's, then copies the compiled model into the builder.

What a MuJoCo body becomes:

- a body per MuJoCo body (world excluded), its frame the MuJoCo body frame at ``qpos0`` (so
  ``state.body_q`` compares with ``xpos``/``xquat``), with MuJoCo's mass, centre of mass (``ipos``)
  and inertia (``inertia`` turned by ``iquat``) in that frame; a body welded to the world (no joint
  on it or above it) is kinematic (mass 0) and never moves;
- its joint: hinge -> revolute, slide -> prismatic, ball -> ball (``range`` -> cone limit), free ->
  free (``floating=False``: fixed), none -> fixed. The joint frame sits at the joint's ``pos`` with
  the body's orientation, turned (hinge) or moved (slide) by ``-ref``, so ``joint_q`` of a hinge or
  slide is MuJoCo's ``qpos``; ball and free joints hold quaternions as (x, y, z, w). Limits are
  MuJoCo's ``range`` where ``limited``; ``damping`` becomes an implicit velocity drive towards 0,
  ``stiffness`` a position drive towards ``springref``, ``armature`` the joint's armature
  (``Model.joint_armature``). Several joints on one body (hopper's root, humanoid's hips) become
  one D6 joint: slides first, then hinges about one point (else refused, naming the body), whose
  coordinates are their ``qpos`` in order (``MjcfImport.d6``); D6 joints have no drives yet, so
  their damping, stiffness and armature are listed in ``MjcfImport.unapplied`` with a warning;
- its geoms: sphere, capsule, box, mesh -> shapes (plane: a static plane) with MuJoCo's
  ``contype``/``conaffinity`` bits (``Model.shape_contype``), so the same pairs may touch. A geom
  those bits let collide with no other geom is visual only: xsim has no visual shapes, so it is left
  out and listed in ``MjcfImport.skipped_geoms``. A colliding geom of a type
  xsim lacks (cylinder, ellipsoid, heightfield) is refused naming the file and the geom, or with
  ``unsupported_geoms="skip"`` left out and listed (the body keeps MuJoCo's mass and inertia);
- actuators on a hinge or slide: ``position`` (kp) -> a drive of stiffness kp gear^2, ``velocity``
  (kv) -> drive damping kv gear^2, both towards ctrl 0 (``Control.joint_target_q``/``_qd`` move the
  target); ``motor`` actuators are listed in ``MjcfImport.actuators`` but not applied (xsim's
  ``Control`` has no joint forces).

MuJoCo's ``contact``/``exclude`` pairs, ``frictionloss``, tendons, equality constraints
and sites are not imported (equalities and tendons that act are refused; a tendon with no limit,
spring, damper, friction or actuator, which changes nothing, is left out). Gravity and the time step are the
builder's; MuJoCo's are in ``MjcfImport.gravity``/``timestep``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ...errors import AssetError, missing_extra
from ...sim import shapes as S

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3  # mjtJoint
_PLANE, _HFIELD, _SPHERE, _CAPSULE, _ELLIPSOID, _CYLINDER, _BOX, _MESH = 0, 1, 2, 3, 4, 5, 6, 7  # mjtGeom
_GEOM_NAMES = {_PLANE: "plane", _HFIELD: "hfield", _SPHERE: "sphere", _CAPSULE: "capsule", _ELLIPSOID: "ellipsoid",
               _CYLINDER: "cylinder", _BOX: "box", _MESH: "mesh"}
_JOINT_NAMES = {_FREE: "free", _BALL: "ball", _SLIDE: "slide", _HINGE: "hinge"}


@dataclass
class MjcfImport:
    """What ``add_mjcf`` made: index maps from MuJoCo's compiled model to the builder's entities."""

    file: str
    """The file imported (``<string>`` for XML text)"""
    mj_model: object
    """MuJoCo's compiled ``MjModel``"""
    body: dict[int, int]
    """MuJoCo body id -> builder body"""
    joint: dict[int, int]
    """MuJoCo joint id -> builder joint"""
    shape: dict[int, int]
    """MuJoCo geom id -> builder shape"""
    d6: dict[int, list[int]] = field(default_factory=dict)
    """Builder D6 joint -> the MuJoCo joints of one body it stands for, in its coordinates' order"""
    skipped_geoms: list[tuple[str, str]] = field(default_factory=list)
    """(geom name, why) of the geoms left out"""
    unapplied: list[tuple[str, str]] = field(default_factory=list)
    """(joint name, what) of joint terms imported without effect (a warning says so too)"""
    actuators: list[dict] = field(default_factory=list)
    """Each actuator: name, kind (position, velocity, motor), builder joint, gear, whether applied"""
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    """MuJoCo's ``option gravity`` [m/s^2]"""
    timestep: float = 0.002
    """MuJoCo's ``option timestep`` [s]"""

    def joint_coordinates(self, model, qpos, qvel=None) -> tuple[np.ndarray, np.ndarray]:
        """(joint_q, joint_qd) of ``model`` (finalized from the builder) for MuJoCo's ``qpos``/``qvel``
        (numpy, in the model's layout; joints not from this file keep their initial values)."""
        mj = self.mj_model
        qpos = np.asarray(qpos, dtype=np.float64)
        qvel = np.zeros(mj.nv) if qvel is None else np.asarray(qvel, dtype=np.float64)
        q, qd = (a.astype(np.float64) for a in model._initial_joint_coordinates())
        qs, ds = model.joint_q_start, model.joint_qd_start
        for jm, jx in self.joint.items():
            kind, a, d = int(mj.jnt_type[jm]), int(mj.jnt_qposadr[jm]), int(mj.jnt_dofadr[jm])
            i, k = int(qs[jx]), int(ds[jx])
            if kind in (_HINGE, _SLIDE):
                if qs[jx + 1] > i:
                    q[i], qd[k] = qpos[a], qvel[d]
            elif kind == _BALL:
                rel = qpos[a:a + 4]
                q[i:i + 4] = _xyzw(rel)
                qd[k:k + 3] = S.quat_to_matrix(_xyzw(rel)) @ qvel[d:d + 3]
            elif kind == _FREE and qs[jx + 1] - i == 7:
                b = int(mj.jnt_bodyid[jm])
                rot = S.quat_to_matrix(_xyzw(qpos[a + 3:a + 7]))
                w = rot @ qvel[d + 3:d + 6]
                q[i:i + 3], q[i + 3:i + 7] = qpos[a:a + 3], _xyzw(qpos[a + 3:a + 7])
                qd[k:k + 3] = qvel[d:d + 3] + np.cross(w, rot @ mj.body_ipos[b])
                qd[k + 3:k + 6] = w
        for jx, ids in self.d6.items():  # its coordinates: the qpos of its MuJoCo joints in order
            for n, jm in enumerate(ids):
                q[int(qs[jx]) + n] = qpos[int(mj.jnt_qposadr[jm])]
                qd[int(ds[jx]) + n] = qvel[int(mj.jnt_dofadr[jm])]
        return q, qd


def _mujoco():
    try:
        import mujoco
    except ImportError as e:
        raise missing_extra("add_mjcf (MJCF import)", "mujoco", "mjcf") from e
    return mujoco


def _xyzw(wxyz) -> np.ndarray:
    w, x, y, z = (float(c) for c in wxyz)
    return np.array([x, y, z, w])


def _compile(mujoco, source) -> tuple[object, str]:
    """(MjModel, file name) from a path, XML text, an MjSpec or an MjModel."""
    if isinstance(source, mujoco.MjModel):
        return source, "<MjModel>"
    try:
        if isinstance(source, mujoco.MjSpec):
            return source.compile(), "<MjSpec>"
        text = str(source)
        if text.lstrip().startswith("<"):
            return mujoco.MjModel.from_xml_string(text), "<string>"
        if not os.path.isfile(text):
            raise AssetError(f"add_mjcf: {text}: no such file (expected an MJCF file, XML text, an MjSpec or an "
                             "MjModel)")
        return mujoco.MjModel.from_xml_path(text), text
    except ValueError as e:
        if isinstance(e, AssetError):
            raise
        where = source if isinstance(source, str) and not source.lstrip().startswith("<") else "<string>"
        raise AssetError(f"add_mjcf: {where}: MuJoCo cannot compile it: {e}") from e


def _compose(a, b) -> tuple[np.ndarray, np.ndarray]:
    """The transform a * b of (p, q xyzw) pairs."""
    return np.asarray(a[0]) + S.quat_to_matrix(a[1]) @ np.asarray(b[0]), S.quat_multiply(a[1], b[1])


def _axis_angle(axis, angle: float) -> np.ndarray:
    a = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    return np.concatenate([a * np.sin(angle / 2.0), [np.cos(angle / 2.0)]])


def _collides(mj) -> np.ndarray:
    """Whether each geom can collide with some other geom by MuJoCo's contype/conaffinity test."""
    t, a = mj.geom_contype.astype(np.int64), mj.geom_conaffinity.astype(np.int64)
    hit = ((t[:, None] & a[None, :]) != 0) | ((a[:, None] & t[None, :]) != 0)
    np.fill_diagonal(hit, False)
    return hit.any(axis=1)


def add_mjcf(builder, source, xform=None, floating: bool | None = None,
             unsupported_geoms: str = "error", collision: bool = True) -> MjcfImport:
    """Import an MJCF robot into ``builder`` (module docstring). ``source``: a file path, XML text, a
    ``mujoco.MjSpec`` or ``mujoco.MjModel``; ``xform``: where MuJoCo's world frame goes ((p, q) or 7
    numbers); ``floating``: None as in the file, True gives a root body without a joint a free joint,
    False fixes a root's free joint to the world; ``unsupported_geoms``: ``"error"`` or ``"skip"``
    for colliding geoms of a type xsim lacks; ``collision=False`` imports no geoms (MuJoCo's masses stay).
    Returns the ``MjcfImport`` index maps."""
    from ...sim.rigid import _xform

    if unsupported_geoms not in ("error", "skip"):
        raise ValueError(f"add_mjcf: unsupported_geoms must be 'error' or 'skip', got {unsupported_geoms!r}")
    mujoco = _mujoco()
    mj, file = _compile(mujoco, source)
    data = mujoco.MjData(mj)
    mujoco.mj_kinematics(mj, data)  # body frames at qpos0

    def name(kind, i: int) -> str:
        return mujoco.mj_id2name(mj, kind, i) or f"{_kind_word(kind)}{i}"

    def fail(what: str) -> AssetError:
        return AssetError(f"add_mjcf: {file}: {what}")
    for t in range(mj.ntendon):  # a tendon without limit, spring, damper, friction or actuator does nothing
        acts = [u for u in range(mj.nu) if int(mj.actuator_trntype[u]) == int(mujoco.mjtTrn.mjTRN_TENDON)
                and int(mj.actuator_trnid[u, 0]) == t]
        if (mj.tendon_limited[t] or mj.tendon_stiffness[t] or mj.tendon_damping[t] or mj.tendon_frictionloss[t]
                or acts):
            raise fail(f"tendon {name(mujoco.mjtObj.mjOBJ_TENDON, t)!r}: tendons are not supported (this one has a "
                       "limit, spring, damper, friction or actuator)")
    if mj.neq:
        raise fail(f"equality {name(mujoco.mjtObj.mjOBJ_EQUALITY, 0)!r}: equality constraints are not supported")
    world = _xform(xform)
    out = MjcfImport(file=file, mj_model=mj, body={}, joint={}, shape={}, gravity=tuple(float(g) for g in mj.opt.gravity),
                     timestep=float(mj.opt.timestep))
    body_obj, joint_obj, geom_obj = mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_JOINT, mujoco.mjtObj.mjOBJ_GEOM
    static = np.zeros(mj.nbody, dtype=bool)
    static[0] = True
    for b in range(1, mj.nbody):
        pb = int(mj.body_parentid[b])
        nj = int(mj.body_jntnum[b])
        label = name(body_obj, b)
        root_free = floating is True and nj == 0 and pb == 0
        static[b] = nj == 0 and static[pb] and not root_free
        pose = _compose(world, (data.xpos[b], _xyzw(data.xquat[b])))
        mass = float(mj.body_mass[b])
        if static[b]:
            out.body[b] = builder.add_body(pose, mass=0.0, label=label)
            continue
        if mass <= 0.0:
            raise fail(f"body {label!r} moves but has no mass (MuJoCo compiled mass 0): xsim needs a mass > 0")
        rot = S.quat_to_matrix(_xyzw(mj.body_iquat[b]))
        inertia = rot @ np.diag(mj.body_inertia[b]) @ rot.T
        k = out.body[b] = builder.add_body(pose, mass=mass, com=mj.body_ipos[b].copy(), inertia=inertia, label=label)
        parent = out.body[pb] if pb > 0 else -1
        offset = (mj.body_pos[b].copy(), _xyzw(mj.body_quat[b]))
        if pb == 0:
            offset = _compose(world, offset)
        if nj == 0:
            if root_free:
                out.joint[-b] = builder.add_joint_free(k, parent=-1, parent_xform=world)
            else:
                builder.add_joint_fixed(parent, k, parent_xform=offset)
            builder.joints[-1]["label"] = f"{label}_weld" if not root_free else f"{label}_free"
            continue
        j = int(mj.body_jntadr[b])
        if nj > 1:
            ids = list(range(j, j + nj))
            x = _add_d6(builder, mj, ids, parent, k, offset, fail, label, [name(joint_obj, i) for i in ids], out)
            out.d6[x] = ids
            continue
        out.joint[j] = _add_joint(builder, mj, j, parent, k, offset, world, floating, fail, name(joint_obj, j))
        builder.joints[out.joint[j]]["label"] = name(joint_obj, j)
    out.joint = {j: x for j, x in out.joint.items() if j >= 0}
    if collision:
        _add_geoms(builder, mj, data, out, world, static, unsupported_geoms, fail, lambda g: name(geom_obj, g))
    _add_actuators(builder, mj, out, lambda u: name(mujoco.mjtObj.mjOBJ_ACTUATOR, u))
    return out


def _add_d6(builder, mj, ids: list, parent: int, child: int, offset, fail, body: str, names: list,
            out: MjcfImport) -> int:
    """One D6 joint for the MuJoCo joints ``ids`` of one body: slides (any order) then hinges sharing one
    anchor, whose ``qpos`` are its coordinates in order; their damping, stiffness and armature are not
    applied (listed in ``out.unapplied``, with a warning)."""
    kinds = [int(mj.jnt_type[i]) for i in ids]
    listed = ", ".join(names)
    if any(k not in (_SLIDE, _HINGE) for k in kinds):
        raise fail(f"body {body!r} has joints {listed}: several joints on one body must be hinges and slides")
    if kinds != sorted(kinds):  # _SLIDE < _HINGE
        raise fail(f"body {body!r} has joints {listed}: a slide after a hinge moves along a turned axis, which "
                   "xsim's D6 joint does not model (expected the slides first)")
    hinges = [i for i in ids if int(mj.jnt_type[i]) == _HINGE]
    anchor = mj.jnt_pos[hinges[0]].copy() if hinges else np.zeros(3)
    if any(not np.allclose(mj.jnt_pos[i], anchor, atol=1e-12) for i in hinges):
        raise fail(f"body {body!r}: its hinges ({listed}) have different pos: xsim's D6 joint turns about one point")
    if any(mj.qpos0[mj.jnt_qposadr[i]] != 0.0 for i in hinges):
        raise fail(f"body {body!r}: a hinge among {listed} has ref != 0, which a D6 joint does not take")
    shift = np.zeros(3)
    rows: tuple[list, list] = ([], [])
    for i in ids:
        lo, hi = (float(r) for r in mj.jnt_range[i]) if mj.jnt_limited[i] else (None, None)
        axis = mj.jnt_axis[i] / np.linalg.norm(mj.jnt_axis[i])
        rows[int(mj.jnt_type[i]) == _HINGE].append((axis, lo, hi))
        if int(mj.jnt_type[i]) == _SLIDE:
            shift -= float(mj.qpos0[mj.jnt_qposadr[i]]) * axis  # the joint frame moved by -ref: joint_q is qpos
        d = int(mj.jnt_dofadr[i])
        for term, value in (("damping", mj.dof_damping[d]), ("armature", mj.dof_armature[d]),
                            ("stiffness", mj.jnt_stiffness[i])):
            if value != 0.0:
                out.unapplied.append((names[ids.index(i)], f"{term} {float(value):g} (D6 joints have no drives yet)"))
    frame = (anchor, np.array([0.0, 0.0, 0.0, 1.0]))
    xp = _compose(_compose(offset, frame), (shift, np.array([0.0, 0.0, 0.0, 1.0])))
    try:
        k = builder.add_joint_d6(parent, child, xp, frame, linear_axes=rows[0], angular_axes=rows[1])
    except ValueError as e:
        raise fail(f"body {body!r}, joints {listed}: {e}") from e
    builder.joints[k]["label"] = "+".join(names)
    if any(n == names[ids.index(i)] for n, _ in out.unapplied for i in ids):
        import warnings

        warnings.warn(f"add_mjcf: {out.file}: body {body!r}: " + "; ".join(
            f"{n}: {why}" for n, why in out.unapplied if n in names), stacklevel=3)
    return k


def _kind_word(kind) -> str:
    return str(kind).split("mjOBJ_")[-1].lower()


def _add_joint(builder, mj, j: int, parent: int, child: int, offset, world, floating, fail, label: str) -> int:
    """The builder joint of MuJoCo joint ``j`` (module docstring)."""
    kind = int(mj.jnt_type[j])
    d = int(mj.jnt_dofadr[j])
    anchor = (mj.jnt_pos[j].copy(), np.array([0.0, 0.0, 0.0, 1.0]))
    armature = float(mj.dof_armature[d])
    if kind == _FREE:
        if armature != 0.0:
            raise fail(f"joint {label!r}: armature on a free joint is not supported")
        if floating is False:
            return builder.add_joint_fixed(-1, child, parent_xform=offset)
        return builder.add_joint_free(child, parent=-1, parent_xform=world)
    limited = bool(mj.jnt_limited[j])
    lo, hi = (float(r) for r in mj.jnt_range[j]) if limited else (None, None)
    if kind == _BALL:
        if armature != 0.0:
            raise fail(f"joint {label!r}: armature on a ball joint is not supported")
        return builder.add_joint_ball(parent, child, _compose(offset, anchor), anchor, cone_limit=hi)
    axis = mj.jnt_axis[j].copy()
    ref = float(mj.qpos0[mj.jnt_qposadr[j]])
    stiffness = float(mj.jnt_stiffness[j])
    drive = {"target_ke": stiffness, "target_q": float(mj.qpos_spring[mj.jnt_qposadr[j]]) if stiffness else None,
             "target_kd": float(mj.dof_damping[d])}
    if kind == _HINGE:  # the joint frame turned by -ref: joint_q is qpos
        xp = _compose(_compose(offset, anchor), (np.zeros(3), _axis_angle(axis, -ref)))
        k = builder.add_joint_revolute(parent, child, xp, anchor, axis, lo, hi, **drive)
    else:
        xp = _compose(_compose(offset, anchor), (-ref * axis / np.linalg.norm(axis), np.array([0.0, 0.0, 0.0, 1.0])))
        k = builder.add_joint_prismatic(parent, child, xp, anchor, axis, lo, hi, **drive)
    builder.joints[k]["armature"] = armature
    return k


def _add_geoms(builder, mj, data, out: MjcfImport, world, static, unsupported: str, fail, name) -> None:
    collides = _collides(mj)
    for g in range(mj.ngeom):
        label, kind, b = name(g), int(mj.geom_type[g]), int(mj.geom_bodyid[g])
        if not collides[g]:
            out.skipped_geoms.append((label, "visual only: its contype/conaffinity let it collide with no geom"))
            continue
        if kind not in (_PLANE, _SPHERE, _CAPSULE, _BOX, _MESH):
            why = f"geom {label!r} of type {_GEOM_NAMES.get(kind, kind)!r}: xsim has no such shape"
            if unsupported == "error":
                raise fail(f"{why} (expected sphere, capsule, box, mesh or plane; unsupported_geoms='skip' leaves "
                           "such geoms out)")
            out.skipped_geoms.append((label, why))
            continue
        body = -1 if b == 0 else out.body[b]
        xf = (mj.geom_pos[g].copy(), _xyzw(mj.geom_quat[g]))
        if body < 0:
            xf = _compose(world, xf)
        size, mu = mj.geom_size[g], float(mj.geom_friction[g, 0])
        if kind == _PLANE:
            if b != 0 and not static[b]:
                raise fail(f"geom {label!r}: a plane must be static (on the world or a body welded to it)")
            xf = _compose(world, (data.geom_xpos[g], _xyzw(_mat_quat(data.geom_xmat[g]))))
            k = builder.add_shape_plane(xform=xf, mu=mu)
        elif kind == _SPHERE:
            k = builder.add_shape_sphere(body, xf, radius=float(size[0]), mu=mu)
        elif kind == _CAPSULE:
            k = builder.add_shape_capsule(body, xf, radius=float(size[0]), half_height=float(size[1]), mu=mu)
        elif kind == _BOX:
            k = builder.add_shape_box(body, xf, *(float(s) for s in size), mu=mu)
        else:
            m = int(mj.geom_dataid[g])
            v0, nv = int(mj.mesh_vertadr[m]), int(mj.mesh_vertnum[m])
            f0, nf = int(mj.mesh_faceadr[m]), int(mj.mesh_facenum[m])
            k = builder.add_shape_mesh(body, (mj.mesh_vert[v0:v0 + nv].astype(np.float64),
                                              mj.mesh_face[f0:f0 + nf].astype(np.int64)), xf, mu=mu)
        builder.shapes[k]["label"] = label
        builder.shapes[k]["contype"] = int(mj.geom_contype[g])
        builder.shapes[k]["conaffinity"] = int(mj.geom_conaffinity[g])
        out.shape[g] = k


def _mat_quat(mat9) -> np.ndarray:
    """MuJoCo's quaternion (w, x, y, z) of a row-major 3x3 rotation."""
    import mujoco

    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, np.asarray(mat9, dtype=np.float64))
    return q


def _add_actuators(builder, mj, out: MjcfImport, name) -> None:
    """Position and velocity actuators on hinges and slides as drives; the rest listed (module docstring)."""
    for u in range(mj.nu):
        j = int(mj.actuator_trnid[u, 0])
        gear = float(mj.actuator_gear[u, 0])
        gain, bias = mj.actuator_gainprm[u], mj.actuator_biasprm[u]
        entry = {"name": name(u), "joint": out.joint.get(j), "gear": gear, "applied": False}
        on_joint = int(mj.actuator_trntype[u]) == 0 and j in out.joint and int(mj.jnt_type[j]) in (_HINGE, _SLIDE)
        if int(mj.actuator_biastype[u]) == 1 and bias[0] == 0.0 and bias[1] == -gain[0] and bias[2] == 0.0:
            entry["kind"] = "position"
            if on_joint:
                builder.joints[out.joint[j]]["ke"] = float(gain[0]) * gear * gear
                entry["applied"] = True
        elif int(mj.actuator_biastype[u]) == 1 and bias[0] == 0.0 and bias[1] == 0.0 and bias[2] == -gain[0]:
            entry["kind"] = "velocity"
            if on_joint:
                builder.joints[out.joint[j]]["kd"] += float(gain[0]) * gear * gear
                entry["applied"] = True
        else:
            entry["kind"] = "motor" if int(mj.actuator_biastype[u]) == 0 else "other"
        out.actuators.append(entry)
