"""Adam and SGD against plain numpy running the same formulas (Kingma & Ba; PyTorch's SGD momentum
convention, dampening 0), clipping and bounds, and convergence on a quadratic through a Tape."""

import numpy as np
import pytest

import xsim
from xsim.optim import SGD, Adam


def numpy_adam(p, grads, lr, b1, b2, eps, clip=None, lo=-np.inf, hi=np.inf):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = _clipped(g, clip)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = np.clip(p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps), lo, hi)
    return p


def numpy_sgd(p, grads, lr, mu, nesterov=False, clip=None):
    buf = None
    for g in grads:
        g = _clipped(g, clip)
        buf = g.copy() if buf is None else mu * buf + g       # torch.optim.SGD, dampening 0
        p = p - lr * (g + mu * buf if nesterov else buf)
    return p


def _clipped(g, clip):
    if clip is None:
        return g
    return g * min(1.0, clip / (np.linalg.norm(g) + 1e-6))   # torch.nn.utils.clip_grad_norm_


def run(opt_cls, dtype, grads, p0, **kw):
    p = xsim.array(p0.astype(dtype._np), dtype=xsim.vector(3, dtype), requires_grad=True)
    opt = opt_cls([p], **kw)
    for g in grads:
        p.grad[:] = g.reshape(p0.shape).astype(dtype._np)
        opt.step()
    return p.numpy().astype(np.float64)


rng = np.random.default_rng(3)
P0 = rng.normal(size=(4, 3))
GRADS = [rng.normal(size=(4, 3)) for _ in range(5)]


@pytest.mark.parametrize("dtype", [xsim.float32, xsim.float64])
def test_adam_matches_numpy(dtype):
    got = run(Adam, dtype, GRADS, P0, lr=0.05, betas=(0.8, 0.95), eps=1e-6)
    want = numpy_adam(P0, GRADS, 0.05, 0.8, 0.95, 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype is xsim.float32 else 1e-12, atol=1e-6)
    assert not np.allclose(want, P0)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_matches_pytorch_convention(nesterov):
    got = run(SGD, xsim.float64, GRADS, P0, lr=0.1, momentum=0.7, nesterov=nesterov)
    np.testing.assert_allclose(got, numpy_sgd(P0, GRADS, 0.1, 0.7, nesterov), rtol=1e-12)


def test_gradient_clipping_scales_by_the_global_norm():
    big = [10.0 * g for g in GRADS]
    got = run(SGD, xsim.float64, big, P0, lr=0.1, momentum=0.5, clip_norm=1.0)
    np.testing.assert_allclose(got, numpy_sgd(P0, big, 0.1, 0.5, clip=1.0), rtol=1e-10)
    got = run(Adam, xsim.float32, big, P0, lr=0.05, clip_norm=2.0)
    np.testing.assert_allclose(got, numpy_adam(P0, big, 0.05, 0.9, 0.999, 1e-8, clip=2.0), rtol=1e-5, atol=1e-6)


def test_bounds_clamp_after_each_step():
    got = run(Adam, xsim.float64, GRADS, P0, lr=0.5, bounds=(-0.2, 0.3))
    want = numpy_adam(P0, GRADS, 0.5, 0.9, 0.999, 1e-8, lo=-0.2, hi=0.3)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.min() >= -0.2 and got.max() <= 0.3


@xsim.kernel
def quadratic(p: xsim.array(dtype=float), c: xsim.array(dtype=float), loss: xsim.array(dtype=float)):
    i = xsim.tid()
    d = p[i] - c[i]
    xsim.atomic_add(loss, 0, float(i + 1) * d * d)


@pytest.mark.parametrize("make", [lambda p: Adam([p], lr=0.1), lambda p: SGD([p], lr=0.05, momentum=0.8)])
def test_optimizers_converge_on_a_quadratic(make):
    c = xsim.array(np.array([1.0, -2.0, 0.5, 3.0], np.float32))
    p = xsim.zeros(4, requires_grad=True)
    opt = make(p)
    for _ in range(300):
        loss = xsim.zeros(1, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            xsim.launch(quadratic, 4, inputs=[p, c], outputs=[loss])
        opt.zero_grad()
        tape.backward(loss)
        opt.step()
        assert len(tape.records) == 1   # the update kernels stay off the tape
    np.testing.assert_allclose(p.numpy(), c.numpy(), atol=1e-3)


def test_bad_parameters_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="has no gradient"):
        Adam([xsim.zeros(3)])
    with pytest.raises(TypeError, match="float32 or float64"):
        SGD([xsim.zeros(3, dtype=xsim.int32, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="momentum"):
        SGD([xsim.zeros(3, requires_grad=True)], lr=0.1, momentum=1.5)
    with pytest.raises(ValueError, match="learning rate"):
        Adam([xsim.zeros(3, requires_grad=True)], lr=-1.0)
