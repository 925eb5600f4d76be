"""Joint coordinates: ``joint_q``/``joint_qd`` of a model's joints, from body poses (``eval_ik``) and
back (``eval_fk``), with Newton's names and layout.

Each joint owns a slice of ``joint_q`` (from ``model.joint_q_start``) and of ``joint_qd`` (from
``model.joint_qd_start``):

| joint | ``joint_q`` | ``joint_qd`` |
|---|---|---|
| prismatic | offset along the axis (m) | its rate (m/s) |
| revolute | angle about the axis (rad) | its rate (rad/s) |
| ball | rotation of the child joint frame in the parent joint frame, quaternion (x, y, z, w) | relative angular velocity, parent joint frame (rad/s) |
| fixed | none | none |
| free | child joint frame in the parent joint frame: position (m), quaternion (x, y, z, w) | velocity of the child's com relative to the parent's motion, then relative angular velocity, both in the parent joint frame |
| distance | as free | as free |
| D6 | offsets along its linear axes (m), then angles about its angular axes (rad; ``add_joint_d6``) | their rates |

The revolute angle is measured between the joint frames' reference directions as the solver's
joint kernels measure it (0 when the joint frames coincide); the prismatic offset is along the
parent joint frame's axis. Bodies that no joint names as child (``add_body`` bodies are free
without a joint) have no coordinates; ``eval_fk`` leaves them, and reads them where they are
the root of a chain. Where two joints name the same child (a closed loop), the first one places
the child in ``eval_fk``; ``eval_ik`` reports every joint.

Both are kernels (one thread per joint) and go on a recording Tape, so a loss on ``joint_q`` or
an initial configuration set through ``eval_fk`` backpropagates. ``SolverXPBD`` keeps
``state.joint_q``/``joint_qd`` current after each step.
"""


from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

import xsim
from xsim import types as T

from .generic import Floats, Ints, Transforms, Vec3s, Vec6s, specialized
from .rigid import (
    JOINT_BALL,
    JOINT_D6,
    JOINT_DISTANCE,
    JOINT_FIXED,
    JOINT_FREE,
    JOINT_PRISMATIC,
    JOINT_REVOLUTE,
)

# coordinates per joint type (Newton's counts): JOINT_* code -> (joint_q entries, joint_qd entries)
COORD_COUNTS = {JOINT_PRISMATIC: (1, 1), JOINT_REVOLUTE: (1, 1), JOINT_BALL: (4, 3), JOINT_FIXED: (0, 0),
                JOINT_FREE: (7, 6), JOINT_DISTANCE: (7, 6)}


@dataclass
class JointLayout:
    """Host-side description of a model's joint coordinates (numpy; see the module docstring)."""

    q_start: np.ndarray     # (joints + 1,) first joint_q entry of each joint, then the total
    qd_start: np.ndarray    # (joints + 1,)
    tree: np.ndarray        # (joints,) 1 where the joint places its child in eval_fk
    body_joint: np.ndarray  # (bodies,) the tree joint whose child each body is, -1 for none
    reads_roots: bool       # whether some chain hangs from a body that no joint places


def joint_layout(joint_type, joint_parent, joint_child, body_count: int, d6_dim=None) -> JointLayout:
    """The ``JointLayout`` of joints with these types, parents and children (numpy int arrays);
    ``d6_dim``: each joint's free linear and angular axes, flattened (a D6 joint has one coordinate each)."""
    dims = np.zeros(2 * len(joint_type), dtype=np.int64) if d6_dim is None else np.asarray(d6_dim, dtype=np.int64)
    counts = np.array([COORD_COUNTS[int(t)] if int(t) != JOINT_D6 else (dims[2 * k] + dims[2 * k + 1],) * 2
                       for k, t in enumerate(joint_type)], dtype=np.int64).reshape(-1, 2)
    q_start = np.concatenate([[0], np.cumsum(counts[:, 0])]).astype(np.int32)
    qd_start = np.concatenate([[0], np.cumsum(counts[:, 1])]).astype(np.int32)
    nj = len(joint_type)
    body_joint = np.full(body_count, -1, dtype=np.int32)
    tree = np.zeros(nj, dtype=np.int32)
    for j in range(nj):
        if body_joint[joint_child[j]] < 0:
            body_joint[joint_child[j]] = j
            tree[j] = 1
    # a cycle of joints (a is b's parent and b is a's) has no root to place it from: its joints
    # are left out of eval_fk rather than walked forever
    for j in range(nj):
        seen, b = set(), joint_parent[j]
        while b >= 0 and body_joint[b] >= 0 and tree[j]:
            if b in seen:
                tree[j] = 0
            seen.add(b)
            b = joint_parent[body_joint[b]]
    reads_roots = bool(any(tree[j] and joint_parent[j] >= 0 and body_joint[joint_parent[j]] < 0 for j in range(nj)))
    return JointLayout(q_start, qd_start, tree, body_joint, reads_roots)


