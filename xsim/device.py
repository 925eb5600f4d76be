"""Devices: ``"cpu"`` and ``"cuda:N"``, the current default device, and the seam to the CUDA runtime.

The CPU is always there. CUDA devices exist only when a CUDA runtime is present: the CUDA
backend provides it by replacing :func:`_cuda_runtime` (and filling in :func:`require_cuda`);
until then asking for ``"cuda:N"`` raises one clear ``RuntimeError``.
"""

from __future__ import annotations

import re
from typing import Protocol

_DEVICE_FORMS = '"cpu", "cuda" or "cuda:N" (N = GPU ordinal, e.g. "cuda:0")'
_CUDA_NAME = re.compile(r"cuda(?::(\d+))?")


class CudaRuntime(Protocol):
    """What the CUDA backend provides to this layer (returned by :func:`_cuda_runtime`)."""

    def device_count(self) -> int: ...

    def synchronize(self, ordinal: int) -> None: ...


class Device:
    """One compute device. Compare by name; ``get_device`` hands out one object per name."""

    __slots__ = ("name", "ordinal")

    def __init__(self, name: str, ordinal: int = -1):
        self.name = name
        self.ordinal = ordinal

    @property
    def is_cpu(self) -> bool:
        return self.ordinal < 0

    @property
    def is_cuda(self) -> bool:
        return self.ordinal >= 0

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                return _parse(other)[0] == self.name
            except ValueError:
                return False
        return isinstance(other, Device) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Device({self.name!r})"


_CPU = Device("cpu")
_devices: dict[str, Device] = {"cpu": _CPU}
_default: Device = _CPU


def _cuda_runtime() -> CudaRuntime | None:
    """The CUDA runtime, or None where xsim has no CUDA support (the CUDA backend replaces this)."""
    return None


def _parse(name: str) -> tuple[str, int]:
    """Canonical name and ordinal of a device string; ``"cuda"`` means ``"cuda:0"``."""
    if name == "cpu":
        return "cpu", -1
    m = _CUDA_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"unknown device {name!r}: expected {_DEVICE_FORMS}")
    ordinal = int(m.group(1) or 0)
    return f"cuda:{ordinal}", ordinal


def is_cuda_available() -> bool:
    """True when a CUDA runtime is loaded and sees at least one GPU."""
    runtime = _cuda_runtime()
    return runtime is not None and runtime.device_count() > 0


def require_cuda(device: Device) -> CudaRuntime:
    """The CUDA runtime able to run on ``device``, or a RuntimeError saying what is missing."""
    runtime = _cuda_runtime()
    if runtime is None:
        raise RuntimeError(
            f"device {device.name!r} needs CUDA, but this xsim has no CUDA runtime (no NVIDIA driver/GPU found): "
            "install an NVIDIA driver and `pip install cuda-python` on a machine with an NVIDIA GPU, "
            'or use device="cpu"')
    count = runtime.device_count()
    if device.ordinal >= count:
        raise RuntimeError(f"device {device.name!r} does not exist: this machine has {count} CUDA GPU(s)")
    return runtime


def get_device(name_or_device: str | Device | None = None) -> Device:
    """The device object for a name (``"cpu"``, ``"cuda:0"``) or the current default device for None."""
    if name_or_device is None:
        return _default
    if isinstance(name_or_device, Device):
        return name_or_device
    name, ordinal = _parse(name_or_device)
    dev = _devices.get(name)
    if dev is None:
        dev = Device(name, ordinal)
        require_cuda(dev)
        _devices[name] = dev
    return dev


def set_device(name: str | Device) -> None:
    """Make ``name`` the default device for arrays and launches that do not name one."""
    global _default
    _default = get_device(name)


def synchronize(device: str | Device | None = None) -> None:
    """Wait for the work queued on ``device`` to finish (CPU work is synchronous: nothing to wait for)."""
    dev = get_device(device)
    if dev.is_cuda:
        require_cuda(dev).synchronize(dev.ordinal)
