"""Throw a cloth at a target: optimise its launch velocity through a 1,000-substep XPBD rollout
with checkpointed backpropagation.

A 16 x 16-particle cloth (stretch, shear and bending constraints) is thrown from 1 m high and
flies for 1 s: 100 frames of 10 XPBD substeps. The loss is the squared distance of the cloth's
centre of mass at the end to a target; its gradient with respect to the launch velocity drives
gradient descent. ``xsim.autodiff.checkpointed_rollout`` keeps only every 10th frame's state
during the forward pass and recomputes one segment at a time backwards, so the memory held is
that of about 20 frames instead of 100; the last lines print that trade (for a 64 x 64 cloth over
1,000 substeps a plain tape holds about 10 GiB: see bench/checkpoint_memory.py).

Run: ``python examples/long_rollout.py [--iterations 6] [--frames 100]``.
"""

import argparse
import time

import numpy as np

import xsim
from xsim.autodiff import checkpointed_rollout
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

SUBSTEPS = 10
FRAME_DT = 1.0 / 100.0


@xsim.kernel
def centre_offset(q: xsim.array(dtype=xsim.vec3), target: xsim.vec3, inv_count: float,
                  offset: xsim.array(dtype=xsim.vec3)):
    i = xsim.tid()
    xsim.atomic_add(offset, 0, (q[i] - target) * inv_count)


@xsim.kernel
def squared_length(v: xsim.array(dtype=xsim.vec3), loss: xsim.array(dtype=float)):
    loss[0] = xsim.dot(v[0], v[0])


def build():
    b = ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=15, dim_y=15,
                     cell_x=0.02, cell_y=0.02, mass=0.001, stretch_compliance=1e-6, shear_compliance=1e-5)
    model = b.finalize(requires_grad=True)
    return model, SolverXPBD(model, substeps=SUBSTEPS, iterations=2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--frames", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.4)
    args = p.parse_args()

    model, solver = build()
    control = model.control()
    n = model.particle_count
    target = xsim.vec3(2.0, 1.0, 1.2)

    def step(s_in, s_out, frame):
        solver.step(s_in, s_out, control, FRAME_DT)

    def loss_fn(state):
        offset = xsim.zeros(1, dtype=xsim.vec3, requires_grad=True)
        loss = xsim.zeros(1, dtype=float, requires_grad=True)
        xsim.launch(centre_offset, n, inputs=[state.particle_q, target, 1.0 / n], outputs=[offset])
        xsim.launch(squared_length, 1, inputs=[offset], outputs=[loss])
        return loss

    velocity = np.array([1.0, 0.0, 3.0])
    t0 = time.perf_counter()
    for it in range(args.iterations):
        state0 = model.state()
        state0.particle_qd.numpy()[:] = velocity
        result = checkpointed_rollout(step, state0, args.frames, loss_fn, state_factory=model.state)
        # every particle starts with the launch velocity, so its gradient is the sum over particles
        grad = state0.particle_qd.grad.numpy().sum(axis=0)
        print(f"iteration {it:2d}  loss {result.loss:10.6f}  launch velocity {np.round(velocity, 3)}")
        velocity = velocity - args.lr * grad
    seconds = time.perf_counter() - t0

    print(f"\n{args.iterations} iterations of {args.frames * SUBSTEPS} substeps in {seconds:.1f} s")
    print(f"segment {result.segment} frames, {result.num_segments} checkpoints "
          f"({result.checkpoint_bytes / 1024:.0f} KiB); largest segment tape {result.peak_tape_bytes / 2**20:.1f} MiB; "
          f"a plain tape would hold about {result.peak_tape_bytes * result.num_segments / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
