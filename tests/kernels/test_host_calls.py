"""Builtins and funcs called from Python scope with host values give what the same call gives in a
kernel (Warp allows both); kernel-only builtins and bad arguments are refused with the name."""

from __future__ import annotations

import math

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only  # host calls always evaluate on the CPU


def test_scalar_builtin_returns_a_python_number_in_float32():
    got = xsim.sin(0.5)
    assert isinstance(got, float) and got == float(np.sin(np.float32(0.5)))
    assert xsim.min(2, 5) == 2 and isinstance(xsim.min(2, 5), int)


def test_vector_and_quaternion_builtins_match_their_formulas():
    n = xsim.normalize(xsim.vec3(1.0, 2.0, 2.0))
    assert type(n) is xsim.vec3
    np.testing.assert_allclose(np.array(n), [1 / 3, 2 / 3, 2 / 3], rtol=1e-6)
    q = xsim.quat_from_axis_angle(xsim.vec3(1.0, 0.0, 0.0), 0.3)
    np.testing.assert_allclose(np.array(q), [math.sin(0.15), 0.0, 0.0, math.cos(0.15)], rtol=1e-6)
    assert xsim.transform_identity() == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def test_dtype_keywords_of_host_calls_take_xsim_and_numpy_types():
    # one compiled kernel (cold cost): both spellings are float64
    assert type(xsim.quat_identity(dtype=xsim.float64)) is xsim.quatd
    assert xsim.quat_identity(dtype=np.float64) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(TypeError, match="xsim.quat_identity: keyword dtype=3 called from Python must be a scalar"):
        xsim.quat_identity(dtype=3)


def test_host_calls_on_shapes_without_an_alias():
    m = xsim.matrix_from_cols(xsim.vec2(1.0, 2.0), xsim.vec2(3.0, 4.0), xsim.vec2(5.0, 6.0))
    assert type(m) is xsim.types.matrix((2, 3), xsim.float32) and m == [[1, 3, 5], [2, 4, 6]]


def test_transform_setters_change_the_host_transform_in_place():
    t = xsim.transform_identity()
    xsim.transform_set_translation(t, xsim.vec3(1.0, 2.0, 3.0))
    xsim.transform_set_rotation(t, xsim.quat(0.0, 0.0, 1.0, 0.0))
    assert t == (1.0, 2.0, 3.0, 0.0, 0.0, 1.0, 0.0)
    with pytest.raises(TypeError, match="xsim.transform_set_rotation\\(\\) needs 4 components for the new part"):
        xsim.transform_set_rotation(t, xsim.vec3())
    with pytest.raises(TypeError, match="xsim.transform_set_translation\\(xform, value\\) needs a transform, got vec3f"):
        xsim.transform_set_translation(xsim.vec3(), xsim.vec3())


def test_user_func_runs_on_host_scalars():
    @xsim.func
    def hypot(x: float, y: float):
        return xsim.sqrt(x * x + y * y)

    assert hypot(3.0, 4.0) == 5.0


def test_kernel_only_builtins_and_bad_arguments_are_refused_with_the_name():
    with pytest.raises(TypeError, match="xsim.tid reads the thread index: it can only be called inside"):
        xsim.tid()
    with pytest.raises(TypeError, match="xsim.randf advances a random state"):
        xsim.randf(1)
    with pytest.raises(TypeError, match=r"xsim.cross\(vec3f, float32\) called from Python: no overload of 'cross'"):
        xsim.cross(xsim.vec3(1.0, 0.0, 0.0), 2.0)
    with pytest.raises(TypeError, match="xsim.sin: argument 0 \\('a'\\) is not a number or an xsim value"):
        xsim.sin("a")


def test_builtin_giving_several_values_returns_a_tuple_on_host():
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]])
    u, sigma, v = xsim.svd3(xsim.mat33(*a.ravel()))
    assert (type(u), type(sigma), type(v)) == (xsim.mat33, xsim.vec3, xsim.mat33)
    # U and V are rotations (as in Warp), so the smallest singular value carries the sign of det(a)
    np.testing.assert_allclose(np.abs(np.array(sigma)), np.linalg.svd(a)[1], rtol=1e-5)
    np.testing.assert_allclose(np.array(u) @ np.diag(np.array(sigma)) @ np.array(v).T, a, atol=1e-4)


def test_library_func_runs_on_host_as_in_a_kernel_keeping_the_scalar_type():
    # quat_to_axis_angle is written in the kernel language (xsim.vector(x, y, z) inside): on the host it
    # runs as a one-thread kernel, so a half-precision quaternion gives a vec3h axis and a float16 angle
    q = np.array([1.0, 2.0, 3.0, 4.0])
    axis, angle = xsim.quat_to_axis_angle(xsim.quath(*q))
    assert type(axis) is xsim.vec3h and isinstance(angle, float)
    np.testing.assert_allclose(np.array(axis, dtype=np.float64), q[:3] / np.linalg.norm(q[:3]), atol=2e-3)
    assert abs(angle - 2.0 * math.atan2(np.linalg.norm(q[:3]), q[3])) < 2e-3
