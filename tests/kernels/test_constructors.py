"""Constructors as Warp writes them: star-unpacking into constructors and funcs (``vec4(*q)``,
``vec3(*t, 1.0)``, ``f(*a[0:3])``), positional and keyword struct constructors (nested, with array
fields), and fill / keyword / copy forms of vector and matrix types. Forward against numpy, gradients
against float64 finite differences, refusals naming the line. One module per group of kernels."""

import numpy as np
import pytest
from refusals import assert_refused

import xsim
from xsim.autodiff.gradcheck import gradcheck

F = xsim.float64
N = 4
MODULE = "xsim_tests_constructors"
RNG = np.random.default_rng(17)


@xsim.struct
class Spring:
    rest: F
    axis: xsim.vec3d


@xsim.struct
class Link:
    spring: Spring
    weight: F
    samples: xsim.array(dtype=F)


@xsim.struct
class Chain:
    link: Link
    scale: F


@xsim.func
def blend(a: F, b: F, c: F):
    return a + b * 10.0 + c * 100.0


@xsim.kernel(module=MODULE)
def star_unpacking(q: xsim.array(dtype=xsim.quatd), a: xsim.array(dtype=F), m: xsim.array(dtype=xsim.mat22d),
                   v4: xsim.array(dtype=xsim.vec4d), v3: xsim.array(dtype=xsim.vec3d, ndim=2),
                   s: xsim.array(dtype=F), mo: xsim.array(dtype=xsim.mat22d)):
    i = xsim.tid()
    x = q[i]
    v4[i] = xsim.vec4d(*x)                          # all components of a quat
    pair = (a[i], a[i] * 2.0)
    v3[i, 0] = xsim.vec3d(*pair, 1.0)               # a tuple, then one more component
    v3[i, 1] = xsim.vec3d(*x[1:])                   # a slice
    v3[i, 2] = xsim.vec3d(*m[i][0], a[i])           # a matrix row
    s[i] = blend(*a[0:3]) * a[i] + blend(*x[:3])    # a 1-d array slice and a quat slice into a func
    mo[i] = xsim.matrix_from_rows(*m[i]) * a[i]     # *matrix gives its rows


@xsim.kernel(module=MODULE)
def struct_constructors(a: xsim.array(dtype=F), v: xsim.array(dtype=xsim.vec3d), samples: xsim.array(dtype=F),
                        out: xsim.array(dtype=F, ndim=2)):
    i = xsim.tid()
    positional = Link(Spring(a[i], v[i]), a[i] * 2.0, samples)
    keywords = Link(weight=3.0, spring=Spring(axis=v[i] * a[i], rest=1.5), samples=samples)
    mixed = Spring(a[i] + 1.0, axis=v[i])
    partial = Spring(rest=a[i])                     # fields not given are zero
    out[i, 0] = positional.spring.rest * positional.weight + positional.samples[i]
    out[i, 1] = xsim.dot(positional.spring.axis, keywords.spring.axis) + keywords.weight * keywords.spring.rest
    out[i, 2] = mixed.rest * mixed.axis[2] + partial.rest + partial.axis[0] + keywords.samples[(i + 1) % 4]
    chain = Chain(positional, 2.0)                  # an array reached through two local structs
    out[i, 3] = chain.link.samples[i] * chain.scale * chain.link.spring.rest


@xsim.kernel(module=MODULE)
def fill_and_keyword_forms(a: xsim.array(dtype=F), v: xsim.array(dtype=xsim.vec3), out: xsim.array(dtype=F, ndim=2)):
    i = xsim.tid()
    s = a[i]
    filled = xsim.vec3d(s)
    mfill = xsim.mat22d(s * 2.0)
    zeros = xsim.types.vector(length=3, dtype=F)
    ones = xsim.types.vector(1.0, length=3, dtype=F)
    copied = xsim.types.vector(v[i], dtype=F)       # vec3 (float32) -> vec3d
    same = xsim.types.vector(filled)
    m = xsim.types.matrix(s, 2.0, 3.0, s * s, shape=(2, 2))
    mz = xsim.types.matrix(shape=(2, 3), dtype=F)
    mcopy = xsim.types.matrix(m)
    mf = xsim.types.matrix(s, shape=(3, 2))
    q = xsim.quatd(filled * 0.5, s)                 # quat(ijk, real)
    out[i, 0] = filled[0] + filled[1] * filled[2]
    out[i, 1] = mfill[0, 0] + mfill[1, 0] * mfill[1, 1]
    out[i, 2] = zeros[1] + ones[0] * ones[2] + same[1]
    out[i, 3] = copied[0] * s + copied[2]
    out[i, 4] = xsim.determinant(m) + mz[1, 2] + mcopy[1, 1] + mf[2, 1] * mf[0, 0]
    out[i, 5] = q[0] * q[3] + q[2]


