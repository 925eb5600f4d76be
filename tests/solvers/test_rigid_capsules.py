"""Capsule contacts in SolverXPBD are exact along the whole capsule: two capsules' axes meet at the
closest points of the segments, a box's edges against a capsule's axis (the module docstring of
xsim/solvers/xpbd/contacts_rigid.py), checked against analytic rest poses, collisions and central
finite differences (float64).

Before these contacts a capsule offered points spread along its axis (``ceil(h / r) + 1`` of them,
at most 9): two capsules crossing between those points, or a box edge between them, sank by up to
about a radius. The scenes below put the crossing between where those points were."""

import numpy as np
import pytest
from test_rigid import check_velocity_gradient, rollout_loss, run

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD

DT = 1.0 / 60.0
IDENTITY = (0.0, 0.0, 0.0, 1.0)


def lying(degrees: float) -> tuple:
    """The rotation (x, y, z, w) that lays a capsule's axis (its local z) horizontally, ``degrees``
    from x towards y: a quarter turn about the horizontal axis z x direction."""
    a = np.radians(degrees)
    s = np.sin(np.pi / 4.0)
    return (-np.sin(a) * s, np.cos(a) * s, 0.0, np.cos(np.pi / 4.0))


ALONG_X, ALONG_Y = lying(0.0), lying(90.0)


def axis_of(q) -> np.ndarray:
    """World direction of a capsule's axis (its local z) for the body rotation q (x, y, z, w)."""
    return quat_to_matrix(q) @ np.array([0.0, 0.0, 1.0])


def record_poses(model, steps, substeps=10):
    poses = []
    run(model, SolverXPBD(model, substeps=substeps, iterations=1), steps, DT,
        record=lambda s: poses.append(s.body_q.numpy()[0].copy()))
    return np.array(poses)


# -- capsule on capsule ----------------------------------------------------------------------------------


def crossed_capsules(ra=0.04, ha=0.2, rb=0.08, hb=0.4, z=None, requires_grad=False):
    """A capsule along y (radius ``ra``) held ``z`` above a static capsule along x (``rb``) at the
    origin, centred over it. The old sample points: 6 on each, 8 and 16 cm apart, none at the
    crossing, so the closest pair stood 4 cm apart along the upper axis and the upper capsule sank
    to an axis distance of sqrt(0.12^2 - 0.04^2) = 0.113 m."""
    b = ModelBuilder()
    b.add_shape_capsule(-1, xform=((0.0, 0.0, 0.0), ALONG_X), radius=rb, half_height=hb, mu=0.5)
    top = b.add_body(((0.0, 0.0, ra + rb + 0.01 if z is None else z), ALONG_Y))
    b.add_shape_capsule(top, radius=ra, half_height=ha, mu=0.5)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def test_capsule_dropped_across_a_static_capsule_rests_at_the_sum_of_the_radii():
    # the lower capsule is the thicker one, so the upper one rests stably where they cross
    poses = record_poses(crossed_capsules(), 90)
    rest = poses[30:]
    assert np.all(np.abs(rest[:, 2] - 0.12) < 1e-3)  # axis distance ra + rb (old sample points: 0.113)
    assert np.all(np.linalg.norm(rest[:, :2], axis=1) < 1e-3)
    assert abs(axis_of(rest[-1, 3:]) @ [0.0, 1.0, 0.0]) > 1.0 - 1e-6  # still level, still along y


def test_capsule_lying_parallel_on_a_capsule_rests_at_the_sum_of_the_radii_for_two_seconds():
    # both along x, the upper one shifted 0.1 m along the axis: its left end rests on the lower
    # capsule, the lower capsule's right end holds it from below, its centre of mass between them
    r, h = 0.05, 0.2
    b = ModelBuilder()
    b.add_shape_capsule(-1, xform=((0.0, 0.0, 0.0), ALONG_X), radius=r, half_height=h, mu=0.5)
    top = b.add_body(((0.1, 0.0, 2.0 * r), ALONG_X))
    b.add_shape_capsule(top, radius=r, half_height=h, mu=0.5)
    poses = record_poses(b.finalize(dtype=xsim.float64), 120)
    assert np.all(np.abs(poses[:, 2] - 2.0 * r) < 1e-3)
    assert np.all(np.abs(poses[:, 0] - 0.1) < 1e-3) and np.all(np.abs(poses[:, 1]) < 1e-3)
    assert abs(axis_of(poses[-1, 3:]) @ [1.0, 0.0, 0.0]) > 1.0 - 1e-6


