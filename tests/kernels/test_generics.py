"""Generic kernels: parameters typed ``typing.Any``, ``array(dtype=Any)`` or Warp's type variables
(``xsim.Float``, ``xsim.Int``, ``xsim.Scalar``) are bound to the launch arguments' types; each
binding is compiled once and cached. Numbers are checked with numpy, one gradient with float64
finite differences of the same formula."""

from typing import Any

import numpy as np
import pytest

import xsim


@xsim.func
def doubled(a: xsim.array(dtype=Any), i: int):
    return a[i] + a[i]


@xsim.kernel
def scale_doubled(x: xsim.array(dtype=Any), s: Any, y: xsim.array(dtype=Any)):
    i = xsim.tid()
    y[i] = doubled(x, i) * s


@xsim.kernel
def square_float(x: xsim.array(dtype=xsim.Float), y: xsim.array(dtype=xsim.Float)):
    i = xsim.tid()
    y[i] = x[i] * x[i]


@xsim.kernel
def add_rows(x: xsim.array2d[Any], k: xsim.Int, y: xsim.array2d[Any]):
    i, j = xsim.tid()
    acc = x[i, j]
    for _ in range(k):
        acc += x[i, j]
    y[i, j] = acc


X = np.arange(4.0)


@pytest.mark.parametrize("dtype,s", [(xsim.float32, 1.5), (xsim.float64, xsim.float64(0.25)),
                                     (xsim.int32, 3), (xsim.float16, xsim.float16(2.0))])
def test_any_parameters_bind_to_the_argument_types(dtype, s):
    x = xsim.array(X, dtype=dtype)
    y = xsim.zeros_like(x)
    xsim.launch(scale_doubled, 4, inputs=[x, s], outputs=[y])
    assert y.numpy().dtype == dtype._np
    np.testing.assert_array_equal(y.numpy(), (2 * X * float(s)).astype(dtype._np))


def test_a_generic_kernel_takes_vector_arrays():
    v = np.arange(12.0).reshape(4, 3)
    x = xsim.array(v, dtype=xsim.vec3)
    y = xsim.zeros_like(x)
    xsim.launch(scale_doubled, 4, inputs=[x, xsim.float32(0.5)], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), v)


def test_each_binding_is_compiled_once_and_reused():
    x = xsim.array(X, dtype=xsim.float64)
    y = xsim.zeros_like(x)
    xsim.launch(scale_doubled, 4, inputs=[x, xsim.float64(1.0)], outputs=[y])
    before = dict(scale_doubled.specializations)
    xsim.launch(scale_doubled, 4, inputs=[x, xsim.float64(2.0)], outputs=[y])
    assert scale_doubled.specializations == before
    spec = scale_doubled.specialize([x, xsim.float64(2.0), y])
    assert spec is before[(xsim.array(dtype=xsim.float64), xsim.float64, xsim.array(dtype=xsim.float64))]
    np.testing.assert_array_equal(y.numpy(), 4 * X)


def test_type_variables_bind_within_their_constraints():
    x = xsim.array([1.0, -2.0], dtype=xsim.float64)
    y = xsim.zeros_like(x)
    xsim.launch(square_float, 2, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [1.0, 4.0])
    xi = xsim.array([1, 2], dtype=int)
    msg = r"kernel 'square_float' parameter 'x': int32 is not one of the types Float stands for \(float16, "
    with pytest.raises(TypeError, match=msg + r"bfloat16, float32, float64\)"):
        xsim.launch(square_float, 2, inputs=[xi], outputs=[xsim.zeros_like(xi)])


def test_subscripted_generic_arrays_and_int_type_variable():
    x = np.arange(6.0).reshape(2, 3)
    y = xsim.zeros((2, 3), dtype=xsim.float64)
    xsim.launch(add_rows, (2, 3), inputs=[xsim.array(x, dtype=xsim.float64), 2], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), 3 * x)


def test_a_generic_argument_of_unknown_type_is_refused():
    x = xsim.array(X, dtype=xsim.float32)
    msg = r"parameter 's': cannot tell the type of the generic \(Any\) argument 'a'"
    with pytest.raises(TypeError, match=msg):
        xsim.launch(scale_doubled, 4, inputs=[x, "a"], outputs=[xsim.zeros_like(x)])


