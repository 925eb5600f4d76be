"""Soft bodies against exact answers, with mesh refinement, and beside NVIDIA Newton's SolverXPBD (issue 36).

Scenes (SI units, 5 tets per grid cell, xsim's mass from density: a quarter of each tet's mass per vertex):

- ``column``: a W x L x W column (W = 0.1 m, L = 1 m, n x 10n x n cells) hanging from its top face under
  its own weight (rho = 1000 kg/m^3, E = 1e6 Pa, nu = 0.3). Exact (small strain): the free end drops
  rho g L^2 / (2 E); the lateral strain at mid height is -nu rho g (L / 2) / E (the clamped top face keeps
  its width, which reaches about one width down; mid height is 5 widths away).
- ``squash``: a 0.1 m cube on the ground, nu = 0.49, E = 1e4 Pa (about 10% axial strain under its own
  weight): its volume after settling and its largest change while dropped from 5 cm.
- ``cantilever``: a beam L = 0.5 m, thickness h = L / 10 (10n x n x n cells) clamped at x = 0 and bent by its
  own weight (E = 1e8 Pa, nu = 0.3): Euler-Bernoulli's tip deflection q L^4 / (8 E I) = 3 rho g L^4 / (2 E h^2)
  for the uniform load q = rho g A (the tip-load F L^3 / (3 E I) form needs a point load; the uniform load is
  the one a body's weight gives).

Each runs ``seconds`` of 60 Hz frames with ``substeps`` x ``iterations`` and velocity damping (``particle_damping``,
which changes no static answer) to settle. XPBD reaches the static answer only as its iterations converge:
too few leave the body softer (it sags further), which the tables show. Newton's SolverXPBD runs the same
column (the same particles, masses, E and nu as its k_mu, k_lambda) with its own tet constraints.

Run: ``python bench/soft.py [column|squash|cantilever|newton|all]``.
"""

from __future__ import annotations

import sys
import time

import numpy as np

Q0 = (0.0, 0.0, 0.0, 1.0)
G = 9.81
FPS = 60


def _xsim_run(build, seconds: float, substeps: int, iterations: int, damping: float, dtype="float32",
              watch=None) -> dict:
    """Run the model ``build(builder)`` made for ``seconds``; returns the model, first and last states' positions,
    the largest velocity at the end, the steps per second and ``watch(x)`` of every frame."""
    import xsim
    from xsim.sim import ModelBuilder
    from xsim.solvers import SolverXPBD

    b = ModelBuilder(gravity=(0.0, 0.0, -G))
    build(b)
    b.particle_damping = damping
    model = b.finalize(dtype=getattr(xsim, dtype))
    solver = SolverXPBD(model, substeps=substeps, iterations=iterations)
    s0, s1 = model.state(), model.state()
    frames = round(seconds * FPS)
    seen = []
    t0 = time.perf_counter()
    for _ in range(frames):
        solver.step(s0, s1, None, 1.0 / FPS)
        s0, s1 = s1, s0
        if watch is not None:
            seen.append(watch(s0.particle_q.numpy()))
    elapsed = time.perf_counter() - t0
    return {"model": model, "x0": model.particle_q.numpy().astype(np.float64),
            "x": s0.particle_q.numpy().astype(np.float64), "v": float(np.abs(s0.particle_qd.numpy()).max()),
            "steps_per_s": frames / elapsed, "seen": seen}


# -- column ------------------------------------------------------------------------------------------------

COLUMN = {"W": 0.1, "L": 1.0, "rho": 1000.0, "E": 1e6, "nu": 0.3}


def column_grid(b, n: int, c=COLUMN, k_damp: float = 0.0) -> None:
    """The hanging column on xsim's builder ``b``, its top face at z = L: cells n x n x 10n along z; pinned: the
    top layer of vertices."""
    b.add_soft_grid(pos=(0.0, 0.0, 0.0), rot=Q0, vel=(0.0, 0.0, 0.0), dim_x=n, dim_y=n, dim_z=10 * n,
                    cell_x=c["W"] / n, cell_y=c["W"] / n, cell_z=c["L"] / (10 * n), density=c["rho"],
                    youngs_modulus=c["E"], poisson_ratio=c["nu"], k_damp=k_damp)
    top = [i for i, p in enumerate(b.particle_q) if abs(p[2] - c["L"]) < 1e-9]
    for i in top:
        b.particle_mass[i] = 0.0


def column_measure(x0: np.ndarray, x: np.ndarray, c=COLUMN) -> dict:
    """Drop of the free end and lateral strain at mid height, each beside its exact value."""
    bottom = np.abs(x0[:, 2]) < 1e-9
    mid = np.abs(x0[:, 2] - c["L"] / 2) < 1e-9
    drop = -(x[bottom, 2] - x0[bottom, 2]).mean()
    width = [(x[mid, k].max() - x[mid, k].min()) for k in (0, 1)]
    lateral = np.mean(width) / c["W"] - 1.0
    return {"drop": drop, "drop_exact": c["rho"] * G * c["L"] ** 2 / (2 * c["E"]),
            "lateral": lateral, "lateral_exact": -c["nu"] * c["rho"] * G * (c["L"] / 2) / c["E"]}


