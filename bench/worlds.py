"""Batched worlds (issue 19): world-steps/s of N copies of a scene in one model, xsim's
``ModelBuilder.replicate`` against Newton 1.8's, on the CPU, for N = 1, 8, 64 and 512.

Scenes (each copy its own world, all at the origin: spacing 0, as Newton advises):

- pendulum: ``rigid.py``'s 2-link revolute pendulum, dt = 1/600 s, 5 iterations (xsim: 5
  substeps of one iteration, Newton: ``iterations=5``).
- cloth: ``cloth.py``'s cloth with 15 x 15 cells (16 x 16 particles), left edge pinned, springs
  and bending as there, dt = 1/600 s, 10 iterations, no self-collision.

A world-step is one world advanced by one step: N / (time of one step of the N-world model), the
median of runs of steps after warm-up; per CPU second: N / (process CPU time of one step, the best
run), which a machine busy with other work disturbs far less than wall time. Sanity check: the copies start alike, so every world must
end where world 0 does (largest difference reported). Run:
``python bench/worlds.py [--worlds 1 8 64 512] [--repeat N] [--no-newton]``; ``XSIM_NUM_THREADS``
sets xsim's threads (Newton's CPU kernels run on one).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from cloth import ITERATIONS as CLOTH_ITERATIONS
from cloth import newton_cloth, without_self_collision, xsim_cloth
from common import fmt_time, have_newton, print_table, ratio, time_stepping
from rigid import ITERATIONS as PENDULUM_ITERATIONS
from rigid import newton_pendulum, xsim_pendulum

DT = 1.0 / 600.0
CLOTH_DIM = 15        # cells per side: 16 x 16 particles
WORLD_STEPS = 1000    # world-steps per timed run: 1000 steps of one world, 4 of 512 worlds
WARMUP = 2
SCENES = {"pendulum": "2-link revolute pendulum", "cloth": "16 x 16 cloth"}


def steps_for(worlds: int) -> int:
    """Steps per timed run: about the same work whatever the batch."""
    return max(4, WORLD_STEPS // worlds)


def spread(state_q: np.ndarray, worlds: int) -> float:
    """Largest difference (m) of any world's positions from world 0's."""
    q = state_q.reshape(worlds, -1, state_q.shape[-1])[..., :3]
    return float(np.abs(q - q[:1]).max())


def bench_xsim(scene: str, worlds: int, repeat: int) -> dict:
    import xsim
    from xsim.sim import ModelBuilder
    from xsim.solvers import SolverXPBD
    one = xsim_pendulum() if scene == "pendulum" else xsim_cloth(CLOTH_DIM)
    b = ModelBuilder()
    b.replicate(one, worlds)
    model = b.finalize(device="cpu", dtype=xsim.float32)
    solver = SolverXPBD(model, substeps=PENDULUM_ITERATIONS, iterations=1) if scene == "pendulum" else \
        SolverXPBD(model, iterations=CLOTH_ITERATIONS)
    out = time_stepping(lambda a, c: solver.step(a, c, None, DT), model.state(), model.state(), steps_for(worlds),
                        repeat, WARMUP)
    q = out["state"].body_q if scene == "pendulum" else out["state"].particle_q
    out["spread"] = spread(q.numpy(), worlds)
    return out


def bench_newton(scene: str, worlds: int, repeat: int) -> dict:
    import warp as wp
    wp.config.quiet = True
    import newton
    one = newton_pendulum() if scene == "pendulum" else newton_cloth(CLOTH_DIM)
    b = newton.ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.replicate(one, worlds)
    model = b.finalize(device="cpu")
    if scene == "cloth":
        without_self_collision(model)
    solver = newton.solvers.SolverXPBD(model, iterations=PENDULUM_ITERATIONS if scene == "pendulum"
                                       else CLOTH_ITERATIONS)
    control = model.control()
    out = time_stepping(lambda a, c: solver.step(a, c, control, None, DT), model.state(), model.state(),
                        steps_for(worlds), repeat, WARMUP, sync=wp.synchronize)
    q = out["state"].body_q if scene == "pendulum" else out["state"].particle_q
    out["spread"] = spread(q.numpy(), worlds)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 8, 64, 512], help="batch sizes")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per batch (median)")
    parser.add_argument("--no-newton", action="store_true", help="skip Newton")
    args = parser.parse_args()
    with_newton = not args.no_newton and have_newton()
    for scene, title in SCENES.items():
        rows, first = [], None
        for n in args.worlds:
            xs = bench_xsim(scene, n, args.repeat)
            nw = bench_newton(scene, n, args.repeat) if with_newton else None
            first = first or xs["step_cpu"] / n

            def rate(r, key, n=n):
                return f"{n / r[key]:,.0f}" if r else "-"
            rows.append([str(n), fmt_time(xs["step"]), rate(xs, "step"), rate(xs, "step_cpu"),
                         f"{first * n / xs['step_cpu']:.1f}x", fmt_time(nw["step"]) if nw else "-", rate(nw, "step"),
                         rate(nw, "step_cpu"), ratio(nw["step"], xs["step"]) if nw else "-",
                         ratio(nw["step_cpu"], xs["step_cpu"]) if nw else "-",
                         f"{xs['spread']:.0e} / {nw['spread']:.0e}" if nw else f"{xs['spread']:.0e}"])
        print_table(f"{title}: world-steps/s, dt = 1/600 s (CPU)",
                    ["worlds", "xsim step", "xsim world-steps/s", "xsim per CPU s", "xsim per CPU s vs 1 world",
                     "Newton step", "Newton world-steps/s", "Newton per CPU s", "Newton / xsim (wall)",
                     "Newton / xsim (CPU)", "max world - world 0 (m), xsim / Newton"], rows,
                    notes=[f"threads: XSIM_NUM_THREADS={os.environ.get('XSIM_NUM_THREADS', 'all')}, cores: "
                           + str(os.cpu_count())])


if __name__ == "__main__":
    main()