# -------------------------------------------------------------------------------------------------
# joint-frame geometry (the solver's joint kernels use the same definitions)


@xsim.func
def reference_direction(axis):
    """A unit vector perpendicular to ``axis`` (joint frame), the zero of the joint angle."""
    e = axis - axis
    if xsim.abs(axis[0]) < 0.9:
        e[0] = 1.0
    else:
        e[1] = 1.0
    return xsim.normalize(xsim.cross(axis, e))


@xsim.func
def hinge_angle(qjp, qjc, axis):
    """The signed angle (rad) of the child joint frame about the parent frame's ``axis``, and that
    axis in the world."""
    ref = reference_direction(axis)
    a = xsim.quat_rotate(qjp, axis)
    bp = xsim.quat_rotate(qjp, ref)
    bc = xsim.quat_rotate(qjc, ref)
    return xsim.atan2(xsim.dot(xsim.cross(bp, bc), a), xsim.dot(bp, bc)), a


@xsim.func
def d6_basis(d6_axis: Vec3s, j: int, n_ang: int):
    """(e1, e2, e3, sign): the angular axes of D6 joint ``j`` made a right-handed orthonormal basis (fewer
    than 3: completed by cross products); sign -1 where the joint's own third axis is -e3."""
    e1 = d6_axis[6 * j + 3]
    e2 = d6_axis[6 * j + 4]
    e3 = d6_axis[6 * j + 5]
    sign = e1[0] * 0.0 + 1.0
    if n_ang < 2:
        e2 = reference_direction(e1)
    if n_ang < 3:
        e3 = xsim.cross(e1, e2)
    elif xsim.dot(xsim.cross(e1, e2), e3) < 0.0:
        e3 = -e3
        sign = -sign
    return e1, e2, e3, sign


@xsim.func
def d6_angles(rq, e1, e2, e3):
    """(t1, t2, t3) with rq = R(e1, t1) R(e2, t2) R(e3, t3) (rad; e1, e2, e3 a right-handed orthonormal
    basis): the x-y-z Euler angles of the rotation seen in that basis."""
    c3 = xsim.quat_rotate(rq, e3)
    c2 = xsim.quat_rotate(rq, e2)
    c1 = xsim.quat_rotate(rq, e1)
    t2 = xsim.asin(xsim.clamp(xsim.dot(e1, c3), -1.0, 1.0))
    t1 = xsim.atan2(-xsim.dot(e2, c3), xsim.dot(e3, c3))
    t3 = xsim.atan2(-xsim.dot(e1, c2), xsim.dot(e1, c1))
    return t1, t2, t3


# -------------------------------------------------------------------------------------------------
# kernels (generic over the scalar type; the entry points take them from ``generic.specialized``)


@xsim.func
def com_frame(b: int, body_q: Transforms, body_com: Vec3s):
    """Body ``b``'s com frame (com position, rotation); the world (-1) is the identity."""
    out = xsim.transform_identity(dtype=body_com.dtype.dtype)
    if b >= 0:
        pose = body_q[b]
        out = xsim.transformation(pose.p + xsim.quat_rotate(pose.q, body_com[b]), pose.q)
    return out


@xsim.func
def com_twist(b: int, body_qd: Vec6s, body_com: Vec3s):
    """(linear velocity of the com, angular velocity) of body ``b``, world; zero for the world."""
    v = body_com.dtype()
    w = body_com.dtype()
    if b >= 0:
        qd = body_qd[b]
        v = body_com.dtype(qd[0], qd[1], qd[2])
        w = body_com.dtype(qd[3], qd[4], qd[5])
    return v, w


