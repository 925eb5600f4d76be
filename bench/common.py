"""Shared pieces of the benchmarks: load one kernel source for xsim and for Warp, a median-of-N
timer that samples several engines in turns, and a table printer with ratios.

A benchmark's kernels live in a ``kernels_*.py`` file next to it that starts with
``wp = backend(__name__)``: ``load_kernels`` imports that file once per backend under a module
name ending in ``__xsim`` or ``__warp``, so both compilers see the identical source text.
"""

from __future__ import annotations

import importlib
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent


def backend(module_name: str):
    """The ``wp`` of a kernels file: xsim or warp, chosen by the suffix of its module name."""
    return importlib.import_module(module_name.rsplit("__", 1)[-1])


def have_warp() -> bool:
    """Whether warp-lang (the optional ``bench`` extra) is installed."""
    return importlib.util.find_spec("warp") is not None


def have_newton() -> bool:
    """Whether newton (the optional ``bench`` extra) is installed."""
    return importlib.util.find_spec("newton") is not None


def init_backend(name: str, quiet: bool = True):
    """Import and initialise ``name`` ("xsim" or "warp"); returns the module."""
    wp = importlib.import_module(name)
    if name == "warp" and quiet:
        wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines in the tables
    if name == "warp":
        wp.init()
    return wp


def load_kernels(stem: str, backend_name: str):
    """Import ``bench/<stem>.py`` with ``wp`` bound to ``backend_name``; returns the module."""
    mod_name = f"{stem}__{backend_name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, HERE / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # inspect.getsource (both frontends use it) looks the module up here
    spec.loader.exec_module(mod)
    return mod


def interleaved_medians(fns: dict[str, Callable[[], object] | None], repeat: int = 21, number: int = 1,
                        warmup: int = 2, clock: Callable[[], float] = time.perf_counter) -> dict[str, float | None]:
    """For each function, the median over ``repeat`` samples of its time per call, a sample being
    ``number`` calls. The functions are sampled in turns (one sample of each per round), so slow
    phases of a noisy machine hit all of them alike; each sample follows one untimed call, so it
    measures back-to-back calls, not a wake-up of idle threads (on this VM the first parallel
    region after a pause can take milliseconds). ``None`` entries stay ``None``.
    ``clock=time.process_time`` measures CPU time instead of wall time: for single-threaded host
    work on a shared machine it leaves out the time other processes had the core."""
    live = {k: f for k, f in fns.items() if f is not None}
    for f in live.values():
        for _ in range(warmup):
            f()
    samples: dict[str, list[float]] = {k: [] for k in live}
    for _ in range(repeat):
        for k, f in live.items():
            f()  # untimed: wakes the OpenMP workers the previous engine's turn let fall asleep
            t0 = clock()
            for _ in range(number):
                f()
            samples[k].append((clock() - t0) / number)
    return {k: statistics.median(samples[k]) if k in samples else None for k in fns}


def time_stepping(step: Callable[[object, object], None], s0, s1, steps: int, repeat: int, warmup: int,
                  sync: Callable[[], None] = lambda: None) -> dict:
    """Time ping-pong stepping ``step(state_in, state_out)``: ``warmup`` untimed steps, then
    ``repeat`` samples of ``steps`` steps each. Returns the median wall time per step ("step"), the
    smallest CPU time per step ("step_cpu", all threads of this process) and the last state
    ("state"). ``sync`` waits for queued work (an engine that launches asynchronously)."""
    for _ in range(warmup):
        step(s0, s1)
        s0, s1 = s1, s0
    sync()
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(s0, s1)
            s0, s1 = s1, s0
        sync()
        wall.append((time.perf_counter() - t0) / steps)
        cpu.append((time.process_time() - c0) / steps)
    return {"step": statistics.median(wall), "step_cpu": min(cpu), "state": s0}


def time_taped_rollout(prepare: Callable[[], object], forward: Callable[[object], object],
                       backward: Callable[[object, object], None], runs: int,
                       sync: Callable[[], None] = lambda: None,
                       clock: Callable[[], float] = time.perf_counter) -> dict:
    """Time a rollout recorded on a tape and its backward pass, ``runs`` times after one untimed
    warm-up run: ``prepare()`` makes the run's fresh states (untimed), ``forward(prepared)`` records
    the rollout and returns its tape, ``backward(prepared, tape)`` seeds and runs the backward pass.
    Returns the medians ("tape_forward", "tape_backward") and the last run's prepared states.
    ``clock=time.process_time`` measures the process's CPU time (all threads) instead of wall time."""
    fwd, bwd = [], []
    for run in range(runs + 1):
        prepared = prepare()
        t0 = clock()
        tape = forward(prepared)
        sync()
        t1 = clock()
        backward(prepared, tape)
        sync()
        t2 = clock()
        if run:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
        # release this run's tape before the next run records: a rollout's intermediate arrays are
        # hundreds of MB, and recording while the last tape still holds them measures page faults
        del tape
        if run < runs:
            del prepared
    return {"tape_forward": statistics.median(fwd), "tape_backward": statistics.median(bwd), "prepared": prepared}


def fmt_time(seconds: float | None) -> str:
    """A duration with a unit that keeps 3 significant digits readable."""
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def print_table(title: str, header: list[str], rows: list[list[str]], notes: list[str] = ()):
    """Print a plain-text table (markdown-compatible) with a title and notes under it."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\n## {title}\n")
    line = "| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |"
    print(line)
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
    for n in notes:
        print(f"\n{n}")
    sys.stdout.flush()


def ratio(a: float | None, b: float | None) -> str:
    """``a / b`` as ``1.23x`` (how many times slower a is than b), or ``-``."""
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def warp_note() -> str:
    return "warp-lang is not installed (pip install -e '.[bench]'): Warp columns are skipped."
