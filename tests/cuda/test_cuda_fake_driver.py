"""The CUDA code paths of xsim on a stand-in driver (fake_driver.py): no GPU needed.

The device-parametrized tests of test_cuda_runtime.py run here again on "cuda:0" backed by the
fake driver: xsim allocates, copies, builds a real CUBIN with NVRTC, loads it and launches through
the same calls it makes on a GPU, and the fake runs each launch with the kernel's CPU build on the
same packed arguments. What this cannot check is the GPU itself: SASS execution, atomics under
real concurrency, stream overlap.
"""

import gc

import numpy as np
import pytest
from fake_driver import CUresult, FakeDriver
from test_cuda_runtime import (  # noqa: F401 - collected again here, on the fake cuda:0
    N,
    saxpy,
    test_arrays_round_trip_between_host_and_device,
    test_copies_between_devices,
    test_cuda_array_interface_describes_device_memory,
    test_debug_mode_reports_an_out_of_bounds_index_on_device,
    test_launch_refuses_an_array_on_another_device,
    test_saxpy_backward_through_a_tape_on_device,
    test_saxpy_forward_on_device,
    test_streams_order_launches_and_synchronize,
    test_two_dimensional_launch_on_a_strided_view_on_device,
    test_untracked_fill_zero_clone_and_ranges_on_device,
    test_vec3_backward_in_float64_matches_finite_differences_on_device,
    test_views_and_item_assignment_on_device,
)

import xsim
from xsim import device as xd
from xsim.kernels import cuda
from xsim.kernels.module import _MODULES


def _drop_cuda_builds():
    for module in _MODULES.values():
        for key in [k for k in module.builds if k[0] != "cpu"]:
            del module.builds[key]


@pytest.fixture
def fake(monkeypatch):
    """xsim's device layer running on a FakeDriver with one sm_90 GPU."""
    drv = FakeDriver(capability=(9, 0))
    monkeypatch.setattr(xd, "_runtime_state", (xd.CudaDriver(drv), ""))
    monkeypatch.setattr(xd, "_devices", {"cpu": xd.get_device("cpu")})
    monkeypatch.setattr(xd, "_current_streams", {})
    monkeypatch.setattr(xd, "_default_streams", {})
    build_cubin = cuda.build_cubin

    def recording_build(module, debug, arch):
        path, metas = build_cubin(module, debug, arch)
        drv.images[path.read_bytes()] = (module, debug)
        drv.built_arch = arch
        return path, metas

    monkeypatch.setattr(cuda, "build_cubin", recording_build)
    _drop_cuda_builds()
    yield drv
    _drop_cuda_builds()  # never leave fake-backed modules for a real GPU to reuse


@pytest.fixture
def device(fake) -> str:
    return "cuda:0"


def test_launch_uses_256_thread_blocks_and_a_grid_covering_the_launch(fake):
    x = xsim.ones(N, dtype=float, device="cuda:0")
    out = xsim.zeros(N, dtype=float, device="cuda:0")
    xsim.launch(saxpy, N, inputs=[1.0, x, x], outputs=[out])
    launch = fake.launches[-1]
    assert launch["kernel"] == "saxpy" and launch["which"] == "forward" and launch["n"] == N
    assert launch["block"] == (256, 1, 1) and launch["grid"] == (4, 1, 1)
    assert launch["stream"] == xsim.get_stream("cuda:0").handle
    assert fake.built_arch == 90


def test_the_cubin_is_built_for_the_gpus_compute_capability(fake):
    fake.capability = (8, 6)
    x = xsim.ones(3, dtype=float, device="cuda:0")
    xsim.launch(saxpy, 3, inputs=[1.0, x, x], outputs=[x])
    assert fake.built_arch == 86


def test_device_memory_is_freed_when_the_last_array_using_it_is_collected(fake):
    before = len(fake.allocs)
    a = xsim.zeros(100, dtype=float, device="cuda:0")
    view = a[10:20]
    assert len(fake.allocs) == before + 1
    del a
    gc.collect()
    assert len(fake.allocs) == before + 1  # the view keeps the allocation alive
    np.testing.assert_array_equal(view.numpy(), np.zeros(10))
    del view
    gc.collect()
    assert len(fake.allocs) == before


