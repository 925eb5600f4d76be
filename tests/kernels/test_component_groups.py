"""Slices of vectors, quaternions and matrices (``v[:2]``, ``v[1:]``, ``v[::-2]``, ``m[1:, :2]``,
negative indices) and a transform's ``.p``/``.q``, read and written on locals and on array
elements, with Warp's semantics: forward against numpy, gradients against float64 finite
differences, and the refusals (wrong value type, runtime bounds, empty slices) naming the line."""

import numpy as np
import pytest
from refusals import assert_refused

import xsim
from xsim.autodiff.gradcheck import gradcheck

F = xsim.float64
N = 3
MODULE = "xsim_tests_component_groups"
RNG = np.random.default_rng(5)


@xsim.kernel(module=MODULE)
def slice_reads(v: xsim.array(dtype=xsim.vec4d), m: xsim.array(dtype=xsim.mat33d), q: xsim.array(dtype=xsim.quatd),
                vo: xsim.array(dtype=xsim.vec2d, ndim=2), v3o: xsim.array(dtype=xsim.vec3d, ndim=2),
                mo: xsim.array(dtype=xsim.mat22d), m23o: xsim.array(dtype=xsim.types.matrix((2, 3), F)),
                so: xsim.array(dtype=F, ndim=2)):
    i = xsim.tid()
    a = v[i]
    b = m[i]
    vo[i, 0] = a[:2]
    vo[i, 1] = a[::2]
    vo[i, 2] = a[-2:]
    vo[i, 3] = a[3:1:-1]
    vo[i, 4] = b[1, ::2]              # part of a row
    vo[i, 5] = v[i][1:3]              # a slice of an array element
    v3o[i, 0] = a[1:]
    v3o[i, 1] = b[:, 2]               # a column
    v3o[i, 2] = q[i][:3]
    v3o[i, 3] = b[-1]                 # the last row
    mo[i] = b[1:, :2]
    m23o[i] = b[:2]
    so[i, 0] = a[-1] * b[-1, -2]


@xsim.kernel(module=MODULE)
def slice_writes(v: xsim.array(dtype=xsim.vec4d), m: xsim.array(dtype=xsim.mat33d),
                 vo: xsim.array(dtype=xsim.vec4d), mo: xsim.array(dtype=xsim.mat33d),
                 elem: xsim.array(dtype=xsim.vec4d), elem_m: xsim.array(dtype=xsim.mat33d)):
    i = xsim.tid()
    a = v[i]
    w = a
    w[1:] = xsim.vec3d(a[0] * 2.0, a[1] * a[2], 3.0)
    w[:2] += a[2:]
    w[::-1] = w                        # reads the old w, then writes it reversed
    w[-1] -= a[0]
    vo[i] = w
    b = m[i]
    b[1:, :2] = xsim.mat22d(a[0], a[1], a[2], a[3])
    b[:, 2] = a[1:] * 2.0
    mo[i] = b
    elem[i][1:3] = a[:2] * a[3]        # a slice store into an array element
    elem[i][::3] += a[2:]              # atomic adds, one per component
    elem_m[i][0, 1:] = a[:2]
    elem_m[i][1:, 0] -= a[1:3]


@xsim.kernel(module=MODULE)
def transform_parts(t: xsim.array(dtype=xsim.transformd), s: xsim.array(dtype=F),
                    po: xsim.array(dtype=xsim.vec3d), qo: xsim.array(dtype=xsim.quatd),
                    to: xsim.array(dtype=xsim.transformd), elem: xsim.array(dtype=xsim.transformd)):
    i = xsim.tid()
    x = t[i]
    po[i] = x.p * s[i] + t[i].p
    qo[i] = x.q * s[i]
    y = x
    y.p = x.p * 2.0 + xsim.vec3d(s[i], 0.0, 1.0)
    y.q = xsim.quatd(x.q[1], x.q[0], x.q[3], x.q[2] * s[i])
    to[i] = y
    elem[i].p = x.p * s[i]
    elem[i].q += x.q


def numpy_reads(v, m, q):
    vo = np.stack([v[:, :2], v[:, ::2], v[:, -2:], v[:, 3:1:-1], m[:, 1, ::2], v[:, 1:3]], 1)
    v3o = np.stack([v[:, 1:], m[:, :, 2], q[:, :3], m[:, -1]], 1)
    return vo, v3o, m[:, 1:, :2], m[:, :2], (v[:, -1] * m[:, -1, -2])[:, None]


def read_args(requires_grad=False):
    v, m, q = RNG.uniform(-1, 1, (N, 4)), RNG.uniform(-1, 1, (N, 3, 3)), RNG.uniform(-1, 1, (N, 4))
    ins = [xsim.array(v, dtype=xsim.vec4d, requires_grad=requires_grad),
           xsim.array(m, dtype=xsim.mat33d, requires_grad=requires_grad),
           xsim.array(q, dtype=xsim.quatd, requires_grad=requires_grad)]
    outs = [xsim.zeros((N, 6), dtype=xsim.vec2d, requires_grad=requires_grad),
            xsim.zeros((N, 4), dtype=xsim.vec3d, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.mat22d, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.types.matrix((2, 3), F), requires_grad=requires_grad),
            xsim.zeros((N, 1), dtype=F, requires_grad=requires_grad)]
    return (v, m, q), ins + outs


