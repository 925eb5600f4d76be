"""D6 joints (``add_joint_d6``): any subset of 3 linear and 3 angular axes free, with per-axis limits. With
one free axis a D6 joint is the matching revolute or prismatic joint; with three angular axes a ball."""

import numpy as np
import pytest
from test_rigid import check_velocity_gradient  # same folder (pytest puts it on sys.path)

import xsim
from xsim.sim.builder import ModelBuilder
from xsim.solvers.xpbd.solver import SolverXPBD

CHILD = ((-0.5, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))  # the joint 0.5 m from the body's com, along -x


def swinging(add_joint, requires_grad=False):
    """A 2 kg body with unequal inertia, spinning a little, hung from the world by ``add_joint(builder, body)``."""
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    body = b.add_body(((0.5, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=2.0, com=(0.0, 0.0, 0.0),
                      inertia=np.diag([0.1, 0.2, 0.3]), ang_vel=(0.3, 0.0, 0.2))
    add_joint(b, body)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def run(model, steps=500, dt=1e-3):
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, substeps=4, iterations=2)
    for _ in range(steps):
        solver.step(s0, s1, None, dt)
        s0, s1 = s1, s0
    return s0.body_q.numpy()[0], s0.joint_q.numpy()


PAIRS = {
    "revolute": (lambda b, k: b.add_joint_revolute(-1, k, None, CHILD, axis=(0.0, 1.0, 0.0), limit_lower=-0.5,
                                                   limit_upper=0.8),
                 lambda b, k: b.add_joint_d6(-1, k, None, CHILD, angular_axes=[((0.0, 1.0, 0.0), -0.5, 0.8)])),
    "prismatic": (lambda b, k: b.add_joint_prismatic(-1, k, None, CHILD, axis=(0.6, 0.0, 0.8), limit_lower=-0.3,
                                                     limit_upper=0.2),
                  lambda b, k: b.add_joint_d6(-1, k, None, CHILD, linear_axes=[((0.6, 0.0, 0.8), -0.3, 0.2)])),
    "ball": (lambda b, k: b.add_joint_ball(-1, k, None, CHILD),
             lambda b, k: b.add_joint_d6(-1, k, None, CHILD, angular_axes=[(1.0, 0.0, 0.0), (0.0, 1.0, 0.0),
                                                                          (0.0, 0.0, 1.0)])),
}


@pytest.mark.parametrize("kind", list(PAIRS))
def test_d6_with_the_axes_of_a_joint_moves_as_that_joint(kind):
    plain, d6 = (run(swinging(f)) for f in PAIRS[kind])
    np.testing.assert_allclose(d6[0], plain[0], atol=1e-6)  # measured: 0 (revolute, prismatic), 1e-12 (ball)
    if kind != "ball":  # one coordinate, the same; the ball's are a quaternion, the D6's three angles
        np.testing.assert_allclose(d6[1], plain[1], atol=1e-6)


def test_d6_angular_limits_hold_per_axis():
    # a universal joint (hinges about y, then x) with tight limits about each, swung hard
    limits = [(-0.2, 0.3), (-0.1, 0.15)]
    model = swinging(lambda b, k: b.add_joint_d6(-1, k, None, CHILD, angular_axes=[
        ((0.0, 1.0, 0.0), *limits[0]), ((1.0, 0.0, 0.0), *limits[1])]))
    s0, s1 = model.state(), model.state()
    s0.body_qd = xsim.array([[0.0, 1.0, -2.0, 3.0, 0.0, 0.0]], dtype=xsim.vector(6, xsim.float64))
    solver = SolverXPBD(model, substeps=8, iterations=2)
    seen = []
    for _ in range(400):
        solver.step(s0, s1, None, 1e-3)
        s0, s1 = s1, s0
        seen.append(s0.joint_q.numpy().copy())
    seen = np.array(seen)
    for i, (lo, hi) in enumerate(limits):
        assert seen[:, i].min() > lo - 0.02 and seen[:, i].max() < hi + 0.02  # within 0.02 rad of each limit
        assert seen[:, i].max() > hi - 0.05 or seen[:, i].min() < lo + 0.05  # and it reached one of them
    # the attachment point stays put
    q = s0.body_q.numpy()[0]
    from xsim.sim.shapes import quat_to_matrix

    np.testing.assert_allclose(q[:3] + quat_to_matrix(q[3:]) @ np.array(CHILD[0]), 0.0, atol=1e-4)


def test_planar_d6_slides_freely_in_its_plane_and_keeps_its_rotation_axis():
    # hopper's root: slides along x and z and a hinge about y; gravity along -z makes it fall straight
    model = swinging(lambda b, k: b.add_joint_d6(-1, k, None, CHILD, linear_axes=[(1.0, 0.0, 0.0), (0.0, 0.0, 1.0)],
                                                 angular_axes=[(0.0, 1.0, 0.0)]))
    pose, q = run(model, steps=300)
    t = 0.3
    np.testing.assert_allclose(q[1], -0.5 * 9.81 * t * t, rtol=1e-3)  # free fall along z
    assert abs(pose[1]) < 1e-9 and abs(q[0]) < 1e-9  # nothing moves it out of its plane or along x


def test_pose_gradient_through_a_universal_d6_joint_matches_finite_differences():
    model = swinging(lambda b, k: b.add_joint_d6(-1, k, None, CHILD, linear_axes=[(0.0, 0.0, 1.0)],
                                                 angular_axes=[(0.0, 1.0, 0.0), (1.0, 0.0, 0.0)]), requires_grad=True)
    check_velocity_gradient(model, [[0.1, 0.0, 0.2, 0.4, 0.5, -0.3]], 8, 1.0 / 60.0)


def test_d6_refuses_axes_that_are_not_orthonormal_and_more_than_three():
    b = ModelBuilder()
    k = b.add_body()
    with pytest.raises(ValueError, match="angular_axes must be orthonormal"):
        b.add_joint_d6(-1, k, angular_axes=[(1.0, 0.0, 0.0), (1.0, 1.0, 0.0)])
    with pytest.raises(ValueError, match="at most 3 linear_axes"):
        b.add_joint_d6(-1, k, linear_axes=[(1.0, 0.0, 0.0)] * 4)
