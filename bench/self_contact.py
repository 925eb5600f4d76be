"""Cloth self-contact, side by side: xsim's SolverXPBD with ``self_collision`` against Newton's SolverVBD with
``particle_enable_self_contact`` on the same folded cloth (``self_contact_newton.py``: dim x dim cells, side
``size`` m, folded over onto itself just above the ground, rest shape flat), on the CPU, at the same frame rate
and substeps; and each engine beside itself without self-contact (the feature's cost).

xsim runs its own cloth material (``add_cloth_grid`` defaults, the same mass per particle); the work compared is
one self-colliding step of each engine's cloth solver, not identical physics. Both start from the same
positions; both final states are checked for intersecting triangle pairs by tests/solvers/tri_intersect.py.

Timing: wall time of ``frames`` frames after one warm-up frame (kernels compiled), median of ``repeat``.

Run: ``python bench/self_contact.py [--dim 64] [--frames 3] [--no-newton]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "solvers"))

from self_contact_newton import AREAL_DENSITY, folded, newton_vbd_cloth
from tri_intersect import intersecting_pairs


def xsim_cloth(dim: int = 64, size: float = 0.5, thickness: float = 0.01, frames: int = 3, fps: int = 60,
               substeps: int = 10, self_contact: bool = True, iterations: int = 4, repeat: int = 3) -> dict:
    """Steps per second of xsim's SolverXPBD on the folded cloth, with or without self-collision."""
    import xsim
    from xsim.sim import ModelBuilder
    from xsim.solvers import SolverXPBD

    b = ModelBuilder()
    b.add_ground_plane()
    cell = size / dim
    b.add_cloth_grid(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=dim, dim_y=dim,
                     cell_x=cell, cell_y=cell, mass=AREAL_DENSITY * size * size / (dim + 1) ** 2,
                     particle_radius=0.5 * thickness, self_collision=self_contact,
                     thickness=thickness if self_contact else None)
    model = b.finalize()
    start = folded(model.particle_q.numpy().astype(np.float64), size, thickness)
    solver = SolverXPBD(model, substeps=substeps, iterations=iterations)
    dt = 1.0 / fps

    def run(count: int):
        a, c = model.state(), model.state()
        a.particle_q.assign(xsim.array(start.astype(np.float32), dtype=xsim.vec3))
        for _ in range(count):
            solver.step(a, c, None, dt)
            a, c = c, a
        return a

    run(1)
    seconds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        final = run(frames)
        seconds.append(time.perf_counter() - t0)
    wall = statistics.median(seconds)
    positions = final.particle_q.numpy().astype(np.float64)
    return {"self_contact": self_contact, "steps_per_s": frames * substeps / wall, "wall_s": wall,
            "positions": positions, "tris": np.asarray(model.tri_indices)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--size", type=float, default=0.5)
    parser.add_argument("--thickness", type=float, default=0.01)
    parser.add_argument("--frames", type=int, default=3)
    parser.add_argument("--substeps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-newton", action="store_true")
    args = parser.parse_args()
    common = {"dim": args.dim, "size": args.size, "thickness": args.thickness, "frames": args.frames,
                  "substeps": args.substeps, "repeat": args.repeat}
    rows = [("xsim SolverXPBD", xsim_cloth(**common, self_contact=on)) for on in (False, True)]
    if not args.no_newton:
        rows += [("Newton SolverVBD", newton_vbd_cloth(**common, self_contact=on)) for on in (False, True)]
    print(f"{args.dim} x {args.dim} cells, {args.size} m, thickness {args.thickness} m, {args.frames} frames at "
          f"60 fps x {args.substeps} substeps, CPU, median of {args.repeat}")
    print("| engine | self contact | steps/s | intersecting triangle pairs at the end |")
    print("| --- | --- | --- | --- |")
    for name, r in rows:
        bad = len(intersecting_pairs(r["positions"], r["tris"]))
        print(f"| {name} | {'on' if r['self_contact'] else 'off'} | {r['steps_per_s']:.1f} | {bad} |")
    x_off, x_on = rows[0][1]["steps_per_s"], rows[1][1]["steps_per_s"]
    print(f"xsim: self-collision costs {x_off / x_on:.2f}x its steps/s")
    if not args.no_newton:
        n_off, n_on = rows[2][1]["steps_per_s"], rows[3][1]["steps_per_s"]
        print(f"Newton: self contact costs {n_off / n_on:.2f}x; xsim / Newton with it on: {x_on / n_on:.2f}x")


if __name__ == "__main__":
    main()