def column(n: int, substeps: int = 20, iterations: int = 40, seconds: float = 2.0, damping: float = 20.0,
           dtype: str = "float32") -> dict:
    """xsim's hanging column of n x n x 10n cells (``column_measure``'s numbers, steps/s, tets)."""
    r = _xsim_run(lambda b: column_grid(b, n), seconds, substeps, iterations, damping, dtype)
    return {**column_measure(r["x0"], r["x"]), "v": r["v"], "steps_per_s": r["steps_per_s"],
            "tets": r["model"].tet_count}


# -- squash (volume at nu = 0.49) ----------------------------------------------------------------------------

def squash(n: int, substeps: int = 20, iterations: int = 20, seconds: float = 2.0, damping: float = 10.0,
           E: float = 1e4, nu: float = 0.49, dtype: str = "float32") -> dict:
    """A 0.1 m cube of n^3 cells dropped from 5 cm onto the ground: its volume at the end and the largest
    relative change on the way, its axial strain at the end."""
    from xsim.sim.soft import signed_volumes

    def build(b):
        b.add_ground_plane(mu=0.5)
        b.add_soft_grid(pos=(0.0, 0.0, 0.05), rot=Q0, vel=(0.0, 0.0, 0.0), dim_x=n, dim_y=n, dim_z=n, cell_x=0.1 / n,
                        cell_y=0.1 / n, cell_z=0.1 / n, density=1000.0, youngs_modulus=E, poisson_ratio=nu,
                        particle_radius=0.001)
    holder = {}

    def volume(x):
        return signed_volumes(x, holder["tets"]).sum()

    from xsim.sim.soft import grid_tetrahedra
    holder["tets"] = grid_tetrahedra(n, n, n)
    r = _xsim_run(build, seconds, substeps, iterations, damping, dtype, watch=volume)
    v0 = 1e-3
    seen = np.array(r["seen"])
    height = r["x"][:, 2].max() - r["x"][:, 2].min()
    return {"volume_change": seen[-1] / v0 - 1.0, "worst_change": seen[np.argmax(np.abs(seen - v0))] / v0 - 1.0,
            "axial_strain": height / 0.1 - 1.0, "bottom": r["x"][:, 2].min(), "v": r["v"],
            "steps_per_s": r["steps_per_s"], "tets": r["model"].tet_count}


# -- cantilever -------------------------------------------------------------------------------------------------

CANTILEVER = {"L": 0.5, "rho": 1000.0, "E": 1e8, "nu": 0.3}


def cantilever(n: int, substeps: int = 20, iterations: int = 40, seconds: float = 2.0, damping: float = 60.0,
               dtype: str = "float32", c=CANTILEVER) -> dict:
    """Tip deflection of the clamped beam (10n x n x n cells) beside Euler-Bernoulli's."""
    h = c["L"] / 10

    def build(b):
        b.add_soft_grid(pos=(0.0, 0.0, 0.0), rot=Q0, vel=(0.0, 0.0, 0.0), dim_x=10 * n, dim_y=n, dim_z=n,
                        cell_x=c["L"] / (10 * n), cell_y=h / n, cell_z=h / n, density=c["rho"], youngs_modulus=c["E"],
                        poisson_ratio=c["nu"], fix_left=True)
    r = _xsim_run(build, seconds, substeps, iterations, damping, dtype)
    tip = np.abs(r["x0"][:, 0] - c["L"]) < 1e-9
    return {"tip": -(r["x"][tip, 2] - r["x0"][tip, 2]).mean(), "exact": 3 * c["rho"] * G * c["L"] ** 4 / (2 * c["E"] * h * h),
            "v": r["v"], "steps_per_s": r["steps_per_s"], "tets": r["model"].tet_count}


# -- Newton ------------------------------------------------------------------------------------------------------

