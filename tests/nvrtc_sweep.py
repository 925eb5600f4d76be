"""What the NVRTC sweep compiles and how it checks a build: shared by tests/cuda/test_nvrtc_compile.py (every
kernel the test files define, and everything registered in its process by the end of the session) and
tests/conftest.py (the kernels each other test file generates while it runs, compiled at the end of that file
in the process that generated them: the kernel registry is per process, and xdist runs files in separate ones).

A unit is a registered module (``xsim.kernels.module._MODULES``) as it is at one moment: its name and content
hash. Kernels the frontend rejects on purpose (the compile-error tests) are left out of the generated code;
kernels whose source file is gone (made by tests in temporary files) are left out of the unit.

The library's own modules (every kernel defined in the xsim package: the solvers' and collision's, in each
scalar type the tests make) and every debug build go to PTX in the quick configs (``cuda.compile_ptx``: the
C++ front end and NVVM, where generated code goes wrong; ``to_ptx``), and to CUBINs only in the
``nvrtc_full`` ones: ptxas alone takes
minutes and up to 10 GB on their largest kernels (the rigid contacts' ``measure_contacts``: over 150 s
to a CUBIN, 9 s to PTX), and two workers doing that at once ran a CI machine out of memory.
"""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import os

import pytest

import xsim
from xsim.kernels import cache, cuda
from xsim.kernels.module import _MODULES, Module, build_ir

_PACKAGE = os.path.join(os.path.realpath(os.path.dirname(xsim.__file__)), "")

# Each generated source (release, debug) once, and each architecture once: the two sources differ in
# bounds checks, the two architectures in nothing xsim generates (a third build, release for sm_90,
# cost a cold CI run five minutes and never failed apart from the other two). (arch, debug, fast)
FAST_CONFIGS = [(80, False, True), (90, True, True)]
# The kernels test files generate while they run (the solvers' specializations, compiled at the end of each
# file by tests/conftest.py): the release source alone. Both builds of them took 5,900 of a loaded cold run's
# 11,100 test-seconds (`--durations=0`, the files' teardowns); the debug source differs from the release one
# in its run-time checks, which the test files' own kernels cover in both configs.
GENERATED_CONFIGS = FAST_CONFIGS[:1]
CONFIGS = [*FAST_CONFIGS,
           pytest.param(80, False, False, marks=pytest.mark.nvrtc_full, id="sm_80-optimized"),
           pytest.param(90, True, False, marks=pytest.mark.nvrtc_full, id="sm_90-debug-optimized")]
CONFIG_IDS = ["sm_80", "sm_90-debug", None, None]


@functools.cache
def _real_file(code_file: str) -> str:
    return os.path.realpath(code_file)


def _has_source(kernel) -> bool:
    try:
        build_ir(kernel)
    except OSError:
        return False
    except xsim.CompileError:
        pass
    return True


class Unit:
    """A registered module as the sweep compiles it, with its frontend pass (one, shared by every config)."""

    def __init__(self, module: Module):
        try:
            self.front = module.frontend()
        except OSError:
            kept = Module(module.name)
            for k in module.kernels:
                if _has_source(k):
                    kept.add(k)
            module, self.front = kept, kept.frontend()
        self.module = module
        self.files = {_real_file(k.pyfunc.__code__.co_filename) for k in module.kernels}
        # every kernel from the xsim package: checked to PTX in the quick configs (the module docstring)
        self.library = all(f.startswith(_PACKAGE) for f in self.files)
        self._sources: dict[bool, tuple[str, dict]] = {}

    def source(self, debug: bool) -> tuple[str, dict]:
        """The module's CUDA source and kernel metadata, debug or release (each generated once)."""
        if debug not in self._sources:
            self._sources[debug] = self.module.generate("cuda", debug, self.front)
        return self._sources[debug]


_UNITS: dict[tuple[str, str], Unit | None] = {}


def registered() -> set[tuple[str, str]]:
    """The (name, content hash) of every module registered in this process now."""
    return {(m.name, m.content_hash()) for m in list(_MODULES.values())}


def unit(module: Module) -> Unit | None:
    """The sweep's unit of ``module`` as it is now (made once per content), or None when it has no kernel."""
    key = (module.name, module.content_hash())
    if key not in _UNITS:
        made = Unit(module) if module.kernels else None
        _UNITS[key] = made if made is not None and made.front.irs else None
    return _UNITS[key]


def all_units(exclude: set[tuple[str, str]] = frozenset()) -> list[Unit]:
    """The unit of every module registered in this process, but those whose (name, content hash) is in
    ``exclude``."""
    modules = [m for m in list(_MODULES.values()) if (m.name, m.content_hash()) not in exclude]
    return [u for u in map(unit, modules) if u is not None]


