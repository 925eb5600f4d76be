"""Find the joint drive targets that bring a two-link arm's tip to a target point, by gradient
descent through whole rollouts of the XPBD solver recorded on a Tape.

The arm is ``scenes/two_link_arm.toml``: two 0.5 m links hinged about y, each joint driven towards
its target angle by a stiff, damped drive, under gravity (so the arm sags a little below its
targets). The target point is where the tip settles with hidden drive targets. Starting from
targets (0, 0) (the arm held out horizontally), each iteration simulates ``SECONDS`` of motion,
measures the squared distance from the tip to the target, backpropagates it to the two targets
(``Control.joint_target_q``) and takes a gradient step with momentum (``xsim.optim.SGD``, heavy
ball: the loss is a long curved valley, along which plain steps crawl). Prints the loss per iteration and saves
the loss curve to ``out/arm_reach_loss.png``.

A tip position has two arm poses (elbow up and elbow down); the hidden targets bend the elbow
the same way the descent goes from the start, so the descent finds them, not the mirror pose.

    python examples/arm_reach.py
"""

import time
from pathlib import Path

import numpy as np

import xsim
from xsim.io import load_scene, save_loss_curve
from xsim.optim import SGD
from xsim.solvers import SolverXPBD

SCENE = Path(__file__).parents[1] / "scenes" / "two_link_arm.toml"
HIDDEN_TARGETS = (0.3, 1.5)   # rad: shoulder, elbow (positive turns the link down)
TIP = (0.25, 0.0, 0.0)        # m: the tip in the lower link's body frame (its far end)
SECONDS = 1.0


@xsim.kernel
def tip_miss_sq(body_q: xsim.array(dtype=xsim.transformd), tip: xsim.vec3d, target: xsim.vec3d,
                loss: xsim.array(dtype=xsim.float64)):
    """loss[0] = |tip of the last body - target|^2, m^2."""
    d = xsim.transform_point(body_q[1], tip) - target
    loss[0] = xsim.dot(d, d)


class Arm:
    """The two-link arm of ``SCENE`` in float64, stepped by ``SolverXPBD`` for ``frames`` frames."""

    def __init__(self, frames: int | None = None, substeps: int | None = None):
        scene = load_scene(SCENE)
        self.model = scene.builder().finalize(device="cpu", dtype=xsim.float64, requires_grad=True)
        self.solver = SolverXPBD(self.model, substeps=substeps or scene.sim.substeps, iterations=scene.sim.iterations)
        self.dt = scene.sim.dt
        self.frames = frames if frames is not None else round(SECONDS / self.dt)

    def rollout(self, targets):
        """Simulate with drive ``targets`` (rad, array or numpy); returns the final state."""
        control = self.model.control()
        control.joint_target_q = targets if isinstance(targets, xsim.array) else xsim.array(
            np.asarray(targets, np.float64), dtype=xsim.float64)
        states = [self.model.state()]
        for _ in range(self.frames):
            states.append(self.model.state())
            self.solver.step(states[-2], states[-1], control, self.dt)
        return states[-1]

    def tip(self, targets) -> np.ndarray:
        """Where the tip is (m) at the end of a rollout with drive ``targets``."""
        q = self.rollout(targets).body_q.numpy()[1]
        x, y, z, w = q[3:]
        u, t = np.array([x, y, z]), 2.0 * np.cross([x, y, z], TIP)
        return q[:3] + np.asarray(TIP) + w * t + np.cross(u, t)

    def backward(self, targets: xsim.array, goal) -> float:
        """Simulate with drive ``targets`` (a float64 array with a gradient), measure the squared tip
        miss (m^2) and backpropagate it into ``targets.grad``. Returns the loss."""
        loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            final = self.rollout(targets)
            xsim.launch(tip_miss_sq, 1, inputs=[final.body_q, xsim.vec3d(*TIP), xsim.vec3d(*goal)], outputs=[loss])
        tape.backward(loss)
        return float(loss.numpy()[0])

    def loss_and_grad(self, targets, goal) -> tuple[float, np.ndarray]:
        """Squared tip miss (m^2) and its gradient with respect to the two drive targets."""
        t = xsim.array(np.asarray(targets, np.float64), dtype=xsim.float64, requires_grad=True)
        return self.backward(t, goal), t.grad.numpy().copy()


def fit(iterations: int = 40, frames: int | None = None, substeps: int | None = None, learning_rate: float = 1.0,
        momentum: float = 0.5, verbose: bool = True):
    """Gradient descent with momentum on the drive targets from (0, 0). ``frames``/``substeps``
    default to the scene's (fewer make a quicker, still exact, problem). Returns (targets, losses,
    arm, goal)."""
    arm = Arm(frames, substeps)
    goal = arm.tip(HIDDEN_TARGETS)
    targets = xsim.zeros(2, dtype=xsim.float64, requires_grad=True)
    # The tip moves about a link length (0.5-1 m) per radian, so the loss curvature is at
    # most about 2 m^2/rad^2: a step of learning_rate / 2 per unit gradient does not overshoot it.
    optimizer = SGD([targets], lr=learning_rate / 2.0, momentum=momentum)
    losses = []
    for it in range(iterations):
        optimizer.zero_grad()
        loss = arm.backward(targets, goal)
        losses.append(loss)
        if verbose:
            print(f"iteration {it:2d}  loss {loss:.3e} m^2  targets {np.round(targets.numpy(), 4)} rad")
        optimizer.step()
    return targets.numpy().copy(), losses, arm, goal


if __name__ == "__main__":
    t0 = time.perf_counter()
    targets, losses, arm, goal = fit()
    print(f"recovered targets {np.round(targets, 4)} rad, hidden {HIDDEN_TARGETS} rad")
    print(f"tip {np.round(arm.tip(targets), 4)} m, target {np.round(goal, 4)} m")
    print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e} ({losses[0] / losses[-1]:.1e}x) in {time.perf_counter() - t0:.1f} s")
    print("wrote", save_loss_curve(losses, "out/arm_reach_loss.png", "two-link arm: reach a point"))
