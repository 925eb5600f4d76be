"""Gradients for the kernel shapes that Warp 1.19 differentiates wrongly, with exact expected numbers.

Each test launches a kernel on a Tape, seeds the output gradient and checks the input gradient
against the hand-derived value (and, where the kernel is smooth, against finite differences).
"""

import warnings

import numpy as np
import pytest

import xsim
from xsim.autodiff import gradcheck

F64 = xsim.float64
A = xsim.array(dtype=F64)
AV = xsim.array(dtype=xsim.vec3d)


def vec_inputs(rows):
    """A vec3d array with gradients, from a list of 3-tuples."""
    return xsim.array(np.array(rows, dtype=np.float64), dtype=xsim.vec3d, requires_grad=True)


def backward_once(kernel, inputs, outputs, seeds, dim=None):
    """Launch on a tape, seed each output's gradient, run backward; returns the tape."""
    with xsim.Tape() as tape:
        xsim.launch(kernel, dim if dim is not None else outputs[0].shape, inputs=inputs, outputs=outputs)
    tape.backward(grads={o: s for o, s in zip(outputs, seeds)})
    return tape


# -------------------------------------------------------------------------------------------------
# element in-place ops and component writes


@xsim.kernel
def local_vector_inplace(a: AV, b: AV):
    i = xsim.tid()
    tmp = xsim.vec3d()
    tmp[0] += a[i][0]
    tmp[1] += a[i][1]
    tmp[2] += a[i][2]
    b[i] = tmp


@xsim.kernel
def component_writes_to_array(x: A, y: AV):
    i = xsim.tid()
    y[i].x = 2.0 * x[i]
    y[i].y = 3.0 * x[i]
    y[i].z = 4.0 * x[i]


@xsim.kernel
def component_writes_to_local(x: A, y: AV):
    i = xsim.tid()
    v = xsim.vec3d()
    v.x = 2.0 * x[i]
    v.y = 3.0 * x[i]
    v.z = 4.0 * x[i]
    y[i] = v


def test_inplace_ops_on_a_local_vector_pass_the_gradient_through_once():
    a = vec_inputs([(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)])
    b = xsim.zeros(2, dtype=xsim.vec3d, requires_grad=True)
    backward_once(local_vector_inplace, [a], [b], [np.ones((2, 3))])
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))