@xsim.kernel
def eval_ik_kernel(body_q: Transforms, body_qd: Vec6s, body_com: Vec3s, joint_type: Ints, joint_parent: Ints,
                   joint_child: Ints, joint_X_p: Transforms, joint_X_c: Transforms, joint_axis: Vec3s, d6_dim: Ints,
                   d6_axis: Vec3s, q_start: Ints, qd_start: Ints, joint_q: Floats, joint_qd: Floats):
    """Coordinates of joint ``tid`` from its bodies' poses and velocities (module docstring)."""
    j = xsim.tid()
    kind = joint_type[j]
    bp = joint_parent[j]
    bc = joint_child[j]
    xp = com_frame(bp, body_q, body_com)
    xc = com_frame(bc, body_q, body_com)
    vp, wp = com_twist(bp, body_qd, body_com)
    vc, wc = com_twist(bc, body_qd, body_com)
    jp = xp * joint_X_p[j]
    jc = xc * joint_X_c[j]
    qs = q_start[j]
    ds = qd_start[j]
    axis = joint_axis[j]
    if kind == JOINT_REVOLUTE:
        angle, a = hinge_angle(jp.q, jc.q, axis)
        joint_q[qs] = angle
        joint_qd[ds] = xsim.dot(wc - wp, a)
    elif kind == JOINT_PRISMATIC:
        a = xsim.quat_rotate(jp.q, axis)
        d = jc.p - jp.p
        joint_q[qs] = xsim.dot(d, a)
        # d/dt (d . a) with a turning with the parent: (vc_pt - vp_pt) . a + d . (wp x a)
        rate = vc + xsim.cross(wc, jc.p - xc.p) - vp - xsim.cross(wp, jp.p - xp.p)
        joint_qd[ds] = xsim.dot(rate, a) + xsim.dot(d, xsim.cross(wp, a))
    elif kind == JOINT_BALL or kind == JOINT_FREE or kind == JOINT_DISTANCE:
        rel = xsim.transform_inverse(jp) * jc
        r = rel.q
        if r[3] < 0.0:  # one of the two quaternions of a rotation: w >= 0
            r = -r
        k = qs
        if kind != JOINT_BALL:
            for c in range(3):
                joint_q[qs + c] = rel.p[c]
            k = qs + 3
        for c in range(4):
            joint_q[k + c] = r[c]
        w_rel = xsim.quat_rotate_inv(jp.q, wc - wp)
        k = ds
        if kind != JOINT_BALL:
            v_rel = xsim.quat_rotate_inv(jp.q, vc - vp - xsim.cross(wp, xc.p - xp.p))
            for c in range(3):
                joint_qd[ds + c] = v_rel[c]
            k = ds + 3
        for c in range(3):
            joint_qd[k + c] = w_rel[c]
    elif kind == JOINT_D6:
        nl = d6_dim[2 * j]
        na = d6_dim[2 * j + 1]
        d = jc.p - jp.p
        rate = vc + xsim.cross(wc, jc.p - xc.p) - vp - xsim.cross(wp, jp.p - xp.p)
        for i in range(3):
            if i < nl:
                a = xsim.quat_rotate(jp.q, d6_axis[6 * j + i])
                joint_q[qs + i] = xsim.dot(d, a)
                joint_qd[ds + i] = xsim.dot(rate, a) + xsim.dot(d, xsim.cross(wp, a))
        e1, e2, e3, sign = d6_basis(d6_axis, j, na)
        rel_q = xsim.quat_inverse(jp.q) * jc.q
        t1, t2, t3 = d6_angles(rel_q, e1, e2, e3)
        if na == 1:  # as a revolute joint measures it
            t1, _ = hinge_angle(jp.q, jc.q, e1)
        # the angles' rates: w_rel = e1 dt1 + R1 e2 dt2 + R1 R2 e3 dt3 (parent joint frame), solved by the
        # reciprocal basis
        w_rel = xsim.quat_rotate_inv(jp.q, wc - wp)
        r1 = xsim.quat_from_axis_angle(e1, t1)
        w2 = xsim.quat_rotate(r1, e2)
        w3 = xsim.quat_rotate(r1 * xsim.quat_from_axis_angle(e2, t2), e3)
        det = xsim.dot(e1, xsim.cross(w2, w3))
        d6_q = type(w_rel)(t1, t2, t3 * sign)
        d6_qd = type(w_rel)(xsim.dot(xsim.cross(w2, w3), w_rel), xsim.dot(xsim.cross(w3, e1), w_rel),
                            xsim.dot(xsim.cross(e1, w2), w_rel) * sign) / det
        for i in range(3):
            if i < na:
                joint_q[qs + nl + i] = d6_q[i]
                joint_qd[ds + nl + i] = d6_qd[i]


