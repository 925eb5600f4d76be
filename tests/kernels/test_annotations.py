"""Every array annotation form Warp 1.19 accepts, each in a kernel whose numbers are checked with numpy:
``array[T]``, ``array[T, N]`` (also ``typing.Literal[N]``), ``array1d[T]`` .. ``array4d[T]``,
``array(dtype=T, ndim=N)``, ``array2d(dtype=T)``, and a gradient through a subscripted annotation."""

import typing

import numpy as np
import pytest

import xsim
from xsim import types as T

RNG = np.random.default_rng(11)


@xsim.kernel
def sub_1d(x: xsim.array[float], y: xsim.array[float]):
    i = xsim.tid()
    y[i] = x[i] * 2.0 + 1.0


@xsim.kernel
def sub_2d(x: xsim.array[xsim.float64, 2], y: xsim.array[xsim.float64, typing.Literal[2]]):
    i, j = xsim.tid()
    y[i, j] = x[i, j] * xsim.float64(j + 1)


@xsim.kernel
def sub_vec(x: xsim.array[xsim.vec3], y: xsim.array1d[float]):
    i = xsim.tid()
    y[i] = xsim.length_sq(x[i])


@xsim.kernel
def fixed_1d(x: xsim.array1d[float], y: xsim.array1d[float]):
    i = xsim.tid()
    y[i] = x[i] - 3.0


@xsim.kernel
def fixed_2d(x: xsim.array2d[float], y: xsim.array2d[float]):
    i, j = xsim.tid()
    y[i, j] = x[i, j] + float(i * 10 + j)


@xsim.kernel
def fixed_3d(x: xsim.array3d[xsim.int32], y: xsim.array3d[xsim.int32]):
    i, j, k = xsim.tid()
    y[i, j, k] = x[i, j, k] * 2 + k


@xsim.kernel
def fixed_4d(x: xsim.array4d[float], y: xsim.array4d[float]):
    i, j, k, m = xsim.tid()
    y[i, j, k, m] = x[i, j, k, m] * float(m + 1)


@xsim.kernel
def classic_ndim(x: xsim.array(dtype=float, ndim=3), y: xsim.array(dtype=float, ndim=3)):
    i, j, k = xsim.tid()
    y[i, j, k] = x[i, j, k] + float(k)


@xsim.kernel
def classic_fixed(x: xsim.array2d(dtype=xsim.float64), y: xsim.array2d(dtype=xsim.float64)):
    i, j = xsim.tid()
    y[i, j] = -x[i, j]


@xsim.kernel
def classic_1d(x: xsim.array(dtype=xsim.vec2), y: xsim.array(dtype=xsim.vec2)):
    i = xsim.tid()
    y[i] = xsim.vec2(x[i][1], x[i][0])


def launch(kernel, x: np.ndarray, dtype) -> np.ndarray:
    xa = xsim.array(x, dtype=dtype)
    y = xsim.zeros_like(xa)
    xsim.launch(kernel, xa.shape, inputs=[xa], outputs=[y])
    return y.numpy()


def test_annotations_build_the_types_they_name():
    assert xsim.array[float] == T.ArrayType(T.float32, 1)
    assert xsim.array[xsim.vec3, 3] == T.ArrayType(T.vec3, 3)
    assert xsim.array[float, typing.Literal[4]] == T.ArrayType(T.float32, 4)
    for n, cls in enumerate((xsim.array1d, xsim.array2d, xsim.array3d, xsim.array4d), start=1):
        assert cls[xsim.float64] == T.ArrayType(T.float64, n)
        assert cls(dtype=int) == T.ArrayType(T.int32, n)


def test_fixed_ndim_classes_also_make_arrays():
    a = xsim.array2d(np.ones((2, 3)), dtype=float)
    assert isinstance(a, xsim.array) and a.shape == (2, 3) and a.dtype is T.float32
    assert xsim.array3d(shape=(1, 2, 3), dtype=int).shape == (1, 2, 3)
    with pytest.raises(ValueError, match="array data has 1 dims but ndim=2"):
        xsim.array2d(np.ones(3), dtype=float)