@pytest.mark.parametrize("kernel", [component_writes_to_array, component_writes_to_local])
def test_component_writes_give_the_sum_of_their_factors(kernel):
    x = xsim.array(np.array([0.5, -1.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=xsim.vec3d, requires_grad=True)
    backward_once(kernel, [x], [y], [np.ones((2, 3))])
    np.testing.assert_array_equal(y.numpy(), [[1.0, 1.5, 2.0], [-2.0, -3.0, -4.0]])
    np.testing.assert_array_equal(x.grad.numpy(), [9.0, 9.0])


# -------------------------------------------------------------------------------------------------
# aliasing


@xsim.kernel
def alias_plain(x: AV, y: AV):
    i = xsim.tid()
    v = x[i]
    w = v
    y[i] = 2.0 * w + v


@xsim.kernel
def alias_of_alias(x: AV, y: AV):
    i = xsim.tid()
    v = x[i]
    w = v
    u = w
    u[1] = 0.0
    y[i] = u + w + v


@xsim.kernel
def alias_then_reassign(x: AV, y: AV):
    i = xsim.tid()
    v = x[i]
    w = v
    w = w * 3.0
    y[i] = v + w


@xsim.kernel
def alias_inside_a_loop(x: AV, n: int, y: AV):
    i = xsim.tid()
    v = x[i]
    s = xsim.vec3d()
    for _k in range(n):
        w = v
        w[2] = 0.0
        s = s + w
    y[i] = s


@xsim.func
def alias_branch(v: xsim.vec3d):
    w = v
    if w[0] > 0.0:
        w[1] = 2.0 * w[1]
    else:
        w[2] = 3.0 * w[2]
    return w + v


@xsim.kernel
def alias_branch_in_func(x: AV, y: AV):
    i = xsim.tid()
    y[i] = alias_branch(x[i])


@xsim.func
def overwrite_param(v: xsim.vec3d) -> xsim.vec3d:
    v[0] = 5.0
    return v * 2.0


@xsim.kernel
def func_param_is_a_copy(x: AV, y: AV):
    i = xsim.tid()
    v = x[i]
    w = overwrite_param(v)
    y[i] = v + w


@xsim.kernel
def alias_then_overwrite_component(x: AV, y: AV):
    i = xsim.tid()
    v = x[i]
    w = v
    w[0] = 5.0
    y[i] = v + w


@xsim.kernel
def load_then_overwrite_component(x: AV, y: AV):
    i = xsim.tid()
    w = x[i]
    w[0] = 5.0
    y[i] = w


ALIAS_CASES = [
    (alias_plain, [], [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]),
    (alias_of_alias, [], [[3.0, 2.0, 3.0], [3.0, 2.0, 3.0]]),
    (alias_then_reassign, [], [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]),
    (alias_inside_a_loop, [3], [[3.0, 3.0, 0.0], [3.0, 3.0, 0.0]]),
    # x[0] > 0 scales the y component, x[1] <= 0 scales the z component
    (alias_branch_in_func, [], [[2.0, 3.0, 2.0], [2.0, 2.0, 4.0]]),
    (func_param_is_a_copy, [], [[1.0, 3.0, 3.0], [1.0, 3.0, 3.0]]),
    (alias_then_overwrite_component, [], [[1.0, 2.0, 2.0], [1.0, 2.0, 2.0]]),
    (load_then_overwrite_component, [], [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]),
]


@pytest.mark.parametrize("kernel, extra, expected", ALIAS_CASES, ids=[c[0].key for c in ALIAS_CASES])
def test_aliases_are_values_and_get_exact_gradients(kernel, extra, expected):
    x = vec_inputs([(1.0, 2.0, 3.0), (-1.0, 0.5, 2.0)])
    y = xsim.zeros(2, dtype=xsim.vec3d, requires_grad=True)
    backward_once(kernel, [x, *extra], [y], [np.ones((2, 3))])
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    gradcheck(kernel, [x, *extra, y], raise_on_failure=True)


def test_writing_into_an_alias_leaves_the_original_untouched():
    x = vec_inputs([(1.0, 2.0, 3.0)])
    y = xsim.zeros(1, dtype=xsim.vec3d, requires_grad=True)
    xsim.launch(alias_then_overwrite_component, 1, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [[6.0, 4.0, 6.0]])


# -------------------------------------------------------------------------------------------------
# repeated component writes and ternaries


@xsim.kernel
def repeated_matrix_component_update(s: A, out: xsim.array(dtype=xsim.mat22d)):
    i = xsim.tid()
    m = xsim.mat22d()
    m[0, 0] = m[0, 0] + s[i]
    m[0, 0] = m[0, 0] + s[i]
    m[1, 1] = 3.0 * s[i]
    out[i] = m


@xsim.kernel
def ternary_same_array(x: A, flag: xsim.array(dtype=int), y: A):
    i = xsim.tid()
    y[i] = x[i] * 2.0 if flag[i] > 0 else x[i] * x[i] * 3.0


@xsim.kernel
def where_same_array(x: A, flag: xsim.array(dtype=int), y: A):
    i = xsim.tid()
    y[i] = xsim.where(flag[i] > 0, x[i] * 2.0, x[i] * x[i] * 3.0)


@xsim.kernel
def nested_ternary(x: A, y: A):
    i = xsim.tid()
    y[i] = (x[i] * 2.0 if x[i] > 0.0 else x[i] * 3.0) if x[i] < 1.0 else x[i] * x[i]


def test_repeated_matrix_component_update_is_not_double_counted():
    s = xsim.array(np.array([1.5, -2.0]), dtype=F64, requires_grad=True)
    out = xsim.zeros(2, dtype=xsim.mat22d, requires_grad=True)
    seed = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 10.0], [10.0, 1.0]]])
    backward_once(repeated_matrix_component_update, [s], [out], [seed])
    np.testing.assert_array_equal(out.numpy()[0], [[3.0, 0.0], [0.0, 4.5]])
    np.testing.assert_array_equal(s.grad.numpy(), [2.0, 5.0])


@pytest.mark.parametrize("kernel", [ternary_same_array, where_same_array])
def test_a_ternary_reading_one_array_in_both_branches_takes_the_chosen_branch(kernel):
    x = xsim.array(np.array([1.5, 2.0]), dtype=F64, requires_grad=True)
    flag = xsim.array(np.array([1, 0]), dtype=xsim.int32)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    backward_once(kernel, [x, flag], [y], [np.ones(2)])
    np.testing.assert_array_equal(y.numpy(), [3.0, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 12.0])


