"""Peak memory and wall time of backpropagating through a 64x64 XPBD cloth over 1,000 substeps: one
plain Tape vs ``xsim.autodiff.checkpointed_rollout`` (issue 9).

Goal: the checkpointed peak at most 10% of the plain tape's, at most 2.5x its time.

Each variant runs in a fresh subprocess (so peaks never mix), after a warm-up that compiles the
kernels; then the kernel's peak counter is reset (``/proc/self/clear_refs``) and the rollout with
its backward pass runs once. Measured per variant:

- native peak: VmHWM minus the resident size just before the rollout (numpy buffers included);
- Python peak: ``tracemalloc``'s peak, in a second subprocess, because tracing slows allocation
  and would distort the time;
- tape bytes: ``Tape.memory()`` of the plain tape, or the largest segment tape plus the
  checkpoints of the checkpointed run;
- wall time of forward + backward (the fastest of ``--repeat`` runs, the variants alternating).

The cloth: 64 x 64 particles, 1 m square, 1 kg, pinned along one edge, falling under gravity;
``SolverXPBD`` with one substep per step and ``--iterations`` Jacobi iterations. The loss is the
mean squared distance to a shifted copy of the initial grid; the gradients of the two runs with
respect to the model's spring compliances and inverse masses (read by every step) are compared.

Run: ``python bench/checkpoint_memory.py [--steps 1000] [--segment K] [--iterations 2] [--repeat 2]``.
On a busy machine set ``XSIM_NUM_THREADS=1``: OpenMP threads that wait for a busy core make
launches erratic.
"""

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc

import numpy as np
from common import fmt_time, print_table

import xsim
from xsim.autodiff import checkpointed_rollout
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

GRID = 64
DT = 1.0 / 600.0      # 10 substeps per 60 Hz frame: 1,000 substeps are 100 frames


@xsim.kernel
def squared_distance_loss(q: xsim.array(dtype=xsim.vec3), target: xsim.array(dtype=xsim.vec3), scale: float,
                          loss: xsim.array(dtype=float)):
    i = xsim.tid()
    d = q[i] - target[i]
    xsim.atomic_add(loss, 0, xsim.dot(d, d) * scale)


class Cloth:
    """The benchmark's cloth: ``state0``, ``new_state``, ``step`` and ``loss`` for either variant."""

    def __init__(self, iterations: int):
        b = ModelBuilder()
        b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=GRID - 1,
                         dim_y=GRID - 1, cell_x=1.0 / (GRID - 1), cell_y=1.0 / (GRID - 1), mass=1.0 / GRID**2,
                         fix_top=True, stretch_compliance=1e-6, shear_compliance=1e-5)
        self.model = b.finalize(requires_grad=True)
        self.solver = SolverXPBD(self.model, iterations=iterations)
        self.control = self.model.control()
        self.target = xsim.array(self.model.particle_q.numpy() + np.array([0.0, 0.1, -0.1], np.float32),
                                 dtype=xsim.vec3)
        self.new_state = self.model.state
        self.state0 = self.model.state

    def step(self, s_in, s_out, step: int) -> None:
        self.solver.step(s_in, s_out, self.control, DT)

    def loss(self, s) -> xsim.array:
        loss = xsim.zeros(1, dtype=float, requires_grad=True)
        n = self.model.particle_count
        xsim.launch(squared_distance_loss, n, inputs=[s.particle_q, self.target, 1.0 / n], outputs=[loss])
        return loss

    def params(self) -> dict:
        return {"spring_compliance": self.model.spring_compliance, "particle_inv_mass": self.model.particle_inv_mass}


# -- one variant, in its own process ----------------------------------------------------------------


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def plain_rollout(cloth: Cloth, steps: int) -> int:
    """Every step on one tape; returns the tape's bytes before its backward pass."""
    s = cloth.state0()
    tape = xsim.Tape()
    with tape:
        for i in range(steps):
            out = cloth.new_state()
            cloth.step(s, out, i)
            s = out
        loss = cloth.loss(s)
    tape_bytes = tape.memory()
    tape.backward(loss)
    return tape_bytes


