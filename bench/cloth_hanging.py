"""Newton's ``cloth_hanging`` example (XPBD variant) rebuilt in xsim, beside Newton 1.8 (issue 16).

Scene (as Newton's example sets it up): a 48 x 12-cell grid of 0.1 m cells, 0.1 kg per particle,
started horizontal at 4 m, rotated 90 degrees about z, its left edge pinned; springs of 1000 N/m
(damping 1 N s/m) on every edge, cell diagonal and across every interior edge (Newton's
``add_springs``), bending stiffness 10 (Newton: dihedral angle; xsim: isometric bending, compliance
3 / 10 1/(N m), which has the same small-angle energy for a flat pair of triangles), particle radius
0.05 m, a ground plane with friction 1. 60 frames/s, 10 substeps, 10 iterations, 120 frames.

Measured each frame: the mean edge strain |l - l0| / l0 over the springs, and the centre of mass.
The cloth falls from horizontal and swings about its pinned edge, so its centre of mass travels
towards the pinned edge and back. Run: ``python bench/cloth_hanging.py``.
"""

from __future__ import annotations

import time

import numpy as np

DIM_X, DIM_Y = 48, 12
CELL = 0.1            # m
MASS = 0.1            # kg per particle
SPRING_KE = 1.0e3     # N/m
SPRING_KD = 1.0       # N s/m
EDGE_KE = 10.0        # Newton's bending stiffness
RADIUS = 0.05         # m
FPS, SUBSTEPS, ITERATIONS, FRAMES = 60, 10, 10, 120
POS = (0.0, 0.0, 4.0)
ROT = (0.0, 0.0, float(np.sin(np.pi / 4)), float(np.cos(np.pi / 4)))  # 90 degrees about z


def _measure(x: np.ndarray, springs: np.ndarray, rest: np.ndarray, mass: np.ndarray) -> tuple[float, np.ndarray]:
    """(mean edge strain, centre of mass (3,)) of positions ``x`` (n, 3)."""
    length = np.linalg.norm(x[springs[:, 0]] - x[springs[:, 1]], axis=1)
    free = mass > 0.0
    return float(np.mean(np.abs(length / rest - 1.0))), (x[free] * mass[free, None]).sum(0) / mass[free].sum()


def run_xsim(frames: int = FRAMES) -> dict:
    """xsim's run: per frame the mean edge strain (frames + 1,) and centre of mass (frames + 1, 3)."""
    import xsim
    from xsim.sim import ModelBuilder
    from xsim.solvers import SolverXPBD
    b = ModelBuilder()
    b.add_ground_plane(mu=1.0)
    b.add_cloth_grid(pos=POS, rot=ROT, vel=(0.0, 0.0, 0.0), dim_x=DIM_X, dim_y=DIM_Y, cell_x=CELL, cell_y=CELL,
                     mass=MASS, fix_left=True, stretch_compliance=1.0 / SPRING_KE, shear_compliance=1.0 / SPRING_KE,
                     stretch_damping=SPRING_KD, bend_compliance=3.0 / EDGE_KE, particle_radius=RADIUS)
    for _, _, o0, o1 in list(b.bending_indices):  # Newton's add_springs: also across every interior edge
        b.add_spring(o0, o1, compliance=1.0 / SPRING_KE, damping=SPRING_KD)
    model = b.finalize(dtype=xsim.float32)
    # one solver step per frame with the substeps inside; Newton's example calls its solver once per
    # substep with one substep each: the same XPBD substep sequence
    solver = SolverXPBD(model, substeps=SUBSTEPS, iterations=ITERATIONS)
    springs, rest, mass = model.spring_indices.numpy(), model.spring_rest_length.numpy(), model.particle_mass.numpy()
    s0, s1 = model.state(), model.state()
    out = [_measure(s0.particle_q.numpy(), springs, rest, mass)]
    t0 = time.perf_counter()
    for _ in range(frames):
        solver.step(s0, s1, None, 1.0 / FPS)
        s0, s1 = s1, s0
        out.append(_measure(s0.particle_q.numpy(), springs, rest, mass))
    return {"strain": np.array([o[0] for o in out]), "com": np.array([o[1] for o in out]),
            "seconds": time.perf_counter() - t0, "z_min": float(s0.particle_q.numpy()[:, 2].min())}


def run_newton(frames: int = FRAMES) -> dict:
    """Newton's run (its XPBD solver on the CPU), measured as ``run_xsim``."""
    import warp as wp
    wp.config.quiet = True
    import newton
    b = newton.ModelBuilder()
    b.add_ground_plane()
    b.add_cloth_grid(pos=wp.vec3(*POS), rot=wp.quat(*ROT), vel=wp.vec3(0.0, 0.0, 0.0), dim_x=DIM_X, dim_y=DIM_Y,
                     cell_x=CELL, cell_y=CELL, mass=MASS, fix_left=True, edge_ke=EDGE_KE, edge_kd=0.0,
                     particle_radius=RADIUS, add_springs=True, spring_ke=SPRING_KE, spring_kd=SPRING_KD)
    model = b.finalize(device="cpu")
    model.soft_contact_ke = 1.0e2
    model.soft_contact_kd = 1.0e0
    model.soft_contact_mu = 1.0
    solver = newton.solvers.SolverXPBD(model=model, iterations=ITERATIONS)
    pipeline = newton.CollisionPipeline(model)
    contacts = pipeline.contacts()
    springs = model.spring_indices.numpy().reshape(-1, 2)
    rest = model.spring_rest_length.numpy()
    mass = model.particle_mass.numpy()
    s0, s1, control = model.state(), model.state(), model.control()
    out = [_measure(s0.particle_q.numpy(), springs, rest, mass)]
    t0 = time.perf_counter()
    for _ in range(frames):
        for _ in range(SUBSTEPS):
            s0.clear_forces()
            pipeline.collide(s0, contacts)
            solver.step(s0, s1, control, contacts, 1.0 / (FPS * SUBSTEPS))
            s0, s1 = s1, s0
        out.append(_measure(s0.particle_q.numpy(), springs, rest, mass))
    return {"strain": np.array([o[0] for o in out]), "com": np.array([o[1] for o in out]),
            "seconds": time.perf_counter() - t0, "z_min": float(s0.particle_q.numpy()[:, 2].min())}


def main():
    xs = run_xsim()
    nw = run_newton()
    print(f"Newton cloth_hanging (XPBD), {DIM_X} x {DIM_Y} cells, {FRAMES} frames, {SUBSTEPS} substeps, "
          f"{ITERATIONS} iterations, CPU")
    print(f"{'frame':>6} {'strain xsim':>12} {'strain Newton':>14} {'com y xsim':>11} {'com y Newton':>13} "
          f"{'com z xsim':>11} {'com z Newton':>13}")
    for f in range(0, FRAMES + 1, 10):
        print(f"{f:6d} {xs['strain'][f]:12.4f} {nw['strain'][f]:14.4f} {xs['com'][f, 1]:11.3f} {nw['com'][f, 1]:13.3f} "
              f"{xs['com'][f, 2]:11.3f} {nw['com'][f, 2]:13.3f}")
    print(f"mean strain over the run: xsim {xs['strain'].mean():.4f}, Newton {nw['strain'].mean():.4f}")
    print(f"lowest particle at the end: xsim {xs['z_min']:.3f} m, Newton {nw['z_min']:.3f} m")
    print(f"wall time: xsim {xs['seconds']:.2f} s, Newton {nw['seconds']:.2f} s")


if __name__ == "__main__":
    main()