def test_a_nested_ternary_differentiates_the_branch_taken():
    x = xsim.array(np.array([0.5, -1.0, 2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    backward_once(nested_ternary, [x], [y], [np.ones(3)])
    np.testing.assert_array_equal(y.numpy(), [1.0, -3.0, 4.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0, 4.0])


# -------------------------------------------------------------------------------------------------
# structs


@xsim.struct
class Particles:
    pos: xsim.array(dtype=xsim.vec3d)
    mass: xsim.array(dtype=F64)
    scale: F64


@xsim.struct
class Body:
    pos: xsim.vec3d
    mass: F64


@xsim.func
def make_body(p: xsim.vec3d, m: F64) -> Body:
    b = Body()
    b.pos = p * 2.0
    b.mass = m * m
    return b


@xsim.kernel
def struct_argument(p: Particles, out: A):
    i = xsim.tid()
    out[i] = p.scale * p.mass[i] * xsim.dot(p.pos[i], p.pos[i])


@xsim.kernel
def array_of_structs(bodies: xsim.array(dtype=Body), out: A):
    i = xsim.tid()
    b = bodies[i]
    out[i] = b.mass * b.pos.y + b.pos.x


@xsim.kernel
def struct_from_func(x: AV, m: A, out: A):
    i = xsim.tid()
    b = make_body(x[i], m[i])
    out[i] = b.mass * b.pos.z


def test_struct_argument_arrays_receive_gradients():
    p = Particles()
    p.pos = vec_inputs([(1.0, 2.0, 3.0)])
    p.mass = xsim.array(np.array([2.0]), dtype=F64, requires_grad=True)
    p.scale = 0.5
    out = xsim.zeros(1, dtype=F64, requires_grad=True)
    backward_once(struct_argument, [p], [out], [np.ones(1)])
    assert out.numpy()[0] == 14.0
    np.testing.assert_array_equal(p.pos.grad.numpy(), [[2.0, 4.0, 6.0]])  # scale * mass * 2 pos
    np.testing.assert_array_equal(p.mass.grad.numpy(), [7.0])              # scale * |pos|^2


def test_an_array_of_structs_receives_field_gradients():
    bodies = xsim.array([Body(pos=xsim.vec3d(1.0, 2.0, 3.0), mass=4.0)], dtype=Body, requires_grad=True)
    out = xsim.zeros(1, dtype=F64, requires_grad=True)
    backward_once(array_of_structs, [bodies], [out], [np.ones(1)])
    assert out.numpy()[0] == 9.0
    g = bodies.grad.numpy()[0]
    np.testing.assert_array_equal(g["pos"], [1.0, 4.0, 0.0])
    assert g["mass"] == 2.0


def test_a_struct_returned_from_a_func_carries_gradients():
    x = vec_inputs([(1.0, 2.0, 3.0)])
    m = xsim.array(np.array([1.5]), dtype=F64, requires_grad=True)
    out = xsim.zeros(1, dtype=F64, requires_grad=True)
    backward_once(struct_from_func, [x, m], [out], [np.ones(1)])
    assert out.numpy()[0] == 13.5                              # m^2 * 2 z
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 0.0, 4.5]])
    np.testing.assert_array_equal(m.grad.numpy(), [18.0])      # 2 m * 2 z


# -------------------------------------------------------------------------------------------------
# loops


@xsim.kernel
def static_power(x: A, y: A):
    i = xsim.tid()
    s = F64(1.0)
    for _k in range(3):
        s = s * x[i]
    y[i] = s


@xsim.kernel
def dynamic_power(x: A, n: int, y: A):
    i = xsim.tid()
    s = F64(1.0)
    for _k in range(n):
        s = s * x[i]
    y[i] = s


@xsim.kernel
def while_power(x: A, n: int, y: A):
    i = xsim.tid()
    s = F64(1.0)
    k = 0
    while k < n:
        s = s * x[i]
        k = k + 1
    y[i] = s


@xsim.kernel
def loop_with_break(x: A, n: int, y: A):
    i = xsim.tid()
    s = F64(1.0)
    for k in range(n):
        if k == 2:
            break
        s = s * x[i]
    y[i] = s


@xsim.kernel
def loop_with_continue(x: A, n: int, y: A):
    i = xsim.tid()
    s = F64(1.0)
    for k in range(n):
        if k % 2 == 1:
            continue
        s = s * x[i]
    y[i] = s


@xsim.kernel
def loop_from_runtime_bounds(x: A, lo: int, hi: int, y: A):
    i = xsim.tid()
    s = F64(0.0)
    for k in range(lo, hi, 2):
        s = s + F64(k) * x[i] * x[i]
    y[i] = s


@xsim.kernel
def break_on_value(x: A, n: int, y: A):
    i = xsim.tid()
    s = x[i]
    for _k in range(n):
        s = s * s
        if s > 10.0:
            break
    y[i] = s


@xsim.kernel
def store_inside_dynamic_loop(x: A, n: int, y: AV):
    i = xsim.tid()
    for k in range(n):
        y[i].y = x[i] * F64(k)
    y[i].x = 2.0 * x[i]


LOOP_CASES = [
    # x = 1.5 and -2: d/dx x^3 = 3 x^2
    (static_power, [], [6.75, 12.0]),
    (dynamic_power, [3], [6.75, 12.0]),
    (while_power, [3], [6.75, 12.0]),
    (loop_with_break, [7], [3.0, -4.0]),              # s = x^2
    (loop_with_continue, [5], [6.75, 12.0]),           # k = 0, 2, 4: s = x^3
    (loop_from_runtime_bounds, [1, 6], [27.0, -36.0]),  # k = 1, 3, 5: s = 9 x^2
    # 1.5 -> 2.25 -> 5.0625 -> 25.6 (break): s = x^8; -2 -> 4 -> 16 (break): s = x^4
    (break_on_value, [5], [8 * 1.5 ** 7, 4 * (-2.0) ** 3]),
    # y.y = (n - 1) x from the last iteration, y.x = 2 x: stores inside a loop keep their gradient
    (store_inside_dynamic_loop, [3], [4.0, 4.0]),
]


