"""The adjoint code starts every float adjoint at -0 (``cpp.adj_zero``), IEEE arithmetic's additive identity, so the
compiler turns an adjoint's first accumulation into an assignment without fast-math flags. These tests pin what
that must not change: gradients whose first contributions come inside branches, dynamic loops and component
writes equal the chain rule (numpy, float64, to 1e-12) and float64 finite differences, and a gradient that
receives nothing, or only zeros, is +0 in the array, never -0."""

import numpy as np

import xsim
from xsim.autodiff import gradcheck
from xsim.kernels import ir
from xsim.kernels.codegen import KernelCodegen
from xsim.kernels.module import build_ir


@xsim.kernel
def branch_loop_components(x: xsim.array(dtype=xsim.float64), n: xsim.array(dtype=int),
                           out: xsim.array(dtype=xsim.vec3d), rows: xsim.array(dtype=xsim.mat22d)):
    i = xsim.tid()
    xi = x[i]
    v = xsim.vec3d()
    if xi > 0.0:
        v[0] = xi * xi  # xi's first adjoint contribution sits in a branch, through a component write
    else:
        v[1] = xsim.sin(xi)
    s = xsim.float64(0.0)
    for _k in range(n[i]):  # a dynamic loop: s and xi's adjoints accumulate once per iteration
        s = s * xi + 1.0
    v[2] = s
    out[i] = v
    m = xsim.mat22d()
    m[1] = xsim.vec2d(3.0 * xi, xi * s)  # a row write: its adjoint takes the row and resets it
    rows[i] = m


def _inputs():
    x = np.array([0.7, -0.4, 1.3, -1.1, 0.25])
    n = np.array([0, 1, 3, 4, 6], dtype=np.int32)
    return x, n


