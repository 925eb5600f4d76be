"""Host-written rows that kernels read on a model's device, reused from step to step."""

from __future__ import annotations

import numpy as np

import xsim


class Uploads:
    """Buffers of host data (contact lists, carried slips) for kernels that read the first ``len(data)`` rows:
    on the CPU one buffer per key reused from step to step and written in place (rows of the next power of
    two, so a count that grows by one does not reallocate each step); on a GPU, or where ``fresh`` (a tape
    keeps the array it recorded), a new array."""

    def __init__(self, device):
        self.device = device
        self._buffers: dict = {}

    def put(self, key: str, data: np.ndarray, dtype, fresh: bool = False):
        """``data`` (rows) on the device, as the class docstring says."""
        if fresh or not self.device.is_cpu:
            return xsim.array(np.ascontiguousarray(data, dtype=np.int32 if dtype is int else None), dtype=dtype,
                              device=self.device)
        buf = self._buffers.get(key)
        if buf is None or buf.shape[0] < len(data):
            rows = 1 << max(len(data) - 1, 0).bit_length()
            buf = self._buffers[key] = xsim.empty((rows,) + data.shape[1:], dtype=dtype, device=self.device)
        buf.numpy()[:len(data)] = data  # on the CPU a view of the buffer
        return buf

    def buffer(self, key: str, n: int, dtype):
        """A reused device buffer of at least ``n`` rows (off the tape), its contents left as they were."""
        buf = self._buffers.get(("buffer", key))
        if buf is None or buf.shape[0] < n:
            buf = self._buffers[("buffer", key)] = xsim.empty(max(n, 1), dtype=dtype, device=self.device)
        return buf
