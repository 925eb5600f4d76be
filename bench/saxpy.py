"""saxpy (float32, y = a*x + y) at n = 1e5, 1e6, 1e7: xsim vs Warp 1.19 CPU on the identical kernel
source, with a hand-written C++ OpenMP loop (g++ -O3 -fopenmp) as the physical reference.

Goals (issue 2): xsim within 1.25x of the C loop at 1e7, and faster than Warp at every size.
The C loop runs on as many threads as xsim (``XSIM_NUM_THREADS``, default all cores).
Run: ``python bench/saxpy.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import tempfile
from pathlib import Path

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

C_SOURCE = r"""
#include <cstdint>
extern "C" void saxpy(int64_t n, float a, const float* __restrict x, float* __restrict y, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
"""


def c_saxpy():
    """The reference loop, compiled once into a temporary folder and loaded with ctypes."""
    tmp = Path(tempfile.mkdtemp(prefix="xsim-bench-"))
    (tmp / "saxpy.cpp").write_text(C_SOURCE)
    cxx = os.environ.get("CXX", "g++")
    subprocess.run([cxx, "-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", str(tmp / "saxpy.cpp"), "-o",
                    str(tmp / "saxpy.so")], check=True)
    lib = ctypes.CDLL(str(tmp / "saxpy.so"))
    lib.saxpy.argtypes = [ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.saxpy.restype = None
    return lib.saxpy


def _number(n: int) -> int:
    """Calls per timing sample: back-to-back launches, as in a simulation loop, at least 10 and about
    1e6 elements' worth. (One call per sample would time the wake-up of OpenMP workers that went
    to sleep while the other engine ran, which on a busy machine can take milliseconds.)"""
    return max(10, 10**6 // n)


def launcher(wp, kernel, n, a, x, y, device="cpu"):
    """A no-argument call of ``wp.launch`` (xsim or Warp: the same call) of saxpy over ``n`` threads; on a
    GPU each call waits for its launch to finish."""
    if device == "cpu":
        return lambda: wp.launch(kernel, n, inputs=[a, x, y], device="cpu")
    return lambda: (wp.launch(kernel, n, inputs=[a, x, y], device=device), wp.synchronize_device(device))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=31)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda:0: both engines on the GPU, no C loop")
    args = ap.parse_args()
    sizes = [10**5, 10**6, 10**7]
    a = 0.5
    rng = np.random.default_rng(0)
    xs = init_backend("xsim")
    xk = load_kernels("kernels_saxpy", "xsim").saxpy
    # build and load xsim's module first: it sets libgomp's spin policy, which the C loop then shares
    launcher(xs, xk, 1, a, xs.zeros(1), xs.zeros(1))()
    gpu = args.device != "cpu"
    c_fn = None if gpu else c_saxpy()
    use_warp = have_warp()
    wp = wk = None
    if use_warp:
        wp = init_backend("warp")
        wk = load_kernels("kernels_saxpy", "warp").saxpy
    threads = int(os.environ.get("XSIM_NUM_THREADS", os.cpu_count()))
    rows = []
    for n in sizes:
        x_np = rng.random(n, dtype=np.float32)
        y_np = rng.random(n, dtype=np.float32)
        cx, cy = x_np.copy(), y_np.copy()
        fns = {"c": None if gpu else lambda: c_fn(n, a, cx.ctypes.data, cy.ctypes.data, threads),  # noqa: B023
               "xsim": launcher(xs, xk, n, a, xs.array(x_np, device=args.device), xs.array(y_np, device=args.device),
                                args.device),
               "warp": launcher(wp, wk, n, a, wp.array(x_np, dtype=wp.float32, device=args.device),
                                wp.array(y_np, dtype=wp.float32, device=args.device), args.device) if use_warp else None}
        t = interleaved_medians(fns, args.repeat, _number(n))
        gbs = 12 * n / t["xsim"] / 1e9
        rows.append([f"{n:.0e}", fmt_time(t["c"]), fmt_time(t["xsim"]), fmt_time(t["warp"]), ratio(t["xsim"], t["c"]),
                     ratio(t["warp"], t["xsim"]), f"{gbs:.1f}"])
    if gpu:
        notes = [f"device {args.device}, each call synchronized; no C loop (it is a CPU reference)"]
    else:
        notes = []
    notes += [(f"median of {args.repeat} samples of >= 10 back-to-back calls; C and xsim threads: {threads}, Warp CPU: 1 thread; xsim/C > 1 "
              "means xsim is slower than the C loop, warp/xsim > 1 means xsim is faster than Warp; GB/s counts "
              "12 bytes per element (read x, read y, write y).")]
    if not use_warp:
        notes.append(warp_note())
    print_table("saxpy float32", ["n", "C OpenMP", "xsim", "warp", "xsim/C", "warp/xsim", "xsim GB/s"], rows, notes)


if __name__ == "__main__":
    main()
