"""Every kernel of the test suite compiles with NVRTC to a CUBIN, forward and adjoint: release code for sm_80,
debug code for sm_90.

The default run compiles with ``--Ofast-compile=max`` (``cuda.options(fast=True)``): the same front end,
code generation and ptxas, without most optimization, 5-7x quicker (a cold run spent 11 minutes here).
``-m nvrtc_full`` builds the same matrix with the optimization real launches use.

Runs on every machine: NVRTC needs no GPU. The test walks the test files that define kernels,
imports each (or finds it already imported by this pytest session), and compiles every module
registered for its kernels (``xsim.kernels.module._MODULES``) in release and debug mode. Kernels
that the frontend rejects on purpose (the compile-error tests) are left out of their module; any
NVRTC failure on the rest is a failure here.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import multiprocessing
import os
import re
import sys
from pathlib import Path

import pytest

import xsim
from xsim.kernels import cuda
from xsim.kernels.module import _MODULES, Module, build_ir

pytest.importorskip("cuda.bindings.nvrtc")

TESTS = Path(__file__).parents[1]
ARCHS = (80, 90)
_DEFINES_KERNELS = re.compile(r"@(?:xsim\.|wp\.)?kernel\b|\bkernel\(")


def _kernel_test_files() -> list[str]:
    out = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if _DEFINES_KERNELS.search(path.read_text(errors="replace")):
            out.append(path.relative_to(TESTS).as_posix())
    return out


_FILES: dict[str, object] = {}  # os.path.realpath(__file__) -> module, for the sys.modules entries indexed so far
_INDEXED: set[tuple[str, int]] = set()  # those entries: (name, id of the module)


def _loaded_module(resolved: str):
    """The module in sys.modules whose file is ``resolved``, or None; indexes only the entries added since the
    last call (resolving every module's file for every test file cost the sweep 20 s of a 40 s warm run)."""
    for name, mod in list(sys.modules.items()):
        if (name, id(mod)) not in _INDEXED:
            _INDEXED.add((name, id(mod)))
            f = getattr(mod, "__file__", None)
            if isinstance(f, str):
                _FILES.setdefault(os.path.realpath(f), mod)
    return _FILES.get(resolved)


def _import_test_file(path: Path):
    """The module object of a test file: the one pytest imported, else a fresh import under a private name."""
    found = _loaded_module(os.path.realpath(path))
    if found is not None:
        return found
    name = "nvrtc_walk." + path.relative_to(TESTS).with_suffix("").as_posix().replace("/", ".")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


@functools.cache
def _real_file(code_file: str) -> str:
    return os.path.realpath(code_file)


class _Unit:
    """A registered module as the sweep compiles it, with its frontend pass (one, shared by every config). The
    frontend output keeps the kernels it rejects on purpose (the compile-error tests' subjects) out of the
    generated code; kernels whose source file is gone (made by tests in temporary files) are left out."""

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
        self._sources: dict[bool, tuple[str, dict]] = {}

    def source(self, debug: bool) -> tuple[str, dict]:
        """The module's CUDA source and kernel metadata, debug or release (each generated once)."""
        if debug not in self._sources:
            self._sources[debug] = self.module.generate("cuda", debug, self.front)
        return self._sources[debug]


def _built(metas: dict) -> list[str]:
    """The kernels of ``metas`` that the frontend accepted: those a CUBIN must hold."""
    return [name for name, meta in metas.items() if meta.refused is None]


def _has_source(kernel) -> bool:
    try:
        build_ir(kernel)
    except OSError:
        return False
    except xsim.CompileError:
        pass
    return True


_UNITS: dict[tuple[str, str], _Unit | None] = {}


def _unit(module: Module) -> _Unit | None:
    """The sweep's unit of ``module`` as it is now (made once per content), or None when it has no kernel."""
    key = (module.name, module.content_hash())
    if key not in _UNITS:
        unit = _Unit(module) if module.kernels else None
        _UNITS[key] = unit if unit is not None and unit.front.irs else None
    return _UNITS[key]


def _all_units() -> list[_Unit]:
    return [u for u in map(_unit, list(_MODULES.values())) if u is not None]


def _units_of(path: Path) -> list[_Unit]:
    """The unit of every registered module holding a kernel defined in ``path``."""
    resolved = os.path.realpath(path)
    return [u for u in _all_units() if resolved in u.files]


# Each generated source (release, debug) once, and each architecture once: the two sources differ in
# bounds checks, the two architectures in nothing xsim generates (a third build, release for sm_90,
# cost a cold CI run five minutes and never failed apart from the other two). (arch, debug, fast)
FAST_CONFIGS = [(80, False, True), (90, True, True)]
CONFIGS = [*FAST_CONFIGS,
           pytest.param(80, False, False, marks=pytest.mark.nvrtc_full, id="sm_80-optimized"),
           pytest.param(90, True, False, marks=pytest.mark.nvrtc_full, id="sm_90-debug-optimized")]
CONFIG_IDS = ["sm_80", "sm_90-debug", None, None]


def _compile_job(source: str, arch: int, name: str, fast: bool, fuse_fp: bool) -> bytes | None:
    try:
        return cuda.compile_cubin(source, arch, name, fast=fast, fuse_fp=fuse_fp)
    except xsim.CompileError:
        return None  # the test compiles it again in-process, for the error that names the kernel


def _warm(units: list[_Unit], configs: list[tuple[int, bool, bool]]) -> None:
    """Compile the (unit, config) pairs the cache lacks in parallel worker processes: NVRTC serialises
    compiles within one process, and a large module takes 10-40 s. The largest sources go first, so that
    no long compile starts last while the other workers sit idle."""
    jobs = []
    for unit in units:
        for arch, debug, fast in configs:
            if cuda.cached_cubin(unit.module, debug, arch, fast=fast) is None:
                jobs.append((unit, debug, arch, fast))
    jobs.sort(key=lambda job: -len(job[0].source(job[1])[0]))
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers < 2:
        return
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [(job, pool.submit(_compile_job, job[0].source(job[1])[0], job[2],
                                     cuda.source_name(job[0].module), job[3], job[0].module.fuse_fp()))
                   for job in jobs]
        for (unit, debug, arch, fast), future in futures:
            cubin = future.result()
            if cubin is not None:
                cuda.store_cubin(unit.module, debug, arch, cubin, unit.source(debug)[1], fast=fast)


@pytest.fixture(scope="session")
def suite_imported() -> dict[str, Exception]:
    """Import every test file that defines kernels and warm the CUBIN cache (fast configs) for all registered
    modules; returns the files that failed to import, with their errors."""
    unimportable = {}
    for test_file in _kernel_test_files():
        try:
            _import_test_file(TESTS / test_file)
        except (Exception, pytest.skip.Exception) as e:  # noqa: BLE001 - reported by that file's own test below
            unimportable[test_file] = e
    _warm(_all_units(), FAST_CONFIGS)
    return unimportable


def _check_compiles(unit: _Unit, arch: int, debug: bool, fast: bool) -> None:
    module = unit.module
    cubin_path, metas = cuda.build_cubin(module, debug, arch, fast=fast)
    cubin = cubin_path.read_bytes()
    assert cubin[:4] == b"\x7fELF" and _cubin_sm(cubin) == arch, f"module {module.name}: not a CUBIN for sm_{arch}"
    assert _built(metas), f"module {module.name}: no kernel built"
    for name in _built(metas):
        assert f"{name}_cuda_forward".encode() in cubin, f"{module.name}: no forward entry for {name}"
        if metas[name].adjoint_error is None:
            assert f"{name}_cuda_backward".encode() in cubin, f"{module.name}: no adjoint entry for {name}"


@pytest.mark.parametrize(("arch", "debug", "fast"), CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("test_file", _kernel_test_files())
def test_every_kernel_of_the_file_compiles_to_a_cubin_forward_and_adjoint(test_file, arch, debug, fast,
                                                                          suite_imported):
    if isinstance(suite_imported.get(test_file), pytest.skip.Exception):
        pytest.skip(f"{test_file} skips itself at import: {suite_imported[test_file]}")
    if test_file in suite_imported:
        pytest.fail(f"{test_file} does not import: {suite_imported[test_file]!r}")
    units = _units_of(TESTS / test_file)
    if not units:
        pytest.skip(f"{test_file} defines no kernel at import that the frontend accepts (its kernels are "
                    "generated elsewhere or rejected on purpose; the end-of-session sweep covers generated ones)")
    for unit in units:
        _check_compiles(unit, arch, debug, fast)


@pytest.mark.last
@pytest.mark.parametrize(("arch", "debug", "fast"), CONFIGS, ids=CONFIG_IDS)
def test_every_module_registered_by_the_end_of_the_session_compiles(arch, debug, fast, suite_imported):
    """Runs last (tests/conftest.py), so it also covers the library's own kernels that tests import
    (solvers) and the kernels tests generate while they run."""
    units = _all_units()
    assert units
    _warm(units, [(arch, debug, fast)])
    for unit in units:
        _check_compiles(unit, arch, debug, fast)


def test_the_walk_finds_the_suites_kernel_files():
    files = _kernel_test_files()
    assert "cuda/test_cuda_runtime.py" in files
    assert "cuda/test_nvrtc_compile.py" not in files


def test_compile_cubin_targets_the_requested_architecture_without_a_gpu():
    source = 'extern "C" __global__ void fill_one(float* x) { x[threadIdx.x] = 1.0f; }'
    for arch, fast in (("sm_80", False), (90, False), (80, True)):
        cubin = cuda.compile_cubin(source, arch, fast=fast)
        assert cubin[:4] == b"\x7fELF" and cubin[7] == 0x41  # ELFOSABI_CUDA: SASS, not PTX
        assert _cubin_sm(cubin) == int(str(arch).removeprefix("sm_"))


def test_the_quick_check_builds_never_share_a_cache_entry_with_the_builds_launches_load():
    assert "--Ofast-compile=max" not in cuda.options(80)
    assert cuda.target_id(80, fast=True) != cuda.target_id(80)


def _cubin_sm(cubin: bytes) -> int:
    """The SM number in a CUDA ELF header's e_flags (bits 8-15 from ELF ABI version 8 on, else bits 0-7)."""
    e_flags = int.from_bytes(cubin[48:52], "little")
    return (e_flags >> 8) & 0xFF if cubin[8] >= 8 else e_flags & 0xFF


def test_nvrtc_errors_raise_compile_error_naming_the_kernel_and_its_python_line():
    rt_tests = _import_test_file(TESTS / "cuda" / "test_cuda_runtime.py")
    module = xsim.kernels.module.get_module(rt_tests.saxpy.module_name)
    source, _ = module.generate("cuda", False)
    sym = rt_tests.saxpy.symbol
    head = f"{sym}_forward(const {sym}_args& P, int64_t t, const xs::launch_dims& D) {{"
    broken = source.replace(head, head + "\n    not_a_thing = 1;", 1)
    assert broken != source
    with pytest.raises(xsim.CompileError) as info:
        cuda.compile_cubin(broken, 80, name="m.cu", kernels=tuple(module.kernels))
    err = info.value
    assert "kernel 'saxpy'" in str(err) and 'identifier "not_a_thing" is undefined' in str(err)
    assert err.file == rt_tests.__file__ and err.line == rt_tests.saxpy.pyfunc.__code__.co_firstlineno


def test_kernel_at_line_maps_generated_lines_to_their_kernel():
    rt_tests = _import_test_file(TESTS / "cuda" / "test_cuda_runtime.py")
    source, _ = xsim.kernels.module.get_module(rt_tests.saxpy.module_name).generate("cuda", False)
    lines = source.splitlines()
    symbol = rt_tests.saxpy.symbol  # the kernel's C++ name: its name and a digest of its content
    fwd = next(i for i, t in enumerate(lines) if f"{symbol}_forward(const" in t) + 1
    bwd = next(i for i, t in enumerate(lines) if f"{symbol}_backward(const" in t) + 1
    assert cuda.kernel_at_line(source, fwd + 2) == symbol
    assert cuda.kernel_at_line(source, bwd + 2) == symbol
    assert cuda.kernel_at_line(source, 1) is None


def test_arch_for_picks_the_gpus_own_sass_or_an_older_minor_of_the_same_major():
    assert cuda.arch_for((9, 0)) == 90
    assert cuda.arch_for((8, 6)) == 86
    assert cuda.arch_for((8, 9)) == 89
    with pytest.raises(RuntimeError, match="cannot generate code for this GPU"):
        cuda.arch_for((3, 5))


def test_variants_generated_from_one_frontend_pass_are_those_of_separate_passes():
    """The sweep runs the frontend once per module and generates the release and debug sources from it, so
    generating must leave the IR as it found it: the shared pass gives what a launch's own pass gives (up to
    the numbering of values, which goes on across passes)."""
    rt_tests = _import_test_file(TESTS / "cuda" / "test_cuda_runtime.py")
    grads = _import_test_file(TESTS / "autodiff" / "test_library_func_gradients.py")
    for module in (xsim.kernels.module.get_module(rt_tests.saxpy.module_name), grads.norms.module):
        front = module.frontend()
        first = {}
        for target, debug in (("cuda", False), ("cuda", True), ("cpu", True), ("cuda", False), ("cpu", True)):
            source, metas = module.generate(target, debug, front)
            assert first.setdefault((target, debug), (source, metas)) == (source, metas), (module.name, target, debug)
            alone, alone_metas = module.generate(target, debug)
            assert _renumbered(source) == _renumbered(alone) and metas == alone_metas, (module.name, target, debug)
            assert source != alone  # a second pass numbers its values anew: the check above is not vacuous


def _renumbered(source: str) -> str:
    """``source`` with its values (``v12``, their adjoints ``a12``, loop checkpoints ``ck3_12``...) numbered in
    order of first appearance."""
    order: dict[str, int] = {}
    return re.sub(r"\b(ck\d+_|[a-z])(\d+)\b", lambda m: f"{m[1]}#{order.setdefault(m[2], len(order))}",
                  source)
