"""Rigid contact and conservation against exact answers, xsim's SolverXPBD beside Newton's (issue 33), on the CPU
in float32, one table.

Scenes (xsim's are the standing tests' in tests/solvers/test_rigid_oracles.py; Newton's are built by Newton's
own test code in its wheel, ``newton.tests.test_rigid_friction_ramp``, with ``SolverXPBD(iterations=10)`` as
that file runs it, stepped at the 1/1800 s substep):

- ramp grid: 5 mu x 5 slopes, rows 6 m apart, at the origin and moved 100 m along the rows; cells wrong by
  Newton's thresholds (at rest: moved < 2 cm; sliding: >= 2 cm) and by xsim's (at rest: < 1 mm; sliding:
  the Coulomb distance a (t1^2 - t0^2) / 2 within 5%);
- stopping distance v0^2 / (2 mu g) at v0 = 2 m/s, mu 0.2 / 0.4 / 0.7: relative errors;
- four free boxes 100 m apart, no gravity, 1000 steps of 1 ms (Newton's test_physics_verification scene), at
  the origin and 1 km out: relative drift of the linear and angular momentum;
- a pendulum (sphere 1 m below a revolute joint, 0.05 rad, 3.5 periods, one substep a step) at dt 1 ms and at
  the 0.3 ms Newton's test_physics_verification gives its XPBD (with ``iterations=20, angular_damping=0``, as
  there; the four boxes also without angular damping): mean trajectory error against the small-angle solution
  and the energy's largest departure, as a fraction of the swing energy.

Run: ``python bench/physics_oracles.py [--no-newton]`` (Newton from the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
from common import have_newton

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "solvers"))

import test_rigid_oracles as oracles

import xsim
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

STOP_MUS = (0.2, 0.4, 0.7)
FOUR_BOXES = (np.array([(0, 0, 0), (100, 0, 0), (0, 100, 0), (0, 0, 100)], dtype=np.float64),
              np.array([(1, 0, 0, 0, 0, 0.5), (0, -1, 0, 0.3, 0, 0), (0, 0, 1.5, 0, -0.2, 0),
                        (-0.5, 0.5, -0.5, 0, 0, -0.3)], dtype=np.float64))


def grid_failures(moved, boxes_by_cell) -> tuple[int, int]:
    """(cells wrong by Newton's thresholds, by xsim's) from each cell's displacement in the window (m)."""
    newton_bad = strict_bad = 0
    for (mu, deg), d in zip(boxes_by_cell, moved, strict=True):
        critical = math.degrees(math.atan(mu))
        exact = oracles.coulomb_distance(mu, math.radians(deg))
        if deg < critical - 2.0:
            newton_bad += d >= 0.02
            strict_bad += d >= 1e-3
        elif deg > critical + 2.0:
            newton_bad += d < 0.02
            strict_bad += abs(d - exact) > 0.05 * exact
    return newton_bad, strict_bad


def xsim_grid(offset):
    model, boxes = oracles.ramp_grid(np.array(offset, dtype=np.float64))
    state, solver = oracles.simulate(model, oracles.SETTLE)
    start = state.body_q.numpy().astype(np.float64)[:, :3]
    state, _ = oracles.simulate(model, oracles.MEASURE, state, solver)
    moved = np.linalg.norm(state.body_q.numpy().astype(np.float64)[:, :3] - start, axis=1)
    return grid_failures([moved[b] for b in boxes.values()], list(boxes))