def capsule_pair(kind):
    """Two equal capsules (r 0.05 m, half height 0.2 m) 0.6 m apart on x, closing at 1 m/s each, no
    gravity; ``kind`` says how they meet: side to side crossed (their axes along y and z: the
    segment contact), end to end (both along x: the end points) or side by side (both along z: two
    end-point contacts at once, symmetric about the centres)."""
    rot = {"crossed": (ALONG_Y, IDENTITY), "end_to_end": (ALONG_X, ALONG_X), "parallel": (IDENTITY, IDENTITY)}[kind]
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    for k, (x, v) in enumerate(((-0.3, 1.0), (0.3, -1.0))):
        body = b.add_body(((x, 0.0, 0.0), rot[k]), lin_vel=(v, 0.0, 0.0))
        b.add_shape_capsule(body, radius=0.05, half_height=0.2, restitution=1.0)
    return b.finalize(dtype=xsim.float64)


@pytest.mark.parametrize("kind", ["crossed", "end_to_end", "parallel"])
def test_head_on_capsule_collision_with_restitution_one_exchanges_the_velocities(kind):
    """Side by side ("parallel") bounced back at 27% while restitution acted per contact point:
    each end's impulse turned the capsule, and the mean of the two cancelled most of it. It acts
    once per pair now, at the centre of pressure."""
    model = capsule_pair(kind)
    m1, m2 = model.body_mass.numpy()
    assert m1 == pytest.approx(m2, rel=1e-12)
    final = run(model, SolverXPBD(model, substeps=10, iterations=1), 30, DT)
    qd = final.body_qd.numpy()
    # exact to rounding (measured: momentum 0, velocities within 4.4e-14 m/s, the rest within 7.3e-15)
    assert abs(m1 * qd[0, 0] + m2 * qd[1, 0]) < 1e-12 * m1  # momentum zero before
    np.testing.assert_allclose(qd[:, 0], [-1.0, 1.0], rtol=0, atol=5e-13)
    np.testing.assert_allclose(qd[:, 1:], 0.0, rtol=0, atol=1e-13)  # straight back, not turned or deflected


def test_capsule_thrown_onto_a_crossing_capsule_pose_gradient_wrt_initial_velocity():
    # the upper capsule lands on the lower one where they cross, slides and spins on that one
    # segment contact (no end point touches) for most of the 20 steps
    model = crossed_capsules(z=0.125, requires_grad=True)
    qd0 = [[0.3, -0.2, -0.5, 0.0, 0.0, 0.8]]
    grad = check_velocity_gradient(model, qd0, 20, DT)
    assert np.all(np.abs(grad[0, :3]) > 1e-3)
    _, states = rollout_loss(model, xsim.array(qd0, dtype=xsim.vector(6, xsim.float64)),
                             xsim.zeros(1, dtype=xsim.transformd), 20, DT)
    assert abs(states[-1].body_q.numpy()[0, 2] - 0.12) < 2e-3  # it lies on the lower capsule


# -- capsule on box --------------------------------------------------------------------------------------


def capsule_on_box(x, z, rot, r=0.05, h=0.25, mu=0.8):
    """A capsule (radius ``r``, half height ``h``) at (``x``, 0, ``z``) turned by ``rot`` over a static
    0.4 m cube whose top face is at z = 0.4 and whose +x top edge runs along y at x = 0.2."""
    b = ModelBuilder()
    b.add_shape_box(-1, xform=((0.0, 0.0, 0.2), IDENTITY), hx=0.2, hy=0.2, hz=0.2, mu=mu)
    body = b.add_body(((x, 0.0, z), rot))
    b.add_shape_capsule(body, radius=r, half_height=h, mu=mu)
    return b.finalize(dtype=xsim.float64)


