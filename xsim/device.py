"""Devices: ``"cpu"`` and ``"cuda:N"``, the current default device, streams, and the CUDA driver.

The CPU is always there. CUDA devices exist when cuda-python can load the NVIDIA driver and the
driver sees a GPU; :func:`_cuda_runtime` starts the driver once, on first use, and otherwise
remembers why it could not, so that asking for ``"cuda:N"`` raises one sentence saying what is
missing. Everything xsim does on a GPU goes through :class:`CudaDriver` (contexts, streams,
memory); the kernel side (NVRTC, module loading, launches) lives in ``xsim/kernels/cuda.py``.
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Any

_DEVICE_FORMS = '"cpu", "cuda" or "cuda:N" (N = GPU ordinal, e.g. "cuda:0")'
_CUDA_NAME = re.compile(r"cuda(?::(\d+))?")


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

    @property
    def alias(self) -> str:
        """Warp's name for the device (``"cpu"``, ``"cuda:0"``)."""
        return self.name

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


# -- the CUDA driver -------------------------------------------------------------------------------

# Errors after which the context is unusable: a kernel faulted. Named with the last kernel launched,
# because they surface at the next synchronising call, not at the launch that caused them.
_STICKY = {"CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED_ADDRESS",
           "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT",
           "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_INVALID_PC"}


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and, for kernel faults, the kernel."""


class CudaDriver:
    """The driver API as xsim uses it: one primary context per GPU, streams, device memory.

    ``drv`` is ``cuda.bindings.driver`` (tests pass a stand-in). Calls make the device's primary
    context current first, so xsim works beside other libraries that switch contexts (torch).
    """

    def __init__(self, drv):
        self.drv = drv
        self.count = int(self.check(drv.cuDeviceGetCount(), "cuDeviceGetCount")[0])
        self._ctx: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.last_kernel: dict[int, str] = {}  # ordinal -> name of the last kernel launched there

    def check(self, result, call: str, ordinal: int = -1) -> tuple:
        """The values a cuda-python call returned after its status; CudaError when the status is not success."""
        err, rest = result[0], tuple(result[1:])
        if int(err) != 0:
            _, name = self.drv.cuGetErrorName(err)
            _, text = self.drv.cuGetErrorString(err)
            name = name.decode() if isinstance(name, bytes) else str(name)
            text = text.decode() if isinstance(text, bytes) else str(text)
            msg = f"CUDA call {call} failed: {name} ({text})"
            if name in _STICKY and ordinal in self.last_kernel:
                msg += (f"; the last kernel launched on cuda:{ordinal} was '{self.last_kernel[ordinal]}' "
                        "(run in xsim.config.mode = 'debug' to check its array indices)")
            raise CudaError(msg)
        return rest

    def activate(self, ordinal: int):
        """Make the primary context of GPU ``ordinal`` current on this thread (retained once); returns it."""
        ctx = self._ctx.get(ordinal)
        if ctx is None:
            with self._lock:
                ctx = self._ctx.get(ordinal)
                if ctx is None:
                    (dev,) = self.check(self.drv.cuDeviceGet(ordinal), "cuDeviceGet")
                    (ctx,) = self.check(self.drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                    self._ctx[ordinal] = ctx
        self.check(self.drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", ordinal)
        return ctx

    def device_count(self) -> int:
        return self.count

    def synchronize(self, ordinal: int) -> None:
        self.activate(ordinal)
        self.check(self.drv.cuCtxSynchronize(), "cuCtxSynchronize", ordinal)

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        """(major, minor) of GPU ``ordinal``, e.g. (9, 0) for an H100."""
        (dev,) = self.check(self.drv.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = self.drv.CUdevice_attribute
        major = self.check(self.drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                           "cuDeviceGetAttribute")[0]
        minor = self.check(self.drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                           "cuDeviceGetAttribute")[0]
        return int(major), int(minor)

    # -- streams ---------------------------------------------------------------------------------

    def stream_create(self, ordinal: int) -> int:
        self.activate(ordinal)
        (s,) = self.check(self.drv.cuStreamCreate(self.drv.CUstream_flags.CU_STREAM_DEFAULT.value),
                          "cuStreamCreate", ordinal)
        return int(s)

    def stream_destroy(self, ordinal: int, handle: int) -> None:
        self.activate(ordinal)
        self.check(self.drv.cuStreamDestroy(handle), "cuStreamDestroy", ordinal)

    def stream_synchronize(self, ordinal: int, handle: int) -> None:
        self.activate(ordinal)
        self.check(self.drv.cuStreamSynchronize(handle), "cuStreamSynchronize", ordinal)

    # -- memory: plain device allocations; copies are ordered on the device's current stream ------

    def alloc(self, ordinal: int, nbytes: int) -> int:
        self.activate(ordinal)
        try:
            (ptr,) = self.check(self.drv.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc", ordinal)
        except CudaError as e:
            raise MemoryError(f"cannot allocate {nbytes} bytes on cuda:{ordinal}: {e}") from None
        return int(ptr)

    def free(self, ordinal: int, ptr: int) -> None:
        self.activate(ordinal)
        self.check(self.drv.cuMemFree(ptr), "cuMemFree", ordinal)

    def upload(self, ordinal: int, dst: int, src_host: int, nbytes: int) -> None:
        """Copy ``nbytes`` from host address ``src_host`` to device address ``dst``."""
        if nbytes:
            stream = get_stream(_cuda_device(ordinal)).handle
            self.activate(ordinal)
            # From pageable memory the driver stages the bytes before returning: the source may go away.
            self.check(self.drv.cuMemcpyHtoDAsync(dst, src_host, nbytes, stream), "cuMemcpyHtoDAsync", ordinal)

    def download(self, ordinal: int, dst_host: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from device address ``src`` to host address ``dst_host``; waits for them to arrive."""
        if nbytes:
            stream = get_stream(_cuda_device(ordinal)).handle
            self.activate(ordinal)
            self.check(self.drv.cuMemcpyDtoHAsync(dst_host, src, nbytes, stream), "cuMemcpyDtoHAsync", ordinal)
            self.check(self.drv.cuStreamSynchronize(stream), "cuStreamSynchronize", ordinal)

    def copy(self, dst_ordinal: int, dst: int, src_ordinal: int, src: int, nbytes: int) -> None:
        """Device-to-device copy, ordered on the destination device's current stream."""
        if not nbytes:
            return
        stream = get_stream(_cuda_device(dst_ordinal)).handle
        if dst_ordinal == src_ordinal:
            self.activate(dst_ordinal)
            self.check(self.drv.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "cuMemcpyDtoDAsync", dst_ordinal)
        else:
            src_ctx = self.activate(src_ordinal)
            dst_ctx = self.activate(dst_ordinal)
            self.check(self.drv.cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, nbytes, stream),
                       "cuMemcpyPeerAsync", dst_ordinal)

    def memset_zero(self, ordinal: int, dst: int, nbytes: int) -> None:
        if nbytes:
            stream = get_stream(_cuda_device(ordinal)).handle
            self.activate(ordinal)
            self.check(self.drv.cuMemsetD8Async(dst, 0, nbytes, stream), "cuMemsetD8Async", ordinal)


