"""``None`` for an array argument (Warp's null array): it has shape 0 in every dimension, is false in
a kernel's ``if a:``, and the launch runs bounds-checked, so reading it is an IndexError, not a crash."""

import numpy as np
import pytest

import xsim

F = xsim.array(dtype=float)


@xsim.kernel
def scale_if_given(x: F, weights: F, y: F):
    i = xsim.tid()
    w = 1.0
    if weights:
        w = weights[i]
    y[i] = x[i] * w


@xsim.kernel
def report_null(a: xsim.array(dtype=xsim.vec3, ndim=2), flags: xsim.array(dtype=int)):
    flags[0] = 1 if not a else 0
    flags[1] = a.shape[0] + a.shape[1]


@xsim.kernel
def reads_it(a: F, y: F):
    y[0] = a[0]


def test_a_none_array_argument_is_false_in_the_kernel():
    x = xsim.array([1.0, 2.0, 3.0], dtype=float)
    y = xsim.zeros(3, dtype=float)
    xsim.launch(scale_if_given, 3, inputs=[x, None], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0, 3.0])
    xsim.launch(scale_if_given, 3, inputs=[x, xsim.array([2.0, 0.5, -1.0], dtype=float)], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [2.0, 1.0, -3.0])


def test_a_none_array_has_zero_shape():
    flags = xsim.full(2, 7, dtype=int)
    xsim.launch(report_null, 1, inputs=[None, flags])
    np.testing.assert_array_equal(flags.numpy(), [1, 0])
    flags.fill_(7)
    xsim.launch(report_null, 1, inputs=[xsim.zeros((2, 3), dtype=xsim.vec3), flags])
    np.testing.assert_array_equal(flags.numpy(), [0, 5])


def test_reading_a_none_array_is_an_index_error_not_a_crash():
    y = xsim.zeros(1, dtype=float)
    assert xsim.config.mode == "release"  # a launch with a None array is bounds-checked all the same
    with pytest.raises(IndexError, match=r"kernel 'reads_it'.*index \(0,\) is out of bounds for array 'a'"):
        xsim.launch(reads_it, 1, inputs=[None, y])
