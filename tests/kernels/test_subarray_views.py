"""Indexing an N-d array with fewer indices inside a kernel gives a view of the remaining
dimensions (Warp's semantics): read, written, accumulated into atomically, passed to funcs, with its
shape; a slice ``a[lo:hi:step]`` gives a strided view of some rows. Forward against numpy and gradients
against float64 finite differences. One module."""

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

F = xsim.float64
R, C, D = 4, 3, 2
RNG = np.random.default_rng(11)


@xsim.func
def weighted_sum(row: xsim.array(dtype=F), w: F):
    total = F(0.0)
    for j in range(row.shape[0]):
        total += row[j] * w * F(j + 1)
    return total


@xsim.func
def scale_into(dst: xsim.array(dtype=F), src: xsim.array(dtype=F), s: F):
    for j in range(len(src)):
        dst[j] = src[j] * s


@xsim.kernel(module="xsim_tests_subarray_views")
def rows(x: xsim.array(dtype=F, ndim=2), s: xsim.array(dtype=F), sums: xsim.array(dtype=F),
         scaled: xsim.array(dtype=F, ndim=2), acc: xsim.array(dtype=F, ndim=2)):
    i = xsim.tid()
    row = x[i]
    sums[i] = weighted_sum(row, s[i]) + row[0] * row[C - 1]
    scale_into(scaled[i], row, s[i])           # a view passed to a func that writes through it
    bucket = acc[i % 2]
    for j in range(row.shape[0]):
        xsim.atomic_add(bucket, j, row[j] * s[i])


@xsim.kernel(module="xsim_tests_subarray_views")
def planes(v: xsim.array(dtype=xsim.vec2d, ndim=3), out: xsim.array(dtype=F, ndim=3),
           lens: xsim.array(dtype=int, ndim=2)):
    i, j = xsim.tid()
    plane = v[i]                                # 3-d -> 2-d
    line = v[i, j]                              # 3-d -> 1-d
    for k in range(D):
        out[i][j][k] = plane[j, k][0] * line[k][1]   # chained indices read and write one element
    lens[i, j] = plane.shape[0] * 100 + plane.shape[1] * 10 + len(line)


@xsim.kernel(module="xsim_tests_subarray_views")
def sliced(x: xsim.array(dtype=xsim.vec3d), m: xsim.array(dtype=F, ndim=2), lo: int, hi: int, step: int,
           src: xsim.array(dtype=F), out: xsim.array(dtype=F), lens: xsim.array(dtype=int)):
    i = xsim.tid()
    view = x[lo:hi:step]
    lens[0] = view.shape[0] * 100 + m[1::2].shape[0] * 10 + m[::-1].shape[1]
    if i < view.shape[0]:
        x[lo:hi:step][i].x = src[i]                  # a component written through an inline slice
        x[lo:hi:step][i][1] += src[i] * src[i]       # and added to
        out[i] = view[i].z * src[i] + m[::-1][i % R, 0] + m[1::2][0][i % C]


SLICES = [(0, 4, 2), (3, -5, -2), (1, 100, 1), (-2, 0, -1), (-100, 100, 3), (2, 2, 1)]


def slice_args(lo, hi, step, grad=False):
    x = RNG.uniform(-1.0, 1.0, (R, 3))
    m = RNG.uniform(-1.0, 1.0, (R, C))
    src = RNG.uniform(-1.0, 1.0, R)
    return (x, m, src), [xsim.array(x, dtype=xsim.vec3d, requires_grad=grad), xsim.array(m, dtype=F, requires_grad=grad),
                         lo, hi, step, xsim.array(src, dtype=F, requires_grad=grad),
                         xsim.zeros(R, dtype=F, requires_grad=grad), xsim.zeros(1, dtype=int)]


