"""CPU backend: the system C++ compiler at -O3 with OpenMP, loaded with ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from pathlib import Path

from ..errors import CompileError
from . import cache

# No loop distribution: g++ 12.2 at -O3 miscompiles adjoint loops that read a gradient, zero it
# and add it elsewhere once it has unswitched them on `if (G.x.data)` (the added gradient comes
# out 0); tests/autodiff/test_fuzz_gradients.py::test_gradient_read_then_zeroed_in_unswitched_loop.
# -fwrapv: integer arithmetic wraps at its width (as in Warp and numpy), it is not undefined behaviour
# the optimizer may assume away.
# -ffp-contract=off: a product and a sum are two roundings, as the kernel wrote them. By default g++
# fuses them into one FMA (-ffp-contract=fast; -march=native gives an FMA host the instruction) wherever
# its optimizer happens to find the two side by side, so float results hung on how a kernel's C++ was
# arranged: once four arrays became one struct argument (issue 20), g++ vectorized measure_contacts'
# x and y lanes of the contact geometry it stores (SLP, 2 floats wide) and fused other products (601
# FMAs against 643): from the same inputs a contact point came out 1 ulp apart (frame 11 of the float32
# box pyramid), and the boxes' poses from frame 13 (tests/kernels/test_fp_contract.py, bench/rigid_bits.py).
FLAGS = ["-O3", "-std=c++20", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-march=native", "-fwrapv",
         "-ffp-contract=off", "-fno-tree-loop-distribution", "-fno-tree-loop-distribute-patterns",
         "-fvisibility=hidden", "-w"]

# A module with more kernel code than this (characters of C++) compiles as several translation units,
# in parallel. Each unit parses the native headers again, about 0.6 s of CPU: xsim's 590 kB gradient
# test module took 14.6 s CPU as one unit, 16.2 s as three and 18.9 s as seven. So only modules far
# bigger than xsim's own split (Warp's library test files reach 1.4 MB), and only where cores are free.
PART_CHARS = 400_000

# OpenMP threads wait for the next launch passively (asleep in the kernel), not spinning. A spinning
# worker holds a core that another process (or xsim's own main thread) needs; on a machine with any
# other load every parallel launch then waits for descheduled threads: the 64x64 cloth fell to
# 0.2-0.6x Newton's single thread with libgomp's spin of 20000, while passive waiting kept it above
# xsim's own single-thread speed, quiet or busy (bench/README.md). The wake-up this costs is only paid
# by launches worth it: threads.py keeps small ones serial. libgomp and LLVM's libomp read this when
# the first kernel module loads; a value the user set (or GOMP_SPINCOUNT) wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


@functools.cache
def compiler() -> str:
    """The C++ compiler: ``CXX``, else g++, else clang++."""
    for cand in (os.environ.get("CXX"), "g++", "clang++"):
        path = _which(cand) if cand else None
        if path:
            return path
    raise RuntimeError("xsim needs a C++ compiler for CPU kernels and found none: install g++ "
                       "(e.g. `apt-get install g++`) or clang++, or point the CXX environment variable at one.")


def _which(name: str) -> str | None:
    """The executable ``name`` on PATH (or ``name`` itself when it is a path), like ``shutil.which``.
    A loaded-from-cache module needs only this, and importing shutil (with subprocess and tempfile,
    which only a compile needs) would cost a fresh process several milliseconds."""
    dirs = [""] if os.path.dirname(name) else os.environ.get("PATH", os.defpath).split(os.pathsep)
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def flags(fuse_fp: bool = False) -> list[str]:
    """The compiler flags of a module: ``FLAGS``, with contraction allowed where its ``fuse_fp`` option is on."""
    return [("-ffp-contract=fast" if fuse_fp and f == "-ffp-contract=off" else f) for f in FLAGS]


def target_id(debug: bool, fuse_fp: bool = False) -> str:
    """What a CPU binary depends on besides the source: compiler binary, flags, how the module is split
    into translation units, and the host CPU."""
    return f"{_toolchain_id()}|{' '.join(flags(fuse_fp))}|part={PART_CHARS}|debug={debug}"


@functools.cache
def _toolchain_id() -> str:
    """The compiler binary and the host CPU."""
    cxx = compiler()
    st = os.stat(cxx)
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags")):
                    cpu += line
                if line.startswith("flags"):
                    break
    except OSError:
        pass
    # hashlib, not hash(): str hashes differ between processes, and the key must not
    cpu_hash = hashlib.blake2b(cpu.encode(), digest_size=8).hexdigest()
    return f"cpu|{cxx}|{st.st_size}|{st.st_mtime_ns}|{cpu_hash}"


def compile_source(sources: list[str], out_dir: Path, fuse_fp: bool = False) -> Path:
    """Compile one module's C++ translation units (several compile in parallel, then link) to a shared
    library in ``out_dir``; returns its path. ``fuse_fp``: the module option (:func:`flags`)."""
    opts = flags(fuse_fp)
    lib = out_dir / "module.so"
    include = f"-I{Path(__file__).parent / 'native'}"
    srcs = [out_dir / f"part{i}.cpp" for i in range(len(sources))]
    for src, text in zip(srcs, sources):
        src.write_text(text)
    if len(srcs) == 1:
        _run([compiler(), *opts, include, str(srcs[0]), "-o", str(lib)])
        return lib
    from concurrent.futures import ThreadPoolExecutor  # here, not at the top: see _which
    objs = [src.with_suffix(".o") for src in srcs]
    # threads only wait on the compiler processes; one per core this process may use
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with ThreadPoolExecutor(min(len(srcs), cores)) as pool:
        list(pool.map(lambda so: _run([compiler(), *opts, "-c", include, str(so[0]), "-o", str(so[1])]),
                      zip(srcs, objs)))
    _run([compiler(), *opts, *map(str, objs), "-o", str(lib)])
    return lib


def _run(cmd: list[str]):
    import subprocess  # here, not at the top: see _which
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CompileError("the C++ compiler rejected the generated code (this is a bug in xsim; please "
                           f"report it with this log):\n{proc.stderr[-6000:]}")


class CpuModule:
    """A loaded module: the native entry points of each kernel."""

    def __init__(self, lib_path: Path, metas: dict):
        self.lib = ctypes.CDLL(str(lib_path))
        self.metas = metas
        self.forward = {}
        self.backward = {}
        for name, meta in metas.items():
            if meta.refused is not None:
                continue
            f = getattr(self.lib, f"{name}_cpu_forward")
            f.restype = ctypes.c_int32  # 0, or 1: a launch refused by its shape check (codegen._cpu_entry)
            f.argtypes = [ctypes.c_char_p]  # the launch buffer (launch.cpu_buffer)
            self.forward[name] = f
            if meta.adjoint_error is None:
                b = getattr(self.lib, f"{name}_cpu_backward")
                b.restype = ctypes.c_int32
                b.argtypes = [ctypes.c_char_p]
                self.backward[name] = b
        self.error = ErrorInfo.in_dll(self.lib, "xs_error")


class ErrorInfo(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("param", ctypes.c_int32), ("line", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("index", ctypes.c_int64 * 4), ("shape", ctypes.c_int64 * 4)]


def build(module, debug: bool) -> CpuModule:
    """Load ``module`` from the cache, or generate, compile and cache it."""
    from .module import KernelMeta
    fuse_fp = module.fuse_fp()
    key = cache.entry_key(module.name, module.content_hash(), target_id(debug, fuse_fp), debug)

    def cached() -> CpuModule | None:
        found = cache.lookup(key, ".so")
        if found is not None:
            path, meta = found
            try:
                metas = {k: KernelMeta(**m) for k, m in meta["kernels"].items()}
                if set(metas) == module.symbols():
                    return CpuModule(path, metas)
            except (OSError, TypeError, KeyError):
                pass
        return None

    loaded = cached()
    if loaded is not None:
        return loaded
    with cache.build_lock(key):  # another process missing at once waits here, then loads this build
        loaded = cached()
        if loaded is not None:
            return loaded
        sources, metas = module.generate_parts("cpu", debug, PART_CHARS)
        import tempfile  # here, not at the top: see _which
        cache.remove_stale_builds()
        with tempfile.TemporaryDirectory(dir=cache.cache_dir(), prefix="build-") as tmp:
            lib = compile_source(sources, Path(tmp), fuse_fp)
            path = cache.store(key, ".so", lib, {"kernels": {k: vars(m) for k, m in metas.items()}})
    return CpuModule(path, metas)
