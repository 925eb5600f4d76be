"""Recover a cloth's stretch and bend compliance from its motion, by backpropagating through whole
rollouts of the XPBD solver.

A cloth held along its left edge falls from horizontal and swings down. The target is that motion
simulated with hidden compliances; starting from a wrong guess, each evaluation simulates the
cloth on a Tape, measures the mean squared distance to the target positions at a few frames, and
backpropagates it to the model's per-constraint compliance arrays. The two material parameters
are optimized in log space (compliances span decades) with L-BFGS-B (``xsim.optim.minimize``),
which copes with the bend direction being far flatter than the stretch one. Prints the loss per iteration and saves the
loss curve to ``out/fit_cloth_compliance_loss.png``.

    python examples/fit_cloth_compliance.py
"""

import time

import numpy as np

import xsim
from xsim.io import save_loss_curve
from xsim.optim import minimize
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

HIDDEN = {"stretch": 1.0e-3, "bend": 30.0}   # m/N (stretch and shear springs), 1/(N m) (bending)
GUESS = {"stretch": 3.0e-3, "bend": 10.0}


@xsim.kernel
def add_mean_distance_sq(positions: xsim.array(dtype=xsim.vec3d), target: xsim.array(dtype=xsim.vec3d),
                         scale: xsim.float64, loss: xsim.array(dtype=xsim.float64)):
    """loss[0] += scale * |positions[i] - target[i]|^2 for every particle i."""
    i = xsim.tid()
    d = positions[i] - target[i]
    xsim.atomic_add(loss, 0, scale * xsim.dot(d, d))


class SwingingCloth:
    """A cloth of ``cells`` (nx, ny) of 5 cm, pinned along its left edge, released horizontal, in
    float64 so the loss is smooth down to tiny values. ``frames`` of 1/60 s; the loss compares
    the frames in ``observed``."""

    def __init__(self, cells=(8, 6), frames: int = 30, observed=(10, 20, 30), substeps: int = 5,
                 iterations: int = 4):
        self.cells, self.frames, self.observed = cells, frames, observed
        self.substeps, self.iterations = substeps, iterations

    def model(self, stretch: float, bend: float, requires_grad: bool = False):
        builder = ModelBuilder(gravity=(0.0, 0.0, -9.81))
        builder.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0),
                               dim_x=self.cells[0], dim_y=self.cells[1], cell_x=0.05, cell_y=0.05, mass=0.005,
                               fix_left=True, stretch_compliance=stretch, shear_compliance=stretch,
                               bend_compliance=bend)
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
        """Positions at the observed frames of a rollout with the given compliances."""
        states = self.rollout(self.model(stretch, bend))
        return {k: states[k].particle_q for k in self.observed}

    def loss_and_grad(self, log_params: np.ndarray, target: dict) -> tuple[float, np.ndarray]:
        """Mean squared distance to the target (m^2, averaged over observed frames and particles)
        and its gradient with respect to (log stretch, log bend)."""
        stretch, bend = np.exp(log_params)
        model = self.model(stretch, bend, requires_grad=True)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            states = self.rollout(model)
            scale = 1.0 / (len(self.observed) * model.particle_count)
            for k in self.observed:
                xsim.launch(add_mean_distance_sq, model.particle_count,
                            inputs=[states[k].particle_q, target[k], scale], outputs=[loss])
        tape.backward(loss)
        # Every spring's compliance is `stretch` and every bending stencil's is `bend` times a fixed
        # area factor, so d loss / d log p = sum over the array of (gradient * value).
        grad = np.array([np.dot(model.spring_compliance.grad.numpy(), model.spring_compliance.numpy()),
                         np.dot(model.bending_compliance.grad.numpy(), model.bending_compliance.numpy())])
        return float(loss.numpy()[0]), grad


def fit(cloth: SwingingCloth | None = None, iterations: int = 12, verbose: bool = True):
    """Recover HIDDEN from GUESS. Returns ({"stretch", "bend"}, loss per iteration)."""
    cloth = cloth or SwingingCloth()
    target = cloth.target(HIDDEN["stretch"], HIDDEN["bend"])

    def report(it, x, fx):
        if verbose:
            s, b = np.exp(x)
            print(f"iteration {it:2d}  loss {fx:.3e} m^2  stretch {s:.4e} m/N  bend {b:.4g} 1/(N m)")

    x0 = np.log([GUESS["stretch"], GUESS["bend"]])
    result = minimize(lambda x: cloth.loss_and_grad(x, target), x0=x0, maxiter=iterations, callback=report)
    return {"stretch": float(np.exp(result.x[0])), "bend": float(np.exp(result.x[1]))}, result.losses


if __name__ == "__main__":
    t0 = time.perf_counter()
    found, losses = fit()
    for name, hidden in HIDDEN.items():
        print(f"{name}: recovered {found[name]:.4g}, hidden {hidden:.4g} ({100 * abs(found[name] / hidden - 1):.2f}% off)")
    print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e} ({losses[0] / losses[-1]:.1e}x) in {time.perf_counter() - t0:.1f} s")
    print("wrote", save_loss_curve(losses, "out/fit_cloth_compliance_loss.png", "fit cloth stretch and bend compliance"))