@pytest.mark.parametrize("bad,msg", [
    (lambda: xsim.array2d[float, 2], r"xsim.array2d\[...\] takes dtype, got 2"),
    (lambda: xsim.array[float, 2, 3], r"xsim.array\[...\] takes dtype or dtype, ndim, got 3"),
    (lambda: xsim.array[float, "2"], "ndim must be an integer, got '2'"),
    (lambda: xsim.array[float, 5], "array ndim must be 1 to 4, got 5"),
    (lambda: xsim.array[dict], "array dtype must be"),
])
def test_bad_subscripts_name_what_was_expected(bad, msg):
    with pytest.raises((TypeError, ValueError), match=msg):
        bad()


def test_subscripted_array_annotations_forward():
    x = RNG.uniform(-2, 2, 9)
    np.testing.assert_allclose(launch(sub_1d, x, float), (x * 2 + 1).astype(np.float32), rtol=1e-6)
    x2 = RNG.uniform(-2, 2, (3, 4))
    np.testing.assert_allclose(launch(sub_2d, x2, xsim.float64), x2 * np.arange(1, 5), rtol=1e-15)
    v = RNG.uniform(-1, 1, (5, 3)).astype(np.float32)
    y = xsim.zeros(5, dtype=float)
    xsim.launch(sub_vec, 5, inputs=[xsim.array(v, dtype=xsim.vec3)], outputs=[y])
    np.testing.assert_allclose(y.numpy(), (v * v).sum(1), rtol=1e-6)


def test_fixed_ndim_annotations_forward():
    x1 = RNG.uniform(-2, 2, 6)
    np.testing.assert_allclose(launch(fixed_1d, x1, float), (x1 - 3).astype(np.float32), rtol=1e-6)
    x2 = RNG.uniform(-2, 2, (3, 4))
    i, j = np.indices((3, 4))
    np.testing.assert_allclose(launch(fixed_2d, x2, float), (x2 + i * 10 + j).astype(np.float32), rtol=1e-6)
    x3 = RNG.integers(-9, 9, (2, 3, 4))
    np.testing.assert_array_equal(launch(fixed_3d, x3, xsim.int32), x3 * 2 + np.arange(4))
    x4 = RNG.uniform(-2, 2, (2, 2, 3, 2))
    expected = (x4 * np.arange(1, 3)).astype(np.float32)
    np.testing.assert_allclose(launch(fixed_4d, x4, float), expected, rtol=1e-6)


def test_classic_annotations_forward():
    x3 = RNG.uniform(-2, 2, (2, 3, 4))
    expected = (x3 + np.arange(4)).astype(np.float32)
    np.testing.assert_allclose(launch(classic_ndim, x3, float), expected, rtol=1e-6)
    x2 = RNG.uniform(-2, 2, (3, 2))
    np.testing.assert_array_equal(launch(classic_fixed, x2, xsim.float64), -x2)
    v = RNG.uniform(-2, 2, (4, 2)).astype(np.float32)
    np.testing.assert_array_equal(launch(classic_1d, v, xsim.vec2), v[:, ::-1])


def test_gradient_through_a_subscripted_annotation_matches_finite_differences():
    x = RNG.uniform(-2, 2, (3, 4))
    xa = xsim.array(x, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros((3, 4), dtype=xsim.float64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(sub_2d, (3, 4), inputs=[xa], outputs=[y])
    w = RNG.uniform(-1, 1, (3, 4))  # loss = sum(w * y)
    tape.backward(grads={y: w})

    def loss(xv):
        return float(np.sum(w * xv * np.arange(1, 5)))
    eps, fd = 1e-6, np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        fd[idx] = (loss(x + d) - loss(x - d)) / (2 * eps)
    np.testing.assert_allclose(xa.grad.numpy(), fd, rtol=1e-7, atol=1e-9)