def write_args(requires_grad=False):
    v, m = RNG.uniform(-1, 1, (N, 4)), RNG.uniform(-1, 1, (N, 3, 3))
    elem, elem_m = RNG.uniform(-1, 1, (N, 4)), RNG.uniform(-1, 1, (N, 3, 3))
    args = [xsim.array(v, dtype=xsim.vec4d, requires_grad=requires_grad),
            xsim.array(m, dtype=xsim.mat33d, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.vec4d, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.mat33d, requires_grad=requires_grad),
            xsim.array(elem, dtype=xsim.vec4d, requires_grad=requires_grad),
            xsim.array(elem_m, dtype=xsim.mat33d, requires_grad=requires_grad)]
    return (v, m, elem, elem_m), args


def transform_args(requires_grad=False):
    t, s, elem = RNG.uniform(-1, 1, (N, 7)), RNG.uniform(0.5, 2, N), RNG.uniform(-1, 1, (N, 7))
    args = [xsim.array(t, dtype=xsim.transformd, requires_grad=requires_grad),
            xsim.array(s, dtype=F, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.vec3d, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.quatd, requires_grad=requires_grad),
            xsim.zeros(N, dtype=xsim.transformd, requires_grad=requires_grad),
            xsim.array(elem, dtype=xsim.transformd, requires_grad=requires_grad)]
    return (t, s, elem), args


def test_slice_reads_match_numpy():
    (v, m, q), args = read_args()
    xsim.launch(slice_reads, N, inputs=args)
    for got, expected in zip(args[3:], numpy_reads(v, m, q)):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_slice_writes_on_locals_and_array_elements_match_numpy():
    (v, m, elem, elem_m), args = write_args()
    xsim.launch(slice_writes, N, inputs=args)
    w = v.copy()
    w[:, 1:] = np.stack([v[:, 0] * 2, v[:, 1] * v[:, 2], np.full(N, 3.0)], 1)
    w[:, :2] += v[:, 2:]
    w[:, ::-1] = w.copy()
    w[:, -1] -= v[:, 0]
    b = m.copy()
    b[:, 1:, :2] = v.reshape(N, 2, 2)
    b[:, :, 2] = v[:, 1:] * 2
    e, em = elem.copy(), elem_m.copy()
    e[:, 1:3] = v[:, :2] * v[:, 3:4]
    e[:, ::3] += v[:, 2:]
    em[:, 0, 1:] = v[:, :2]
    em[:, 1:, 0] -= v[:, 1:3]
    for got, expected in zip(args[2:], (w, b, e, em)):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_transform_p_and_q_read_and_written_match_numpy():
    (t, s, elem), args = transform_args()
    xsim.launch(transform_parts, N, inputs=args)
    p, q = t[:, :3], t[:, 3:]
    y = np.concatenate([p * 2 + np.stack([s, np.zeros(N), np.ones(N)], 1),
                        np.stack([q[:, 1], q[:, 0], q[:, 3], q[:, 2] * s], 1)], 1)
    e = elem.copy()
    e[:, :3] = p * s[:, None]
    e[:, 3:] += q
    for got, expected in zip(args[2:], (p * s[:, None] + p, q * s[:, None], y, e)):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("kernel, make", [(slice_reads, read_args), (slice_writes, write_args),
                                          (transform_parts, transform_args)],
                         ids=["slice_reads", "slice_writes", "transform_parts"])
def test_gradients_through_component_groups_match_finite_differences(kernel, make):
    _, args = make(requires_grad=True)
    report = gradcheck(kernel, args, dim=N, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


BAD = "xsim_tests_component_groups_refused"


@xsim.kernel(module=BAD)
def slice_of_wrong_length(x: xsim.array(dtype=xsim.vec4)):
    v = x[0]
    v[1:] = xsim.vec2(1.0, 2.0)  # E:wrong_length
    x[0] = v


@xsim.kernel(module=BAD)
def slice_with_runtime_bound(x: xsim.array(dtype=xsim.vec4), n: int):
    x[0] = xsim.vec4(x[0][:n][0])  # E:runtime_bound


@xsim.kernel(module=BAD)
def empty_slice(x: xsim.array(dtype=xsim.vec4)):
    x[0] = xsim.vec4(x[0][3:1][0])  # E:empty


@xsim.kernel(module=BAD)
def transform_p_of_wrong_type(x: xsim.array(dtype=xsim.transform)):
    x[0].p = xsim.vec3d(1.0, 2.0, 3.0)  # E:p_type


def test_refused_slices_name_the_line():
    x = xsim.zeros(1, dtype=xsim.vec4)
    assert_refused(slice_of_wrong_length, [x], "The length of the provided vector (2) isn't compatible with the given slice "
                   "(expected 3)", "wrong_length")
    assert_refused(slice_with_runtime_bound, [x, 2], "Slice component must be a compile-time constant", "runtime_bound")
    assert_refused(empty_slice, [x], "this slice of vec4f is empty", "empty")
    assert_refused(transform_p_of_wrong_type, [xsim.zeros(1, dtype=xsim.transform)],
                   "The provided vector is expected to be of length 3 with dtype float32", "p_type")
    with pytest.raises(xsim.CompileError) as info:  # Warp's wording ends the message: its tests match the end
        xsim.launch(transform_p_of_wrong_type, 1, inputs=[xsim.zeros(1, dtype=xsim.transform)])
    assert str(info.value).endswith("got vec3d: The provided vector is expected to be of length 3 with dtype float32.")
