"""The tape catches what it can see and says what it cannot: writes through ``numpy()`` to arrays it
recorded (debug mode, at backward), a backward with nothing recorded or a loss computed elsewhere
(warnings naming the loss), and seeds of the wrong size (naming the array and both sizes)."""

import threading
import warnings

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only("tape bookkeeping is device independent")

F64 = xsim.float64
A = xsim.array(dtype=F64)
MODULE = "xsim_tests_reliability_tape_misuse"


@xsim.kernel(module=MODULE)
def cube(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i] * x[i]


@xsim.kernel(module=MODULE)
def total(y: A, loss: A):
    xsim.atomic_add(loss, 0, y[xsim.tid()])


@xsim.kernel(module=MODULE)
def to_vec(x: A, v: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    v[i] = xsim.vec3d(x[i], 2.0 * x[i], 0.0)


def arr(values, grad=True):
    return xsim.array(np.asarray(values, dtype=np.float64), dtype=F64, requires_grad=grad)


def record(x):
    """y = x^3 and loss = sum(y) on a new tape: (tape, y, loss)."""
    y = xsim.zeros(x.shape, dtype=F64, requires_grad=True)
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, x.shape, inputs=[x], outputs=[y])
        xsim.launch(total, x.shape, inputs=[y], outputs=[loss])
    return tape, y, loss


@pytest.fixture
def debug(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")


# -- writes the tape cannot see ----------------------------------------------------------------------


def through_numpy(x, y):
    x.numpy()[1] = 5.0


def through_asarray(x, y):
    np.asarray(x)[0] += 1.0


def through_a_view(x, y):
    x[1:].numpy()[0] = -1.0


def through_setitem(x, y):
    x[2] = 9.0


def intermediate_through_numpy(x, y):
    y.numpy()[0] = 100.0


def through_torch(x, y):
    xsim.to_torch(x).detach()[0] = 3.0


WRITES = {"numpy": (through_numpy, "x", "cube"), "asarray": (through_asarray, "x", "cube"),
          "view": (through_a_view, "x", "cube"), "setitem": (through_setitem, "x", "cube"),
          "torch": (through_torch, "x", "cube")}


@pytest.mark.parametrize("write, label, kernel", WRITES.values(), ids=WRITES.keys())
def test_debug_mode_refuses_backward_after_an_unseen_write(debug, write, label, kernel):
    if write is through_torch:
        pytest.importorskip("torch")
    x = arr([1.0, 2.0, 3.0])
    tape, y, loss = record(x)
    write(x, y)
    with pytest.raises(RuntimeError) as info:
        tape.backward(loss=loss)
    msg = str(info.value)
    assert msg.startswith(f"tape.backward: array '{label}' read by kernel '{kernel}' was changed after it was "
                          "recorded, without a launch or array op (a write through array.numpy()"), msg
    np.testing.assert_array_equal(x.grad.numpy(), 0)  # refused before any adjoint ran


def test_debug_mode_refuses_backward_after_an_unseen_write_to_a_copied_source(debug):
    src = arr([1.0, 2.0])
    with xsim.Tape() as tape:
        dst = xsim.clone(src)
    src.numpy()[0] = 4.0
    with pytest.raises(RuntimeError, match="array 'source' read by xsim.clone was changed after it was recorded"):
        tape.backward(grads={dst: np.ones(2)})


def test_an_unseen_write_to_an_output_only_array_is_harmless(debug):
    x = arr([1.0, 2.0])
    tape, y, loss = record(x)
    loss.numpy()[0] = 123.0  # the loss's value is not an input of any adjoint
    tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([1.0, 2.0]) ** 2)


def test_an_unseen_write_to_an_intermediate_only_summed_is_harmless(debug):
    x = arr([1.0, 2.0])
    tape, y, loss = record(x)
    intermediate_through_numpy(x, y)  # the sum's adjoint reads no values of y (kernels/adjoint_reads.py)
    tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([1.0, 2.0]) ** 2)


def test_without_unseen_writes_debug_mode_gives_the_exact_gradient(debug):
    x = arr([1.0, -2.0, 0.5])
    tape, _, loss = record(x)
    tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.array([1.0, -2.0, 0.5]) ** 2)


# -- a loss the tape did not compute ------------------------------------------------------------------


