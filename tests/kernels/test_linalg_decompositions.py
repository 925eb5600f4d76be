"""svd2, svd3, qr3 and eig3 in kernels: the factors rebuild the matrix, have Warp's conventions
(rotations with det +1 where Warp promises them, sorted and signed values) and agree with numpy's
singular values and eigenvalues, including degenerate inputs; both call forms (tuple and output
variables). Gradients: tests/autodiff/test_linalg_gradients.py."""

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only
RNG = np.random.default_rng(3)


def _mats(n, size, dtype=np.float64):
    special = [np.zeros((size, size)), np.eye(size), np.outer(np.arange(1, size + 1), np.ones(size)),
               np.diag(np.arange(size, 0, -1.0)) * -1.0]
    return np.concatenate([np.stack(special), RNG.normal(size=(n - len(special), size, size))]).astype(dtype)


@xsim.kernel
def decompose3(a: xsim.array(dtype=xsim.mat33d), u: xsim.array(dtype=xsim.mat33d), s: xsim.array(dtype=xsim.vec3d),
               v: xsim.array(dtype=xsim.mat33d), q: xsim.array(dtype=xsim.mat33d), r: xsim.array(dtype=xsim.mat33d),
               eq: xsim.array(dtype=xsim.mat33d), ed: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    U, sigma, V = xsim.svd3(a[i])
    u[i] = U
    s[i] = sigma
    v[i] = V
    Q = xsim.mat33d()
    R = xsim.mat33d()
    xsim.qr3(a[i], Q, R)
    q[i] = Q
    r[i] = R
    E, d = xsim.eig3(a[i])
    eq[i] = E
    ed[i] = d


@xsim.kernel
def decompose2(a: xsim.array(dtype=xsim.mat22), u: xsim.array(dtype=xsim.mat22), s: xsim.array(dtype=xsim.vec2),
               v: xsim.array(dtype=xsim.mat22)):
    i = xsim.tid()
    U = xsim.mat22()
    sigma = xsim.vec2()
    V = xsim.mat22()
    xsim.svd2(a[i], U, sigma, V)
    u[i] = U
    s[i] = sigma
    v[i] = V


@xsim.kernel
def svd3_f32(a: xsim.array(dtype=xsim.mat33), out: xsim.array(dtype=xsim.mat33), s: xsim.array(dtype=xsim.vec3)):
    i = xsim.tid()
    U, sigma, V = xsim.svd3(a[i])
    out[i] = U * xsim.diag(sigma) * xsim.transpose(V)
    s[i] = sigma


def _t(m):
    return np.swapaxes(m, 1, 2)


def test_svd3_qr3_eig3_rebuild_the_matrix_with_warps_conventions():
    n = 24
    a = _mats(n, 3)
    outs = [xsim.zeros(n, dtype=t) for t in (xsim.mat33d, xsim.vec3d, xsim.mat33d, xsim.mat33d, xsim.mat33d,
                                            xsim.mat33d, xsim.vec3d)]
    xsim.launch(decompose3, n, inputs=[xsim.array(a, dtype=xsim.mat33d), *outs])
    u, s, v, q, r, eq, ed = (o.numpy() for o in outs)
    eye = np.tile(np.eye(3), (n, 1, 1))
    # svd3: A = U diag(s) V^T, U and V rotations, |s| decreasing, s[0], s[1] >= 0, sign(s[2]) = sign(det A)
    np.testing.assert_allclose(u @ (s[:, :, None] * _t(v)), a, atol=1e-12)
    for m in (u, v, q, eq):
        np.testing.assert_allclose(m @ _t(m), eye, atol=1e-12)
        np.testing.assert_allclose(np.linalg.det(m), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.abs(s), np.linalg.svd(a, compute_uv=False), atol=1e-12)
    assert np.all(s[:, :2] >= 0)
    det = np.linalg.det(a)
    assert np.all(np.sign(s[np.abs(det) > 1e-9, 2]) == np.sign(det[np.abs(det) > 1e-9]))
    # qr3: A = Q R, R upper triangular with r00, r11 >= 0
    np.testing.assert_allclose(q @ r, a, atol=1e-12)
    assert np.all(np.tril(r, -1) == 0) and np.all(r[:, 0, 0] >= 0) and np.all(r[:, 1, 1] >= 0)
    # eig3 of the symmetric part: ascending eigenvalues, Q D Q^T rebuilds it
    sym = 0.5 * (a + _t(a))
    np.testing.assert_allclose(ed, np.linalg.eigvalsh(sym), atol=1e-12)
    np.testing.assert_allclose(eq @ (ed[:, :, None] * _t(eq)), sym, atol=1e-12)


def test_svd2_gives_nonnegative_sorted_values_through_output_variables():
    n = 16
    a = _mats(n, 2, np.float32)
    outs = [xsim.zeros(n, dtype=t) for t in (xsim.mat22, xsim.vec2, xsim.mat22)]
    xsim.launch(decompose2, n, inputs=[xsim.array(a, dtype=xsim.mat22), *outs])
    u, s, v = (o.numpy().astype(np.float64) for o in outs)
    np.testing.assert_allclose(u @ (s[:, :, None] * _t(v)), a, atol=2e-6)
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False), atol=2e-6)
    np.testing.assert_allclose(u @ _t(u), np.tile(np.eye(2), (n, 1, 1)), atol=2e-6)
    np.testing.assert_allclose(v @ _t(v), np.tile(np.eye(2), (n, 1, 1)), atol=2e-6)


