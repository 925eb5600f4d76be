"""``@xsim.func_native``: a func whose body is C++ (and whose adjoint is C++ adding into ``adj_<arg>``
from ``adj_ret``), called from kernels, from funcs with custom gradients and from func_grad bodies.
Forward numbers against numpy, gradients against float64 central differences; bad declarations
refused with the parameter named."""

import warnings

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

F64 = xsim.float64
A64 = xsim.array(dtype=F64)


@xsim.func_native("return a * a * b + (double)k;",
                  adj_snippet="adj_a += 2.0 * a * b * adj_ret;\nadj_b += a * a * adj_ret;")
def square_times(a: F64, b: F64, k: int) -> F64:
    ...


@xsim.func_native("return x * 3.0f;")
def triple_no_adjoint(x: float) -> float:
    ...


@xsim.func
def shifted_square_times(x: F64):
    return square_times(x, x + 1.0, 2) - 2.0


@xsim.func
def scaled(x: F64):
    return x * 5.0


@xsim.func_grad(scaled)
def scaled_grad(x: F64, adj: F64):
    # the grad body may call native code too: 0.5 * 1 * 10 + 0 = 5
    xsim.adjoint[x] += square_times(1.0, 10.0, 0) * 0.5 * adj


@xsim.kernel
def native_calls(x: A64, y: A64, z: A64, w: A64):
    i = xsim.tid()
    y[i] = square_times(x[i], z[i], i)
    w[i] = shifted_square_times(x[i]) + scaled(z[i])


@xsim.kernel
def native_without_adjoint(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = triple_no_adjoint(x[i])


XS = np.array([0.5, -1.25, 2.0])
ZS = np.array([1.5, 0.75, -0.5])


def arrays():
    return [xsim.array(XS, dtype=F64, requires_grad=True), xsim.zeros(3, dtype=F64, requires_grad=True),
            xsim.array(ZS, dtype=F64, requires_grad=True), xsim.zeros(3, dtype=F64, requires_grad=True)]


def test_native_snippets_compute_what_their_cpp_says():
    x, y, z, w = arrays()
    xsim.launch(native_calls, 3, inputs=[x, y, z, w])
    np.testing.assert_allclose(y.numpy(), XS * XS * ZS + np.arange(3), rtol=1e-15)
    np.testing.assert_allclose(w.numpy(), XS * XS * (XS + 1.0) + 5.0 * ZS, rtol=1e-15)


def test_native_adjoint_snippets_match_finite_differences_and_custom_grads_use_them():
    x, y, z, w = arrays()
    with xsim.Tape() as tape:
        xsim.launch(native_calls, 3, inputs=[x, y, z, w])
    tape.backward(grads={w: xsim.ones(3, dtype=F64)})
    np.testing.assert_allclose(z.grad.numpy(), [5.0, 5.0, 5.0])  # scaled's func_grad, through native code
    np.testing.assert_allclose(x.grad.numpy(), 3 * XS * XS + 2 * XS, rtol=1e-14)
    x, y, z, w = arrays()
    report = gradcheck(native_calls, [x, y, z, w], outputs=["y"])
    assert report.passed, report


def test_a_native_func_without_adjoint_passes_no_gradient_and_the_tape_says_so():
    x = xsim.array([1.0, 2.0], dtype=float, requires_grad=True)
    y = xsim.zeros(2, dtype=float, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(native_without_adjoint, 2, inputs=[x, y])
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tape.backward(grads={y: xsim.ones(2, dtype=float)})
    assert any("triple_no_adjoint" in str(w.message) for w in seen)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])


def test_func_native_refuses_arrays_and_missing_annotations_and_python_calls():
    with pytest.raises(TypeError, match="parameter 'a' needs a concrete scalar"):
        @xsim.func_native("return a[0];")
        def takes_array(a: A64) -> F64:
            ...
    with pytest.raises(TypeError, match="parameter 'b' needs"):
        @xsim.func_native("return b;")
        def untyped(b) -> F64:
            ...
    with pytest.raises(RuntimeError, match="runs only inside kernels"):
        square_times(1.0, 2.0, 3)
