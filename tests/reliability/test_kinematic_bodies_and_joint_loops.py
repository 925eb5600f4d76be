"""Two valid models that were reported to hang (issue 39): a kinematic body (``mass=0``) and a loop of
joints. Each simulates, and against exact answers: a kinematic body moves exactly at the velocity it was
given, whatever is attached to it or rests on it; a closed four-bar linkage keeps its loop closed and its
rocker at the angle the crank's angle fixes (the linkage's position equation, solved here by intersecting
two circles)."""

import math

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

FRAME = 1.0 / 60.0
CRANK, COUPLER, ROCKER, GROUND = 0.2, 0.5, 0.4, 0.45  # link lengths (m): a crank-rocker (Grashof)


def about_z(angle: float):
    return (0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2))


def angle_about_z(q) -> float:
    return 2.0 * math.atan2(q[2], q[3])


def linkage_position(crank_angle: float):
    """(rocker angle, crank tip B, rocker tip C) of the closed linkage, pivots A = (0, 0) and
    D = (GROUND, 0), on the branch with C above the line B D: C lies on the circle of radius COUPLER
    about B and on the circle of radius ROCKER about D."""
    b = np.array([CRANK * math.cos(crank_angle), CRANK * math.sin(crank_angle)])
    d = np.array([GROUND, 0.0])
    bd = d - b
    dist = np.linalg.norm(bd)
    along = (COUPLER ** 2 - ROCKER ** 2 + dist ** 2) / (2.0 * dist)
    off = math.sqrt(COUPLER ** 2 - along ** 2)
    u = bd / dist
    c = b + along * u + off * np.array([-u[1], u[0]])
    return math.atan2(c[1] - d[1], c[0] - d[0]), b, c


def four_bar(dtype):
    """Crank, coupler and rocker (thin boxes along their x axes) in the x-y plane, closed by four hinges
    about z (two to the world, at A and D), released at a crank angle of 60 degrees under gravity -y."""
    b = ModelBuilder(gravity=(0.0, -9.81, 0.0))
    crank_angle = math.radians(60.0)
    rocker_angle, tip_b, tip_c = linkage_position(crank_angle)
    coupler_angle = math.atan2(*(tip_c - tip_b)[::-1])
    links = []
    for start, angle, length in ((np.zeros(2), crank_angle, CRANK), (tip_b, coupler_angle, COUPLER),
                                 (np.array([GROUND, 0.0]), rocker_angle, ROCKER)):
        mid = start + 0.5 * length * np.array([math.cos(angle), math.sin(angle)])
        body = b.add_body(((mid[0], mid[1], 0.0), about_z(angle)))
        b.add_shape_box(body, hx=0.5 * length, hy=0.01, hz=0.01)
        links.append(body)
    crank, coupler, rocker = links

    def at(x):
        return ((x[0], x[1], 0.0), (0.0, 0.0, 0.0, 1.0))

    b.add_joint_revolute(-1, crank, parent_xform=at((0.0, 0.0)), child_xform=at((-CRANK / 2, 0.0)))
    b.add_joint_revolute(crank, coupler, parent_xform=at((CRANK / 2, 0.0)), child_xform=at((-COUPLER / 2, 0.0)))
    b.add_joint_revolute(coupler, rocker, parent_xform=at((COUPLER / 2, 0.0)), child_xform=at((ROCKER / 2, 0.0)))
    b.add_joint_revolute(-1, rocker, parent_xform=at((GROUND, 0.0)), child_xform=at((-ROCKER / 2, 0.0)))
    return b.finalize(dtype=dtype)