@xsim.kernel
def eval_fk_kernel(joint_q: Floats, joint_qd: Floats, root_q: Transforms, root_qd: Vec6s, body_com: Vec3s,
                   joint_type: Ints, joint_parent: Ints, joint_child: Ints, joint_X_p: Transforms,
                   joint_X_c: Transforms, joint_axis: Vec3s, d6_dim: Ints, d6_axis: Vec3s, q_start: Ints,
                   qd_start: Ints, tree: Ints, body_joint: Ints, body_q: Transforms, body_qd: Vec6s):
    """Pose and velocity of the child of tree joint ``tid`` from the coordinates of the joints
    above it: walks up the chain composing each joint's transform (child com frame in parent com
    frame) and accumulating the joints' relative twists in the frame reached so far, then places
    the result on the chain's root (the world or a body no joint places, read from ``root_q``)."""
    j = xsim.tid()
    if tree[j] != 0:
        pose = xsim.transform_identity(dtype=joint_q.dtype)  # child com frame in the current frame
        w = body_com.dtype()  # accumulated relative twist, current frame: angular velocity
        v = body_com.dtype()  # and the velocity of the point at the current frame's origin
        k = j
        top = joint_parent[j]
        while k >= 0:
            kind = joint_type[k]
            axis = joint_axis[k]
            xjp = joint_X_p[k]
            qs = q_start[k]
            ds = qd_start[k]
            # the joint's own motion: child joint frame in the parent joint frame, and its rate
            rel = xsim.transform_identity(dtype=joint_q.dtype)
            jw = body_com.dtype()  # parent joint frame
            jv = body_com.dtype()  # velocity of the child com relative to the parent's motion (free joint)
            if kind == JOINT_REVOLUTE:
                rel = xsim.transformation(body_com.dtype(), xsim.quat_from_axis_angle(axis, joint_q[qs]))
                jw = axis * joint_qd[ds]
            elif kind == JOINT_PRISMATIC:
                rel = xsim.transformation(axis * joint_q[qs], xsim.quat_identity(dtype=joint_q.dtype))
                jv = axis * joint_qd[ds]
            elif kind == JOINT_BALL:
                rel = xsim.transformation(body_com.dtype(), xsim.normalize(type(xjp.q)(
                    joint_q[qs], joint_q[qs + 1], joint_q[qs + 2], joint_q[qs + 3])))
                jw = body_com.dtype(joint_qd[ds], joint_qd[ds + 1], joint_qd[ds + 2])
            elif kind == JOINT_FREE or kind == JOINT_DISTANCE:
                rel = xsim.transformation(body_com.dtype(joint_q[qs], joint_q[qs + 1], joint_q[qs + 2]),
                                          xsim.normalize(type(xjp.q)(joint_q[qs + 3], joint_q[qs + 4],
                                                                     joint_q[qs + 5], joint_q[qs + 6])))
                jv = body_com.dtype(joint_qd[ds], joint_qd[ds + 1], joint_qd[ds + 2])
                jw = body_com.dtype(joint_qd[ds + 3], joint_qd[ds + 4], joint_qd[ds + 5])
            elif kind == JOINT_D6:
                nl = d6_dim[2 * k]
                na = d6_dim[2 * k + 1]
                lin = body_com.dtype()
                rot = xsim.quat_identity(dtype=joint_q.dtype)
                for i in range(3):
                    if i < nl:
                        lin = lin + d6_axis[6 * k + i] * joint_q[qs + i]
                        jv = jv + d6_axis[6 * k + i] * joint_qd[ds + i]
                for i in range(3):
                    if i < na:
                        e = d6_axis[6 * k + 3 + i]
                        jw = jw + xsim.quat_rotate(rot, e) * joint_qd[ds + nl + i]
                        rot = rot * xsim.quat_from_axis_angle(e, joint_q[qs + nl + i])
                rel = xsim.transformation(lin, rot)
            step = xjp * rel * xsim.transform_inverse(joint_X_c[k])  # child com frame in parent com frame
            # carry the accumulated twist from the child's com frame into the parent's
            w_up = xsim.quat_rotate(step.q, w)
            v = xsim.quat_rotate(step.q, v) + xsim.cross(step.p, w_up)
            w = w_up
            # add this joint's twist, parent com frame: rotation about the joint point, and the
            # linear rate (prismatic: everything below slides; free: the child's com moves)
            jw = xsim.quat_rotate(xjp.q, jw)
            jv = xsim.quat_rotate(xjp.q, jv)
            w = w + jw
            anchor = xjp.p
            if kind == JOINT_FREE or kind == JOINT_DISTANCE:
                anchor = step.p  # the free joint's linear rate is the child com's
            elif kind == JOINT_D6:  # its rotation turns about the child joint frame's origin
                anchor = xjp.p + xsim.quat_rotate(xjp.q, rel.p)
            v = v + jv - xsim.cross(jw, anchor)
            pose = step * pose
            top = joint_parent[k]
            k = -1
            if top >= 0:
                k = body_joint[top]
        # the chain's root: the world, or a body whose pose and velocity are read
        base = com_frame(top, root_q, body_com)
        vb, wb = com_twist(top, root_qd, body_com)
        w = xsim.quat_rotate(base.q, w)
        v = xsim.quat_rotate(base.q, v) + xsim.cross(base.p, w)
        # the root's own motion as a twist at the world origin
        v = v + vb - xsim.cross(wb, base.p)
        w = w + wb
        pose = base * pose
        bc = joint_child[j]
        x = pose.p
        vc = v + xsim.cross(w, x)
        body_q[bc] = xsim.transformation(x - xsim.quat_rotate(pose.q, body_com[bc]), pose.q)
        body_qd[bc] = body_qd.dtype(vc[0], vc[1], vc[2], w[0], w[1], w[2])