def test_capsule_tipping_over_a_box_edge_pivots_on_the_edge_at_its_radius():
    # across the +x top edge, its centre of mass 1 cm beyond it: it tips outwards about the edge. The
    # old sample points (6, 10 cm apart) let the edge cut 15 mm into it as it tipped.
    r, h = 0.05, 0.25
    poses = record_poses(capsule_on_box(0.21, 0.4 + r, ALONG_X, r, h), 40)
    edge_point, edge_dir = np.array([0.2, 0.0, 0.4]), np.array([0.0, 1.0, 0.0])
    tilts = []
    for q in poses:
        d = axis_of(q[3:])
        tilt = np.degrees(np.arcsin(abs(d[2])))
        if tilt > 45.0:  # beyond atan(mu) it slides off the edge
            break
        n = np.cross(d, edge_dir)
        distance = abs((q[:3] - edge_point) @ n) / np.linalg.norm(n)  # between the axis and the edge line
        along = (edge_point - q[:3]) @ d  # where the edge crosses under the axis, from the centre
        assert abs(distance - r) < 1e-3 and abs(along) < h
        tilts.append(tilt)
    assert max(tilts) > 30.0  # it did tip, held by the edge all the way


@pytest.mark.parametrize("length", ["short", "long"])
def test_capsule_lying_on_a_box_face_rests_at_its_radius_without_drifting(length):
    # short: both ends over the face; long: turned 30 degrees about z, both ends beyond the +-x edges,
    # held where it crosses them (the edge contacts' normal is the face's: nothing pulls it sideways)
    r = 0.05
    h, q = (0.12, ALONG_X) if length == "short" else (0.4, lying(30.0))
    poses = record_poses(capsule_on_box(0.0, 0.4 + r, q, r, h), 120)
    assert np.all(np.abs(poses[:, 2] - (0.4 + r)) < 1e-3)
    assert np.all(np.linalg.norm(poses[:, :2], axis=1) < 1e-3)
    assert axis_of(poses[-1, 3:]) @ axis_of(q) > np.cos(np.radians(0.1))  # not turned either


# -- a heap ----------------------------------------------------------------------------------------------


def segment_point_distances(a0, d, points) -> np.ndarray:
    """Distances (m) of ``points`` (k, 3) from the segment a0 + s d, s in [0, 1]."""
    s = np.clip((points - a0) @ d / (d @ d), 0.0, 1.0)
    return np.linalg.norm(points - (a0 + s[:, None] * d), axis=1)


def test_capsules_tumbling_onto_a_box_and_the_ground_never_sink_into_anything():
    # six capsules of random sizes and orientations dropped one after another onto a static box and
    # the ground; after every step, each capsule's depth in the ground, the box and each other capsule
    # (from 2000 points along its axis, exact to a few micrometres). Landing, a capsule is found at most
    # a couple of substeps' travel deep (the fastest lands at 6.7 m/s: 11 mm a substep; measured 17 mm at
    # the frame it lands, which every-10th-frame samples had missed), and at rest in nothing.
    rng = np.random.default_rng(0)
    half = np.array([0.25, 0.15, 0.15])
    b = ModelBuilder()
    b.add_ground_plane(mu=0.5)
    b.add_shape_box(-1, xform=((0.0, 0.0, 0.15), IDENTITY), hx=half[0], hy=half[1], hz=half[2], mu=0.5)
    caps = []
    for k in range(6):
        q = rng.normal(size=4)
        r, h = rng.uniform(0.03, 0.07), rng.uniform(0.05, 0.3)
        x, y = rng.uniform(-0.2, 0.2, size=2)
        body = b.add_body(((x, y, 0.5 + 0.7 * k), q / np.linalg.norm(q)))
        b.add_shape_capsule(body, radius=r, half_height=h, mu=0.5)
        caps.append((r, h))
    model = b.finalize(dtype=xsim.float64)
    poses = []
    run(model, SolverXPBD(model, substeps=10, iterations=1), 240, DT,
        record=lambda state: poses.append(state.body_q.numpy().copy()))

    def deepest(q) -> float:
        dirs = [axis_of(q[k, 3:]) for k in range(len(caps))]
        axes = [(q[k, :3] - h * dirs[k], 2.0 * h * dirs[k], r) for k, (r, h) in enumerate(caps)]
        worst = 0.0
        for i, (a0, d, r) in enumerate(axes):
            pts = a0 + np.linspace(0.0, 1.0, 2000)[:, None] * d
            local = pts - [0.0, 0.0, 0.15]
            in_box = np.linalg.norm(local - np.clip(local, -half, half), axis=1)
            worst = max(worst, r - pts[:, 2].min(), r - in_box.min())
            for b0, e, rb in axes[i + 1:]:
                worst = max(worst, r + rb - segment_point_distances(b0, e, pts).min())
        return worst
    depths = [deepest(q) for q in poses]
    assert max(depths) < 0.02
    assert max(depths[-60:]) < 1e-3  # and at rest, none in another
