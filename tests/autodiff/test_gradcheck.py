"""gradcheck, jacobian and jacobian_fd: they agree on correct gradients, catch a wrong one, and leave
the arrays as they found them."""

import numpy as np
import pytest

import xsim
from xsim.autodiff import gradcheck, jacobian, jacobian_fd

F64 = xsim.float64
A = xsim.array(dtype=F64)


@xsim.kernel
def sin_times(x: A, y: A):
    i = xsim.tid()
    y[i] = xsim.sin(x[i]) * x[i]


@xsim.kernel
def mix(x: A, v: xsim.array(dtype=xsim.vec3d), out: xsim.array(dtype=xsim.vec3d), total: A):
    i = xsim.tid()
    out[i] = v[i] * x[i] + xsim.cross(v[i], v[(i + 1) % len(v)])
    xsim.atomic_add(total, 0, x[i] * x[i])


@xsim.kernel
def accumulate_inplace(x: A, acc: A):
    i = xsim.tid()
    acc[i] = acc[i] * x[i] + 1.0


@xsim.func
def square(x: F64):
    return x * x


@xsim.func_grad(square)
def square_wrong_grad(x: F64, adj: F64):
    xsim.adjoint[x] += adj * 3.0 * x  # deliberately wrong: the true derivative is 2x


@xsim.kernel
def uses_wrong_grad(x: A, y: A):
    i = xsim.tid()
    y[i] = square(x[i])


@xsim.kernel
def double(x: A, y: A):
    i = xsim.tid()
    y[i] = 2.0 * x[i]


def f64(values, grad=False):
    return xsim.array(np.array(values, dtype=np.float64), dtype=F64, requires_grad=grad)


def test_a_correct_kernel_passes_with_tiny_errors():
    x, y = f64([0.3, -0.7, 1.1]), f64([0.0, 0.0, 0.0])
    report = gradcheck(sin_times, [x, y])
    assert report.passed
    assert [c.name for c in report.checks] == ["x"]
    assert report["x"].max_abs_error < 1e-8
    # the compared gradients are those of sum(w * y) for fixed random weights w
    w = report["x"].analytic / (np.sin(x.numpy()) + x.numpy() * np.cos(x.numpy()))
    assert np.all((np.abs(w) >= 0.5) & (np.abs(w) <= 1.5))


def test_a_wrong_gradient_fails_and_names_the_worst_component():
    x, y = f64([0.5, -2.0]), f64([0.0, 0.0])
    report = gradcheck(uses_wrong_grad, [x, y])
    assert not report.passed
    check = report["x"]
    assert check.worst_index == 1                    # |3x - 2x| is largest at x = -2
    assert 1.0 <= check.max_abs_error <= 3.0        # |w x| with the weight |w| in [0.5, 1.5]
    assert check.max_rel_error == pytest.approx(1 / 3, rel=1e-6)
    assert "FAIL x" in str(report)
    with pytest.raises(AssertionError, match="gradcheck FAILED"):
        gradcheck(uses_wrong_grad, [x, y], raise_on_failure=True)


def test_kernel_inputs_and_outputs_default_to_what_it_reads_and_writes():
    x = f64([0.2, 0.4, -0.6])
    v = xsim.array(np.arange(9.0).reshape(3, 3) / 7.0, dtype=xsim.vec3d)
    out, total = xsim.zeros(3, dtype=xsim.vec3d), xsim.zeros(1, dtype=F64)
    report = gradcheck(mix, [x, v, out, total], raise_on_failure=True)
    assert sorted(c.name for c in report.checks) == ["v", "x"]
    only_x = gradcheck(mix, [x, v, out, total], wrt=["x"], outputs=["total"])
    assert [c.name for c in only_x.checks] == ["x"]
    w = only_x["x"].analytic / (2 * x.numpy())          # one weight: total has one element
    np.testing.assert_allclose(w, w[0], rtol=1e-12)


def test_inplace_kernels_are_checked_from_their_initial_values():
    x, acc = f64([0.5, 1.5]), f64([2.0, -1.0])
    report = gradcheck(accumulate_inplace, [x, acc], raise_on_failure=True)
    assert sorted(c.name for c in report.checks) == ["acc", "x"]
    J = jacobian(accumulate_inplace, [x, acc])
    np.testing.assert_array_equal(J[("acc", "acc")], np.diag([0.5, 1.5]))
    np.testing.assert_array_equal(J[("acc", "x")], np.diag([2.0, -1.0]))


def test_arrays_are_left_as_they_were():
    x, y = f64([0.3, 0.9]), f64([5.0, 6.0])
    gradcheck(sin_times, [x, y])
    jacobian(sin_times, [x, y])
    np.testing.assert_array_equal(x.numpy(), [0.3, 0.9])
    np.testing.assert_array_equal(y.numpy(), [5.0, 6.0])
    assert x.grad is None and y.grad is None


def test_a_callable_is_checked_through_the_kernels_it_launches():
    def fn(a, b):
        y = xsim.zeros(a.shape, dtype=F64, requires_grad=True)
        z = xsim.zeros(a.shape, dtype=F64, requires_grad=True)
        xsim.launch(sin_times, a.shape, inputs=[a], outputs=[y])
        xsim.launch(accumulate_inplace, a.shape, inputs=[b, y])
        xsim.launch(double, a.shape, inputs=[y], outputs=[z])
        return z
    a, b = f64([0.3, -0.4], grad=True), f64([1.2, 0.7], grad=True)
    report = gradcheck(fn, [a, b], raise_on_failure=True)
    assert [c.name for c in report.checks] == ["inputs[0]", "inputs[1]"]
    J = jacobian(fn, [a, b])  # z = 2 (b a sin(a) + 1)
    np.testing.assert_allclose(J[("output", "inputs[1]")], np.diag(2 * a.numpy() * np.sin(a.numpy())), rtol=1e-12)


def test_jacobian_through_the_tape_matches_finite_differences():
    x = f64([0.2, 0.4, -0.6])
    v = xsim.array(np.arange(9.0).reshape(3, 3) / 7.0, dtype=xsim.vec3d)
    out, total = xsim.zeros(3, dtype=xsim.vec3d), xsim.zeros(1, dtype=F64)
    J = jacobian(mix, [x, v, out, total])
    J_fd = jacobian_fd(mix, [x, v, out, total])
    assert set(J) == {("out", "x"), ("out", "v"), ("total", "x"), ("total", "v")}
    assert J[("out", "v")].shape == (9, 9) and J[("total", "x")].shape == (1, 3)
    for key in J:
        np.testing.assert_allclose(J[key], J_fd[key], atol=1e-8)
    np.testing.assert_allclose(J[("total", "x")], [2 * x.numpy()], rtol=1e-12)


def test_jacobian_of_a_callable():
    def fn(a):
        y = xsim.zeros(a.shape, dtype=F64, requires_grad=True)
        xsim.launch(double, a.shape, inputs=[a], outputs=[y])
        return y
    a = f64([1.0, 2.0], grad=True)
    np.testing.assert_array_equal(jacobian(fn, [a])[("output", "inputs[0]")], 2 * np.eye(2))
    np.testing.assert_allclose(jacobian_fd(fn, [a])[("output", "inputs[0]")], 2 * np.eye(2), atol=1e-9)
