"""``xsim.array.intermediate``: arrays whose gradient is allocated only when the backward pass needs
it and given back once no earlier record reads it; the gradients that reach the inputs are those
of ordinary arrays."""

import numpy as np
import pytest

import xsim
from xsim.array import intermediate
from xsim.autodiff import tape as tape_mod


@xsim.kernel
def square(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] * x[i]


@xsim.kernel
def add_scaled(x: xsim.array(dtype=float), s: float, y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] + s * x[i] * x[i]


def _rollout(make, x0, steps):
    """x_{k+1} = x_k + 0.1 x_k^2 through arrays made by ``make``; returns (tape, last array)."""
    tape, x = xsim.Tape(), x0
    with tape:
        for _ in range(steps):
            sq = make(x0.shape[0])
            xsim.launch(square, x0.shape[0], inputs=[x], outputs=[sq])  # an unused branch of the graph
            nxt = make(x0.shape[0])
            xsim.launch(add_scaled, x0.shape[0], inputs=[x, 0.1], outputs=[nxt])
            x = nxt
    return tape, x


def test_intermediates_give_the_gradients_of_ordinary_arrays():
    x_np = np.linspace(-1.0, 1.0, 37, dtype=np.float32)
    grads = []
    for make in (lambda n: intermediate(n, float), lambda n: xsim.empty(n, dtype=float, requires_grad=True)):
        x0 = xsim.array(x_np, dtype=float, requires_grad=True)
        tape, last = _rollout(make, x0, 5)
        tape.backward(grads={last: np.ones(37, np.float32)})
        grads.append(x0.grad.numpy().copy())
    np.testing.assert_array_equal(grads[0], grads[1])
    x, expected = x_np.astype(np.float64), np.ones(37)
    for _ in range(5):  # the chain rule in float64: d x_{k+1} / d x_k = 1 + 0.2 x_k
        expected *= 1.0 + 0.2 * x
        x = x + 0.1 * x * x
    np.testing.assert_allclose(grads[0], expected, rtol=1e-5)


def test_an_intermediate_has_no_gradient_buffer_until_backward_needs_it():
    x0 = xsim.array(np.arange(8, dtype=np.float32), requires_grad=True)
    y = intermediate(8, float)
    z = intermediate(8, float)
    tape = xsim.Tape()
    with tape:
        xsim.launch(square, 8, inputs=[x0], outputs=[y])
        xsim.launch(square, 8, inputs=[y], outputs=[z])
    assert y.requires_grad and y._grad is None and z._grad is None
    assert tape.memory() == 3 * 8 * 4 + 8 * 4  # three arrays and x0's grad: no pending gradient counted
    tape.backward(grads={z: np.ones(8, np.float32)})
    np.testing.assert_allclose(x0.grad.numpy(), 4.0 * np.arange(8) ** 3, rtol=1e-6)  # d x^4 / dx
    assert y._grad is None and z._grad is None  # given back: spent
    np.testing.assert_array_equal(y.grad.numpy(), np.zeros(8))  # and reads as zeros again


def test_the_backward_pass_reuses_given_back_gradient_buffers(monkeypatch):
    x0 = xsim.array(np.full(16, 0.5, np.float32), requires_grad=True)
    arrays = [x0]
    tape = xsim.Tape()
    with tape:
        for _ in range(6):
            nxt = intermediate(16, float)
            xsim.launch(square, 16, inputs=[arrays[-1]], outputs=[nxt])
            arrays.append(nxt)
    seen = set()
    original = tape_mod._GradPool.take

    def take(pool, a):
        g = original(pool, a)
        seen.add(id(g))
        return g

    monkeypatch.setattr(tape_mod._GradPool, "take", take)
    tape.backward(grads={arrays[-1]: np.ones(16, np.float32)})
    assert len(seen) <= 2  # a chain needs two live gradients at a time, not six
    np.testing.assert_allclose(x0.grad.numpy(), np.full(16, 64 * 0.5 ** 63), rtol=1e-5)  # d x^64 / dx


