"""How many OpenMP threads a CPU launch gets: all of them (``XSIM_NUM_THREADS``, default: every
core) when its work is worth waking the worker threads for and they have been the faster, else one.

A parallel launch wakes the workers (they wait passively between launches: ``cpu.py``) and then
waits for the slowest of them: tens of microseconds on a quiet machine, up to a scheduler time
slice when another process holds a core. So each kernel's serial cost per thread is measured on
its first few launches below ``CALIBRATE_BELOW`` threads (run serially and timed), and later
launches whose estimated serial time is under ``SERIAL_BELOW_S`` stay serial. Longer work is timed
on all threads too, and each launch takes the faster of the two (``Pacer``), so a busy machine never
makes a kernel slower than its own serial run for long. Measurements and the choice of these numbers:
bench/README.md.
"""

from __future__ import annotations

import time

SERIAL_BELOW_S = 50e-6       # estimated serial time under which a launch does not wake the workers
CALIBRATION_RUNS = 3         # timed launches per kernel, direction and mode before choosing (the fastest counts)
CALIBRATE_BELOW = 1 << 16    # launches of this many threads or more always run in parallel
PROBE_EVERY = 32             # one launch in this many runs the mode not chosen, to follow the machine's load
SMOOTHING = 0.25             # weight of a launch's timing in its mode's running estimate


class Pacer:
    """The thread choice of one kernel in one direction (forward or adjoint) on the CPU.

    Below ``CALIBRATE_BELOW`` threads every launch is timed. The first ``CALIBRATION_RUNS`` run serially;
    work estimated under ``SERIAL_BELOW_S`` then stays serial. Longer work runs its next calibration launches
    on every thread, and from then on each launch takes the mode (serial or all threads) whose running
    estimate of time per thread is lower, trying the other one every ``PROBE_EVERY`` launches: beside a
    busy process a parallel launch waits for a descheduled worker, and serial wins; on a quiet machine the
    workers do."""

    __slots__ = ("launches", "parallel_per_thread", "parallel_runs", "per_thread", "runs")

    def __init__(self):
        self.per_thread = 0.0           # seconds per thread, serial: fastest calibration run, then a running mean
        self.runs = 0
        self.parallel_per_thread = 0.0  # the same on every thread
        self.parallel_runs = 0
        self.launches = 0

    def threads(self, n: int) -> int:
        """Threads for a launch of ``n`` threads: 1 while calibrating, for small work, or when serial runs
        have been the faster."""
        nt = _max_threads or max_threads()
        if nt == 1 or n >= CALIBRATE_BELOW:
            return nt
        if self.runs < CALIBRATION_RUNS or n * self.per_thread < SERIAL_BELOW_S:
            return 1
        if self.parallel_runs < CALIBRATION_RUNS:
            return nt
        self.launches += 1
        parallel = self.parallel_per_thread < self.per_thread
        if self.launches % PROBE_EVERY == 0:
            parallel = not parallel
        return nt if parallel else 1

    def run(self, entry, buf: bytes, n: int, threads: int) -> int:
        """Call the native ``entry`` on ``buf`` (packed for ``threads``), timing it into its mode's estimate.
        Returns the entry's status: 0 when it ran, nonzero when it refused the launch before running any
        thread (``codegen._cpu_entry``'s shape check), which then teaches the estimate nothing."""
        # untimed: launches that always run in parallel, and serial ones once calibrated while no parallel
        # estimate is there to compare with (work too small for the workers)
        serial_settled = threads == 1 and self.runs >= CALIBRATION_RUNS > self.parallel_runs
        if n >= CALIBRATE_BELOW or serial_settled:
            return entry(buf)
        t0 = time.perf_counter()
        refused = entry(buf)
        if refused:
            return refused
        per = (time.perf_counter() - t0) / n
        if threads == 1:
            self.per_thread = _estimate(self.per_thread, self.runs, per)
            self.runs += 1
        else:
            self.parallel_per_thread = _estimate(self.parallel_per_thread, self.parallel_runs, per)
            self.parallel_runs += 1
        return 0


def _estimate(estimate: float, runs: int, per: float) -> float:
    """A mode's time per thread after a launch took ``per``: the fastest of its calibration runs; then a
    faster launch is believed at once (the machine got quieter: one probe brings the workers back) and a
    slower one moves a running mean (one descheduled launch does not switch a mode off, a busy spell does
    within a few launches)."""
    if runs < CALIBRATION_RUNS or per < estimate:
        return per if runs == 0 else min(estimate, per)
    return estimate + SMOOTHING * (per - estimate)


_max_threads = 0


def max_threads() -> int:
    """``XSIM_NUM_THREADS`` (read once), else the number of cores."""
    global _max_threads
    if not _max_threads:
        from .module import num_threads
        _max_threads = num_threads()
    return _max_threads


def set_max_threads(n: int) -> None:
    """Use at most ``n`` threads per launch from now on (``XSIM_NUM_THREADS`` at run time)."""
    global _max_threads
    if int(n) < 1:
        raise ValueError(f"set_max_threads: need at least one thread, got {n}")
    _max_threads = int(n)