def newton_column(n: int, substeps: int = 20, iterations: int = 40, seconds: float = 2.0, k_damp: float = 0.0,
                  c=COLUMN) -> dict:
    """Newton's SolverXPBD on the same column: xsim's particles and masses (Newton's own add_soft_grid gives every
    vertex a whole cell's mass), E and nu as Newton's k_mu, k_lambda, its tets from its add_soft_grid."""
    import warp as wp
    wp.config.quiet = True
    import newton

    from xsim.sim import ModelBuilder
    from xsim.sim.soft import lame_parameters

    ours = ModelBuilder()
    column_grid(ours, n, c)
    mu, la = (float(v) for v in lame_parameters(c["E"], c["nu"]))
    b = newton.ModelBuilder(gravity=(0.0, 0.0, -G))
    b.add_soft_grid(pos=wp.vec3(0.0, 0.0, 0.0), rot=wp.quat(*Q0), vel=wp.vec3(0.0, 0.0, 0.0), dim_x=n, dim_y=n,
                    dim_z=10 * n, cell_x=c["W"] / n, cell_y=c["W"] / n, cell_z=c["L"] / (10 * n), density=c["rho"],
                    k_mu=mu, k_lambda=la, k_damp=k_damp, particle_radius=0.001)  # its default 0.1 m overlaps
    x_newton = np.array([tuple(p) for p in b.particle_q])
    assert np.allclose(x_newton, np.asarray(ours.particle_q)), "Newton's grid is laid out as xsim's"
    for i, m in enumerate(ours.particle_mass):
        b.particle_mass[i] = m
    model = b.finalize(device="cpu")
    solver = newton.solvers.SolverXPBD(model=model, iterations=iterations)
    s0, s1, control = model.state(), model.state(), model.control()
    frames = round(seconds * FPS)
    h = 1.0 / (FPS * substeps)
    # Newton's XPBD has no particle velocity damping: damp the velocities between substeps as xsim's
    # particle_damping does (v / (1 + c h)), so both settle alike
    factor = 1.0 / (1.0 + 20.0 * h)
    t0 = time.perf_counter()
    for _ in range(frames):
        for _ in range(substeps):
            s0.clear_forces()
            solver.step(s0, s1, control, None, h)
            s0, s1 = s1, s0
            s0.particle_qd.assign(s0.particle_qd.numpy() * factor)
    elapsed = time.perf_counter() - t0
    x0 = np.asarray(ours.particle_q, dtype=np.float64)
    x = s0.particle_q.numpy().astype(np.float64)
    return {**column_measure(x0, x, c), "v": float(np.abs(s0.particle_qd.numpy()).max()),
            "steps_per_s": frames / elapsed, "tets": model.tet_count}


# -- tables ------------------------------------------------------------------------------------------------------

def column_table(sizes=(1, 2, 3), substeps=20, iterations=40):
    print(f"\n### Hanging column, W = 0.1 m, L = 1 m, E = 1e6 Pa, nu = 0.3, {substeps} substeps x {iterations} iterations")
    print("| cells | tets | drop / exact | lateral / exact | max v [m/s] | steps/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        r = column(n, substeps, iterations)
        print(f"| {n}x{n}x{10 * n} | {r['tets']} | {r['drop'] / r['drop_exact']:.4f} | "
              f"{r['lateral'] / r['lateral_exact']:.4f} | {r['v']:.1e} | {r['steps_per_s']:.1f} |")


def squash_table(sizes=(2, 4), substeps=20, iterations=20):
    print(f"\n### Cube dropped on the ground, nu = 0.49, E = 1e4 Pa, {substeps} substeps x {iterations} iterations")
    print("| cells | tets | axial strain | volume change at rest | largest change | steps/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        r = squash(n, substeps, iterations)
        print(f"| {n}^3 | {r['tets']} | {r['axial_strain']:+.4f} | {r['volume_change']:+.4%} | "
              f"{r['worst_change']:+.4%} | {r['steps_per_s']:.1f} |")


def cantilever_table(sizes=(1, 2, 3), substeps=20, iterations=40):
    print(f"\n### Cantilever under its own weight, L = 0.5 m, h = L/10, E = 1e8 Pa, {substeps} substeps x "
          f"{iterations} iterations")
    print("| cells | tets | tip / Euler-Bernoulli | max v [m/s] | steps/s |")
    print("| --- | --- | --- | --- | --- |")
    for n in sizes:
        r = cantilever(n, substeps, iterations)
        print(f"| {10 * n}x{n}x{n} | {r['tets']} | {r['tip'] / r['exact']:.4f} | {r['v']:.1e} | "
              f"{r['steps_per_s']:.1f} |")


def newton_table(n=1, substeps=20, iterations=40):
    print(f"\n### Hanging column beside Newton's SolverXPBD (CPU), {n}x{n}x{10 * n} cells, {substeps} substeps x "
          f"{iterations} iterations, float32")
    print("| engine | drop / exact | lateral / exact | steps/s |")
    print("| --- | --- | --- | --- |")
    rows = [("xsim", column(n, substeps, iterations))]
    try:
        rows.append(("Newton", newton_column(n, substeps, iterations)))
    except ImportError as e:
        print(f"(Newton not installed: {e})")
    for name, r in rows:
        print(f"| {name} | {r['drop'] / r['drop_exact']:.4f} | {r['lateral'] / r['lateral_exact']:.4f} | "
              f"{r['steps_per_s']:.2f} |")
    if len(rows) == 2:
        print(f"\nxsim / Newton steps per second: {rows[0][1]['steps_per_s'] / rows[1][1]['steps_per_s']:.2f}")


def main(argv):
    what = argv[1] if len(argv) > 1 else "all"
    for name, table in (("column", column_table), ("squash", squash_table), ("cantilever", cantilever_table),
                        ("newton", newton_table)):
        if what in (name, "all"):
            table()


if __name__ == "__main__":
    main(sys.argv)
