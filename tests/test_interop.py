"""Zero-copy interop (xsim/array.py, xsim/torch_view.py, xsim/autodiff/interop.py): numpy, torch and DLPack views share
memory both ways, gradients are shared with torch, torch tensors go straight into launches without
their values being touched by the backward pass, and torch autograd runs through xsim kernels."""

import gc
import warnings

import numpy as np
import pytest
import torch

import xsim
from xsim.autodiff.interop import TorchFunction
from xsim.torch_view import wrap_torch_for_launch

# each test runs once per default device (tests/conftest.py: default_device; cpu_only tests on the CPU alone)
pytestmark = pytest.mark.usefixtures("default_device")

V3 = xsim.array(dtype=xsim.vec3)
V3D = xsim.array(dtype=xsim.vec3d)
F64 = xsim.array(dtype=xsim.float64)


@xsim.kernel
def add_vec3(x: V3, y: V3, z: V3):
    i = xsim.tid()
    z[i] = x[i] + y[i]


@xsim.kernel
def double_in_place(x: V3):
    i = xsim.tid()
    x[i] = 2.0 * x[i]


@xsim.kernel
def energy(x: V3D, w: F64, y: F64):
    i = xsim.tid()
    p = x[i]
    y[i] = xsim.dot(p, p) * w[i] + xsim.sin(p[0] * w[i]) - p[1] * p[2]


@xsim.kernel
def damped_step(x: V3D, v: V3D, k: F64, x_out: V3D):
    i = xsim.tid()
    x_out[i] = x[i] + 0.1 * v[i] - 0.1 * k[0] * x[i] * xsim.length(x[i])


def same_memory(a, b) -> bool:
    return np.shares_memory(np.asarray(a), np.asarray(b))


# -- numpy ----------------------------------------------------------------------------------------


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_from_numpy_and_numpy_are_zero_copy_both_ways():
    data = np.zeros((4, 3), dtype=np.float32)
    a = xsim.from_numpy(data)
    assert a.dtype is xsim.vec3 and a.shape == (4,)
    a.numpy()[1, 2] = 5.0
    assert data[1, 2] == 5.0
    data[3, 0] = -1.0
    assert a.numpy()[3, 0] == -1.0


@pytest.mark.cpu_only("numpy zero-copy views exist for host memory only")
def test_array_of_numpy_without_copy_shares_memory_and_with_copy_does_not():
    data = np.arange(6, dtype=np.float64)
    shared, copied = xsim.array(data, copy=False), xsim.array(data)
    data[0] = 42.0
    assert shared.numpy()[0] == 42.0 and copied.numpy()[0] == 0.0


def test_from_numpy_maps_trailing_dims_to_vectors_and_matrices():
    assert xsim.from_numpy(np.zeros((2, 3, 3))).dtype is xsim.mat33d
    assert xsim.from_numpy(np.zeros((5, 4), dtype=np.float32)).dtype is xsim.vec4
    assert xsim.from_numpy(np.zeros(5, dtype=np.int32)).dtype is xsim.int32


# -- torch ----------------------------------------------------------------------------------------


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_from_torch_is_zero_copy_and_maps_trailing_dims():
    t = torch.zeros(4, 3)
    a = xsim.from_torch(t)
    assert a.dtype is xsim.vec3 and a.shape == (4,) and a.ptr == t.data_ptr()
    a.numpy()[2, 1] = 3.5
    assert t[2, 1].item() == 3.5
    t[0, 0] = -2.0
    assert a.numpy()[0, 0] == -2.0
    assert xsim.from_torch(torch.zeros(2, 3, 3, dtype=torch.float64)).dtype is xsim.mat33d
    assert xsim.from_torch(torch.zeros(6), dtype=xsim.vec3).shape == (2,)


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_from_torch_keeps_the_tensor_memory_alive():
    a = xsim.from_torch(torch.full((1000,), 7.0))
    gc.collect()
    assert np.all(a.numpy() == 7.0)


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_from_torch_gradient_shares_memory_with_t_grad():
    t = torch.ones(3, requires_grad=True)
    a = xsim.from_torch(t)
    assert t.grad is not None and t.grad.tolist() == [0.0, 0.0, 0.0]
    a.grad.numpy()[1] = 4.0
    assert t.grad.tolist() == [0.0, 4.0, 0.0]
    plain = xsim.from_torch(torch.ones(3))
    assert plain.grad is None


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_from_torch_of_a_non_leaf_tensor_keeps_its_own_gradient():
    b = torch.ones(3, requires_grad=True) * 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when a non-leaf's .grad is touched
        a = xsim.from_torch(b)
    assert a.grad is not None and a.grad.numpy().tolist() == [0.0, 0.0, 0.0]
    b.retain_grad()
    assert xsim.from_torch(b).grad.ptr == b.grad.data_ptr()


