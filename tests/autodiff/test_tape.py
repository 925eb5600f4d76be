"""Tape semantics: seeding, zero, reset, accumulation, independent tapes, in-place kernels and the
overwrite checks (eager in debug mode, version counters at backward time)."""

import numpy as np
import pytest

import xsim

F64 = xsim.float64
A = xsim.array(dtype=F64)


@xsim.kernel
def cube(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i] * x[i]


@xsim.kernel
def sum_into(y: A, loss: A):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, y[i])


@xsim.kernel
def square_plus_one_inplace(a: A):
    i = xsim.tid()
    a[i] = a[i] * a[i] + 1.0


@xsim.kernel
def add_one_inplace(a: A):
    i = xsim.tid()
    a[i] = a[i] + 1.0


@xsim.kernel
def sum_of_squares(a: A, loss: A):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, a[i] * a[i])


@xsim.kernel
def overwrite(x: A):
    i = xsim.tid()
    x[i] = 7.0


@xsim.struct
class Pair:
    u: xsim.array(dtype=F64)
    v: xsim.array(dtype=F64)


@xsim.kernel
def pair_product(p: Pair, out: A):
    i = xsim.tid()
    out[i] = p.u[i] * p.v[i]


@xsim.kernel
def add_then_square_through_struct(p: Pair, out: A):
    i = xsim.tid()
    p.u[i] += p.v[i]                    # read and written through a struct's field: the tape keeps a copy
    out[i] = p.u[i] * p.u[i]


def arr(values, grad=True):
    return xsim.array(np.array(values, dtype=np.float64), dtype=F64, requires_grad=grad)


def cube_and_sum(x):
    """Record y = x^3 and loss = sum(y) on a new tape."""
    y = xsim.zeros(x.shape, dtype=F64, requires_grad=True)
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, x.shape, inputs=[x], outputs=[y])
        xsim.launch(sum_into, x.shape, inputs=[y], outputs=[loss])
    return tape, y, loss


# -------------------------------------------------------------------------------------------------
# seeding


def test_backward_with_a_loss_seeds_it_with_one():
    x = arr([1.0, 2.0, -3.0])
    tape, _, loss = cube_and_sum(x)
    tape.backward(loss=loss)
    assert loss.numpy()[0] == -18.0
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 12.0, 27.0])


def test_backward_with_grads_seeds_each_output():
    x = arr([1.0, 2.0, -3.0])
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, 3, inputs=[x], outputs=[y])
    tape.backward(grads={y: np.array([1.0, 0.5, -2.0])})
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 6.0, -54.0])


def test_backward_with_an_xsim_array_seed():
    x = arr([2.0])
    y = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, 1, inputs=[x], outputs=[y])
    tape.backward(grads={y: arr([3.0], grad=False)})
    assert x.grad.numpy()[0] == 36.0


def test_a_loss_must_be_one_element_with_a_gradient():
    x = arr([1.0, 2.0])
    tape, y, _ = cube_and_sum(x)
    with pytest.raises(ValueError, match="one-element"):
        tape.backward(loss=y)
    with pytest.raises(ValueError, match="requires_grad=True"):
        tape.backward(loss=arr([0.0], grad=False))


def test_manual_adjoint_launch_uses_the_given_gradients():
    x = arr([2.0, -1.0], grad=False)
    y = xsim.zeros(2, dtype=F64)
    adj_x = xsim.zeros(2, dtype=F64)
    adj_y = arr([1.0, 2.0], grad=False)
    xsim.launch(cube, 2, inputs=[x], outputs=[y])
    xsim.launch(cube, 2, inputs=[x], outputs=[y], adj_inputs=[adj_x], adj_outputs=[adj_y], adjoint=True)
    np.testing.assert_array_equal(adj_x.numpy(), [12.0, 6.0])


def test_manual_adjoint_launch_passes_over_a_missing_gradient_buffer():
    # the CPU adjoint reads, zeroes and adds through a scratch element where a buffer is missing
    x, y = arr([2.0, -1.0], grad=False), xsim.zeros(2, dtype=F64)
    adj_y = arr([1.0, 2.0], grad=False)
    xsim.launch(cube, 2, inputs=[x], outputs=[y], adj_inputs=[None], adj_outputs=[adj_y], adjoint=True)
    np.testing.assert_array_equal(adj_y.numpy(), [0.0, 0.0])  # read, then zeroed (a store's adjoint)
    adj_x = arr([5.0, 5.0], grad=False)
    xsim.launch(cube, 2, inputs=[x], outputs=[y], adj_inputs=[adj_x], adj_outputs=[None], adjoint=True)
    np.testing.assert_array_equal(adj_x.numpy(), [5.0, 5.0])


