"""Launch overhead: the median host time of one launch of a dim=1 kernel (a float and two arrays,
``kernels_launch.py``), xsim vs Warp 1.19 CPU on the identical kernel source, without and with a
Tape recording.

Goal (issue 2): <= 3 us per plain xsim launch. Run: ``python bench/launch_overhead.py``.
"""

from __future__ import annotations

import argparse
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


def launcher(wp, kernel, a, x, y, number: int, tape: bool):
    """One timing sample: ``number`` launches, all recorded on one fresh Tape when ``tape`` is set."""
    def run():
        for _ in range(number):
            wp.launch(kernel, 1, inputs=[a, x], outputs=[y], device="cpu")

    def run_taped():
        with wp.Tape():
            run()
    return run_taped if tape else run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--number", type=int, default=2000, help="launches per sample")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: process CPU time, which leaves out time other processes had the core (a dim=1 "
                         "launch runs on the calling thread only)")
    args = ap.parse_args()
    xs = init_backend("xsim")
    xk = load_kernels("kernels_launch", "xsim").scale
    use_warp = have_warp()
    if use_warp:
        wp = init_backend("warp")
        wk = load_kernels("kernels_launch", "warp").scale
    one = np.ones(1, np.float32)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = []
    for tape in (False, True):
        n = args.number
        fns = {"xsim": launcher(xs, xk, 0.5, xs.array(one, requires_grad=tape), xs.zeros(1, requires_grad=tape), n,
                                tape),
               "warp": launcher(wp, wk, 0.5, wp.array(one, device="cpu", requires_grad=tape),
                                wp.zeros(1, device="cpu", requires_grad=tape), n, tape) if use_warp else None}
        t = {k: v / n if v is not None else None for k, v in interleaved_medians(fns, args.repeat, clock=clock).items()}
        rows.append(["Tape recording" if tape else "plain", fmt_time(t["xsim"]), fmt_time(t["warp"]),
                     ratio(t["warp"], t["xsim"])])
    notes = [(f"{args.clock} clock, median of {args.repeat} samples of {args.number} launches each; with a Tape, each sample's "
              "launches are recorded on one fresh Tape; warp/xsim > 1 means xsim is faster.")]
    if not use_warp:
        notes.append(warp_note())
    print_table("launch overhead, dim=1", ["launch", "xsim", "warp", "warp/xsim"], rows, notes)


if __name__ == "__main__":
    main()