@pytest.mark.parametrize("kernel, extra, expected", LOOP_CASES, ids=[c[0].key for c in LOOP_CASES])
def test_loops_give_exact_gradients(kernel, extra, expected):
    x = xsim.array(np.array([1.5, -2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=kernel.params[-1][1].dtype, requires_grad=True)
    backward_once(kernel, [x, *extra], [y], [np.ones(y.numpy().shape)])
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-14)
    gradcheck(kernel, [x, *extra, y], raise_on_failure=True)


# -------------------------------------------------------------------------------------------------
# custom gradients and non-differentiable kernels


@xsim.func
def clipped_square(x: F64):
    return x * x


@xsim.func_grad(clipped_square)
def clipped_square_grad(x: F64, adj: F64):
    # a deliberately different rule: the tests can tell it from the true derivative 2x
    xsim.adjoint[x] += adj * 10.0


@xsim.kernel
def uses_custom_grad(x: A, y: A):
    i = xsim.tid()
    y[i] = 3.0 * clipped_square(x[i])


@xsim.func(differentiable=False)
def frozen_square(x: F64) -> F64:
    return x * x


@xsim.kernel
def uses_frozen_func(x: A, y: A):
    i = xsim.tid()
    y[i] = frozen_square(x[i]) + 3.0 * x[i]


@xsim.kernel(enable_backward=False)
def not_differentiable(x: A, y: A):
    i = xsim.tid()
    y[i] = 2.0 * x[i]


def test_func_grad_replaces_the_generated_adjoint():
    x = xsim.array(np.array([1.5, -2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    backward_once(uses_custom_grad, [x], [y], [np.ones(2)])
    np.testing.assert_array_equal(y.numpy(), [6.75, 12.0])
    np.testing.assert_array_equal(x.grad.numpy(), [30.0, 30.0])


def test_enable_backward_false_is_skipped_with_a_warning():
    x = xsim.array(np.array([1.5]), dtype=F64, requires_grad=True)
    y = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(not_differentiable, 1, inputs=[x], outputs=[y])
    with pytest.warns(UserWarning, match="skipped kernel 'not_differentiable'"):
        tape.backward(grads={y: np.ones(1)})
    assert tape.skipped == ["not_differentiable"]
    assert x.grad.numpy()[0] == 0.0
    assert y.numpy()[0] == 3.0


def test_a_func_declared_not_differentiable_is_a_constant_and_the_tape_says_so():
    x = xsim.array(np.array([1.5, -2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(uses_frozen_func, 2, inputs=[x], outputs=[y])
    with pytest.warns(UserWarning, match="kernel 'uses_frozen_func' calls func 'frozen_square' "
                                         r"\(differentiable=False\)"):
        tape.backward(grads={y: np.ones(2)})
    assert tape.skipped == ["uses_frozen_func/frozen_square"]
    np.testing.assert_array_equal(y.numpy(), [6.75, -2.0])
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


# -------------------------------------------------------------------------------------------------
# kernels the compiler refuses to differentiate


@xsim.kernel
def read_after_write(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * 2.0
    x[i] = y[i] + 1.0


@xsim.kernel
def component_scaled_in_place(v: AV, s: A):
    i = xsim.tid()
    v[i].x *= s[i]  # Warp refuses this with backward on; xsim differentiates it (d/ds = old x, d/dx = s)


@xsim.kernel
def component_add_then_read(v: AV, s: A, out: A):
    i = xsim.tid()
    v[i].y += s[i]                    # an atomic add into a component, read back below
    if s[i] > 0.0:
        v[i].z = v[i].y * s[i]        # a store read back below, on one side of a branch
    out[i] = v[i].y * v[i].z + v[i].x


@xsim.kernel
def read_after_write_in_a_loop(x: A, y: A, n: int):
    i = xsim.tid()
    for _ in range(n):                # a dynamic loop (a constant one is unrolled, and then replayed)
        y[i] = y[i] * x[i] + 1.0      # each iteration reads what the previous one wrote


@xsim.kernel
def atomic_result_used(x: A, counter: A, y: A):
    i = xsim.tid()
    old = xsim.atomic_add(counter, 0, x[i])
    y[i] = old * x[i]


@xsim.struct
class Holder:
    a: xsim.array(dtype=F64)


@xsim.kernel
def array_in_a_local_struct(x: A, y: A):
    i = xsim.tid()
    h = Holder(a=x)
    y[i] = h.a[i] * 2.0


@xsim.kernel
def array_in_a_struct_chosen_by_a_branch(x: A, z: A, y: A):
    i = xsim.tid()
    h = Holder(a=x)
    if i > 0:
        h = Holder(a=z)
    y[i] = h.a[i] * 2.0


@xsim.kernel
def atomic_result_ignored(x: A, total: A):
    i = xsim.tid()
    xsim.atomic_add(total, 0, x[i] * x[i])


def test_a_value_read_back_after_the_kernel_wrote_it_gets_its_gradient():
    x = xsim.array(np.array([1.0, -0.5]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(read_after_write, 2, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [2.0, -1.0])   # y = 2 x, then x = y + 1
    np.testing.assert_array_equal(x.numpy(), [3.0, 0.0])
    # seeds: dL/dy = g_y and dL/dx(after) = g_x, so dL/dx(before) = 2 g_y + 2 g_x
    tape.backward(grads={y: np.array([1.0, 3.0]), x: np.array([0.5, -1.0])})
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    tape.zero()
    tape.backward(grads={y: np.array([1.0, 3.0]), x: np.array([0.5, -1.0])})  # the tape's copy is intact
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


def test_components_written_then_read_match_numpy_and_finite_differences():
    v0 = np.array([[1.0, 2.0, -1.0], [0.5, -1.5, 2.0], [2.0, 0.25, 3.0]])
    s0 = np.array([0.75, -0.5, 1.25])
    v, s, out = vec_inputs(v0), xsim.array(s0, dtype=F64, requires_grad=True), xsim.zeros(3, dtype=F64)
    xsim.launch(component_add_then_read, 3, inputs=[v, s], outputs=[out])
    want = v0.copy()
    want[:, 1] += s0
    want[s0 > 0, 2] = want[s0 > 0, 1] * s0[s0 > 0]
    np.testing.assert_allclose(v.numpy(), want, rtol=1e-15)
    np.testing.assert_allclose(out.numpy(), want[:, 1] * want[:, 2] + want[:, 0], rtol=1e-15)
    v, s = vec_inputs(v0), xsim.array(s0, dtype=F64, requires_grad=True)
    gradcheck(component_add_then_read, [v, s, xsim.zeros(3, dtype=F64, requires_grad=True)], outputs=["v", "out"],
              wrt=["v", "s"], raise_on_failure=True)


def test_a_component_scaled_in_place_in_an_array_matches_numpy_and_finite_differences():
    v0 = np.array([[1.0, 2.0, -1.0], [0.5, -1.5, 2.0]])
    s0 = np.array([0.75, -2.0])
    v, s = vec_inputs(v0), xsim.array(s0, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(component_scaled_in_place, 2, inputs=[v, s])
    tape.backward(grads={v: np.ones((2, 3))})
    np.testing.assert_allclose(v.numpy(), v0 * np.array([[0.75, 1, 1], [-2.0, 1, 1]]), rtol=1e-15)
    np.testing.assert_allclose(s.grad.numpy(), v0[:, 0], rtol=1e-15)
    np.testing.assert_allclose(v.grad.numpy(), [[0.75, 1, 1], [-2.0, 1, 1]], rtol=1e-15)  # d(x*s)/dx = s
    v, s = vec_inputs(v0), xsim.array(s0, dtype=F64, requires_grad=True)
    gradcheck(component_scaled_in_place, [v, s], outputs=["v"], wrt=["v", "s"], raise_on_failure=True)


def test_a_read_after_write_inside_a_loop_is_refused_at_backward_time():
    x = xsim.array(np.array([2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(read_after_write_in_a_loop, 1, inputs=[x, y, 3])
    assert y.numpy()[0] == 7.0  # the forward still runs: ((0 x + 1) x + 1) x + 1
    with pytest.raises(xsim.CompileError, match=r"read_after_write_in_a_loop.*test_warp_pitfalls.py:\d+: array 'y' "
                                                r"is read after this kernel wrote it, inside a loop"):
        tape.backward(grads={y: np.ones(1)})


def test_an_adjoint_launch_of_a_kernel_that_rereads_its_writes_asks_for_a_tape():
    x, y = xsim.array(np.array([1.0]), dtype=F64), xsim.zeros(1, dtype=F64)
    with pytest.raises(RuntimeError, match="kernel 'read_after_write' reads an array after writing it.*Tape"):
        xsim.launch(read_after_write, 1, inputs=[x], outputs=[y], adj_inputs=[xsim.zeros(1, dtype=F64)],
                    adj_outputs=[xsim.ones(1, dtype=F64)], adjoint=True)


def test_a_used_atomic_result_is_refused_at_backward_time():
    x = xsim.array(np.array([1.0, 2.0]), dtype=F64, requires_grad=True)
    counter = xsim.zeros(1, dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(atomic_result_used, 2, inputs=[x, counter], outputs=[y])
    with pytest.raises(xsim.CompileError, match=r"atomic_result_used.*the value returned by atomic_add\(\) is used"):
        tape.backward(grads={y: np.ones(2)})


def test_an_array_put_in_a_local_struct_and_read_back_gets_its_gradient():
    x = xsim.array(np.array([1.0, 2.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(array_in_a_local_struct, 2, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
    tape.backward(grads={y: np.array([1.0, 3.0])})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 6.0])


def test_an_array_reached_through_a_struct_a_branch_chose_is_refused_not_given_zero_gradient():
    x = xsim.array(np.array([1.0, 2.0]), dtype=F64, requires_grad=True)
    z = xsim.array(np.array([5.0, 7.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(array_in_a_struct_chosen_by_a_branch, 2, inputs=[x, z], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [2.0, 14.0])
    with pytest.raises(xsim.CompileError, match=r"test_warp_pitfalls.py:\d+: array .* is not a kernel parameter or "
                                                r"a field of one here"):
        tape.backward(grads={y: np.ones(2)})



# an array read back after the kernel wrote it, reached through struct fields: one array however it is
# reached (nested fields, a struct local, a func, a copy with a field set), so the adjoint replays its writes
# as it does for a parameter (``read_after_write``); a struct a branch chose cannot be traced and is refused


@xsim.struct
class Leaf:
    a: A


@xsim.struct
class Twig:
    leaf: Leaf
    bodies: xsim.array(dtype=Body)


@xsim.struct
class Tree:
    leaf: Leaf
    twig: Twig
    flat: A
    w: F64


@xsim.func
def triple_leaf(s: Tree, i: int):
    s.leaf.a[i] = s.leaf.a[i] * 3.0


@xsim.kernel
def reread_flat_field(s: Tree, out: A):
    i = xsim.tid()
    y = s.flat[i]
    s.flat[i] = y * 3.0
    out[i] = s.flat[i] * y


@xsim.kernel
def reread_nested_field(s: Tree, out: A):
    i = xsim.tid()
    y = s.leaf.a[i]
    s.leaf.a[i] = y * 3.0
    out[i] = s.leaf.a[i] * y


@xsim.kernel
def reread_two_levels_through_a_local(s: Tree, out: A):
    i = xsim.tid()
    t = s.twig
    y = t.leaf.a[i]
    s.twig.leaf.a[i] = y * 3.0
    out[i] = t.leaf.a[i] * y


@xsim.kernel
def reread_after_a_func_wrote(s: Tree, out: A):
    i = xsim.tid()
    y = s.leaf.a[i]
    triple_leaf(s, i)
    out[i] = s.leaf.a[i] * y


@xsim.kernel
def reread_through_a_copy_with_a_field_set(s: Tree, out: A):
    i = xsim.tid()
    t = s
    t.w = 2.0
    y = t.leaf.a[i]
    s.leaf.a[i] = y * (t.w + 1.0)
    out[i] = t.leaf.a[i] * y


@xsim.kernel
def reread_a_field_of_a_struct_element(s: Tree, out: A):
    i = xsim.tid()
    y = s.twig.bodies[i].mass
    s.twig.bodies[i].mass = y * 3.0
    t = s.twig
    out[i] = t.bodies[i].mass * y + s.twig.bodies[i].pos.y


@xsim.kernel
def reread_through_a_struct_a_branch_chose(s: Tree, out: A):
    i = xsim.tid()
    t = s.leaf
    if i > 0:
        t = s.twig.leaf
    y = t.a[i]
    t.a[i] = y * 3.0
    out[i] = t.a[i] * y


@xsim.kernel
def read_two_levels(s: Tree, out: A):
    i = xsim.tid()
    out[i] = s.twig.leaf.a[i] * s.twig.leaf.a[i] * s.w  # its gradient, 2 a w, needs a's values


@xsim.kernel
def scale_two_levels(s: Tree, out: A):
    i = xsim.tid()
    out[i] = s.twig.leaf.a[i] * s.w  # its gradient, w, does not


def a_tree(values):
    """A Tree whose three float arrays (float64, with gradients) all start at ``values``, with bodies of those
    masses at (0, 2, 0); ``w`` is 1."""
    s = Tree()
    s.leaf, s.twig, s.w = Leaf(), Twig(), 1.0
    s.twig.leaf = Leaf()
    s.leaf.a, s.twig.leaf.a, s.flat = (xsim.array(np.array(values), dtype=F64, requires_grad=True) for _ in range(3))
    s.twig.bodies = xsim.array([Body(pos=xsim.vec3d(0.0, 2.0, 0.0), mass=m) for m in values], dtype=Body,
                               requires_grad=True)
    return s


@pytest.mark.parametrize("kernel, path", [
    (reread_flat_field, "s.flat"),
    (reread_nested_field, "s.leaf.a"),
    (reread_two_levels_through_a_local, "s.twig.leaf.a"),
    (reread_after_a_func_wrote, "s.leaf.a"),
    (reread_through_a_copy_with_a_field_set, "s.leaf.a"),
])
def test_an_array_in_a_struct_read_back_after_the_kernel_wrote_it_gets_its_gradient(kernel, path):
    a0 = np.array([1.0, -0.5])
    s, out = a_tree(a0), xsim.zeros(2, dtype=F64, requires_grad=True)
    arr = xsim.kernels.launch.resolve_label(path, kernel.params, [s, out])
    with xsim.Tape() as tape:
        xsim.launch(kernel, 2, inputs=[s, out])
    np.testing.assert_array_equal(arr.numpy(), 3.0 * a0)     # a = 3 a0, then out = a * a0
    np.testing.assert_array_equal(out.numpy(), 3.0 * a0 * a0)
    seeds = {out: np.array([1.0, 3.0]), arr: np.array([0.5, -1.0])}
    for _ in range(2):  # the tape's copy of the array as it was stays intact for a second backward
        tape.zero()
        tape.backward(grads=seeds)
        np.testing.assert_array_equal(arr.grad.numpy(), 6.0 * a0 * seeds[out] + 3.0 * seeds[arr])
    gradcheck(kernel, [a_tree(a0), xsim.zeros(2, dtype=F64, requires_grad=True)], outputs=[path, "out"],
              wrt=[path], raise_on_failure=True)


def test_a_struct_element_field_in_a_nested_struct_read_back_after_the_kernel_wrote_it_gets_its_gradient():
    m0 = np.array([1.0, -0.5])
    s, out = a_tree(m0), xsim.zeros(2, dtype=F64, requires_grad=True)
    backward_once(reread_a_field_of_a_struct_element, [s], [out], [np.array([1.0, 3.0])])
    np.testing.assert_array_equal(s.twig.bodies.numpy()["mass"], 3.0 * m0)
    np.testing.assert_array_equal(out.numpy(), 3.0 * m0 * m0 + 2.0)
    g = s.twig.bodies.grad.numpy()
    np.testing.assert_array_equal(g["mass"], 6.0 * m0 * [1.0, 3.0])
    np.testing.assert_array_equal(g["pos"], [[0.0, 1.0, 0.0], [0.0, 3.0, 0.0]])
    gradcheck(reread_a_field_of_a_struct_element, [a_tree(m0), xsim.zeros(2, dtype=F64, requires_grad=True)],
              outputs=["s.twig.bodies", "out"], wrt=["s.twig.bodies"], raise_on_failure=True)


def test_two_in_place_launches_on_a_nested_struct_array_chain_their_gradients():
    a0 = np.array([1.0, -0.5])
    s = a_tree(a0)
    out1, out2 = xsim.zeros(2, dtype=F64, requires_grad=True), xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(reread_nested_field, 2, inputs=[s, out1])
        xsim.launch(reread_nested_field, 2, inputs=[s, out2])
    np.testing.assert_array_equal(out2.numpy(), 27.0 * a0 * a0)  # (9 a0)(3 a0)
    tape.backward(grads={out1: np.ones(2), out2: np.ones(2), s.leaf.a: np.ones(2)})
    np.testing.assert_array_equal(s.leaf.a.grad.numpy(), 6.0 * a0 + 54.0 * a0 + 9.0)


def test_a_nested_struct_array_overwritten_after_a_kernel_read_it_is_caught_by_the_tape():
    s, out = a_tree([1.0, 2.0]), xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(read_two_levels, 2, inputs=[s, out])
        xsim.launch(reread_two_levels_through_a_local, 2, inputs=[s, xsim.zeros(2, dtype=F64)])
    with pytest.raises(RuntimeError, match=r"array 's.twig.leaf.a' read by kernel 'read_two_levels' was overwritten "
                                           r"afterwards \(last by 'reread_two_levels_through_a_local'\)"):
        tape.backward(grads={out: np.ones(2)})


def test_a_nested_struct_array_overwritten_after_a_linear_read_keeps_its_gradient():
    s, out = a_tree([1.0, 2.0]), xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(scale_two_levels, 2, inputs=[s, out])
        xsim.launch(reread_two_levels_through_a_local, 2, inputs=[s, xsim.zeros(2, dtype=F64)])
    tape.backward(grads={out: np.ones(2)})
    np.testing.assert_array_equal(s.twig.leaf.a.grad.numpy(), [1.0, 1.0])  # d(a w)/da = w = 1, old a or new
    np.testing.assert_array_equal(tape.gradients[s].twig.leaf.a.numpy(), s.twig.leaf.a.grad.numpy())


def test_an_array_in_a_struct_a_branch_chose_is_refused_naming_the_line():
    s, out = a_tree([1.0, 2.0]), xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(reread_through_a_struct_a_branch_chose, 2, inputs=[s, out])
    np.testing.assert_array_equal(s.leaf.a.numpy(), [3.0, 2.0])       # thread 0 took s.leaf, thread 1 s.twig.leaf
    np.testing.assert_array_equal(s.twig.leaf.a.numpy(), [1.0, 6.0])
    np.testing.assert_array_equal(out.numpy(), [3.0, 12.0])
    line = reread_through_a_struct_a_branch_chose.pyfunc.__code__.co_firstlineno + 6  # y = t.a[i], below the decorator
    with pytest.raises(xsim.CompileError, match=rf"test_warp_pitfalls.py:{line}: array 't.a' is not a kernel "
                                                r"parameter or a field of one here \(which array it is depends on a branch"):
        tape.backward(grads={out: np.ones(2)})



# one array passed as two parameters, one of them written: the kernel was compiled taking them for two arrays,
# so the tape keeps the read one as it was (its adjoint reads the old values) and refuses the backward of a
# launch that reads one after writing the other


@xsim.kernel
def square_into(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i]


@xsim.kernel
def write_then_read_the_other(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * 2.0
    y[i] = y[i] * x[i]  # if y is x, this x[i] is the value just written


def test_an_array_passed_as_both_input_and_output_gets_its_gradient_from_its_old_values():
    x = xsim.array(np.array([1.0, -2.0]), dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(square_into, 2, inputs=[x, x])
    np.testing.assert_array_equal(x.numpy(), [1.0, 4.0])
    tape.backward(grads={x: np.array([1.0, 3.0])})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -12.0])  # 2 x0 seed, not 2 x1 seed
    x = xsim.array(np.array([1.0, -0.5]), dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(read_after_write, 2, inputs=[x], outputs=[x])  # x = 2 x0 + 1
    np.testing.assert_array_equal(x.numpy(), [3.0, 0.0])
    tape.backward(grads={x: np.array([1.0, 3.0])})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 6.0])


def test_a_launch_reading_one_parameter_after_writing_its_alias_is_refused_at_backward_time():
    x, y = (xsim.array(np.array([1.0, -2.0]), dtype=F64, requires_grad=True) for _ in range(2))
    backward_once(write_then_read_the_other, [x], [y], [np.array([1.0, 3.0])])
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, -24.0])  # separate arrays: y = 2 x^2
    x = xsim.array(np.array([1.0, -2.0]), dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(write_then_read_the_other, 2, inputs=[x], outputs=[x])
    np.testing.assert_array_equal(x.numpy(), [4.0, 16.0])  # the forward still runs: x = (2 x0) (2 x0)
    line = write_then_read_the_other.pyfunc.__code__.co_firstlineno + 4
    with pytest.raises(RuntimeError, match=rf"kernel 'write_then_read_the_other' was launched with overlapping memory as "
                                           rf"'y' and 'x', and it reads 'x' after writing 'y' \(.*test_warp_pitfalls.py:"
                                           rf"{line}\).*pass separate arrays"):
        tape.backward(grads={x: np.ones(2)})


def test_an_ignored_atomic_result_differentiates():
    x = xsim.array(np.array([1.0, -2.0, 0.5]), dtype=F64, requires_grad=True)
    total = xsim.zeros(1, dtype=F64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backward_once(atomic_result_ignored, [x], [total], [np.ones(1)], dim=3)
    assert total.numpy()[0] == 5.25
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 1.0])


@xsim.kernel
def reversed_weighted_sum(n: int, stride: int, x: xsim.array(dtype=xsim.float64), s: xsim.array(dtype=xsim.float64)):
    tid = xsim.tid()
    acc = xsim.float64(0.0)
    k = xsim.float64(1.0)
    for i in reversed(range(tid, n, stride)):  # runtime bounds: a dynamic loop run backwards
        acc = acc * k + x[i] * x[i]
        k += xsim.float64(0.5)
    xsim.atomic_add(s, 0, acc)


def test_reversed_range_loops_match_python_and_finite_differences():
    xs = np.array([0.5, -1.25, 2.0, 0.75, -0.5, 1.5, 0.25])
    x = xsim.array(xs, dtype=xsim.float64, requires_grad=True)
    s = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    xsim.launch(reversed_weighted_sum, 2, inputs=[7, 3, x, s])
    want = 0.0
    for tid in range(2):
        acc, k = 0.0, 1.0
        for i in reversed(range(tid, 7, 3)):
            acc, k = acc * k + xs[i] ** 2, k + 0.5
        want += acc
    np.testing.assert_allclose(s.numpy(), [want], rtol=1e-14)
    s.zero_()
    report = gradcheck(reversed_weighted_sum, [7, 3, x, s], dim=2)
    assert report.passed, report



@xsim.kernel
def clamp_after_a_loop(s: A, n: int, out: A):
    """diffray's shading: a sum over a runtime number of terms, then a component clamped at 1 under an if."""
    lambert = xsim.float64(0.0)
    for _ in range(n):
        lambert = lambert + s[0]
    color = lambert * xsim.vec3d(1.0, 1.0, 1.0)
    if color[0] > xsim.float64(1.0):
        color = xsim.vec3d(xsim.float64(1.0), color[1], color[2])
    out[0] = color[0] + xsim.float64(2.0) * color[1] + xsim.float64(3.0) * color[2]


def test_a_component_clamped_after_a_dynamic_loop_passes_no_gradient():
    """out = 1 + 5 n s once n s > 1, so d out / ds = 5 n = 15. Warp 1.19 gives 18 on the CPU (the clamped
    component's 3 still flows; without the loop it gives 15): why diffray's rotation gradient differs there
    (bench/warp_examples.py)."""
    s = xsim.array([0.5], dtype=F64, requires_grad=True)
    out = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(clamp_after_a_loop, 1, inputs=[s, 3, out])
    tape.backward(out)
    assert out.numpy()[0] == 8.5
    assert s.grad.numpy()[0] == 15.0
    gradcheck(clamp_after_a_loop, [xsim.array([0.5], dtype=F64), 3, xsim.zeros(1, dtype=F64)], outputs=["out"],
              wrt=["s"], raise_on_failure=True)
