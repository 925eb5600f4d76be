"""Rigid-body benchmark (issue 7): xsim's SolverXPBD against Newton 1.8's SolverXPBD on the CPU.

Scenes:

- boxes: 8 boxes (0.2 m cubes, 1000 kg/m^3) dropped from staggered heights onto the ground plane,
  dt = 1/600 s, 5 position iterations per step (Newton: ``iterations=5``; xsim: 5 substeps of one
  iteration each, Mueller et al. 2020's scheme, the same number of constraint passes). Newton's
  time includes its collision pipeline (``collide`` + ``step``), xsim's its in-step broad phase.
- pendulum: a 2-link revolute pendulum (two 0.5 m capsule links), same dt and iterations.
- pyramids (issue 17): Newton's ``example_pyramid`` layout (0.8 m cubes 0.84 m apart, each row on
  the gaps of the one below, no wrecking ball) with 8, 15 and 28 rows: 36, 120 and 406 boxes;
  100 frames/s, 10 substeps, 2 iterations (Newton: its example's ``rigid_contact_relaxation=0.8``
  and SAP collision pipeline run every substep; xsim: ``substeps=10, iterations=2``, its broad
  phase once per frame). Timed after the pyramid has settled (``PYRAMID_WARMUP`` frames), the two
  engines' frames sampled in turns.

Measured: forward steps/s (median of runs of 200 steps after warm-up), and a 20-step rollout on a
tape: forward and backward times; for the pyramids ms per frame and contacts per frame. Goals: xsim
>= 2x Newton's steps/s on every scene (pyramids: at every size, cost growing about linearly with the
contacts), xsim's 20-step backward <= 2x its forward.
Run: ``python bench/rigid.py [--repeat N] [--no-newton] [--rows 8 15 28] [--skip-small] [--clock cpu]``
(``--clock cpu``: process CPU time, for a busy machine; Newton's CPU kernels run on the calling thread).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from common import (
    fmt_time,
    have_newton,
    interleaved_medians,
    print_table,
    ratio,
    time_stepping,
    time_taped_rollout,
)

DT = 1.0 / 600.0
ITERATIONS = 5
STEPS = 200
WARMUP = 20
TAPE_STEPS = 20
HALF = 0.1  # m, box half extent
LINK = 0.5  # m, pendulum link length
CUBE_HALF, CUBE_SPACING = 0.4, 0.84  # m, Newton's example_pyramid
FRAME_DT, PYRAMID_SUBSTEPS, PYRAMID_ITERATIONS = 0.01, 10, 2
PYRAMID_WARMUP = 40  # frames: the rows (4 cm apart at the start) have landed and settled


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


def pyramid_positions(rows: int):
    """Box centres of Newton's example_pyramid with ``rows`` rows (one pyramid)."""
    out = []
    for level in range(rows):
        n = rows - level
        out += [(-(n - 1) * CUBE_SPACING / 2 + i * CUBE_SPACING, 0.0, level * CUBE_SPACING + CUBE_HALF)
                for i in range(n)]
    return out


def xsim_pyramid(rows: int):
    """(frame function, contacts of the last frame) for xsim's pyramid of ``rows`` rows."""
    import xsim
    from xsim.sim import ModelBuilder
    from xsim.solvers import SolverXPBD
    b = ModelBuilder()
    b.add_ground_plane(mu=1.0)
    for p in pyramid_positions(rows):
        body = b.add_body((p, (0.0, 0.0, 0.0, 1.0)))
        b.add_shape_box(body, hx=CUBE_HALF, hy=CUBE_HALF, hz=CUBE_HALF, mu=1.0)
    model = b.finalize(device="cpu", dtype=xsim.float32)
    solver = SolverXPBD(model, substeps=PYRAMID_SUBSTEPS, iterations=PYRAMID_ITERATIONS)
    states = [model.state(), model.state()]

    def frame():
        solver.step(states[0], states[1], None, FRAME_DT)
        states.reverse()
    return frame, lambda: solver.rigid.contact_count