def checkpointed(cloth: Cloth, steps: int, segment: int | None) -> int:
    result = checkpointed_rollout(cloth.step, cloth.state0(), steps, cloth.loss, segment=segment,
                                  state_factory=cloth.new_state)
    return result.peak_tape_bytes + result.checkpoint_bytes


def run_variant(variant: str, steps: int, segment: int | None, iterations: int, trace: bool) -> dict:
    cloth = Cloth(iterations)
    run = (lambda n: plain_rollout(cloth, n)) if variant == "plain" else (lambda n: checkpointed(cloth, n, segment))
    run(4)                     # compiles (or loads) the kernels
    for p in cloth.params().values():
        p.grad.zero_()
    gc.collect()
    if trace:
        tracemalloc.start()
    _reset_peak()
    rss0 = _status_kb("VmRSS")
    t0 = time.perf_counter()
    tape_bytes = run(steps)
    seconds = time.perf_counter() - t0
    out = {"seconds": seconds, "native_peak": (_status_kb("VmHWM") - rss0) * 1024, "tape_bytes": tape_bytes,
           "grads": {k: p.grad.numpy().ravel().tolist() for k, p in cloth.params().items()}}
    if trace:
        out["python_peak"] = tracemalloc.get_traced_memory()[1]
    return out


def in_subprocess(args, variant: str, trace: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, "--steps", str(args.steps), "--iterations",
           str(args.iterations)]
    if args.segment:
        cmd += ["--segment", str(args.segment)]
    if trace:
        cmd.append("--trace")
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--segment", type=int, default=None, help="steps per segment (default sqrt(steps))")
    p.add_argument("--iterations", type=int, default=2, help="XPBD Jacobi iterations per substep")
    p.add_argument("--repeat", type=int, default=2, help="timed runs per variant (the fastest counts)")
    p.add_argument("--child", choices=["plain", "checkpointed"], help=argparse.SUPPRESS)
    p.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_variant(args.child, args.steps, args.segment, args.iterations, args.trace)))
        return

    res = {}
    for _ in range(args.repeat):   # alternate the variants so that a busy phase of the machine hits both
        for variant in ("plain", "checkpointed"):
            run = in_subprocess(args, variant, trace=False)
            best = res.setdefault(variant, run)
            best["seconds"] = min(best["seconds"], run["seconds"])
    for variant, r in res.items():
        r["python_peak"] = in_subprocess(args, variant, trace=True)["python_peak"]
    plain, ckpt = res["plain"], res["checkpointed"]
    rows = [[name, mib(r["native_peak"]), mib(r["python_peak"]), mib(r["tape_bytes"]), fmt_time(r["seconds"])]
            for name, r in res.items()]
    rows.append(["checkpointed / plain"] + [f"{ckpt[c] / plain[c]:.1%}" for c in ("native_peak", "python_peak",
                                                                                   "tape_bytes")]
                + [f"{ckpt['seconds'] / plain['seconds']:.2f}x"])
    # float32 with atomics summing in any order: compare each gradient relative to its largest component
    rel = max(np.abs(np.subtract(ckpt["grads"][n], plain["grads"][n])).max() / np.abs(plain["grads"][n]).max()
              for n in plain["grads"])
    k = args.segment or max(1, round(args.steps ** 0.5))
    threads = os.environ.get("XSIM_NUM_THREADS", "all cores")
    print_table(f"{GRID}x{GRID} XPBD cloth ({args.iterations} iterations), {args.steps} substeps, segment {k}: "
                "plain tape vs checkpointed",
                ["variant", "native peak (VmHWM)", "Python peak (tracemalloc)", "tape + checkpoints", "time"], rows,
                notes=["Goal: checkpointed peak <= 10% of plain, time <= 2.5x.",
                       f"Time: the fastest of {args.repeat} runs per variant, alternating; threads: {threads}.",
                       f"Parameter gradients, checkpointed vs plain (float32): largest difference {rel:.1e} "
                       + "of the largest component."])


if __name__ == "__main__":
    main()
