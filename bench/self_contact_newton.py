"""Newton's half of the cloth self-contact benchmark: SolverVBD on the CPU, with and without particle
self contact, on a square cloth that starts folded over onto itself just above the ground.

The cloth: ``dim`` x ``dim`` cells (``add_cloth_grid``), side ``size`` metres, 0.2 kg/m^2, with the
stiffness of Newton's ``cloth_twist`` example (a cloth of about this size). It is laid out as a
fold along x: a bottom layer one ``thickness`` above the ground (it drops half a thickness onto it:
the particle radius is half the thickness), a half-circle, and a top layer 1.4 thicknesses above
the bottom one: inside self-contact detection range (1.5 thicknesses) from the first step, outside
the interaction distance (1 thickness) until it falls. Bending costs almost nothing (``edge_ke``
1e-3), so the top layer settles onto the bottom one over most of their area, which is what self
contact has to hold apart. The rest shape is the flat grid (the fold is written into the positions
after ``add_cloth_grid`` made the triangles), so the fold is unstretched.

Self contact: ``particle_self_contact_margin`` (interaction distance) is ``thickness``, the extra
detection reach ``particle_self_contact_gap`` is half of it. Each substep runs Newton's collision
pipeline (ground contacts) and one ``SolverVBD.step``; with self contact the solver's BVH is
rebuilt once per frame, as ``cloth_twist`` does.

Timing: the wall time of ``frames`` frames from the folded start, after a one-step warm-up that
compiles the kernels; the median of ``repeat`` runs, each from fresh states. Warp launches CPU
kernels on one thread, and Newton's VBD is slow there: on a busy 2-core machine, 64 x 64 cells ran
7.5 steps/s without self contact and 0.4 steps/s with it (3 frames), so the default is 2 frames
(33 ms simulated, 20 steps; about 2.5 minutes for both variants), not seconds of simulated time.

Run: ``python bench/self_contact_newton.py [--dim 64] [--frames 2] [--substeps 10]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

LAYER_GAP = 1.4  # thicknesses between the layers at the start
AREAL_DENSITY = 0.2  # kg/m^2
STIFFNESS = {"tri_ke": 1.0e3, "tri_ka": 1.0e3, "tri_kd": 2.0e-4, "edge_ke": 1.0e-3, "edge_kd": 1.0e-2}
CONTACT = {"soft_contact_ke": 1.0e3, "soft_contact_kd": 1.0e-1, "soft_contact_mu": 0.2}


def folded(flat: np.ndarray, size: float, thickness: float) -> np.ndarray:
    """Positions (n, 3), metres, of the flat grid (x, y in [0, size]) bent into the fold: arc
    length along x is kept, so no triangle is stretched."""
    s, y = flat[:, 0], flat[:, 1]
    radius = 0.5 * LAYER_GAP * thickness
    half = 0.5 * (size - np.pi * radius)  # length of each layer
    phi = np.clip((s - half) / radius, 0.0, np.pi)
    x = np.where(s <= half, s, half + radius * np.sin(phi))
    top = s > half + np.pi * radius
    x = np.where(top, half - (s - half - np.pi * radius), x)
    z = thickness + radius * (1.0 - np.cos(phi))
    return np.stack([x - 0.5 * half, y - 0.5 * size, z], axis=1)


def _newton():
    """Newton, imported with Warp's banner and per-module load lines off."""
    import warp as wp
    wp.config.quiet = True
    wp.config.log_level = wp.LOG_WARNING
    import newton
    return wp, newton