# -------------------------------------------------------------------------------------------------
# zero, reset, accumulation


def test_gradients_accumulate_across_backward_calls():
    x = arr([1.0, 2.0])
    tape, _, loss = cube_and_sum(x)
    tape.backward(loss=loss)
    tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 24.0])


def test_zero_clears_every_gradient_the_tape_touched():
    x = arr([1.0, 2.0])
    tape, y, loss = cube_and_sum(x)
    tape.backward(loss=loss)
    tape.zero()
    for a in (x, y, loss):
        np.testing.assert_array_equal(a.grad.numpy(), np.zeros(a.shape))
    tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 12.0])


def test_zero_reaches_arrays_inside_structs():
    p = Pair()
    p.u, p.v = arr([2.0, 3.0]), arr([5.0, 7.0])
    out = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(pair_product, 2, inputs=[p], outputs=[out])
    tape.backward(grads={out: np.ones(2)})
    np.testing.assert_array_equal(p.u.grad.numpy(), [5.0, 7.0])
    np.testing.assert_array_equal(p.v.grad.numpy(), [2.0, 3.0])
    tape.zero()
    np.testing.assert_array_equal(p.u.grad.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(p.v.grad.numpy(), [0.0, 0.0])


def test_reset_zeroes_gradients_and_forgets_the_record():
    x = arr([1.0, 2.0])
    tape, _, loss = cube_and_sum(x)
    tape.backward(loss=loss)
    tape.reset()
    assert tape.records == []
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])
    with pytest.warns(UserWarning, match="this tape recorded nothing"):
        tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])  # nothing recorded any more


def test_two_tapes_do_not_interfere():
    x1, x2 = arr([1.0]), arr([2.0])
    tape1, _, loss1 = cube_and_sum(x1)
    tape2, _, loss2 = cube_and_sum(x2)
    tape2.backward(loss=loss2)
    assert x1.grad.numpy()[0] == 0.0 and x2.grad.numpy()[0] == 12.0
    tape1.backward(loss=loss1)
    tape2.zero()
    assert x1.grad.numpy()[0] == 3.0 and x2.grad.numpy()[0] == 0.0


def test_tape_scopes_do_not_nest():
    x, y = arr([2.0]), xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as outer:
        xsim.launch(cube, 1, inputs=[x], outputs=[y])
        with pytest.raises(RuntimeError, match="another Tape is already recording: tape scopes do not nest"):
            with xsim.Tape():
                pass
    assert [r.kernel.key for r in outer.records] == ["cube"]
    with xsim.Tape() as after:  # the refused one left nothing behind
        xsim.launch(cube, 1, inputs=[x], outputs=[y])
    assert len(after.records) == 1


def test_a_tape_cannot_record_twice_at_once():
    tape = xsim.Tape()
    with tape, pytest.raises(RuntimeError, match="already recording"), tape:
        pass


# -------------------------------------------------------------------------------------------------
# in-place kernels


def test_inplace_add_one_gives_exact_gradients_over_repeated_backward_calls():
    a = arr([1.0, -2.0, 0.5])
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(add_one_inplace, 3, inputs=[a])
        xsim.launch(sum_of_squares, 3, inputs=[a], outputs=[loss])
    np.testing.assert_array_equal(a.numpy(), [2.0, -1.0, 1.5])
    for _ in range(3):
        tape.zero()
        tape.backward(loss=loss)
        np.testing.assert_array_equal(a.grad.numpy(), [4.0, -2.0, 3.0])  # 2 (a0 + 1)
    tape.backward(loss=loss)  # without zero(): exactly twice
    np.testing.assert_array_equal(a.grad.numpy(), [8.0, -4.0, 6.0])


def test_inplace_kernel_applied_twice_differentiates_through_both():
    a = arr([0.5, -1.0])
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(square_plus_one_inplace, 2, inputs=[a])
        xsim.launch(square_plus_one_inplace, 2, inputs=[a])
        xsim.launch(sum_of_squares, 2, inputs=[a], outputs=[loss])
    a0 = np.array([0.5, -1.0])
    a1 = a0 * a0 + 1.0
    a2 = a1 * a1 + 1.0
    np.testing.assert_array_equal(a.numpy(), a2)
    tape.backward(loss=loss)
    np.testing.assert_allclose(a.grad.numpy(), 2 * a2 * 2 * a1 * 2 * a0, rtol=1e-15)


