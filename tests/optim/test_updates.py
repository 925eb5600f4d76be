"""Adam and SGD against plain numpy running the same formulas (Kingma & Ba; PyTorch's SGD momentum
convention, with dampening and weight decay), clipping and bounds, convergence on a quadratic through a
Tape, and Warp's forms of the same optimizers (``step(grad)``, ``set_params``) against warp.optim itself."""

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


def numpy_sgd(p, grads, lr, mu, nesterov=False, clip=None, dampening=0.0, weight_decay=0.0):
    buf = None
    for g in grads:
        g = _clipped(g, clip) + weight_decay * p
        if mu:
            buf = g.copy() if buf is None else mu * buf + (1 - dampening) * g     # torch.optim.SGD
            g = g + mu * buf if nesterov else buf
        p = p - lr * g
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


def test_sgd_dampening_and_weight_decay_match_numpy():
    got = run(SGD, xsim.float64, GRADS, P0, lr=0.1, momentum=0.6, dampening=0.3, weight_decay=0.05)
    want = numpy_sgd(P0, GRADS, 0.1, 0.6, dampening=0.3, weight_decay=0.05)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    plain = run(SGD, xsim.float64, GRADS, P0, lr=0.1, weight_decay=0.05)     # no momentum: no buffer
    np.testing.assert_allclose(plain, numpy_sgd(P0, GRADS, 0.1, 0.0, weight_decay=0.05), rtol=1e-12)


def warp_form(opt, grads, p0, dtype):
    """Run ``opt`` (no parameters yet) Warp's way: set_params on an array without a gradient, step(grad)."""
    p = xsim.array(p0.astype(dtype._np), dtype=xsim.vector(3, dtype))
    g = xsim.zeros_like(p)
    opt.set_params([p])
    for gi in grads:
        g.assign(gi.astype(dtype._np))
        opt.step([g])
    return p.numpy().astype(np.float64)


def test_warp_forms_take_the_gradients_given_to_step():
    got = warp_form(Adam(lr=0.05, betas=(0.8, 0.95), eps=1e-6), GRADS, P0, xsim.float64)
    np.testing.assert_allclose(got, numpy_adam(P0, GRADS, 0.05, 0.8, 0.95, 1e-6), rtol=1e-12)
    sgd = SGD(None, 0.1, 0.6, 0.3, 0.05)     # Warp's positional order: lr, momentum, dampening, weight_decay
    got = warp_form(sgd, GRADS, P0, xsim.float64)
    np.testing.assert_allclose(got, numpy_sgd(P0, GRADS, 0.1, 0.6, dampening=0.3, weight_decay=0.05), rtol=1e-12)
    sgd.reset_internal_state()       # state and step count back to zero: the same run again from P0
    assert sgd.t == 0 and all(not b.numpy().any() for b in sgd.buf)
    with pytest.raises(RuntimeError, match="no parameters"):
        Adam().step([xsim.zeros(3)])
    opt = Adam([xsim.zeros(4)])
    with pytest.raises(TypeError, match="gradient 0 must be an xsim array of parameter 0's dtype float32 and shape"):
        opt.step([xsim.zeros(3)])
    with pytest.raises(ValueError, match="one gradient array per parameter"):
        opt.step([])


def test_warp_forms_give_warp_optims_results():
    wp = pytest.importorskip("warp")
    import warp.optim
    wp.config.quiet = True
    p0 = P0.reshape(-1).astype(np.float32)
    grads = [g.reshape(-1).astype(np.float32) for g in GRADS]
    for make_x, make_w, tol in ((lambda: Adam(lr=0.05), lambda: warp.optim.Adam(lr=0.05), 2e-6),
                                (lambda: SGD(lr=0.1, momentum=0.6, dampening=0.3, weight_decay=0.05),
                                 lambda: warp.optim.SGD(lr=0.1, momentum=0.6, dampening=0.3, weight_decay=0.05), 1e-6),
                                (lambda: SGD(lr=0.1, momentum=0.5, nesterov=True),
                                 lambda: warp.optim.SGD(lr=0.1, momentum=0.5, nesterov=True), 1e-6)):
        results = []
        for eng, make in ((xsim, make_x), (wp, make_w)):
            p = eng.array(p0, dtype=eng.float32, device="cpu")
            g = eng.zeros(p0.shape, dtype=eng.float32, device="cpu")
            opt = make()
            opt.set_params([p])
            for gi in grads:
                g.assign(gi)
                opt.step([g])
            results.append(p.numpy())
        # xsim keeps the state in float64, Warp in float32: equal to float32 rounding
        np.testing.assert_allclose(results[0], results[1], rtol=tol, atol=tol)
        assert not np.allclose(results[0], p0)


def test_bad_parameters_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="has no gradient"):
        Adam([xsim.zeros(3)]).step()
    with pytest.raises(ValueError, match="Nesterov momentum needs momentum > 0 and dampening 0"):
        SGD(lr=0.1, nesterov=True)
    with pytest.raises(TypeError, match="float32 or float64"):
        SGD([xsim.zeros(3, dtype=xsim.int32, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="momentum"):
        SGD([xsim.zeros(3, requires_grad=True)], lr=0.1, momentum=1.5)
    with pytest.raises(ValueError, match="learning rate"):
        Adam([xsim.zeros(3, requires_grad=True)], lr=-1.0)
