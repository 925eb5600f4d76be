"""Rigid contact against exact answers, in float32 as users run it, near the origin and far from it:
Coulomb's law on Newton's friction-ramp grid (newton/tests/test_rigid_friction_ramp.py, its layout and
thresholds, plus xsim's stricter ones), the same law with the gravity tilted instead of the ramp, stopping
distances v0^2 / (2 mu g), a sphere launched sliding that rolls at 5/7 v0, and the momenta of free bodies
(Newton's four-box scene of test_physics_verification.py), each with several contacts per body."""

import math

import numpy as np
import pytest
from test_rigid import check_velocity_gradient  # same folder (pytest puts it on sys.path)

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import quat_to_matrix
from xsim.solvers import SolverXPBD

G = 9.81
FRAME = 1.0 / 60.0
SUBSTEPS = 30  # Newton's grid: 1/60 s frames of 30 substeps
MUS = (0.1, 0.3, 0.5, 0.7, 1.0)
ANGLES = (3.0, 10.0, 20.0, 30.0, 40.0)  # degrees
SETTLE, MEASURE = 30, 15  # frames: the window is t0 = 0.5 s to t1 = 0.75 s


def about_x(angle: float):
    return (math.sin(angle / 2), 0.0, 0.0, math.cos(angle / 2))


def simulate(model, frames, state=None, solver=None):
    """Step ``frames`` frames of 1/60 s from ``state`` (a new one if None); returns (state, solver)."""
    solver = solver or SolverXPBD(model, substeps=SUBSTEPS)
    a, b = state or model.state(), model.state()
    for _ in range(frames):
        solver.step(a, b, None, FRAME)
        a, b = b, a
    return a, solver


def coulomb_distance(mu: float, angle: float) -> float:
    """Distance (m) a box released at rest on a slope of ``angle`` (rad) covers in the window: 0 where
    tan(angle) <= mu, else a (t1^2 - t0^2) / 2 with a = g (sin - mu cos)."""
    a = G * (math.sin(angle) - mu * math.cos(angle))
    t0, t1 = SETTLE * FRAME, (SETTLE + MEASURE) * FRAME
    return max(a, 0.0) * (t1 * t1 - t0 * t0) / 2.0


def ramp_grid(offset):
    """Newton's grid: a 0.4 x 0.4 x 0.1 m box 1 mm above each static ramp (1.0 x 5.0 x 0.1 m, turned
    about x), columns 2.5 m apart, rows 6 m apart, box and ramp of the row's mu; moved by ``offset`` (m).
    Returns (model, {(mu, angle in degrees): body})."""
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    boxes = {}
    for row, mu in enumerate(MUS):
        for col, deg in enumerate(ANGLES):
            q = about_x(math.radians(deg))
            centre = np.array([2.5 * col, 6.0 * row, 2.0]) + offset
            b.add_shape_box(-1, xform=(tuple(centre), q), hx=0.5, hy=2.5, hz=0.05, mu=mu)
            up = quat_to_matrix(q) @ [0.0, 0.0, 1.0]
            body = b.add_body((tuple(centre + (0.05 + 0.05 + 0.001) * up), q))
            b.add_shape_box(body, hx=0.2, hy=0.2, hz=0.05, mu=mu)
            boxes[(mu, deg)] = body
    return b.finalize(dtype=xsim.float32), boxes


@pytest.mark.parametrize("offset", [(0.0, 0.0, 0.0), (0.0, 100.0, 0.0), (100.0, 100.0, 0.0)],
                         ids=["origin", "100m_along_slope", "141m_diagonal"])
def test_ramp_grid_obeys_coulomb_far_from_the_origin_in_float32(offset):
    # below atan(mu) - 2 deg a box rests (Newton: moves < 2 cm; here < 1 mm, |v| < 1 mm/s); above + 2 deg it
    # slides (Newton: >= 2 cm; here the Coulomb distance within 5%). Before the solver measured contacts
    # from displacements, 16 of the 25 cells were wrong at the origin in float32 (rows sit 6 to 24 m out)
    model, boxes = ramp_grid(np.array(offset))
    state, solver = simulate(model, SETTLE)
    start = state.body_q.numpy().astype(np.float64)[:, :3]
    state, _ = simulate(model, MEASURE, state, solver)
    moved = np.linalg.norm(state.body_q.numpy().astype(np.float64)[:, :3] - start, axis=1)
    speed = np.linalg.norm(state.body_qd.numpy()[:, :3], axis=1)
    failures = []
    for (mu, deg), body in boxes.items():
        critical = math.degrees(math.atan(mu))
        exact = coulomb_distance(mu, math.radians(deg))
        if deg < critical - 2.0 and (moved[body] >= 1e-3 or speed[body] >= 1e-3):
            failures.append(f"mu {mu} at {deg} deg rests in Coulomb's law: moved {moved[body]:.2e} m, "
                            f"{speed[body]:.2e} m/s")
        if deg > critical + 2.0 and abs(moved[body] - exact) > 0.05 * exact:
            failures.append(f"mu {mu} at {deg} deg slides {exact:.4f} m in Coulomb's law: {moved[body]:.4f} m")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("mu, deg", [(0.7, 40.0), (0.5, 30.0), (0.3, 30.0)])