def test_inplace_kernel_uses_the_gradient_given_to_its_array_after_the_launch():
    a = arr([0.5, -1.0])
    with xsim.Tape() as tape:
        xsim.launch(square_plus_one_inplace, 2, inputs=[a])
    a.grad = xsim.array(np.array([1.0, 3.0]), dtype=F64)  # Warp's tests seed y.grad = ones_like(y) like this
    tape.backward()
    np.testing.assert_array_equal(a.grad.numpy(), [2 * 0.5 * 1.0, 2 * -1.0 * 3.0])


def test_an_inplace_write_through_a_struct_field_replays_into_the_tapes_copy():
    # the adjoint replays u += v into its copy of u; a struct whose packed bytes were kept from the forward
    # launch used to send that replay into the live array (u became 8 and the gradients 16)
    p = Pair()
    p.u, p.v = arr([2.0, -1.0]), arr([3.0, 0.5])
    out = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(add_then_square_through_struct, 2, inputs=[p], outputs=[out])
    tape.backward(grads={out: xsim.ones(2, dtype=F64)})
    u1 = np.array([2.0, -1.0]) + np.array([3.0, 0.5])
    np.testing.assert_array_equal(p.u.numpy(), u1)
    np.testing.assert_array_equal(p.v.grad.numpy(), 2 * u1)
    np.testing.assert_array_equal(p.u.grad.numpy(), 2 * u1)


# -------------------------------------------------------------------------------------------------
# overwrite detection


def test_an_array_mutated_between_forward_and_backward_is_an_error():
    x = arr([1.0, 2.0])
    tape, _, loss = cube_and_sum(x)
    xsim.launch(overwrite, 2, inputs=[x])
    with pytest.raises(RuntimeError, match=r"array 'x' read by kernel 'cube' was overwritten afterwards "
                                           r"\(last by 'overwrite'\)"):
        tape.backward(loss=loss)


def test_an_overwrite_recorded_on_the_tape_is_an_error_at_backward_time():
    x = arr([1.0, 2.0])
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, 2, inputs=[x], outputs=[y])
        xsim.launch(overwrite, 2, inputs=[x])
    with pytest.raises(RuntimeError, match="'x' read by kernel 'cube' was overwritten"):
        tape.backward(grads={y: np.ones(2)})


def test_debug_mode_raises_at_the_overwriting_launch(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x = arr([1.0, 2.0])
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    with xsim.Tape():
        xsim.launch(cube, 2, inputs=[x], outputs=[y])
        with pytest.raises(RuntimeError, match=r"'overwrite' writes array 'x', which 'cube' read earlier on this "
                                               r"tape"):
            xsim.launch(overwrite, 2, inputs=[x])


def test_debug_mode_allows_inplace_kernels_the_tape_snapshots(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    a = arr([0.5])
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(square_plus_one_inplace, 1, inputs=[a])
        xsim.launch(square_plus_one_inplace, 1, inputs=[a])
        xsim.launch(sum_of_squares, 1, inputs=[a], outputs=[loss])
    tape.backward(loss=loss)
    assert a.grad.numpy()[0] == (2 * 2.5625) * (2 * 1.25) * (2 * 0.5)  # a: 0.5 -> 1.25 -> 2.5625


@xsim.kernel
def flag_positive(x: A, flag: xsim.array(dtype=int)):
    i = xsim.tid()
    flag[i] = 0
    if x[i] > 0.0:
        flag[i] = 1


@xsim.kernel
def cube_where_flagged(x: A, flag: xsim.array(dtype=int), y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i] * x[i] * F64(flag[i])


def test_an_int_flag_computed_from_differentiable_inputs_cuts_no_gradient_path():
    # ints carry no gradient: reading one computed on the tape is not a cut path, so no warning; a float
    # intermediate without a gradient still is one
    import warnings
    x = xsim.array([1.0, -2.0], dtype=F64, requires_grad=True)
    flag, y, plain = xsim.zeros(2, dtype=int), xsim.zeros(2, dtype=F64, requires_grad=True), xsim.zeros(2, dtype=F64)
    tape = xsim.Tape()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tape:
            xsim.launch(flag_positive, 2, inputs=[x], outputs=[flag])
            xsim.launch(cube_where_flagged, 2, inputs=[x, flag], outputs=[y])
    tape.backward(grads={y: xsim.array([1.0, 1.0], dtype=F64)})
    assert np.allclose(x.grad.numpy(), [3.0, 0.0])
    with xsim.Tape():
        xsim.launch(cube, 2, inputs=[x], outputs=[plain])
        with pytest.warns(UserWarning, match="reads array 'x', which was computed on this tape"):
            xsim.launch(cube, 2, inputs=[plain], outputs=[y])
