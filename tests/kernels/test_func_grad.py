"""Custom adjoints of funcs: ``@xsim.func_grad`` on generic funcs (``xsim.Float``, ``Any``) and on one
definition among several, and ``@xsim.func_replay`` (what the backward pass runs instead of a func to
recover its result). Forward numbers against plain numpy, gradients against float64 central
differences."""

from typing import Any

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

F64 = xsim.float64
A64 = xsim.array(dtype=F64)
AV3 = xsim.array(dtype=xsim.vec3d)


@xsim.func
def soft_cube(x: xsim.Float):
    return x * x * x + x


@xsim.func_grad(soft_cube)
def soft_cube_grad(x: xsim.Float, adj: xsim.Float):
    xsim.adjoint[x] += adj * (type(x)(3.0) * x * x + type(x)(1.0))


@xsim.func
def weighted_norm(v: Any, w: Any):
    return xsim.length(v) * w


@xsim.func_grad(weighted_norm)
def weighted_norm_grad(v: Any, w: Any, adj: Any):
    xsim.adjoint[v] += xsim.normalize(v) * (w * adj)
    xsim.adjoint[w] += xsim.length(v) * adj


@xsim.kernel
def generic_custom_grads(x: xsim.array(dtype=xsim.Float), v: xsim.array(dtype=Any),
                         y: xsim.array(dtype=xsim.Float)):
    i = xsim.tid()
    y[i] = soft_cube(x[i]) + weighted_norm(v[i], x[i])


@pytest.mark.parametrize("dtype, vdtype", [(xsim.float32, xsim.vec3), (F64, xsim.vec3d)])
def test_func_grads_of_generic_funcs_run_forward_for_each_binding(dtype, vdtype):
    xs = np.array([0.5, -1.2, 2.0])
    vs = np.array([[1.0, 2.0, 2.0], [0.0, -3.0, 4.0], [1.0, 0.0, 0.0]])
    x, v = xsim.array(xs, dtype=dtype), xsim.array(vs, dtype=vdtype)
    y = xsim.zeros(3, dtype=dtype)
    xsim.launch(generic_custom_grads, 3, inputs=[x, v, y])
    want = xs ** 3 + xs + np.linalg.norm(vs, axis=1) * xs
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6 if dtype is xsim.float32 else 1e-14)


