"""Warp's WarpCodegen*Error family: every refused kernel raises a subclass of ``xsim.CompileError``
that is also the Python error of its kind (``except TypeError`` catches a type mismatch, as in Warp).
All the bad kernels share one module: each is refused alone."""

import numpy as np
import pytest

import xsim

F = xsim.array(dtype=float)


@xsim.struct
class Body:
    mass: float


@xsim.kernel
def uses_undefined_name(x: F):
    x[0] = not_defined_anywhere  # noqa: F821 (the error under test)


@xsim.kernel
def adds_float_and_vector(x: F):
    x[0] = x[0] + xsim.vec3(1.0)


@xsim.kernel
def returns_a_value(x: F):
    return x[0]


@xsim.kernel
def reads_a_missing_field(x: F, b: Body):
    x[0] = b.volume


@xsim.kernel
def reads_a_missing_component(x: F):
    v = xsim.vec2(1.0, 2.0)
    x[0] = v.z


@xsim.kernel
def indexes_past_the_end(x: F):
    v = xsim.vec3(1.0, 2.0, 3.0)
    x[0] = v[3]


@xsim.kernel
def loops_with_zero_step(x: F):
    for i in range(0, 4, 0):
        x[0] = float(i)


@xsim.kernel
def unsupported_statement(x: F):
    with open("f"):  # noqa: PTH123
        x[0] = 1.0


TABLE = xsim.array(np.array([1.0, 2.0, 3.0], np.float32), dtype=float, device="cpu")  # data seen only by name
WEIGHTS = [0.5, 0.25]


@xsim.kernel
def indexes_a_global_array(x: F):
    x[0] = TABLE[0]


@xsim.kernel
def assigns_a_global_array(x: F):
    x[0] = TABLE


@xsim.kernel
def passes_a_global_array(x: F):
    x[0] = float(xsim.lower_bound(TABLE, 2.0))


@xsim.kernel
def indexes_a_global_list(x: F):
    x[0] = WEIGHTS[1]


@xsim.kernel
def fine(x: F):
    x[0] = 7.0


@pytest.mark.parametrize("kernel,flavour,base,phrase", [
    (uses_undefined_name, xsim.WarpCodegenKeyError, KeyError, "unknown name 'not_defined_anywhere'"),
    (uses_undefined_name, xsim.WarpCodegenKeyError, KeyError, "Referencing undefined symbol: not_defined_anywhere"),
    (adds_float_and_vector, xsim.WarpCodegenTypeError, TypeError, "no overload of 'add' takes (float32, vec3f)"),
    (returns_a_value, xsim.WarpCodegenTypeError, TypeError, "Warp kernels cannot return values"),
    (reads_a_missing_field, xsim.WarpCodegenAttributeError, AttributeError,
     f"`volume` is not an attribute of 'b' ({Body.__module__}.Body)"),
    (reads_a_missing_component, xsim.WarpCodegenAttributeError, AttributeError, "vec2f has no component 'z'"),
    (indexes_past_the_end, xsim.WarpCodegenIndexError, IndexError, "index 3 out of range for vec3f"),
    (loops_with_zero_step, xsim.WarpCodegenValueError, ValueError, "range() step must not be zero"),
    (unsupported_statement, xsim.WarpCodegenError, RuntimeError, "with blocks are not supported"),
    (indexes_a_global_array, xsim.WarpCodegenTypeError, TypeError,
     f"Invalid external reference type: {type(TABLE)}: {TABLE!r} cannot be indexed in a kernel"),
    (assigns_a_global_array, xsim.WarpCodegenTypeError, TypeError,
     f"Invalid external reference type: {type(TABLE)}: {TABLE!r} is not a value that can be used here"),
    (passes_a_global_array, xsim.WarpCodegenTypeError, TypeError, "pass it as a launch argument"),
    (indexes_a_global_list, xsim.WarpCodegenTypeError, TypeError, "Invalid external reference type: <class 'list'>"),
])
def test_refused_kernel_raises_the_warp_error_of_its_kind(kernel, flavour, base, phrase):
    x = xsim.zeros(1, dtype=float)
    with pytest.raises(flavour) as info:
        xsim.launch(kernel, 1, inputs=[x, Body()] if kernel is reads_a_missing_field else [x])
    err = info.value
    assert isinstance(err, xsim.CompileError) and isinstance(err, xsim.WarpCodegenError) and isinstance(err, base)
    assert phrase in str(err) and str(err).startswith(f"{__file__}:{err.line}:")
    assert err.line > kernel.pyfunc.__code__.co_firstlineno


def test_the_good_kernel_beside_them_runs():
    x = xsim.zeros(1, dtype=float)
    xsim.launch(fine, 1, inputs=[x])
    np.testing.assert_array_equal(x.numpy(), [7.0])
