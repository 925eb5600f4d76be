"""Zero-copy views between xsim arrays and torch tensors: ``from_torch``, ``to_torch`` and the view
``xsim.launch`` passes to a kernel for a tensor argument (``wrap_torch_for_launch``).

They sit beside ``array.py`` because they are memory sharing, not differentiation: a launch needs
them without the autodiff layer (``xsim.autodiff.interop`` builds torch autograd and DLPack on them).
torch is optional: it is imported only when one of these is used with a tensor. CPU tensors share
their memory through numpy, CUDA tensors through ``__cuda_array_interface__``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import types
from .array import _component_strides, _infer_composite, _resolve_dtype, array, from_numpy
from .device import get_device


def torch_module():
    """The torch module, or an ImportError saying how to get it."""
    try:
        import torch
    except ImportError:
        raise ImportError("xsim's torch interop needs PyTorch: pip install torch") from None
    return torch


def is_torch_tensor(x: Any) -> bool:
    """True for a ``torch.Tensor`` (without importing torch when the caller has not)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_scalar_matches(t, dtype) -> bool:
    """True when tensor ``t``'s element type is the component scalar of xsim ``dtype`` (no conversion)."""
    return not types.is_struct(dtype) and str(t.dtype).removeprefix("torch.") == dtype._np.name


def shared_view(host: np.ndarray, dtype, what: str) -> array:
    """``host`` as an xsim array that must share its memory (never a silent copy)."""
    try:
        out = from_numpy(host, dtype=dtype, device="cpu")  # host memory is a CPU array, whatever the default
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what}: {e}") from None
    if host.size and out.ptr != host.__array_interface__["data"][0]:
        want = types.type_name(out.dtype)
        raise ValueError(f"{what}: data of numpy dtype {host.dtype} and shape {host.shape} cannot be viewed "
                         f"as array({want}) without a copy; convert it first (matching scalar type, packed "
                         "components)")
    return out


def tensor_view(t, dtype, what: str) -> array:
    """A CPU or CUDA tensor's memory as an xsim array (no copy; ``what`` names the caller in errors)."""
    if t.device.type == "cuda":
        return _cudatensor_view(t, dtype, what)
    if t.device.type != "cpu":
        raise NotImplementedError(f"{what}: the tensor is on '{t.device}'; xsim shares CPU and CUDA tensors only")
    # .numpy() of a CPU tensor is a view of its storage whose base holds the tensor: memory stays alive.
    return shared_view(t.detach().numpy(), dtype, what)


def _cudatensor_view(t, dtype, what: str) -> array:
    """A CUDA tensor's memory as an xsim array on the same GPU, through ``__cuda_array_interface__``
    (no copy; the tensor is kept alive as the array's owner)."""
    cai = t.detach().__cuda_array_interface__
    np_dtype = np.dtype(cai["typestr"])
    full_shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, step = [], np_dtype.itemsize
        for n in reversed(full_shape):
            strides.append(step)
            step *= n
        strides = tuple(reversed(strides))
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np_dtype), full_shape, tuple(strides), writeable=False)
    xdtype = _infer_composite(stand_in) if dtype is None else _resolve_dtype(dtype)
    ncomp = len(xdtype._shape)
    outer, inner = full_shape[:len(full_shape) - ncomp], full_shape[len(full_shape) - ncomp:]
    if (np_dtype != xdtype._np or tuple(inner) != xdtype._shape
            or tuple(strides[len(outer):]) != _component_strides(xdtype)):
        raise ValueError(f"{what}: a CUDA tensor of {np_dtype} with shape {full_shape} cannot be viewed as "
                         f"array({types.type_name(xdtype)}) without a copy; convert it first (matching scalar "
                         "type, packed components)")
    device = get_device(f"cuda:{t.device.index or 0}")
    return array._from_device(cai["data"][0], xdtype, device, outer, tuple(strides[:len(outer)]), owner=t)


