"""Fit the drive targets of an imported robot arm so that its end effector reaches a point: gradient
descent through whole XPBD rollouts of pybullet_data's KUKA iiwa (a URDF, ``scenes/kuka_reach.toml``;
needs ``pip install 'xsim[urdf]' pybullet``).

Joints 2 and 4 of the arm are driven by stiff, damped drives (the scene's ``joint_targets``); the goal
is where the flange (``lbr_iiwa_link_7``'s origin) ends after ``SECONDS`` with hidden targets. From
the scene's targets, each iteration simulates, measures the squared miss, backpropagates it to the two
targets (``Control.joint_target_q``) and takes a gradient step with momentum. Prints the loss per
iteration.

    python examples/kuka_reach.py
"""

import time
from pathlib import Path

import numpy as np

import xsim
from xsim.io import load_scene
from xsim.optim import SGD
from xsim.solvers import SolverXPBD

SCENE = Path(__file__).parents[1] / "scenes" / "kuka_reach.toml"
DRIVEN = ("lbr_iiwa_joint_2", "lbr_iiwa_joint_4")
HIDDEN_TARGETS = (0.9, -0.6)  # rad
SECONDS = 0.5


@xsim.kernel
def flange_miss_sq(body_q: xsim.array(dtype=xsim.transformd), body: int, goal: xsim.vec3d,
                   loss: xsim.array(dtype=xsim.float64)):
    """loss[0] = |origin of ``body`` - goal|^2, m^2."""
    d = xsim.transform_get_translation(body_q[body]) - goal
    loss[0] = xsim.dot(d, d)


class Kuka:
    """The arm of ``SCENE`` in float64, stepped for ``SECONDS``."""

    def __init__(self, seconds: float = SECONDS):
        scene = load_scene(SCENE)
        self.builder = scene.builder()
        self.model = self.builder.finalize(device="cpu", dtype=xsim.float64, requires_grad=True)
        self.solver = SolverXPBD(self.model, substeps=scene.sim.substeps, iterations=scene.sim.iterations)
        self.dt = scene.sim.dt
        self.frames = round(seconds / self.dt)
        self.flange = self.model.body_label.index("lbr_iiwa_link_7")
        self.driven = [self.model.joint_label.index(n) for n in DRIVEN]
        self.base_targets = self.model.joint_target_q.numpy().copy()

    def targets(self, driven) -> xsim.array:
        """All joints' drive targets with the driven ones from ``driven`` (2,) (a taped copy when an array)."""
        full = self.base_targets.copy()
        full[self.driven] = np.asarray(driven.numpy() if isinstance(driven, xsim.array) else driven)
        return xsim.array(full, dtype=xsim.float64)

    def rollout(self, control):
        states = [self.model.state()]
        for _ in range(self.frames):
            states.append(self.model.state())
            self.solver.step(states[-2], states[-1], control, self.dt)
        return states[-1]

    def flange_at(self, driven) -> np.ndarray:
        control = self.model.control()
        control.joint_target_q = self.targets(driven)
        return self.rollout(control).body_q.numpy()[self.flange, :3]

    def loss_and_grad(self, driven: np.ndarray, goal) -> tuple[float, np.ndarray]:
        """Squared flange miss (m^2) and its gradient with respect to the driven joints' targets."""
        control = self.model.control()
        control.joint_target_q = xsim.array(self.targets(driven).numpy(), dtype=xsim.float64, requires_grad=True)
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            final = self.rollout(control)
            xsim.launch(flange_miss_sq, 1, inputs=[final.body_q, self.flange, xsim.vec3d(*goal)], outputs=[loss])
        tape.backward(loss)
        return float(loss.numpy()[0]), control.joint_target_q.grad.numpy()[self.driven]


def fit(iterations: int = 30, learning_rate: float = 0.5, momentum: float = 0.5, verbose: bool = True):
    """Gradient descent with momentum from the scene's targets. Returns (targets, losses, arm, goal)."""
    arm = Kuka()
    goal = arm.flange_at(HIDDEN_TARGETS)
    driven = xsim.array(arm.base_targets[arm.driven], dtype=xsim.float64, requires_grad=True)
    optimizer = SGD([driven], lr=learning_rate, momentum=momentum)
    losses = []
    for it in range(iterations):
        optimizer.zero_grad()
        loss, grad = arm.loss_and_grad(driven.numpy(), goal)
        driven.grad.assign(xsim.array(grad, dtype=xsim.float64))
        losses.append(loss)
        if verbose:
            print(f"iteration {it:2d}  loss {loss:.3e} m^2  targets {np.round(driven.numpy(), 4)} rad")
        optimizer.step()
    return driven.numpy().copy(), losses, arm, goal


if __name__ == "__main__":
    t0 = time.perf_counter()
    targets, losses, arm, goal = fit()
    print(f"recovered targets {np.round(targets, 4)} rad, hidden {HIDDEN_TARGETS} rad")
    print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e} ({losses[0] / losses[-1]:.1e}x) in {time.perf_counter() - t0:.1f} s")
