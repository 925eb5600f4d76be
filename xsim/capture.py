"""Warp's graph capture: ``ScopedCapture``, ``capture_begin``/``capture_end``, ``capture_launch``, ``Graph``.

While a thread captures, the launches and array operations it issues (``launch``, ``launch_tiled``, ``copy``,
``assign``, ``fill_``, ``zero_``, and the fill of an array ``zeros``/``ones``/``full`` create) are checked and
recorded in order instead of run; ``capture_launch(graph)`` runs them again, each time, with the arrays and
values they were given. This is what Warp 1.19 does on the CPU (on CUDA it builds a CUDA graph): an array
created inside the capture is allocated at once and refilled by every replay. xsim replays through the
ordinary launch path on every device, so a graph saves no launch overhead here; it keeps Warp programs that
capture working. A Tape cannot record inside a capture (its backward pass would need values the capture has
not computed): ``launch`` refuses that with an error saying so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Self

# (thread ident, graph) of each open capture: launch tests this list before anything else
OPEN: list[tuple[int, Graph]] = []


class Graph:
    """A captured sequence of operations on ``device``, replayed in order by ``capture_launch``."""

    def __init__(self, device=None):
        self.device = device
        self.ops: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self.ops)


def capturing() -> Graph | None:
    """The graph this thread is capturing into, or None."""
    if not OPEN:
        return None
    ident = threading.get_ident()
    for t, g in reversed(OPEN):
        if t == ident:
            return g
    return None


def defer(op: Callable[[], None]) -> bool:
    """Append ``op`` to this thread's open capture and return True, or return False (run it now)."""
    g = capturing()
    if g is None:
        return False
    g.ops.append(op)
    return True


def capture_begin(device=None, stream=None, force_module_load: bool | None = None, external: bool = False,
                  apic: bool = False, capture_mode=None) -> None:
    """Start capturing this thread's operations into a new graph (Warp's signature; ``stream``,
    ``force_module_load``, ``external``, ``apic`` and ``capture_mode`` change nothing here)."""
    if external:
        raise ValueError("capture_begin(external=True) continues a CUDA graph capture begun outside Warp; xsim "
                         "has none to continue")
    OPEN.append((threading.get_ident(), Graph(device)))


def capture_end(device=None, stream=None) -> Graph:
    """End this thread's innermost capture and return its graph."""
    ident = threading.get_ident()
    for k in range(len(OPEN) - 1, -1, -1):
        if OPEN[k][0] == ident:
            return OPEN.pop(k)[1]
    raise RuntimeError("capture_end(): no capture is open on this thread (call capture_begin first)")


def is_capture_active(device=None, stream=None) -> bool:
    """Whether this thread is capturing."""
    return capturing() is not None


def capture_launch(graph: Graph, stream=None) -> None:
    """Run the operations ``graph`` captured, in order (inside another capture: recorded there as one step)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"capture_launch() takes the graph of a capture (ScopedCapture().graph), got {graph!r}")
    if defer(lambda: capture_launch(graph)):
        return
    for op in graph.ops:
        op()


class ScopedCapture:
    """``with ScopedCapture() as capture: ...`` captures the block's operations into ``capture.graph``."""

    def __init__(self, device=None, stream=None, force_module_load: bool | None = None, external: bool = False,
                 apic: bool = False, capture_mode=None):
        self.device, self.stream = device, stream
        self.options = {"force_module_load": force_module_load, "external": external, "apic": apic,
                        "capture_mode": capture_mode}
        self.graph: Graph | None = None
        self.active = False

    def __enter__(self) -> Self:
        capture_begin(self.device, self.stream, **self.options)
        self.active = True
        return self

    def __exit__(self, *exc) -> bool:
        self.graph = capture_end(self.device, self.stream)
        self.active = False
        return False
