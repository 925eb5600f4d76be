"""A module with more kernel code than ``cpu.PART_CHARS`` compiles as several translation units, in
parallel, linked into one library: every kernel runs forward and backward as it does from one unit,
the debug-mode error record is one for the whole library, the build is cached under a key that names
the split and the flags, and a second build loads it without calling the compiler. A library of many
kernels gets no packed-array variants (they double g++'s work) and runs them strided."""

import numpy as np
import pytest

import xsim
from xsim.kernels import codegen, cpu

pytestmark = pytest.mark.cpu_only("the split is the CPU backend's")

MODULE = "xsim_tests_module_parts"


@xsim.kernel(module=MODULE)
def square(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] * x[i]


@xsim.kernel(module=MODULE)
def sine(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = xsim.sin(x[i])


@xsim.kernel(module=MODULE)
def gather(x: xsim.array(dtype=float), idx: xsim.array(dtype=int), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[idx[i]] * 3.0


@pytest.fixture
def split_build(tmp_path, monkeypatch):
    """Every kernel in a unit of its own, built into an empty cache; yields the units each compile got."""
    monkeypatch.setenv("XSIM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "PART_CHARS", 1)
    units = []
    real = cpu.compile_source

    def counting(sources, out_dir, fuse_fp):
        units.append(len(sources))
        return real(sources, out_dir, fuse_fp)

    monkeypatch.setattr(cpu, "compile_source", counting)
    module = square.module
    module.builds.clear()
    yield units
    module.builds.clear()


def run_all(x: np.ndarray) -> dict:
    """Each kernel's output and the gradient of its sum with respect to ``x``."""
    out = {}
    for k in (square, sine):
        xa = xsim.array(x, dtype=float, requires_grad=True)
        ya = xsim.zeros(len(x), dtype=float, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            xsim.launch(k, len(x), inputs=[xa], outputs=[ya])
        ya.grad = xsim.ones(len(x), dtype=float)
        tape.backward()
        out[k.key] = (ya.numpy(), xa.grad.numpy())
    idx = xsim.array(np.arange(len(x))[::-1].copy(), dtype=int)
    ya = xsim.zeros(len(x), dtype=float)
    xsim.launch(gather, len(x), inputs=[xsim.array(x, dtype=float), idx], outputs=[ya])
    out["gather"] = (ya.numpy(), None)
    return out


def test_a_split_module_runs_every_kernel_forward_and_backward_and_loads_from_the_cache(split_build, monkeypatch):
    x = np.linspace(-1.5, 2.0, 37)
    got = run_all(x)
    assert split_build == [3, 3]  # the forwards' build, then the adjoints' at the first backward: three units each
    np.testing.assert_allclose(got["square"][0], x * x, rtol=1e-6)
    np.testing.assert_allclose(got["square"][1], 2 * x, rtol=1e-6)
    np.testing.assert_allclose(got["sine"][0], np.sin(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["sine"][1], np.cos(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["gather"][0], 3 * x[::-1], rtol=1e-6)

    square.module.builds.clear()
    monkeypatch.setattr(cpu, "compile_source", lambda *a: pytest.fail("a cached module was compiled again"))
    again = run_all(x)
    for name, (y, g) in got.items():
        np.testing.assert_array_equal(again[name][0], y)


def test_a_bounds_error_in_any_unit_of_a_split_debug_build_reaches_the_host(split_build, monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x = xsim.array(np.arange(4.0), dtype=float)
    y = xsim.zeros(4, dtype=float)
    with pytest.raises(IndexError, match=r"'gather'.*index \(7,\).*array 'x'"):
        xsim.launch(gather, 4, inputs=[x, xsim.array([0, 1, 7, 2], dtype=int)], outputs=[y])
    xsim.launch(square, 4, inputs=[x], outputs=[y])  # the record was cleared: the next launch runs
    np.testing.assert_array_equal(y.numpy(), np.arange(4.0) ** 2)


def test_the_cache_key_changes_with_the_split_and_the_flags(monkeypatch):
    base = cpu.target_id(False)
    monkeypatch.setattr(cpu, "PART_CHARS", cpu.PART_CHARS + 1)
    split = cpu.target_id(False)
    monkeypatch.setattr(cpu, "FLAGS", [*cpu.FLAGS, "-fno-inline"])
    flags = cpu.target_id(False)
    assert len({base, split, flags}) == 3


def test_a_library_of_many_kernels_gets_no_packed_variants_and_runs_them_strided(split_build, monkeypatch):
    module = square.module
    # the packed variant exists where the dispatch names (so instantiates) the range loop's <true>
    assert any("_range<true>" in s for s in module.generate_parts("cpu", False, 0)[0])
    monkeypatch.setattr(codegen, "PACKED_MODULE_MAX_KERNELS", 2)
    monkeypatch.setattr(codegen, "PACKED_MODULE_MAX_CHARS", 0)
    assert not any("_range<true>" in s for s in module.generate_parts("cpu", False, 0)[0])
    x = np.linspace(-1.5, 2.0, 2000)  # above the serial grain: the OpenMP path runs too
    got = run_all(x)
    np.testing.assert_allclose(got["square"][0], x * x, rtol=1e-6)
    np.testing.assert_allclose(got["square"][1], 2 * x, rtol=1e-6)
    np.testing.assert_allclose(got["sine"][1], np.cos(x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["gather"][0], 3 * x[::-1], rtol=1e-6)
