"""``min``, ``max`` and ``clamp`` of floats treat a NaN operand as missing, as C's ``fmin``/``fmax`` and Warp
1.19 do (Warp's native ``min``/``max`` are ``fmin``/``fmax`` on floats, ``clamp(x, lo, hi)`` is
``fmin(fmax(lo, x), hi)``; run on its CPU: ``clamp(nan, 0, 1) == 0``, ``min(nan, 0) == 0``, ``min(nan, nan)``
is NaN, ``clamp(-1, 3, 1) == 1``). The reference is numpy's ``fmin``/``fmax``; the same source also runs
on Warp where it is installed. The gradient goes to the operand that was picked, as in Warp."""

from __future__ import annotations

import numpy as np
import pytest

import xsim
from xsim.kernels.generated import load_source

SOURCE = '''
import {engine} as m


@m.kernel
def min_max_clamp(x: m.array(dtype=float), y: m.array(dtype=float), f32: m.array(dtype=float, ndim=2),
                  f64: m.array(dtype=m.float64, ndim=2), f16: m.array(dtype=m.float16, ndim=2),
                  vec: m.array(dtype=m.vec3, ndim=2)):
    t = m.tid()
    a = x[t]
    b = y[t]
    f32[t, 0] = m.min(a, b)
    f32[t, 1] = m.max(a, b)
    f32[t, 2] = m.clamp(a, b, 1.0)
    f32[t, 3] = m.clamp(b, a, 1.0)
    f32[t, 4] = m.clamp(1.0, a, b)
    f32[t, 5] = m.clamp(0.5, a, b)
    a64 = m.float64(a)
    b64 = m.float64(b)
    f64[t, 0] = m.min(a64, b64)
    f64[t, 1] = m.max(a64, b64)
    f64[t, 2] = m.clamp(a64, b64, m.float64(1.0))
    a16 = m.float16(a)
    b16 = m.float16(b)
    f16[t, 0] = m.min(a16, b16)
    f16[t, 1] = m.max(a16, b16)
    f16[t, 2] = m.clamp(a16, b16, m.float16(1.0))
    v = m.vec3(a, b, 2.0)
    u = m.vec3(b, a, -1.0)
    vec[t, 0] = m.min(v, u)
    vec[t, 1] = m.max(v, u)
    vec[t, 2] = m.vec3(m.min(v), m.max(v), 0.0)
'''

NAN = np.nan
X = np.array([NAN, 0.3, NAN, 2.0, -1.0, 0.5, 0.25], np.float32)
Y = np.array([0.0, NAN, NAN, NAN, 3.0, 0.2, 0.25], np.float32)


def _run(engine):
    mod = load_source(SOURCE.format(engine=engine.__name__), f"min_max_nan_{engine.__name__}")
    n = len(X)
    out = [engine.zeros((n, 6), dtype=engine.float32), engine.zeros((n, 3), dtype=engine.float64),
           engine.zeros((n, 3), dtype=engine.float16), engine.zeros((n, 3), dtype=engine.vec3)]
    engine.launch(mod.min_max_clamp, n, inputs=[engine.array(X), engine.array(Y), *out], device="cpu")
    return [o.numpy() for o in out]


def _clamp(x, lo, hi):
    return np.fmin(np.fmax(lo, x), hi)


def _nan_skipping(v, pick):
    kept = v[~np.isnan(v)]
    return pick(kept) if kept.size else np.nan


def test_min_max_clamp_of_nan_are_cs_fmin_and_fmax():
    f32, f64, f16, vec = _run(xsim)
    one = np.float32(1.0)
    np.testing.assert_array_equal(f32[:, 0], np.fmin(X, Y))
    np.testing.assert_array_equal(f32[:, 1], np.fmax(X, Y))
    np.testing.assert_array_equal(f32[:, 2], _clamp(X, Y, one))
    np.testing.assert_array_equal(f32[:, 3], _clamp(Y, X, one))
    np.testing.assert_array_equal(f32[:, 4], _clamp(one, X, Y))
    np.testing.assert_array_equal(f32[:, 5], _clamp(np.float32(0.5), X, Y))
    assert f32[0, 2] == 0.0 and f32[4, 2] == 1.0  # the clamp(nan, 0, 1) == 0; lo > hi gives hi
    x64, y64 = X.astype(np.float64), Y.astype(np.float64)
    np.testing.assert_array_equal(f64, np.stack([np.fmin(x64, y64), np.fmax(x64, y64), _clamp(x64, y64, 1.0)], 1))
    x16, y16 = X.astype(np.float16), Y.astype(np.float16)
    np.testing.assert_array_equal(f16, np.stack([np.fmin(x16, y16), np.fmax(x16, y16),
                                                 _clamp(x16, y16, np.float16(1))], 1))
    v = np.stack([X, Y, np.full_like(X, 2.0)], 1)
    u = np.stack([Y, X, np.full_like(X, -1.0)], 1)
    np.testing.assert_array_equal(vec[:, 0], np.fmin(v, u))
    np.testing.assert_array_equal(vec[:, 1], np.fmax(v, u))
    np.testing.assert_array_equal(vec[:, 2, 0], [_nan_skipping(r, np.min) for r in v])
    np.testing.assert_array_equal(vec[:, 2, 1], [_nan_skipping(r, np.max) for r in v])


def test_min_max_clamp_of_nan_equal_warp():
    wp = pytest.importorskip("warp")
    wp.config.quiet = True
    for got, want in zip(_run(xsim), _run(wp)):
        np.testing.assert_array_equal(got, want)


@xsim.kernel(module="xsim_tests_min_max_nan_grad")
def picks(x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64), out: xsim.array(dtype=xsim.float64)):
    t = xsim.tid()
    out[t] = 2.0 * xsim.min(x[t], y[t]) + 3.0 * xsim.max(x[t], y[t]) + 5.0 * xsim.clamp(x[t], y[t], 1.0)


def test_the_gradient_goes_to_the_operand_picked_and_never_to_a_nan():
    x = xsim.array(np.array([NAN, 0.3, 0.8, 2.0]), dtype=xsim.float64, requires_grad=True)
    y = xsim.array(np.array([0.0, NAN, 0.5, 0.5]), dtype=xsim.float64, requires_grad=True)
    out = xsim.zeros(4, dtype=xsim.float64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(picks, 4, inputs=[x, y, out])
    tape.backward(grads={out: xsim.array(np.ones(4), dtype=xsim.float64)})
    # min picks y, x, y, y; max picks y, x, x, x; clamp picks lo (y), x, x, hi
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 2.0 + 3.0 + 5.0, 3.0 + 5.0, 3.0])
    np.testing.assert_array_equal(y.grad.numpy(), [2.0 + 3.0 + 5.0, 0.0, 2.0, 2.0])
