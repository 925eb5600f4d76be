"""The CPU adjoint of a small kernel calling the C math library runs two threads at a time on packed
arrays (both replays, then both reverse passes, ``KernelCodegen.two_thread_adjoint``): gradients with
the bits of one thread at a time (strided arrays: one at a time, the same bits), right against float64
finite differences; a gradient buffer passed as an input keeps the thread order; kernels whose replay
or reverse pass writes elsewhere, or without such calls, keep one thread at a time."""

import numpy as np
import pytest

import xsim
from xsim.kernels import threads as threads_mod

pytestmark = pytest.mark.cpu_only


@xsim.kernel
def vec3_math(a: xsim.array(dtype=xsim.vec3), b: xsim.array(dtype=xsim.vec3), out: xsim.array(dtype=xsim.vec3)):
    i = xsim.tid()
    u = a[i]
    v = b[i]
    c = xsim.cross(u, v)
    n = xsim.normalize(c + u)
    out[i] = n * xsim.sin(xsim.dot(u, v)) + v * xsim.exp(-xsim.length(c))


@xsim.kernel
def scale_by_previous(x: xsim.array(dtype=float), y: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = x[i] * y[xsim.max(i - 1, 0)] + xsim.exp(x[i] * 0.0)  # a libm call adding exactly 0 to x's gradient


@xsim.kernel
def branchy(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    if x[i] > 0.0:
        out[i] = xsim.sin(x[i]) * x[i]
    else:
        out[i] = xsim.exp(x[i])


@xsim.kernel
def running_sum(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    s = 0.0
    for k in range(i % 4):
        s = s + xsim.sin(x[i]) * float(k)
    out[i] = s


@xsim.kernel
def no_libm_call(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = xsim.sqrt(x[i]) / (1.0 + x[i])


@xsim.func
def twice(x: float):
    return 2.0 * xsim.exp(x)


@xsim.func_grad(twice)
def twice_grad(x: float, adj: float):
    xsim.adjoint[x] += 2.0 * xsim.exp(x) * adj


@xsim.kernel
def custom_twice(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = twice(x[i])


@pytest.fixture
def one_thread(monkeypatch):
    monkeypatch.setattr(threads_mod, "_max_threads", 1)


def _has_two_thread_body(kernel, debug=False) -> bool:
    src, _ = kernel.module.generate("cpu", debug)
    return f"{kernel.symbol}_backward2<" in src


def _vec3_math_np(a, b):
    c = np.cross(a, b)
    s = c + a
    n = s / np.linalg.norm(s, axis=-1, keepdims=True)
    return n * np.sin(np.sum(a * b, -1, keepdims=True)) + b * np.exp(-np.linalg.norm(c, axis=-1, keepdims=True))


def _gradients(a_np, b_np, seed, step):
    """The gradients of a and b (float32) from one launch over every ``step``-th row of arrays of
    ``step`` times the rows (step 2: strided views)."""
    n = len(a_np)

    def spread(v):
        w = np.zeros((n * step, 3), np.float32)
        w[::step] = v
        return xsim.array(w, dtype=xsim.vec3, requires_grad=True)
    a_all, b_all, out_all = spread(a_np), spread(b_np), spread(np.zeros_like(a_np))
    a, b, out = (a_all[::step], b_all[::step], out_all[::step]) if step > 1 else (a_all, b_all, out_all)
    tape = xsim.Tape()
    with tape:
        xsim.launch(vec3_math, n, inputs=[a, b], outputs=[out], device="cpu")
    tape.backward(grads={out: seed})
    return a_all.grad.numpy()[::step], b_all.grad.numpy()[::step]


@pytest.mark.parametrize("step", [1, 2], ids=["packed", "strided"])
@pytest.mark.parametrize("n", [2, 257])
def test_two_threads_at_a_time_give_the_bits_of_one(one_thread, n, step):
    assert _has_two_thread_body(vec3_math)
    rng = np.random.default_rng(n)
    a_np = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    b_np = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    seed = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    ga, gb = _gradients(a_np, b_np, seed, step)
    # one-thread launches never pair threads: the reference bits
    for i in range(n):
        ga1, gb1 = _gradients(a_np[i:i + 1], b_np[i:i + 1], seed[i:i + 1], 1)
        assert ga[i].view(np.uint32).tolist() == ga1[0].view(np.uint32).tolist(), i
        assert gb[i].view(np.uint32).tolist() == gb1[0].view(np.uint32).tolist(), i
    # and they are the gradients: central differences of the float64 function, seed-weighted
    a64, b64, s64, h = a_np.astype(np.float64), b_np.astype(np.float64), seed.astype(np.float64), 1e-6
    for x64, g in ((a64, ga), (b64, gb)):
        for k in range(3):
            d = np.zeros_like(x64)
            d[:, k] = h
            plus = _vec3_math_np(*((x64 + d, b64) if x64 is a64 else (a64, x64 + d)))
            minus = _vec3_math_np(*((x64 - d, b64) if x64 is a64 else (a64, x64 - d)))
            fd = np.sum((plus - minus) / (2 * h) * s64, axis=-1)
            np.testing.assert_allclose(g[:, k], fd, rtol=2e-4, atol=2e-5)


def test_threads_in_branches_pair_too(one_thread):
    assert _has_two_thread_body(branchy)
    n = 101
    x_np = np.random.default_rng(5).uniform(-2, 2, n).astype(np.float32)
    x = xsim.array(x_np, requires_grad=True)
    out = xsim.zeros(n, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(branchy, n, inputs=[x], outputs=[out], device="cpu")
    tape.backward(grads={out: np.ones(n, np.float32)})
    xd = x_np.astype(np.float64)
    np.testing.assert_allclose(x.grad.numpy(), np.where(xd > 0, np.cos(xd) * xd + np.sin(xd), np.exp(xd)), rtol=1e-5)
    for i in range(n):
        x1 = xsim.array(x_np[i:i + 1], requires_grad=True)
        out1 = xsim.zeros(1, dtype=float, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            xsim.launch(branchy, 1, inputs=[x1], outputs=[out1], device="cpu")
        tape.backward(grads={out1: np.ones(1, np.float32)})
        assert x1.grad.numpy().view(np.uint32)[0] == x.grad.numpy().view(np.uint32)[i], i


def test_a_gradient_passed_as_an_input_keeps_the_thread_order(one_thread):
    """Thread i reads y[i - 1], and y is x.grad, which thread i - 1's reverse pass adds to: one thread
    at a time, thread i sees that addition (a running recurrence). Small integers keep it exact."""
    assert _has_two_thread_body(scale_by_previous)
    n = 9
    x = xsim.array(np.arange(1, n + 1, dtype=np.float32), requires_grad=True)
    x.grad.assign(np.arange(2, n + 2, dtype=np.float32))
    out = xsim.zeros(n, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(scale_by_previous, n, inputs=[x, x.grad], outputs=[out], device="cpu")
    tape.backward(grads={out: np.ones(n, np.float32)})
    expected = np.arange(2, n + 2, dtype=np.float64)
    for i in range(n):
        expected[i] += expected[max(i - 1, 0)]
    np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize("kernel", [running_sum, custom_twice, no_libm_call])
def test_kernels_whose_adjoint_writes_elsewhere_keep_one_thread_at_a_time(kernel):
    assert not _has_two_thread_body(kernel)


def test_debug_builds_and_cuda_keep_one_thread_at_a_time():
    assert not _has_two_thread_body(vec3_math, debug=True)
    src, _ = vec3_math.module.generate("cuda", False)
    assert f"{vec3_math.symbol}_backward2" not in src