def newton_pyramid(rows: int):
    """(frame function, contacts of the last substep) for Newton's example_pyramid (XPBD, SAP)."""
    import warp as wp
    wp.config.quiet = True
    wp.config.log_level = wp.LOG_WARNING
    import newton
    b = newton.ModelBuilder()
    b.add_shape_plane(xform=wp.transform_identity(), width=0.0, length=0.0)
    for p in pyramid_positions(rows):
        body = b.add_body(xform=wp.transform(p=wp.vec3(*p), q=wp.quat_identity()))
        b.add_shape_box(body, hx=CUBE_HALF, hy=CUBE_HALF, hz=CUBE_HALF)
    model = b.finalize(device="cpu")
    pipeline = newton.CollisionPipeline(model, broad_phase="sap")
    solver = newton.solvers.SolverXPBD(model, iterations=PYRAMID_ITERATIONS, rigid_contact_relaxation=0.8)
    contacts = pipeline.contacts()
    control = model.control()
    states = [model.state(), model.state()]
    newton.eval_fk(model, model.joint_q, model.joint_qd, states[0])
    sub_dt = FRAME_DT / PYRAMID_SUBSTEPS

    def frame():
        for _ in range(PYRAMID_SUBSTEPS):
            states[0].clear_forces()
            pipeline.collide(states[0], contacts)
            solver.step(states[0], states[1], control, contacts, sub_dt)
            states.reverse()
        wp.synchronize()
    return frame, lambda: int(contacts.rigid_contact_count.numpy()[0])


def bench_pyramids(rows_list, repeat: int, with_newton: bool, clock: str) -> None:
    rows = []
    for n in rows_list:
        engines = {"xsim": xsim_pyramid(n), "newton": newton_pyramid(n) if with_newton else None}
        for e in engines.values():
            if e is not None:
                for _ in range(PYRAMID_WARMUP):
                    e[0]()
        t = interleaved_medians({k: e[0] if e else None for k, e in engines.items()}, repeat=repeat, number=2,
                                warmup=0, clock=time.process_time if clock == "cpu" else time.perf_counter)
        xs, nw = t["xsim"], t["newton"]
        boxes = len(pyramid_positions(n))
        rows.append([f"{boxes} ({n} rows)", str(engines["xsim"][1]()),
                     str(engines["newton"][1]()) if nw else "-", fmt_time(xs), fmt_time(nw),
                     ratio(nw, xs) if nw else "-", f"{xs / boxes * 1e6:.0f} us"])
    print_table(f"Box pyramids (Newton's example_pyramid), {1 / FRAME_DT:.0f} frames/s, {PYRAMID_SUBSTEPS} substeps, "
                f"{PYRAMID_ITERATIONS} iterations (CPU)",
                ["boxes", "xsim contacts", "Newton contacts", "xsim / frame", "Newton / frame", "Newton / xsim",
                 "xsim / frame / box"], rows,
                notes=[(f"{clock} time, median of {repeat} samples of 2 frames each, engines sampled in turns, after "
                       f"{PYRAMID_WARMUP} frames of settling; threads: XSIM_NUM_THREADS="
                       f"{os.environ.get('XSIM_NUM_THREADS', 'all')}, cores: {os.cpu_count()}")])


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
    parser.add_argument("--rows", type=int, nargs="*", default=[8, 15, 28], help="pyramid sizes (rows)")
    parser.add_argument("--skip-small", action="store_true", help="only the pyramids")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="pyramids: wall time, or process CPU time (a busy machine; sums xsim's threads)")
    args = parser.parse_args()
    with_newton = not args.no_newton and have_newton()
    if args.rows:
        bench_pyramids(args.rows, args.repeat, with_newton, args.clock)
    for scene, title in () if args.skip_small else (("boxes", "8 boxes dropped on the ground"),
                                                    ("pendulum", "2-link revolute pendulum")):
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
