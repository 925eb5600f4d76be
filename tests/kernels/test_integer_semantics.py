"""Integer arithmetic never kills the process and never stores a value that does not fit: division
and modulo by zero and ``INT_MIN // -1`` have defined results in release mode (``x / 0 == x // 0 ==
0``, ``x % 0 == x``, the quotient of ``INT_MIN`` by -1 wraps to ``INT_MIN``) and raise
``ZeroDivisionError`` naming the kernel and line in debug mode; arithmetic wraps at the declared
width; a launch argument out of range for its integer parameter is a ``ValueError``."""

import inspect
import re

import numpy as np
import pytest
from reference import run as reference_run

import xsim

MODULE = "xsim_tests_integer_semantics"
INT_MIN, INT_MAX = -2**31, 2**31 - 1


@xsim.kernel(module=MODULE)
def divide(a: xsim.array(dtype=int), b: xsim.array(dtype=int), out: xsim.array(dtype=int, ndim=2)):
    i = xsim.tid()
    x = a[i]
    y = b[i]
    out[i, 0] = x / y
    out[i, 1] = x // y
    out[i, 2] = x % y
    out[i, 3] = x * y + INT_MAX  # wraps
    out[i, 4] = -x


@xsim.kernel(module=MODULE)
def divide_int8(a: xsim.array(dtype=xsim.int8), b: xsim.array(dtype=xsim.int8), out: xsim.array(dtype=xsim.int8, ndim=2)):
    i = xsim.tid()
    out[i, 0] = a[i] / b[i]
    out[i, 1] = a[i] // b[i]
    out[i, 2] = a[i] % b[i]


@xsim.kernel(module=MODULE)
def divide_vector(v: xsim.array(dtype=xsim.vec3i), s: int, out: xsim.array(dtype=xsim.vec3i)):
    i = xsim.tid()
    out[i] = v[i] / s


@xsim.kernel(module=MODULE)
def scale(x: xsim.array(dtype=float), k: int, big: xsim.int64):
    i = xsim.tid()
    x[i] = float(k) + float(big)


A = np.array([7, -7, 7, -7, 5, -5, 0, INT_MIN, INT_MIN, INT_MIN, INT_MAX, 3], dtype=np.int32)
B = np.array([2, 2, -2, -2, 0, 0, 0, -1, 1, 0, -1, 7], dtype=np.int32)


def test_division_results_are_defined_and_match_the_reference():
    out = xsim.zeros((len(A), 5), dtype=int)
    xsim.launch(divide, len(A), inputs=[xsim.array(A), xsim.array(B), out])
    got = out.numpy()
    expected = np.array([
        # x / y (truncates), x // y (floors), x % y (sign of x)
        [3, 3, 1], [-3, -4, -1], [-3, -4, 1], [3, 3, -1],
        [0, 0, 5], [0, 0, -5], [0, 0, 0],                       # by zero: 0, 0 and x
        [INT_MIN, INT_MIN, 0], [INT_MIN, INT_MIN, 0], [0, 0, INT_MIN],  # INT_MIN / -1 wraps
        [-INT_MAX, -INT_MAX, 0], [0, 0, 3]])
    np.testing.assert_array_equal(got[:, :3], expected)
    wrapped = (A.astype(np.int64) * B + INT_MAX + 2**31) % 2**32 - 2**31
    np.testing.assert_array_equal(got[:, 3], wrapped)
    np.testing.assert_array_equal(got[:, 4], np.where(A == INT_MIN, INT_MIN, -A.astype(np.int64)))
    ref = np.zeros((len(A), 5), np.int32)
    reference_run(divide, len(A), [A.copy(), B.copy(), ref])
    np.testing.assert_array_equal(got, ref)


def test_narrow_integer_division_follows_the_same_rules():
    a = np.array([-128, -128, 100, -7, 9], dtype=np.int8)
    b = np.array([-1, 0, 0, 2, -4], dtype=np.int8)
    out = xsim.zeros((5, 3), dtype=xsim.int8)
    xsim.launch(divide_int8, 5, inputs=[xsim.array(a), xsim.array(b), out])
    np.testing.assert_array_equal(out.numpy(), [[-128, -128, 0], [0, 0, -128], [0, 0, 100], [-3, -4, -1],
                                                [-2, -3, 1]])


def test_vector_divided_by_integer_zero_is_zero():
    v = xsim.array(np.array([[3, -4, 5]], dtype=np.int32), dtype=xsim.vec3i)
    out = xsim.zeros(1, dtype=xsim.vec3i)
    xsim.launch(divide_vector, 1, inputs=[v, 0, out])
    np.testing.assert_array_equal(out.numpy(), [[0, 0, 0]])
    xsim.launch(divide_vector, 1, inputs=[v, -2, out])
    np.testing.assert_array_equal(out.numpy(), [[-1, 2, -2]])