@pytest.mark.parametrize("dtype", [xsim.float32, xsim.float64])
def test_a_closed_four_bar_linkage_stays_closed_and_follows_its_position_equation(dtype):
    """Released under gravity, the crank swings through 300 degrees in 2 s. At 20 substeps (the default
    10 iterations) every hinge stays closed within 1e-4 m (measured 3.0e-5; 1.2e-4 at 10 substeps,
    second order), the links stay in their plane, and the rocker is within 1e-3 rad of the angle the
    crank's angle gives (measured 3.0e-4)."""
    model = four_bar(dtype)
    solver = SolverXPBD(model, substeps=20)
    a, s = model.state(), model.state()
    gap, off_plane, rocker_error, crank = 0.0, 0.0, 0.0, []
    for _ in range(120):
        solver.step(a, s, None, FRAME)
        a, s = s, a
        q = a.body_q.numpy().astype(np.float64)
        angles = [angle_about_z(q[k, 3:]) for k in range(3)]

        def end(k, length, sign):
            return q[k, :2] + sign * 0.5 * length * np.array([math.cos(angles[k]), math.sin(angles[k])])

        gap = max(gap, np.linalg.norm(end(0, CRANK, -1)), np.linalg.norm(end(0, CRANK, 1) - end(1, COUPLER, -1)),
                  np.linalg.norm(end(1, COUPLER, 1) - end(2, ROCKER, 1)),
                  np.linalg.norm(end(2, ROCKER, -1) - [GROUND, 0.0]))
        off_plane = max(off_plane, np.abs(q[:, 2]).max(), np.abs(q[:, 3:5]).max())
        expected = linkage_position(angles[0])[0]
        rocker_error = max(rocker_error, abs((angles[2] - expected + math.pi) % (2.0 * math.pi) - math.pi))
        crank.append(angles[0])
    assert max(crank) - min(crank) > math.radians(270.0)  # it moved through most of a turn
    assert gap < 1e-4
    assert off_plane < 1e-5
    assert rocker_error < 1e-3


@pytest.mark.parametrize("dtype", [xsim.float32, xsim.float64])
def test_a_kinematic_body_moves_exactly_at_its_velocity_with_a_pendulum_on_it_and_a_box_riding_it(dtype):
    """A spinning, drifting kinematic box (1 rad/s about z, 0.5 m/s along x) carries a ball-jointed
    pendulum, and a kinematic platform (0.3 m/s) carries a box by friction: after 2 s each kinematic body
    is where its velocity puts it (the spinner's angle 2 rad) and still has that velocity, and the riding
    box moves with its platform."""
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_ground_plane(mu=0.5)
    spinner = b.add_body(((0.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)), mass=0.0, lin_vel=(0.5, 0.0, 0.0),
                         ang_vel=(0.0, 0.0, 1.0))
    b.add_shape_box(spinner, hx=0.1, hy=0.1, hz=0.1)
    bob = b.add_body(((0.3, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_sphere(bob, radius=0.05)
    b.add_joint_ball(spinner, bob, parent_xform=((0.1, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
                     child_xform=((-0.2, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)))
    platform = b.add_body(((0.0, 3.0, 0.05), (0.0, 0.0, 0.0, 1.0)), mass=0.0, lin_vel=(0.3, 0.0, 0.0))
    b.add_shape_box(platform, hx=1.0, hy=1.0, hz=0.05)
    rider = b.add_body(((0.0, 3.0, 0.2), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(rider, hx=0.1, hy=0.1, hz=0.1, mu=0.8)
    model = b.finalize(dtype=dtype)
    solver = SolverXPBD(model, substeps=10)
    a, s = model.state(), model.state()
    for _ in range(120):
        solver.step(a, s, None, FRAME)
        a, s = s, a
    q, qd = a.body_q.numpy().astype(np.float64), a.body_qd.numpy().astype(np.float64)
    tol = 1e-12 if dtype == xsim.float64 else 1e-5
    np.testing.assert_allclose(q[spinner, :3], [1.0, 0.0, 1.0], atol=tol)
    assert abs(angle_about_z(q[spinner, 3:]) - 2.0) < (1e-6 if dtype == xsim.float64 else 1e-5)
    np.testing.assert_allclose(qd[spinner], [0.5, 0.0, 0.0, 0.0, 0.0, 1.0], atol=tol)
    np.testing.assert_allclose(q[platform], [0.6, 3.0, 0.05, 0.0, 0.0, 0.0, 1.0], atol=tol)
    np.testing.assert_allclose(qd[platform], [0.3, 0.0, 0.0, 0.0, 0.0, 0.0], atol=tol)
    # the pendulum hangs from the spinner (its arm 0.2 m from the attachment point) and the rider rides
    attach = q[spinner, :3] + np.array([0.1 * math.cos(2.0), 0.1 * math.sin(2.0), 0.0])
    assert abs(np.linalg.norm(q[bob, :3] - attach) - 0.2) < 1e-3
    assert abs(qd[rider, 0] - 0.3) < 1e-3 and abs(q[rider, 0] - 0.6) < 0.02