def test_star_unpacking_matches_numpy():
    q, a, m = RNG.uniform(-1, 1, (N, 4)), RNG.uniform(-1, 1, N), RNG.uniform(-1, 1, (N, 2, 2))
    v4, v3, s, mo = (xsim.zeros(N, dtype=xsim.vec4d), xsim.zeros((N, 3), dtype=xsim.vec3d), xsim.zeros(N, dtype=F),
                     xsim.zeros(N, dtype=xsim.mat22d))
    xsim.launch(star_unpacking, N, inputs=[xsim.array(q, dtype=xsim.quatd), xsim.array(a, dtype=F),
                                           xsim.array(m, dtype=xsim.mat22d), v4, v3, s, mo])
    np.testing.assert_allclose(v4.numpy(), q)
    expected_v3 = np.stack([np.stack([a, 2 * a, np.ones(N)], 1), q[:, 1:],
                            np.concatenate([m[:, 0], a[:, None]], 1)], 1)
    np.testing.assert_allclose(v3.numpy(), expected_v3, rtol=1e-12)
    blend_np = lambda x, y, z: x + 10 * y + 100 * z
    np.testing.assert_allclose(s.numpy(), blend_np(*a[:3]) * a + blend_np(q[:, 0], q[:, 1], q[:, 2]), rtol=1e-12)
    np.testing.assert_allclose(mo.numpy(), m * a[:, None, None], rtol=1e-12)


def struct_args(requires_grad=False):
    a, v, samples = RNG.uniform(0.5, 1.5, N), RNG.uniform(-1, 1, (N, 3)), RNG.uniform(-1, 1, N)
    return (a, v, samples), [xsim.array(a, dtype=F, requires_grad=requires_grad),
                             xsim.array(v, dtype=xsim.vec3d, requires_grad=requires_grad),
                             xsim.array(samples, dtype=F, requires_grad=requires_grad),
                             xsim.zeros((N, 4), dtype=F, requires_grad=requires_grad)]


def test_struct_constructors_positional_keyword_and_mixed_match_numpy():
    (a, v, samples), args = struct_args()
    xsim.launch(struct_constructors, N, inputs=args)
    out = args[-1].numpy()
    np.testing.assert_allclose(out[:, 0], a * 2 * a + samples, rtol=1e-12)
    np.testing.assert_allclose(out[:, 1], (v * v * a[:, None]).sum(1) + 3.0 * 1.5, rtol=1e-12)
    np.testing.assert_allclose(out[:, 2], (a + 1) * v[:, 2] + a + np.roll(samples, -1), rtol=1e-12)
    np.testing.assert_allclose(out[:, 3], samples * 2.0 * a, rtol=1e-12)


def fill_args(requires_grad=False):
    a, v = RNG.uniform(0.5, 1.5, N), RNG.uniform(-1, 1, (N, 3)).astype(np.float32)
    return (a, v), [xsim.array(a, dtype=F, requires_grad=requires_grad), xsim.array(v, dtype=xsim.vec3),
                    xsim.zeros((N, 6), dtype=F, requires_grad=requires_grad)]


