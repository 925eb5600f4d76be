"""expect_eq, expect_neq and expect_near in kernels: silent when the expectation holds; otherwise
Warp's message with the kernel file:line and both values, on the process's stdout."""

import importlib.util

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only


@xsim.kernel
def checks(x: xsim.array(dtype=float), v: xsim.array(dtype=xsim.vec3), m: xsim.array(dtype=xsim.mat22d),
           k: xsim.array(dtype=xsim.int32), held: xsim.array(dtype=xsim.int32)):
    i = xsim.tid()
    ok = xsim.expect_eq(x[i], 2.0)
    ok = xsim.expect_neq(k[i], 3) and ok
    ok = xsim.expect_near(v[i], xsim.vec3(1.0, 2.0, 3.0), 0.01) and ok
    ok = xsim.expect_near(m[i], xsim.mat22d(1.0, 0.0, 0.0, 1.0)) and ok
    xsim.expect_eq(v[i], xsim.vec3(1.0, 2.0, 3.0))
    held[i] = int(ok)


LINE = checks.pyfunc.__code__.co_firstlineno + 1  # the def line (the first is the decorator)


def _run(x, v, m, k):
    held = xsim.zeros(1, dtype=xsim.int32)
    xsim.launch(checks, 1, inputs=[xsim.array([x], dtype=float), xsim.array([v], dtype=xsim.vec3),
                                   xsim.array([m], dtype=xsim.mat22d), xsim.array([k], dtype=xsim.int32), held])
    return bool(held.numpy()[0])


def test_expectations_that_hold_print_nothing(capfd):
    assert _run(2.0, [1.0, 2.0, 3.0], np.eye(2) + 1e-7, 4)
    out, _ = capfd.readouterr()
    assert out == ""


def test_failed_expectations_print_the_call_site_and_the_values(capfd):
    assert not _run(2.5, [1.0, 2.05, 3.0], np.eye(2) * 2.0, 3)
    out, _ = capfd.readouterr()
    assert f"Error, expect_eq() failed at {__file__}:{LINE + 3}:\n\t Expected: 2\n\t Actual: 2.5\n" in out
    assert f"Error, expect_neq() failed at {__file__}:{LINE + 4}:\n\t Expected anything but: 3\n\t Actual: 3\n" in out
    assert f"Error, expect_near() failed at {__file__}:{LINE + 5}:\n\t Tolerance: 0.01\n" in out
    assert "\t Expected: [1, 2, 3]\n\t Actual: [1, 2.05, 3]\n\t Max absolute difference: 0.05" in out
    assert f"Error, expect_near() failed at {__file__}:{LINE + 6}:\n\t Tolerance: 1e-06\n" in out
    assert f"Error, expect_eq() failed at {__file__}:{LINE + 7}:\n" in out
    assert out.count("Error, ") == 5


def test_expect_near_refuses_integer_values_naming_the_line():
    @xsim.kernel(module="lib15_bad_expect")
    def bad(k: xsim.array(dtype=xsim.int32)):
        xsim.expect_near(k[0], 2)

    with pytest.raises(xsim.CompileError, match=r"expect_near\(\) compares float values, got int32") as info:
        xsim.launch(bad, 1, inputs=[xsim.zeros(1, dtype=xsim.int32)])
    assert f"{__file__}:{bad.pyfunc.__code__.co_firstlineno + 2}" in str(info.value)


def test_expect_eq_of_two_types_is_refused_with_warps_wording():
    @xsim.kernel(module="lib15_bad_expect")
    def mixed(k: xsim.array(dtype=xsim.int32)):
        xsim.expect_neq(xsim.vec3f(0.0, 0.0, 0.0), xsim.vec2f(0.0, 0.0))

    with pytest.raises(xsim.CompileError, match=r"got vec3f and vec2f: Can't test equality for objects with "
                                                r"different types$"):
        xsim.launch(mixed, 1, inputs=[xsim.zeros(1, dtype=xsim.int32)])


COPY = """
import xsim


@xsim.kernel
def same(x: xsim.array(dtype=float)):
    xsim.expect_eq(x[0], 1.0)
"""


def test_the_same_source_in_two_places_prints_each_ones_own_file(tmp_path, capfd):
    # the cache is keyed on content: a copy elsewhere (another checkout) must not load the code that
    # prints the first copy's path
    printed = []
    for place in ("a", "b"):
        path = tmp_path / place / "copy_of_kernels.py"
        path.parent.mkdir()
        path.write_text(COPY)
        spec = importlib.util.spec_from_file_location("copy_of_kernels", path)  # one name, as in two checkouts
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        xsim.launch(mod.same, 1, inputs=[xsim.array([2.0], dtype=float)])
        printed.append((str(path), capfd.readouterr().out))
    for path, out in printed:
        assert f"Error, expect_eq() failed at {path}:7:" in out


PRINTF_SOURCE = """
import {engine} as m


@m.kernel
def prints(x: m.array(dtype=float), n: m.int64, u: m.uint8, v: m.array(dtype=m.vec3)):
    t = m.tid()
    m.printf("t=%d x=%f g=%g n=%lld u=%u lit=%d %.2e|%5.1f\\n", t, x[t], x[t] * 2.0, n, u, 7, v[t][1], 2.5)
    m.printf("no values\\n")
"""


def _printed(engine, capfd):
    from xsim.kernels.generated import load_source  # (imported here: a line above would move the kernels')
    kernel = load_source(PRINTF_SOURCE.format(engine=engine.__name__), f"printf_{engine.__name__}").prints
    capfd.readouterr()
    engine.launch(kernel, 1, inputs=[engine.array(np.array([1.25], np.float32)), 12345678901, 200,
                                     engine.array(np.array([[0.0, -3.5e-4, 0.0]], np.float32), dtype=engine.vec3)],
                  device="cpu")
    engine.synchronize()
    return capfd.readouterr().out


def test_printf_prints_as_cs_printf(capfd):
    # Python's % formatting is C's printf for these conversions
    values = (0, 1.25, 2.5, 12345678901, 200, 7, np.float32(-3.5e-4), 2.5)
    want = "t=%d x=%f g=%g n=%d u=%u lit=%d %.2e|%5.1f\n" % values  # noqa: UP031
    assert _printed(xsim, capfd) == want + "no values\n"


def test_printf_prints_what_warp_prints(capfd):
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    _printed(wp, capfd)  # the first launch also prints Warp's initialisation and module load
    assert _printed(xsim, capfd) == _printed(wp, capfd)


def test_printf_of_halves_and_bools_passes_them_as_c_promotes_them(capfd):
    @xsim.kernel(module="xsim_tests_printf_promotions")
    def halves(x: xsim.array(dtype=xsim.float16)):
        xsim.printf("%.3f %d %d\n", x[0], x[0] > xsim.float16(1.0), xsim.int8(-5))

    capfd.readouterr()
    xsim.launch(halves, 1, inputs=[xsim.array(np.array([1.25], np.float16))])
    assert capfd.readouterr().out == "1.250 1 -5\n"  # (Warp 1.19 passes a half's 16 bits: 0.000)


def test_printf_refuses_a_vector_and_a_format_that_is_not_a_literal():
    @xsim.kernel(module="xsim_tests_printf_refused")
    def vector(v: xsim.array(dtype=xsim.vec3)):
        xsim.printf("%f\n", v[0])

    with pytest.raises(xsim.CompileError, match=r"printf\(\) prints scalars, got vec3f: pass its components"):
        xsim.launch(vector, 1, inputs=[xsim.zeros(1, dtype=xsim.vec3)])