def _built(metas: dict) -> list[str]:
    """The kernels of ``metas`` that the frontend accepted: those a CUBIN must hold."""
    return [name for name, meta in metas.items() if meta.refused is None]


def to_ptx(u: Unit, debug: bool, fast: bool) -> bool:
    """Whether the sweep checks ``u`` to PTX, not to a CUBIN: in the quick configs, the library's modules
    and every debug build (ptxas on the debug source, which differs in its run-time checks only, never
    failed where the release CUBIN passed; the debug CUBINs were half of the sweep's ptxas time)."""
    return fast and (u.library or debug)


def _compile_job(*args, **kwargs) -> None:
    try:
        cuda.build_entry(*args, **kwargs)
    except xsim.CompileError:
        pass  # check_compiles compiles it again in-process, for the error that names the kernel


def _workers() -> int:
    """Compiles to run at once in this process: the cores left to it by the other pytest-xdist workers
    (each NVRTC process holds up to 2.5 GB; more of them than cores only queue)."""
    share = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, (os.cpu_count() or 1) // max(1, share))


def warm(units: list[Unit], configs: list[tuple[int, bool, bool]]) -> None:
    """Build the (unit, config) pairs the cache lacks, in parallel worker processes where this process has
    cores to itself (NVRTC serialises compiles within one process, and a large module takes 10-40 s),
    else here, one at a time. The largest sources go first, so that no long compile starts last while the
    other workers sit idle. Each build holds its cache entry's lock (``cuda.build_entry``): a pair another
    process is building is built once."""
    jobs = []
    for u in units:
        for arch, debug, fast in configs:
            ptx = to_ptx(u, debug, fast)
            key = cuda.entry_key(u.module, debug, arch, fast=fast, ptx=ptx)
            if cache.lookup(key, ".ptx" if ptx else ".cubin") is None:
                source, metas = u.source(debug)
                meta = {} if ptx else {"kernels": {k: vars(m) for k, m in metas.items()}}
                jobs.append(((key, source, arch, cuda.source_name(u.module), meta),
                             {"ptx": ptx, "fast": fast, "fuse_fp": u.module.fuse_fp()}))
    jobs.sort(key=lambda job: -len(job[0][1]))
    workers = min(len(jobs), _workers())
    if workers < 2:
        for args, kwargs in jobs:
            _compile_job(*args, **kwargs)
        return
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        for future in [pool.submit(_compile_job, *args, **kwargs) for args, kwargs in jobs]:
            future.result()


def cubin_sm(cubin: bytes) -> int:
    """The SM number in a CUDA ELF header's e_flags (bits 8-15 from ELF ABI version 8 on, else bits 0-7)."""
    e_flags = int.from_bytes(cubin[48:52], "little")
    return (e_flags >> 8) & 0xFF if cubin[8] >= 8 else e_flags & 0xFF


def check_compiles(u: Unit, arch: int, debug: bool, fast: bool) -> None:
    """``u`` builds with NVRTC (or is in the cache) to a CUBIN for ``sm_<arch>`` (to PTX for ``compute_<arch>``
    where :func:`to_ptx` says) holding the forward entry of every kernel the
    frontend accepted, and the adjoint entry of those that have one."""
    module = u.module
    if to_ptx(u, debug, fast):
        ptx = cuda.build_ptx(module, debug, arch, fast=fast).read_bytes()
        assert f".target sm_{arch}".encode() in ptx, f"module {module.name}: not PTX for compute_{arch}"
        _, metas = u.source(debug)
        assert _built(metas), f"module {module.name}: no kernel built"
        for name in _built(metas):
            assert f".entry {name}_cuda_forward(".encode() in ptx, f"{module.name}: no forward entry for {name}"
            if metas[name].adjoint_error is None:
                assert f".entry {name}_cuda_backward(".encode() in ptx, f"{module.name}: no adjoint entry for {name}"
        return
    cubin_path, metas = cuda.build_cubin(module, debug, arch, fast=fast)
    cubin = cubin_path.read_bytes()
    assert cubin[:4] == b"\x7fELF" and cubin_sm(cubin) == arch, f"module {module.name}: not a CUBIN for sm_{arch}"
    assert _built(metas), f"module {module.name}: no kernel built"
    for name in _built(metas):
        assert f"{name}_cuda_forward".encode() in cubin, f"{module.name}: no forward entry for {name}"
        if metas[name].adjoint_error is None:
            assert f"{name}_cuda_backward".encode() in cubin, f"{module.name}: no adjoint entry for {name}"
