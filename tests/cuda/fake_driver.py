"""A stand-in for ``cuda.bindings.driver`` that needs no GPU, for testing xsim's CUDA code paths.

"Device memory" is host memory in separate allocations, checked on every access: a copy that
touches memory outside a live allocation, or a kernel argument pointing at host memory, fails the
test. ``cuModuleLoadData`` receives the real CUBIN that NVRTC built; a launch of
``<kernel>_cuda_forward``/``_backward`` runs the kernel's CPU build on the same packed argument
structures, so results can be checked with real numbers.
"""

from __future__ import annotations

import ctypes
import enum
import itertools

OK = 0


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class CUdevice_attribute(enum.IntEnum):  # cuda-python's name
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUstream_flags(enum.IntEnum):  # cuda-python's name
    CU_STREAM_DEFAULT = 0


class FakeDriver:
    """The driver calls xsim makes, with cuda-python's calling convention (a status first)."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUstream_flags = CUstream_flags

    def __init__(self, capability=(9, 0), count: int = 1):
        self.capability = capability
        self.count = count
        self.allocs: dict[int, tuple] = {}  # device address -> (backing buffer, size)
        self.streams: set[int] = set()
        self.images: dict[bytes, tuple] = {}       # CUBIN -> (module, debug), filled by the test's build hook
        self.loaded: dict[int, tuple] = {}         # module handle -> (xsim Module, CpuModule, CUBIN)
        self.launches: list[dict] = []
        self.fail_next_launch: CUresult | None = None
        self._handles = itertools.count(0x1000)

    # -- errors, devices, contexts ------------------------------------------------------------------

    def cuGetErrorName(self, err):
        return OK, CUresult(err).name.encode()

    def cuGetErrorString(self, err):
        return OK, b"fake driver error"

    def cuInit(self, flags):
        return (CUresult.CUDA_SUCCESS,)

    def cuDeviceGetCount(self):
        return OK, self.count

    def cuDeviceGet(self, ordinal):
        return (OK, ordinal) if ordinal < self.count else (CUresult.CUDA_ERROR_INVALID_VALUE, None)

    def cuDeviceGetAttribute(self, attr, dev):
        major = attr == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        return OK, self.capability[0] if major else self.capability[1]

    def cuDevicePrimaryCtxRetain(self, dev):
        return OK, 0x100 + dev

    def cuCtxSetCurrent(self, ctx):
        return (OK,)

    def cuCtxSynchronize(self):
        return (OK,)

    # -- streams -------------------------------------------------------------------------------------

    def cuStreamCreate(self, flags):
        h = next(self._handles)
        self.streams.add(h)
        return OK, h

    def cuStreamDestroy(self, h):
        self.streams.discard(h)
        return (OK,)

    def cuStreamSynchronize(self, h):
        assert h in self.streams, f"synchronize on unknown stream {h:#x}"
        return (OK,)

    # -- memory --------------------------------------------------------------------------------------

    def cuMemAlloc(self, nbytes):
        buf = ctypes.create_string_buffer(b"\xcd" * (nbytes + 256))  # garbage, as real fresh memory may hold
        addr = (ctypes.addressof(buf) + 255) // 256 * 256
        self.allocs[addr] = (buf, nbytes)
        return OK, addr

    def cuMemFree(self, ptr):
        assert ptr in self.allocs, f"free of unknown device pointer {ptr:#x}"
        del self.allocs[ptr]
        return (OK,)

    def is_device(self, ptr: int, nbytes: int = 1) -> bool:
        return any(base <= ptr and ptr + nbytes <= base + size for base, (_, size) in self.allocs.items())

    def _dev(self, ptr, nbytes):
        assert self.is_device(ptr, nbytes), f"{nbytes} bytes at {ptr:#x} are not inside a device allocation"

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        self._dev(dst, nbytes)
        assert not self.is_device(src), "HtoD copy from a device address"
        ctypes.memmove(dst, src, nbytes)
        return (OK,)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        if not self._is_error_global(src):
            self._dev(src, nbytes)
        ctypes.memmove(dst, src, nbytes)
        return (OK,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self._dev(dst, nbytes)
        self._dev(src, nbytes)
        ctypes.memmove(dst, src, nbytes)
        return (OK,)

    def cuMemsetD8Async(self, dst, value, nbytes, stream):
        if not self._is_error_global(dst):
            self._dev(dst, nbytes)
        ctypes.memset(dst, value, nbytes)
        return (OK,)

    # -- modules and launches ------------------------------------------------------------------------

    def cuModuleLoadData(self, image):
        assert image[:4] == b"\x7fELF", "cuModuleLoadData got something other than a CUBIN"
        from xsim.kernels import cpu
        module, debug = self.images[bytes(image)]
        h = next(self._handles)
        self.loaded[h] = (module, cpu.build(module, debug), bytes(image))
        return OK, h

    def cuModuleUnload(self, h):
        self.loaded.pop(h, None)
        return (OK,)

    def cuModuleGetFunction(self, h, name: bytes):
        name = name.decode()
        assert name.encode() in self.loaded[h][2], f"{name} is not in the CUBIN"
        return OK, (h, name)

    def cuModuleGetGlobal(self, h, name: bytes):
        from xsim.kernels.cpu import ErrorInfo
        err = ErrorInfo.in_dll(self.loaded[h][1].lib, name.decode())  # the CPU build's own report
        return OK, ctypes.addressof(err), ctypes.sizeof(err)

    def _is_error_global(self, ptr):
        from xsim.kernels.cpu import ErrorInfo
        return any(ptr == ctypes.addressof(ErrorInfo.in_dll(c.lib, "xs_error")) for _, c, _ in self.loaded.values())

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        if self.fail_next_launch is not None:
            err, self.fail_next_launch = self.fail_next_launch, None
            return (err,)
        h, name = func
        module, cpu_module, _ = self.loaded[h]
        key, which = name.removesuffix("_cuda_forward"), "forward"
        if name.endswith("_cuda_backward"):
            key, which = name.removesuffix("_cuda_backward"), "backward"
        nstructs = 2 if which == "forward" else 3  # (P, D) or (P, G, D), then n and contig
        ptrs = (ctypes.c_void_p * (nstructs + 2)).from_address(params)
        n = ctypes.c_int64.from_address(ptrs[nstructs]).value
        contig = ctypes.c_int.from_address(ptrs[nstructs + 1]).value
        kernel = next(k for k in module.kernels if k.symbol == key)
        self._check_array_args(kernel, [ptrs[i] for i in range(nstructs - 1)])
        self.launches.append({"kernel": kernel.key, "which": which, "grid": (gx, gy, gz),
                              "block": (bx, by, bz),
                              "n": n, "stream": stream})
        assert stream in self.streams, f"launch on unknown stream {stream:#x}"
        entry = (cpu_module.forward if which == "forward" else cpu_module.backward)[key]
        entry(self._cpu_launch_buffer(kernel, [ptrs[i] for i in range(nstructs)], n, contig))
        return (OK,)

    @staticmethod
    def _cpu_launch_buffer(kernel, ptrs, n, contig) -> bytes:
        """The CPU entry point's launch buffer (codegen._cpu_entry): launch dims, n, (threads, packed),
        the argument struct at byte 48, the gradient struct at the next 8-byte boundary."""
        from xsim.kernels.launch import _args_struct
        size = ctypes.sizeof(_args_struct(kernel))
        *structs, dims = ptrs
        buf = ctypes.string_at(dims, 32) + n.to_bytes(8, "little", signed=True)
        buf += (1).to_bytes(4, "little") + contig.to_bytes(4, "little") + ctypes.string_at(structs[0], size)
        if len(structs) == 2:
            buf += b"\0" * (-size % 8) + ctypes.string_at(structs[1], size)
        return buf

    def _check_array_args(self, kernel, struct_ptrs):
        """Every array a launch passes must live in device memory (or be absent: a null gradient)."""
        from xsim import types as T
        from xsim.kernels.launch import _args_struct
        args_type = _args_struct(kernel)
        for ptr in struct_ptrs:
            args = args_type.from_address(ptr)
            for name, t in kernel.params:
                if isinstance(t, T.ArrayType):
                    data = getattr(args, name).data
                    assert not data or self.is_device(data), f"kernel '{kernel.key}' got host memory for '{name}'"
