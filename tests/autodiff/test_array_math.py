"""Host-side arithmetic on arrays, as Warp's arrays have it: element-wise kernels that a Tape records;
forward values against numpy, gradients against float64 finite differences, refusals by message."""

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only


# Each distinct (operator, operand types, dimension count) compiles a module of its own (~3 s cold), so the
# tests share them: float64 1-D arrays throughout, each other case once.


def test_operators_with_a_value_match_numpy_in_the_arrays_type():
    x = np.array([1.0, 2.5, -3.0])
    a = xsim.array(x, dtype=xsim.float64)
    np.testing.assert_array_equal((a + 2.0).numpy(), x + 2.0)
    np.testing.assert_array_equal((np.float64(3.0) * a).numpy(), 3.0 * x)  # numpy scalars leave it to the array
    np.testing.assert_array_equal((-a).numpy(), -x)
    np.testing.assert_allclose((a ** 2.0).numpy(), x ** 2, rtol=1e-15)
    h = xsim.array([1, 2, 3], dtype=xsim.float16)
    np.testing.assert_allclose((xsim.float16(5) / h).numpy(), np.float16(5) / np.array([1, 2, 3], np.float16),
                               rtol=5e-3)
    i8 = xsim.array([1, 2, 3], dtype=xsim.int8)
    out = xsim.int8(5) % i8
    assert out.dtype is xsim.int8
    np.testing.assert_array_equal(out.numpy(), np.array([0, 1, 2], np.int8))


def test_operators_between_arrays_keep_the_shape_and_the_vector_type():
    x = np.arange(12.0).reshape(2, 2, 3)
    v = xsim.array(x, dtype=xsim.vec3)
    s = xsim.array(np.array([[1.0, -2.0], [0.5, 3.0]]), dtype=float)
    w = v * s
    assert w.dtype is xsim.vec3 and w.shape == (2, 2)
    np.testing.assert_array_equal(w.numpy(), x * s.numpy()[..., None])


def test_in_place_operators_write_into_the_array_and_the_tape_refuses_a_read_array_overwritten():
    a = xsim.array([1.0, 2.0], dtype=xsim.float64)
    same = a
    a += 1.5
    a *= xsim.array([2.0, -1.0], dtype=xsim.float64)
    assert a is same
    np.testing.assert_array_equal(a.numpy(), [5.0, -3.5])
    x = xsim.array([1.0, 2.0], dtype=xsim.float64, requires_grad=True)
    y = xsim.array([3.0, -4.0], dtype=xsim.float64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        x *= y  # reads x, then overwrites it: y's gradient needs the x that was read
    with pytest.raises(RuntimeError, match=r"array 'a' read by kernel 'array_mul' was overwritten afterwards"):
        tape.backward(grads={x: np.ones(2)})
    x = xsim.array([1.0, 2.0], dtype=xsim.float64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        x += 1.0  # the gradient of a sum needs no values: overwriting x is harmless (d(x + 1)/dx = 1)
    tape.backward(grads={x: np.ones(2)})
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])


def test_gradients_through_array_arithmetic_match_float64_finite_differences():
    x0, y0 = np.array([0.5, -1.25, 2.0]), np.array([1.5, 0.75, -0.5])
    x = xsim.array(x0, dtype=xsim.float64, requires_grad=True)
    y = xsim.array(y0, dtype=xsim.float64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        z = x * y - 3.0 * x
        z = z + y
    tape.backward(grads={z: np.ones(3)})

    def f(xv, yv):
        return (xv * yv - 3.0 * xv + yv).sum()

    eps = 1e-6
    fd_x = [(f(x0 + eps * e, y0) - f(x0 - eps * e, y0)) / (2 * eps) for e in np.eye(3)]
    fd_y = [(f(x0, y0 + eps * e) - f(x0, y0 - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(x.grad.numpy(), fd_x, rtol=1e-8)
    np.testing.assert_allclose(y.grad.numpy(), fd_y, rtol=1e-8)


def test_numpy_arrays_keep_numpys_arithmetic_on_the_host_values():
    a = xsim.array([1.0, 2.0], dtype=float)
    out = np.ones(2) + a
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, [2.0, 3.0])


def test_array_arithmetic_refuses_what_warp_refuses_with_the_reason():
    a = xsim.array([1, 2], dtype=int)
    with pytest.raises(TypeError, match=r"array arithmetic array\(dtype=int32\) \*\* int32: no overload of 'pow'"):
        a ** 2
    with pytest.raises(TypeError, match=r"array arithmetic: 0.5 is not a value of the array's int32 components"):
        a + 0.5
    with pytest.raises(ValueError, match=r"arrays of one shape, got \(2,\) and \(3,\)"):
        a + xsim.zeros(3, dtype=int)
    with pytest.raises(TypeError, match=r"unsupported operand type\(s\) for \+: 'array' and 'str'"):
        a + "x"
    f = xsim.array([1.0, 2.0], dtype=float)
    with pytest.raises(TypeError, match=r"array \*=: the result is vec3f, which an array of float32 cannot hold"):
        f *= xsim.vec3(1.0, 2.0, 3.0)
    with pytest.raises(TypeError, match=r"array \+= numpy array: .* pass xsim.array\(...\) instead"):
        f += np.ones(2)