def xsim_stopping():
    v0 = 2.0
    b = ModelBuilder(gravity=(0.0, 0.0, -oracles.G))
    for i, mu in enumerate(STOP_MUS):
        b.add_shape_box(-1, xform=((4.5, 5.0 * i, -0.05), (0.0, 0.0, 0.0, 1.0)), hx=5.0, hy=0.6, hz=0.05, mu=mu)
        body = b.add_body(((0.0, 5.0 * i, 0.251), (0.0, 0.0, 0.0, 1.0)))
        b.add_shape_box(body, hx=0.25, hy=0.25, hz=0.25, mu=mu)
    model = b.finalize(dtype=xsim.float32)
    state, solver = oracles.simulate(model, 30)
    start = state.body_q.numpy().astype(np.float64)[:, 0]
    qd = np.zeros((3, 6), dtype=np.float32)
    qd[:, 0] = v0
    state.body_qd.assign(qd)
    state, _ = oracles.simulate(model, math.ceil(1.5 * v0 / (min(STOP_MUS) * oracles.G) / oracles.FRAME), state, solver)
    d = state.body_q.numpy().astype(np.float64)[:, 0] - start
    return d / (v0 * v0 / (2.0 * np.array(STOP_MUS) * oracles.G)) - 1.0


def xsim_four_boxes(offset: float):
    starts, vel = FOUR_BOXES
    b = ModelBuilder(gravity=(0.0, 0.0, 0.0))
    for x, v in zip(starts + offset, vel, strict=True):
        body = b.add_body((tuple(x), (0.0, 0.0, 0.0, 1.0)), lin_vel=tuple(v[:3]), ang_vel=tuple(v[3:]))
        b.add_shape_box(body, hx=0.5, hy=0.5, hz=0.5)
    model = b.finalize(dtype=xsim.float32)
    about = np.full(3, offset)
    a, c = model.state(), model.state()
    p0, l0 = oracles.momenta(model, a, about)
    solver = SolverXPBD(model)
    for _ in range(1000):
        solver.step(a, c, None, 1e-3)
        a, c = c, a
    p1, l1 = oracles.momenta(model, a, about)
    return np.linalg.norm(p1 - p0) / np.linalg.norm(p0), np.linalg.norm(l1 - l0) / np.linalg.norm(l0)


def pendulum_errors(angles, ip, mass, g, length, amplitude, dt, omegas) -> tuple[float, float]:
    """(mean |theta - theta0 cos(Omega t)| / theta0, max |E - E0| / swing energy) of a recorded swing."""
    omega = math.sqrt(mass * g * length / ip)
    t = np.arange(1, len(angles) + 1) * dt
    error = np.mean(np.abs(angles - amplitude * np.cos(omega * t))) / amplitude
    energy = 0.5 * ip * omegas ** 2 - mass * g * length * np.cos(angles)
    e0 = -mass * g * length * math.cos(amplitude)
    return error, np.abs(energy - e0).max() / (mass * g * length * (1.0 - math.cos(amplitude)))