def test_svd3_in_float32_is_accurate_to_single_precision():
    n = 16
    a = _mats(n, 3, np.float32)
    out, s = xsim.zeros(n, dtype=xsim.mat33), xsim.zeros(n, dtype=xsim.vec3)
    xsim.launch(svd3_f32, n, inputs=[xsim.array(a, dtype=xsim.mat33), out, s])
    np.testing.assert_allclose(out.numpy(), a, atol=3e-6)
    np.testing.assert_allclose(np.abs(s.numpy()), np.linalg.svd(a.astype(np.float64), compute_uv=False), atol=3e-6)


def test_svd3_in_float32_gives_the_float32_nearest_the_exact_singular_values():
    # decomposed in double and rounded once, so no rotation's float32 rounding moves sigma by an ulp
    a = np.concatenate([np.arange(1.0, 10.0).reshape(1, 3, 3), RNG.normal(size=(31, 3, 3))]).astype(np.float32)
    out, s = xsim.zeros(len(a), dtype=xsim.mat33), xsim.zeros(len(a), dtype=xsim.vec3)
    xsim.launch(svd3_f32, len(a), inputs=[xsim.array(a, dtype=xsim.mat33), out, s])
    exact = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    exact[:, 2] *= np.sign(np.linalg.det(a.astype(np.float64)))  # svd3's last value carries det's sign
    np.testing.assert_array_equal(s.numpy()[:, :2], exact[:, :2].astype(np.float32))
    np.testing.assert_array_equal(s.numpy()[1:, 2], exact[1:, 2].astype(np.float32))  # the first is rank 2


def test_decomposition_of_a_wrong_shape_is_refused_naming_the_line():
    @xsim.kernel(module="lib15_bad_svd")
    def bad(a: xsim.array(dtype=xsim.mat22), out: xsim.array(dtype=xsim.vec3)):
        _U, sigma, _V = xsim.svd3(a[0])
        out[0] = sigma

    with pytest.raises(xsim.CompileError, match=r"svd3\(\) needs a 3x3 float matrix, got mat22") as info:
        xsim.launch(bad, 1, inputs=[xsim.zeros(1, dtype=xsim.mat22), xsim.zeros(1, dtype=xsim.vec3)])
    assert f"{__file__}:{bad.pyfunc.__code__.co_firstlineno + 2}" in str(info.value)
