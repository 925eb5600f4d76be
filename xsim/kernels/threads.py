"""How many OpenMP threads a CPU launch gets: all of them (``XSIM_NUM_THREADS``, default: every
core) when its work is worth waking the worker threads for, else one.

A parallel launch wakes the workers (they wait passively between launches: ``cpu.py``) and then
waits for the slowest of them: tens of microseconds on a quiet machine, up to a scheduler time
slice when another process holds a core. So each kernel's serial cost per thread is measured on
its first few launches below ``CALIBRATE_BELOW`` threads (run serially and timed), and later
launches whose estimated serial time is under ``SERIAL_BELOW_S`` stay serial. Measurements and
the choice of these numbers: bench/README.md.
"""

from __future__ import annotations

import time

SERIAL_BELOW_S = 50e-6       # estimated serial time under which a launch does not wake the workers
CALIBRATION_RUNS = 3         # serial, timed launches per kernel and direction (the fastest counts)
CALIBRATE_BELOW = 1 << 16    # launches of this many threads or more always run in parallel


class Pacer:
    """The thread choice of one kernel in one direction (forward or adjoint) on the CPU."""

    __slots__ = ("per_thread", "runs")

    def __init__(self):
        self.per_thread = 0.0  # seconds per thread of the fastest serial calibration run
        self.runs = 0

    def threads(self, n: int) -> int:
        """Threads for a launch of ``n`` threads: 1 while calibrating or when the work is small."""
        nt = _max_threads or max_threads()
        if nt == 1 or n >= CALIBRATE_BELOW:
            return nt
        if self.runs < CALIBRATION_RUNS or n * self.per_thread < SERIAL_BELOW_S:
            return 1
        return nt

    def run(self, entry, buf: bytes, n: int, threads: int) -> None:
        """Call the native ``entry`` on ``buf`` (packed for ``threads``), timing calibration runs."""
        if threads != 1 or self.runs >= CALIBRATION_RUNS or n >= CALIBRATE_BELOW:
            entry(buf)
            return
        t0 = time.perf_counter()
        entry(buf)
        per = (time.perf_counter() - t0) / n
        self.per_thread = per if self.runs == 0 else min(self.per_thread, per)
        self.runs += 1


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
