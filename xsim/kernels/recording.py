"""Which recorders (Tapes) are listening, per thread.

A launch or a tape-aware array op is recorded on the innermost active recorder of the thread
that runs it, never on one another thread opened: two threads each recording their own rollout
do not see each other's launches. The Tape (autodiff layer) pushes itself here while recording;
the launch path, the array ops, checkpointing and the solver only ask.
"""

from __future__ import annotations

import contextlib
import threading


class _ThreadRecorders(threading.local):
    def __init__(self):
        self.stack: list = []  # innermost last


_local = _ThreadRecorders()


def stack() -> list:
    """This thread's active recorders, innermost last (a copy: ``push``/``pop`` change them)."""
    return list(_local.stack)


def current():
    """The innermost active recorder of this thread, or None."""
    s = _local.stack
    return s[-1] if s else None


def is_recording() -> bool:
    """True when a recorder is active in this thread."""
    return bool(_local.stack)


def push(recorder) -> None:
    """Make ``recorder`` this thread's innermost recorder."""
    _local.stack.append(recorder)


def pop(recorder) -> None:
    """Stop ``recorder`` recording in this thread (it need not be the innermost)."""
    _local.stack.remove(recorder)


@contextlib.contextmanager
def suspended():
    """Within this block nothing this thread launches is recorded on any of its recorders."""
    saved = _local.stack
    _local.stack = []
    try:
        yield
    finally:
        _local.stack = saved