def test_views_of_an_intermediate_share_its_gradient():
    x0 = xsim.array(np.arange(1, 9, dtype=np.float32), requires_grad=True)
    y = intermediate(8, float)
    out = xsim.zeros(4, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(square, 8, inputs=[x0], outputs=[y])
        xsim.launch(square, 4, inputs=[y[4:]], outputs=[out])
    assert y[4:]._grad is None
    tape.backward(grads={out: np.ones(4, np.float32)})
    expected = np.where(np.arange(8) >= 4, 4.0 * np.arange(1, 9) ** 3, 0.0)
    np.testing.assert_allclose(x0.grad.numpy(), expected, rtol=1e-6)


def test_gradients_accumulate_over_two_backward_calls_through_intermediates():
    x0 = xsim.array(np.arange(4, dtype=np.float32), requires_grad=True)
    y = intermediate(4, float)
    out = xsim.zeros(4, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(square, 4, inputs=[x0], outputs=[y])
        xsim.launch(square, 4, inputs=[y], outputs=[out])
    for _ in range(2):
        tape.backward(grads={out: np.ones(4, np.float32)})
    np.testing.assert_allclose(x0.grad.numpy(), 2 * 4.0 * np.arange(4) ** 3, rtol=1e-6)


def _zeroings(monkeypatch) -> list:
    """Records every ``zero_untracked`` call from now on (the gradient pool's zeroing of reused buffers)."""
    calls = []
    original = xsim.array.zero_untracked

    def zero_untracked(a):
        calls.append(a.shape)
        original(a)

    monkeypatch.setattr(xsim.array, "zero_untracked", zero_untracked)
    return calls


def test_written_first_intermediates_reuse_gradient_buffers_unzeroed_with_the_same_gradients(monkeypatch):
    x_np = np.linspace(-1.0, 1.0, 37, dtype=np.float32)
    grads, zeroed = [], []
    for written_first in (False, True):
        x0 = xsim.array(x_np, dtype=float, requires_grad=True)
        tape, last = _rollout(lambda n, w=written_first: intermediate(n, float, written_first=w), x0, 6)
        calls = _zeroings(monkeypatch)
        tape.backward(grads={last: np.ones(37, np.float32)})
        monkeypatch.undo()
        grads.append(x0.grad.numpy().copy())
        zeroed.append(len(calls))
    # the write adjoints left each reused buffer zero: only the seeded gradient's buffer, which the
    # pool did not hand out, is zeroed when reused
    assert zeroed[0] > 1 and zeroed[1] == 1
    np.testing.assert_array_equal(grads[0], grads[1])


def test_debug_mode_refuses_a_written_first_intermediate_read_before_it_was_written(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x0 = xsim.array(np.arange(8, dtype=np.float32), requires_grad=True)
    y = intermediate(8, float, written_first=True)
    y.fill_untracked(2.0)  # off the tape
    z = intermediate(8, float)
    tape = xsim.Tape()
    with tape:
        xsim.launch(square, 4, inputs=[x0], outputs=[y])  # writes y[:4] only
        xsim.launch(add_scaled, 8, inputs=[y, 0.5], outputs=[z])  # reads y[4:], which nothing on the tape wrote
    with pytest.raises(RuntimeError, match=r"array 'y' \(written by kernel '.*square'\) was created with "
                                           r"intermediate\(\.\.\., written_first=True\), but a recorded launch read"):
        tape.backward(grads={z: np.ones(8, np.float32)})


def _squaring_rollout(x0, steps, scratch, view=False):
    """x_{k+1} = x_k^2 through ``scratch``, one array written every step (square) and read linearly
    (add_scaled with s = 0: its adjoint needs no value), through a view of it where ``view``; returns
    (tape, last array)."""
    tape, x = xsim.Tape(), x0
    with tape:
        for _ in range(steps):
            xsim.launch(square, x0.shape[0], inputs=[x], outputs=[scratch])
            nxt = intermediate(x0.shape[0], float)
            xsim.launch(add_scaled, x0.shape[0], inputs=[scratch[:] if view else scratch, 0.0], outputs=[nxt])
            x = nxt
    return tape, x


def test_a_scratch_intermediate_serves_every_step_and_keeps_the_gradients_exact():
    x_np = np.linspace(0.5, 1.1, 16, dtype=np.float32)
    x0 = xsim.array(x_np, dtype=float, requires_grad=True)
    tape, last = _squaring_rollout(x0, 3, intermediate(16, float, written_first=True, scratch=True))
    tape.backward(grads={last: np.ones(16, np.float32)})
    x = x_np.astype(np.float64)
    np.testing.assert_allclose(x0.grad.numpy(), 8.0 * x ** 7, rtol=1e-5)  # d x^8 / dx


def test_a_view_of_a_scratch_intermediate_may_be_overwritten_with_it_even_in_debug_mode(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")  # which checksums every read, views included
    x_np = np.linspace(0.5, 1.1, 16, dtype=np.float32)
    x0 = xsim.array(x_np, dtype=float, requires_grad=True)
    tape, last = _squaring_rollout(x0, 3, intermediate(16, float, written_first=True, scratch=True), view=True)
    tape.backward(grads={last: np.ones(16, np.float32)})
    np.testing.assert_allclose(x0.grad.numpy(), 8.0 * x_np.astype(np.float64) ** 7, rtol=1e-5)


def test_an_array_overwritten_after_a_read_still_refuses_the_backward_pass_unless_scratch():
    x0 = xsim.array(np.linspace(0.5, 1.1, 16, dtype=np.float32), dtype=float, requires_grad=True)
    tape, last = _squaring_rollout(x0, 2, intermediate(16, float, written_first=True))
    with pytest.raises(RuntimeError, match="overwritten afterwards"):
        tape.backward(grads={last: np.ones(16, np.float32)})
