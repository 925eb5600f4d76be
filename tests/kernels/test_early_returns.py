"""A func that returns from inside a loop (``for`` or ``while``, dynamic or unrolled, at any depth of
nesting) gives the value of the ``return`` that ran, a tuple as well as a scalar, and a func may end in a
``while True:`` that only a ``return`` leaves: the same answers as the func's own Python source run by
Python, and as Warp 1.19 running the same source (where it is installed).

The kernels live in one source text (``SOURCE``) imported with ``m`` bound to xsim, and to Warp for the
comparison, so both engines compile exactly the same code."""

from __future__ import annotations

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck
from xsim.kernels.generated import load_source

SOURCE = '''
import {engine} as m


@m.func
def first_at_least(a: m.array(dtype=float), v: float) -> tuple[bool, int]:
    for i in range(a.shape[0]):
        if a[i] >= v:
            return True, i
    return False, -2


@m.func
def first_at_least_while(a: m.array(dtype=float), v: float) -> tuple[int, float]:
    i = int(0)
    while i < a.shape[0]:
        if a[i] >= v:
            return i, a[i] - v
        i += 1
    return -1, 0.5


@m.func
def pair_reaching(a: m.array(dtype=float), v: float) -> tuple[int, int, m.vec2]:
    for i in range(a.shape[0]):
        j = i + 1
        while j < a.shape[0]:
            if a[i] + a[j] >= v:
                return i, j, m.vec2(a[i], a[j])
            j += 1
    return -1, -1, m.vec2(0.0, 0.0)


@m.func
def last_below(a: m.array(dtype=float), v: float) -> int:
    if v <= 0.0:
        return -3
    for i in range(a.shape[0] - 1, -1, -1):
        if a[i] >= v:
            continue
        return i
    return -1


@m.func
def prefix_reaching(a: m.array(dtype=float), v: float) -> tuple[int, float]:
    s = float(0.0)
    for i in range(4):
        s += a[i]
        if s >= v:
            return i, s
    return 4, s


@m.func
def first_in_window(a: m.array(dtype=float), v: float, n: int) -> tuple[int, float]:
    for start in range(n):
        for i in range(start, a.shape[0]):
            if i - start > 1:
                break
            if a[i] * float(start + 1) >= v:
                return start * 10 + i, a[i]
    return -1, -1.0


@m.func
def collatz_steps(n: int) -> int:
    steps = int(0)
    while True:
        if n == 1:
            return steps
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1


@m.func
def first_power_above(n: int) -> tuple[int, float]:
    k = int(1)
    while True:
        for _ in range(2):
            if k > 1000:
                break  # leaves the for loop only: the while True still ends by returning
        k = k * 2
        if k > n:
            return k, float(k) * 0.5


@m.kernel
def forever(ints: m.array(dtype=int, ndim=2), floats: m.array(dtype=float)):
    t = m.tid()
    ints[t, 0] = collatz_steps(t + 1)
    k, h = first_power_above(t * 3)
    ints[t, 1] = k
    floats[t] = h


@m.kernel
def search(a: m.array(dtype=float), vs: m.array(dtype=float), n: int, ints: m.array(dtype=int, ndim=2),
           floats: m.array(dtype=float, ndim=2)):
    t = m.tid()
    v = vs[t]
    found, i = first_at_least(a, v)
    if found:
        ints[t, 0] = 1
    ints[t, 1] = i
    k, d = first_at_least_while(a, v)
    ints[t, 2] = k
    floats[t, 0] = d
    i0, j0, pair = pair_reaching(a, v)
    ints[t, 3] = i0
    ints[t, 4] = j0
    floats[t, 1] = pair[0] + 2.0 * pair[1]
    ints[t, 5] = last_below(a, v)
    p, s = prefix_reaching(a, v)
    ints[t, 6] = p
    floats[t, 2] = s
    w, x = first_in_window(a, v, n)
    ints[t, 7] = w
    floats[t, 3] = x
    total = int(0)
    for r in range(n):  # a func with a loop inlined in a kernel's dynamic loop
        hit, at = first_at_least(a, v - float(r))
        if hit:
            total += at + 1
    ints[t, 8] = total
'''

A = np.array([0.5, 1.0, 2.0, 3.0, 3.5, 4.0], np.float32)
VALUES = np.array([0.1, 1.5, 2.5, 3.2, 9.0, 10.0, -1.0, 4.0, 6.5, 7.5], np.float32)
N = 3


def _run(engine):
    mod = load_source(SOURCE.format(engine=engine.__name__), f"early_returns_{engine.__name__}")
    ints = engine.zeros((len(VALUES), 9), dtype=engine.int32)
    floats = engine.zeros((len(VALUES), 4), dtype=engine.float32)
    engine.launch(mod.search, len(VALUES), inputs=[engine.array(A), engine.array(VALUES), N, ints, floats],
                  device="cpu")
    return ints.numpy(), floats.numpy()


def _python():
    """The same funcs run by Python on numpy values (their undecorated source: plain Python here)."""
    mod = load_source(SOURCE.format(engine="xsim"), "early_returns_xsim")
    py = {name: getattr(mod, name).overloads[-1].pyfunc for name in
          ("first_at_least", "first_at_least_while", "pair_reaching", "last_below", "prefix_reaching",
           "first_in_window")}
    ints = np.zeros((len(VALUES), 9), np.int32)
    floats = np.zeros((len(VALUES), 4), np.float32)
    for t, v in enumerate(VALUES):
        found, ints[t, 1] = py["first_at_least"](A, v)
        ints[t, 0] = found
        ints[t, 2], floats[t, 0] = py["first_at_least_while"](A, v)
        ints[t, 3], ints[t, 4], pair = py["pair_reaching"](A, v)
        floats[t, 1] = pair[0] + 2.0 * pair[1]
        ints[t, 5] = py["last_below"](A, v)
        ints[t, 6], floats[t, 2] = py["prefix_reaching"](A, v)
        ints[t, 7], floats[t, 3] = py["first_in_window"](A, v, N)
        for r in range(N):
            hit, at = py["first_at_least"](A, v - np.float32(r))
            ints[t, 8] += at + 1 if hit else 0
    return ints, floats


