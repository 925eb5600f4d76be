"""Tape-aware array ops (xsim/autodiff/ops.py): clone, copy, assign, fill_, zero_, detach and their
adjoints (shared/DESIGN.md): a copy adds dst.grad into src.grad over the copied range, then zeroes
that range of dst.grad; fill/zero zero the gradient of what they overwrote."""

import numpy as np
import pytest

import xsim

F32 = xsim.array(dtype=float)
V3D = xsim.array(dtype=xsim.vec3d)
F64 = xsim.array(dtype=xsim.float64)

X = [0.5, -1.25, 2.0, 3.0]  # values whose squares and small multiples are exact in float32


@xsim.kernel
def sum_of_squares(v: F32, loss: F32):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, v[i] * v[i])


@xsim.kernel
def add(a: F32, b: F32, out: F32):
    i = xsim.tid()
    out[i] = a[i] + b[i]


@xsim.kernel
def multiply(a: F32, b: F32, out: F32):
    i = xsim.tid()
    out[i] = a[i] * b[i]


@xsim.kernel
def accumulate_three_times(x: F32, acc: F32):
    i = xsim.tid()
    xsim.atomic_add(acc, i, 3.0 * x[i])


@xsim.kernel
def triple(x: F32, y: F32):
    i = xsim.tid()
    y[i] = 3.0 * x[i]


@xsim.kernel
def integrate(x: V3D, v: V3D, dt: xsim.float64):
    """A nonlinear spring step, in place on the (cloned) state."""
    i = xsim.tid()
    p = x[i]
    vn = v[i] - dt * p * xsim.length(p) + dt * xsim.vec3d(0.0, -1.0, 0.0)
    v[i] = vn
    x[i] = p + dt * vn


@xsim.kernel
def trajectory_loss(h: V3D, loss: F64):
    i = xsim.tid()
    p = h[i]
    w = xsim.float64(i + 1)
    xsim.atomic_add(loss, 0, w * xsim.sin(p[0]) + 0.5 * xsim.dot(p, p) + p[1] * p[2])


def f32(values, grad=True):
    return xsim.array(np.array(values, dtype=np.float32), requires_grad=grad)


def loss_of(y):
    """Record loss = sum(y^2) on the active tape and return the loss array."""
    loss = xsim.zeros(1, requires_grad=True)
    xsim.launch(sum_of_squares, y.shape, inputs=[y], outputs=[loss])
    return loss


def grad(a):
    return a.grad.numpy().tolist()


def twice(values):
    return [2.0 * v for v in values]


# -- the seed scenarios -----------------------------------------------------------------------------


def test_clone_gives_a_new_buffer_and_passes_the_gradient_back():
    x = f32(X)
    with xsim.Tape() as tape:
        y = xsim.clone(x)
        loss = loss_of(y)
    assert y.numpy().tolist() == X and y.ptr != x.ptr and y.requires_grad
    tape.backward(loss)
    assert grad(x) == twice(X)
    assert grad(y) == [0.0] * 4  # consumed: the clone's adjoint clears the range it passed on


def test_clone_onto_a_device_copies_there_and_passes_the_gradient_back():
    x = f32(X)  # on the default device; the clone on the CPU (another device when the default is a GPU)
    with xsim.Tape() as tape:
        y = xsim.clone(x, device="cpu", requires_grad=True)
        loss = xsim.zeros(1, requires_grad=True, device="cpu")
        xsim.launch(sum_of_squares, 4, inputs=[y], outputs=[loss], device="cpu")
    assert y.device == xsim.get_device("cpu") and y.numpy().tolist() == X and y.requires_grad
    tape.backward(loss)
    assert grad(x) == twice(X)