class DeviceBuffer:
    """One device allocation, freed when the last array (or view) holding it is collected."""

    __slots__ = ("_runtime", "device", "nbytes", "ptr")

    def __init__(self, device: Device, nbytes: int):
        self._runtime = require_cuda(device)
        self.device = device
        self.nbytes = nbytes
        self.ptr = self._runtime.alloc(device.ordinal, nbytes)

    def __del__(self):
        # at interpreter shutdown or after a dead context there is nothing left to free
        with contextlib.suppress(Exception):
            self._runtime.free(self.device.ordinal, self.ptr)


# -- finding the driver ----------------------------------------------------------------------------

_CUDA_INSTALL = ("install the NVIDIA driver on a machine with an NVIDIA GPU and `pip install cuda-python`, "
                 'or use device="cpu"')
_runtime_state: tuple[CudaDriver | None, str] | None = None


def _load_cuda() -> tuple[CudaDriver | None, str]:
    """The started driver, or None and what is missing (half a sentence)."""
    try:
        from cuda.bindings import driver as drv
    except ImportError:
        return None, "the cuda-python package is not installed"
    return _start_driver(drv)


def _start_driver(drv) -> tuple[CudaDriver | None, str]:
    """``cuInit`` and a GPU count through ``drv`` (cuda-python's driver module, or a test's stand-in)."""
    try:
        (err,) = drv.cuInit(0)
    except Exception:  # noqa: BLE001 - cuda-python raises its own loader errors when libcuda.so is absent
        return None, "no NVIDIA driver was found on this machine (libcuda.so could not be loaded)"
    if err == drv.CUresult.CUDA_ERROR_NO_DEVICE:
        return None, "the NVIDIA driver found no CUDA GPU on this machine"
    if int(err) != 0:
        return None, f"the NVIDIA driver failed to start ({getattr(err, 'name', err)})"
    try:
        runtime = CudaDriver(drv)
    except CudaError as e:
        return None, f"the NVIDIA driver could not count the GPUs ({e})"
    if runtime.count == 0:
        return None, "the NVIDIA driver found no CUDA GPU on this machine"
    return runtime, ""


