"""Per-kernel times of the cloth's Jacobi iteration (issue 17, item 1): each forward kernel of a plain step
and each kernel of the taped backward pass (``ParticleConstraints.backward``), on ``bench/cloth.py``'s 64x64
cloth. The launches of one plain step and of one taped step's backward are captured, then each is run again
``--repeat`` times and timed (median; launch overhead included; by default the process's CPU time, so run
it with ``XSIM_NUM_THREADS=1`` to compare kernels one thread against one thread).

Run: ``XSIM_NUM_THREADS=1 python bench/cloth_kernels.py [--repeat N] [--clock wall]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from cloth import DT, ITERATIONS, xsim_model
from common import fmt_time, print_table

import xsim
from xsim.kernels import threads
from xsim.solvers import SolverXPBD


def captured_launches(run) -> dict:
    """{kernel key: [kernel, args, kwargs, launches]} of the ``xsim.launch`` calls ``run()`` makes (the
    arguments of each kernel's first; a Tape's generated adjoints are not ``xsim.launch`` calls)."""
    seen, launch = {}, xsim.launch

    def capture(kernel, *args, **kwargs):
        entry = seen.setdefault(kernel.key, [kernel, args, kwargs, 0])
        entry[3] += 1
        return launch(kernel, *args, **kwargs)

    xsim.launch = capture  # the solver's modules call it through the package
    try:
        run()
    finally:
        xsim.launch = launch
    return seen


def time_launches(seen: dict, repeat: int, clock) -> list[tuple[str, float, int]]:
    out = []
    for key, (kernel, args, kwargs, count) in seen.items():
        xsim.launch(kernel, *args, **kwargs)
        ts = []
        for _ in range(repeat):
            t0 = clock()
            xsim.launch(kernel, *args, **kwargs)
            ts.append(clock() - t0)
        out.append((key, statistics.median(ts), count))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    model = xsim_model()
    plain = SolverXPBD(model, iterations=ITERATIONS)
    a, b = model.state(), model.state()
    plain.step(a, b, None, DT)
    forward = captured_launches(lambda: plain.step(b, a, None, DT))

    gmodel = xsim_model(requires_grad=True)
    taped = SolverXPBD(gmodel, iterations=ITERATIONS)
    states = [gmodel.state(requires_grad=True) for _ in range(2)]
    tape = xsim.Tape()
    with tape:
        taped.step(states[0], states[1], None, DT)
    seed = np.ones((gmodel.particle_count, 3), dtype=np.float32)
    backward = captured_launches(lambda: tape.backward(grads={states[1].particle_q: seed}))

    rows = []
    totals = {}
    for name, seen in (("forward", forward), ("backward", backward)):
        for key, t, count in time_launches(seen, args.repeat, clock):
            totals[name] = totals.get(name, 0.0) + t * count
            rows.append([name, key, str(count), fmt_time(t), fmt_time(t * count)])
    rows.append(["forward", "sum", "", "", fmt_time(totals["forward"])])
    rows.append(["backward", "sum (ParticleConstraints.backward)", "", "", fmt_time(totals["backward"])])
    rows.append(["", "backward / forward (kernels only)", "", "", f"{totals['backward'] / totals['forward']:.2f}x"])
    print_table(f"Cloth 64x64, one step, {ITERATIONS} iterations: kernels ({args.clock} time, median of "
                f"{args.repeat})", ["pass", "kernel", "launches", "per launch", "per step"], rows,
                [f"threads: {threads.max_threads()}"])


if __name__ == "__main__":
    main()
