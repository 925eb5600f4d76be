"""Compile and load times of a 5-kernel module (``kernels_compile.py``), xsim vs Warp 1.19 CPU on the
identical source. Each measurement runs in a fresh Python process:

- cold: an empty kernel cache (``XSIM_CACHE_DIR`` / ``warp.config.kernel_cache_dir``), so the module is
  generated and compiled;
- cached: the same cache again, so the module is only looked up and loaded.

Per process it reports the import of the package, the module load (compile or cache load, until all
5 kernels are ready) and the first launch after it. A warm-up process runs first, so that Python's
bytecode cache is written and no measured process compiles Python. Goals (issue 2): cold compile <= Warp's, cached
load <= 5 ms. Run: ``python bench/compile_time.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import fmt_time, have_warp, print_table, ratio, warp_note

HERE = Path(__file__).parent
CACHED_RUNS = 4  # fresh processes on each warm cache


def child(backend_name: str, cache: str):
    """Runs in the fresh process: import, load the module, launch once; prints the times as JSON."""
    t0 = time.perf_counter()
    if backend_name == "xsim":
        os.environ["XSIM_CACHE_DIR"] = cache
        import xsim as wp
    else:
        import warp as wp
        wp.config.kernel_cache_dir = cache
        wp.config.log_level = wp.LOG_WARNING
        wp.init()
    t1 = time.perf_counter()
    from common import load_kernels
    mod = load_kernels("kernels_compile", backend_name)
    t2 = time.perf_counter()
    c2 = _cpu_time()
    if backend_name == "xsim":
        mod.integrate_particles.module.load("cpu")  # forwards and adjoints, as Warp's load_module
    else:
        wp.load_module(mod, device="cpu")
    t3 = time.perf_counter()
    cpu_load = _cpu_time() - c2
    n = 4
    x, v, f = (wp.zeros(n, dtype=wp.vec3, device="cpu") for _ in range(3))
    xo, vo = wp.zeros(n, dtype=wp.vec3, device="cpu"), wp.zeros(n, dtype=wp.vec3, device="cpu")
    m = wp.ones(n, dtype=float, device="cpu")
    t4 = time.perf_counter()
    wp.launch(mod.integrate_particles, n, inputs=[x, v, f, m, wp.vec3(0.0, -9.8, 0.0), 0.01], outputs=[xo, vo],
              device="cpu")
    t5 = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "decorate": t2 - t1, "load": t3 - t2, "load_cpu": cpu_load,
                      "first_launch": t5 - t4}))


def _cpu_time() -> float:
    """CPU seconds of this process and its finished children (xsim compiles in a g++ child, Warp in
    process): unlike wall time, barely moved by other work on a busy machine."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_child(backend_name: str, cache: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # measure Python as installed normally, with cached bytecode (a warm-up run writes it)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", backend_name, cache],
                         check=False, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{backend_name} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(backend_name: str, repeat: int) -> dict:
    """Median over ``repeat`` fresh caches of the cold process, and of the cached process after each."""
    cold, cached = [], []
    with tempfile.TemporaryDirectory(prefix=f"bench-{backend_name}-warmup-") as cache:
        run_child(backend_name, cache)  # writes the bytecode of every module a compile imports
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix=f"bench-{backend_name}-cache-") as cache:
            cold.append(run_child(backend_name, cache))
            cached += [run_child(backend_name, cache) for _ in range(CACHED_RUNS)]

    def med(rs, key):
        return statistics.median(r[key] for r in rs)
    return {f"{phase}_{k}": med(rs, k) for phase, rs in (("cold", cold), ("cached", cached))
            for k in ("import", "decorate", "load", "load_cpu", "first_launch")}


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    res = {"xsim": measure("xsim", args.repeat)}
    use_warp = have_warp()
    if use_warp:
        res["warp"] = measure("warp", args.repeat)
    rows = []
    labels = [("cold_load", "cold: compile module (5 kernels), wall"),
              ("cold_load_cpu", "cold: compile module (5 kernels), CPU time"), ("cached_load", "cached: load module, wall"),
              ("cached_load_cpu", "cached: load module, CPU time"),
              ("cached_first_launch", "cached: first launch after load"), ("cached_import", "import package"),
              ("cached_decorate", "import the kernels file (decorators)")]
    for key, label in labels:
        x, w = res["xsim"][key], res["warp"][key] if use_warp else None
        rows.append([label, fmt_time(x), fmt_time(w), ratio(w, x)])
    notes = [(f"each value: median over {args.repeat} fresh caches (cold) and {CACHED_RUNS * args.repeat} fresh processes "
              "on a warm cache (cached); warp/xsim > 1 means xsim is faster.")]
    if not use_warp:
        notes.append(warp_note())
    print_table("compile and load, 5-kernel module", ["phase", "xsim", "warp", "warp/xsim"], rows, notes)


if __name__ == "__main__":
    main()
