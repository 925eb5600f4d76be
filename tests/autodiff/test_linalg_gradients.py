"""Gradients of svd2, svd3, qr3 and eig3 against float64 central finite differences, at generic
matrices and at repeated singular values / eigenvalues: there a loss that does not see the basis of
the repeated subspace (the singular values, the polar factor U V^T, a sum of eigenvalues) gets its
exact gradient, and one that does (U alone) gets NaN, never a finite wrong number."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import xsim
from xsim.autodiff import gradcheck

pytestmark = pytest.mark.cpu_only
RNG = np.random.default_rng(5)
N = 3


@xsim.kernel
def svd3_all(a: xsim.array(dtype=xsim.mat33d), out: xsim.array(dtype=xsim.mat33d, ndim=2),
             s: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    U, sigma, V = xsim.svd3(a[i])
    out[i, 0] = U
    out[i, 1] = V
    s[i] = sigma


@xsim.kernel
def svd2_all(a: xsim.array(dtype=xsim.mat22d), out: xsim.array(dtype=xsim.mat22d, ndim=2),
             s: xsim.array(dtype=xsim.vec2d)):
    i = xsim.tid()
    U, sigma, V = xsim.svd2(a[i])
    out[i, 0] = U
    out[i, 1] = V
    s[i] = sigma


@xsim.kernel
def qr3_all(a: xsim.array(dtype=xsim.mat33d), out: xsim.array(dtype=xsim.mat33d, ndim=2)):
    i = xsim.tid()
    Q, R = xsim.qr3(a[i])
    out[i, 0] = Q
    out[i, 1] = R


@xsim.kernel
def eig3_all(a: xsim.array(dtype=xsim.mat33d), q: xsim.array(dtype=xsim.mat33d), d: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    Q, ev = xsim.eig3(a[i])
    q[i] = Q
    d[i] = ev


def _check(kernel, a, *outs):
    args = [xsim.array(a, dtype=xsim.types.matrix(a.shape[1:], xsim.float64), requires_grad=True),
            *[xsim.zeros(shape, dtype=t, requires_grad=True) for shape, t in outs]]
    report = gradcheck(kernel, args, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def test_svd3_gradient_at_distinct_singular_values():
    a = RNG.normal(size=(N, 3, 3))
    a[0] *= -1.0  # a negative determinant: the signed last singular value
    _check(svd3_all, a, ((N, 2), xsim.mat33d), (N, xsim.vec3d))


def test_svd2_gradient_at_distinct_singular_values():
    _check(svd2_all, RNG.normal(size=(N, 2, 2)), ((N, 2), xsim.mat22d), (N, xsim.vec2d))


def test_qr3_gradient_of_a_full_rank_matrix():
    _check(qr3_all, RNG.normal(size=(N, 3, 3)), ((N, 2), xsim.mat33d))


def test_eig3_gradient_at_distinct_eigenvalues():
    a = RNG.normal(size=(N, 3, 3))
    _check(eig3_all, a, (N, xsim.mat33d), (N, xsim.vec3d))


@xsim.kernel
def invariant_losses(a: xsim.array(dtype=xsim.mat33d), polar: xsim.array(dtype=xsim.mat33d),
                     s: xsim.array(dtype=xsim.float64), eig_sq: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    U, sigma, V = xsim.svd3(a[i])
    polar[i] = U * xsim.transpose(V)
    s[i] = sigma[0] + sigma[1] + sigma[2] + xsim.dot(sigma, sigma)  # which value is which does not matter
    _Q, d = xsim.eig3(a[i] + xsim.transpose(a[i]))
    eig_sq[i] = xsim.dot(d, d) + d[0] + d[1] + d[2]


def test_repeated_values_give_the_exact_gradient_of_basis_free_losses():
    # all singular values equal (a rotation, a scaled identity) and two equal (a reflection-free
    # stretch along one axis of a rotation)
    r = Rotation.from_rotvec([[0.3, -0.2, 0.5], [0.0, 0.0, 0.0], [1.0, 0.5, -0.2]]).as_matrix()
    a = np.stack([r[0], 2.0 * r[1], r[2] @ np.diag([1.0, 1.0, 3.0])])
    _check(invariant_losses, a, (N, xsim.mat33d), (N, xsim.float64), (N, xsim.float64))


@xsim.kernel
def basis_losses(a: xsim.array(dtype=xsim.mat33d), u: xsim.array(dtype=xsim.mat33d), q: xsim.array(dtype=xsim.mat33d)):
    i = xsim.tid()
    U, _sigma, _V = xsim.svd3(a[i])
    u[i] = U
    Q, _d = xsim.eig3(a[i])
    q[i] = Q


def test_a_loss_on_singular_vectors_of_a_repeated_value_gets_nan_not_a_wrong_number():
    a = xsim.array(np.stack([np.eye(3), np.diag([1.0, 2.0, 3.0])]), dtype=xsim.mat33d, requires_grad=True)
    u = xsim.zeros(2, dtype=xsim.mat33d, requires_grad=True)
    q = xsim.zeros(2, dtype=xsim.mat33d, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(basis_losses, 2, inputs=[a, u, q])
    seed = RNG.normal(size=(2, 3, 3))
    tape.backward(grads={u: xsim.array(seed, dtype=xsim.mat33d),
                         q: xsim.array(seed, dtype=xsim.mat33d)})
    g = a.grad.numpy()
    assert np.isnan(g[0]).any()  # identity: every value repeated
    assert np.isfinite(g[1]).all()  # distinct values: a finite gradient