# -------------------------------------------------------------------------------------------------
# entry points


def _layout(model) -> tuple:
    """(model, layout, its device arrays), made once per model."""
    if model.joint_count == 0:
        raise ValueError("joint coordinates: the model has no joints")
    if model._kinematics is None:
        lay = joint_layout(model.joint_type.numpy(), model.joint_parent.numpy(), model.joint_child.numpy(),
                           model.body_count, model.joint_d6_dim.numpy())
        ints = {name: xsim.array(getattr(lay, name)[:model.joint_count] if name != "body_joint" else lay.body_joint,
                                 dtype=int, device=model.device) for name in ("q_start", "qd_start", "tree", "body_joint")}
        model._kinematics = (lay, SimpleNamespace(**ints))
    return (model, *model._kinematics)


def _check(name: str, a, n: int, model) -> None:
    if a is None or a.shape != (n,) or a.dtype is not model.dtype:
        found = "None" if a is None else f"shape {a.shape}, dtype {T.type_name(a.dtype)}"
        raise ValueError(f"{name}: expected an array of {n} {T.type_name(model.dtype)} (the model's joint "
                         f"{'coordinates' if 'qd' not in name else 'velocities'}), found {found}")


def eval_ik(model, state, joint_q=None, joint_qd=None, record_tape: bool = True) -> None:
    """Write the joint coordinates of ``state``'s body poses and velocities into ``joint_q`` and
    ``joint_qd`` (default: ``state.joint_q``/``state.joint_qd``). Layout: module docstring."""
    r, lay, dev = _layout(model)
    joint_q = state.joint_q if joint_q is None else joint_q
    joint_qd = state.joint_qd if joint_qd is None else joint_qd
    _check("eval_ik: joint_q", joint_q, int(lay.q_start[-1]), model)
    _check("eval_ik: joint_qd", joint_qd, int(lay.qd_start[-1]), model)
    xsim.launch(specialized(__name__, model.dtype).eval_ik_kernel, r.joint_count, inputs=[
        state.body_q, state.body_qd, r.body_com, r.joint_type, r.joint_parent, r.joint_child, r.joint_X_p,
        r.joint_X_c, r.joint_axis, r.joint_d6_dim, r.joint_d6_axis, dev.q_start, dev.qd_start],
        outputs=[joint_q, joint_qd], record_tape=record_tape)


def eval_fk(model, joint_q, joint_qd, state) -> None:
    """Set ``state.body_q``/``body_qd`` of every body a joint places from the coordinates
    ``joint_q``/``joint_qd`` (module docstring); other bodies keep their values."""
    r, lay, dev = _layout(model)
    _check("eval_fk: joint_q", joint_q, int(lay.q_start[-1]), model)
    _check("eval_fk: joint_qd", joint_qd, int(lay.qd_start[-1]), model)
    root_q, root_qd = state.body_q, state.body_qd
    if lay.reads_roots:  # roots are read from copies, so the kernel never reads what it writes
        root_q, root_qd = xsim.clone(root_q), xsim.clone(root_qd)
    xsim.launch(specialized(__name__, model.dtype).eval_fk_kernel, r.joint_count, inputs=[
        joint_q, joint_qd, root_q, root_qd, r.body_com, r.joint_type, r.joint_parent, r.joint_child, r.joint_X_p,
        r.joint_X_c, r.joint_axis, r.joint_d6_dim, r.joint_d6_axis, dev.q_start, dev.qd_start, dev.tree,
        dev.body_joint],
        outputs=[state.body_q, state.body_qd])
