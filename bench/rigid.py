"""Rigid-body benchmark (issue 7): xsim's SolverXPBD against Newton 1.8's SolverXPBD on the CPU.

Scenes:

- boxes: 8 boxes (0.2 m cubes, 1000 kg/m^3) dropped from staggered heights onto the ground plane,
  dt = 1/600 s, 5 position iterations per step (Newton: ``iterations=5``; xsim: 5 substeps of one
  iteration each, Mueller et al. 2020's scheme, the same number of constraint passes). Newton's
  time includes its collision pipeline (``collide`` + ``step``), xsim's its in-step broad phase.
- pendulum: a 2-link revolute pendulum (two 0.5 m capsule links), same dt and iterations.

Measured: forward steps/s (median of runs of 200 steps after warm-up), and a 20-step rollout on a
tape: forward and backward times. Goals: xsim >= 2x Newton's steps/s on both scenes, xsim's 20-step
backward <= 2x its forward. Run: ``python bench/rigid.py [--repeat N] [--no-newton]``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from common import fmt_time, have_newton, print_table, ratio, time_stepping, time_taped_rollout

DT = 1.0 / 600.0
ITERATIONS = 5
STEPS = 200
WARMUP = 20
TAPE_STEPS = 20
HALF = 0.1  # m, box half extent
LINK = 0.5  # m, pendulum link length


def box_positions():
    """8 boxes on a 4 x 2 grid, 0.3 m apart, dropped from 0.3 to 1.0 m."""
    return [(0.3 * (k % 4), 0.3 * (k // 4), 0.3 + 0.1 * k) for k in range(8)]


# -------------------------------------------------------------------------------------------------
# xsim


def xsim_pendulum():
    """The 2-link pendulum in an xsim ModelBuilder (also the world of ``worlds.py``)."""
    from xsim.sim import ModelBuilder
    b = ModelBuilder()
    for k in range(2):
        body = b.add_body(((LINK * (k + 0.5), 0.0, 2.0), (0.0, 0.0, 0.0, 1.0)))
        b.add_shape_capsule(body, xform=((0.0, 0.0, 0.0), (0.0, 0.7071068, 0.0, 0.7071068)), radius=0.03,
                            half_height=0.5 * LINK - 0.03)
        b.add_joint_revolute(k - 1, body, parent_xform=((0.5 * LINK if k else 0.0, 0.0, 0.0 if k else 2.0),
                                                        (0.0, 0.0, 0.0, 1.0)),
                             child_xform=((-0.5 * LINK, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)), axis=(0.0, 1.0, 0.0))
    return b


def xsim_scene(scene: str, requires_grad: bool = False):
    import xsim
    from xsim.sim import ModelBuilder
    if scene == "boxes":
        b = ModelBuilder()
        b.add_ground_plane(mu=0.5)
        for p in box_positions():
            body = b.add_body((p, (0.0, 0.0, 0.0, 1.0)))
            b.add_shape_box(body, hx=HALF, hy=HALF, hz=HALF)
    else:
        b = xsim_pendulum()
    return b.finalize(device="cpu", requires_grad=requires_grad, dtype=xsim.float32)


def bench_xsim(scene: str, repeat: int) -> dict:
    import xsim
    from xsim.solvers import SolverXPBD
    model = xsim_scene(scene)
    solver = SolverXPBD(model, substeps=ITERATIONS, iterations=1)
    out = time_stepping(lambda a, b: solver.step(a, b, None, DT), model.state(), model.state(), STEPS, repeat,
                        WARMUP)
    gmodel = xsim_scene(scene, requires_grad=True)
    gsolver = SolverXPBD(gmodel, substeps=ITERATIONS, iterations=1)

    def forward(states):
        tape = xsim.Tape()
        with tape:
            for i in range(TAPE_STEPS):
                gsolver.step(states[i], states[i + 1], None, DT)
        return tape

    def backward(states, tape):
        seed = xsim.array(np.ones((gmodel.body_count, 7), dtype=np.float32), dtype=xsim.transform)
        tape.backward(grads={states[-1].body_q: seed})

    out.update(time_taped_rollout(lambda: [gmodel.state(requires_grad=True) for _ in range(TAPE_STEPS + 1)],
                                  forward, backward, max(2, repeat)))
    out["z"] = float(out["state"].body_q.numpy()[:, 2].min())
    return out


# -------------------------------------------------------------------------------------------------
# Newton


def newton_pendulum():
    """The same pendulum in a Newton ModelBuilder (one articulation)."""
    import newton
    import warp as wp
    b = newton.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    rot = wp.quat(0.0, 0.7071068, 0.0, 0.7071068)
    for k in range(2):
        body = b.add_link(xform=wp.transform((LINK * (k + 0.5), 0.0, 2.0), wp.quat_identity()))
        b.add_shape_capsule(body, xform=wp.transform((0.0, 0.0, 0.0), rot), radius=0.03,
                            half_height=0.5 * LINK - 0.03)
        b.add_joint_revolute(k - 1, body, parent_xform=wp.transform((0.5 * LINK if k else 0.0, 0.0,
                                                                      0.0 if k else 2.0), wp.quat_identity()),
                             child_xform=wp.transform((-0.5 * LINK, 0.0, 0.0), wp.quat_identity()),
                             axis=(0.0, 1.0, 0.0))
    b.add_articulation(list(range(2)))
    return b


def newton_scene(scene: str, requires_grad: bool = False):
    import newton
    import warp as wp
    if scene == "boxes":
        b = newton.ModelBuilder(gravity=(0.0, 0.0, -9.81))
        b.add_ground_plane()
        for p in box_positions():
            body = b.add_body(xform=wp.transform(p, wp.quat_identity()))
            b.add_shape_box(body, hx=HALF, hy=HALF, hz=HALF)
    else:
        b = newton_pendulum()
    return b.finalize(device="cpu", requires_grad=requires_grad)


def bench_newton(scene: str, repeat: int) -> dict:
    import warp as wp
    wp.config.quiet = True
    import newton
    model = newton_scene(scene)
    solver = newton.solvers.SolverXPBD(model, iterations=ITERATIONS)
    pipeline = newton.CollisionPipeline(model) if scene == "boxes" else None
    contacts = pipeline.contacts() if pipeline else None
    control = model.control()

    def step(a, b, pipe=pipeline, cts=contacts, slv=solver):
        if pipe is not None:
            pipe.collide(a, cts)
        slv.step(a, b, control, cts, DT)

    out = time_stepping(step, model.state(), model.state(), STEPS, repeat, WARMUP, sync=wp.synchronize)
    out["z"] = float(out["state"].body_q.numpy()[:, 2].min())
    gmodel = newton_scene(scene, requires_grad=True)
    gsolver = newton.solvers.SolverXPBD(gmodel, iterations=ITERATIONS)
    gpipe = newton.CollisionPipeline(gmodel, requires_grad=True) if scene == "boxes" else None

    def prepare():
        states = [gmodel.state(requires_grad=True) for _ in range(TAPE_STEPS + 1)]
        return states, [gpipe.contacts() for _ in range(TAPE_STEPS)] if gpipe else [None] * TAPE_STEPS

    def forward(prepared):
        states, cts = prepared
        tape = wp.Tape()
        with tape:
            for i in range(TAPE_STEPS):
                if gpipe is not None:
                    gpipe.collide(states[i], cts[i])
                gsolver.step(states[i], states[i + 1], gmodel.control(), cts[i], DT)
        return tape

    def backward(prepared, tape):
        seed = wp.array(np.ones((gmodel.body_count, 7), dtype=np.float32), dtype=wp.transform, device="cpu")
        tape.backward(grads={prepared[0][-1].body_q: seed})

    out.update(time_taped_rollout(prepare, forward, backward, max(2, repeat), sync=wp.synchronize))
    return out


# -------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed runs of 200 steps (median)")
    parser.add_argument("--no-newton", action="store_true", help="skip Newton")
    args = parser.parse_args()
    with_newton = not args.no_newton and have_newton()
    for scene, title in (("boxes", "8 boxes dropped on the ground"), ("pendulum", "2-link revolute pendulum")):
        xs = bench_xsim(scene, args.repeat)
        nw = bench_newton(scene, args.repeat) if with_newton else None
        rows = [
            ["forward step (median of 200-step runs)", fmt_time(xs["step"]), fmt_time(nw["step"]) if nw else "-",
             ratio(nw["step"], xs["step"]) if nw else "-"],
            ["forward steps/s", f"{1.0 / xs['step']:.0f}", f"{1.0 / nw['step']:.0f}" if nw else "-",
             ratio(nw["step"], xs["step"]) if nw else "-"],
            [f"{TAPE_STEPS}-step forward on a tape", fmt_time(xs["tape_forward"]),
             fmt_time(nw["tape_forward"]) if nw else "-", "-"],
            [f"{TAPE_STEPS}-step tape backward", fmt_time(xs["tape_backward"]),
             fmt_time(nw["tape_backward"]) if nw else "-", "-"],
            ["backward / taped forward", f"{xs['tape_backward'] / xs['tape_forward']:.2f}x",
             f"{nw['tape_backward'] / nw['tape_forward']:.2f}x" if nw else "-", "-"],
            ["lowest body z after the runs (m)", f"{xs['z']:.3f}", f"{nw['z']:.3f}" if nw else "-", "-"],
        ]
        print_table(f"{title}, dt = 1/600 s, {ITERATIONS} iterations (CPU)",
                    ["", "xsim", "Newton 1.8", "Newton / xsim"], rows,
                    notes=[f"threads: XSIM_NUM_THREADS={os.environ.get('XSIM_NUM_THREADS', 'all')}, cores: "
                           + str(os.cpu_count())])


if __name__ == "__main__":
    main()
