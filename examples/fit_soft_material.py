"""Fit a soft body's Young's modulus and Poisson's ratio to a recorded trajectory (issue 36).

The "recording" is a hanging soft column (0.1 x 0.1 x 0.2 m, its top face pinned, rho = 1000 kg/m^3)
simulated at E = 2e5 Pa, nu = 0.35 on a mesh twice as fine as the one fitted: the fitted model's particles
sit where every other fine-mesh vertex is, so the recording gives their positions. From E = 1e5 Pa,
nu = 0.2, L-BFGS fits both on float64 rollouts on a Tape (log space for E, nu bounded to [0, 0.49]).

Run: ``python examples/fit_soft_material.py``; ``fit(1)`` fits against the same mesh. Measured (2026-12-02):
same mesh, 5 iterations per substep: E and nu to 4e-10 and 1e-9, the loss down 1e20x in 14 L-BFGS iterations
(15 s). Twice as fine a recording with 5 iterations: E -45%, nu -95% (the finer mesh is much less converged
in 5 Jacobi iterations, so it moves as a much softer body); with 40: E -4.4%, nu -17%, the loss down 3700x;
with 80 iterations of 20 substeps: E -1.3%, nu -8.2%, the loss down 2300x (20 min). Across resolutions nu is
not recovered within the issue's 5%; E is, given the iterations.
"""

from __future__ import annotations

import numpy as np

import xsim
from xsim.optim import Parameter, minimize
from xsim.optim.losses import add_squared_distance, new_loss
from xsim.optim.objective import Objective
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

TRUE_E, TRUE_NU = 2.0e5, 0.35
SIZE = (0.1, 0.1, 0.2)   # m
CELLS = (2, 2, 4)        # the fitted mesh
FRAMES, DT, SUBSTEPS, ITERATIONS = 12, 1.0 / 60.0, 10, 5
OBSERVED = (4, 8, 12)    # frames compared


def build(refine: int, E: float, nu: float, requires_grad: bool = False):
    """The column on a mesh ``refine`` times finer than CELLS, hanging from its top face (y = far end)."""
    dims = [c * refine for c in CELLS]
    b = ModelBuilder(gravity=(0.0, -9.81, 0.0))
    b.add_soft_grid(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=dims[0],
                    dim_y=dims[2], dim_z=dims[1], cell_x=SIZE[0] / dims[0], cell_y=SIZE[2] / dims[2],
                    cell_z=SIZE[1] / dims[1], density=1000.0, youngs_modulus=E, poisson_ratio=nu, fix_top=True)
    return b.finalize(dtype=xsim.float64, requires_grad=requires_grad)


def rollout(model, frames: int = FRAMES, iterations: int = ITERATIONS) -> list:
    solver = SolverXPBD(model, substeps=SUBSTEPS, iterations=iterations)
    states = [model.state()]
    for _ in range(frames):
        states.append(model.state())
        solver.step(states[-2], states[-1], None, DT)
    return states


def recording(refine: int, iterations: int = ITERATIONS) -> dict[int, np.ndarray]:
    """The true material's positions at the OBSERVED frames, at the fitted mesh's vertices."""
    fine = build(refine, TRUE_E, TRUE_NU)
    coarse = build(1, TRUE_E, TRUE_NU).particle_q.numpy()
    x0 = fine.particle_q.numpy()
    rows = [int(np.argmin(np.linalg.norm(x0 - p, axis=1))) for p in coarse]
    assert np.allclose(x0[rows], coarse), "every fitted vertex is a vertex of the fine mesh"
    states = rollout(fine, iterations=iterations)
    return {f: states[f].particle_q.numpy()[rows] for f in OBSERVED}


def fit(refine: int = 2, E0: float = 1.0e5, nu0: float = 0.2, iterations: int = 30,
        solver_iterations: int = ITERATIONS):
    """(fitted E, fitted nu, losses) against a recording on a mesh ``refine`` times finer, both simulated with
    ``solver_iterations`` per substep; ``iterations``: L-BFGS's."""
    target = recording(refine, solver_iterations)
    model = build(1, E0, nu0, requires_grad=True)
    weight = 1.0 / (len(OBSERVED) * model.particle_count * 1e-6)  # the mean squared distance in mm^2

    def loss_of():
        states = rollout(model, iterations=solver_iterations)
        loss = new_loss(states[0].particle_q)
        for f, x in target.items():
            add_squared_distance(loss, states[f].particle_q, x, weight=weight)
        return loss

    params = [Parameter(model.tet_youngs_modulus, shared=True, log=True, bounds=(1e3, 1e8), name="E"),
              Parameter(model.tet_poisson_ratio, shared=True, bounds=(0.0, 0.49), name="nu")]
    result = minimize(Objective(loss_of, params), maxiter=iterations, options={"ftol": 1e-14, "gtol": 0.0})
    return float(params[0].value()[0]), float(params[1].value()[0]), result.losses


if __name__ == "__main__":
    for refine, solver_iterations in ((1, ITERATIONS), (2, 40)):
        E, nu, losses = fit(refine, solver_iterations=solver_iterations)
        print(f"recording on a mesh {refine}x finer: E = {E:.5g} Pa ({E / TRUE_E - 1:+.2%}), nu = {nu:.4f} "
              f"({nu / TRUE_NU - 1:+.2%}), loss {losses[0]:.3g} -> {losses[-1]:.3g} "
              f"({losses[0] / max(losses[-1], 1e-300):.3g}x) in {len(losses) - 1} iterations")
