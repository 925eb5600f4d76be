"""Chained comparisons (``a < b < c``, the middle evaluated once, Warp's all-operands evaluation),
comparisons of bools, a loop variable read after its loop (its last value, as in Python and Warp),
constant bool vectors and matrices indexed in kernels, and matrix rows written into array
elements; checked against plain Python running the same logic."""

import numpy as np
import pytest

import xsim
from xsim.kernels.generated import load_source

MODULE = "xsim_tests_comparisons_loops_constants"
N = 8
RNG = np.random.default_rng(23)

vec3b = xsim.types.vector(3, xsim.bool)
mat22b = xsim.types.matrix((2, 2), xsim.bool)
SELECT_VEC = xsim.constant(vec3b(True, False, True))
SELECT_MAT = xsim.constant(mat22b(True, False, False, True))


@xsim.func
def counted(x: float, calls: xsim.array(dtype=int), i: int):
    xsim.atomic_add(calls, i, 1)
    return x


@xsim.kernel(module=MODULE)
def comparisons(a: xsim.array(dtype=float), b: xsim.array(dtype=float), c: xsim.array(dtype=float),
                calls: xsim.array(dtype=int), out: xsim.array(dtype=int, ndim=2)):
    i = xsim.tid()
    x, z = a[i], c[i]
    out[i, 0] = int(x < counted(b[i], calls, i) <= z)       # the middle operand evaluated once
    out[i, 1] = int(x <= b[i] < z != x)
    out[i, 2] = int(0.0 < x > -1.0 == b[i] * 0.0 - 1.0)
    p, q = x > 0.0, z > 0.0
    out[i, 3] = int(p < q) + 2 * int(p <= q) + 4 * int(p > q) + 8 * int(p >= q) + 16 * int(p == q) + 32 * int(p != q)
    out[i, 4] = int(False < p <= True)


@xsim.kernel(module=MODULE)
def loop_variables(n: int, out: xsim.array(dtype=int, ndim=2)):
    i = xsim.tid()
    for k in range(n + i):
        pass
    out[i, 0] = k                                        # last value, 0 when the loop did not run
    for j in range(3):
        pass
    out[i, 1] = j
    m = 100
    for m in range(i):
        pass
    out[i, 2] = m                                        # its value before the loop when the loop did not run
    for s in range(10):
        if s * s > i * 3:
            break
    out[i, 3] = s
    for t in range(n, 20, 3):
        if t > i + n:
            break
    out[i, 4] = t
    for u in range(i - n - 100):
        pass
    out[i, 5] = u                                        # never ran, no value before: 0, as in Warp


@xsim.kernel(module=MODULE)
def bool_constants(out: xsim.array(dtype=int), rows: xsim.array(dtype=mat22b), local_rows: xsim.array(dtype=mat22b)):
    i = xsim.tid()
    total = 0
    if SELECT_VEC[0]:
        total += 1
    if SELECT_VEC[1]:
        total += 2
    if SELECT_VEC[-1]:
        total += 4
    if SELECT_MAT[0, 0]:
        total += 8
    if SELECT_MAT[0, 1]:
        total += 16
    if SELECT_MAT[1, 1]:
        total += 32
    v = SELECT_VEC
    v[1] = True
    total += int(v[1]) * 64 + int(v == vec3b(True, True, True)) * 128
    out[i] = total
    row = xsim.types.vector(True, False)
    rows[i][1] = row                                     # a matrix row stored into an array element
    m = mat22b()
    m[1] = row
    m[0, 1] = True
    local_rows[i] = m


def test_chained_comparisons_and_bool_comparisons_match_python():
    a, b, c = (np.round(RNG.uniform(-2, 2, N), 0).astype(np.float32) for _ in range(3))
    calls, out = xsim.zeros(N, dtype=int), xsim.zeros((N, 5), dtype=int)
    xsim.launch(comparisons, N, inputs=[xsim.array(a), xsim.array(b), xsim.array(c), calls, out])
    exp = []
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        p, q = x > 0.0, z > 0.0
        exp.append([int(x < y <= z), int(x <= y < z != x), int(0.0 < x > -1.0 == y * 0.0 - 1.0),
                    int(p < q) + 2 * int(p <= q) + 4 * int(p > q) + 8 * int(p >= q) + 16 * int(p == q)
                    + 32 * int(p != q), int(False < p <= True)])
    np.testing.assert_array_equal(out.numpy(), exp)
    np.testing.assert_array_equal(calls.numpy(), np.ones(N))