def test_copy_passes_the_gradient_back():
    x = f32(X)
    y = xsim.zeros(4, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.copy(y, x)
        loss = loss_of(y)
    tape.backward(loss)
    assert y.numpy().tolist() == X
    assert grad(x) == twice(X)


def test_assign_from_an_xsim_array_passes_the_gradient_back_and_returns_the_destination():
    x = f32(X)
    y = xsim.zeros(4, requires_grad=True)
    with xsim.Tape() as tape:
        assert y.assign(x) is y
        loss = loss_of(y)
    tape.backward(loss)
    assert grad(x) == twice(X)


def test_clone_of_a_clone():
    x = f32(X)
    with xsim.Tape() as tape:
        z = xsim.clone(xsim.clone(x))
        loss = loss_of(z)
    tape.backward(loss)
    assert grad(x) == twice(X)


def test_two_clones_of_one_array_summed_both_reach_it():
    x = f32(X)
    out = xsim.zeros(4, requires_grad=True)
    with xsim.Tape() as tape:
        a, b = xsim.clone(x), xsim.clone(x)
        xsim.launch(add, 4, inputs=[a, b], outputs=[out])
        loss = loss_of(out)
    tape.backward(loss)
    # loss = sum((2x)^2): d/dx = 8x, half through each clone
    assert grad(x) == [8.0 * v for v in X]


def test_copy_with_offsets_moves_exactly_the_copied_range_of_gradient():
    x = f32([10.0, 20.0, 1.5, -2.0, 0.25, 30.0])
    w = f32([4.0, 5.0, 6.0, 7.0, -0.5])
    with xsim.Tape() as tape:
        y = xsim.clone(w)
        xsim.copy(y, x, dst_offset=1, src_offset=2, count=3)
        loss = loss_of(y)
    assert y.numpy().tolist() == [4.0, 1.5, -2.0, 0.25, -0.5]
    tape.backward(loss)
    assert grad(x) == [0.0, 0.0, 3.0, -4.0, 0.5, 0.0]
    assert grad(w) == [8.0, 0.0, 0.0, 0.0, -1.0]  # w[1:4] was overwritten: no gradient


def test_copy_of_vectors_with_offsets():
    x = xsim.array(np.arange(12, dtype=np.float64).reshape(4, 3), dtype=xsim.vec3d, requires_grad=True)
    y = xsim.zeros(3, dtype=xsim.vec3d, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.copy(y, x, dst_offset=1, src_offset=2, count=2)
    for i in range(3):  # item assignment: numpy() is a copy on a GPU
        y.grad[i] = xsim.vec3d(i + 1, i + 1, i + 1)
    tape.backward()
    assert y.numpy().tolist() == [[0, 0, 0], [6, 7, 8], [9, 10, 11]]
    assert x.grad.numpy().tolist() == [[0, 0, 0], [0, 0, 0], [2, 2, 2], [3, 3, 3]]
    assert y.grad.numpy().tolist() == [[1, 1, 1], [0, 0, 0], [0, 0, 0]]


def test_copy_into_an_array_clears_the_gradient_of_its_old_values():
    x, w = f32(X), f32([1.0, 2.0, 3.0, 4.0])
    y = xsim.zeros(4, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(triple, 4, inputs=[w], outputs=[y])
        xsim.copy(y, x)  # y's old values (3w) no longer reach the loss
        loss = loss_of(y)
    tape.backward(loss)
    assert grad(x) == twice(X)
    assert grad(w) == [0.0] * 4


def test_repeated_backward_accumulates_exactly_and_zero_restarts():
    x, w = f32(X), f32([1.0, 2.0, 3.0, 4.0])
    y = xsim.zeros(4, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(triple, 4, inputs=[w], outputs=[y])
        xsim.copy(y, x)
        loss = loss_of(y)
    tape.backward(loss)
    tape.backward(loss)
    assert grad(x) == [4.0 * v for v in X] and grad(w) == [0.0] * 4
    tape.zero()
    tape.backward(loss)
    assert grad(x) == twice(X)


def test_copy_within_one_array_with_overlapping_ranges():
    x = f32([0.5, -1.25, 2.0, 3.0, 1.5])
    with xsim.Tape() as tape:
        a = xsim.clone(x)
        xsim.copy(a, a, dst_offset=1, src_offset=0, count=3)  # a = [x0, x0, x1, x2, x4]
        loss = loss_of(a)
    assert a.numpy().tolist() == [0.5, 0.5, -1.25, 2.0, 1.5]
    tape.backward(loss)
    assert grad(x) == [2.0, -2.5, 4.0, 0.0, 3.0]


def test_copy_between_overlapping_views_of_one_array_sets_the_incoming_gradient_aside():
    x = f32([0.5, -1.25, 2.0, 3.0, 1.5])
    with xsim.Tape() as tape:
        a = xsim.clone(x)
        xsim.copy(a[1:4], a[0:3])  # two view objects over one buffer: a = [x0, x0, x1, x2, x4]
        loss = loss_of(a)
    assert a.numpy().tolist() == [0.5, 0.5, -1.25, 2.0, 1.5]
    tape.backward(loss)
    # d/dx of x0^2 + x0^2 + x1^2 + x2^2 + x4^2; x3 was overwritten
    assert grad(x) == [2.0, -2.5, 4.0, 0.0, 3.0]


def test_flat_ranges_of_strided_views_count_elements_in_row_major_order():
    base = xsim.array(np.arange(12.0).reshape(3, 4), dtype=float, requires_grad=True)
    col = base[:, 2]  # [2, 6, 10], a stride of 4 elements
    window = xsim.zeros(2, dtype=float, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.copy(window, col, src_offset=1, count=2)
        loss = loss_of(window)
    assert window.numpy().tolist() == [6.0, 10.0]
    tape.backward(loss)
    want = np.zeros((3, 4))
    want[1:, 2] = [12.0, 20.0]  # d(6^2 + 10^2)
    np.testing.assert_array_equal(base.grad.numpy(), want)
    xsim.copy(col, xsim.array([-1.0, -2.0], dtype=float), dest_offset=1, count=2)
    np.testing.assert_array_equal(base.numpy()[:, 2], [2.0, -1.0, -2.0])
    np.testing.assert_array_equal(base.numpy()[:, 3], [3.0, 7.0, 11.0])  # its neighbours untouched


def test_copy_gives_a_plain_destination_a_gradient_while_recording():
    x = f32(X)
    y = xsim.zeros(4)
    with xsim.Tape() as tape:
        xsim.copy(y, x)
        loss = loss_of(y)
    assert y.requires_grad
    tape.backward(loss)
    assert grad(x) == twice(X)


def test_fill_inside_a_recorded_sequence_stops_the_gradient_of_overwritten_values():
    x = f32(X)
    out = xsim.zeros(4, requires_grad=True)
    with xsim.Tape() as tape:
        a = xsim.clone(x)
        assert a.fill_(2.0) is a
        xsim.launch(multiply, 4, inputs=[a, x], outputs=[out])
        loss = loss_of(out)
    assert a.numpy().tolist() == [2.0] * 4
    tape.backward(loss)
    # out = 2x, loss = sum(4x^2): 8x; the filled clone contributes nothing
    assert grad(x) == [8.0 * v for v in X]


def test_zero_inside_a_recorded_sequence_stops_the_gradient_of_overwritten_values():
    x = f32(X)
    with xsim.Tape() as tape:
        acc = xsim.clone(x)
        assert acc.zero_() is acc
        xsim.launch(accumulate_three_times, 4, inputs=[x], outputs=[acc])
        loss = loss_of(acc)
    assert acc.numpy().tolist() == [3.0 * v for v in X]
    tape.backward(loss)
    assert grad(x) == [18.0 * v for v in X]  # d/dx sum((3x)^2); the zeroed clone adds nothing


def test_fill_of_vectors_and_structs_of_values():
    a = xsim.zeros(2, dtype=xsim.vec3)
    a.fill_(xsim.vec3(1.0, 2.0, 3.0))
    assert a.numpy().tolist() == [[1, 2, 3], [1, 2, 3]]


def test_assign_from_numpy_copies_values_and_clears_the_overwritten_gradient():
    x = f32(X)
    data = np.array([1.0, 2.0, 3.0, 4.0])
    with xsim.Tape() as tape:
        y = xsim.clone(x)
        y.assign(data)
        loss = loss_of(y)
    assert y.numpy().tolist() == [1.0, 2.0, 3.0, 4.0]
    data[0] = 99.0
    assert y.numpy()[0] == 1.0  # assign copies: y does not alias the numpy source
    tape.backward(loss)
    assert grad(x) == [0.0] * 4


def test_assign_refuses_a_source_of_another_size():
    with pytest.raises(ValueError, match=r"source of shape \(3,\) does not match destination shape \(4,\)"):
        xsim.zeros(4).assign(xsim.zeros(3))


def test_ops_refuse_non_arrays():
    with pytest.raises(TypeError, match="xsim.clone: the source must be an xsim array, got list"):
        xsim.clone([1.0])
    with pytest.raises(TypeError, match="xsim.copy: src must be an xsim array"):
        xsim.copy(xsim.zeros(1), np.zeros(1))


# -- cutting the graph -----------------------------------------------------------------------------


def test_clone_without_grad_cuts_the_graph():
    x = f32(X)
    with xsim.Tape() as tape:
        y = xsim.clone(x, requires_grad=False)
        y.requires_grad = True
        loss = loss_of(y)
    tape.backward(loss)
    assert loss.numpy()[0] == sum(v * v for v in X)
    assert grad(x) == [0.0] * 4


def test_detach_shares_memory_without_a_gradient():
    x = f32(X)
    d = x.detach()
    assert d.grad is None and not d.requires_grad and d.ptr == x.ptr
    d[0] = 7.0
    assert x.numpy()[0] == 7.0
    with xsim.Tape() as tape:
        loss = loss_of(d)
    tape.backward(loss)
    assert grad(x) == [0.0] * 4


def test_clone_of_an_array_without_grad_has_none():
    y = xsim.clone(f32(X, grad=False))
    assert y.grad is None and y.numpy().tolist() == X


# -- the tape's version checks see the ops ---------------------------------------------------------


def test_overwriting_an_array_a_kernel_read_makes_backward_refuse(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "release")
    x = f32(X)
    with xsim.Tape() as tape:
        y = xsim.clone(x)
        loss = loss_of(y)
        y.fill_(0.0)
    expected = r"array 'v' read by kernel 'sum_of_squares' was overwritten afterwards \(last by 'fill_'\)"
    with pytest.raises(RuntimeError, match=expected):
        tape.backward(loss)


def test_in_debug_mode_the_overwriting_op_itself_raises(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x = f32(X)
    with xsim.Tape():
        y = xsim.clone(x)
        loss_of(y)
        with pytest.raises(RuntimeError, match="'copy' writes array 'destination', which 'sum_of_squares' read"):
            xsim.copy(y, x)


def test_ops_without_a_tape_count_their_writes():
    y = xsim.zeros(2)
    version = y.version
    y.fill_(1.0)
    xsim.copy(y, xsim.ones(2))
    y.zero_()
    assert y.version == version + 3 and y.last_writer == "zero_"


# -- a rollout that clones its state every step ----------------------------------------------------

N, STEPS, DT = 3, 8, 0.05


def rollout(x0: np.ndarray, v0: np.ndarray):
    """8 steps: clone the state, integrate in place, copy the positions into a history buffer (flat
    offsets); loss = weighted nonlinear sum over the history. Returns (loss array, x0, v0 arrays)."""
    x = xsim.array(x0, dtype=xsim.vec3d, requires_grad=True)
    v = xsim.array(v0, dtype=xsim.vec3d, requires_grad=True)
    history = xsim.zeros(N * STEPS, dtype=xsim.vec3d, requires_grad=True)
    loss = xsim.zeros(1, dtype=xsim.float64, requires_grad=True)
    xs, vs = x, v
    for step in range(STEPS):
        xs, vs = xsim.clone(xs), xsim.clone(vs)
        xsim.launch(integrate, N, inputs=[xs, vs, DT])
        xsim.copy(history, xs, dst_offset=step * N)
    xsim.launch(trajectory_loss, N * STEPS, inputs=[history], outputs=[loss])
    return loss, x, v


def test_eight_step_cloned_rollout_matches_central_finite_differences():
    rng = np.random.default_rng(4)
    x0, v0 = rng.normal(size=(N, 3)), rng.normal(size=(N, 3))
    with xsim.Tape() as tape:
        loss, x, v = rollout(x0, v0)
    tape.backward(loss)
    eps = 1e-6
    for name, base, analytic in (("x0", x0, x.grad.numpy()), ("v0", v0, v.grad.numpy())):
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            plus, minus = base.copy(), base.copy()
            plus[idx] += eps
            minus[idx] -= eps
            args_p = (plus, v0) if name == "x0" else (x0, plus)
            args_m = (minus, v0) if name == "x0" else (x0, minus)
            fd[idx] = (rollout(*args_p)[0].numpy()[0] - rollout(*args_m)[0].numpy()[0]) / (2 * eps)
        assert np.abs(fd).max() > 0.1
        np.testing.assert_allclose(analytic, fd, rtol=1e-6, atol=1e-8, err_msg=name)
