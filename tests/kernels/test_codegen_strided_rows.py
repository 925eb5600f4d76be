"""Adjoints of reads at ``a * tid + b`` (0 <= b < a, one ``a`` per array) add without atomics, since
thread t owns rows a t .. a t + a - 1; any other index keeps the atomic add. So do a func_grad's
``adjoint[a][tid, k] += e`` into the thread's own row, when no other access of ``a`` leaves it.
Gradients checked against the chain rule with two threads."""

import numpy as np
import pytest

import xsim
from xsim.kernels import threads as threads_mod
from xsim.kernels.codegen import PARAM_PREFIX


@xsim.kernel
def pair_product(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = x[2 * i] * x[2 * i + 1]


@xsim.kernel
def pair_and_own(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = x[2 * i] + x[i]  # thread 2k reads x[2k] as its own element: rows overlap


@xsim.kernel
def shifted_pair(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = x[2 * i + 2] * x[2 * i + 1]  # x[2i + 2] is thread i + 1's row


@xsim.func
def row_sum(a: xsim.array(dtype=float, ndim=2), i: int, n: int):
    s = xsim.float32(0.0)
    for k in range(n):
        s = s + a[i, k]
    return s


@xsim.func_grad(row_sum)
def row_sum_grad(a: xsim.array(dtype=float, ndim=2), i: int, n: int, adj: float):
    for k in range(n):
        xsim.adjoint[a][i, k] += adj * float(k + 1)  # a weight per slot, so a misplaced add shows


@xsim.kernel
def own_row_sum(a: xsim.array(dtype=float, ndim=2), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = row_sum(a, i, a.shape[1])


@xsim.kernel
def next_row_sum(a: xsim.array(dtype=float, ndim=2), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = row_sum(a, (i + 1) % a.shape[0], a.shape[1])  # thread i adds into thread i + 1's row


@xsim.struct
class Holder:
    x: xsim.array(dtype=float)


@xsim.kernel
def field_own_and_next(s: Holder, out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = s.x[i] * s.x[i + 1]  # s.x[i] is also thread i - 1's s.x[i + 1]


def _backward_source(kernel) -> str:
    src, _ = kernel.module.generate("cpu", False)
    start = src.index(f"void {kernel.symbol}_backward(")
    return src[start:src.index("\n}\n", start)]


@pytest.mark.parametrize("kernel, exclusive", [(pair_product, True), (pair_and_own, False), (shifted_pair, False)])
def test_only_disjoint_strided_rows_skip_the_atomic_add(kernel, exclusive):
    body = _backward_source(kernel)
    assert (f"grad_add_exclusive(G.{PARAM_PREFIX}x.data ? &(xs::at_sel<XS_CONTIG, float>(G.{PARAM_PREFIX}x" in body) == exclusive
    assert (f"xs::grad_add(&(xs::at_sel<XS_CONTIG, float>(G.{PARAM_PREFIX}x" in body) == (not exclusive)


@pytest.mark.parametrize("kernel", [pair_product, pair_and_own, shifted_pair])
def test_strided_reads_differentiate_exactly_with_two_threads(monkeypatch, kernel):
    monkeypatch.setattr(threads_mod, "_max_threads", 2)
    monkeypatch.setattr(threads_mod, "CALIBRATION_RUNS", 0)
    monkeypatch.setattr(threads_mod, "SERIAL_BELOW_S", 0.0)
    n = 20000
    x_np = np.random.default_rng(3).uniform(0.5, 1.5, 2 * n + 2).astype(np.float32)
    x = xsim.array(x_np, requires_grad=True)
    out = xsim.zeros(n, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(kernel, n, inputs=[x], outputs=[out])
    tape.backward(grads={out: np.ones(n, np.float32)})
    xd, i = x_np.astype(np.float64), np.arange(n)
    expected = np.zeros(2 * n + 2)
    if kernel is pair_product:
        np.add.at(expected, 2 * i, xd[2 * i + 1])
        np.add.at(expected, 2 * i + 1, xd[2 * i])
    elif kernel is pair_and_own:
        np.add.at(expected, 2 * i, 1.0)
        np.add.at(expected, i, 1.0)
    else:
        np.add.at(expected, 2 * i + 2, xd[2 * i + 1])
        np.add.at(expected, 2 * i + 1, xd[2 * i + 2])
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("kernel, exclusive", [(own_row_sum, True), (next_row_sum, False)])
def test_a_func_grad_adds_into_its_own_row_without_atomics(monkeypatch, kernel, exclusive):
    body = _backward_source(kernel)
    assert (f"grad_add_exclusive(G.{PARAM_PREFIX}a.data ? &(xs::at_sel<XS_CONTIG, float>(G.{PARAM_PREFIX}a" in body) == exclusive
    assert (f"xs::grad_add(&(xs::at_sel<XS_CONTIG, float>(G.{PARAM_PREFIX}a" in body) == (not exclusive)
    monkeypatch.setattr(threads_mod, "_max_threads", 2)
    monkeypatch.setattr(threads_mod, "CALIBRATION_RUNS", 0)
    monkeypatch.setattr(threads_mod, "SERIAL_BELOW_S", 0.0)
    n, width = 20000, 3
    a = xsim.zeros((n, width), dtype=float, requires_grad=True)
    out = xsim.zeros(n, dtype=float, requires_grad=True)
    seed = np.random.default_rng(4).uniform(0.5, 1.5, n).astype(np.float32)
    tape = xsim.Tape()
    with tape:
        xsim.launch(kernel, n, inputs=[a], outputs=[out])
    tape.backward(grads={out: seed})
    rows = np.arange(n) if kernel is own_row_sum else (np.arange(n) + 1) % n
    expected = np.zeros((n, width))
    expected[rows] = seed.astype(np.float64)[:, None] * np.arange(1, width + 1)
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-6)


def test_an_array_in_a_struct_read_off_the_own_row_anywhere_adds_atomically_everywhere(monkeypatch):
    body = _backward_source(field_own_and_next)
    assert f"G.{PARAM_PREFIX}s.x" in body and "grad_add_exclusive" not in body
    monkeypatch.setattr(threads_mod, "_max_threads", 2)
    monkeypatch.setattr(threads_mod, "CALIBRATION_RUNS", 0)
    monkeypatch.setattr(threads_mod, "SERIAL_BELOW_S", 0.0)
    n = 20000
    x_np = np.random.default_rng(5).uniform(0.5, 1.5, n + 1).astype(np.float32)
    s = Holder()
    s.x = xsim.array(x_np, requires_grad=True)
    out = xsim.zeros(n, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(field_own_and_next, n, inputs=[s], outputs=[out])
    tape.backward(grads={out: np.ones(n, np.float32)})
    xd, i = x_np.astype(np.float64), np.arange(n)
    expected = np.zeros(n + 1)
    np.add.at(expected, i, xd[i + 1])
    np.add.at(expected, i + 1, xd[i])
    np.testing.assert_allclose(s.x.grad.numpy(), expected, rtol=1e-6)
