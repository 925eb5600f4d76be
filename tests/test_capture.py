"""Graph capture as Warp's CPU does it (xsim/capture.py): operations inside ``ScopedCapture`` are checked and
recorded, not run; ``capture_launch`` runs them again on every call with the arrays and values they were given
(arrays created inside are refilled), a graph replayed inside another capture is one of its steps, another
thread's launches run as usual, and a Tape cannot record or go backward inside a capture."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import xsim as wp


@wp.kernel
def add_scaled(a: wp.array(dtype=float), b: wp.array(dtype=float), s: float):
    i = wp.tid()
    a[i] = a[i] + s * b[i]


def test_a_capture_runs_nothing_and_each_replay_runs_everything_again():
    a = wp.zeros(3, dtype=float)
    b = wp.array([1.0, 2.0, 3.0], dtype=float)
    with wp.ScopedCapture() as capture:
        assert capture.active and wp.is_capture_active()
        wp.launch(add_scaled, 3, inputs=[a, b, 2.0])
        acc = wp.zeros(3, dtype=float)  # created inside: zeroed again by every replay
        wp.copy(acc, a)
        wp.launch(add_scaled, 3, inputs=[acc, b, 1.0])
        b.fill_(1.0)
    assert not capture.active and not wp.is_capture_active() and len(capture.graph) == 5
    np.testing.assert_array_equal(a.numpy(), [0, 0, 0])
    np.testing.assert_array_equal(b.numpy(), [1, 2, 3])
    wp.capture_launch(capture.graph)
    np.testing.assert_array_equal(a.numpy(), [2, 4, 6])
    np.testing.assert_array_equal(acc.numpy(), [3, 6, 9])
    np.testing.assert_array_equal(b.numpy(), [1, 1, 1])
    wp.capture_launch(capture.graph)  # b is all ones now
    np.testing.assert_array_equal(a.numpy(), [4, 6, 8])
    np.testing.assert_array_equal(acc.numpy(), [5, 7, 9])


def test_a_graph_replayed_inside_a_capture_is_one_step_of_it():
    a, b = wp.zeros(2, dtype=float), wp.ones(2, dtype=float)
    with wp.ScopedCapture() as inner:
        wp.launch(add_scaled, 2, inputs=[a, b, 1.0])
    wp.capture_begin()
    wp.capture_launch(inner.graph)
    wp.capture_launch(inner.graph)
    outer = wp.capture_end()
    np.testing.assert_array_equal(a.numpy(), [0, 0])
    wp.capture_launch(outer)
    np.testing.assert_array_equal(a.numpy(), [2, 2])


def test_another_threads_launches_run_while_one_thread_captures():
    a, b = wp.zeros(2, dtype=float), wp.ones(2, dtype=float)
    with wp.ScopedCapture():
        t = threading.Thread(target=lambda: wp.launch(add_scaled, 2, inputs=[a, b, 5.0]))
        t.start()
        t.join()
    np.testing.assert_array_equal(a.numpy(), [5, 5])


def test_a_bad_launch_is_refused_at_capture_time():
    with pytest.raises(TypeError, match="takes 3 arguments"), wp.ScopedCapture():
        wp.launch(add_scaled, 2, inputs=[wp.zeros(2, dtype=float)])
    assert not wp.is_capture_active()


def test_a_tape_cannot_record_or_go_backward_inside_a_capture():
    a = wp.zeros(2, dtype=float, requires_grad=True)
    b = wp.ones(2, dtype=float, requires_grad=True)
    with pytest.raises(RuntimeError, match="while a Tape records inside a graph capture"), wp.ScopedCapture(), \
            wp.Tape():
        wp.launch(add_scaled, 2, inputs=[a, b, 1.0])
    tape = wp.Tape()
    with tape:
        wp.launch(add_scaled, 2, inputs=[a, b, 1.0])
    with pytest.raises(RuntimeError, match="inside a graph capture"), wp.ScopedCapture():
        tape.backward(grads={a: wp.ones(2, dtype=float)})
    with pytest.raises(RuntimeError, match="no capture is open"):
        wp.capture_end()
