"""Specification of running on a device: arrays, copies, launches and gradients on "cpu" and "cuda:0".

Every test takes the ``device`` fixture (tests/conftest.py): it runs on the CPU everywhere and on
cuda:0 where a GPU is present. test_cuda_fake_driver.py runs the same tests on a stand-in driver
whose "device memory" is host memory, which checks the CUDA code paths on machines without a GPU.
Values are chosen exactly representable, so results are exact whatever the rounding (FMA or not).
"""

import numpy as np
import pytest

import xsim
from xsim import device as xd


@xsim.kernel
def saxpy(a: float, x: xsim.array(dtype=float), y: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = a * x[i] + y[i]


@xsim.kernel
def shifted_copy(x: xsim.array(dtype=float), out: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i] = x[i + 2]  # an index computed from tid: the launch's shape check cannot see it, debug mode can


@xsim.kernel
def sum_of_squares(v: xsim.array(dtype=float), loss: xsim.array(dtype=float)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, v[i] * v[i])


@xsim.kernel
def vec3_length_sq(v: xsim.array(dtype=xsim.vec3d), loss: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.dot(v[i], v[i]) * xsim.float64(0.5))


@xsim.kernel
def scale_rows(m: xsim.array(dtype=float, ndim=2), s: float):
    i, j = xsim.tid()
    m[i, j] = m[i, j] * s


N = 1000  # more than one 256-thread block, not a multiple of it


def test_saxpy_forward_on_device(device):
    x = xsim.array(np.arange(N, dtype=np.float32) / 4, device=device)
    y = xsim.array(np.arange(N, dtype=np.float32) % 7, device=device)
    out = xsim.empty(N, dtype=float, device=device)
    xsim.launch(saxpy, N, inputs=[2.0, x, y], outputs=[out])
    assert out.device == device
    np.testing.assert_array_equal(out.numpy(), np.arange(N, dtype=np.float32) / 2 + np.arange(N) % 7)


def test_saxpy_backward_through_a_tape_on_device(device):
    x = xsim.array(np.arange(N, dtype=np.float32) / 8, device=device, requires_grad=True)
    y = xsim.ones(N, dtype=float, device=device, requires_grad=True)
    out = xsim.zeros(N, dtype=float, device=device, requires_grad=True)
    loss = xsim.zeros(1, dtype=float, device=device, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(saxpy, N, inputs=[2.0, x, y], outputs=[out])
        xsim.launch(sum_of_squares, N, inputs=[out], outputs=[loss])
    tape.backward(loss)
    expected_out = np.arange(N, dtype=np.float32) / 4 + 1
    assert not out.grad.numpy().any()  # consumed: saxpy overwrote out, so nothing before it sees that gradient
    np.testing.assert_array_equal(x.grad.numpy(), 4 * expected_out)   # d/dx (2x + y)^2 = 4 (2x + y)
    np.testing.assert_array_equal(y.grad.numpy(), 2 * expected_out)
    assert x.grad.device == device


def test_vec3_backward_in_float64_matches_finite_differences_on_device(device):
    rng = np.random.default_rng(3)
    v0 = rng.standard_normal((64, 3))
    v = xsim.array(v0, dtype=xsim.vec3d, device=device, requires_grad=True)
    loss = xsim.zeros(1, dtype=xsim.float64, device=device, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(vec3_length_sq, 64, inputs=[v], outputs=[loss])
    tape.backward(loss)
    np.testing.assert_allclose(loss.numpy()[0], 0.5 * np.sum(v0 * v0), rtol=1e-12)

    def f(w):
        out = xsim.zeros(1, dtype=xsim.float64, device=device)
        xsim.launch(vec3_length_sq, 64, inputs=[xsim.array(w, dtype=xsim.vec3d, device=device)], outputs=[out])
        return out.numpy()[0]

    eps, fd = 1e-6, np.zeros_like(v0)
    for idx in [(0, 0), (5, 1), (63, 2)]:
        plus, minus = v0.copy(), v0.copy()
        plus[idx] += eps
        minus[idx] -= eps
        fd[idx] = (f(plus) - f(minus)) / (2 * eps)
        assert v.grad.numpy()[idx] == pytest.approx(fd[idx], rel=1e-7)
    np.testing.assert_array_equal(v.grad.numpy(), v0)  # d/dv 0.5|v|^2 = v, exactly


def test_two_dimensional_launch_on_a_strided_view_on_device(device):
    m = xsim.array(np.arange(24, dtype=np.float32).reshape(4, 6), device=device)
    view = m[1:4, ::2]
    assert view.shape == (3, 3) and not view.is_contiguous
    xsim.launch(scale_rows, view.shape, inputs=[view, 2.0])
    expected = np.arange(24, dtype=np.float32).reshape(4, 6)
    expected[1:4, ::2] *= 2
    np.testing.assert_array_equal(m.numpy(), expected)


def test_arrays_round_trip_between_host_and_device(device):
    data = np.arange(12, dtype=np.float64).reshape(4, 3)
    a = xsim.array(data, dtype=xsim.vec3d, device=device)
    assert a.device == device and a.shape == (4,) and a.dtype is xsim.vec3d
    back = a.numpy()
    np.testing.assert_array_equal(back, data)
    back[0, 0] = 100.0  # numpy() on a GPU is a copy; on the CPU a view
    assert (a.numpy()[0, 0] == 100.0) == (device == "cpu")
    on_cpu = a.to("cpu")
    assert on_cpu.device == "cpu" and a.to(device) is a
    np.testing.assert_array_equal(on_cpu.numpy()[1:], data[1:])
    assert a[2] == xsim.vec3d(6.0, 7.0, 8.0)
    assert a.list()[3] == xsim.vec3d(9.0, 10.0, 11.0)


def test_untracked_fill_zero_clone_and_ranges_on_device(device):
    a = xsim.empty(10, dtype=xsim.vec3, device=device)
    a.fill_untracked(xsim.vec3(1.0, 2.0, 3.0))
    np.testing.assert_array_equal(a.numpy(), np.tile([1.0, 2.0, 3.0], (10, 1)))
    b = a.clone_untracked()
    assert b.device == device and b.ptr != a.ptr
    a.zero_untracked()
    assert not a.numpy().any() and b.numpy()[9, 2] == 3.0
    src = xsim.array(np.arange(5, dtype=np.float32), device=device)
    dst = xsim.zeros(8, dtype=float, device=device)
    dst.copy_from_untracked(src, dst_offset=2, src_offset=1, count=3)
    np.testing.assert_array_equal(dst.numpy(), [0, 0, 1, 2, 3, 0, 0, 0])
    dst.copy_from_untracked(src, dst_offset=0, src_offset=0, count=2, accumulate=True)
    np.testing.assert_array_equal(dst.numpy(), [0, 1, 1, 2, 3, 0, 0, 0])
    dst.copy_from_untracked(np.full(8, 7.0, np.float32))
    np.testing.assert_array_equal(dst.numpy(), np.full(8, 7.0))


def test_views_and_item_assignment_on_device(device):
    a = xsim.array(np.arange(10, dtype=np.int32), device=device)
    view = a[1:9:3]
    np.testing.assert_array_equal(view.numpy(), [1, 4, 7])
    view.fill_untracked(-1)
    a[0] = 50
    np.testing.assert_array_equal(a.numpy(), [50, -1, 2, 3, -1, 5, 6, -1, 8, 9])
    view.zero_untracked()
    assert a.numpy()[7] == 0 and a.numpy()[8] == 8


def test_copies_between_devices(device):
    host = xsim.array(np.arange(6, dtype=np.float32))
    dev = xsim.zeros(6, dtype=float, device=device)
    xsim.copy(dev, host)
    np.testing.assert_array_equal(dev.numpy(), np.arange(6))
    back = xsim.zeros(6, dtype=float)
    xsim.copy(back, dev, dst_offset=1, src_offset=2, count=3)
    np.testing.assert_array_equal(back.numpy(), [0, 2, 3, 4, 0, 0])
    c = xsim.clone(dev)
    assert c.device == device
    np.testing.assert_array_equal(c.numpy(), np.arange(6))


@pytest.mark.parametrize("device", [pytest.param("cuda:0", marks=pytest.mark.cuda)], indirect=True)
def test_launch_refuses_an_array_on_another_device(device):
    x = xsim.zeros(4, dtype=float)  # on the CPU
    out = xsim.zeros(4, dtype=float, device=device)
    with pytest.raises(ValueError, match="parameter 'x': array is on device 'cpu' but the launch runs on 'cuda:0'"):
        xsim.launch(saxpy, 4, inputs=[1.0, x, out], outputs=[out], device=device)


def test_cuda_array_interface_describes_device_memory(device):
    a = xsim.zeros(5, dtype=xsim.vec3, device=device)
    if device == "cpu":
        assert not hasattr(a, "__cuda_array_interface__")
        return
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (5, 3) and cai["typestr"] == "<f4" and cai["data"] == (a.ptr, False)
    assert cai["strides"] is None and cai["version"] == 3 and cai["stream"] == xsim.get_stream(device).handle
    assert a[::2].__cuda_array_interface__["strides"] == (24, 4)


def test_streams_order_launches_and_synchronize(device):
    if device == "cpu":
        with pytest.raises(ValueError, match="streams belong to CUDA devices"):
            xsim.Stream("cpu")
        return
    s = xsim.Stream(device)
    assert xsim.get_stream(device) is not s
    x = xsim.array(np.arange(N, dtype=np.float32), device=device)
    out = xsim.zeros(N, dtype=float, device=device)
    xsim.launch(saxpy, N, inputs=[3.0, x, x], outputs=[out], stream=s)
    s.synchronize()
    with xsim.ScopedStream(s):
        assert xsim.get_stream(device) is s
    assert xsim.get_stream(device) is not s
    xsim.synchronize(device)
    np.testing.assert_array_equal(out.numpy(), 4 * np.arange(N, dtype=np.float32))


def test_debug_mode_reports_an_out_of_bounds_index_on_device(device, monkeypatch):
    monkeypatch.setattr(xsim.config, "mode", "debug")
    x = xsim.zeros(4, dtype=float, device=device)
    out = xsim.zeros(4, dtype=float, device=device)
    with pytest.raises(IndexError, match=r"kernel 'shifted_copy'.*index \([45],\) is out of bounds for array 'x' "
                                         r"with shape \(4,\)"):
        xsim.launch(shifted_copy, 4, inputs=[x], outputs=[out])
    # the report was cleared: a correct launch afterwards runs clean
    xsim.launch(shifted_copy, 2, inputs=[x], outputs=[out])


# -- without a GPU -------------------------------------------------------------------------------------


def test_cuda_is_unavailable_here_and_asking_for_it_says_what_is_missing_in_one_sentence():
    if xsim.is_cuda_available():
        pytest.skip("this machine has a CUDA GPU")
    reason = xd.cuda_unavailable_reason()
    for attempt in (lambda: xsim.get_device("cuda:0"), lambda: xsim.set_device("cuda"),
                    lambda: xsim.zeros(3, device="cuda:0"), lambda: xsim.Stream("cuda:0"),
                    lambda: xsim.launch(saxpy, 1, inputs=[1.0, np.zeros(1, np.float32), np.zeros(1, np.float32)],
                                        outputs=[np.zeros(1, np.float32)], device="cuda:0")):
        with pytest.raises(RuntimeError) as info:
            attempt()
        msg = str(info.value)
        assert msg.startswith("device 'cuda:0' needs CUDA, but ") and reason in msg
        assert 'install the NVIDIA driver' in msg and "pip install cuda-python" in msg and 'device="cpu"' in msg
        assert msg.endswith(".") and msg.count(". ") == 0 and "\n" not in msg
    assert xsim.get_device() == "cpu"


def test_missing_pieces_each_get_their_own_reason():
    class NoGpu:
        class CUresult:
            CUDA_ERROR_NO_DEVICE = 100

        @staticmethod
        def cuInit(flags):
            return (100,)

    class NoLibcuda:
        @staticmethod
        def cuInit(flags):
            raise OSError("libcuda.so.1: cannot open shared object file")

    assert xd._start_driver(NoGpu) == (None, "the NVIDIA driver found no CUDA GPU on this machine")
    assert xd._start_driver(NoLibcuda)[1] == ("no NVIDIA driver was found on this machine "
                                              "(libcuda.so could not be loaded)")


def test_synchronize_without_a_gpu_in_use_returns_at_once():
    assert xsim.synchronize() is None
    assert xsim.synchronize("cpu") is None