def _cuda_runtime() -> CudaDriver | None:
    """The CUDA driver, started on first use, or None where this machine cannot run CUDA."""
    global _runtime_state
    if _runtime_state is None:
        _runtime_state = _load_cuda()
    return _runtime_state[0]


def cuda_unavailable_reason() -> str:
    """Why CUDA cannot be used here ("" when it can)."""
    _cuda_runtime()
    return _runtime_state[1]


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
    """True when the NVIDIA driver is loaded and sees at least one GPU (never raises)."""
    return _cuda_runtime() is not None


def require_cuda(device: Device) -> CudaDriver:
    """The CUDA driver able to run on ``device``, or a RuntimeError saying in one sentence what is missing."""
    runtime = _cuda_runtime()
    if runtime is None:
        raise RuntimeError(f"device {device.name!r} needs CUDA, but {_runtime_state[1]}: {_CUDA_INSTALL}.")
    count = runtime.device_count()
    if device.ordinal >= count:
        raise RuntimeError(f"device {device.name!r} does not exist: this machine has {count} CUDA GPU(s), "
                           f"cuda:0 to cuda:{count - 1}.")
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


def _cuda_device(ordinal: int) -> Device:
    return get_device(f"cuda:{ordinal}")


def set_device(name: str | Device) -> None:
    """Make ``name`` the default device for arrays and launches that do not name one."""
    global _default
    _default = get_device(name)


def synchronize(device: str | Device | None = None) -> None:
    """Wait for the work queued on ``device`` (default: every GPU in use) to finish; CPU work is synchronous."""
    if device is None and _default.is_cpu:
        # only GPUs xsim has used can have queued work: never start the driver just to wait on nothing
        runtime = _runtime_state[0] if _runtime_state is not None else None
        for ordinal in sorted(runtime._ctx) if runtime is not None else ():
            runtime.synchronize(ordinal)
        return
    dev = get_device(device)
    if dev.is_cuda:
        require_cuda(dev).synchronize(dev.ordinal)


def synchronize_device(device: str | Device | None = None) -> None:
    """Wait for the work queued on ``device`` (default: the current default device) to finish."""
    dev = get_device(device)
    if dev.is_cuda:
        require_cuda(dev).synchronize(dev.ordinal)


def get_cuda_device_count() -> int:
    """The number of CUDA GPUs the driver sees (0 without a driver or GPU)."""
    runtime = _cuda_runtime()
    return runtime.device_count() if runtime is not None else 0


def get_devices() -> list[Device]:
    """Every device xsim can use: the CPU, then each CUDA GPU."""
    return [get_device("cpu")] + [_cuda_device(i) for i in range(get_cuda_device_count())]


