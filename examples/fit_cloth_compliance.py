"""Recover a cloth's material (stretch stiffness in N/m, bending stiffness in N m) from its motion,
by backpropagating through whole rollouts of the XPBD solver.

A 0.4 x 0.2 m cloth of 2 kg/m^2 held along its left edge falls from horizontal and swings down.
The target is that motion simulated with a hidden material, seen at nine marked material points
(corners, edge midpoints, centre); starting from a wrong guess, each evaluation simulates the
cloth on a Tape, measures the mean squared distance of the same points to the target at a few
frames, and backpropagates it to the model's per-constraint compliance arrays. The material is
given in physical units (the builder turns it into per-edge compliances from lengths and areas,
and the masses come from the density), so the values found are the material's, the same on a
coarse and a fine mesh. (A coarse cloth fitted to a fine one's motion does not find them yet: at
a few Jacobi iterations the motion itself is not converged in the mesh.) The two parameters
are optimized in log space (they span decades) with L-BFGS-B (``xsim.optim.minimize``), which copes with the bend direction
being far flatter than the stretch one. Prints the loss per iteration and saves the loss curve to
``out/fit_cloth_compliance_loss.png``.

    python examples/fit_cloth_compliance.py
"""

import time

import numpy as np

import xsim
from xsim.io import save_loss_curve
from xsim.optim import minimize
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

HIDDEN = {"stretch": 3.0e3, "bend": 0.03}   # N/m (every edge, diagonals included), N m
GUESS = {"stretch": 1.0e3, "bend": 0.1}
SIZE = (0.4, 0.2)     # m
DENSITY = 2.0         # kg/m^2


@xsim.kernel
def add_mean_distance_sq(positions: xsim.array(dtype=xsim.vec3d), marks: xsim.array(dtype=int),
                         target: xsim.array(dtype=xsim.vec3d), scale: xsim.float64,
                         loss: xsim.array(dtype=xsim.float64)):
    """loss[0] += scale * |positions[marks[i]] - target[i]|^2 for every mark i."""
    i = xsim.tid()
    d = positions[marks[i]] - target[i]
    xsim.atomic_add(loss, 0, scale * xsim.dot(d, d))


class SwingingCloth:
    """The cloth of SIZE in ``cells`` (nx, ny; both even, so the marks are particles), pinned along
    its left edge, released horizontal, in float64 so the loss is smooth down to tiny values.
    ``frames`` of 1/60 s; the loss compares the frames in ``observed``."""

    def __init__(self, cells=(8, 4), frames: int = 30, observed=(10, 20, 30), substeps: int = 5,
                 iterations: int = 4):
        if cells[0] % 2 or cells[1] % 2:
            raise ValueError(f"SwingingCloth: cells must be even to hold the marks, got {cells}")
        self.cells, self.frames, self.observed = cells, frames, observed
        self.substeps, self.iterations = substeps, iterations
        ix, iy = np.meshgrid([0, cells[0] // 2, cells[0]], [0, cells[1] // 2, cells[1]])
        self.marks = (iy * (cells[0] + 1) + ix).ravel()  # particle index of each marked point

    def model(self, stretch: float, bend: float, requires_grad: bool = False):
        builder = ModelBuilder(gravity=(0.0, 0.0, -9.81))
        builder.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0),
                               dim_x=self.cells[0], dim_y=self.cells[1], cell_x=SIZE[0] / self.cells[0],
                               cell_y=SIZE[1] / self.cells[1], mass=0.0, fix_left=True, stretch_stiffness=stretch,
                               bend_stiffness=bend, density=DENSITY)
        return builder.finalize(device="cpu", requires_grad=requires_grad, dtype=xsim.float64)

    def rollout(self, model):
        """States of every frame (each step writes a new State, so a Tape can replay them)."""
        solver = SolverXPBD(model, substeps=self.substeps, iterations=self.iterations)
        states = [model.state() for _ in range(self.frames + 1)]
        control = model.control()
        for k in range(self.frames):
            solver.step(states[k], states[k + 1], control, 1.0 / 60.0)
        return states

    def target(self, stretch: float, bend: float) -> dict:
        """Positions of the marks at the observed frames of a rollout with the given material."""
        states = self.rollout(self.model(stretch, bend))
        return {k: xsim.array(states[k].particle_q.numpy()[self.marks], dtype=xsim.vec3d) for k in self.observed}

    def loss_and_grad(self, log_params: np.ndarray, target: dict) -> tuple[float, np.ndarray]:
        """Mean squared distance of the marks to the target (m^2, averaged over observed frames and
        marks) and its gradient with respect to (log stretch stiffness, log bend stiffness)."""
        stretch, bend = np.exp(log_params)
        model = self.model(stretch, bend, requires_grad=True)
        marks = xsim.array(self.marks.astype(np.int32), dtype=int)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            states = self.rollout(model)
            scale = 1.0 / (len(self.observed) * len(self.marks))
            for k in self.observed:
                xsim.launch(add_mean_distance_sq, len(self.marks), inputs=[states[k].particle_q, marks, target[k], scale],
                            outputs=[loss])
        tape.backward(loss)
        # Every compliance is (a fixed geometric factor) / stiffness, so d alpha / d log stiffness = -alpha
        # and d loss / d log stiffness = -sum over the array of (gradient * value).
        grad = -np.array([np.dot(model.spring_compliance.grad.numpy(), model.spring_compliance.numpy()),
                          np.dot(model.bending_compliance.grad.numpy(), model.bending_compliance.numpy())])
        return float(loss.numpy()[0]), grad


def fit(cloth: SwingingCloth | None = None, iterations: int = 12, verbose: bool = True):
    """Recover HIDDEN from GUESS on ``cloth``. Returns ({"stretch", "bend"}, loss per iteration)."""
    cloth = cloth or SwingingCloth()
    target = cloth.target(HIDDEN["stretch"], HIDDEN["bend"])

    def report(it, x, fx):
        if verbose:
            s, b = np.exp(x)
            print(f"iteration {it:2d}  loss {fx:.3e} m^2  stretch {s:.4g} N/m  bend {b:.4g} N m")

    x0 = np.log([GUESS["stretch"], GUESS["bend"]])
    result = minimize(lambda x: cloth.loss_and_grad(x, target), x0=x0, maxiter=iterations, callback=report)
    return {"stretch": float(np.exp(result.x[0])), "bend": float(np.exp(result.x[1]))}, result.losses


if __name__ == "__main__":
    t0 = time.perf_counter()
    for cells in ((8, 4), (16, 8)):
        print(f"cloth of {cells[0]} x {cells[1]} cells")
        found, losses = fit(SwingingCloth(cells=cells))
        for name, hidden in HIDDEN.items():
            print(f"{name}: recovered {found[name]:.4g}, hidden {hidden:.4g} ({100 * abs(found[name] / hidden - 1):.2f}% off)")
        print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e} ({losses[0] / losses[-1]:.1e}x)")
    print(f"{time.perf_counter() - t0:.1f} s")
    print("wrote", save_loss_curve(losses, "out/fit_cloth_compliance_loss.png", "fit cloth stretch and bend stiffness"))
