"""The arrays a solver's steps write: one pool for the particle and the rigid steppers of a ``SolverXPBD``.

Without gradients a step reuses scratch buffers from the steps before. With them (a recording Tape,
or a state/model that requires grad) a step never overwrites an array that a tape recorded: it takes
an array that no tape or caller references any more (the tape of an earlier rollout is gone) or a
new one, so a rollout on a fresh tape reuses the arrays of the last one instead of allocating them.
"""

from __future__ import annotations

import collections
import sys

from xsim.array import array, empty, intermediate, zeros


class BufferPool:
    """Arrays for the steps of one solver on ``device`` (see the module docstring). A key names what an
    array holds; keys ``c:...`` are per-contact arrays, whose row count changes from step to step."""

    def __init__(self, device):
        self.device = device
        self._scratch: dict = {}  # (key, shape, dtype) -> scratch buffers
        self._rings: dict = {}  # (key, shape, dtype) -> the arrays recorded rollouts used (``recorded``)

    def get(self, key: str, shape, dtype, grad: bool, zero: bool = False, avoid=()) -> array:
        """An array of ``shape`` (rows) and ``dtype`` for ``key``, zeroed where ``zero``. With gradients
        (``grad``): an accumulator (``zero``) or per-contact array is new (requiring grad unless it holds
        ints), any other comes from ``recorded``. Without: a scratch buffer that is none of ``avoid``
        (arrays still in use); a per-contact one has the next power of two rows, of which the step's
        kernels use the first ``shape``."""
        per_contact = key[:2] == "c:"
        if grad:
            if zero or per_contact:
                make = zeros if zero else empty
                return make(shape, dtype=dtype, device=self.device, requires_grad=dtype is not int)
            return self.recorded(key, shape, dtype)
        if per_contact:
            shape = 1 << max(shape - 1, 0).bit_length()
        pool = self._scratch.get((key, shape, dtype))
        if pool is None:
            pool = self._scratch[key, shape, dtype] = []
        for a in pool:
            for b in avoid:
                if a is b:
                    break
            else:
                break
        else:
            a = empty(shape, dtype=dtype, device=self.device)
            pool.append(a)
        if zero:
            a.zero_untracked()
        return a

    def recorded(self, key: str, shape, dtype) -> array:
        """An array no tape or caller references any more, else a new one; an intermediate
        (``xsim.array.intermediate``) unless it holds ints, written first: a launch writes every element
        the solver later reads."""
        ring = self._rings.setdefault((key, shape, dtype), collections.deque())
        for _ in range(min(2, len(ring))):  # the oldest first; two tries keep a busy ring O(1)
            a = ring[0]
            ring.rotate(-1)
            if sys.getrefcount(a) == 3:  # the ring, `a` and getrefcount's argument: nobody else
                a._grad = None  # its gradient is spent: pending (zeros) again
                return a
        a = empty(shape, dtype=dtype, device=self.device) if dtype is int else \
            intermediate(shape, dtype, self.device, written_first=True)
        ring.append(a)
        return a