@pytest.mark.parametrize("lo,hi,step", SLICES)
def test_array_slices_view_the_rows_python_would_take(lo, hi, step):
    (x, m, src), args = slice_args(lo, hi, step)
    xsim.launch(sliced, R, inputs=args)
    rows = np.arange(R)[lo:hi:step]
    k = len(rows)
    want = x.copy()
    want[rows, 0] = src[:k]
    want[rows, 1] += src[:k] ** 2
    np.testing.assert_allclose(args[0].numpy(), want, rtol=1e-15)
    i = np.arange(k)
    np.testing.assert_allclose(args[6].numpy()[:k], x[rows, 2] * src[:k] + m[::-1][i % R, 0] + m[1::2][0][i % C],
                               rtol=1e-12)
    assert args[7].numpy()[0] == k * 100 + len(m[1::2]) * 10 + C


@pytest.mark.parametrize("lo,hi,step", SLICES[:2])
def test_gradients_through_array_slices_match_finite_differences(lo, hi, step):
    _, args = slice_args(lo, hi, step, grad=True)
    report = gradcheck(sliced, args, dim=R, outputs=["x", "out"], wrt=["x", "m", "src"], atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def test_rows_read_written_accumulated_and_passed_to_funcs_match_numpy():
    x = RNG.uniform(-1.0, 1.0, (R, C))
    s = RNG.uniform(0.5, 2.0, R)
    sums, scaled, acc = xsim.zeros(R, dtype=F), xsim.zeros((R, C), dtype=F), xsim.zeros((2, C), dtype=F)
    xsim.launch(rows, R, inputs=[xsim.array(x, dtype=F), xsim.array(s, dtype=F), sums, scaled, acc])
    w = np.arange(1, C + 1)
    np.testing.assert_allclose(sums.numpy(), (x * w).sum(1) * s + x[:, 0] * x[:, C - 1], rtol=1e-12)
    np.testing.assert_allclose(scaled.numpy(), x * s[:, None], rtol=1e-12)
    expected_acc = np.stack([(x * s[:, None])[k::2].sum(0) for k in range(2)])
    np.testing.assert_allclose(acc.numpy(), expected_acc, rtol=1e-12)


def test_views_of_3d_arrays_have_the_remaining_shape_and_index_like_numpy():
    v = RNG.uniform(-1.0, 1.0, (R, C, D, 2))
    out, lens = xsim.zeros((R, C, D), dtype=F), xsim.zeros((R, C), dtype=int)
    xsim.launch(planes, (R, C), inputs=[xsim.array(v, dtype=xsim.vec2d), out, lens])
    np.testing.assert_allclose(out.numpy(), v[..., 0] * v[..., 1], rtol=1e-12)
    np.testing.assert_array_equal(lens.numpy(), np.full((R, C), C * 100 + D * 10 + D))


@pytest.mark.parametrize("case", ["rows", "planes"])
def test_gradients_through_views_match_finite_differences(case):
    if case == "rows":
        args = [xsim.array(RNG.uniform(-1.0, 1.0, (R, C)), dtype=F, requires_grad=True),
                xsim.array(RNG.uniform(0.5, 2.0, R), dtype=F, requires_grad=True),
                xsim.zeros(R, dtype=F, requires_grad=True), xsim.zeros((R, C), dtype=F, requires_grad=True),
                xsim.zeros((2, C), dtype=F, requires_grad=True)]
        report = gradcheck(rows, args, dim=R, atol=1e-7, rtol=1e-6)
    else:
        args = [xsim.array(RNG.uniform(-1.0, 1.0, (R, C, D, 2)), dtype=xsim.vec2d, requires_grad=True),
                xsim.zeros((R, C, D), dtype=F, requires_grad=True), xsim.zeros((R, C), dtype=int)]
        report = gradcheck(planes, args, dim=(R, C), outputs=["out"], atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def test_an_out_of_range_view_index_is_reported_in_debug_mode(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x = xsim.zeros((2, C), dtype=F)
    with pytest.raises(IndexError, match=r"'x'.*\b2\b"):
        xsim.launch(rows, 3, inputs=[x, xsim.ones(3, dtype=F), xsim.zeros(3, dtype=F),
                                     xsim.zeros((3, C), dtype=F), xsim.zeros((2, C), dtype=F)])
