"""``xsim.indexedarray`` (Warp's indexed arrays): kernels read, write and atomically update an array
through per-dimension int32 index arrays, gradients land in the data's grad at the indexed positions
(float64 finite differences), and on the host ``arr[idx]``, ``numpy``, ``shape``, ``contiguous`` and
``copy`` act on the selected elements as numpy's fancy indexing does."""

from __future__ import annotations

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

pytestmark = pytest.mark.usefixtures("default_device")


@xsim.kernel
def read_scaled(a: xsim.indexedarray(dtype=xsim.float64), out: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    out[i] = a[i] * a[i] + xsim.float64(2.0) * a[i]


@xsim.kernel
def read_2d(a: xsim.indexedarray2d(dtype=xsim.float64), out: xsim.array(dtype=xsim.float64, ndim=2)):
    i, j = xsim.tid()
    out[i, j] = xsim.sin(a[i, j]) * xsim.float64(i + 1) + xsim.float64(a.shape[1])


@xsim.kernel
def read_rows(a: xsim.indexedarray2d(dtype=xsim.float64), out: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    row = a[i]  # a view of one indexed row: its columns are indexed too
    out[i] = row[0] * row[1]


@xsim.kernel
def write_doubled(x: xsim.array(dtype=xsim.float64), a: xsim.indexedarray[xsim.float64]):
    i = xsim.tid()
    a[i] = xsim.float64(2.0) * x[i] * x[i]


@xsim.kernel
def scatter_add(x: xsim.array(dtype=xsim.float64), a: xsim.indexedarray1d(dtype=xsim.float64)):
    i = xsim.tid()
    xsim.atomic_add(a, i % 3, x[i] * x[i])


@xsim.kernel
def write_vec(a: xsim.indexedarray2d(dtype=xsim.vec3)):
    i, j = xsim.tid()
    a[i, j] = xsim.vec3(float(i), float(j), float(len(a)))


def f64(values, requires_grad=True):
    return xsim.array(np.asarray(values, dtype=np.float64), dtype=xsim.float64, requires_grad=requires_grad)


def i32(values):
    return xsim.array(np.asarray(values, dtype=np.int32), dtype=xsim.int32)


X = np.array([0.5, -1.25, 2.0, 3.0, 1.5, -0.75])
IDX = [4, 1, 1, 5, 0]


def test_kernel_reads_the_selected_elements_as_numpy_fancy_indexing_does():
    a = xsim.indexedarray(f64(X, False), i32(IDX))
    out = xsim.zeros(5, dtype=xsim.float64)
    xsim.launch(read_scaled, 5, inputs=[a, out])
    sel = X[IDX]
    np.testing.assert_allclose(out.numpy(), sel * sel + 2.0 * sel)


def test_2d_indices_on_some_dimensions_select_rows_and_columns():
    data = np.arange(20, dtype=np.float64).reshape(4, 5) / 7.0
    for indices, expect in (([i32([3, 0]), None], data[[3, 0]]), ([None, i32([4, 4, 1])], data[:, [4, 4, 1]]),
                            ([i32([2, 1, 3]), i32([0, 2])], data[np.ix_([2, 1, 3], [0, 2])])):
        a = xsim.indexedarray(f64(data, False), indices)
        assert a.shape == expect.shape and a.size == expect.size
        out = xsim.zeros(a.shape, dtype=xsim.float64)
        xsim.launch(read_2d, a.shape, inputs=[a, out])
        rows = np.arange(1, expect.shape[0] + 1)[:, None]
        np.testing.assert_allclose(out.numpy(), np.sin(expect) * rows + expect.shape[1])
        np.testing.assert_array_equal(a.numpy(), expect)


def test_a_row_view_of_an_indexed_array_keeps_its_column_indices():
    data = np.arange(12, dtype=np.float64).reshape(3, 4)
    a = xsim.indexedarray(f64(data, False), [i32([2, 0]), i32([3, 1])])
    out = xsim.zeros(2, dtype=xsim.float64)
    xsim.launch(read_rows, 2, inputs=[a, out])
    np.testing.assert_array_equal(out.numpy(), [data[2, 3] * data[2, 1], data[0, 3] * data[0, 1]])


def test_kernel_writes_and_atomics_reach_the_data_at_the_indexed_positions():
    data = xsim.zeros(6, dtype=xsim.float64)
    xsim.launch(write_doubled, 3, inputs=[f64([1.0, 2.0, 3.0], False), data[i32([5, 0, 2])]])
    np.testing.assert_array_equal(data.numpy(), [8.0, 0, 18.0, 0, 0, 2.0])
    acc = xsim.zeros(6, dtype=xsim.float64)
    x = np.arange(1.0, 8.0)
    xsim.launch(scatter_add, 7, inputs=[f64(x, False), acc[i32([1, 3, 1])]])
    expect = np.zeros(6)
    np.add.at(expect, [1, 3, 1], [sum(x[k] ** 2 for k in range(7) if k % 3 == m) for m in range(3)])
    np.testing.assert_array_equal(acc.numpy(), expect)


def test_vector_elements_and_len_through_a_2d_indexed_array():
    data = xsim.zeros((4, 3), dtype=xsim.vec3)
    a = data[i32([3, 1]), i32([2])]
    assert a.shape == (2, 1)
    xsim.launch(write_vec, a.shape, inputs=[a])
    got = data.numpy()
    np.testing.assert_array_equal(got[3, 2], [0.0, 0.0, 2.0])
    np.testing.assert_array_equal(got[1, 2], [1.0, 0.0, 2.0])
    assert np.count_nonzero(got) == 3


def test_read_gradient_adds_into_the_data_grad_at_repeated_indices():
    def rollout(x):
        out = xsim.zeros(5, dtype=xsim.float64, requires_grad=True)
        xsim.launch(read_scaled, 5, inputs=[x[i32(IDX)], out])
        return out

    gradcheck(rollout, [f64(X)], wrt=[0], raise_on_failure=True)
    x = f64(X)
    tape = xsim.Tape()
    with tape:
        out = rollout(x)
    tape.backward(grads={out: np.ones(5)})
    expect = np.zeros(6)
    np.add.at(expect, IDX, 2.0 * X[IDX] + 2.0)
    np.testing.assert_allclose(x.grad.numpy(), expect)


def test_2d_read_gradient_matches_finite_differences():
    data = np.linspace(-1.0, 2.0, 12).reshape(3, 4)

    def rollout(x):
        a = xsim.indexedarray(x, [None, i32([3, 0, 3])])
        out = xsim.zeros(a.shape, dtype=xsim.float64, requires_grad=True)
        xsim.launch(read_2d, a.shape, inputs=[a, out])
        return out

    gradcheck(rollout, [f64(data)], wrt=[0], raise_on_failure=True)


def test_write_and_atomic_gradients_match_finite_differences():
    def written(x):
        data = xsim.zeros(6, dtype=xsim.float64, requires_grad=True)
        xsim.launch(write_doubled, 3, inputs=[x, data[i32([5, 0, 2])]])
        return data

    def accumulated(x):
        data = xsim.zeros(6, dtype=xsim.float64, requires_grad=True)
        xsim.launch(scatter_add, 7, inputs=[x, data[i32([1, 3, 1])]])
        return data

    gradcheck(written, [f64([1.0, -2.0, 0.5])], wrt=[0], raise_on_failure=True)
    gradcheck(accumulated, [f64(np.linspace(-1.0, 1.5, 7))], wrt=[0], raise_on_failure=True)


def test_host_indexing_numpy_contiguous_and_its_gradient():
    x = f64(X)
    a = x[i32(IDX)]
    assert isinstance(a, xsim.indexedarray) and a.shape == (5,) and len(a) == 5
    np.testing.assert_array_equal(a.numpy(), X[IDX])
    c = a.contiguous()
    assert isinstance(c, xsim.array) and c.is_contiguous and c.shape == (5,)
    np.testing.assert_array_equal(c.numpy(), X[IDX])
    np.testing.assert_array_equal(xsim.array(np.arange(12.0).reshape(3, 4))[1, i32([3, 0])].numpy(), [7.0, 4.0])

    def rollout(x):
        out = xsim.zeros(5, dtype=xsim.float64, requires_grad=True)
        xsim.launch(read_scaled, 5, inputs=[xsim.indexedarray(x[i32(IDX)].contiguous(), None), out])
        return out

    gradcheck(rollout, [f64(X)], wrt=[0], raise_on_failure=True)


def test_copy_gathers_from_and_scatters_into_indexed_arrays_with_gradients():
    dest = xsim.zeros(5, dtype=xsim.float64)
    xsim.copy(dest, f64(X, False)[i32(IDX)])
    np.testing.assert_array_equal(dest.numpy(), X[IDX])
    data = xsim.zeros(6, dtype=xsim.float64)
    xsim.copy(data[i32([2, 4])], f64([7.0, 9.0], False), count=0)
    np.testing.assert_array_equal(data.numpy(), [0, 0, 7.0, 0, 9.0, 0])

    def gathered(x):
        out = xsim.zeros(5, dtype=xsim.float64, requires_grad=True)
        xsim.copy(out, x[i32(IDX)])
        y = xsim.zeros(5, dtype=xsim.float64, requires_grad=True)
        xsim.launch(read_scaled, 5, inputs=[xsim.indexedarray(out), y])
        return y

    def scattered(w, x):
        y = xsim.zeros(6, dtype=xsim.float64, requires_grad=True)
        xsim.launch(read_scaled, 6, inputs=[xsim.indexedarray(w), y])  # w's overwritten values get no gradient
        xsim.copy(y[i32([1, 4])], x)
        out = xsim.zeros(6, dtype=xsim.float64, requires_grad=True)
        xsim.launch(read_scaled, 6, inputs=[xsim.indexedarray(y), out])
        return out

    gradcheck(gathered, [f64(X)], wrt=[0], raise_on_failure=True)
    gradcheck(scattered, [f64(X), f64([0.3, -0.4])], wrt=[0, 1], raise_on_failure=True)


def test_fill_and_assign_write_only_the_selected_elements():
    data = xsim.zeros((3, 2), dtype=xsim.float64)
    data[i32([2, 0])].fill_(4.0)
    np.testing.assert_array_equal(data.numpy(), [[4.0, 4.0], [0, 0], [4.0, 4.0]])
    data[i32([1])].assign(np.array([[1.0, 2.0]]))
    data[i32([0])].zero_()
    np.testing.assert_array_equal(data.numpy(), [[0, 0], [1.0, 2.0], [4.0, 4.0]])


def test_bad_indexed_arrays_and_arguments_are_refused_by_name():
    x = f64(X, False)
    with pytest.raises(TypeError, match="index array of dimension 0 must be a 1-d array of int32, got array"):
        xsim.indexedarray(x, xsim.array([1, 2], dtype=xsim.int64))
    with pytest.raises(ValueError, match="2 index arrays for 1-d data"):
        xsim.indexedarray(x, [i32([0]), i32([0])])
    with pytest.raises(IndexError, match="dimension 0 holds 0..6, outside the data's 6 entries"):
        x[i32([0, 6])].numpy()
    out = xsim.zeros(5, dtype=xsim.float64)
    with pytest.raises(TypeError, match="kernel 'read_scaled' parameter 'a': expected indexedarray"):
        xsim.launch(read_scaled, 5, inputs=[x, out])
    with pytest.raises(TypeError, match="parameter 'out': expected array.*got an indexedarray"):
        xsim.launch(read_scaled, 5, inputs=[x[i32(IDX)], out[i32(IDX)]])
    x32 = xsim.array(np.asarray(X, dtype=np.float32), dtype=xsim.float32)
    with pytest.raises(TypeError, match=r"parameter 'a': expected indexedarray\(dtype=float64, ndim=1\), got "
                                        r"indexedarray\(dtype=float32, ndim=1\)"):
        xsim.launch(read_scaled, 5, inputs=[x32[i32(IDX)], out])
    with pytest.raises(ValueError, match="an indexedarray is copied whole"):
        xsim.copy(out, x[i32(IDX)], dest_offset=1, count=2)


@pytest.mark.cpu_only
def test_debug_mode_checks_the_indexed_shape(monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    out = xsim.zeros(6, dtype=xsim.float64)
    with pytest.raises(IndexError, match="index \\(5,\\) is out of bounds for array 'a' with shape \\(5,\\)"):
        xsim.launch(read_scaled, 6, inputs=[f64(X, False)[i32(IDX)], out])
