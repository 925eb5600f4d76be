"""Cylinders, cones, ellipsoids and convex hulls in SolverXPBD: each rests in each of its stable poses on
the ground and on a box (float32, as users run it), a solid cylinder launched sliding rolls at 2/3 of
its speed, and rollouts of each kind thrown against every other kind have the gradients of float64
central differences."""

import math

import numpy as np
import pytest
import trimesh
from test_rigid import check_velocity_gradient, pose_weights, rollout_loss  # same folder (on sys.path)

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD

G = 9.81
FRAME = 1.0 / 60.0
R, H = 0.1, 0.15  # cylinder and cone radius and half height (m)
BOX_HULL = trimesh.creation.box((0.3, 0.2, 0.1)).vertices


def about(axis, angle):
    a = np.asarray(axis, dtype=np.float64)
    a = a / np.linalg.norm(a)
    return tuple(np.append(a * math.sin(angle / 2), math.cos(angle / 2)))


def lowest(kind: str, q) -> float:
    """How far below its frame's origin the shape reaches (m) when turned by ``q``: from its surface, sampled
    finely enough that the sample's lowest point is the shape's to 1e-9 m in the poses below."""
    if kind == "cylinder":
        a = np.linspace(0.0, 2.0 * np.pi, 3601)
        ring = np.stack([R * np.cos(a), R * np.sin(a), np.zeros_like(a)], 1)
        points = np.concatenate([ring + (0, 0, -H), ring + (0, 0, H)])
    elif kind == "cone":
        a = np.linspace(0.0, 2.0 * np.pi, 3601)
        points = np.concatenate([np.stack([R * np.cos(a), R * np.sin(a), np.full_like(a, -H)], 1), [[0, 0, H]]])
    elif kind == "ellipsoid":
        radii = np.array([0.2, 0.15, 0.1])
        rot = quat_to_matrix(q)
        return float(np.linalg.norm(radii * rot[2]))  # the support of an ellipsoid along z
    else:
        points = BOX_HULL
    return float(-(points @ quat_to_matrix(q).T)[:, 2].min())


def add(b: ModelBuilder, kind: str, body: int, **kw) -> int:
    if kind == "cylinder":
        return b.add_shape_cylinder(body, radius=R, half_height=H, **kw)
    if kind == "cone":
        return b.add_shape_cone(body, radius=R, half_height=H, **kw)
    if kind == "ellipsoid":
        return b.add_shape_ellipsoid(body, rx=0.2, ry=0.15, rz=0.1, **kw)
    return b.add_shape_convex_hull(body, mesh=BOX_HULL, **kw)


SLANT = math.atan2(2.0 * H, R)  # a cone turned by this about x lies on its slant side (apex and rim level)
STABLE_POSES = {
    "cylinder on a cap": ("cylinder", (0.0, 0.0, 0.0, 1.0)),
    "cylinder on its side": ("cylinder", about((1, 0, 0), math.pi / 2)),
    "cone on its base": ("cone", (0.0, 0.0, 0.0, 1.0)),
    "cone on its side": ("cone", about((1, 0, 0), math.pi - SLANT)),
    "ellipsoid on its shortest axis": ("ellipsoid", (0.0, 0.0, 0.0, 1.0)),
    "hull on its largest face": ("hull", (0.0, 0.0, 0.0, 1.0)),
    "hull on its middle face": ("hull", about((1, 0, 0), math.pi / 2)),
    "hull on its smallest face": ("hull", about((0, 1, 0), math.pi / 2)),
}


@pytest.mark.parametrize("support", ["ground", "box"])
@pytest.mark.parametrize("pose", list(STABLE_POSES))
def test_each_kind_rests_in_each_stable_pose_within_a_millimetre_for_two_seconds(pose, support):
    kind, q = STABLE_POSES[pose]
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    if support == "ground":
        b.add_ground_plane(mu=0.8)
    else:
        b.add_shape_box(-1, xform=((0.0, 0.0, -0.1), (0.0, 0.0, 0.0, 1.0)), hx=0.6, hy=0.6, hz=0.1, mu=0.8)
    start = np.array([0.02, -0.01, lowest(kind, q)])
    body = b.add_body((tuple(start), q))
    add(b, kind, body, mu=0.8)
    model = b.finalize(dtype=xsim.float32)
    solver = SolverXPBD(model, substeps=10)
    s0, s1 = model.state(), model.state()
    for _ in range(120):
        solver.step(s0, s1, None, FRAME)
        s0, s1 = s1, s0
    x = s0.body_q.numpy()[0].astype(np.float64)
    assert np.linalg.norm(x[:3] - start) < 1e-4  # the issue asks for 1 mm; each drifts 5 um or less
    turned = quat_to_matrix(x[3:]) @ quat_to_matrix(q).T
    assert math.degrees(math.acos(min(1.0, (np.trace(turned) - 1.0) / 2.0))) < 0.1
    assert np.abs(s0.body_qd.numpy()[0]).max() < 5e-3