def xsim_pendulum(amplitude=0.05, dt=1e-3, substeps=1):
    g, length = 10.0, 1.0
    b = ModelBuilder(gravity=(0.0, -g, 0.0))
    body = b.add_body(((length * math.sin(amplitude), -length * math.cos(amplitude), 0.0),
                       (0.0, 0.0, math.sin(amplitude / 2), math.cos(amplitude / 2))))
    b.add_shape_sphere(body, radius=0.01)
    b.add_joint_revolute(-1, body, parent_xform=((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
                         child_xform=((0.0, length, 0.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 0.0, 1.0))
    model = b.finalize(dtype=xsim.float32)
    mass = float(model.body_mass.numpy()[0])
    ip = float(model.body_inertia.numpy()[0][2, 2]) + mass * length * length
    period = 2.0 * math.pi * math.sqrt(ip / (mass * g * length))
    solver = SolverXPBD(model, substeps=substeps)
    a, c = model.state(), model.state()
    angles, omegas = [], []
    for _ in range(int(3.5 * period / dt)):
        solver.step(a, c, None, dt)
        a, c = c, a
        q = a.body_q.numpy()[0].astype(np.float64)
        angles.append(math.atan2(q[0], -q[1]))
        omegas.append(float(a.body_qd.numpy()[0, 5]))
    return pendulum_errors(np.array(angles), ip, mass, g, length, amplitude, dt, np.array(omegas))


# -- Newton ------------------------------------------------------------------------------------------------


def newton_solver(model, **kw):
    import newton
    return newton.solvers.SolverXPBD(model, **({"iterations": 10} | kw))


def newton_grid(offset):
    import newton
    import newton.tests.test_rigid_friction_ramp as ramp
    model, box_ids = ramp.build_friction_grid("cpu", ramp._DEFAULT_MUS, ramp._DEFAULT_ANGLES_DEG)
    q = model.body_q.numpy()
    q[:, :3] += offset  # the whole grid: its static ramps are shapes of the world, moved with it below
    model.body_q.assign(q)
    xf = model.shape_transform.numpy()
    static = model.shape_body.numpy() < 0
    xf[static, :3] += offset
    model.shape_transform.assign(xf)
    solver = newton_solver(model)
    s0, s1, control = model.state(), model.state(), model.control()
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    s0, s1 = ramp.simulate(solver, model, s0, s1, control, pipeline, contacts, ramp.SETTLE_FRAMES)
    start = s0.body_q.numpy().astype(np.float64)[:, :3].copy()
    s0, s1 = ramp.simulate(solver, model, s0, s1, control, pipeline, contacts, ramp.MEASURE_FRAMES)
    moved = np.linalg.norm(s0.body_q.numpy().astype(np.float64)[:, :3] - start, axis=1)
    cells = [(mu, deg) for mu in ramp._DEFAULT_MUS for deg in ramp._DEFAULT_ANGLES_DEG]
    return grid_failures([moved[box_ids[r][c]] for r in range(5) for c in range(5)], cells)


def newton_stopping():
    import newton
    import newton.tests.test_rigid_friction_ramp as ramp
    model, box_ids = ramp.build_stopping_distance_scene("cpu")
    solver = newton_solver(model)
    s0, s1, control = model.state(), model.state(), model.control()
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    s0, s1 = ramp.simulate(solver, model, s0, s1, control, pipeline, contacts, ramp.STOPPING_SETTLE_FRAMES)
    start = s0.body_q.numpy().astype(np.float64)[:, 0].copy()
    qd = s0.body_qd.numpy()
    for b in box_ids:
        qd[b] = 0.0
        qd[b, 0] = ramp.STOPPING_V0
    s0.body_qd.assign(qd)
    frames = math.ceil(1.5 * ramp.STOPPING_V0 / (min(ramp.STOPPING_MUS) * abs(ramp.GRAVITY)) / ramp.SIM_DT)
    s0, s1 = ramp.simulate(solver, model, s0, s1, control, pipeline, contacts, frames)
    d = s0.body_q.numpy().astype(np.float64)[box_ids, 0] - start[box_ids]
    v0 = ramp.STOPPING_V0
    return d / (v0 * v0 / (2.0 * np.array(ramp.STOPPING_MUS) * abs(ramp.GRAVITY))) - 1.0


def newton_four_boxes(offset: float):
    import newton
    import warp as wp

    from xsim.sim.shapes import quat_to_matrix
    starts, vel = FOUR_BOXES
    b = newton.ModelBuilder(gravity=(0.0, 0.0, 0.0))
    for x in starts + offset:
        body = b.add_body(xform=wp.transform(wp.vec3(*x), wp.quat_identity()))
        b.add_shape_box(body, hx=0.5, hy=0.5, hz=0.5)
    model = b.finalize(device="cpu")
    solver = newton_solver(model, angular_damping=0.0)
    s0, s1 = model.state(), model.state()
    s0.body_qd.assign(vel.astype(np.float32))
    m, inertia = model.body_mass.numpy(), model.body_inertia.numpy()

    def momenta(state):
        q, qd = state.body_q.numpy().astype(np.float64), state.body_qd.numpy().astype(np.float64)
        p, angular = np.zeros(3), np.zeros(3)
        for i in range(4):
            rot = quat_to_matrix(q[i, 3:])
            p += m[i] * qd[i, :3]
            angular += np.cross(q[i, :3] - offset, m[i] * qd[i, :3]) + rot @ inertia[i] @ rot.T @ qd[i, 3:]
        return p, angular
    p0, l0 = momenta(s0)
    for _ in range(1000):
        s0.clear_forces()
        solver.step(s0, s1, None, None, 1e-3)
        s0, s1 = s1, s0
    p1, l1 = momenta(s0)
    return np.linalg.norm(p1 - p0) / np.linalg.norm(p0), np.linalg.norm(l1 - l0) / np.linalg.norm(l0)


def newton_pendulum(amplitude=0.05, dt=1e-3):
    import newton
    import warp as wp
    g, length = 10.0, 1.0
    b = newton.ModelBuilder(gravity=(0.0, -g, 0.0), up_axis=newton.Axis.Y)
    link = b.add_link()
    b.add_shape_sphere(link, radius=0.01)
    j = b.add_joint_revolute(parent=-1, child=link, axis=newton.Axis.Z,
                             parent_xform=wp.transform(wp.vec3(0.0, 0.0, 0.0), wp.quat_identity()),
                             child_xform=wp.transform(wp.vec3(0.0, length, 0.0), wp.quat_identity()), armature=0.0)
    b.add_articulation([j])
    model = b.finalize(device="cpu")
    q = model.joint_q.numpy()
    q[model.joint_q_start.numpy()[0]] = amplitude
    model.joint_q.assign(q)
    s0, s1 = model.state(), model.state()
    s0.joint_q.assign(model.joint_q)
    s0.joint_qd.assign(model.joint_qd)
    newton.eval_fk(model, s0.joint_q, s0.joint_qd, s0)
    solver = newton_solver(model, iterations=20, angular_damping=0.0)
    mass = float(model.body_mass.numpy()[0])
    inertia = model.body_inertia.numpy()[0]
    ip = float(inertia[2, 2]) + mass * length * length
    period = 2.0 * math.pi * math.sqrt(ip / (mass * g * length))
    angles, omegas = [], []
    for _ in range(int(3.5 * period / dt)):
        s0.clear_forces()
        solver.step(s0, s1, None, None, dt)
        s0, s1 = s1, s0
        x = s0.body_q.numpy()[0].astype(np.float64)
        angles.append(math.atan2(x[0], -x[1]))
        omegas.append(float(s0.body_qd.numpy()[0, 5]))
    return pendulum_errors(np.array(angles), ip, mass, g, length, amplitude, dt, np.array(omegas))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-newton", action="store_true", help="skip Newton")
    args = parser.parse_args()
    engines = {"xsim": (xsim_grid, xsim_stopping, xsim_four_boxes, xsim_pendulum)}
    if not args.no_newton and have_newton():
        import warp as wp
        wp.config.quiet = True
        engines["Newton"] = (newton_grid, newton_stopping, newton_four_boxes, newton_pendulum)
    rows = []
    for name, (grid, stopping, boxes, pendulum) in engines.items():
        cells = [grid((0.0, 0.0, 0.0)), grid((0.0, 100.0, 0.0))]
        stop = stopping()
        momentum = [boxes(0.0), boxes(1000.0)]
        swing = [pendulum(dt=1e-3), pendulum(dt=3e-4)]
        rows.append((name, cells, stop, momentum, swing))
    print("| engine | ramp cells wrong, Newton's / strict bounds (origin; 100 m) | stopping distance error, "
          "mu 0.2 / 0.4 / 0.7 | momentum drift, linear / angular (origin; 1 km) | pendulum: trajectory error, "
          "energy / swing energy (dt 1 ms; 0.3 ms) |")
    print("| --- | --- | --- | --- | --- |")
    for name, cells, stop, momentum, swing in rows:
        print(f"| {name} | {cells[0][0]} / {cells[0][1]}; {cells[1][0]} / {cells[1][1]} | "
              + " / ".join(f"{e:+.2%}" for e in stop) + " | "
              + "; ".join(f"{p:.1e} / {a:.1e}" for p, a in momentum)
              + " | " + "; ".join(f"{e:.2%}, {w:.1%}" for e, w in swing) + " |")


if __name__ == "__main__":
    main()
