"""Launch overhead: the median host time of one launch of a dim=1 kernel (a float and two arrays,
``kernels_launch.py``), xsim vs Warp 1.19 CPU on the identical kernel source, without and with a
Tape recording.

Goal (issue 2): <= 3 us per plain xsim launch. Run: ``python bench/launch_overhead.py``.

The second table is what the release-mode launch-shape check costs (issue 39: <= 0.1 us per launch).
Separate processes on these machines differ by more than that, so it is an A/B in one process: the
same kernel with and without arrays indexed directly by tid() (which the check compares with dim),
sampled in turns.
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
    shape_check_cost(xs, load_kernels("kernels_launch", "xsim"), one, args.number, args.repeat, clock)


def shape_check_cost(xs, kernels, one, number: int, repeat: int, clock):
    """Print the per-launch cost of the release-mode launch-shape check: plain launches of ``scale``,
    whose arrays every thread indexes by tid() (its entry point compares them with dim before running,
    ``codegen._cpu_entry``), against launches of ``scale_computed_index``, the same kernel indexed by an
    expression of tid() that the check does not follow, interleaved; the difference of the medians in
    each of 7 independent A/Bs. Everything else the launch does is the same for both kernels."""
    checked, unchecked = kernels.scale, kernels.scale_computed_index
    x, y = xs.array(one), xs.zeros(1)
    for k in (checked, unchecked):
        xs.launch(k, 1, inputs=[0.5, x], outputs=[y])
    if not checked.launch_cache.meta.tid_indexed or unchecked.launch_cache.meta.tid_indexed:
        raise RuntimeError("the compiler's tid()-indexing analysis changed: this A/B no longer compares a "
                           "checked kernel with an unchecked one")

    def launches(kernel):
        def run():
            for _ in range(number):
                xs.launch(kernel, 1, inputs=[0.5, x], outputs=[y])
        return run

    rows, diffs = [], []
    for r in range(7):  # which kernel goes first alternates: going first is worth a few tens of ns here
        sides = [("on", launches(checked)), ("off", launches(unchecked))]
        t = interleaved_medians(dict(sides if r % 2 == 0 else sides[::-1]), repeat, clock=clock)
        diffs.append((t["on"] - t["off"]) / number)
        rows.append([str(r + 1), fmt_time(t["on"] / number), fmt_time(t["off"] / number),
                     f"{diffs[-1] * 1e9:+.0f} ns"])
    notes = [f"median of the 7 differences: {sorted(diffs)[3] * 1e9:+.0f} ns per launch (goal: <= 100 ns); "
             f"each round: {repeat} interleaved samples of {number} launches per kernel."]
    print_table("release-mode launch-shape check, dim=1", ["round", "checked", "unchecked", "cost"], rows, notes)


if __name__ == "__main__":
    main()