def test_fill_keyword_and_copy_constructors_match_numpy():
    (a, v), args = fill_args()
    xsim.launch(fill_and_keyword_forms, N, inputs=args)
    out = args[-1].numpy()
    v = v.astype(np.float64)
    np.testing.assert_allclose(out[:, 0], a + a * a, rtol=1e-12)
    np.testing.assert_allclose(out[:, 1], 2 * a + 4 * a * a, rtol=1e-12)
    np.testing.assert_allclose(out[:, 2], 1.0 + a, rtol=1e-12)
    np.testing.assert_allclose(out[:, 3], v[:, 0] * a + v[:, 2], rtol=1e-12)
    np.testing.assert_allclose(out[:, 4], (a * a * a - 6.0) + a * a + a * a, rtol=1e-12)
    np.testing.assert_allclose(out[:, 5], 0.5 * a * a + 0.5 * a, rtol=1e-12)


@pytest.mark.parametrize("case", ["star", "struct", "fill"])
def test_gradients_through_constructors_match_finite_differences(case):
    if case == "star":
        args = [xsim.array(RNG.uniform(-1, 1, (N, 4)), dtype=xsim.quatd, requires_grad=True),
                xsim.array(RNG.uniform(-1, 1, N), dtype=F, requires_grad=True),
                xsim.array(RNG.uniform(-1, 1, (N, 2, 2)), dtype=xsim.mat22d, requires_grad=True),
                xsim.zeros(N, dtype=xsim.vec4d, requires_grad=True), xsim.zeros((N, 3), dtype=xsim.vec3d, requires_grad=True),
                xsim.zeros(N, dtype=F, requires_grad=True), xsim.zeros(N, dtype=xsim.mat22d, requires_grad=True)]
        kernel = star_unpacking
    elif case == "struct":
        kernel, args = struct_constructors, struct_args(requires_grad=True)[1]
    else:
        kernel, args = fill_and_keyword_forms, fill_args(requires_grad=True)[1]  # v is float32: not checked
    report = gradcheck(kernel, args, dim=N, wrt=None if case != "fill" else ["a"], eps=1e-6, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


BAD = "xsim_tests_constructors_refused"


@xsim.kernel(module=BAD)
def struct_with_too_many_values(x: xsim.array(dtype=F)):
    s = Spring(1.0, xsim.vec3d(), 2.0)  # E:too_many
    x[0] = s.rest


@xsim.kernel(module=BAD)
def struct_field_twice(x: xsim.array(dtype=F)):
    s = Spring(1.0, rest=2.0)  # E:twice
    x[0] = s.rest


@xsim.kernel(module=BAD)
def star_of_a_scalar(x: xsim.array(dtype=F)):
    x[0] = blend(*x[0])  # E:star_scalar


@xsim.kernel(module=BAD)
def star_of_open_array_slice(x: xsim.array(dtype=F)):
    x[0] = blend(*x[0:])  # E:open_slice


@xsim.kernel(module=BAD)
def matrix_fill_without_shape(x: xsim.array(dtype=F)):
    x[0] = xsim.types.matrix(x[1])[0, 0]  # E:no_shape


@xsim.kernel(module=BAD)
def star_outside_a_call(x: xsim.array(dtype=xsim.vec2d)):
    a, *b = x[0]  # E:outside
    x[1] = xsim.vec2d(a, b[0])


@xsim.kernel(module=BAD)
def vector_copy_of_another_length(x: xsim.array(dtype=F)):
    x[0] = xsim.vec3d(xsim.vec2d(1.0, 2.0))[0]  # E:copy_length


@xsim.kernel(module=BAD)
def vector_with_too_few_values(x: xsim.array(dtype=F)):
    x[0] = xsim.types.vector(x[0], x[1], length=5)[0]  # E:count


@xsim.kernel(module=BAD)
def zero_vector_without_length(x: xsim.array(dtype=F)):
    v = xsim.types.vector()  # E:no_length
    x[0] = v[0]


@xsim.kernel(module=BAD)
def vector_of_mixed_literals(x: xsim.array(dtype=F)):
    x[0] = float(xsim.types.vector(1.0, 2)[0])  # E:mixed


@xsim.kernel(module=BAD)
def vec2_of_float64_values(x: xsim.array(dtype=F)):
    x[0] = float(xsim.vec2(x[0], x[1])[0])  # E:dtype


@xsim.kernel(module=BAD)
def quaternion_with_a_length(x: xsim.array(dtype=F)):
    x[0] = xsim.types.quaternion(x[0], x[1], x[2], x[0], length=4)[0]  # E:quat_kw


@xsim.kernel(module=BAD)
def axis_angle_into_one_output(x: xsim.array(dtype=F)):
    axis = xsim.vec3d()
    xsim.quat_to_axis_angle(xsim.quatd(x[0], x[1], x[2], x[0]), axis)  # E:one_output
    x[0] = axis[0]


@xsim.kernel(module=BAD)
def axis_angle_into_an_array_element(x: xsim.array(dtype=F)):
    axis = xsim.vec3d()
    xsim.quat_to_axis_angle(xsim.quatd(x[0], x[1], x[2], x[0]), axis, x[1])  # E:element
    x[0] = axis[0]


@xsim.kernel(module=BAD)
def transform_of_two_values(x: xsim.array(dtype=F)):
    x[0] = xsim.transformd(x[0], x[1])[0]  # E:two_values


@xsim.kernel(module=BAD)
def transform_copy_of_another_dtype(x: xsim.array(dtype=F)):
    x[0] = float(xsim.transformd(xsim.transform(1.0))[0])  # E:copy_dtype


@xsim.kernel(module=BAD)
def transform_with_position_and_p(x: xsim.array(dtype=F)):
    x[0] = xsim.transformd(xsim.vec3d(), p=xsim.vec3d())[0]  # E:twice_p


def test_refused_vector_constructors_end_with_warps_wording():
    # Warp's tests match these phrases at the end of the message (pattern$): the message comes after the
    # file:line and the source line
    x = xsim.zeros(3, dtype=F)
    copy_phrase = ("cannot build vec3d from vec2d: incompatible vector of length 3 given when copy constructing a "
                   "vector of length 2")
    cases = [(vector_copy_of_another_length, "copy_length", copy_phrase),
             (transform_of_two_values, "two_values",
              "incompatible number of values given (2) when constructing a transform; expected 0, 1, or 7"),
             (transform_copy_of_another_dtype, "copy_dtype",
              ("copy constructing a transform requires matching source and target dtypes, got `float32` and "
               "`float64`")),
             (transform_with_position_and_p, "twice_p", "multiple values for argument 'p'"),
             (vector_with_too_few_values, "count",
              "incompatible number of values given (2) when constructing a vector of length 5"),
             (zero_vector_without_length, "no_length",
              "the `length` argument must be specified when zero-initializing a vector"),
             (vector_of_mixed_literals, "mixed",
              "all values given when constructing a vector must have the same type"),
             (vec2_of_float64_values, "dtype",
              "all values used to initialize this vector are expected to be of the type `float32`")]
    for kernel, marker, phrase in cases:
        assert_refused(kernel, [x], phrase, marker)
        with pytest.raises(xsim.CompileError) as info:
            xsim.launch(kernel, 1, inputs=[x])
        assert str(info.value).endswith(phrase) and isinstance(info.value, RuntimeError)


def test_refused_constructors_name_the_line():
    x = xsim.zeros(3, dtype=F)
    assert_refused(struct_with_too_many_values, [x], "struct Spring has 2 field(s), got 3 values", "too_many")
    assert_refused(struct_field_twice, [x], "struct field 'rest' is given twice", "twice")
    assert_refused(star_of_a_scalar, [x], "Starred expressions are only supported for", "star_scalar")
    assert_refused(star_of_open_array_slice, [x], "*array[i:j] requires explicit upper bound", "open_slice")
    assert_refused(matrix_fill_without_shape, [x], "matrix() needs shape=(rows, cols)", "no_shape")
    assert_refused(quaternion_with_a_length, [x], "quaternion() takes only the keyword dtype=", "quat_kw")
    assert_refused(axis_angle_into_one_output, [x], "quat_to_axis_angle() with output arguments takes 1 input(s) "
                   "and 2 output variable(s), got 2 arguments", "one_output")
    assert_refused(axis_angle_into_an_array_element, [x], "which must be a local variable name", "element")
    assert_refused(star_outside_a_call, [xsim.zeros(1, dtype=xsim.vec2d)], "star expressions are supported only as call arguments",
                   "outside")
