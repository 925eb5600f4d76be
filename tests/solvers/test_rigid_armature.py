"""Joint armature (``Model.joint_armature``, ``joint_kernels.py``): inertia of a joint's own coordinate.
On a hinge to the world it is exactly extra inertia of the child about the hinge axis."""

import numpy as np
import pytest

import xsim
from xsim.sim.builder import ModelBuilder
from xsim.solvers.xpbd.solver import SolverXPBD


def swing(armature: float, extra_inertia: float, kd: float, iterations: int = 1) -> np.ndarray:
    """(angle, rate) after 0.3 s of a 2 kg pendulum (com 0.5 m from a y hinge on the world) released
    level, with ``armature`` on the hinge or ``extra_inertia`` added to the body about y."""
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    body = b.add_body(((0.5, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), mass=2.0, com=(0.0, 0.0, 0.0),
                      inertia=np.diag([0.1, 0.1 + extra_inertia, 0.1]))
    j = b.add_joint_revolute(-1, body, None, ((-0.5, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0),
                             target_kd=kd)
    b.joints[j]["armature"] = armature
    model = b.finalize(dtype=xsim.float64)
    s0, s1 = model.state(), model.state()
    solver = SolverXPBD(model, iterations=iterations)
    for _ in range(300):
        solver.step(s0, s1, None, 1.0e-3)
        s0, s1 = s1, s0
    return np.array([s0.joint_q.numpy()[0], s0.joint_qd.numpy()[0]])


def test_armature_on_a_world_hinge_is_inertia_about_its_axis():
    moved = swing(0.0, 0.0, 0.0)
    with_armature, with_inertia = swing(0.7, 0.0, 0.0), swing(0.0, 0.7, 0.0)
    # measured 3.2e-4 relative: a joint with an armature corrects along the arms of the predicted pose, which
    # damps at first order in h, the plain joint along the substep start's (joint_kernels.py); 7e-6 when both
    # took the predicted pose's (the armature's prediction and the body's differ by O(h^2) per step)
    np.testing.assert_allclose(with_armature, with_inertia, rtol=5e-4)
    assert with_armature[0] < 0.5 * moved[0]  # and it matters: the pendulum is twice as slow to fall


@pytest.mark.parametrize("kd", [0.3, 30.0])
def test_velocity_drive_on_an_armature_joint_damps_as_on_the_heavier_body(kd):
    # the drive joins the armature's position-level row (implicit), the plain joint's is in the velocity
    # pass: the two discretizations differ by O(h kd / I); measured 2.3e-4 (kd 0.3), 3.4e-2 (kd 30)
    with_armature, with_inertia = swing(0.7, 0.0, kd), swing(0.0, 0.7, kd)
    np.testing.assert_allclose(with_armature, with_inertia, rtol=1e-3 if kd < 1.0 else 5e-2)
    assert with_armature[1] < swing(0.7, 0.0, 0.0)[1]
