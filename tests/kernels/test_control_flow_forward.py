"""Forward results of control flow (break/continue inside unrolled and dynamic loops, reused loop
variable names, names first assigned in a loop read after it) equal plain Python running the same
source, and the host reference (reference.py)."""

import numpy as np
import pytest
from reference import run as reference_run

import xsim
from xsim.autodiff.gradcheck import gradcheck
from xsim.kernels.generated import load_source

MODULE = "xsim_tests_control_flow_forward"


@xsim.kernel(module=MODULE)
def break_after_continue_unrolled(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    s = float(0.0)
    for i in range(8):  # constant bound: unrolled
        if i % 2 == 1:
            continue
        if i >= 5:
            break
        s += x[i]
    y[0] = s


@xsim.kernel(module=MODULE)
def two_dynamic_loops_in_static_loop(x: xsim.array(dtype=xsim.float64), n: int, y: xsim.array(dtype=xsim.float64)):
    s = x[0] * 0.0
    for j in range(3):
        s += x[j]
    for i0 in range(4):
        for j in range(n):  # the name of an earlier loop's variable
            if x[j] > 0.5:
                continue
            s += x[j] * 0.25
        for j in range(n):
            if s > 2.0:
                break
            s = s * 0.5 + x[j]
    y[0] = s


@xsim.kernel(module=MODULE)
def exits_at_every_depth(x: xsim.array(dtype=int), n: int, y: xsim.array(dtype=int)):
    t = 0
    for a in range(3):
        if a == 1:
            continue
        for b in range(n):
            if b % 3 == 2:
                continue
            k = 0
            while k < n:
                k += 1
                if x[k % 8] < 0:
                    continue
                if k > b + a:
                    break
                t += x[k % 8] * (a + 1)
            if t > 40:
                break
        if t > 60:
            break
    y[0] = t


@xsim.kernel(module=MODULE)
def loop_variables_after_their_loops(n: int, y: xsim.array(dtype=int)):
    k = 7
    for k in range(n):  # dynamic: k is the last value it took, or 7 when the loop did not run
        if k == 5:
            break
    y[0] = k
    j = -1
    for j in range(4):  # unrolled: the break at j == n leaves j there
        if j == n:
            break
    y[1] = j
    for j in range(n, 0, -2):
        y[2] += j
    y[3] = j


@xsim.kernel(module=MODULE)
def chained_comparison_with_a_constant_link(x: xsim.array(dtype=int), y: xsim.array(dtype=int)):
    i = xsim.tid()
    y[i] = 0
    if x[i] < 1 <= -1:  # the second link is known false: the chain is false whatever x is
        y[i] = 1
    if x[i] < 3 < 5:  # the second link is known true: the chain is the first link
        y[i] += 10


@xsim.func
def triple(a: int) -> int:
    return a * 3


@xsim.kernel(module=MODULE)
def typed_literals_wrap(y: xsim.array(dtype=int)):
    y[0] = int(-2147483647 - 1) * 3  # an int32 value, not a literal: wraps like any int32 product
    y[1] = triple(-2147483647 - 1)  # the annotation types the literal argument


@xsim.kernel(module=MODULE)
def empty_loop_reusing_an_outer_name(n: int, y: xsim.array(dtype=float)):
    i = 5
    for _j in range(n):
        for i in range(20, 0):  # empty: never rebinds i, which the dynamic loop mutates
            y[1] = float(i)
        i = i + 1
    y[0] = float(i)


@xsim.kernel(module=MODULE)
def first_assigned_in_nested_branches(x: xsim.array(dtype=float), n: int, y: xsim.array(dtype=float)):
    for k in range(n):
        v = x[k]
        if v > 0.0:
            if v > 10.0:
                r = 100.0
            else:
                r = 1.0
        else:
            if v < -10.0:
                r = -100.0
            else:
                r = -1.0
        y[k] = r

def _check(kernel, args, out_index):
    """Launch ``kernel``; the output equals plain Python and the host reference on the same inputs."""
    host = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel.pyfunc(*host)  # plain Python: these kernels use only Python constructs
    ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    reference_run(kernel, 1, ref)
    dev = [xsim.array(a) if isinstance(a, np.ndarray) else a for a in args]
    xsim.launch(kernel, 1, inputs=dev)
    got = dev[out_index].numpy()
    np.testing.assert_allclose(got, host[out_index], rtol=1e-6)
    np.testing.assert_allclose(ref[out_index], host[out_index], rtol=1e-6)


def test_break_after_continue_in_unrolled_loop_stops_the_loop():
    x = np.arange(8, dtype=np.float32)
    _check(break_after_continue_unrolled, [x, np.zeros(1, np.float32)], 1)
    y = xsim.zeros(1, dtype=float)
    xsim.launch(break_after_continue_unrolled, 1, inputs=[xsim.array(x), y])
    assert y.numpy()[0] == 6.0  # 0 + 2 + 4: the break at i = 6 ends the loop


def test_two_dynamic_loops_with_continue_and_break_inside_a_static_loop():
    x = np.array([0.1, 0.7, 0.2, 0.9, 0.05, 0.3])
    for n in (0, 1, 4, 6):
        _check(two_dynamic_loops_in_static_loop, [x, n, np.zeros(1)], 2)


def test_break_and_continue_at_every_depth_of_three_nested_loops():
    x = np.array([3, -1, 4, 1, -5, 9, 2, -6], dtype=np.int32)
    for n in (0, 2, 5, 9):
        _check(exits_at_every_depth, [x, n, np.zeros(1, np.int32)], 2)


def test_loop_variables_keep_their_last_value_after_the_loop():
    for n in (0, 1, 3, 8):
        _check(loop_variables_after_their_loops, [n, np.zeros(4, np.int32)], 1)



def test_an_empty_constant_loop_does_not_rebind_a_name_an_enclosing_dynamic_loop_mutates():
    for n in (0, 1, 3):
        _check(empty_loop_reusing_an_outer_name, [n, np.zeros(2, np.float32)], 1)


def test_a_name_first_assigned_in_nested_branches_takes_each_paths_value():
    x = np.array([20.0, 5.0, -5.0, -20.0, 0.0, 10.0, -10.0], np.float32)
    _check(first_assigned_in_nested_branches, [x, len(x), np.zeros(len(x), np.float32)], 2)

def test_chained_comparison_with_a_known_link():
    x = np.array([-5, 0, 1, 2, 3, 7], dtype=np.int32)
    y = xsim.zeros(6, dtype=int)
    xsim.launch(chained_comparison_with_a_constant_link, 6, inputs=[xsim.array(x), y])
    np.testing.assert_array_equal(y.numpy(), np.where(x < 3, 10, 0))
    ref = np.zeros(6, np.int32)
    reference_run(chained_comparison_with_a_constant_link, 6, [x, ref])
    np.testing.assert_array_equal(ref, y.numpy())


def test_typed_literals_wrap_at_their_width():
    y = xsim.zeros(2, dtype=int)
    xsim.launch(typed_literals_wrap, 1, inputs=[y])
    np.testing.assert_array_equal(y.numpy(), [-2**31, -2**31])  # -3 * 2**31 wraps to -2**31
    ref = np.zeros(2, np.int32)
    reference_run(typed_literals_wrap, 1, [ref])
    np.testing.assert_array_equal(ref, y.numpy())


@xsim.kernel(module=MODULE)
def reversed_ranges(bounds: xsim.array(dtype=xsim.vec3i), out: xsim.array2d(dtype=int),
                    counts: xsim.array(dtype=int)):
    t = xsim.tid()
    b = bounds[t]
    k = 0
    for i in reversed(range(b[0], b[1], b[2])):
        out[t, k] = i
        k += 1
    counts[t] = k
    for j in reversed(range(3)):  # constant bounds: unrolled
        out[t, 20 + j] = 2 - j
    for j in reversed(range(b[0], b[1], 3)):  # a constant positive step
        counts[t] += 100
    for j in reversed(range(b[0], b[1], -2)):  # a constant negative step
        counts[t] += 10000


def test_reversed_range_loops_visit_the_elements_of_pythons_reversed_range():
    cases = [(0, 7, 2), (3, 10, 3), (5, 5, 1), (7, 0, 2), (10, 0, -3), (0, 10, -1), (-4, 3, 1), (9, -2, -4)]
    out = xsim.full((len(cases), 23), -99, dtype=int)
    counts = xsim.zeros(len(cases), dtype=int)
    xsim.launch(reversed_ranges, len(cases), inputs=[xsim.array(cases, dtype=xsim.vec3i), out, counts])
    for t, (a, b, s) in enumerate(cases):
        want = list(reversed(range(a, b, s)))
        assert out.numpy()[t, :len(want)].tolist() == want
        assert counts.numpy()[t] == len(want) + 100 * len(range(a, b, 3)) + 10000 * len(range(a, b, -2))
        assert out.numpy()[t, 20:].tolist() == [2, 1, 0]


@xsim.kernel(module=MODULE)
def names_from_one_branch(x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    if x[i] > 0.0:
        s = x[i] * x[i]
        v = xsim.vec2d(x[i], 3.0 * x[i])
    else:
        t = 2.0 * x[i]
    y[i] = s + v[1] + t  # as in Warp, each name is defined after the if; the path that did not assign it
    # sees its type's zero


def test_a_name_assigned_in_one_branch_is_zero_on_the_other_path():
    x = np.array([-1.5, 0.0, 0.5, 2.0])
    y = xsim.zeros(4, dtype=xsim.float64)
    xsim.launch(names_from_one_branch, 4, inputs=[xsim.array(x, dtype=xsim.float64), y])
    np.testing.assert_allclose(y.numpy(), np.where(x > 0.0, x * x + 3.0 * x, 2.0 * x), rtol=1e-15)
    xg = xsim.array(x[[0, 2, 3]], dtype=xsim.float64, requires_grad=True)  # away from the kink at 0
    report = gradcheck(names_from_one_branch, [xg, xsim.zeros(3, dtype=xsim.float64, requires_grad=True)])
    assert report.passed, report


LOOP_LOCALS_SOURCE = """
import {engine} as m


@m.kernel
def loop_locals_after_the_loop(a: m.array(dtype=float), n: int, y: m.array(dtype=float, ndim=2)):
    t = m.tid()
    for i in range(n + t):
        x = a[i] * 2.0
        v = m.vec3(x, 1.0, 0.0)
        if a[i] > 2.5:
            break
    y[t, 0] = x
    y[t, 1] = v[0]
    j = int(0)
    while j < t:
        s = float(j) + 0.5
        j += 1
    y[t, 2] = s
    for q in range(3):
        z = a[q] + float(t)
    y[t, 3] = z
"""


def _loop_locals(engine, n):
    mod = load_source(LOOP_LOCALS_SOURCE.format(engine=engine.__name__), f"loop_locals_{engine.__name__}")
    y = engine.zeros((4, 4), dtype=engine.float32)
    engine.launch(mod.loop_locals_after_the_loop, 4,
                  inputs=[engine.array(np.array([1, 2, 3, 4, 5, 6, 7], np.float32)), n, y], device="cpu")
    return y.numpy()


def _loop_locals_in_python(n):
    """The kernel's body in Python, a name no iteration assigned being 0 (Python would raise NameError)."""
    a = np.array([1, 2, 3, 4, 5, 6, 7], np.float32)
    y = np.zeros((4, 4), np.float32)
    for t in range(4):
        x = v0 = s = 0.0
        for i in range(n + t):
            x = a[i] * 2.0
            v0 = x
            if a[i] > 2.5:
                break
        j = 0
        while j < t:
            s = j + 0.5
            j += 1
        for q in range(3):
            z = a[q] + t
        y[t] = [x, v0, s, z]
    return y


def test_a_name_first_assigned_in_a_loop_is_defined_after_it():
    for n in (0, 1, 3):
        np.testing.assert_array_equal(_loop_locals(xsim, n), _loop_locals_in_python(n))


def test_a_name_first_assigned_in_a_loop_equals_warp_where_the_loop_ran():
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    got, want = _loop_locals(xsim, 1), _loop_locals(wp, 1)
    np.testing.assert_array_equal(got[:, :2], want[:, :2])  # the for loop ran on every thread (n + t >= 1)
    np.testing.assert_array_equal(got[1:, 2:], want[1:, 2:])  # the while loop ran on threads t >= 1
    # (on thread 0 no iteration assigns s: xsim gives 0, Warp an uninitialised value)