def test_a_flat_patch_under_tilted_gravity_slides_as_far_as_the_ramp(mu, deg):
    # the same law as the ramp's cell with the slope in the gravity: once 20% further than Coulomb
    angle = math.radians(deg)
    b = ModelBuilder(gravity=(0.0, G * math.sin(angle), -G * math.cos(angle)))
    b.add_shape_box(-1, xform=((0.0, 12.0, 2.0), (0.0, 0.0, 0.0, 1.0)), hx=0.5, hy=2.5, hz=0.05, mu=mu)
    body = b.add_body(((0.0, 12.0, 2.101), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(body, hx=0.2, hy=0.2, hz=0.05, mu=mu)
    model = b.finalize(dtype=xsim.float32)
    state, solver = simulate(model, SETTLE)
    start = state.body_q.numpy().astype(np.float64)[0, :3]
    state, _ = simulate(model, MEASURE, state, solver)
    moved = np.linalg.norm(state.body_q.numpy().astype(np.float64)[0, :3] - start)
    exact = coulomb_distance(mu, angle)
    assert abs(moved - exact) < 0.05 * exact, (moved, exact)


@pytest.mark.parametrize("offset", [(0.0, 0.0, 0.0), (0.0, 100.0, 0.0)], ids=["origin", "100m"])
def test_sliding_boxes_stop_at_v0_squared_over_two_mu_g(offset):
    # Newton's scene: 0.5 m cubes settled on their own static patches, then launched at 2 m/s; Newton's
    # bound is 1%, xsim's 0.5% (measured -0.15% to -0.20%: the box dips into the patch a little as it brakes)
    v0, mus = 2.0, (0.2, 0.4, 0.7)
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    bodies = []
    for i, mu in enumerate(mus):
        y = 5.0 * i
        b.add_shape_box(-1, xform=(tuple(np.add((4.5, y, -0.05), offset)), (0.0, 0.0, 0.0, 1.0)), hx=5.0, hy=0.6,
                        hz=0.05, mu=mu)
        bodies.append(b.add_body((tuple(np.add((0.0, y, 0.251), offset)), (0.0, 0.0, 0.0, 1.0))))
        b.add_shape_box(bodies[-1], hx=0.25, hy=0.25, hz=0.25, mu=mu)
    model = b.finalize(dtype=xsim.float32)
    state, solver = simulate(model, 30)
    start = state.body_q.numpy().astype(np.float64)[:, 0]
    qd = np.zeros((len(mus), 6), dtype=np.float32)
    qd[:, 0] = v0
    state.body_qd.assign(qd)
    state, _ = simulate(model, math.ceil(1.5 * v0 / (min(mus) * G) / FRAME), state, solver)
    distance = state.body_q.numpy().astype(np.float64)[:, 0] - start
    exact = v0 * v0 / (2.0 * np.array(mus) * G)
    np.testing.assert_allclose(distance, exact, rtol=5e-3)
    assert np.abs(state.body_qd.numpy()).max() < 1e-3  # and they stay stopped


def test_a_sphere_launched_sliding_rolls_at_five_sevenths_of_its_speed():
    # kinetic friction slows it and spins it up until v = w r: then v = 5/7 v0 for a solid sphere, and static
    # friction keeps it rolling (with contacts anchored where sticking began, v swung between 0.88 and 1.0 of
    # that speed and w r between 1.0 and 1.3: the old contact point lifted off with the rolling)
    v0, r, mu = 2.0, 0.25, 0.5
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    b.add_shape_box(-1, xform=((20.0, 0.0, -0.05), (0.0, 0.0, 0.0, 1.0)), hx=30.0, hy=2.0, hz=0.05, mu=mu)
    body = b.add_body(((0.0, 0.0, r + 1e-4), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_sphere(body, radius=r, mu=mu)
    model = b.finalize(dtype=xsim.float32)
    state, solver = simulate(model, 10)
    state.body_qd.assign(np.array([[v0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32))
    speeds = []
    for _ in range(90):  # rolling from 2 v0 / (7 mu g) = 0.12 s on
        state, _ = simulate(model, 1, state, solver)
        speeds.append(state.body_qd.numpy()[0].astype(np.float64))
    rolling = np.array(speeds[30:])
    assert np.abs(rolling[:, 0] / (5.0 / 7.0 * v0) - 1.0).max() < 5e-3
    assert np.abs(rolling[:, 0] - rolling[:, 4] * r).max() < 5e-3 * v0  # no slip: v = w r


def momenta(model, state, about=(0.0, 0.0, 0.0)):
    """Total linear and angular momentum (kg m/s, kg m^2/s; the latter about the point ``about``) of the
    bodies, at their exact positions (body_q plus its residual)."""
    q = state.body_q.numpy().astype(np.float64)
    x = q[:, :3] + state.body_q_residual.numpy() - np.asarray(about)
    qd = state.body_qd.numpy().astype(np.float64)
    m, inertia = model.body_mass.numpy(), model.body_inertia.numpy()
    p, angular = np.zeros(3), np.zeros(3)
    for i in range(model.body_count):
        rot = quat_to_matrix(q[i, 3:])
        p += m[i] * qd[i, :3]
        angular += np.cross(x[i], m[i] * qd[i, :3]) + rot @ inertia[i] @ rot.T @ qd[i, 3:]
    return p, angular


@pytest.mark.parametrize("offset", [0.0, 1000.0], ids=["newton_scene", "1km_out"])
def test_four_free_boxes_keep_their_momenta_and_fly_straight(offset):
    # Newton's scene: four boxes 100 m apart, no gravity, 1000 steps of 1 ms; Newton's bound 5e-4, xsim's
    # 1e-5 (measured 0 and 2.3e-6) and, 1 km out, 5e-4 (measured 0 and 3e-7). Before, velocities were
    # re-derived from rounded float32 positions: 1 km out a box at 1.0 m/s flew at 0.9765625
    starts = np.array([(0, 0, 0), (100, 0, 0), (0, 100, 0), (0, 0, 100)], dtype=np.float64) + offset
    velocities = np.array([(1, 0, 0, 0, 0, 0.5), (0, -1, 0, 0.3, 0, 0), (0, 0, 1.5, 0, -0.2, 0),
                           (-0.5, 0.5, -0.5, 0, 0, -0.3)], dtype=np.float64)
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    for x, v in zip(starts, velocities, strict=True):
        body = b.add_body((tuple(x), (0.0, 0.0, 0.0, 1.0)), lin_vel=tuple(v[:3]), ang_vel=tuple(v[3:]))
        b.add_shape_box(body, hx=0.5, hy=0.5, hz=0.5)
    model = b.finalize(dtype=xsim.float32)
    about = np.full(3, offset)
    a, b2 = model.state(), model.state()
    p0, l0 = momenta(model, a, about)
    solver = SolverXPBD(model)
    for _ in range(1000):
        solver.step(a, b2, None, 1e-3)
        a, b2 = b2, a
    p1, l1 = momenta(model, a, about)
    assert np.linalg.norm(p1 - p0) / np.linalg.norm(p0) < 1e-5
    assert np.linalg.norm(l1 - l0) / np.linalg.norm(l0) < 1e-5
    # each centre moved v t to float32 rounding of its own path, not of its distance from the origin
    exact = starts + velocities[:, :3] * 1.0
    assert np.abs(a.body_q.numpy()[:, :3] + a.body_q_residual.numpy() - exact).max() < 1e-6
    assert np.abs(a.body_q.numpy()[:, :3] - exact).max() <= np.spacing(np.float32(offset + 101.5))


@xsim.kernel
def box_x(q: xsim.array(dtype=xsim.types.transformation(xsim.types.Float)), out: xsim.array(dtype=xsim.types.Float)):
    out[0] = q[0].p[0]


def stopping_rollout(mu: float, v0: float, dtype, requires_grad: bool):
    """A 0.5 m cube resting on a static patch (its mu and the patch's), launched at ``v0`` (m/s) along x and
    stepped until well after it stopped (10 substeps a frame): (its final x, m; the first state; the model)."""
    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    b.add_shape_box(-1, xform=((4.5, 0.0, -0.05), (0.0, 0.0, 0.0, 1.0)), hx=5.0, hy=0.6, hz=0.05, mu=mu)
    body = b.add_body(((0.0, 0.0, 0.25), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(body, hx=0.25, hy=0.25, hz=0.25, mu=mu)
    model = b.finalize(dtype=dtype, requires_grad=requires_grad)
    solver = SolverXPBD(model, substeps=10)
    first = model.state(requires_grad=requires_grad)
    first.body_qd = xsim.array([[v0, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=first.body_qd.dtype, requires_grad=requires_grad)
    state = first
    for _ in range(int(1.3 * v0 / (mu * G) / FRAME) + 10):
        nxt = model.state(requires_grad=requires_grad)
        solver.step(state, nxt, None, FRAME)
        state = nxt
    x = xsim.zeros(1, dtype=dtype, requires_grad=requires_grad)
    xsim.launch(box_x, 1, inputs=[state.body_q], outputs=[x])
    return x, first, model


def stopping_gradients(mu: float, v0: float, dtype):
    """The tape's (d x / d v0, d x / d mu) of ``stopping_rollout``; mu is both shapes' (the pair's mean)."""
    tape = xsim.Tape()
    with tape:
        x, first, model = stopping_rollout(mu, v0, dtype, True)
    tape.backward(x)
    return first.body_qd.grad.numpy()[0, 0], model.shape_mu.grad.numpy().sum()


@pytest.mark.parametrize("mu", [0.2, 0.4, 0.7])
def test_stopping_distance_gradients_are_the_forwards_and_the_closed_forms(mu):
    # d/dv0 = v0 / (mu g), d/dmu = -v0^2 / (2 mu^2 g); central differences of the float64 forward at 1e-6 stay on
    # one branch (a step of 1e-4 in v0 can move the substep the box stops in). Measured in float64: the tape
    # equal to them in 4-5 digits, within 0.27% / 0.57% of the closed forms; float32 tape within 0.6%. Before,
    # a box that stopped mid-step was pulled back towards where the step began: the forward was saw-toothed
    # and at mu 0.4 its exact derivative was 0.537 (the closed form 0.510)
    v0 = 2.0
    exact = np.array([v0 / (mu * G), -v0 * v0 / (2.0 * mu * mu * G)])
    tape64 = np.array(stopping_gradients(mu, v0, xsim.float64))
    eps = 1e-6

    def x(v, m):
        return stopping_rollout(m, v, xsim.float64, False)[0].numpy()[0]
    fd = np.array([(x(v0 + eps, mu) - x(v0 - eps, mu)) / (2 * eps), (x(v0, mu + eps) - x(v0, mu - eps)) / (2 * eps)])
    np.testing.assert_allclose(tape64, fd, rtol=1e-2)
    np.testing.assert_allclose(tape64, exact, rtol=2e-2)
    np.testing.assert_allclose(stopping_gradients(mu, v0, xsim.float32), exact, rtol=3e-2)


# -- gradients of contact branches against float64 central differences of the same forward (test_rigid's
# check_velocity_gradient: a weighted sum of the final poses, d/d initial body_qd, steps of 1/60 s, 5 substeps)


def test_rolling_sphere_pose_gradient_wrt_its_launch_velocity():
    # sliding, then rolling under static friction from the fourth step on: both branches on the gradient's path
    b = ModelBuilder()
    b.add_ground_plane(mu=0.5)
    body = b.add_body(((0.0, 0.0, 0.25), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_sphere(body, radius=0.25, mu=0.5)
    model = b.finalize(dtype=xsim.float64, requires_grad=True)
    grad = check_velocity_gradient(model, [[2.0, 0.3, 0.0, 0.0, 1.0, 0.0]], 12, FRAME, rtol=1e-3)
    assert np.abs(grad[0, :2]).max() > 1e-3


def test_box_resting_on_a_slope_pose_gradient_wrt_a_nudge():
    # below its friction angle (tan = 0.5 < 0.6): static friction holds it on four corners the whole time
    angle = math.atan(0.5)
    b = ModelBuilder(gravity=(G * math.sin(angle), 0.0, -G * math.cos(angle)))
    b.add_ground_plane(mu=0.6)
    body = b.add_body(((0.0, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(body, hx=0.2, hy=0.15, hz=0.1, mu=0.6)
    model = b.finalize(dtype=xsim.float64, requires_grad=True)
    check_velocity_gradient(model, [[0.01, -0.02, 0.0, 0.0, 0.0, 0.05]], 8, FRAME, rtol=1e-3)


def test_box_pushed_by_another_box_pose_gradient_wrt_both_velocities():
    # a box sliding into one that is nearly at rest on the ground: box-box contact (corners and edges) and both
    # boxes' ground friction. (Exactly at rest, a contact's friction along slip / |slip| has no derivative: the
    # tape then takes the tangent-plane solve's, which central differences of the forward only approach.)
    b = ModelBuilder()
    b.add_ground_plane(mu=0.3)
    for x, v in ((0.0, 2.0), (0.5, 0.0)):
        body = b.add_body(((x, 0.0, 0.1), (0.0, 0.0, 0.0, 1.0)), lin_vel=(v, 0.0, 0.0))
        b.add_shape_box(body, hx=0.2, hy=0.2, hz=0.1, mu=0.3)
    model = b.finalize(dtype=xsim.float64, requires_grad=True)
    grad = check_velocity_gradient(model, [[2.0, 0.05, 0.0, 0.0, 0.0, 0.1], [0.0, 0.05, 0.0, 0.0, 0.0, 0.0]], 10,
                                   FRAME, rtol=1e-3)
    assert np.abs(grad[1]).max() > 1e-3  # the pushed box's velocity matters through the contact
