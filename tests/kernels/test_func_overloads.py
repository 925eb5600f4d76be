"""Concrete definitions beside a generic one of the same func (Warp's explicit overloads of generic
funcs): a call takes the definition that fits its arguments most closely (exact types, then converted
literals, then generic parameters), whatever order they were defined in. Results against plain
Python; the float64 path's gradient against central differences."""

from typing import Any

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

F64 = xsim.float64


@xsim.func
def combine(a: float, b: float):
    return a * b


@xsim.func
def combine(a: Any, b: Any):  # noqa: F811 - the generic definition, after the concrete one
    return a + b


@xsim.func
def combine(a: int, b: int):  # noqa: F811
    return a - b


@xsim.func
def combine(a: F64, b: F64):  # noqa: F811
    return a * b * 2.0


@xsim.kernel
def combine_all(ints: xsim.array(dtype=int), floats: xsim.array(dtype=float), vecs: xsim.array(dtype=xsim.vec3),
                doubles: xsim.array(dtype=F64), halves: xsim.array(dtype=xsim.float16)):
    ints[0] = combine(17, 25)               # int literals: the int definition
    ints[1] = combine(ints[2], ints[3])     # int32 values: the int definition
    floats[0] = combine(7.0, 10.0)          # float literals: the float definition, not the generic one
    floats[1] = combine(floats[2], 3.0)
    vecs[0] = combine(vecs[1], vecs[2])     # no concrete definition takes vectors: the generic one
    doubles[0] = combine(doubles[1], doubles[2])
    halves[0] = combine(halves[1], halves[2])  # float16: only the generic one fits


def test_each_call_takes_the_closest_definition():
    ints = xsim.array(np.array([0, 0, 9, 4], dtype=np.int32), dtype=int)
    floats = xsim.array(np.array([0.0, 0.0, 1.5, 0.0], dtype=np.float32), dtype=float)
    vecs = xsim.array(np.array([[0, 0, 0], [1, 2, 3], [10, 20, 30]], dtype=np.float32), dtype=xsim.vec3)
    doubles = xsim.array(np.array([0.0, 1.25, -3.0]), dtype=F64)
    halves = xsim.array(np.array([0.0, 1.5, 2.0], dtype=np.float16), dtype=xsim.float16)
    xsim.launch(combine_all, 1, inputs=[ints, floats, vecs, doubles, halves])
    assert list(ints.numpy()[:2]) == [17 - 25, 9 - 4]
    assert list(floats.numpy()[:2]) == [70.0, 4.5]
    assert list(vecs.numpy()[0]) == [11.0, 22.0, 33.0]
    assert doubles.numpy()[0] == 1.25 * -3.0 * 2.0
    assert halves.numpy()[0] == 3.5


@xsim.kernel
def combine_doubles(a: xsim.array(dtype=F64), b: xsim.array(dtype=F64), y: xsim.array(dtype=F64)):
    i = xsim.tid()
    y[i] = combine(a[i], b[i])


def test_the_chosen_definition_is_differentiated():
    a = xsim.array(np.array([0.5, -1.5, 2.0]), dtype=F64, requires_grad=True)
    b = xsim.array(np.array([3.0, 0.25, -1.0]), dtype=F64, requires_grad=True)
    y = xsim.zeros(3, dtype=F64, requires_grad=True)
    report = gradcheck(combine_doubles, [a, b, y])
    assert report.passed, report
    # d(w y)/da / d(w y)/db = b / a for y = 2ab (the F64 definition), not 1 as for a + b
    np.testing.assert_allclose(report["a"].analytic / report["b"].analytic, b.numpy() / a.numpy(), rtol=1e-12)


def test_called_from_python_a_func_takes_the_definition_for_the_python_types():
    assert combine(17, 25) == -8            # int: the int definition
    assert combine(7.0, 10.0) == 70.0       # float: the float (float32) definition
    assert combine(F64(1.5), F64(2.0)) == 6.0
    assert list(combine(xsim.vec3(1.0, 2.0, 3.0), xsim.vec3(1.0, 1.0, 1.0))) == [2.0, 3.0, 4.0]


@xsim.func
def halve_double(x: F64):
    return x / 2.0


def test_called_from_python_with_no_fitting_definition_a_func_says_so():
    with pytest.raises(RuntimeError, match=r"^Error calling function 'halve_double', no overload found for "
                                           r"arguments \(1\.0,\)$"):
        halve_double(1.0)


def test_func_takes_warps_module_and_inline_options_and_declares_its_call_forms():
    import typing

    @xsim.func(module="unique", inline=True)
    def plus_one(x: float):
        return x + 1.0
    assert plus_one(1.0) == 2.0
    with pytest.raises(TypeError, match=r"func\(inline=...\) takes a bool or None, got 'yes'"):
        xsim.func(inline="yes")
    # @func and @func(...) are typing overloads, so type checkers see the decorated signature
    assert len(typing.get_overloads(xsim.func)) == 2