def _launch_gradient(x, n, g_out, g_rows):
    xs = xsim.array(x, dtype=xsim.float64, requires_grad=True)
    ns = xsim.array(n, dtype=int)
    out = xsim.zeros(len(x), dtype=xsim.vec3d, requires_grad=True)
    rows = xsim.zeros(len(x), dtype=xsim.mat22d, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(branch_loop_components, len(x), inputs=[xs, ns], outputs=[out, rows])
    tape.backward(grads={out: g_out, rows: g_rows})
    return xs.grad.numpy()


def test_gradient_with_first_contributions_in_branches_loops_and_components_is_the_chain_rule():
    x, n = _inputs()
    rng = np.random.default_rng(3)
    g_out = rng.normal(size=(len(x), 3))
    g_rows = rng.normal(size=(len(x), 2, 2))
    got = _launch_gradient(x, n, g_out, g_rows)
    # s = 1 + x + ... + x^(n-1) (Horner), ds/dx = sum_k k x^(k-1)
    s = np.array([sum(xi ** k for k in range(m)) for xi, m in zip(x, n)])
    ds = np.array([sum(k * xi ** (k - 1) for k in range(1, m)) for xi, m in zip(x, n)])
    want = (g_out[:, 0] * np.where(x > 0, 2 * x, 0.0) + g_out[:, 1] * np.where(x > 0, 0.0, np.cos(x))
            + g_out[:, 2] * ds + g_rows[:, 1, 0] * 3.0 + g_rows[:, 1, 1] * (s + x * ds))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_gradient_with_first_contributions_in_branches_loops_and_components_matches_finite_differences():
    x, n = _inputs()
    xs = xsim.array(x, dtype=xsim.float64, requires_grad=True)
    ns = xsim.array(n, dtype=int)
    out = xsim.zeros(len(x), dtype=xsim.vec3d, requires_grad=True)
    rows = xsim.zeros(len(x), dtype=xsim.mat22d, requires_grad=True)
    report = gradcheck(branch_loop_components, [xs, ns, out, rows], wrt=["x"], atol=1e-7, rtol=1e-7)
    report.assert_ok()


@xsim.kernel
def gated_product(x: xsim.array(dtype=float), w: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    y = x[i] * 0.0  # x's only adjoint contribution is a signed zero
    if i % 2 == 0:
        y = y + w[i] * 2.0  # w's contribution only where the branch is taken
    out[i] = y


def test_a_gradient_that_receives_nothing_or_only_zeros_is_positive_zero():
    x = xsim.array(np.array([1.0, -2.0, 3.0, -4.0], dtype=np.float32), requires_grad=True)
    w = xsim.array(np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32), requires_grad=True)
    out = xsim.zeros(4, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(gated_product, 4, inputs=[x, w], outputs=[out])
    tape.backward(grads={out: np.array([1.0, -1.0, 1.0, -1.0], dtype=np.float32)})
    gx, gw = x.grad.numpy(), w.grad.numpy()
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(gw, [2.0, 0.0, 2.0, 0.0])
    assert not np.signbit(gx).any() and not np.signbit(gw[1::2]).any()


def test_the_backward_declares_float_adjoints_from_negative_zero_and_the_forward_has_none():
    kir = build_ir(branch_loop_components)
    forward, backward = KernelCodegen(kir).generate().split("_backward(", 1)
    assert "-0.0" not in forward
    xi = next(s.out for s in ir.walk(kir.body) if isinstance(s, ir.Op) and s.kind == "load"
              and s.out.type is xsim.float64)
    assert f"double a{xi.id} = ((double)-0.0);" in backward


@xsim.func
def scaled_length(v: xsim.vec3d, s: xsim.float64):
    return s * xsim.length(v)


@xsim.func_grad(scaled_length)
def scaled_length_grad(v: xsim.vec3d, s: xsim.float64, adj_ret: xsim.float64):
    n = xsim.length(v)
    if n > 0.0:  # v's adjoint only where the length has a derivative: a zero v receives nothing
        xsim.adjoint[v] += v * (s * adj_ret / n)
    xsim.adjoint[s] += n * adj_ret


@xsim.kernel
def custom_scaled_length(v: xsim.array(dtype=xsim.vec3d), s: xsim.array(dtype=xsim.float64),
                         out: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    out[i] = scaled_length(v[i], s[i])


def test_a_func_grad_adjoint_starts_from_negative_zero_and_its_gradient_is_the_chain_rule():
    """A func_grad body's ``adjoint[x]`` starts at -0 too (``Calls.adjoint_start``): its first ``+=`` folds. The
    gradients are the body's chain rule, and the adjoint of a value it never adds to leaves +0 in the array."""
    v = np.array([[0.3, -1.2, 0.5], [0.0, 0.0, 0.0], [2.0, 1.0, -0.25]])
    s = np.array([1.5, -0.7, 0.4])
    g = np.array([0.9, 1.1, -2.0])
    vs = xsim.array(v, dtype=xsim.vec3d, requires_grad=True)
    ss = xsim.array(s, dtype=xsim.float64, requires_grad=True)
    out = xsim.zeros(3, dtype=xsim.float64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(custom_scaled_length, 3, inputs=[vs, ss], outputs=[out])
    tape.backward(grads={out: g})
    n = np.linalg.norm(v, axis=1)
    want_v = np.where(n[:, None] > 0, v * (s * g / np.where(n > 0, n, 1.0))[:, None], 0.0)
    np.testing.assert_allclose(vs.grad.numpy(), want_v, rtol=1e-14, atol=0)
    np.testing.assert_allclose(ss.grad.numpy(), n * g, rtol=1e-14, atol=0)
    assert not np.signbit(vs.grad.numpy()[1]).any()
    report = gradcheck(custom_scaled_length, [xsim.array(v[[0, 2]], dtype=xsim.vec3d, requires_grad=True),
                                             xsim.array(s[[0, 2]], dtype=xsim.float64, requires_grad=True),
                                             xsim.zeros(2, dtype=xsim.float64, requires_grad=True)],
                       wrt=["v", "s"], atol=1e-7, rtol=1e-7)
    report.assert_ok()
    kir = build_ir(custom_scaled_length)
    custom = next(s for s in ir.walk(kir.body) if isinstance(s, ir.Op) and s.kind == "custom")
    starts = {x.id for s in ir.walk(custom.attrs["grad"]) if isinstance(s, ir.Op) for x in s.args
              if x.is_const and x.type is xsim.float64 and np.signbit(x.const)}
    backward = KernelCodegen(kir).generate().split("_backward(", 1)[1]
    assert len(starts) >= 4  # three components of v's start and s's
    for i in starts:
        assert f"double v{i} = ((double)-0.0);" in backward