def get_cuda_device(ordinal: int | None = None) -> Device:
    """CUDA GPU ``ordinal`` (default: the default device if it is a GPU, else cuda:0); a RuntimeError
    says what is missing where there is none."""
    if ordinal is None:
        ordinal = _default.ordinal if _default.is_cuda else 0
    dev = Device(f"cuda:{ordinal}", ordinal)
    require_cuda(dev)
    return _cuda_device(ordinal)


def get_cuda_devices() -> list[Device]:
    """Every CUDA GPU xsim can use."""
    return [_cuda_device(i) for i in range(get_cuda_device_count())]


def get_preferred_device() -> Device:
    """The first CUDA GPU where there is one, else the CPU."""
    return _cuda_device(0) if is_cuda_available() else get_device("cpu")


def is_cpu_available() -> bool:
    """Always True: the CPU backend needs only a C++ compiler (missing one is reported at compile time)."""
    return True


def init() -> None:
    """Start the CUDA driver now rather than on first use (xsim otherwise initializes lazily)."""
    _cuda_runtime()


class ScopedDevice:
    """``with ScopedDevice("cuda:0"):`` makes a device the default for the block (None: keep it)."""

    def __init__(self, device: str | Device | None):
        self.device = get_device(device)
        self._saved: Device | None = None

    def __enter__(self) -> Device:
        self._saved = get_device()
        set_device(self.device)
        return self.device

    def __exit__(self, *exc) -> bool:
        set_device(self._saved)
        return False


# -- streams -----------------------------------------------------------------------------------------


class Stream:
    """A CUDA stream: launches and copies on one stream run in order; different streams may overlap.

    Each GPU has a default stream (``get_stream("cuda:0")``), made on first use; ``set_stream`` or
    ``with ScopedStream(s):`` makes another one current, and ``launch(..., stream=s)`` uses one for
    a single launch.
    """

    def __init__(self, device: str | Device | None = None, cuda_stream: int | None = None):
        """A new stream on ``device``, or (``cuda_stream``: a raw ``CUstream`` handle another library made, as in
        Warp) that stream, which stays its owner's: xsim never destroys it."""
        dev = get_device(device)
        if not dev.is_cuda:
            raise ValueError(f"streams belong to CUDA devices, got device {dev.name!r}")
        self._runtime = require_cuda(dev)
        self.device = dev
        self._owned = cuda_stream is None
        self.handle: int = self._runtime.stream_create(dev.ordinal) if self._owned else int(cuda_stream)

    @property
    def cuda_stream(self) -> int:
        """The raw ``CUstream`` handle (an int), for other CUDA libraries."""
        return self.handle

    def synchronize(self) -> None:
        """Wait until everything queued on this stream has finished."""
        self._runtime.stream_synchronize(self.device.ordinal, self.handle)

    def __repr__(self) -> str:
        return f"Stream(device={self.device.name!r}, handle={self.handle:#x})"

    def __del__(self):
        if not getattr(self, "_owned", False):
            return
        with contextlib.suppress(Exception):  # interpreter shutdown or a dead context
            self._runtime.stream_destroy(self.device.ordinal, self.handle)


_current_streams: dict[str, Stream] = {}
_default_streams: dict[str, Stream] = {}


def get_stream(device: str | Device | None = None) -> Stream:
    """The current stream of a CUDA device (its default stream unless ``set_stream`` chose another)."""
    dev = get_device(device)
    if not dev.is_cuda:
        raise ValueError(f"streams belong to CUDA devices, got device {dev.name!r}")
    s = _current_streams.get(dev.name)
    if s is None:
        s = _default_streams[dev.name] = _current_streams[dev.name] = Stream(dev)
    return s


def set_stream(stream: Stream) -> None:
    """Make ``stream`` the current stream of its device."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream() needs an xsim.Stream, got {type(stream).__name__}")
    _current_streams[stream.device.name] = stream


class ScopedStream:
    """``with ScopedStream(s):`` runs the block with ``s`` as its device's current stream."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self._saved: Stream | None = None

    def __enter__(self) -> Stream | None:
        if self.stream is not None:
            self._saved = get_stream(self.stream.device)
            set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc) -> bool:
        if self.stream is not None:
            set_stream(self._saved)
        return False

