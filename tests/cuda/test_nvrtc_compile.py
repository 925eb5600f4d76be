"""Every kernel of the test suite compiles with NVRTC, forward and adjoint: release code for sm_80 to a CUBIN,
debug code for sm_90 to PTX, the library's own modules to PTX (``tests/nvrtc_sweep.py``, ``to_ptx``).

The default run compiles with ``--Ofast-compile=max`` (``cuda.options(fast=True)``): the same front end,
code generation and ptxas, without most optimization, 5-7x quicker (a cold run spent 11 minutes here).
``-m nvrtc_full`` builds the same matrix to CUBINs with the optimization real launches use.

Runs on every machine: NVRTC needs no GPU. The test walks the test files that define kernels,
imports each (or finds it already imported by this pytest session), and compiles every module
registered for its kernels (``xsim.kernels.module._MODULES``) in release and debug mode. Kernels
that the frontend rejects on purpose (the compile-error tests) are left out of their module; any
NVRTC failure on the rest is a failure here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
from nvrtc_sweep import (
    CONFIG_IDS,
    CONFIGS,
    FAST_CONFIGS,
    Unit,
    all_units,
    check_compiles,
    cubin_sm,
    to_ptx,
    warm,
)

import xsim
from xsim.kernels import cuda

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


def _units_of(path: Path) -> list[Unit]:
    """The unit of every registered module holding a kernel defined in ``path``."""
    resolved = os.path.realpath(path)
    return [u for u in all_units() if resolved in u.files]


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
    warm(all_units(), FAST_CONFIGS)
    return unimportable


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
        pytest.skip(f"{test_file} defines no kernel at import that the frontend accepts: those it generates "
                    "while it runs compile with NVRTC at the end of that file, in its own process (tests/conftest.py)")
    for unit in units:
        check_compiles(unit, arch, debug, fast)


@pytest.mark.last
@pytest.mark.parametrize(("arch", "debug", "fast"), CONFIGS, ids=CONFIG_IDS)
def test_every_module_registered_by_the_end_of_the_session_compiles(arch, debug, fast, suite_imported):
    """Runs last (tests/conftest.py), so it also covers the library's own kernels that tests import
    (solvers) and the kernels that the tests run in this process generate (other processes' files check
    theirs at their end: tests/conftest.py)."""
    units = all_units()
    assert units
    warm(units, [(arch, debug, fast)])
    for unit in units:
        check_compiles(unit, arch, debug, fast)


def test_the_walk_finds_the_suites_kernel_files():
    files = _kernel_test_files()
    assert "cuda/test_cuda_runtime.py" in files
    assert "cuda/test_nvrtc_compile.py" not in files


def test_compile_cubin_targets_the_requested_architecture_without_a_gpu():
    source = 'extern "C" __global__ void fill_one(float* x) { x[threadIdx.x] = 1.0f; }'
    for arch, fast in (("sm_80", False), (90, False), (80, True)):
        cubin = cuda.compile_cubin(source, arch, fast=fast)
        assert cubin[:4] == b"\x7fELF" and cubin[7] == 0x41  # ELFOSABI_CUDA: SASS, not PTX
        assert cubin_sm(cubin) == int(str(arch).removeprefix("sm_"))


def test_compile_ptx_stops_at_the_virtual_architecture_and_raises_what_compile_cubin_raises():
    source = 'extern "C" __global__ void fill_one(float* x) { x[threadIdx.x] = 1.0f; }'
    ptx = cuda.compile_ptx(source, 90, fast=True)
    assert b".target sm_90" in ptx and b".entry fill_one(" in ptx and not ptx.startswith(b"\x7fELF")
    with pytest.raises(xsim.CompileError, match='identifier "not_a_thing" is undefined'):
        cuda.compile_ptx(source.replace("1.0f", "not_a_thing"), 80)
    assert cuda.target_id(80, ptx=True) != cuda.target_id(80)


def test_the_library_modules_and_debug_builds_are_checked_to_ptx_and_release_test_kernels_to_cubins():
    from xsim.sim import ModelBuilder
    from xsim.solvers import SolverXPBD
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 1.0), (0.0, 0.0, 0.0), mass=1.0)
    model = b.finalize()
    SolverXPBD(model).step(model.state(), model.state(), model.control(), 0.01)  # makes the solver's modules
    library = [u for u in all_units() if u.module.name.startswith("xsim.solvers.")]
    _import_test_file(TESTS / "cuda" / "test_cuda_runtime.py")
    own = _units_of(TESTS / "cuda" / "test_cuda_runtime.py")
    assert library and own
    assert all(u.library and to_ptx(u, False, True) and not to_ptx(u, False, False) for u in library)
    assert not any(u.library or to_ptx(u, False, True) for u in own)  # release: a CUBIN
    assert all(to_ptx(u, True, True) and not to_ptx(u, True, False) for u in own)  # debug: PTX unless full


def test_the_quick_check_builds_never_share_a_cache_entry_with_the_builds_launches_load():
    assert "--Ofast-compile=max" not in cuda.options(80)
    assert cuda.target_id(80, fast=True) != cuda.target_id(80)


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