def test_loop_variables_keep_their_last_value_after_the_loop():
    n = 3
    out = xsim.zeros((N, 6), dtype=int)
    xsim.launch(loop_variables, N, inputs=[n, out])
    exp = []
    for i in range(N):
        row = [0] * 6
        for k in range(n + i):
            row[0] = k
        row[1] = 2
        m = 100
        for m in range(i):
            pass
        row[2] = m
        for s in range(10):
            if s * s > i * 3:
                break
        row[3] = s
        for t in range(n, 20, 3):
            if t > i + n:
                break
        row[4] = t
        exp.append(row)
    np.testing.assert_array_equal(out.numpy(), exp)


def test_constant_bool_vectors_and_matrices_index_like_python():
    out, rows, local_rows = xsim.zeros(2, dtype=int), xsim.zeros(2, dtype=mat22b), xsim.zeros(2, dtype=mat22b)
    xsim.launch(bool_constants, 2, inputs=[out, rows, local_rows])
    np.testing.assert_array_equal(out.numpy(), [1 + 4 + 8 + 32 + 64 + 128] * 2)
    np.testing.assert_array_equal(rows.numpy(), [[[False, False], [True, False]]] * 2)
    np.testing.assert_array_equal(local_rows.numpy(), [[[False, True], [True, False]]] * 2)


POWERS_SOURCE = """
import {engine} as m


@m.kernel
def literal_powers(y: m.array(dtype=float)):
    y[0] = (-0.5) ** 2.2
    y[1] = (-8.0) ** (1.0 / 3.0)
    y[2] = (-2.0) ** 3.0
    y[3] = 0.0 ** -1.0
    y[4] = (-0.0) ** -1.0
    y[5] = 2.0 ** 0.5
"""
POWERS = [(-0.5, 2.2), (-8.0, 1.0 / 3.0), (-2.0, 3.0), (0.0, -1.0), (-0.0, -1.0), (2.0, 0.5)]


def _literal_powers(engine):
    kernel = load_source(POWERS_SOURCE.format(engine=engine.__name__), f"powers_{engine.__name__}").literal_powers
    y = engine.zeros(len(POWERS), dtype=engine.float32)
    engine.launch(kernel, 1, inputs=[y], device="cpu")
    return y.numpy()


def test_powers_of_literals_fold_as_cs_pow_nan_for_a_negative_base_and_a_fraction():
    with np.errstate(all="ignore"):
        want = np.array([np.power(np.float32(a), np.float32(b)) for a, b in POWERS], np.float32)
    assert np.isnan(want[0]) and np.isnan(want[1]) and want[3] == np.inf and want[4] == -np.inf
    np.testing.assert_array_equal(_literal_powers(xsim), want)


def test_powers_of_literals_equal_warp():
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    np.testing.assert_array_equal(_literal_powers(xsim), _literal_powers(wp))


MIXED_SOURCE = """
import {engine} as m


@m.kernel
def mixed_comparisons(x: m.array(dtype=float), xd: m.array(dtype=m.float64), r: int, big: m.int64,
                      y: m.array(dtype=int, ndim=2)):
    t = m.tid()
    d = x[t]
    n = int(t) - 2
    y[t, 0] = m.where(d < r, 1, 0)
    y[t, 1] = m.where(r <= d, 1, 0)
    y[t, 2] = m.where(d == n, 1, 0)
    y[t, 3] = m.where(n >= d, 1, 0)
    y[t, 4] = m.where(d != big, 1, 0)
    y[t, 5] = m.where(xd[t] < big, 1, 0)
    y[t, 6] = m.where(d > m.uint32(t), 1, 0)
"""
MIXED_X = np.array([-1.5, 2.0, 2.5, 16777216.0, 3.0], np.float32)
MIXED_XD = np.array([1.0, 16777216.0, 16777217.0, 16777218.0, 2.0])
BIG = 16777217  # 2**24 + 1: not a float32, so as float32 it is 2**24


def _mixed(engine):
    kernel = load_source(MIXED_SOURCE.format(engine=engine.__name__), f"mixed_{engine.__name__}").mixed_comparisons
    y = engine.zeros((len(MIXED_X), 7), dtype=engine.int32)
    engine.launch(kernel, len(MIXED_X), inputs=[engine.array(MIXED_X), engine.array(MIXED_XD, dtype=engine.float64),
                                                2, BIG, y], device="cpu")
    return y.numpy()


def test_an_int_compared_with_a_float_takes_the_floats_type():
    f32 = np.float32
    want = np.array([[d < f32(2), f32(2) <= d, d == f32(t - 2), f32(t - 2) >= d, d != f32(BIG), xd < np.float64(BIG),
                      d > f32(t)] for t, (d, xd) in enumerate(zip(MIXED_X, MIXED_XD))], np.int32)
    got = _mixed(xsim)
    np.testing.assert_array_equal(got, want)
    assert got[3, 4] == 0  # 16777216.0f != 16777217 is false in float32 (true in exact arithmetic)


def test_an_int_compared_with_a_float_equals_warp():
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    np.testing.assert_array_equal(_mixed(xsim), _mixed(wp))
