"""The recording API (xsim/kernels/recording.py): which recorders listen in this thread, launch.record, and the
untracked array operations and write counts (xsim/array.py) that recorders and their users rely on."""

import numpy as np
import pytest

import xsim
from xsim.kernels import launch, recording


@xsim.kernel
def add_one(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] + 1.0


def test_push_pop_current_and_a_stack_that_is_a_copy():
    a, b = object(), object()
    assert recording.current() is None and not recording.is_recording()
    recording.push(a)
    recording.push(b)
    try:
        assert recording.current() is b and recording.is_recording()
        seen = recording.stack()
        assert seen == [a, b]
        seen.clear()  # the caller's copy: the recorders stay
        assert recording.stack() == [a, b]
        recording.pop(a)  # not the innermost
        assert recording.stack() == [b]
    finally:
        recording.pop(b)
    assert recording.stack() == []


def test_suspended_hides_the_tape_and_restores_it():
    x = xsim.array(np.arange(3.0), dtype=float, requires_grad=True)
    y = xsim.zeros(3, dtype=float, requires_grad=True)
    z = xsim.zeros(3, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        with recording.suspended():
            assert recording.current() is None
            xsim.launch(add_one, 3, inputs=[x], outputs=[z])
        assert recording.current() is tape
        xsim.launch(add_one, 3, inputs=[x], outputs=[y])
    assert len(tape.records) == 1
    tape.backward(grads={y: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3))
    np.testing.assert_array_equal(z.numpy(), [1.0, 2.0, 3.0])


def test_launches_and_tape_aware_ops_count_writes_untracked_ops_do_not():
    x = xsim.array(np.arange(3.0), dtype=float)
    y = xsim.zeros(3, dtype=float)
    xsim.launch(add_one, 3, inputs=[x], outputs=[y])
    assert (y.version, y.last_writer, x.version) == (1, add_one.key, 0)
    y.fill_(2.0)
    assert (y.version, y.last_writer) == (2, "fill_")
    y.fill_untracked(5.0)
    y.zero_untracked()
    y.copy_from_untracked(x)
    c = y.clone_untracked()
    assert y.version == 2 and c.version == 0 and c.grad is None
    np.testing.assert_array_equal(c.numpy(), [0.0, 1.0, 2.0])
    y.mark_written("my_op")
    assert (y.version, y.last_writer) == (3, "my_op")


@xsim.kernel
def scale_by_two(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = x[i] * 2.0


def test_record_puts_a_launch_on_the_tape_without_running_it():
    """launch.record: the tape gets the kernel's adjoint for work done another way (here numpy computed
    y = 2 x), the arrays are left as they are, and outside a tape it does nothing."""
    x = xsim.array(np.arange(4.0), dtype=float, requires_grad=True)
    y = xsim.array(np.full(4, 7.0), dtype=float, requires_grad=True)
    launch.record(scale_by_two, 4, inputs=[x], outputs=[y])  # no tape: nothing
    tape = xsim.Tape()
    with tape:
        launch.record(scale_by_two, 4, inputs=[x], outputs=[y])
    assert len(tape.launches) == 1
    np.testing.assert_array_equal(y.numpy(), np.full(4, 7.0))  # not run
    tape.backward(grads={y: np.array([1.0, -2.0, 3.0, 0.5])})
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0, 1.0])
    np.testing.assert_array_equal(y.grad.numpy(), np.zeros(4))  # the adjoint of the write consumed it


def test_record_checks_its_arguments_as_launch_does():
    x = xsim.zeros(3, dtype=float, requires_grad=True)
    with xsim.Tape(), pytest.raises(TypeError, match="scale_by_two"):
        launch.record(scale_by_two, 3, inputs=[x], outputs=[])
    with xsim.Tape(), pytest.raises(TypeError, match=r"record\(\) needs an @xsim.kernel"):
        launch.record(lambda: None, 3, inputs=[x], outputs=[x])
