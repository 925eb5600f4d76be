"""CPU backend: the system C++ compiler at -O3 with OpenMP, loaded with ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import threading
import zlib
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
# in parallel. Each unit parsed the native headers again, about 0.6 s of CPU before they were precompiled
# (native_pch): xsim's 590 kB gradient test module took 14.6 s CPU as one unit, 16.2 s as three and 18.9 s
# as seven. So only modules far bigger than xsim's own split (Warp's library test files reach 1.4 MB), and
# only where cores are free.
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
    include = f"-I{NATIVE}"
    srcs = [out_dir / f"part{i}.cpp" for i in range(len(sources))]
    for src, text in zip(srcs, sources):
        src.write_text(text)
    pch = native_pch(fuse_fp)
    if pch is not None:  # `#include "xsim.h"` looks beside the source first, and takes xsim.h.gch there
        os.symlink(pch, out_dir / "xsim.h.gch")
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


NATIVE = Path(__file__).parent / "native"  # the runtime headers every generated source includes (xsim.h)

_PCH: dict[str, Path | None] = {}  # native_pch's answer per cache key, in this process


def native_pch(fuse_fp: bool = False) -> Path | None:
    """The native headers precompiled (GCC's ``xsim.h.gch``) for :func:`flags` ``(fuse_fp)``, built into the
    kernel cache on first use; None where the compiler is not GCC or could not build it. Parsing the headers
    is most of a small module's compile (0.33 of 0.50 s for one kernel, g++ 12): every unit that includes
    the precompiled file skips it. GCC uses it only when it was made with the same compiler, flags and
    headers (the cache key holds all three) and otherwise parses ``xsim.h`` as before."""
    key = cache.entry_key("xsim_native_headers", "pch", target_id(False, fuse_fp), False)
    known = _PCH.get(key, False)
    if known is None or known and known.exists():
        return known
    _PCH[key] = None
    if not _is_gcc():
        return None
    found = cache.lookup(key, ".gch")
    if found is None:
        with cache.build_lock(key):
            found = cache.lookup(key, ".gch")
            if found is None:
                import tempfile  # here, not at the top: see _which
                with tempfile.TemporaryDirectory(dir=cache.cache_dir(), prefix="build-") as tmp:
                    out = Path(tmp) / "xsim.h.gch"
                    try:
                        _run([compiler(), *(f for f in flags(fuse_fp) if f != "-shared"), "-x", "c++-header",
                              str(NATIVE / "xsim.h"), "-o", str(out)])
                    except CompileError:
                        return None  # each unit parses the headers, as without
                    cache.store(key, ".gch", out, {"pch": "xsim.h"})
                found = cache.lookup(key, ".gch")
    if found is not None:
        _PCH[key] = found[0]
    return _PCH[key]


@functools.cache
def _is_gcc() -> bool:
    """Whether :func:`compiler` is GCC (clang does not take a ``.gch`` found beside a header)."""
    import subprocess  # here, not at the top: see _which
    try:
        out = subprocess.run([compiler(), "-dM", "-E", "-x", "c++", os.devnull], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return False
    return "#define __GNUC__" in out and "__clang__" not in out


def _run(cmd: list[str]):
    import subprocess  # here, not at the top: see _which
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CompileError("the C++ compiler rejected the generated code (this is a bug in xsim; please "
                           f"report it with this log):\n{proc.stderr[-6000:]}")


class CpuModule:
    """A loaded module: the forward entry point of each kernel, and its adjoint's (``backward``).

    The adjoints are a second library, compiled (or loaded from the cache) at the first backward launch, not
    with the forwards: a kernel's adjoint is about three times its forward's C++ (the rigid solver's contact
    kernels: 1.3 MB of 1.7 MB), and a run that never differentiates (a scene written to USD, most of the test
    suite) should not wait for g++ to compile it."""

    def __init__(self, name: str, lib_path: Path, metas: dict, build_backward, backward_key: str):
        self.name = name
        self.lib = ctypes.CDLL(str(lib_path))
        self.metas = metas
        self.forward = {n: self._entry(self.lib, n, "forward") for n, m in metas.items() if m.refused is None}
        self.error = ErrorInfo.in_dll(self.lib, "xs_error")
        self.backward_error = self.error  # the adjoint library's report (its own once loaded)
        self._build_backward = build_backward  # () -> path of the adjoints' library
        self._backward_key = backward_key  # that library's cache key
        self._backward: dict | None = None
        self._backward_lock = threading.Lock()

    @property
    def backward(self) -> dict:
        """The adjoint entry point of each kernel that has one, by symbol; the first use builds or loads
        their library."""
        if self._backward is None:
            with self._backward_lock:
                if self._backward is None:
                    self._backward = self._load_backward()
        return self._backward

    def backward_pending(self) -> bool:
        """Whether the first use of :attr:`backward` would build its library (it is not loaded or cached)."""
        return self._backward is None and _adjoints_uncached(self.metas, self._backward_key)

    def _load_backward(self) -> dict:
        names = _adjoint_names(self.metas)
        if not names:
            return {}
        self.backward_lib = ctypes.CDLL(str(self._build_backward()))
        out = {n: self._entry(self.backward_lib, n, "backward") for n in names}
        self.backward_error = ErrorInfo.in_dll(self.backward_lib, "xs_error")
        return out

    def _entry(self, lib: ctypes.CDLL, symbol: str, half: str):
        """Kernel ``symbol``'s ``half`` ("forward" or "backward") entry point in ``lib``; both libraries are
        built from the kernels and metadata of one build (:func:`build`), so a missing one is xsim's bug."""
        try:
            f = getattr(lib, f"{symbol}_cpu_{half}")
        except AttributeError:
            raise AssertionError(f"module '{self.name}': its {half} library {lib._name} has no entry point for "
                                 f"kernel '{symbol}' (this is a bug in xsim; please report it)") from None
        f.restype = ctypes.c_int32  # 0, or 1: a launch refused by its shape check (codegen._cpu_entry)
        f.argtypes = [ctypes.c_char_p]  # the launch buffer (launch.cpu_buffer)
        return f


def _adjoint_names(metas: dict) -> list[str]:
    """The symbols of the kernels in ``metas`` that have a CPU adjoint."""
    return [n for n, m in metas.items() if m.refused is None and m.adjoint_error is None]


def _adjoints_uncached(metas: dict, backward_key: str) -> bool:
    """Whether the adjoints' library of the kernels in ``metas`` is still to be compiled: some have an
    adjoint and the cache has no library under ``backward_key``."""
    return bool(_adjoint_names(metas)) and cache.lookup(backward_key, ".so") is None


def adjoints_pending(module, debug: bool, forward_meta: dict) -> bool:
    """Whether ``module``'s adjoints' library is still to be compiled, given its cached forward library's
    metadata (a module none of whose kernels has an adjoint has none to compile)."""
    from .module import KernelMeta
    try:
        metas = {k: KernelMeta(**m) for k, m in forward_meta["kernels"].items()}
    except (TypeError, KeyError):
        return True
    return _adjoints_uncached(metas, entry_key(module, debug, "backward"))


class ErrorInfo(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("param", ctypes.c_int32), ("line", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("index", ctypes.c_int64 * 4), ("shape", ctypes.c_int64 * 4)]


def entry_key(module, debug: bool, half: str = "forward") -> str:
    """The cache key of ``module``'s library of forward (``half`` "forward") or adjoint ("backward") entry
    points for the CPU."""
    return _key(module.name, module.content_hash(), debug, module.fuse_fp(), half)


def _key(name: str, content: str, debug: bool, fuse_fp: bool, half: str) -> str:
    return cache.entry_key(name, content, f"{target_id(debug, fuse_fp)}|{half}", debug)


def build(module, debug: bool) -> CpuModule:
    """Load ``module``'s forward library from the cache, or generate, compile and cache it; its adjoints'
    library follows at the first backward launch (``CpuModule``), for the same kernels: a forward build
    generates the adjoints' C++ with its own (one codegen pass) and keeps it, compressed, for that launch."""
    kernels, content, fuse_fp = list(module.kernels), module.content_hash(), module.fuse_fp()
    symbols = {k.symbol for k in kernels}
    keys = {half: _key(module.name, content, debug, fuse_fp, half) for half in ("forward", "backward")}
    later: list[bytes] = []  # the adjoints' translation units, zlib-compressed, when the forwards' build made them

    def forward() -> tuple[list[str], dict]:
        (sources, adjoints), metas = module.generate_halves("cpu", debug, PART_CHARS, module.frontend(kernels),
                                                            ("forward", "backward"))
        later[:] = [zlib.compress(u.encode()) for u in adjoints]
        return sources, metas

    def backward() -> tuple[list[str], dict]:
        if later:
            return [zlib.decompress(u).decode() for u in later], metas
        if {k.symbol for k in kernels} != symbols:  # a func or constant they use changed since: not the same code
            raise CompileError(f"module '{module.name}': its kernels' code changed after their forward was "
                               "compiled (the forward came from the kernel cache), so their adjoints cannot be "
                               "built to match it; record the forward again")
        return module.generate_parts("cpu", debug, PART_CHARS, module.frontend(kernels), "backward")

    path, metas = _library(keys["forward"], symbols, fuse_fp, forward)
    return CpuModule(module.name, path, metas, lambda: _library(keys["backward"], symbols, fuse_fp, backward)[0],
                     keys["backward"])


def _library(key: str, symbols: set, fuse_fp: bool, generate) -> tuple[Path, dict]:
    """The cached library ``key`` of the kernels named ``symbols`` and their metadata; on a miss
    ``generate()`` gives its translation units and metadata, compiled and stored under ``key``."""
    from .module import KernelMeta

    def cached() -> tuple[Path, dict] | None:
        found = cache.lookup(key, ".so")
        if found is not None:
            path, meta = found
            try:
                metas = {k: KernelMeta(**m) for k, m in meta["kernels"].items()}
                if set(metas) == symbols:
                    ctypes.CDLL(str(path))  # one that does not load (OSError) is built again
                    return path, metas
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
        sources, metas = generate()
        import tempfile  # here, not at the top: see _which
        cache.remove_stale_builds()
        with tempfile.TemporaryDirectory(dir=cache.cache_dir(), prefix="build-") as tmp:
            lib = compile_source(sources, Path(tmp), fuse_fp)
            path = cache.store(key, ".so", lib, {"kernels": {k: vars(m) for k, m in metas.items()}})
    return path, metas
