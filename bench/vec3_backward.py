"""Forward and backward of a vec3 math kernel (cross, dot, length, sin, exp, normalize) at
n = 1e6, recorded on a Tape: xsim vs Warp 1.19 CPU on the identical kernel source.

Forward: one launch recorded on a fresh Tape. Backward: ``tape.backward()`` of that Tape, the
output's gradient seeded once beforehand (each engine runs the kernel's adjoint once per sample;
xsim with its OpenMP threads, Warp on one thread; xsim's adjoint of ``out[i] = ...`` zeroes
``out.grad`` after reading it, as its gradient rules say, which changes no amount of work).
Goals (issue 3): xsim backward <= 2x xsim forward, both faster than Warp's.
Run: ``python bench/vec3_backward.py [--n N] [--repeat N] [--clock cpu]``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from common import (
    fmt_time,
    have_warp,
    init_backend,
    interleaved_medians,
    load_kernels,
    print_table,
    ratio,
    warp_note,
)


class Case:
    """The kernel's inputs, output and Tape for one engine; ``forward``/``backward`` are one sample."""

    def __init__(self, wp, kernel, a_np, b_np, device="cpu"):
        self.wp, self.kernel, self.n, self.device = wp, kernel, len(a_np), device
        self.a = wp.array(a_np, dtype=wp.vec3, device=device, requires_grad=True)
        self.b = wp.array(b_np, dtype=wp.vec3, device=device, requires_grad=True)
        self.out = wp.zeros(self.n, dtype=wp.vec3, device=device, requires_grad=True)
        self.seed = wp.array(np.ones_like(a_np), dtype=wp.vec3, device=device)
        self.tape = wp.Tape()
        self.forward()
        self.tape.backward(grads={self.out: self.seed})

    def forward(self):
        self.tape = self.wp.Tape()
        with self.tape:
            self.wp.launch(self.kernel, self.n, inputs=[self.a, self.b], outputs=[self.out], device=self.device)
        self.wp.synchronize_device(self.device)  # a GPU sample ends when its work does (no-op on the CPU)

    def backward(self):
        self.tape.backward()
        self.wp.synchronize_device(self.device)

    def grads(self):
        return self.a.grad.numpy().copy(), self.b.grad.numpy().copy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda:0 for both engines on the GPU")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time summed over threads (steadier on a shared machine)")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(1)
    a_np = rng.uniform(-1, 1, (args.n, 3)).astype(np.float32)
    b_np = rng.uniform(-1, 1, (args.n, 3)).astype(np.float32)
    xs = init_backend("xsim")
    cases = {"xsim": Case(xs, load_kernels("kernels_vec3", "xsim").vec3_math, a_np, b_np, args.device)}
    use_warp = have_warp()
    if use_warp:
        wp = init_backend("warp")
        cases["warp"] = Case(wp, load_kernels("kernels_vec3", "warp").vec3_math, a_np, b_np, args.device)
    notes = []
    if use_warp:  # same kernel, same inputs: the engines must agree before their times mean anything
        for c in cases.values():
            c.a.grad.zero_()
            c.b.grad.zero_()
            c.forward()
            c.out.grad.assign(c.seed)
            c.tape.backward()
        gx, gw = cases["xsim"].grads(), cases["warp"].grads()
        err = max(float(np.max(np.abs(x - w))) for x, w in zip(gx, gw))
        out_err = float(np.max(np.abs(cases["xsim"].out.numpy() - cases["warp"].out.numpy())))
        notes.append(f"xsim vs Warp: max |out difference| = {out_err:.2e}, max |gradient difference| = {err:.2e}")
    for c in cases.values():
        c.forward()
        c.tape.backward(grads={c.out: c.seed})
    fwd = interleaved_medians({k: c.forward for k, c in cases.items()}, args.repeat, clock=clock)
    bwd = interleaved_medians({k: c.backward for k, c in cases.items()}, args.repeat, clock=clock)
    tw = (fwd.get("warp"), bwd.get("warp"))
    rows = [["forward (on a Tape)", fmt_time(fwd["xsim"]), fmt_time(tw[0]), ratio(tw[0], fwd["xsim"])],
            ["backward", fmt_time(bwd["xsim"]), fmt_time(tw[1]), ratio(tw[1], bwd["xsim"])],
            ["backward / forward", ratio(bwd["xsim"], fwd["xsim"]), ratio(tw[1], tw[0]), ""]]
    threads = os.environ.get("XSIM_NUM_THREADS", os.cpu_count())
    where = (f"xsim threads: {threads}, Warp CPU: 1 thread" if args.device == "cpu"
             else f"device {args.device}, each sample synchronized")
    notes.insert(0, f"n = {args.n:.0e}, {args.clock} clock, median of {args.repeat} samples; {where}; "
                 "warp/xsim > 1 means xsim is faster.")
    if not use_warp:
        notes.append(warp_note())
    print_table("vec3 math kernel on a Tape", ["", "xsim", "warp", "warp/xsim"], rows, notes)


if __name__ == "__main__":
    main()
