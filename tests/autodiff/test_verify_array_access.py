"""``xsim.config.verify_autograd_array_access``: while a Tape records, a launch or array op that
writes an array read earlier on the tape warns on stderr, naming the array's parameter, the kernel
and its file:line (or the op and the user's line); in-place ``+=`` is a write, not a read; reads
through funcs and sub-array views count; backward() and reset() forget the reads."""

import contextlib
import io
import sys
import warnings

import numpy as np
import pytest

import xsim

A = xsim.array(dtype=xsim.float32)
OVERWRITTEN = "is being written to but has already been read from in a previous launch"


@xsim.kernel
def square(x: A, y: A):
    i = xsim.tid()
    y[i] = x[i] * x[i]


@xsim.kernel
def set_from(src: A, dst: A):
    i = xsim.tid()
    dst[i] = src[i]


@xsim.kernel
def accumulate(dst: A, src: A):
    i = xsim.tid()
    dst[i] += src[i]


@xsim.func
def store_one(a: A, i: int):
    a[i] = 1.0


@xsim.func
def load(a: A, i: int):
    return a[i]


@xsim.kernel
def through_funcs(r: A, w: A, out: A):
    i = xsim.tid()
    store_one(w, i)
    out[i] = load(r, i)


@xsim.kernel
def through_view(x: xsim.array3d(dtype=xsim.float32), y: xsim.array3d(dtype=xsim.float32)):
    i, j, k = xsim.tid()
    row = x[i, j]
    out = y[i, j]
    out[k] = row[k]


@pytest.fixture(autouse=True)
def verify():
    saved = xsim.config.verify_autograd_array_access
    xsim.config.verify_autograd_array_access = True
    yield
    xsim.config.verify_autograd_array_access = saved


def arrays(n=3):
    a = xsim.array(np.arange(1.0, n + 1), dtype=xsim.float32, requires_grad=True)
    return a, xsim.zeros_like(a), xsim.zeros_like(a)


def stderr_of(fn) -> str:
    with contextlib.redirect_stderr(io.StringIO()) as f:
        fn()
    return f.getvalue()


def test_a_launch_overwriting_an_array_read_earlier_on_the_tape_warns_naming_parameter_and_kernel():
    a, b, c = arrays()

    def run():
        with xsim.Tape():
            xsim.launch(square, 3, inputs=[a], outputs=[b])
            xsim.launch(set_from, 3, inputs=[c], outputs=[a])

    text = stderr_of(run)
    assert OVERWRITTEN in text
    assert "passed to argument dst in kernel set_from at " + __file__ in text
    np.testing.assert_array_equal(b.numpy(), [1.0, 4.0, 9.0])  # the launches still ran


def test_writes_of_arrays_nobody_read_do_not_warn_and_the_flag_off_is_silent():
    a, b, c = arrays()

    def run():
        with xsim.Tape():
            xsim.launch(square, 3, inputs=[a], outputs=[b])
            xsim.launch(set_from, 3, inputs=[a], outputs=[c])  # reads a again, writes c
    assert stderr_of(run) == ""
    xsim.config.verify_autograd_array_access = False
    a, b, c = arrays()

    def run_off():
        with xsim.Tape():
            xsim.launch(square, 3, inputs=[a], outputs=[b])
            xsim.launch(set_from, 3, inputs=[c], outputs=[a])
    assert stderr_of(run_off) == "" and not a._is_read


def test_in_place_add_is_a_write_and_reads_go_through_funcs_and_views():
    a, b, _ = arrays()
    with xsim.Tape():
        xsim.launch(accumulate, 3, inputs=[a, b])
    assert (a._is_read, b._is_read) == (False, True)
    r, w, out = arrays()
    with xsim.Tape():
        xsim.launch(through_funcs, 3, inputs=[r, w, out])
    assert (r._is_read, w._is_read, out._is_read) == (True, False, False)
    x = xsim.array(np.ones((2, 2, 3)), dtype=xsim.float32, requires_grad=True)
    y = xsim.zeros_like(x)
    with xsim.Tape():
        xsim.launch(through_view, (2, 2, 3), inputs=[x, y])
    assert (x._is_read, y._is_read) == (True, False)
    np.testing.assert_array_equal(y.numpy(), np.ones((2, 2, 3)))


def test_copy_onto_a_read_array_warns_at_the_users_line():
    a, b, _ = arrays()

    def run():
        with xsim.Tape():
            xsim.launch(square, 3, inputs=[a], outputs=[b])
            line = sys._getframe().f_lineno + 1
            a.assign(b)
            return line

    with contextlib.redirect_stderr(io.StringIO()) as f:
        line = run()
    assert f"is being written to by an array copy at {__file__}:{line} but has already been read" in f.getvalue()


def test_reading_a_view_marks_its_parent_and_mark_write_checks_what_it_views():
    a = xsim.zeros((3, 3), dtype=xsim.float32, requires_grad=True)
    flat = a.view(xsim.int32).flatten()
    assert not flat._is_read
    flat.mark_read()
    assert a._is_read
    row = a[1]
    assert stderr_of(row.mark_write).startswith("xsim UserWarning: Array ")
    a.mark_init()
    assert stderr_of(row.mark_write) == ""


def test_backward_and_reset_forget_the_reads_so_a_new_tape_may_write():
    a, b, c = arrays()
    head = b[:2]
    with xsim.Tape() as tape:
        xsim.launch(square, 2, inputs=[a[:2]], outputs=[head])
    assert a._is_read
    tape.backward(grads={head: np.ones(2, dtype=np.float32)})
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 4.0, 0.0])
    assert not a._is_read

    def rewrite():
        with xsim.Tape():
            xsim.launch(set_from, 3, inputs=[c], outputs=[a])
    assert stderr_of(rewrite) == ""
    with xsim.Tape() as tape2:
        xsim.launch(square, 3, inputs=[a], outputs=[b])
    tape2.reset()
    assert not a._is_read


def test_a_pending_tapes_read_still_warns_on_another_tape():
    a, b, c = arrays()
    with xsim.Tape():
        xsim.launch(square, 3, inputs=[a], outputs=[b])

    def rewrite():
        with xsim.Tape():
            xsim.launch(set_from, 3, inputs=[c], outputs=[a])
    assert OVERWRITTEN in stderr_of(rewrite)


def test_the_warning_obeys_warning_filters():
    a, b, c = arrays()
    with xsim.Tape():
        xsim.launch(square, 3, inputs=[a], outputs=[b])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(UserWarning, match="argument dst in kernel set_from"):
                xsim.launch(set_from, 3, inputs=[c], outputs=[a])
