"""``ScopedTimer``: Warp's context manager that times a block (wall clock, milliseconds) and prints it."""

from __future__ import annotations

import builtins
import cProfile
import threading
import time
from collections.abc import Callable


class ScopedTimer:
    """Time the ``with`` block: ``elapsed`` holds its duration in ms; with ``print``, ``name took 1.23 ms``
    goes to stdout at exit, indented four spaces per enclosing printing timer; with ``dict``, the duration
    is appended to ``dict[name]``. Warp's signature: ``detailed`` runs cProfile over the block and prints its
    stats, ``use_nvtx`` opens an NVTX range (needs the ``nvtx`` package), ``synchronize`` waits for the
    device before and after. xsim records no per-activity CUDA timings: with ``cuda_filter`` the block is
    timed as without it and ``timing_results`` is empty. ``ScopedTimer.enabled = False`` turns every
    timer off."""

    _thread_local = threading.local()
    enabled = True

    def __init__(self, name: str, active: bool = True, print: bool = True, detailed: bool = False,
                 dict: dict[str, list[float]] | None = None, use_nvtx: bool = False, color: int | str = "rapids",
                 synchronize: bool = False, cuda_filter: int = 0,
                 report_func: Callable[[list, str], None] | None = None, skip_tape: bool = False):
        self.name = name
        self.active = active and self.enabled
        self.print = print
        self.detailed = detailed
        self.dict = dict
        self.use_nvtx = use_nvtx
        self.color = color
        self.synchronize = synchronize
        self.cuda_filter = cuda_filter
        self.report_func = report_func
        self.skip_tape = skip_tape
        self.elapsed = 0.0
        self.extra_msg = ""  # added to the printed line
        self.timing_results: list = []
        if dict is not None:
            dict.setdefault(name, [])

    @classmethod
    def _depth(cls) -> int:
        return getattr(cls._thread_local, "indent", -1)

    def __enter__(self):
        if not self.active:
            return self
        if self.synchronize:
            from .device import synchronize
            synchronize()
        if self.detailed:
            self._profile = cProfile.Profile()
            self._profile.enable()
        if self.use_nvtx:
            import nvtx
            self._nvtx = nvtx.start_range(self.name, color=self.color)
        if self.print:
            ScopedTimer._thread_local.indent = self._depth() + 1
        self._start = time.perf_counter_ns()
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self.active:
            return
        if self.synchronize:
            from .device import synchronize
            synchronize()
        self.elapsed = (time.perf_counter_ns() - self._start) / 1.0e6
        if self.use_nvtx:
            import nvtx
            nvtx.end_range(self._nvtx)
        if self.detailed:
            self._profile.disable()
            self._profile.print_stats(sort="tottime")
        if self.dict is not None:
            self.dict[self.name].append(self.elapsed)
        if self.print:
            indent = "    " * self._depth()
            line = f"{indent}{self.name} took {self.elapsed:.2f} ms"
            builtins.print(f"{line} {self.extra_msg}" if self.extra_msg else line)
            ScopedTimer._thread_local.indent = self._depth() - 1