def test_backward_on_an_empty_tape_warns_naming_the_loss():
    x = arr([1.0, 2.0])
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    xsim.launch(cube, 1, inputs=[x], outputs=[loss])  # not on any tape
    with pytest.warns(UserWarning) as info:
        xsim.Tape().backward(loss=loss)
    assert str(info[0].message) == (
        "tape.backward(loss=...): the array of shape (1,) and dtype float64, last written by 'cube' off this tape "
        "was not computed on this tape: this tape recorded nothing (were the launches outside `with tape:`, or in "
        "another thread?); no gradient flows from it to any input")


def test_a_loss_computed_after_the_tape_closed_warns():
    x = arr([1.0, 2.0])
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, 2, inputs=[x], outputs=[y])
    xsim.launch(total, 2, inputs=[y], outputs=[loss])
    with pytest.warns(UserWarning, match="last written by 'total' off this tape was not computed on this tape: no "
                                         "launch or array op on this tape wrote it"):
        tape.backward(loss=loss)
    np.testing.assert_array_equal(x.grad.numpy(), 0)


def test_a_loss_computed_in_another_thread_warns():
    x = arr([1.0, 2.0])
    y = xsim.zeros(2, dtype=F64, requires_grad=True)
    loss = xsim.zeros(1, dtype=F64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(cube, 2, inputs=[x], outputs=[y])
        t = threading.Thread(target=lambda: xsim.launch(total, 2, inputs=[y], outputs=[loss]))
        t.start()
        t.join()
    with pytest.warns(UserWarning, match="not computed on this tape"):
        tape.backward(loss=loss)


def test_a_seeded_output_not_on_the_tape_warns_naming_it():
    x = arr([1.0, 2.0])
    tape, y, _ = record(x)
    stray = xsim.zeros(2, dtype=F64, requires_grad=True)
    with pytest.warns(UserWarning, match=r"tape.backward\(grads=...\): the array of shape \(2,\) and dtype float64 "
                                         "was not computed on this tape"):
        tape.backward(grads={y: np.ones(2), stray: np.ones(2)})


def test_a_loss_computed_on_the_tape_gives_no_warning():
    x = arr([1.0, 2.0])
    tape, _, loss = record(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tape.backward(loss=loss)
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])


# -- seeds of the wrong size ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed, got", [
    ([1.0, 1.0], "shape (2,) (2 numbers)"),
    (np.ones(5), "shape (5,) (5 numbers)"),
    (np.ones((3, 2)), "shape (3, 2) (6 numbers)"),
    (np.ones((1, 3)), "shape (1, 3) (3 numbers)"),
    (lambda: xsim.zeros(2, dtype=F64), "an array of shape (2,) (2 elements of float64)"),
    (lambda: xsim.zeros(3, dtype=xsim.float32), "an array of shape (3,) (3 elements of float32)"),
], ids=["list2", "np5", "np3x2", "np1x3", "xsim2", "xsim-f32"])
def test_a_seed_of_the_wrong_size_names_the_array_and_both_sizes(seed, got):
    x = arr([1.0, 2.0, 3.0])
    tape, y, _ = record(x)
    seed = seed() if callable(seed) else seed
    with pytest.raises(ValueError) as info:
        tape.backward(grads={y: seed})
    assert str(info.value) == (f"tape.backward(grads=...): the seed for array 'y' (written by kernel 'cube') has "
                               f"{got}, but the array has shape (3,) (3 elements of float64)")
    np.testing.assert_array_equal(x.grad.numpy(), 0)


def test_a_vector_array_seed_is_checked_in_elements():
    x = arr([1.0, 2.0])
    v = xsim.zeros(2, dtype=xsim.vec3d, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(to_vec, 2, inputs=[x], outputs=[v])
    with pytest.raises(ValueError, match=r"array 'v' \(written by kernel 'to_vec'\) has shape \(3, 3\)"):
        tape.backward(grads={v: np.ones((3, 3))})
    tape.backward(grads={v: np.ones((2, 3))})
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("seed", [2.0, np.float64(2.0), np.array(2.0)], ids=["float", "np-scalar", "0d"])
def test_a_scalar_seed_fills_the_whole_gradient(seed):
    x = arr([1.0, 2.0, 3.0])
    tape, y, _ = record(x)
    tape.backward(grads={y: seed})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * 3 * np.array([1.0, 2.0, 3.0]) ** 2)


def test_a_seed_of_the_right_shape_gives_the_weighted_gradient():
    x = arr([1.0, 2.0, 3.0])
    tape, y, _ = record(x)
    w = np.array([1.0, -1.0, 0.5])
    tape.backward(grads={y: w})
    np.testing.assert_allclose(x.grad.numpy(), w * 3 * np.array([1.0, 2.0, 3.0]) ** 2)
