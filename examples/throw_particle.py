"""Find the initial velocity that throws a particle onto a target point, by gradient descent
through a whole rollout of the XPBD solver recorded on a Tape.

The target is where a throw with a hidden velocity lands after ``FLIGHT`` seconds; starting from
rest, each iteration simulates the throw, measures the squared miss distance
(``xsim.optim.add_squared_distance``), backpropagates it to the initial velocity and takes a
gradient step (``xsim.optim.SGD``, updating the velocity array in place). Prints the loss per iteration and saves the
loss curve to ``out/throw_particle_loss.png``.

    python examples/throw_particle.py
"""

import contextlib
import time

import numpy as np

import xsim
from xsim.io import save_loss_curve
from xsim.optim import SGD, add_squared_distance, new_loss
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

HIDDEN_VELOCITY = (2.0, -1.0, 4.5)   # m/s: the throw that made the target
START = (0.0, 0.0, 1.0)              # m
FLIGHT = 1.0                          # s
STEPS = 60


class Thrower:
    """One particle in free flight under gravity, simulated with ``SolverXPBD``."""

    def __init__(self, steps: int = STEPS, device: str = "cpu"):
        builder = ModelBuilder(gravity=(0.0, 0.0, -9.81))
        builder.add_particle(pos=START, vel=(0.0, 0.0, 0.0), mass=1.0, radius=0.05)
        self.model = builder.finalize(device=device, requires_grad=True)
        self.solver = SolverXPBD(self.model, substeps=1, iterations=1)
        self.steps, self.dt = steps, FLIGHT / steps
        self.device = device

    def landing_point(self, velocity, tape: xsim.Tape | None = None):
        """Simulate the throw from ``velocity`` (m/s: 3 numbers, or a (1,) vec3 array used as is);
        returns (initial velocity array, final state). With ``tape`` given, the launches are recorded on it."""
        v0 = velocity if isinstance(velocity, xsim.array) else xsim.array(
            np.asarray([velocity], np.float32), dtype=xsim.vec3, device=self.device, requires_grad=True)
        states = [self.model.state() for _ in range(self.steps + 1)]
        states[0].particle_qd = v0
        control = self.model.control()
        with tape if tape is not None else contextlib.nullcontext():
            for k in range(self.steps):
                self.solver.step(states[k], states[k + 1], control, self.dt)
        return v0, states[-1]

    def backward(self, velocity, target) -> tuple[float, xsim.array]:
        """Simulate, measure the squared miss distance (m^2) and backpropagate it into the velocity
        array's ``.grad``. Returns (loss, velocity array)."""
        tape = xsim.Tape()
        v0, final = self.landing_point(velocity, tape)
        with tape:
            loss = new_loss(final.particle_q)
            add_squared_distance(loss, final.particle_q, [target])
        tape.backward(loss)
        return float(loss.numpy()[0]), v0

    def loss_and_grad(self, velocity, target) -> tuple[float, np.ndarray]:
        """Squared miss distance (m^2) and its gradient with respect to the initial velocity."""
        loss, v0 = self.backward(velocity, target)
        return loss, v0.grad.numpy()[0].astype(np.float64)


def fit(iterations: int = 12, steps: int = STEPS, learning_rate: float = 0.4, verbose: bool = True):
    """Gradient descent on the initial velocity from rest. Returns (velocity, losses)."""
    thrower = Thrower(steps)
    _, final = thrower.landing_point(HIDDEN_VELOCITY)
    target = final.particle_q.numpy()[0].astype(np.float64)
    velocity = xsim.zeros(1, dtype=xsim.vec3, requires_grad=True)
    # The landing point moves FLIGHT metres per m/s of launch speed, so the loss curvature is
    # 2 * FLIGHT^2: this step size converges geometrically by (1 - 2 * learning_rate) per step.
    optimizer = SGD([velocity], lr=learning_rate / (2.0 * FLIGHT**2))
    losses = []
    for it in range(iterations):
        optimizer.zero_grad()
        loss, _ = thrower.backward(velocity, target)
        losses.append(loss)
        if verbose:
            print(f"iteration {it:2d}  loss {loss:.3e} m^2  velocity {np.round(velocity.numpy()[0], 4)}")
        optimizer.step()
    return velocity.numpy()[0].astype(np.float64), losses


if __name__ == "__main__":
    t0 = time.perf_counter()
    velocity, losses = fit()
    print(f"recovered velocity {np.round(velocity, 4)} m/s, hidden {HIDDEN_VELOCITY} m/s")
    print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e} ({losses[0] / losses[-1]:.1e}x) in {time.perf_counter() - t0:.1f} s")
    print("wrote", save_loss_curve(losses, "out/throw_particle_loss.png", "throw a particle onto a target"))