def build(dim: int, size: float, thickness: float):
    """The folded cloth over a ground plane, as a Newton model on the CPU."""
    wp, newton = _newton()
    builder = newton.ModelBuilder()
    builder.add_ground_plane()
    cell = size / dim
    builder.add_cloth_grid(pos=wp.vec3(0.0, 0.0, 0.0), rot=wp.quat_identity(), vel=wp.vec3(0.0, 0.0, 0.0),
                           dim_x=dim, dim_y=dim, cell_x=cell, cell_y=cell,
                           mass=AREAL_DENSITY * size * size / (dim + 1) ** 2,
                           particle_radius=0.5 * thickness, **STIFFNESS)
    builder.particle_q = [wp.vec3(*p) for p in folded(np.array(builder.particle_q), size, thickness)]
    builder.color(include_bending=True)
    model = builder.finalize(device="cpu")
    for name, value in CONTACT.items():
        setattr(model, name, value)
    return model


def newton_vbd_cloth(dim: int = 64, size: float = 0.5, thickness: float = 0.01, frames: int = 2, fps: int = 60,
                     substeps: int = 10, self_contact: bool = True, iterations: int = 10, repeat: int = 3) -> dict:
    """Steps per second of Newton's SolverVBD on the folded cloth, one variant (with or without self
    contact). Returns the timing, the settings, and the final state (``positions`` (n, 3), metres;
    ``tris`` (m, 3)) so that a caller can check the cloth for self-intersection."""
    _, newton = _newton()
    model = build(dim, size, thickness)
    contact_args = {}
    if self_contact:
        contact_args = {"particle_enable_self_contact": True, "particle_self_contact_margin": thickness,
                        "particle_self_contact_gap": 0.5 * thickness}
    solver = newton.solvers.SolverVBD(model, iterations=iterations, **contact_args)
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    control = model.control()
    dt = 1.0 / (fps * substeps)

    def run(steps: int):
        a, b = model.state(), model.state()
        for step in range(steps):
            if self_contact and step % substeps == 0:
                solver.rebuild_bvh(a)
            a.clear_forces()
            pipeline.collide(a, contacts)
            solver.step(a, b, control, contacts, dt)
            a, b = b, a
        return a

    run(1)
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        final = run(frames * substeps)
        final.particle_q.numpy()  # waits for the last launch
        seconds.append(time.perf_counter() - start)
    wall = statistics.median(seconds)
    steps = frames * substeps
    positions = final.particle_q.numpy().astype(np.float64)
    return {"self_contact": self_contact, "steps_per_s": steps / wall, "wall_s": wall, "steps": steps,
            "dim": dim, "size": size, "thickness": thickness, "frames": frames, "fps": fps,
            "substeps": substeps, "iterations": iterations, "repeat": repeat, "particles": model.particle_count,
            "triangles": model.tri_count, "solver_args": contact_args, "stiffness": STIFFNESS, "contact": CONTACT,
            "positions": positions, "tris": model.tri_indices.numpy().reshape(-1, 3),
            "lowest_z": float(positions[:, 2].min())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--size", type=float, default=0.5)
    parser.add_argument("--thickness", type=float, default=0.01)
    parser.add_argument("--frames", type=int, default=2)
    parser.add_argument("--fps", type=int, default=60)
    parser.add_argument("--substeps", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [newton_vbd_cloth(args.dim, args.size, args.thickness, args.frames, args.fps, args.substeps,
                             self_contact, args.iterations, args.repeat) for self_contact in (False, True)]
    print(f"Newton SolverVBD, CPU: {args.dim} x {args.dim} cells ({runs[0]['triangles']} triangles), "
          f"{args.size} m, {args.frames} frames at {args.fps} fps x {args.substeps} substeps, "
          f"{args.iterations} iterations, median of {args.repeat}")
    print("| self contact | steps/s | wall per run | lowest particle |")
    print("| --- | --- | --- | --- |")
    for r in runs:
        print(f"| {'on' if r['self_contact'] else 'off'} | {r['steps_per_s']:.1f} | {r['wall_s']:.2f} s | "
              f"{r['lowest_z'] * 1e3:.1f} mm |")
    print(f"self contact: {runs[1]['solver_args']}")


if __name__ == "__main__":
    main()
