"""CUDA backend: NVRTC compiles a module's generated source to a CUBIN, the driver API loads and runs it.

Both go through cuda-python (``cuda.bindings.nvrtc``, ``cuda.bindings.driver``). The CUBIN is
built for the GPU's own compute capability, never PTX: PTX from an NVRTC newer than the installed
driver fails to load, SASS does not. Compiling needs no GPU (:func:`compile_cubin`), which is how the
test suite checks every kernel for sm_80 and sm_90 on machines without one (the library's largest modules
to PTX only, :func:`compile_ptx`, which is never loaded). Concurrent builds of one module in several
processes compile it once (``cache.build_lock``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import linecache
import re
import tempfile
from pathlib import Path

from ..device import CudaError, Device, get_stream, require_cuda
from ..errors import CompileError, XsimRuntimeError
from . import cache
from .cpu import ErrorInfo

NATIVE_DIR = Path(__file__).parent / "native"
BLOCK_SIZE = 256
_MAX_GRID = 2**31 - 1  # gridDim.x limit; the entry points loop over the rest (grid-stride)


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise RuntimeError("compiling CUDA kernels needs NVRTC from cuda-python, which is not installed: "
                           "`pip install cuda-python[all]` (or `pip install nvidia-cuda-nvrtc`)") from None
    return nvrtc


def _nvrtc_check(result, call: str):
    nvrtc = _nvrtc()
    err, rest = result[0], result[1:]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise RuntimeError(f"NVRTC call {call} failed: {text.decode() if isinstance(text, bytes) else text}")
    return rest


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library cuda-python loads."""
    major, minor = _nvrtc_check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def supported_archs() -> tuple[int, ...]:
    """The ``sm_XY`` architectures this NVRTC can generate SASS for, as XY numbers (75, 80, 90...)."""
    (archs,) = _nvrtc_check(_nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


def arch_for(capability: tuple[int, int]) -> int:
    """The SASS architecture to build for a GPU of compute ``capability``: its own, else the newest one
    of the same major version below it (SASS runs on later minor versions of one major)."""
    major, minor = capability
    own = major * 10 + minor
    candidates = [a for a in supported_archs() if a // 10 == major and a <= own]
    if not candidates:
        v = nvrtc_version()
        raise RuntimeError(f"NVRTC {v[0]}.{v[1]} cannot generate code for this GPU (compute capability "
                           f"{major}.{minor}; it supports sm_{', sm_'.join(map(str, supported_archs()))}): "
                           "install an NVRTC that supports it (`pip install -U nvidia-cuda-nvrtc`)")
    return max(candidates)


def options(arch: int, fast: bool = False, fuse_fp: bool = False, ptx: bool = False) -> list[str]:
    """NVRTC options for a module built for ``sm_<arch>`` (debug builds differ in their source only).
    ``fuse_fp``: the module option; off, a product and a sum round separately (``--fmad=false``), as on the CPU.

    ``fast``: skip most optimization (``--Ofast-compile=max``, NVRTC 12.8 on; 5-7x quicker): code that only
    checks that a module compiles, never code that runs. ``ptx``: stop at PTX for the virtual architecture
    ``compute_<arch>`` (the C++ front end and NVVM, without ptxas): see :func:`compile_ptx`."""
    target = f"compute_{arch}" if ptx else f"sm_{arch}"
    opts = ["-std=c++17", f"-I{NATIVE_DIR}", f"--gpu-architecture={target}", "-default-device", "-lineinfo",
            f"--fmad={'true' if fuse_fp else 'false'}"]
    return opts + ["--Ofast-compile=max"] if fast and nvrtc_version() >= (12, 8) else opts


def compile_cubin(source: str, arch: int | str, name: str = "module.cu", kernels: tuple = (), *,
                  fast: bool = False, fuse_fp: bool = False) -> bytes:
    """Compile CUDA C++ ``source`` to a CUBIN for ``arch`` (80, "sm_80" or "80"); needs no GPU.

    Raises :class:`xsim.CompileError` with NVRTC's log; ``kernels`` (xsim kernels whose code is in
    ``source``) lets the error name the Python kernel that the failing generated line belongs to.
    """
    return _compile(source, int(str(arch).removeprefix("sm_")), name, kernels, fast, fuse_fp, ptx=False)


def compile_ptx(source: str, arch: int, name: str = "module.cu", kernels: tuple = (), *,
                fast: bool = False, fuse_fp: bool = False) -> bytes:
    """Compile CUDA C++ ``source`` to PTX for the virtual architecture ``compute_<arch>``; needs no GPU.

    Everything :func:`compile_cubin` checks but ptxas: the C++ front end (where generated code goes wrong) and
    NVVM. Not for running (see the module docstring): it is how the test suite checks the library's largest
    kernels, whose ptxas pass takes minutes and gigabytes (the rigid contact kernels: over 150 s and 10 GB
    for the float64 module, against 10 s and 0.3 GB to PTX). Errors as :func:`compile_cubin`'s."""
    return _compile(source, arch, name, kernels, fast, fuse_fp, ptx=True)


def _compile(source: str, arch: int, name: str, kernels: tuple, fast: bool, fuse_fp: bool, *, ptx: bool) -> bytes:
    nvrtc = _nvrtc()
    (prog,) = _nvrtc_check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                           "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options(arch, fast, fuse_fp, ptx)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            (size,) = _nvrtc_check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            _nvrtc_check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise _compile_error(log.decode(errors="replace").rstrip("\x00 \n"), source, name, arch, kernels)
        if ptx:
            (size,) = _nvrtc_check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            out = b" " * size
            _nvrtc_check(nvrtc.nvrtcGetPTX(prog, out), "nvrtcGetPTX")
            return out.rstrip(b"\x00")
        (size,) = _nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _nvrtc_check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# A generated definition that opens a kernel's code: its argument struct, its bodies, its entry points.
_KERNEL_START = re.compile(r"^(?:struct (\w+)_args \{|XS_FUNC void (\w+)_(?:forward|backward)\(|"
                           r'extern "C" __global__ void (\w+)_cuda_(?:forward|backward)\()')


def kernel_at_line(source: str, line: int) -> str | None:
    """The name of the kernel whose generated code holds 1-based ``line`` of ``source``, or None."""
    lines = source.splitlines()
    for i in range(min(line, len(lines)) - 1, -1, -1):
        m = _KERNEL_START.match(lines[i])
        if m:
            return next(g for g in m.groups() if g)
    return None


def _compile_error(log: str, source: str, name: str, arch: int, kernels) -> CompileError:
    where = [int(n) for n in re.findall(re.escape(name) + r"\((\d+)\)", log)]
    by_name = {k.symbol: k for k in kernels}
    culprit = next((by_name[k] for k in (kernel_at_line(source, n) for n in where) if k in by_name), None)
    v = nvrtc_version()
    head = f"NVRTC {v[0]}.{v[1]} rejected the CUDA code generated"
    if culprit is None:
        return CompileError(f"{head} for sm_{arch} (this is a bug in xsim; please report it with this log):\n"
                            f"{log[-6000:]}")
    code = culprit.pyfunc.__code__
    file, line = code.co_filename, code.co_firstlineno
    return CompileError(f"{head} for kernel '{culprit.key}' for sm_{arch} (this is a bug in xsim; please report "
                        f"it with this log):\n{log[-6000:]}\nkernel defined here", file, line, 0,
                        linecache.getline(file, line))


# -- build and cache -----------------------------------------------------------------------------------


def target_id(arch: int, fast: bool = False, fuse_fp: bool = False, ptx: bool = False) -> str:
    """What a CUBIN (or PTX) depends on besides the source: NVRTC version, architecture, options."""
    v = nvrtc_version()
    return f"cuda|nvrtc{v[0]}.{v[1]}|sm_{arch}|{' '.join(options(arch, fast, fuse_fp, ptx))}"


def _entry_key(module, debug: bool, arch: int, fast: bool, ptx: bool = False) -> str:
    return cache.entry_key(module.name, module.content_hash(), target_id(arch, fast, module.fuse_fp(), ptx),
                           debug)


def entry_key(module, debug: bool, arch: int, *, fast: bool = False, ptx: bool = False) -> str:
    """The cache key of ``module``'s CUBIN for ``sm_<arch>`` (or, with ``ptx``, its PTX for ``compute_<arch>``)."""
    return _entry_key(module, debug, arch, fast, ptx)


def cached_cubin(module, debug: bool, arch: int, *, fast: bool = False) -> tuple[Path, dict] | None:
    """The cached CUBIN of ``module`` for ``sm_<arch>`` (``fast``: see :func:`options`) and its kernels'
    metadata, or None."""
    from .module import KernelMeta
    found = cache.lookup(_entry_key(module, debug, arch, fast), ".cubin")
    if found is None:
        return None
    path, meta = found
    try:
        metas = {k: KernelMeta(**m) for k, m in meta["kernels"].items()}
    except (TypeError, KeyError, AttributeError):
        return None
    return (path, metas) if set(metas) == module.symbols() else None


def store_cubin(module, debug: bool, arch: int, cubin: bytes, metas: dict, *, fast: bool = False) -> Path:
    """Put a CUBIN built from ``module.generate("cuda", debug)`` into the cache; returns its path."""
    return _store(_entry_key(module, debug, arch, fast), ".cubin", cubin,
                  {"kernels": {k: vars(m) for k, m in metas.items()}})


def _store(key: str, suffix: str, data: bytes, meta: dict) -> Path:
    cache.remove_stale_builds()
    with tempfile.TemporaryDirectory(dir=cache.cache_dir(), prefix="build-") as tmp:
        tmp_path = Path(tmp) / f"module{suffix}"
        tmp_path.write_bytes(data)
        return cache.store(key, suffix, tmp_path, meta)


def build_entry(key: str, source: str, arch: int, name: str, meta: dict, *, ptx: bool = False, fast: bool = False,
                fuse_fp: bool = False, kernels: tuple = ()) -> Path:
    """The cache entry ``key``: ``source`` built to a CUBIN for ``sm_<arch>`` (``ptx``: to PTX for
    ``compute_<arch>``), compiled and stored with ``meta`` on a miss. The compile holds the entry's build
    lock (``cache.build_lock``), so processes that miss at once compile it once. Plain values only, so that
    a worker process can build what its parent generated."""
    suffix = ".ptx" if ptx else ".cubin"
    found = cache.lookup(key, suffix)
    if found is not None:
        return found[0]
    with cache.build_lock(key):
        found = cache.lookup(key, suffix)
        if found is not None:
            return found[0]
        data = _compile(source, arch, name, kernels, fast, fuse_fp, ptx=ptx)
        return _store(key, suffix, data, meta)


def source_name(module) -> str:
    """The file name NVRTC reports errors under for ``module``."""
    return ("".join(c if c.isalnum() else "_" for c in module.name)[-48:] or "module") + ".cu"


def build_cubin(module, debug: bool, arch: int, *, fast: bool = False) -> tuple[Path, dict]:
    """The cached CUBIN of ``module`` for ``sm_<arch>`` and its kernels' metadata (built on a miss)."""
    found = cached_cubin(module, debug, arch, fast=fast)
    if found is not None:
        return found
    with cache.build_lock(_entry_key(module, debug, arch, fast)):
        found = cached_cubin(module, debug, arch, fast=fast)  # built by another process while this one waited
        if found is not None:
            return found
        source, metas = module.generate("cuda", debug)
        cubin = compile_cubin(source, arch, source_name(module), tuple(module.kernels), fast=fast,
                              fuse_fp=module.fuse_fp())
        return store_cubin(module, debug, arch, cubin, metas, fast=fast), metas


def build_ptx(module, debug: bool, arch: int, *, fast: bool = False) -> Path:
    """The cached PTX of ``module`` for ``compute_<arch>`` (:func:`compile_ptx`), built on a miss."""
    key = _entry_key(module, debug, arch, fast, ptx=True)
    found = cache.lookup(key, ".ptx")
    if found is not None:
        return found[0]
    source, _metas = module.generate("cuda", debug)
    return build_entry(key, source, arch, source_name(module), {}, ptx=True, fast=fast, fuse_fp=module.fuse_fp(),
                       kernels=tuple(module.kernels))


def build(module, debug: bool, device: Device) -> CudaModule:
    """Load ``module`` onto ``device``: a cached CUBIN for its compute capability, or a fresh NVRTC build."""
    runtime = require_cuda(device)
    arch = arch_for(runtime.compute_capability(device.ordinal))
    path, metas = build_cubin(module, debug, arch)
    return CudaModule(path.read_bytes(), metas, device)


# -- loaded modules and launches --------------------------------------------------------------------------


class CudaModule:
    """A CUBIN loaded on one GPU: the forward and backward entry point of each kernel, and ``xs_error``."""

    def __init__(self, cubin: bytes, metas: dict, device: Device):
        self.device = device
        self.metas = metas
        self._rt = require_cuda(device)
        drv, check = self._rt.drv, self._rt.check
        self._rt.activate(device.ordinal)
        (self.handle,) = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData", device.ordinal)
        self.forward, self.backward = {}, {}
        for name, meta in metas.items():
            if meta.refused is not None:
                continue
            (self.forward[name],) = check(drv.cuModuleGetFunction(self.handle, f"{name}_cuda_forward".encode()),
                                          "cuModuleGetFunction", device.ordinal)
            if meta.adjoint_error is None:
                (self.backward[name],) = check(
                    drv.cuModuleGetFunction(self.handle, f"{name}_cuda_backward".encode()),
                    "cuModuleGetFunction", device.ordinal)
        self._error_ptr, _ = check(drv.cuModuleGetGlobal(self.handle, b"xs_error"), "cuModuleGetGlobal",
                                   device.ordinal)

    def launch_forward(self, key: str, args, dims, n: int, contig: bool) -> None:
        """Run kernel ``key`` over ``n`` threads on the device's current stream."""
        self._launch(key, "forward", self.forward[key], (args, dims), n, contig)

    def launch_backward(self, key: str, args, grads, dims, n: int, contig: bool) -> None:
        """Run the adjoint of kernel ``key`` over ``n`` threads on the device's current stream."""
        self._launch(key, "backward", self.backward[key], (args, grads, dims), n, contig)

    def _launch(self, key: str, which: str, func, structs, n: int, contig: bool) -> None:
        # Each kernel parameter is passed as a pointer to its value: the packed ctypes structures,
        # whose layout is the one the generated C++ declares (the same as the CPU build's).
        n_c, contig_c = ctypes.c_int64(n), ctypes.c_int(int(contig))
        values = [ctypes.addressof(s) for s in structs] + [ctypes.addressof(n_c), ctypes.addressof(contig_c)]
        params = (ctypes.c_void_p * len(values))(*values)
        grid = max(1, (n + BLOCK_SIZE - 1) // BLOCK_SIZE)
        if grid > _MAX_GRID:
            if not self.metas[key].grid_stride:  # one index per thread: the grid must cover the launch
                raise ValueError(f"kernel '{self.metas[key].name}' has grid_stride=False, so a launch of {n} threads "
                                 f"needs {grid} blocks, more than CUDA's {_MAX_GRID}; declare it with "
                                 "grid_stride=True to launch it over this many")
            grid = _MAX_GRID
        ordinal = self.device.ordinal
        stream = get_stream(self.device).handle
        self._rt.activate(ordinal)
        try:
            self._rt.check(self._rt.drv.cuLaunchKernel(func, grid, 1, 1, BLOCK_SIZE, 1, 1, 0, stream,
                                                       ctypes.addressof(params), 0), "cuLaunchKernel", ordinal)
        except CudaError as e:
            name = self.metas[key].name
            raise XsimRuntimeError(f"kernel '{name}' ({which}, {n} threads) could not be launched on "
                                   f"{self.device.name}: {e}") from None
        self._rt.last_kernel[ordinal] = self.metas[key].name

    @property
    def error(self) -> ErrorInfo:
        """The bounds-check report of the launches since the last read (waits for the current stream).

        A report is cleared on the device as it is read, so the next launch starts clean."""
        info = ErrorInfo()
        ordinal = self.device.ordinal
        stream = get_stream(self.device).handle
        self._rt.activate(ordinal)
        drv, check = self._rt.drv, self._rt.check
        check(drv.cuMemcpyDtoHAsync(ctypes.addressof(info), self._error_ptr, ctypes.sizeof(info), stream),
              "cuMemcpyDtoHAsync", ordinal)
        check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize", ordinal)
        if info.code:
            check(drv.cuMemsetD8Async(self._error_ptr, 0, ctypes.sizeof(info), stream), "cuMemsetD8Async", ordinal)
        return info

    def __del__(self):
        with contextlib.suppress(Exception):  # interpreter shutdown or a dead context
            self._rt.activate(self.device.ordinal)
            self._rt.drv.cuModuleUnload(self.handle)