def test_a_solid_cylinder_launched_sliding_rolls_at_two_thirds_of_its_speed():
    # kinetic friction slows it and spins it up until v = w r: then v = 2/3 v0 (I = m r^2 / 2), and static
    # friction keeps it rolling on its two rims' lowest points
    v0, mu = 2.0, 0.5
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    b.add_shape_box(-1, xform=((20.0, 0.0, -0.05), (0.0, 0.0, 0.0, 1.0)), hx=30.0, hy=2.0, hz=0.05, mu=mu)
    body = b.add_body(((0.0, 0.0, 2 * R + 1e-4), about((1, 0, 0), math.pi / 2)))  # axis along y
    b.add_shape_cylinder(body, radius=2 * R, half_height=H, mu=mu)
    model = b.finalize(dtype=xsim.float32)
    solver = SolverXPBD(model, substeps=30)
    s0, s1 = model.state(), model.state()
    for _ in range(10):
        solver.step(s0, s1, None, FRAME)
        s0, s1 = s1, s0
    s0.body_qd.assign(np.array([[v0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32))
    speeds = []
    for _ in range(90):  # rolling from v0 / (3 mu g) = 0.14 s on
        solver.step(s0, s1, None, FRAME)
        s0, s1 = s1, s0
        speeds.append(s0.body_qd.numpy()[0].astype(np.float64))
    rolling = np.array(speeds[30:])
    assert np.abs(rolling[:, 0] / (2.0 / 3.0 * v0) - 1.0).max() < 5e-3
    assert np.abs(rolling[:, 0] - rolling[:, 4] * 2 * R).max() < 5e-3 * v0  # no slip: v = w r
    assert np.abs(rolling[:, 1]).max() < 1e-3  # straight on


# -- gradients: each new kind thrown at each kind (static), float64 central differences of the same forward

TARGETS = ["ground", "box", "sphere", "capsule", "cylinder", "cone", "ellipsoid", "hull"]


def thrown_at(kind: str, target: str):
    """A body of ``kind`` 2 cm above the top of a static ``target`` (centre at the origin), turned a little
    so that it lands on one point or edge first."""
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    top = 0.0
    if target == "ground":
        b.add_ground_plane(mu=0.6)
    elif target == "box":
        b.add_shape_box(-1, hx=0.5, hy=0.5, hz=0.1, mu=0.6)
        top = 0.1
    elif target == "sphere":
        b.add_shape_sphere(-1, radius=0.3, mu=0.6)
        top = 0.3
    elif target == "capsule":
        b.add_shape_capsule(-1, xform=((0, 0, 0), about((0, 1, 0), math.pi / 2)), radius=0.1, half_height=0.4,
                            mu=0.6)
        top = 0.1
    elif target in ("cylinder", "cone"):
        add(b, target, -1, mu=0.6, xform=((0, 0, 0), (0.0, 0.0, 0.0, 1.0)))
        top = H
    elif target == "ellipsoid":
        add(b, target, -1, mu=0.6)
        top = 0.1
    else:
        add(b, target, -1, mu=0.6)
        top = 0.05
    q = about((1.0, 0.7, 0.0), 0.3)
    body = b.add_body(((0.01, 0.02, top + lowest(kind, q) + 0.02), q))
    add(b, kind, body, mu=0.6)
    return b.finalize(dtype=xsim.float64, requires_grad=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["cylinder", "cone", "ellipsoid", "hull"])
def test_thrown_shape_pose_gradient_wrt_its_launch_velocity(kind, target):
    if (kind == "hull") != (target == "hull") and "ground" != target != "box" and "sphere" != target:
        pytest.skip("a convex hull offers its vertices only: its faces meet no curved shape (a documented gap)")
    if kind == target == "hull":
        pytest.skip("convex hulls offer points only: two hulls do not collide (a documented gap)")
    model = thrown_at(kind, target)
    qd0 = [[0.3, -0.2, -0.5, 0.5, -0.3, 0.2]]
    steps = 8  # 0.13 s: it lands (after about 0.04 s) and slides and turns on what it landed on
    weights = xsim.array(pose_weights(model), dtype=xsim.transformd)
    _loss, states = rollout_loss(model, xsim.array(qd0, dtype=xsim.vector(6, xsim.float64)), weights, steps, FRAME)
    vz = states[-1].body_qd.numpy()[0, 2]
    assert vz > -0.5 - G * steps * FRAME + 0.3  # it did land: contact took much of its fall
    # differences of 1e-7: the cone on the ground changes which contacts it has within 1e-6 of this launch (a
    # kink: differences of 1e-5 and 1e-6 disagree with each other by 2%, while 1e-7 meets the tape to 6e-9)
    check_velocity_gradient(model, qd0, steps, FRAME, rtol=1e-4, eps=1e-7)