def _run_forever(engine):
    mod = load_source(SOURCE.format(engine=engine.__name__), f"early_returns_{engine.__name__}")
    ints, floats = engine.zeros((12, 2), dtype=engine.int32), engine.zeros(12, dtype=engine.float32)
    engine.launch(mod.forever, 12, inputs=[ints, floats], device="cpu")
    return ints.numpy(), floats.numpy()


def test_funcs_ending_in_while_true_return_from_inside_it():
    mod = load_source(SOURCE.format(engine="xsim"), "early_returns_xsim")
    steps, power = mod.collatz_steps.overloads[-1].pyfunc, mod.first_power_above.overloads[-1].pyfunc
    ints, floats = _run_forever(xsim)
    np.testing.assert_array_equal(ints[:, 0], [steps(t + 1) for t in range(12)])
    np.testing.assert_array_equal(ints[:, 1], [power(t * 3)[0] for t in range(12)])
    np.testing.assert_array_equal(floats, [power(t * 3)[1] for t in range(12)])
    assert ints[6, 0] == 16  # 7 -> 22 -> 11 -> 34 -> 17 -> 52 -> 26 -> 13 -> 40 -> 20 -> 10 -> 5 -> 16 -> 8 -> 4 -> 2 -> 1


def test_funcs_ending_in_while_true_equal_warp():
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    for got, want in zip(_run_forever(xsim), _run_forever(wp)):
        np.testing.assert_array_equal(got, want)


@xsim.func
def breaks_out_of_while_true(n: int) -> int:
    while True:
        if n > 3:
            break
        n += 1


@xsim.kernel(module="xsim_tests_while_true_refused")
def while_true_with_a_break(y: xsim.array(dtype=int), n: int):
    y[0] = breaks_out_of_while_true(n)


def test_a_while_true_that_a_break_leaves_must_be_followed_by_a_return():
    with pytest.raises(xsim.CompileError, match="can reach its end without returning a value"):
        xsim.launch(while_true_with_a_break, 1, inputs=[xsim.zeros(1, dtype=int), 4])


def test_the_issues_first_at_least_returns_the_index_found_inside_the_loop():
    ints, _ = _run(xsim)
    # A = [0.5, 1, 2, 3, 3.5, 4]: the first element >= 0.1, 1.5, 2.5, 3.2 is at 0, 2, 3, 4; none reaches 9 or 10
    np.testing.assert_array_equal(ints[:6, 1], [0, 2, 3, 4, -2, -2])
    np.testing.assert_array_equal(ints[:6, 0], [1, 1, 1, 1, 0, 0])


def test_early_returns_from_loops_equal_python():
    ints, floats = _run(xsim)
    want_ints, want_floats = _python()
    np.testing.assert_array_equal(ints, want_ints)
    np.testing.assert_allclose(floats, want_floats, rtol=1e-6)


def test_early_returns_from_loops_equal_warp():
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    ints, floats = _run(xsim)
    want_ints, want_floats = _run(wp)
    np.testing.assert_array_equal(ints, want_ints)
    np.testing.assert_array_equal(floats, want_floats)


@xsim.func
def damped_until(x: xsim.float64, limit: xsim.float64, n: int) -> tuple[int, xsim.float64]:
    y = x
    for k in range(n):
        y = y * 0.75 + xsim.sin(y)
        if y > limit:
            return k, y * y
    return n, y


@xsim.kernel(module="xsim_tests_early_returns")
def damped(x: xsim.array(dtype=xsim.float64), n: int, y: xsim.array(dtype=xsim.float64)):
    t = xsim.tid()
    k, v = damped_until(x[t], xsim.float64(2.2), n)
    y[t] = v * xsim.float64(k + 1)


def test_the_gradient_through_a_tuple_returned_inside_a_loop_equals_finite_differences():
    x = xsim.array(np.array([0.3, 0.9, 1.4, 2.5, -0.7]), dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(5, dtype=xsim.float64, requires_grad=True)
    xsim.launch(damped, 5, inputs=[x, 6, y])
    py = damped_until.overloads[-1].pyfunc
    want = [(k + 1) * v for k, v in (py(a, np.float64(2.2), 6) for a in x.numpy())]
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12)
    assert gradcheck(damped, [x, 6, y], dim=5, atol=1e-6).passed


@xsim.func
def tuple_or_single(n: int):
    for i in range(n):
        if i > 2:
            return i, 1
    return 0


@xsim.kernel(module="xsim_tests_early_returns_refused")
def returns_of_two_shapes(y: xsim.array(dtype=int), n: int):
    y[0] = tuple_or_single(n)


def test_returns_of_different_shapes_are_refused_naming_the_loop():
    with pytest.raises(xsim.CompileError, match=r"(?s)test_early_returns.py:\d+.*for i in range\(n\).*the returns "
                                                r"of this func give different kinds of value"):
        xsim.launch(returns_of_two_shapes, 1, inputs=[xsim.zeros(1, dtype=int), 4])