def test_gradient_through_a_generic_kernel_matches_finite_differences():
    x0 = np.array([0.5, -1.5, 2.0, 3.0])
    x = xsim.array(x0, dtype=xsim.float64, requires_grad=True)
    y = xsim.zeros(4, dtype=xsim.float64, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(square_float, 4, inputs=[x], outputs=[y])
    w = np.array([1.0, -2.0, 0.5, 3.0])
    tape.backward(grads={y: w})

    def loss(v):
        return float(np.sum(w * v * v))
    eps = 1e-6
    fd = np.array([(loss(x0 + eps * e) - loss(x0 - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-8)


@xsim.kernel
def axpy(a: Any, x: xsim.array(dtype=Any), y: xsim.array(dtype=Any)):
    i = xsim.tid()
    y[i] = a * x[i] + y[i]


@xsim.overload
def axpy(a: xsim.float64, x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64)):  # noqa: F811
    ...


AXPY_F32 = xsim.overload(axpy, [float, xsim.array(dtype=float), xsim.array(dtype=float)])
AXPY_I32 = xsim.overload(axpy, {"a": int, "x": xsim.array(dtype=int), "y": xsim.array(dtype=int)})


def test_overloads_declared_up_front_are_the_launch_specialisations():
    assert isinstance(axpy, xsim.Kernel) and axpy.generic and len(axpy.specializations) == 3
    assert AXPY_F32 is axpy.specialize([1.0, xsim.zeros(1, dtype=float), xsim.zeros(1, dtype=float)])
    x = xsim.array([1, 2, 3], dtype=int)
    y = xsim.array([10, 20, 30], dtype=int)
    xsim.launch(AXPY_I32, 3, inputs=[2, x, y])
    np.testing.assert_array_equal(y.numpy(), [12, 24, 36])
    xd = xsim.array([0.5, 1.5], dtype=xsim.float64)
    yd = xsim.zeros(2, dtype=xsim.float64)
    xsim.launch(axpy, 2, inputs=[xsim.float64(4.0), xd, yd])
    np.testing.assert_array_equal(yd.numpy(), [2.0, 6.0])
    assert len(axpy.specializations) == 3


@xsim.kernel
def negate_any(x: xsim.array(dtype=Any), y: xsim.array(dtype=Any)):
    i = xsim.tid()
    y[i] = -x[i]


def negate_any(x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64)) -> None:  # noqa: F811
    ...


def test_a_stub_that_replaced_its_kernels_name_still_declares_its_overload_and_may_not_return_values():
    stub = negate_any
    kernel = xsim.overload(stub)  # called later, not as a decorator: the module's name is the stub now
    assert isinstance(kernel, xsim.Kernel) and kernel.key == "negate_any"
    x = xsim.array(np.array([1.5, -2.0]), dtype=xsim.float64)
    y = xsim.zeros(2, dtype=xsim.float64)
    xsim.launch(kernel, 2, inputs=[x, y])
    assert y.numpy().tolist() == [-1.5, 2.0]

    def returning(x: xsim.array(dtype=float), y: xsim.array(dtype=float)) -> float:
        ...
    returning.__name__, returning.__qualname__ = stub.__name__, stub.__qualname__
    with pytest.raises(TypeError, match="Return annotations are not allowed on @wp.overload stubs .*'negate_any' "
                                        "returns nothing"):
        xsim.overload(returning)


def test_overloads_is_warps_name_for_the_specialisations():
    assert axpy.overloads is axpy.specializations and AXPY_F32 in axpy.overloads.values()


def test_a_stub_for_one_function_made_into_kernels_under_two_names_is_ambiguous():
    def twice_named(x: Any):
        return

    first = xsim.kernel(name="twice_named_a")(twice_named)
    second = xsim.kernel(name="twice_named_b")(twice_named)
    with pytest.raises(RuntimeError, match=r"Ambiguous kernel lookup for the @overload stub .*twice_named': the "
                                           r"function was made into the kernels \['twice_named_a', 'twice_named_b'\]"):
        @xsim.overload
        def twice_named(x: float): ...
    assert xsim.overload(first, [float]) in first.overloads.values() and not second.overloads


def test_bad_overloads_are_refused_naming_the_parameter():
    msg = r"overload of kernel 'axpy' parameter 'x': array\(dtype=float32, ndim=2\) does not fit "
    with pytest.raises(TypeError, match=msg + r"array\(dtype=Any, ndim=1\)"):
        xsim.overload(axpy, [float, xsim.array2d(dtype=float), xsim.array(dtype=float)])
    with pytest.raises(RuntimeError, match="kernel 'axpy' has no parameter 'b'"):
        xsim.overload(axpy, {"b": float})
    with pytest.raises(RuntimeError, match="kernel 'square_float_f64' is not generic"):
        xsim.overload(SQUARE_F64, [xsim.array(dtype=xsim.float64)] * 2)


def _square_f64(x: xsim.array(dtype=xsim.float64), y: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    y[i] = x[i] * x[i]


SQUARE_F64 = xsim.Kernel(_square_f64, key="square_float_f64", module="unique")


def test_kernel_class_with_key_and_a_unique_module():
    assert SQUARE_F64.key == "square_float_f64" and SQUARE_F64.module is not scale_doubled.module
    assert SQUARE_F64.module.kernels == [SQUARE_F64]
    x = xsim.array([3.0, -1.0], dtype=xsim.float64)
    y = xsim.zeros_like(x)
    xsim.launch(SQUARE_F64, 2, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), [9.0, 1.0])


@xsim.kernel
def copy_any(src: Any, dst: Any):
    i = xsim.tid()
    dst[i] = src[i]


def test_a_plain_any_parameter_also_takes_arrays():
    src = xsim.array([[1.0, 2.0], [3.0, 4.0]], dtype=xsim.vec2d)
    dst = xsim.zeros(2, dtype=xsim.vec2d)
    xsim.launch(copy_any, 2, inputs=[src, dst])
    np.testing.assert_array_equal(dst.numpy(), [[1.0, 2.0], [3.0, 4.0]])
    spec = xsim.overload(copy_any, [xsim.array(dtype=int), xsim.array(dtype=int)])
    assert spec.params == [("src", xsim.array(dtype=int)), ("dst", xsim.array(dtype=int))]


def test_named_modules_compile_their_kernels_together():
    m = xsim.get_module("xsim_test_named_module")
    assert xsim.get_module("xsim_test_named_module") is m
    k = xsim.Kernel(_square_f64, module=m)
    assert k.module is m and m.kernels == [k]


@xsim.kernel
def shift_vectors(x: xsim.array(dtype=xsim.types.vector(length=Any, dtype=xsim.Float)),
                  d: xsim.types.vector(length=Any, dtype=xsim.Float),
                  y: xsim.array(dtype=xsim.types.vector(length=Any, dtype=xsim.Float))):
    i = xsim.tid()
    y[i] = x[i] + d


@xsim.kernel
def transpose_any(m: xsim.types.matrix(shape=(Any, Any), dtype=Any), out: xsim.array(dtype=Any)):
    out[0] = xsim.transpose(m)


def test_generic_vector_and_matrix_types_bind_length_shape_and_scalar():
    for vec in (xsim.vec2d, xsim.vec4):
        n = vec._length
        x = xsim.array(np.arange(3.0 * n).reshape(3, n), dtype=vec)
        y = xsim.zeros_like(x)
        d = vec(*range(1, n + 1))
        xsim.launch(shift_vectors, 3, inputs=[x, d], outputs=[y])
        np.testing.assert_array_equal(y.numpy(), np.arange(3.0 * n).reshape(3, n) + np.arange(1, n + 1))
    xi = xsim.zeros(1, dtype=xsim.vec2i)
    msg = r"parameter 'x': vec2i does not fit vector\(length=Any, dtype=Float\)"
    with pytest.raises(TypeError, match=msg):
        xsim.launch(shift_vectors, 1, inputs=[xi, xsim.vec2i(1, 1)], outputs=[xi])
    m = xsim.types.matrix((2, 3), xsim.float64)(np.arange(6.0))
    out = xsim.zeros(1, dtype=xsim.types.matrix((3, 2), xsim.float64))
    xsim.launch(transpose_any, 1, inputs=[m, out])
    np.testing.assert_array_equal(out.numpy()[0], np.arange(6.0).reshape(2, 3).T)


@xsim.kernel
def typed_literals(x: xsim.array(dtype=Any), v: xsim.types.vector(length=3, dtype=Any),
                   y: xsim.array(dtype=Any)):
    i = xsim.tid()
    y[i] = x[i] * type(x[i])(2) + x.dtype(1) + v[0] * v.dtype(0)


def test_type_and_dtype_make_literals_of_a_generic_type():
    for dtype, vec in ((xsim.float64, xsim.vec3d), (xsim.int32, xsim.vec3i)):
        x = xsim.array([1, 2, 3], dtype=dtype)
        y = xsim.zeros_like(x)
        xsim.launch(typed_literals, 3, inputs=[x, vec(5, 5, 5)], outputs=[y])
        assert y.numpy().dtype == dtype._np
        np.testing.assert_array_equal(y.numpy(), [3, 5, 7])


@xsim.kernel
def type_attributes(a: Any, v: xsim.array(dtype=Any), out: xsim.array(dtype=Any), vout: xsim.array(dtype=Any)):
    z = xsim.types.vector(length=3, dtype=type(a))  # a zero vector of a's type
    m = xsim.identity(n=z.length, dtype=z.dtype) * a  # 3 x 3
    out[0] = m[0, 0] + m[1, 1] + m[2, 2] + type(a)(xsim.types.matrix(shape=(2, 3), dtype=type(a)).length)
    vout[0] = type(v).dtype(v[0]) * v.dtype.dtype(2.0)


@pytest.mark.parametrize("scalar, vec", [(xsim.float32, xsim.vec2), (xsim.float64, xsim.vec2d)])
def test_dtype_and_length_of_vector_types_in_generic_kernels(scalar, vec):
    out = xsim.zeros(1, dtype=scalar)
    v = xsim.array([[1.5, -2.0]], dtype=vec)
    vout = xsim.zeros(1, dtype=vec)
    xsim.launch(type_attributes, 1, inputs=[scalar(1.25), v, out, vout])
    assert out.numpy().tolist() == [3 * 1.25 + 6]
    assert vout.numpy().tolist() == [[3.0, -4.0]]


@xsim.struct
class Weighted:
    """A generic struct: its Float is bound by the arrays a value holds."""
    ids: xsim.array(dtype=int)
    w: xsim.array(dtype=xsim.Float)
    p: xsim.array(dtype=xsim.types.vector(3, xsim.Float))
    scale: xsim.Float


@xsim.func
def weighted_point(s: Weighted, i: int):
    return s.w[i] * s.p[s.ids[i]] * s.scale


@xsim.kernel
def weighted_points(s: Weighted, out: xsim.array(dtype=xsim.types.vector(3, xsim.Float))):
    i = xsim.tid()
    out[i] = weighted_point(s, i)


def _weighted(dtype, w, p, scale=0.5):
    v3 = xsim.types.vector(3, dtype)
    return Weighted(w=xsim.array(w, dtype=dtype, requires_grad=True), p=xsim.array(p, dtype=v3, requires_grad=True),
                    scale=scale, ids=xsim.array(np.array([1, 0, 1], np.int32), dtype=int))


@pytest.mark.parametrize("dtype", [xsim.float32, xsim.float64])
def test_a_generic_struct_binds_its_float_from_its_arrays_and_launches_in_that_precision(dtype):
    w, p = np.array([1.0, 2.0, -3.0]), np.arange(6.0).reshape(2, 3)
    s = _weighted(dtype, w, p)
    assert isinstance(s, Weighted) and type(s)._fields["scale"] is dtype
    assert list(type(s)._fields) == ["ids", "w", "p", "scale"]  # the declared order
    assert type(s) is type(_weighted(dtype, w, p))  # one struct per binding
    out = xsim.zeros(3, dtype=xsim.types.vector(3, dtype))
    for _ in range(2):
        xsim.launch(weighted_points, 3, inputs=[s], outputs=[out])
    np.testing.assert_allclose(out.numpy(), w[:, None] * p[[1, 0, 1]] * 0.5, rtol=1e-6)
    assert Weighted.specialize({xsim.Float: dtype}) is type(s)


def test_gradient_through_a_generic_struct_matches_finite_differences():
    w0, p0 = np.array([1.0, 2.0, -3.0]), np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    s = _weighted(xsim.float64, w0, p0, scale=1.25)
    out = xsim.zeros(3, dtype=xsim.vec3d, requires_grad=True)
    up = np.array([[1.0, -2.0, 0.5], [3.0, 1.0, -1.0], [0.25, 2.0, 1.5]])
    with xsim.Tape() as tape:
        xsim.launch(weighted_points, 3, inputs=[s], outputs=[out])
    tape.backward(grads={out: xsim.array(up, dtype=xsim.vec3d)})

    def loss(w, p):
        return float(np.sum(up * w[:, None] * p[[1, 0, 1]] * 1.25))
    eps = 1e-6
    fd_w = [(loss(w0 + eps * e, p0) - loss(w0 - eps * e, p0)) / (2 * eps) for e in np.eye(3)]
    fd_p = [(loss(w0, p0 + eps * e.reshape(2, 3)) - loss(w0, p0 - eps * e.reshape(2, 3))) / (2 * eps)
            for e in np.eye(6)]
    np.testing.assert_allclose(s.w.grad.numpy(), fd_w, rtol=1e-8)
    np.testing.assert_allclose(s.p.grad.numpy().ravel(), fd_p, rtol=1e-8)


def test_generic_struct_fields_that_disagree_or_bind_nothing_are_refused_naming_the_field():
    f32, v3d = xsim.zeros(2, dtype=xsim.float32), xsim.zeros(2, dtype=xsim.vec3d)
    with pytest.raises(TypeError, match="struct Weighted field 'p': its float64 makes Float float64, but field 'w' "
                                        "made it float32"):
        Weighted(w=f32, p=v3d)
    with pytest.raises(TypeError, match="struct Weighted field 'w': nothing binds its type Float"):
        Weighted(scale=1.0)
    with pytest.raises(TypeError, match="struct Weighted field 'w': int32 is not one of the types Float stands for"):
        Weighted(w=xsim.zeros(2, dtype=int))
    s = Weighted(w=f32)
    with pytest.raises(TypeError, match="Struct field 'p' expects dtype vec3f, got vec3d"):
        s.p = v3d
    with pytest.raises(TypeError, match="kernel 'weighted_points' parameter 's': expected a struct Weighted, got int"):
        xsim.launch(weighted_points, 1, inputs=[3], outputs=[xsim.zeros(1, dtype=xsim.vec3)])


@xsim.kernel
def descend(g: xsim.array(dtype=Any), x: xsim.array(dtype=Any)):
    i = xsim.tid()
    x[i] = x[i] - g[i]


def test_an_overload_may_give_array_instances_for_their_types_as_warps_optimizers_do():
    g = xsim.array(np.ones((3, 3), np.float32), dtype=xsim.vec3)
    x = xsim.zeros(3, dtype=xsim.vec3)
    by_example = xsim.overload(descend, {"g": g, "x": x})
    assert by_example is xsim.overload(descend, [xsim.array(dtype=xsim.vec3), xsim.array(dtype=xsim.vec3)])
    xsim.launch(by_example, 3, inputs=[g, x])
    np.testing.assert_array_equal(x.numpy(), -np.ones((3, 3)))
    gd = xsim.array(np.full(2, 0.5), dtype=xsim.float64)
    in_a_list = xsim.overload(descend, [gd, xsim.zeros(2, dtype=xsim.float64)])
    assert in_a_list.params == [("g", xsim.array(dtype=xsim.float64)), ("x", xsim.array(dtype=xsim.float64))]
    with pytest.raises(TypeError, match="parameter 'g': array\\(dtype=float64, ndim=2\\) does not fit"):
        xsim.overload(descend, [xsim.zeros((2, 2), dtype=xsim.float64), gd])
