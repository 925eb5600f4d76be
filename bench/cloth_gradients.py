"""Gradient regression check for the taped cloth rollout (issue 17): the 64x64 cloth of ``cloth.py``
in float64, 20 steps on a Tape, the final positions seeded with ones, as built and with damping on
every spring and bending constraint; the gradients of the initial positions and velocities and of
the spring and bending compliances, saved from one checkout and
compared with another's to 1e-12 relative (a speed-up of the taped path must not change them).
Run: ``python bench/cloth_gradients.py --save ref.npz`` on the reference checkout, then
``python bench/cloth_gradients.py --compare ref.npz`` on the changed one (exit status 1 on a mismatch).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from cloth import DT, ITERATIONS, TAPE_STEPS, xsim_cloth

DAMPING = 0.05  # s: XPBD's beta, for the damped variant


def rollout_gradients(damping: float) -> dict[str, np.ndarray]:
    """{name: gradient} of the float64 rollout (seed: ones on the last state's positions)."""
    import xsim
    from xsim.solvers import SolverXPBD
    model = xsim_cloth().finalize(device="cpu", requires_grad=True, dtype=xsim.float64)
    model.spring_damping.fill_(damping)
    model.bending_damping.fill_(damping)
    solver = SolverXPBD(model, iterations=ITERATIONS)
    states = [model.state(requires_grad=True) for _ in range(TAPE_STEPS + 1)]
    # a swinging start, so the velocity-dependent terms are not all zero
    v0 = np.zeros((model.particle_count, 3))
    v0[:, 2] = np.linspace(-1.0, 1.0, model.particle_count)
    states[0].particle_qd.assign(xsim.array(v0, dtype=xsim.vec3d))
    tape = xsim.Tape()
    with tape:
        for i in range(TAPE_STEPS):
            solver.step(states[i], states[i + 1], None, DT)
    tape.backward(grads={states[-1].particle_q: np.ones((model.particle_count, 3))})
    tag = "damped_" if damping else ""
    return {tag + "q0": states[0].particle_q.grad.numpy(), tag + "qd0": states[0].particle_qd.grad.numpy(),
            tag + "spring_compliance": model.spring_compliance.grad.numpy(),
            tag + "bending_compliance": model.bending_compliance.grad.numpy()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE", help="write the gradients to FILE (.npz)")
    group.add_argument("--compare", metavar="FILE", help="compare the gradients with FILE's")
    ap.add_argument("--rtol", type=float, default=1e-12)
    args = ap.parse_args()
    got = {**rollout_gradients(0.0), **rollout_gradients(DAMPING)}
    if args.save:
        np.savez(args.save, **got)
        print(f"saved {', '.join(got)} to {args.save}")
        return 0
    ref = np.load(args.compare)
    worst = 0
    for name, g in got.items():
        r = ref[name]
        err = np.abs(g - r).max() / max(np.abs(r).max(), 1e-300)
        worst = max(worst, err)
        print(f"{name:20s} max |grad| {np.abs(r).max():.3e}  max relative difference {err:.2e}")
    ok = worst <= args.rtol
    print("gradients unchanged" if ok else f"gradients CHANGED beyond {args.rtol:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