@pytest.fixture
def debug(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")


def _line(kernel, text):
    lines, first = inspect.getsourcelines(kernel.pyfunc)
    return first + next(n for n, s in enumerate(lines) if text in s)


@pytest.mark.parametrize("zero_at, text", [(4, "out[i, 0] = x / y"), (5, "out[i, 0] = x / y")])
def test_debug_mode_raises_zero_division_error_naming_kernel_and_line(debug, zero_at, text):
    b = np.array([1, 2, 3, 4, 5, 6], dtype=np.int32)
    b[zero_at] = 0
    out = xsim.zeros((6, 5), dtype=int)
    with pytest.raises(ZeroDivisionError) as info:
        xsim.launch(divide, 6, inputs=[xsim.array(A[:6]), xsim.array(b), out])
    assert str(info.value) == (f"kernel 'divide' ({__file__}:{_line(divide, text)}): integer division or "
                               f"modulo by zero")
    # the next launch without a zero divisor is clean
    xsim.launch(divide, 6, inputs=[xsim.array(A[:6]), xsim.array(np.ones(6, np.int32)), out])


def test_debug_mode_names_the_floordiv_and_mod_lines_too(debug):
    out = xsim.zeros((1, 3), dtype=xsim.int8)
    with pytest.raises(ZeroDivisionError, match=rf"kernel 'divide_int8' \(.*:{_line(divide_int8, '/ b[i]')}\)"):
        xsim.launch(divide_int8, 1, inputs=[xsim.array(np.array([1], np.int8)), xsim.array(np.array([0], np.int8)),
                                             out])


@pytest.mark.parametrize("k, big, name, message", [
    (2**40, 0, "k", "1099511627776 does not fit in int32 (-2147483648 to 2147483647)"),
    (-2**31 - 1, 0, "k", "-2147483649 does not fit in int32"),
    (np.int64(2**31), 0, "k", "2147483648 does not fit in int32"),
    (0, 2**63, "big", "9223372036854775808 does not fit in int64"),
])
def test_launch_argument_out_of_range_is_a_value_error(k, big, name, message):
    x = xsim.zeros(1, dtype=float)
    xsim.launch(scale, 1, inputs=[x, 1, 2])  # a first launch, so the fast path is warm
    with pytest.raises(ValueError, match=re.escape(f"kernel 'scale' parameter '{name}': {message}")):
        xsim.launch(scale, 1, inputs=[x, k, big])
    assert x.numpy()[0] == 3.0  # nothing was stored


def test_launch_arguments_at_the_ends_of_the_range_are_accepted():
    x = xsim.zeros(1, dtype=float)
    xsim.launch(scale, 1, inputs=[x, INT_MIN, 2**63 - 1])
    assert x.numpy()[0] == np.float32(float(INT_MIN) + float(2**63 - 1))


@xsim.kernel(module=MODULE)
def wrapping_literals(u: xsim.array(dtype=xsim.uint32), s: xsim.array(dtype=xsim.int8),
                      b: xsim.array(dtype=xsim.vec3ub), q: xsim.array(dtype=xsim.int64)):
    u[0] = xsim.uint32(-1)                       # explicit conversions of literals wrap, as Warp's and C's
    u[1] = xsim.uint32(2**32 + 5)
    s[0] = xsim.int8(200)
    s[1] = xsim.int8(-129)
    b[0] = xsim.vec3ub(-1, 256, 3)               # and so do a constructor's literal components
    q[0] = xsim.int64(2**64 - 1)


def test_explicit_conversions_of_out_of_range_literals_wrap_like_numpy():
    u, s = xsim.zeros(2, dtype=xsim.uint32), xsim.zeros(2, dtype=xsim.int8)
    b, q = xsim.zeros(1, dtype=xsim.vec3ub), xsim.zeros(1, dtype=xsim.int64)
    xsim.launch(wrapping_literals, 1, inputs=[u, s, b, q])
    wrap = lambda v, dt: np.array([v], dtype=np.uint64 if v >= 2**63 else np.int64).astype(dt)[0]
    np.testing.assert_array_equal(u.numpy(), [wrap(-1, np.uint32), wrap(2**32 + 5, np.uint32)])
    np.testing.assert_array_equal(s.numpy(), [wrap(200, np.int8), wrap(-129, np.int8)])
    np.testing.assert_array_equal(b.numpy()[0], [wrap(-1, np.uint8), wrap(256, np.uint8), 3])
    assert q.numpy()[0] == wrap(2**64 - 1, np.int64) == -1


@xsim.kernel(module="xsim_tests_negated_typed_constants")
def negated_typed_constants(y: xsim.array(dtype=xsim.int64)):
    lo = int(-2147483647 - 1)  # noqa: RUF046 (a typed int32, not a literal)
    y[0] = xsim.int64(-lo)
    y[1] = xsim.int64(-xsim.uint32(1))
    y[2] = xsim.int64(1) if lo < -lo else xsim.int64(0)  # a folded comparison sees the wrapped value too
    y[3] = xsim.int64(-xsim.int8(-128))


def test_negating_a_typed_constant_wraps_at_its_width_as_at_run_time():
    y = xsim.zeros(4, dtype=xsim.int64)
    xsim.launch(negated_typed_constants, 1, inputs=[y])
    with np.errstate(over="ignore"):
        lo = np.int32(-2**31)
        want = [-lo, -np.uint32(1), int(lo < -lo), -np.int8(-128)]
    np.testing.assert_array_equal(y.numpy(), np.array(want, np.int64))
    assert y.numpy()[0] == -2**31 and y.numpy()[1] == 2**32 - 1
