"""A launch packs every kind of argument into the kernel's native argument struct exactly, both on
the fast path (plain arguments of a kernel launched before: exact Python and xsim types) and on the
general path (numpy scalars, tuples for vectors), and splits large launches over threads without
losing or repeating an element."""

import numpy as np
import pytest

import xsim
from xsim.kernels import threads as threads_mod


@xsim.struct
class Gains:
    a: float
    b: xsim.float64


@xsim.kernel(module="xsim_tests_launch_packing")
def echo_scalars(i8: xsim.int8, u8: xsim.uint8, i16: xsim.int16, u16: xsim.uint16, i32: int, u32: xsim.uint32,
                 i64: xsim.int64, u64: xsim.uint64, f16: xsim.float16, f32: float, f64: xsim.float64, b: bool,
                 out: xsim.array(dtype=xsim.float64)):
    out[0] = xsim.float64(i8)
    out[1] = xsim.float64(u8)
    out[2] = xsim.float64(i16)
    out[3] = xsim.float64(u16)
    out[4] = xsim.float64(i32)
    out[5] = xsim.float64(u32)
    out[6] = xsim.float64(i64)
    out[7] = xsim.float64(u64)
    out[8] = xsim.float64(f16)
    out[9] = xsim.float64(f32)
    out[10] = f64
    out[11] = xsim.float64(xsim.where(b, 1.0, 0.0))


@xsim.kernel(module="xsim_tests_launch_packing")
def echo_values(offset: xsim.vec3, g: Gains, rot: xsim.mat22, out: xsim.array(dtype=xsim.float64)):
    out[0] = xsim.float64(offset.x)
    out[1] = xsim.float64(offset.y)
    out[2] = xsim.float64(offset.z)
    out[3] = xsim.float64(g.a)
    out[4] = g.b
    out[5] = xsim.float64(rot[0, 1])
    out[6] = xsim.float64(rot[1, 0])


@xsim.struct
class Scaled:
    x: xsim.array(dtype=xsim.float64)
    w: xsim.array(dtype=xsim.float64)
    k: xsim.float64


@xsim.kernel(module="xsim_tests_launch_packing")
def scaled_product(s: Scaled, out: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    out[i] = s.k * s.x[i] * s.w[i]


vec3h = xsim.types.vector(3, xsim.float16)


@xsim.kernel(module="xsim_tests_launch_packing")
def echo_half_vector(h: vec3h, out: xsim.array(dtype=xsim.float64)):
    for k in range(3):
        out[k] = xsim.float64(h[k])


@xsim.kernel(module="xsim_tests_launch_packing")
def add_index(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = out[i] + x[i] + float(i)


@xsim.kernel(module="xsim_tests_launch_packing")
def grid_index(out: xsim.array(dtype=int, ndim=2)):
    i, j = xsim.tid()
    out[i, j] = out[i, j] + 10 * i + j


SCALARS = [-5, 250, -30000, 60000, -2_000_000_000, 4_000_000_000, -(2**40) - 3, 2**40 + 7, 1.5, 0.1, 0.1, True]
NUMPY_SCALARS = [np.int8(-5), np.uint8(250), np.int16(-30000), np.uint16(60000), np.int32(-2_000_000_000),
                 np.uint32(4_000_000_000), np.int64(-(2**40) - 3), np.uint64(2**40 + 7), np.float16(1.5),
                 np.float32(0.1), np.float64(0.1), np.bool_(True)]
EXPECTED = [-5, 250, -30000, 60000, -2_000_000_000, 4_000_000_000, -(2**40) - 3, 2**40 + 7, 1.5,
            float(np.float32(0.1)), 0.1, 1.0]


@pytest.mark.parametrize("args", [SCALARS, NUMPY_SCALARS], ids=["python", "numpy"])
def test_scalars_of_every_type_arrive_exactly_on_first_and_repeated_launches(args):
    for _ in range(3):  # the first launch prepares the kernel, the later ones take the fast path
        out = xsim.zeros(12, dtype=xsim.float64)
        xsim.launch(echo_scalars, 1, inputs=args, outputs=[out])
        np.testing.assert_array_equal(out.numpy(), EXPECTED)


def test_vector_struct_and_matrix_arguments_arrive_exactly_as_values_or_tuples():
    g = Gains()
    g.a, g.b = 0.25, 1e-300
    expected = [1.0, -2.5, 3.0, 0.25, 1e-300, 2.0, 3.0]
    for offset, rot in [(xsim.vec3(1.0, -2.5, 3.0), xsim.mat22(1.0, 2.0, 3.0, 4.0)),
                        ((1.0, -2.5, 3.0), ((1.0, 2.0), (3.0, 4.0)))] * 2:
        out = xsim.zeros(7, dtype=xsim.float64)
        xsim.launch(echo_values, 1, inputs=[offset, g, rot], outputs=[out])
        np.testing.assert_array_equal(out.numpy(), expected)


def test_a_struct_of_arrays_is_repacked_when_a_field_is_reassigned():
    x1, x2, w = (xsim.array(np.array(v, np.float64)) for v in ([1.0, 2.0], [10.0, 20.0], [3.0, 5.0]))
    s = Scaled(x=x1, w=w, k=2.0)
    for x, k in [(x1, 2.0), (x1, 2.0), (x2, 2.0), (x2, -1.0), (x1, -1.0)]:  # repeated launches take the fast path
        s.x, s.k = x, k
        out = xsim.zeros(2, dtype=xsim.float64)
        xsim.launch(scaled_product, 2, inputs=[s], outputs=[out])
        np.testing.assert_array_equal(out.numpy(), k * x.numpy() * w.numpy())


def test_struct_gradients_reach_the_grads_the_fields_hold_at_backward_time():
    """The adjoint packs the grads of the arrays in the struct at each backward: a field reassigned
    between launches, or a grad replaced, gets its own gradient (d out/d x = k w, d out/d w = k x)."""
    x = xsim.array(np.array([1.0, 2.0]), dtype=xsim.float64, requires_grad=True)
    x2 = xsim.array(np.array([4.0, 8.0]), dtype=xsim.float64, requires_grad=True)
    w = xsim.array(np.array([3.0, 5.0]), dtype=xsim.float64, requires_grad=True)
    s = Scaled(x=x, w=w, k=2.0)
    for round_ in range(3):
        if round_ == 2:
            s.x = x2
            w.grad = xsim.zeros(2, dtype=xsim.float64)
        out = xsim.zeros(2, dtype=xsim.float64, requires_grad=True)
        tape = xsim.Tape()
        with tape:
            xsim.launch(scaled_product, 2, inputs=[s], outputs=[out])
        tape.backward(grads={out: xsim.array(np.array([1.0, 1.0]), dtype=xsim.float64)})
        np.testing.assert_array_equal(s.x.grad.numpy(), 2.0 * w.numpy())
        np.testing.assert_array_equal(w.grad.numpy(), 2.0 * s.x.numpy())
        tape.zero()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])  # zeroed by the tape of round 1, then untouched