def test_from_torch_refuses_what_would_need_a_copy():
    with pytest.raises(ValueError, match="from_torch: data of numpy dtype float64 and shape \\(4, 3\\) "
                                         "cannot be viewed as array\\(vec3f\\) without a copy"):
        xsim.from_torch(torch.zeros(4, 3, dtype=torch.float64), dtype=xsim.vec3)
    with pytest.raises(ValueError, match="without a copy"):
        xsim.from_torch(torch.zeros(3, 4).t(), dtype=xsim.vec3)  # components not packed
    with pytest.raises(TypeError, match="from_torch needs a torch.Tensor, got ndarray"):
        xsim.from_torch(np.zeros(3))


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_to_torch_is_zero_copy_and_carries_the_gradient():
    a = xsim.zeros(2, dtype=xsim.vec3, requires_grad=True)
    t = xsim.to_torch(a)
    assert t.shape == (2, 3) and t.data_ptr() == a.ptr and t.requires_grad
    with torch.no_grad():
        t[1, 0] = 9.0
    assert a.numpy()[1, 0] == 9.0
    a.grad.numpy()[0, 2] = 1.5
    assert t.grad[0, 2].item() == 1.5
    (t * 2.0).sum().backward()  # torch accumulates into the shared gradient in place
    assert a.grad.numpy()[0].tolist() == [2.0, 2.0, 3.5]


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_to_torch_without_gradient_gives_a_plain_tensor():
    t = xsim.to_torch(xsim.ones(3))
    assert not t.requires_grad and t.grad is None and t.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_torch_tensor_in_a_launch_keeps_its_values_and_from_torch_gets_the_gradient():
    x = torch.tensor([[0.1, 0.2, 0.3], [-1.0, 2.5, 1e-7]])
    before = x.clone()
    y = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    ya = xsim.from_torch(y, requires_grad=True)
    z = xsim.zeros(2, dtype=xsim.vec3, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(add_vec3, 2, inputs=[x, ya], outputs=[z])
    tape.backward(grads={z: np.ones((2, 3))})
    assert torch.equal(x.view(torch.int32), before.view(torch.int32))  # bit-identical
    assert y.grad.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert np.allclose(z.numpy(), (before + y).numpy())


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_torch_tensor_requiring_grad_in_a_launch_gets_its_gradient_in_t_grad():
    x = torch.tensor([[0.5, 1.0, -2.0]], requires_grad=True)
    before = x.detach().clone()
    y = xsim.ones(1, dtype=xsim.vec3)
    z = xsim.zeros(1, dtype=xsim.vec3, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(add_vec3, 1, inputs=[x, y], outputs=[z])
    tape.backward(grads={z: np.ones((1, 3))})
    assert torch.equal(x.detach(), before)
    assert x.grad.tolist() == [[1.0, 1.0, 1.0]]


@pytest.mark.cpu_only("a numpy array goes into a launch zero-copy on the CPU only")
def test_numpy_array_in_a_launch_keeps_its_values_through_backward():
    x = np.array([[0.1, 0.2, 0.3]], dtype=np.float32)
    before = x.copy()
    y = xsim.ones(1, dtype=xsim.vec3, requires_grad=True)
    z = xsim.zeros(1, dtype=xsim.vec3, requires_grad=True)
    with xsim.Tape() as tape:
        xsim.launch(add_vec3, 1, inputs=[x, y], outputs=[z])
    tape.backward(grads={z: np.ones((1, 3))})
    assert np.array_equal(x.view(np.int32), before.view(np.int32))
    assert y.grad.numpy().tolist() == [[1.0, 1.0, 1.0]]


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_in_place_launch_on_a_torch_tensor_keeps_the_forward_values_after_backward():
    x = torch.tensor([[0.5, 1.0, -2.0], [3.0, 0.25, 8.0]], requires_grad=True)
    before = x.detach().clone()
    with xsim.Tape() as tape:
        xsim.launch(double_in_place, 2, inputs=[x])
    x.grad.fill_(1.0)  # the seed: d(loss)/d(new x) = 1
    tape.backward()
    assert torch.equal(x.detach(), 2.0 * before)
    assert x.grad.tolist() == [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_wrap_torch_for_launch_shares_values_and_keeps_gradients_apart():
    t = torch.zeros(2, 3, requires_grad=True)
    a = wrap_torch_for_launch(t, xsim.vec3)
    assert a.ptr == t.data_ptr() and a.grad.ptr == t.grad.data_ptr() != t.data_ptr()


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_assign_from_a_torch_tensor_sends_the_gradient_to_t_grad():
    t = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    y = xsim.zeros(3, requires_grad=True)
    with xsim.Tape() as tape:
        y.assign(t)
    y.grad.numpy()[:] = [1.0, 2.0, 3.0]
    tape.backward()
    assert y.numpy().tolist() == [1.0, -2.0, 0.5]
    assert t.grad.tolist() == [1.0, 2.0, 3.0]


def test_assign_converts_a_tensor_of_another_dtype_without_gradient():
    y = xsim.zeros(2, dtype=xsim.vec3)
    y.assign(torch.arange(6, dtype=torch.float64))
    assert y.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match="a torch.float64 tensor that requires grad cannot carry"):
        y.assign(torch.zeros(6, dtype=torch.float64, requires_grad=True))


# -- DLPack ---------------------------------------------------------------------------------------


@pytest.mark.cpu_only("checks DLPack export of host memory")
def test_dlpack_device_is_the_cpu():
    assert xsim.zeros(2).__dlpack_device__() == (1, 0)


@pytest.mark.cpu_only("checks DLPack export of host memory")
def test_numpy_consumes_an_xsim_array_through_dlpack_without_copy():
    a = xsim.zeros(3, dtype=xsim.vec3)
    view = np.from_dlpack(a)
    assert view.shape == (3, 3) and view.dtype == np.float32
    view[2, 1] = 6.0
    assert a.numpy()[2, 1] == 6.0


@pytest.mark.cpu_only("checks DLPack export of host memory")
def test_torch_consumes_an_xsim_array_through_dlpack_without_copy_and_keeps_it_alive():
    a = xsim.zeros((2, 2), dtype=xsim.float64)
    t = torch.from_dlpack(a)
    assert t.dtype == torch.float64 and t.shape == (2, 2) and t.data_ptr() == a.ptr
    a.numpy()[1, 1] = 3.0
    assert t[1, 1].item() == 3.0
    del a
    gc.collect()
    t[0, 0] = 1.0
    assert t.tolist() == [[1.0, 0.0], [0.0, 3.0]]


@pytest.mark.cpu_only("checks DLPack export of host memory")
def test_from_dlpack_shares_memory_with_numpy_torch_and_xsim_producers():
    data = np.zeros((2, 3), dtype=np.float32)
    a = xsim.from_dlpack(data)
    assert a.dtype is xsim.vec3 and same_memory(a.numpy(), data)
    t = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    b = xsim.from_dlpack(t)
    b.numpy()[3] = 2.0
    assert t[3].item() == 2.0 and b.grad is None
    c = xsim.from_dlpack(b, requires_grad=True)
    assert c.ptr == b.ptr and c.grad is not None


def test_dlpack_refuses_struct_arrays():
    @xsim.struct
    class Pair:
        a: float
        b: float

    with pytest.raises(BufferError, match="struct Pair has no DLPack element type"):
        xsim.zeros(2, dtype=Pair).__dlpack__()


# -- torch autograd through xsim -------------------------------------------------------------------


def energy_fn(x, w):
    y = xsim.zeros(w.shape, dtype=xsim.float64)
    xsim.launch(energy, w.shape, inputs=[x, w], outputs=[y])
    return y


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_torch_gradcheck_passes_through_the_bridge():
    f = xsim.to_torch_function(energy_fn)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(f, (x, w), eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_bridge_gradient_matches_the_closed_form():
    f = xsim.to_torch_function(energy_fn)
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    w = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    f(x, w).sum().backward()
    px, py, pz = 1.0, 2.0, 3.0
    c = np.cos(px * 0.5)
    assert np.allclose(x.grad.numpy(), [[2 * px * 0.5 + c * 0.5, 2 * py * 0.5 - pz, 2 * pz * 0.5 - py]])
    assert np.allclose(w.grad.numpy(), [px * px + py * py + pz * pz + c * px])
    assert TorchFunction is xsim.autodiff.interop.TorchFunction


def rollout_fn(x0, v, k):
    """Three chained steps; intermediates carry requires_grad so the gradient flows through them."""
    x = x0
    for _ in range(3):
        nxt = xsim.zeros(x.shape, dtype=xsim.vec3d, requires_grad=True)
        xsim.launch(damped_step, x.shape, inputs=[x, v, k], outputs=[nxt])
        x = nxt
    return x


@pytest.mark.cpu_only("torch here is a CPU build: its tensors live in host memory")
def test_a_torch_optimizer_drives_an_xsim_rollout():
    f = xsim.to_torch_function(rollout_fn, dtypes=(xsim.vec3d, xsim.vec3d, xsim.float64))
    x0 = torch.tensor([[1.0, 0.0, 0.5], [-0.5, 1.0, 0.0]], dtype=torch.float64)
    v = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.tensor([0.3], dtype=torch.float64, requires_grad=True)
    target = torch.zeros(2, 3, dtype=torch.float64)
    opt = torch.optim.Adam([v, k], lr=0.05)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = ((f(x0, v, k) - target) ** 2).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]
    assert torch.autograd.gradcheck(lambda v_, k_: f(x0, v_, k_), (v.detach().requires_grad_(),
                                                                    k.detach().requires_grad_()))


def test_devices_convert_to_and_from_torchs_as_warps_helpers_do():
    assert xsim.device_to_torch("cpu") == "cpu" and xsim.device_to_torch(xsim.get_device("cpu")) == "cpu"
    assert xsim.device_from_torch(torch.device("cpu")) is xsim.get_device("cpu")
    assert xsim.device_from_torch("cpu") is xsim.get_device("cpu")
    assert str(torch.zeros(1, device=xsim.device_to_torch("cpu")).device) == "cpu"
    with pytest.raises(RuntimeError, match="Unsupported Torch device meta"):
        xsim.device_from_torch(torch.device("meta"))


def test_stream_from_torch_refuses_a_cpu_device_and_wraps_torchs_stream_on_a_gpu():
    with pytest.raises(ValueError, match="needs a CUDA device or stream, got 'cpu'"):
        xsim.stream_from_torch("cpu")
    if not (torch.cuda.is_available() and xsim.is_cuda_available()):
        return
    ts = torch.cuda.Stream()
    s = xsim.stream_from_torch(ts)
    assert s.cuda_stream == ts.cuda_stream and s.device is xsim.get_device(f"cuda:{ts.device.index}")
    del s  # torch's stream: xsim does not destroy it
    ts.synchronize()
