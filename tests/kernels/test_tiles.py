"""Warp's tile API with one thread per block: tile_load/tile_store/tile_atomic_add against numpy indexing
(elements outside the array read zero and are not written), tile_fft/tile_ifft against numpy.fft, tile_sum,
tile_transpose, launch_tiled; gradients against the closed form (the transforms' conjugate transposes) and
float64 central differences; the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from refusals import assert_refused

import xsim as wp

N = 16   # a power of two: radix-2
NP = 12  # not one: the direct sum


@wp.kernel
def fft_rows(x: wp.array2d(dtype=wp.vec2f), y: wp.array2d(dtype=wp.vec2f)):
    i, _, _ = wp.tid()
    t = wp.tile_load(x, shape=(1, N), offset=(i, 0))
    wp.tile_fft(t)
    wp.tile_store(y, t, offset=(i, 0))


@wp.kernel
def ifft_rows_odd(x: wp.array2d(dtype=wp.vec2f), y: wp.array2d(dtype=wp.vec2f)):
    i, _ = wp.tid()
    t = wp.tile_load(x, shape=(2, NP), offset=(2 * i, 0))
    wp.tile_ifft(t)
    wp.tile_store(y, t, offset=(2 * i, 0))


@wp.kernel
def fft_rows_d(x: wp.array2d(dtype=wp.vec2d), y: wp.array2d(dtype=wp.vec2d)):
    i, _ = wp.tid()
    t = wp.tile_load(x, shape=(1, NP), offset=(i, 0))
    wp.tile_fft(t)
    wp.tile_store(y, t, offset=(i, 0))


@wp.kernel
def transpose_blocks(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    i, j = wp.tid()
    t = wp.tile_load(x, shape=(4, 3), offset=(i * 4, j * 3), storage="shared")
    wp.tile_store(y, wp.tile_transpose(t), offset=(j * 3, i * 4))


@wp.kernel
def shifted_copy(x: wp.array(dtype=wp.vec3), y: wp.array(dtype=wp.vec3), shift: int):
    i, _ = wp.tid()
    t = wp.tile_load(x, shape=8, offset=i * 8 + shift)
    wp.tile_store(y, t, offset=i * 8)


@wp.kernel
def sum_of_squares(x: wp.array(dtype=float), s: wp.array(dtype=float)):
    i = wp.tid()
    wp.tile_atomic_add(s, wp.tile_sum(wp.tile(x[i] * x[i])))


@wp.kernel
def components(v: wp.array(dtype=wp.vec3), s: wp.array2d(dtype=float)):
    i = wp.tid()
    wp.tile_atomic_add(s, wp.tile(v[i]), offset=(0, 0))


def _complex(a: np.ndarray) -> np.ndarray:
    return a[..., 0] + 1j * a[..., 1]


def test_tile_fft_transforms_each_row_as_numpy_does():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, N, 2)).astype(np.float32)
    x, y = wp.array(a, dtype=wp.vec2f), wp.zeros((8, N), dtype=wp.vec2f)
    wp.launch_tiled(fft_rows, dim=[8, 1], inputs=[x], outputs=[y], block_dim=N // 2)
    ref = np.fft.fft(_complex(a.astype(np.float64)), axis=1)
    assert np.abs(_complex(y.numpy()) - ref).max() < 1e-5 * np.abs(ref).max()


def test_tile_ifft_of_a_length_that_is_no_power_of_two_is_numpys_unnormalized_inverse():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, NP, 2)).astype(np.float32)
    x, y = wp.array(a, dtype=wp.vec2f), wp.zeros((6, NP), dtype=wp.vec2f)
    wp.launch_tiled(ifft_rows_odd, dim=3, inputs=[x], outputs=[y], block_dim=64)
    ref = np.fft.ifft(_complex(a.astype(np.float64)), axis=1) * NP
    assert np.abs(_complex(y.numpy()) - ref).max() < 1e-5 * np.abs(ref).max()


def test_tile_fft_gradient_is_the_conjugate_transform_of_the_output_gradient():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, N, 2)).astype(np.float32)
    w = rng.standard_normal((8, N, 2)).astype(np.float32)
    x = wp.array(a, dtype=wp.vec2f, requires_grad=True)
    y = wp.zeros((8, N), dtype=wp.vec2f, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch_tiled(fft_rows, dim=[8, 1], inputs=[x], outputs=[y], block_dim=N // 2)
    tape.backward(grads={y: wp.array(w, dtype=wp.vec2f)})
    # L = sum(w . y) = Re(conj(g) . F x) with g = w_re + i w_im, so dL/dx_re + i dL/dx_im = F^H g = N ifft(g)
    closed = np.fft.ifft(_complex(w.astype(np.float64)), axis=1) * N
    assert np.abs(_complex(x.grad.numpy()) - closed).max() < 1e-5 * np.abs(closed).max()


def test_tile_fft_gradient_in_float64_matches_central_differences():
    rng = np.random.default_rng(4)
    a, wts = rng.standard_normal((3, NP, 2)), rng.standard_normal((3, NP, 2))

    def loss(values: np.ndarray) -> float:
        out = wp.zeros((3, NP), dtype=wp.vec2d)
        wp.launch_tiled(fft_rows_d, dim=3, inputs=[wp.array(values, dtype=wp.vec2d)], outputs=[out], block_dim=1)
        return float(np.sum(out.numpy() * wts))

    x = wp.array(a, dtype=wp.vec2d, requires_grad=True)
    out = wp.zeros((3, NP), dtype=wp.vec2d, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch_tiled(fft_rows_d, dim=3, inputs=[x], outputs=[out], block_dim=1)
    tape.backward(grads={out: wp.array(wts, dtype=wp.vec2d)})
    grad, eps = x.grad.numpy(), 1e-6
    for idx in [(0, 0, 0), (1, 5, 1), (2, 11, 0), (2, 3, 1)]:
        up, down = a.copy(), a.copy()
        up[idx] += eps
        down[idx] -= eps
        fd = (loss(up) - loss(down)) / (2 * eps)
        assert abs(grad[idx] - fd) < 1e-7 * max(1.0, abs(fd)), (idx, grad[idx], fd)


def test_tile_transpose_moves_each_block_across_the_diagonal():
    a = np.arange(8 * 9, dtype=np.float32).reshape(8, 9)
    x = wp.array(a, requires_grad=True)
    y = wp.zeros((9, 8), dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch_tiled(transpose_blocks, dim=(2, 3), inputs=[x], outputs=[y], block_dim=12)
    np.testing.assert_array_equal(y.numpy(), a.T)
    w = np.random.default_rng(5).standard_normal((9, 8)).astype(np.float32)
    tape.backward(grads={y: wp.array(w)})
    np.testing.assert_array_equal(x.grad.numpy(), w.T)


def test_tile_load_outside_the_array_reads_zero_and_tile_store_outside_writes_nothing():
    a = np.arange(24 * 3, dtype=np.float32).reshape(24, 3)
    x, y = wp.array(a, dtype=wp.vec3), wp.full(24, wp.vec3(-1.0, -1.0, -1.0), dtype=wp.vec3)
    wp.launch_tiled(shifted_copy, dim=3, inputs=[x, y, 5], block_dim=8)
    want = np.zeros_like(a)
    want[:19] = a[5:]  # the last 5 loads fall past the end of x
    np.testing.assert_array_equal(y.numpy(), want)
    y2 = wp.full(24, wp.vec3(-1.0, -1.0, -1.0), dtype=wp.vec3)
    wp.launch_tiled(shifted_copy, dim=3, inputs=[x, y2, -3], block_dim=8)
    want = np.zeros_like(a)
    want[3:] = a[:21]  # the first 3 loads fall before its start
    np.testing.assert_array_equal(y2.numpy(), want)


def test_tile_sum_of_tile_adds_one_value_per_thread_and_its_gradient_is_the_closed_form():
    v = np.random.default_rng(6).standard_normal(100).astype(np.float32)
    x = wp.array(v, requires_grad=True)
    s = wp.zeros(1, dtype=float, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(sum_of_squares, dim=100, inputs=[x], outputs=[s])
    assert s.numpy()[0] == pytest.approx(float(np.sum(v.astype(np.float64) ** 2)), rel=1e-5)
    tape.backward(grads={s: wp.array([2.0], dtype=float)})
    np.testing.assert_allclose(x.grad.numpy(), 4.0 * v, rtol=1e-6)


def test_tile_of_a_vector_is_a_column_of_its_components():
    v = np.random.default_rng(7).standard_normal((10, 3)).astype(np.float32)
    s = wp.zeros((3, 1), dtype=float)
    wp.launch(components, dim=10, inputs=[wp.array(v, dtype=wp.vec3)], outputs=[s])
    np.testing.assert_allclose(s.numpy()[:, 0], v.sum(axis=0), rtol=1e-5)


def test_launch_tiled_refuses_a_grid_of_four_dimensions():
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        wp.launch_tiled(fft_rows, dim=(1, 1, 1, 1), inputs=[wp.zeros((1, N), dtype=wp.vec2f)],
                        outputs=[wp.zeros((1, N), dtype=wp.vec2f)], block_dim=1)


@wp.kernel(module="unique")
def fft_of_floats(x: wp.array2d(dtype=float)):
    t = wp.tile_load(x, shape=(4, 4))
    wp.tile_fft(t)  # E:floats


@wp.kernel(module="unique")
def load_of_the_wrong_rank(x: wp.array2d(dtype=float)):
    wp.tile_load(x, shape=4)  # E:rank


@wp.kernel(module="unique")
def load_of_a_runtime_shape(x: wp.array2d(dtype=float), n: int):
    wp.tile_load(x, shape=(n, 4))  # E:runtime


@wp.kernel(module="unique")
def load_at_a_float_offset(x: wp.array2d(dtype=float)):
    wp.tile_load(x, shape=(4, 4), offset=(0.5, 0))  # E:offset


@wp.kernel(module="unique")
def store_of_the_wrong_rank(x: wp.array2d(dtype=float)):
    wp.tile_store(x, wp.tile(1.0), offset=(0, 0))  # E:store_rank


@wp.kernel(module="unique")
def store_of_the_wrong_dtype(x: wp.array(dtype=float)):
    wp.tile_store(x, wp.tile(3))  # E:store_dtype


@wp.kernel(module="unique")
def fft_of_an_expression(c: wp.array2d(dtype=wp.vec2f)):
    wp.tile_fft(wp.tile_load(c, shape=(1, 4)))  # E:expression


@wp.kernel(module="unique")
def transpose_of_a_1d_tile(x: wp.array(dtype=float)):
    wp.tile_transpose(wp.tile(1.0))  # E:transpose


def test_tile_misuse_is_refused_naming_the_line():
    m2, m1, c = wp.zeros((4, 4), dtype=float), wp.zeros(4, dtype=float), wp.zeros((4, 4), dtype=wp.vec2f)
    assert_refused(fft_of_floats, [m2], "takes a tile of vec2f or vec2d (complex numbers), got a tile of float32",
                   "floats")
    assert_refused(load_of_the_wrong_rank, [m2], "a 2-d array takes a tile shape of 2 positive ints", "rank")
    assert_refused(load_of_a_runtime_shape, [m2, 4], "known at compile time", "runtime")
    assert_refused(load_at_a_float_offset, [m2], "offsets are ints, got float32", "offset")
    assert_refused(store_of_the_wrong_rank, [m2], "a 1-d tile into a 2-d array", "store_rank")
    assert_refused(store_of_the_wrong_dtype, [m1], "a tile of int32 into an array of float32", "store_dtype")
    assert_refused(fft_of_an_expression, [c], "must be a local variable name", "expression")
    assert_refused(transpose_of_a_1d_tile, [m1], "takes a 2-d tile", "transpose")


def test_tile_fft_agrees_with_warps_cpu_tile_fft():
    warp = pytest.importorskip("warp")
    warp.config.quiet = True
    rng = np.random.default_rng(8)
    a = rng.standard_normal((4, N, 2)).astype(np.float32)

    @warp.kernel(module="unique")
    def warp_fft(x: warp.array2d(dtype=warp.vec2f), y: warp.array2d(dtype=warp.vec2f)):
        i, _, _ = warp.tid()
        t = warp.tile_load(x, shape=(1, N), offset=(i, 0))
        warp.tile_fft(t)
        warp.tile_store(y, t, offset=(i, 0))

    wx, wy = warp.array(a, dtype=warp.vec2f, device="cpu"), warp.zeros((4, N), dtype=warp.vec2f, device="cpu")
    warp.launch_tiled(warp_fft, dim=[4, 1], inputs=[wx], outputs=[wy], block_dim=8, device="cpu")
    x, y = wp.array(a, dtype=wp.vec2f), wp.zeros((4, N), dtype=wp.vec2f)
    wp.launch_tiled(fft_rows, dim=[4, 1], inputs=[x], outputs=[y], block_dim=8)
    ref = np.fft.fft(_complex(a.astype(np.float64)), axis=1)
    ours, theirs = np.abs(_complex(y.numpy()) - ref).max(), np.abs(_complex(wy.numpy()) - ref).max()
    assert np.abs(y.numpy() - wy.numpy()).max() < 1e-5 * np.abs(ref).max()
    assert ours <= theirs * 1.5  # exact twiddles: no less accurate than Warp's recurrence