def test_half_precision_vector_arrives_exactly_as_value_or_tuple():
    for h in [vec3h(0.5, -1.25, 2048.0), (0.5, -1.25, 2048.0)] * 2:
        out = xsim.zeros(3, dtype=xsim.float64)
        xsim.launch(echo_half_vector, 1, inputs=[h], outputs=[out])
        np.testing.assert_array_equal(out.numpy(), [0.5, -1.25, 2048.0])


def test_every_written_array_counts_one_write_per_launch():
    x, out = xsim.ones(8, dtype=float), xsim.zeros(8, dtype=float)
    before_x, before_out = x.version, out.version
    for _ in range(3):
        xsim.launch(add_index, 8, inputs=[x], outputs=[out])
    assert (x.version, out.version) == (before_x, before_out + 3)
    np.testing.assert_array_equal(out.numpy(), 3 * (1 + np.arange(8)))


def _force_threads(monkeypatch, threads: int):
    """Every launch gets ``threads`` threads: no serial calibration runs, no serial cut-off."""
    monkeypatch.setattr(threads_mod, "_max_threads", threads)
    monkeypatch.setattr(threads_mod, "CALIBRATION_RUNS", 0)
    monkeypatch.setattr(threads_mod, "SERIAL_BELOW_S", 0.0)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 3 * 1024 + 37])
def test_threaded_launch_runs_every_element_exactly_once(monkeypatch, threads, n):
    _force_threads(monkeypatch, threads)
    x = xsim.array(np.arange(n, dtype=np.float32) * 0.5)
    out = xsim.zeros(n, dtype=float)
    xsim.launch(add_index, n, inputs=[x], outputs=[out])
    xsim.launch(add_index, n, inputs=[x], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), 2 * (np.arange(n) * 1.5).astype(np.float32))


@pytest.mark.parametrize("threads", [1, 2])
def test_strided_views_take_the_strided_path_with_threads(monkeypatch, threads):
    _force_threads(monkeypatch, threads)
    n = 2 * 1024 + 5
    base_x = xsim.array(np.arange(2 * n, dtype=np.float32))
    base_out = xsim.zeros(2 * n, dtype=float)
    x, out = base_x[::2], base_out[1::2]
    assert not x.is_contiguous and not out.is_contiguous
    xsim.launch(add_index, n, inputs=[x], outputs=[out])
    expected = np.zeros(2 * n, np.float32)
    expected[1::2] = np.arange(0, 2 * n, 2) + np.arange(n)
    np.testing.assert_array_equal(base_out.numpy(), expected)


def test_two_dimensional_launch_decomposes_the_thread_index():
    for _ in range(2):
        out = xsim.zeros((3, 5), dtype=int)
        xsim.launch(grid_index, (3, 5), outputs=[out])
        np.testing.assert_array_equal(out.numpy(), 10 * np.arange(3)[:, None] + np.arange(5)[None, :])


def test_wrong_arguments_after_good_launches_are_still_refused():
    out = xsim.zeros(12, dtype=xsim.float64)
    xsim.launch(echo_scalars, 1, inputs=SCALARS, outputs=[out])
    with pytest.raises(TypeError, match="parameter 'out'"):
        xsim.launch(echo_scalars, 1, inputs=SCALARS, outputs=[xsim.zeros(12, dtype=float)])
    with pytest.raises(TypeError, match="parameter 'i32'"):
        xsim.launch(echo_scalars, 1, inputs=SCALARS[:4] + [1.5] + SCALARS[5:], outputs=[out])