def test_a_failed_launch_names_the_kernel(fake):
    x = xsim.ones(N, dtype=float, device="cuda:0")
    fake.fail_next_launch = CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(xsim.errors.XsimRuntimeError,
                       match=r"kernel 'saxpy' \(forward, 1000 threads\) could not be launched on cuda:0: "
                             r"CUDA call cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
        xsim.launch(saxpy, N, inputs=[1.0, x, x], outputs=[x])


def test_a_kernel_fault_seen_later_names_the_last_kernel_launched(fake, monkeypatch):
    x = xsim.ones(8, dtype=float, device="cuda:0")
    xsim.launch(saxpy, 8, inputs=[1.0, x, x], outputs=[x])
    monkeypatch.setattr(fake, "cuCtxSynchronize", lambda: (CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,))
    with pytest.raises(xd.CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS.*the last kernel launched on cuda:0 was "
                                           "'saxpy'"):
        xsim.synchronize("cuda:0")


def test_synchronize_waits_on_every_gpu_in_use(fake, monkeypatch):
    synced = []
    monkeypatch.setattr(fake, "cuCtxSynchronize", lambda: synced.append(1) or (0,))
    xsim.zeros(2, device="cuda:0")
    xsim.synchronize()
    assert synced == [1]


def test_no_gpu_reported_by_the_driver_is_one_sentence(monkeypatch):
    class NoGpuDriver(FakeDriver):
        def cuInit(self, flags):
            return (CUresult.CUDA_ERROR_NO_DEVICE,)

    monkeypatch.setattr(xd, "_runtime_state", xd._start_driver(NoGpuDriver()))
    monkeypatch.setattr(xd, "_devices", {"cpu": xd.get_device("cpu")})
    assert not xsim.is_cuda_available()
    with pytest.raises(RuntimeError, match=r"^device 'cuda:0' needs CUDA, but the NVIDIA driver found no CUDA GPU "
                                           r"on this machine: install the NVIDIA driver"):
        xsim.zeros(1, device="cuda:0")


def test_asking_for_a_gpu_beyond_the_last_names_the_ones_there(fake):
    with pytest.raises(RuntimeError, match=r"device 'cuda:1' does not exist: this machine has 1 CUDA GPU\(s\), "
                                           r"cuda:0 to cuda:0"):
        xsim.get_device("cuda:1")


class _CudaTensorStandIn:
    """What from_torch reads of a torch CUDA tensor: its device and __cuda_array_interface__ (torch's
    CPU build cannot make real CUDA tensors)."""

    class device:
        type, index = "cuda", 0

    requires_grad = False

    def __init__(self, source: "xsim.array"):
        self.__cuda_array_interface__ = source.__cuda_array_interface__
        self.source = source

    def detach(self):
        return self


def test_from_torch_shares_a_cuda_tensors_memory_without_copying(fake):
    from xsim.torch_view import tensor_view

    backing = xsim.array(np.arange(12, dtype=np.float32).reshape(4, 3), dtype=xsim.vec3, device="cuda:0")
    tensor = _CudaTensorStandIn(backing)
    view = tensor_view(tensor, None, "from_torch")
    assert view.device == "cuda:0" and view.dtype is xsim.vec3 and view.shape == (4,)
    assert view.ptr == backing.ptr  # same device memory
    view[1] = xsim.vec3(7.0, 8.0, 9.0)
    np.testing.assert_array_equal(backing.numpy()[1], [7.0, 8.0, 9.0])
    strided = tensor_view(_CudaTensorStandIn(backing[::2]), xsim.vec3, "from_torch")
    assert strided.shape == (2,) and strided.strides == (24,) and strided.ptr == backing.ptr
    with pytest.raises(ValueError, match="without a copy"):
        tensor_view(tensor, xsim.float64, "from_torch")


def test_adam_and_sgd_update_device_arrays_in_place(fake):
    # xsim.optim's update kernels on cuda:0 (flat views of device memory), against numpy.
    from xsim.optim import SGD, Adam

    p0 = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])
    grads = [np.array([[0.3, -0.1, 2.0], [-0.5, 0.2, 0.0]]), np.array([[0.1, 0.4, -1.0], [0.6, -0.3, 0.2]])]
    p = xsim.array(p0.astype(np.float32), dtype=xsim.vec3, device="cuda:0", requires_grad=True)
    q = xsim.array(p0, dtype=xsim.vec3d, device="cuda:0", requires_grad=True)
    adam, sgd = Adam([p], lr=0.1, clip_norm=1.0), SGD([q], lr=0.1, momentum=0.9)
    m = v = buf = np.zeros_like(p0)
    want_p, want_q = p0.copy(), p0.copy()
    for t, g in enumerate(grads, start=1):
        p.grad.assign(xsim.array(g.astype(np.float32), dtype=xsim.vec3, device="cuda:0"))
        q.grad.assign(xsim.array(g, dtype=xsim.vec3d, device="cuda:0"))
        adam.step()
        sgd.step()
        gc_ = g * min(1.0, 1.0 / (np.linalg.norm(g) + 1e-6))
        m, v = 0.9 * m + 0.1 * gc_, 0.999 * v + 0.001 * gc_ * gc_
        want_p = want_p - 0.1 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        buf = 0.9 * buf + g
        want_q = want_q - 0.1 * buf
    np.testing.assert_allclose(p.numpy(), want_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(q.numpy(), want_q, rtol=1e-12)
