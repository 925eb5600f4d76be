"""Rollout metrics against plain numpy: free flight's exact answer, a spinning box's energy from its
analytic inertia and scipy's rotation, pinned particles left out."""

import numpy as np
from scipy.spatial.transform import Rotation

import xsim
from xsim.distributed import RolloutMetrics, run_rollout
from xsim.sim import ModelBuilder

G = 9.81


def two_particles(v0: float = 1.5):
    """A particle thrown up at v0 m/s from z = 1 and a pinned one (mass 0), in float64."""
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    b.add_particle((0.0, 0.0, 1.0), vel=(0.0, 0.0, v0), mass=0.3)
    b.add_particle((5.0, 5.0, 0.0), mass=0.0)
    return b.finalize(device="cpu", dtype=xsim.float64)


def test_free_flight_metrics_are_the_exact_answer():
    sim = {"dt": 0.02, "substeps": 4, "frames": 10}
    result = run_rollout(two_particles, {"v0": 1.5}, sim=sim)
    t = 0.2  # the solver's step is exact under constant gravity: z = z0 + v0 t - g t^2 / 2
    v = 1.5 - G * t
    z = 1.0 + 1.5 * t - G * t * t / 2
    m = result.metrics
    np.testing.assert_allclose([m["com_x"], m["com_y"], m["com_z"]], [0.0, 0.0, z], atol=1e-10)
    np.testing.assert_allclose(m["max_speed"], max(abs(v), 1.5), rtol=1e-10)
    np.testing.assert_allclose(m["energy"], 0.5 * 0.3 * v * v + 0.3 * G * z, rtol=1e-10)
    assert result.compiled == 0 and result.wall_time > 0


def test_a_spinning_box_has_its_rotational_energy_and_centre():
    hx, hy, hz, density = 0.1, 0.2, 0.3, 500.0
    mass = density * 8 * hx * hy * hz
    inertia = mass / 3 * np.diag([hy**2 + hz**2, hx**2 + hz**2, hx**2 + hy**2])
    q = Rotation.from_rotvec([0.3, -0.5, 0.9])
    omega, velocity, p = np.array([1.0, 2.0, -3.0]), np.array([0.5, 0.0, -0.2]), np.array([0.1, 0.2, 1.5])
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    body = b.add_body(xform=(tuple(p), tuple(q.as_quat())), lin_vel=tuple(velocity), ang_vel=tuple(omega))
    b.add_shape_box(body, hx=hx, hy=hy, hz=hz, density=density)
    model = b.finalize(device="cpu")
    metrics = RolloutMetrics(model)
    metrics(0, model.state())
    R = q.as_matrix()
    expected = 0.5 * mass * velocity @ velocity + 0.5 * omega @ R @ inertia @ R.T @ omega + mass * G * p[2]
    m = metrics.values()
    np.testing.assert_allclose(m["energy"], expected, rtol=1e-5)
    np.testing.assert_allclose([m["com_x"], m["com_y"], m["com_z"]], p, atol=1e-6)
    np.testing.assert_allclose(m["max_speed"], np.linalg.norm(velocity), rtol=1e-6)