def from_torch(t, dtype: Any = None, requires_grad: bool | None = None) -> array:
    """An xsim array sharing ``t``'s memory (CPU tensors), never a copy.

    Without ``dtype`` trailing dims pick the element type like ``from_numpy`` (``(n, 3)`` float32 ->
    ``array(vec3)``). With ``requires_grad`` (default: ``t.requires_grad``) the array's ``grad``
    shares memory with ``t.grad``, which is created as zeros when missing; gradients from
    ``tape.backward`` then appear in ``t.grad``. (A torch optimizer's ``zero_grad()`` that sets
    ``t.grad`` to None disconnects it: call ``from_torch`` again after that.) A non-leaf tensor
    that does not retain its grad has no ``t.grad`` to share, so the array gets its own.
    """
    torch = torch_module()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"from_torch needs a torch.Tensor, got {type(t).__name__}")
    out = tensor_view(t, dtype, "from_torch")
    if not (t.requires_grad if requires_grad is None else requires_grad):
        return out
    if not t.is_leaf and not t.retains_grad:
        out.requires_grad = True
        return out
    if t.grad is None:
        t.grad = torch.zeros_like(t)
    out.grad = tensor_view(t.grad, out.dtype, "from_torch (gradient)")
    return out


def to_torch(a: array, requires_grad: bool | None = None):
    """A torch tensor sharing ``a``'s memory (shape: ``a.shape`` + component dims, so ``array(vec3)`` of n
    gives ``(n, 3)``). With ``requires_grad`` (default: ``a.requires_grad``) the tensor requires grad
    and its ``.grad`` shares memory with ``a.grad``."""
    torch = torch_module()
    if not isinstance(a, array):
        raise TypeError(f"to_torch needs an xsim array, got {type(a).__name__}")
    if types.is_struct(a.dtype):
        raise TypeError(f"to_torch: an array of struct {a.dtype.__name__} has no torch equivalent")
    t = _share_with_torch(torch, a)
    if a.requires_grad if requires_grad is None else requires_grad:
        if a.grad is None:
            a.requires_grad = True
        t.requires_grad_(True)
        t.grad = _share_with_torch(torch, a.grad)
    return t


def _share_with_torch(torch, a: array):
    """A tensor on ``a``'s device sharing its memory (CUDA arrays through ``__cuda_array_interface__``)."""
    if a.device.is_cuda:
        return torch.as_tensor(a, device=f"cuda:{a.device.ordinal}")
    return torch.from_numpy(a.numpy())


def wrap_torch_for_launch(t, dtype) -> array:
    """The array ``xsim.launch`` passes to a kernel for a torch tensor argument ``t``: a zero-copy view.

    The backward pass never writes an array's values (adjoint kernels write gradients only, and
    in-place launches replay from the tape's snapshots), so ``t`` keeps the values the forward pass
    left in it. When ``t.requires_grad`` its gradient goes to ``t.grad`` (created as zeros if missing),
    a buffer separate from the values; otherwise no gradient is kept for it.
    """
    return from_torch(t, dtype=dtype, requires_grad=t.requires_grad)


def device_to_torch(device) -> str:
    """Warp's ``device_to_torch``: the torch device string of an xsim device (``"cpu"``, ``"cuda:0"``)."""
    return get_device(device).name


def stream_from_torch(stream_or_device=None):
    """Warp's ``stream_from_torch``: an xsim ``Stream`` on the CUDA stream torch uses (a ``torch.cuda.Stream``, or
    the current stream of a torch device or its name; None: of torch's current device). The stream stays
    torch's; launches on it are ordered with torch's work."""
    torch = torch_module()
    if stream_or_device is None or isinstance(stream_or_device, (str, torch.device)):
        dev = torch.device("cuda") if stream_or_device is None else torch.device(stream_or_device)
        if dev.type != "cuda":
            raise ValueError(f"stream_from_torch() needs a CUDA device or stream, got {stream_or_device!r}")
        stream_or_device = torch.cuda.current_stream(dev)
    from .device import Stream
    return Stream(device_from_torch(stream_or_device.device), cuda_stream=stream_or_device.cuda_stream)


def device_from_torch(torch_device):
    """Warp's ``device_from_torch``: the xsim device of a torch device or its name (``"cuda"`` is the current
    CUDA device, as in torch); a device xsim does not have is refused naming it."""
    if isinstance(torch_device, str):
        name = torch_device
    else:
        kind, index = getattr(torch_device, "type", None), getattr(torch_device, "index", None)
        if kind not in ("cpu", "cuda"):
            raise RuntimeError(f"Unsupported Torch device {torch_device}")
        name = kind if kind == "cpu" or index is None else f"cuda:{index}"
    if name == "cuda":
        name = f"cuda:{torch_module().cuda.current_device()}"
    if name != "cpu" and not name.startswith("cuda:"):
        raise RuntimeError(f"Unsupported Torch device {torch_device}")
    return get_device(name)