def test_func_grads_of_generic_funcs_match_finite_differences():
    x = xsim.array(np.array([0.5, -1.2, 2.0]), dtype=F64, requires_grad=True)
    v = xsim.array(np.array([[1.0, 2.0, 2.0], [0.0, -3.0, 4.0], [1.0, 0.5, 0.0]]), dtype=xsim.vec3d,
                   requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    report = gradcheck(generic_custom_grads, [x, v, y])
    assert report.passed, report


def test_a_func_grad_is_the_one_the_kernel_uses():
    # the grad deliberately differs from the derivative: the tape must report the grad's numbers
    x = xsim.array(np.array([1.0, 2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(uses_marked_grad, 2, inputs=[x, y])
    tape.backward(grads={y: xsim.ones(2, dtype=F64)})
    np.testing.assert_array_equal(x.grad.numpy(), [7.0, 7.0])


@xsim.func
def marked(x: xsim.Float):
    return x * x


@xsim.func_grad(marked)
def marked_grad(x: xsim.Float, adj: xsim.Float):
    xsim.adjoint[x] += adj * type(x)(7.0)


@xsim.kernel
def uses_marked_grad(x: xsim.array(dtype=xsim.Float), y: xsim.array(dtype=xsim.Float)):
    i = xsim.tid()
    y[i] = marked(x[i])


# -- func_grad on one definition among several -----------------------------------------------------


@xsim.func
def stretch(x: F64):
    return x * xsim.abs(x)


@xsim.func_grad(stretch)
def stretch_grad_scalar(x: F64, adj: F64):
    xsim.adjoint[x] += adj * 2.0 * xsim.abs(x)


@xsim.func
def stretch(v: xsim.vec3d):  # a second definition of the func
    return v * xsim.length(v)


@xsim.func_grad(stretch)
def stretch_grad_vector(v: xsim.vec3d, adj: xsim.vec3d):
    n = xsim.length(v)
    xsim.adjoint[v] += adj * n + v * (xsim.dot(adj, v) / n)


@xsim.kernel
def both_stretches(x: A64, v: AV3, y: A64, w: AV3):
    i = xsim.tid()
    y[i] = stretch(x[i])
    w[i] = stretch(v[i])


def test_each_definition_of_a_func_gets_its_own_func_grad():
    x = xsim.array(np.array([0.5, -1.5]), dtype=F64, requires_grad=True)
    v = xsim.array(np.array([[1.0, -2.0, 0.5], [0.3, 0.4, -1.0]]), dtype=xsim.vec3d, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    w = xsim.zeros(2, dtype=xsim.vec3d, requires_grad=True)
    report = gradcheck(both_stretches, [x, v, y, w])
    assert report.passed, report
    xsim.launch(both_stretches, 2, inputs=[x, v, y, w])
    np.testing.assert_allclose(y.numpy(), x.numpy() * np.abs(x.numpy()), rtol=1e-14)


def test_a_func_grad_matching_no_definition_is_refused():
    with pytest.raises(TypeError, match=r"func_grad 'wrong': no definition of func 'stretch' has its parameter"):
        @xsim.func_grad(stretch)
        def wrong(x: xsim.int32, adj: xsim.int32):
            pass


# -- func_replay ------------------------------------------------------------------------------------


@xsim.func
def take_slot(counter: xsim.array(dtype=xsim.int32), slots: xsim.array(dtype=xsim.int32), tid: int):
    slot = xsim.atomic_add(counter, 0, 1)
    slots[tid] = slot
    return slot


@xsim.func_replay(take_slot)
def take_slot_again(counter: xsim.array(dtype=xsim.int32), slots: xsim.array(dtype=xsim.int32), tid: int):
    return slots[tid]  # the slot the forward pass took, not a new one


@xsim.kernel
def scatter_squares(x: A64, counter: xsim.array(dtype=xsim.int32), slots: xsim.array(dtype=xsim.int32),
                    y: A64):
    tid = xsim.tid()
    k = take_slot(counter, slots, tid)
    y[k] = x[k] * x[k]


def test_func_replay_gives_the_backward_pass_the_forward_result_of_an_atomic():
    n = 64
    x = xsim.array(np.linspace(-2.0, 2.0, n), dtype=F64, requires_grad=True)
    counter, slots = xsim.zeros(1, dtype=xsim.int32), xsim.zeros(n, dtype=xsim.int32)
    y = xsim.zeros(n, dtype=F64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(scatter_squares, n, inputs=[x, counter, slots, y])
    tape.backward(grads={y: xsim.ones(n, dtype=F64)})
    assert counter.numpy()[0] == n  # the backward pass took no slots
    assert sorted(slots.numpy()) == list(range(n))
    np.testing.assert_allclose(y.numpy(), x.numpy() ** 2, rtol=1e-14)
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * x.numpy(), rtol=1e-14)


@xsim.func
def clamped_log(x: xsim.Float):
    # forward: a branchy formula; the replay is the same function written smoothly
    r = type(x)(0.0)
    if x > type(x)(1.0):
        r = xsim.log(x)
    else:
        r = x - type(x)(1.0)
    return r


@xsim.func_replay(clamped_log)
def clamped_log_replay(x: xsim.Float):
    return xsim.where(x > type(x)(1.0), xsim.log(x), x - type(x)(1.0))


@xsim.kernel
def uses_clamped_log(x: xsim.array(dtype=xsim.Float), y: xsim.array(dtype=xsim.Float)):
    i = xsim.tid()
    y[i] = clamped_log(x[i]) * x[i]


def test_without_a_func_grad_the_adjoint_is_that_of_the_replay_of_a_generic_func():
    xs = np.array([0.25, 0.9, 1.5, 3.0])
    x = xsim.array(xs, dtype=F64, requires_grad=True)
    y = xsim.zeros(4, dtype=F64, requires_grad=True)
    report = gradcheck(uses_clamped_log, [x, y])
    assert report.passed, report
    xsim.launch(uses_clamped_log, 4, inputs=[x, y])
    np.testing.assert_allclose(y.numpy(), np.where(xs > 1.0, np.log(xs), xs - 1.0) * xs, rtol=1e-14)
    x32, y32 = xsim.array(xs, dtype=xsim.float32), xsim.zeros(4, dtype=xsim.float32)
    xsim.launch(uses_clamped_log, 4, inputs=[x32, y32])
    np.testing.assert_allclose(y32.numpy(), np.where(xs > 1.0, np.log(xs), xs - 1.0) * xs, rtol=1e-6)


def test_a_func_replay_with_other_parameters_is_refused():
    with pytest.raises(TypeError, match=r"func_replay of 'clamped_log': takes 2 parameters, the func 1"):
        @xsim.func_replay(clamped_log)
        def replay_two(x: xsim.Float, y: xsim.Float):
            return x


# -- a func_grad of a func returning several values --------------------------------------------------


@xsim.func
def polar(x: xsim.Float, y: xsim.Float):
    return xsim.sqrt(x * x + y * y), xsim.atan2(y, x)


@xsim.func_grad(polar)
def polar_grad(px: xsim.Float, py: xsim.Float, adj_r: xsim.Float, adj_theta: xsim.Float):
    r2 = px * px + py * py
    r = xsim.sqrt(r2)
    xsim.adjoint[px] += adj_r * px / r - adj_theta * py / r2
    xsim.adjoint[py] += adj_r * py / r + adj_theta * px / r2


@xsim.kernel
def to_polar(x: xsim.array(dtype=xsim.Float), y: xsim.array(dtype=xsim.Float), r: xsim.array(dtype=xsim.Float),
             theta: xsim.array(dtype=xsim.Float)):
    i = xsim.tid()
    ri, ti = polar(x[i], y[i])
    r[i] = ri
    theta[i] = ti


def test_a_func_grad_takes_one_adjoint_per_result_of_a_tuple_returning_func():
    xs, ys = np.array([1.0, -2.0, 0.5]), np.array([0.5, 1.5, -3.0])
    x, y = xsim.array(xs, dtype=F64, requires_grad=True), xsim.array(ys, dtype=F64, requires_grad=True)
    r, theta = xsim.zeros(3, dtype=F64, requires_grad=True), xsim.zeros(3, dtype=F64, requires_grad=True)
    report = gradcheck(to_polar, [x, y, r, theta])
    assert report.passed, report
    xsim.launch(to_polar, 3, inputs=[x, y, r, theta])
    np.testing.assert_allclose(r.numpy(), np.hypot(xs, ys), rtol=1e-14)
    np.testing.assert_allclose(theta.numpy(), np.arctan2(ys, xs), rtol=1e-14)


def test_a_func_grad_with_too_few_adjoints_is_refused_naming_it():
    @xsim.func
    def pair(x: F64):
        return x, x * x

    @xsim.func_grad(pair)
    def pair_grad(x: F64, adj: F64):
        xsim.adjoint[x] += adj

    @xsim.kernel(module="unique")
    def uses_pair(x: A64, y: A64):
        a, b = pair(x[0])
        y[0] = a + b

    with pytest.raises(xsim.CompileError, match=r"(?s)test_func_grad.py:\d+:\d+:.*a func_grad takes the func's 1 "
                                                r"parameters plus one adjoint per result \(2\), not 2 parameters"):
        xsim.launch(uses_pair, 1, inputs=[xsim.zeros(1, dtype=F64), xsim.zeros(1, dtype=F64)])


# -- adjoints of struct fields and vector components ------------------------------------------------


@xsim.struct
class Spring:
    k: F64
    rest: xsim.vec3d


@xsim.func
def spring_energy(s: Spring, x: xsim.vec3d):
    d = x - s.rest
    return 0.5 * s.k * xsim.dot(d, d)


@xsim.func_grad(spring_energy)
def spring_energy_grad(s: Spring, x: xsim.vec3d, adj: F64):
    d = x - s.rest
    xsim.adjoint[s.k] += 0.5 * xsim.dot(d, d) * adj
    for c in range(3):
        xsim.adjoint[s.rest][c] += -s.k * d[c] * adj
    xsim.adjoint[x] += d * (s.k * adj)


@xsim.kernel
def spring_energies(springs: xsim.array(dtype=Spring), x: AV3, e: A64):
    i = xsim.tid()
    e[i] = spring_energy(springs[i], x[i])


def test_a_func_grad_adds_into_struct_fields_and_their_components():
    springs = xsim.array([Spring(k=2.0, rest=xsim.vec3d(0.0, 1.0, 0.5)),
                          Spring(k=0.5, rest=xsim.vec3d(-1.0, 0.0, 2.0))], dtype=Spring, requires_grad=True)
    x = xsim.array(np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 1.0]]), dtype=xsim.vec3d, requires_grad=True)
    e = xsim.zeros(2, dtype=F64, requires_grad=True)
    report = gradcheck(spring_energies, [springs, x, e])
    assert report.passed, report
    assert {c.name for c in report.checks} == {"springs", "x"}


@xsim.func
def rest_sum(s: Spring):
    return 2.0 * s.rest.x + s.rest.y


@xsim.func_grad(rest_sum)
def rest_sum_grad(s: Spring, adj: F64):
    xsim.adjoint[s.rest].x += 2.0 * adj
    xsim.adjoint[s.rest].y += 100.0 * adj  # replaced by the plain write below
    xsim.adjoint[s.rest].y = adj


@xsim.kernel
def rest_sums(springs: xsim.array(dtype=Spring), e: A64):
    i = xsim.tid()
    e[i] = rest_sum(springs[i])


def test_a_func_grad_writes_and_adds_into_components_of_a_field_adjoint():
    springs = xsim.array([Spring(k=2.0, rest=xsim.vec3d(0.0, 1.0, 0.5)),
                          Spring(k=0.5, rest=xsim.vec3d(-1.0, 0.0, 2.0))], dtype=Spring, requires_grad=True)
    e = xsim.zeros(2, dtype=F64, requires_grad=True)
    report = gradcheck(rest_sums, [springs, e])
    assert report.passed, report


# -- a func_grad of a func that writes arrays and returns nothing -----------------------------------


@xsim.func
def write_softplus(i: int, x: A64, y: A64):
    y[i] = xsim.log(1.0 + xsim.exp(x[i]))


@xsim.func_grad(write_softplus)
def write_softplus_grad(i: int, x: A64, y: A64):
    # d softplus / dx = 1 - exp(-y), from the value the forward pass wrote (for a unit adjoint of y, as in
    # Warp's example: the grad body sees no adjoint of y)
    xsim.adjoint[x][i] += 1.0 - xsim.exp(-y[i])


@xsim.kernel
def softplus_all(x: A64, y: A64):
    write_softplus(xsim.tid(), x, y)


def test_a_func_grad_adds_into_an_array_gradient_for_a_func_without_result():
    xs = np.array([-2.0, 0.0, 0.7, 3.0])
    x = xsim.array(xs, dtype=F64, requires_grad=True)
    y = xsim.zeros(4, dtype=F64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(softplus_all, 4, inputs=[x, y])
    tape.backward(grads={y: xsim.ones(4, dtype=F64)})
    h = 1e-6
    fd = (np.log1p(np.exp(xs + h)) - np.log1p(np.exp(xs - h))) / (2 * h)  # d sum(y) / dx, central differences
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-8)
    np.testing.assert_allclose(y.numpy(), np.log1p(np.exp(xs)), rtol=1e-14)


def test_adjoint_of_an_array_needs_its_indices():
    @xsim.func
    def touch(x: A64):
        x[0] = 1.0

    @xsim.func_grad(touch)
    def touch_grad(x: A64):
        xsim.adjoint[x] += 1.0

    @xsim.kernel(module="unique")
    def uses_touch(x: A64):
        touch(x)

    with pytest.raises(xsim.CompileError, match=r"(?s)test_func_grad.py:\d+:\d+:.*write adjoint\[x\]\[index\] \+= value "
                                                r"with 1 index"):
        xsim.launch(uses_touch, 1, inputs=[xsim.zeros(1, dtype=F64)])


@xsim.func
def logistic(x: F64):
    return 1.0 / (1.0 + xsim.exp(-x))


@xsim.func_grad(logistic)
def logistic_grad(x: F64, adj: F64):
    xsim.adjoint[x] += adj * logistic(x) * (1.0 - logistic(x))  # the func itself, inside its own grad


@xsim.kernel
def logistic_all(x: A64, y: A64):
    i = xsim.tid()
    y[i] = logistic(x[i])


def test_a_func_grad_may_call_its_own_func():
    x = xsim.array(np.array([-3.0, 0.2, 1.5]), dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    report = gradcheck(logistic_all, [x, y])
    assert report.passed, report


@xsim.func
def guarded_sqrt(x: F64):
    return xsim.sqrt(x)


@xsim.func_grad(guarded_sqrt)
def guarded_sqrt_grad(x: F64, adj: F64):
    if x > 0.0:  # grad() of a builtin inside a grad body: the body runs in the backward pass only
        xsim.adjoint[x] += xsim.grad(xsim.sqrt)(x) * adj


@xsim.kernel
def guarded_sqrt_all(x: A64, y: A64):
    i = xsim.tid()
    y[i] = guarded_sqrt(x[i]) * x[i]


def test_a_func_grad_may_take_grad_of_a_builtin():
    x = xsim.array(np.array([0.25, 1.0, 4.0, 9.5]), dtype=F64, requires_grad=True)
    y = xsim.zeros(4, dtype=F64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(guarded_sqrt_all, 4, inputs=[x, y])
    tape.backward(grads={y: xsim.ones(4, dtype=F64)})
    np.testing.assert_allclose(x.grad.numpy(), 1.5 * np.sqrt(x.numpy()), rtol=1e-14)  # d(x^1.5)/dx
    x.grad.zero_()
    report = gradcheck(guarded_sqrt_all, [x, y])
    assert report.passed, report


@xsim.func
def logged_scale(log: xsim.array(dtype=F64), counter: xsim.array(dtype=xsim.int32), x: F64, s: F64):
    return x * s


@xsim.func_grad(logged_scale)
def logged_scale_grad(log: xsim.array(dtype=F64), counter: xsim.array(dtype=xsim.int32), x: F64, s: F64, adj: F64):
    slot = xsim.atomic_add(counter, 0, 1)  # the grad body's own array writes happen, once per backward
    log[slot] = adj * s
    xsim.adjoint[x] += adj * s
    xsim.adjoint[s] += adj * x


@xsim.kernel(module="xsim_tests_func_grad_side_effects")
def scaled_with_log(log: A64, counter: xsim.array(dtype=xsim.int32), x: A64, s: A64, y: A64):
    i = xsim.tid()
    y[i] = logged_scale(log, counter, x[i], s[i])


def test_a_func_grad_body_writes_arrays_once_in_the_backward_pass():
    x, s, w = np.array([3.0, -1.0, 0.5, 2.0]), np.array([2.0, 4.0, -3.0, 0.25]), np.array([1.0, 2.0, 3.0, 4.0])
    log, counter = xsim.zeros(4, dtype=F64), xsim.zeros(1, dtype=xsim.int32)
    xa, sa = xsim.array(x, dtype=F64, requires_grad=True), xsim.array(s, dtype=F64, requires_grad=True)
    y = xsim.zeros(4, dtype=F64, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(scaled_with_log, 4, inputs=[log, counter, xa, sa, y])
    assert counter.numpy()[0] == 0  # the forward pass does not run the grad body
    tape.backward(grads={y: xsim.array(w, dtype=F64)})
    assert counter.numpy()[0] == 4
    np.testing.assert_array_equal(np.sort(log.numpy()), np.sort(w * s))
    np.testing.assert_array_equal(xa.grad.numpy(), w * s)
    np.testing.assert_array_equal(sa.grad.numpy(), w * x)
