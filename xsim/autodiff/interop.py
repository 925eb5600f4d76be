"""Zero-copy exchange with torch and DLPack, and torch autograd through xsim computations.

- ``from_torch(t)`` / ``to_torch(a)`` share memory (and gradient memory) with a torch tensor;
- a torch tensor passed straight to ``xsim.launch`` is wrapped by ``wrap_torch_for_launch``;
- ``xsim.from_dlpack(obj)`` and ``array.__dlpack__`` exchange CPU memory with any DLPack
  producer/consumer (numpy >= 1.22, torch, JAX);
- ``to_torch_function(fn)`` turns a Python function that launches xsim kernels into a
  differentiable torch op (``TorchFunction`` is the underlying ``torch.autograd.Function``).

torch is optional: it is imported only when one of these is used with a tensor. Only CPU memory
is shared so far; CUDA tensors need xsim's CUDA arrays.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import types
from ..array import _component_strides, _infer_composite, _resolve_dtype, array, from_numpy
from ..device import get_device
from ..kernels import recording
from .tape import Tape

_DLPACK_CPU = 1  # DLDeviceType kDLCPU
_DLPACK_CUDA_HOST = 3  # kDLCUDAHost: pinned host memory, readable by the CPU


def _torch():
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


def _shared_view(host: np.ndarray, dtype, what: str) -> array:
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


def _tensor_view(t, dtype, what: str) -> array:
    if t.device.type == "cuda":
        return _cuda_tensor_view(t, dtype, what)
    if t.device.type != "cpu":
        raise NotImplementedError(f"{what}: the tensor is on '{t.device}'; xsim shares CPU and CUDA tensors only")
    # .numpy() of a CPU tensor is a view of its storage whose base holds the tensor: memory stays alive.
    return _shared_view(t.detach().numpy(), dtype, what)


def _cuda_tensor_view(t, dtype, what: str) -> array:
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


# -- torch ---------------------------------------------------------------------------------------


def from_torch(t, dtype: Any = None, requires_grad: bool | None = None) -> array:
    """An xsim array sharing ``t``'s memory (CPU tensors), never a copy.

    Without ``dtype`` trailing dims pick the element type like ``from_numpy`` (``(n, 3)`` float32 ->
    ``array(vec3)``). With ``requires_grad`` (default: ``t.requires_grad``) the array's ``grad``
    shares memory with ``t.grad``, which is created as zeros when missing; gradients from
    ``tape.backward`` then appear in ``t.grad``. (A torch optimizer's ``zero_grad()`` that sets
    ``t.grad`` to None disconnects it: call ``from_torch`` again after that.) A non-leaf tensor
    that does not retain its grad has no ``t.grad`` to share, so the array gets its own.
    """
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"from_torch needs a torch.Tensor, got {type(t).__name__}")
    out = _tensor_view(t, dtype, "from_torch")
    if not (t.requires_grad if requires_grad is None else requires_grad):
        return out
    if not t.is_leaf and not t.retains_grad:
        out.requires_grad = True
        return out
    if t.grad is None:
        t.grad = torch.zeros_like(t)
    out.grad = _tensor_view(t.grad, out.dtype, "from_torch (gradient)")
    return out


def to_torch(a: array, requires_grad: bool | None = None):
    """A torch tensor sharing ``a``'s memory (shape: ``a.shape`` + component dims, so ``array(vec3)`` of n
    gives ``(n, 3)``). With ``requires_grad`` (default: ``a.requires_grad``) the tensor requires grad
    and its ``.grad`` shares memory with ``a.grad``."""
    torch = _torch()
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


# -- DLPack --------------------------------------------------------------------------------------


def _dlpack(self: array, *, stream: Any = None, max_version: tuple[int, int] | None = None,
            dl_device: tuple[int, int] | None = None, copy: bool | None = None):
    """``array.__dlpack__``: a DLPack capsule for this array's memory (shape + component dims).

    numpy builds the capsule from the zero-copy ``numpy()`` view; the capsule keeps that view, and
    so the memory, alive until the consumer releases it.
    """
    if types.is_struct(self.dtype):
        raise BufferError(f"an array of struct {self.dtype.__name__} has no DLPack element type")
    if self.device.is_cuda:
        raise BufferError(f"DLPack export of arrays on '{self.device}' needs xsim's CUDA backend")
    # Older numpy knows only `stream`; pass the newer keywords only when a consumer uses them.
    extra = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy))
             if v is not None}
    return self.numpy().__dlpack__(stream=stream, **extra)


def _dlpack_device(self: array) -> tuple[int, int]:
    """``array.__dlpack_device__``: (device type, ordinal); (1, 0) is the CPU."""
    if self.device.is_cuda:
        raise BufferError(f"DLPack export of arrays on '{self.device}' needs xsim's CUDA backend")
    return (_DLPACK_CPU, 0)


array.__dlpack__ = _dlpack
array.__dlpack_device__ = _dlpack_device


def from_dlpack(obj: Any, dtype: Any = None, requires_grad: bool = False) -> array:
    """An xsim array sharing the memory of ``obj``, any object with ``__dlpack__`` (numpy >= 1.22, torch,
    JAX, xsim), on the CPU. Trailing dims pick vector/matrix dtypes as in ``from_numpy``. A torch tensor
    is detached first (DLPack carries no gradient; use ``from_torch`` to share ``t.grad``)."""
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"from_dlpack needs an object with __dlpack__, got {type(obj).__name__}")
    if is_torch_tensor(obj):
        obj = obj.detach()
    kind, ordinal = obj.__dlpack_device__()
    if kind not in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
        raise NotImplementedError(f"from_dlpack: producer memory is on DLPack device ({kind}, {ordinal}); "
                                  "xsim shares CPU memory only so far")
    out = _shared_view(np.from_dlpack(obj), dtype, "from_dlpack")
    if requires_grad:
        out.requires_grad = True
    return out


# -- torch autograd through xsim --------------------------------------------------------------------


def _function_class():
    torch = _torch()

    class TorchFunction(torch.autograd.Function):
        """``TorchFunction.apply(fn, dtypes, *inputs)``: run ``fn`` on xsim views of ``inputs`` under a
        Tape in forward; in backward seed the outputs' gradients and run ``tape.backward``."""

        @staticmethod
        def forward(ctx, fn, dtypes, *inputs):
            arrays = []
            for i, x in enumerate(inputs):
                if not isinstance(x, torch.Tensor):
                    arrays.append(x)
                    continue
                a = _tensor_view(x.detach().contiguous(), dtypes[i] if dtypes else None, "to_torch_function")
                if ctx.needs_input_grad[2 + i]:
                    a.requires_grad = True  # an xsim-owned buffer: torch passes gradients on itself
                arrays.append(a)
            tape = Tape()
            with recording.suspended(), tape:  # its own tape, also inside a recording one
                result = fn(*arrays)
            single = isinstance(result, array)
            outs = (result,) if single else tuple(result)
            for o in outs:
                if not isinstance(o, array):
                    raise TypeError(f"to_torch_function: fn must return xsim arrays, got {type(o).__name__}")
                if o.grad is None:
                    o.requires_grad = True  # records read .grad when backward runs, so this still counts
            ctx.tape, ctx.arrays, ctx.outs = tape, arrays, outs
            ctx.shapes = [x.shape if isinstance(x, torch.Tensor) else None for x in inputs]
            ctx.save_for_backward(*(x for x in inputs if isinstance(x, torch.Tensor)))
            tensors = tuple(torch.from_numpy(o.numpy()) for o in outs)
            return tensors[0] if single else tensors

        @staticmethod
        def backward(ctx, *grad_outputs):
            _ = ctx.saved_tensors  # torch raises here if an input was modified in place since forward
            tape = ctx.tape
            tape.zero()
            for a in ctx.arrays:
                if isinstance(a, array) and a.grad is not None:
                    a.grad.zero_untracked()
            seeds = {o: g.detach().contiguous().numpy()
                     for o, g in zip(ctx.outs, grad_outputs) if g is not None}
            tape.backward(grads=seeds)
            grads = []
            for a, shape, needed in zip(ctx.arrays, ctx.shapes, ctx.needs_input_grad[2:]):
                if needed and isinstance(a, array):
                    grads.append(torch.from_numpy(a.grad.numpy().copy()).reshape(shape))
                else:
                    grads.append(None)
            return (None, None, *grads)

    return TorchFunction


_function_cls = None


def __getattr__(name: str):
    # TorchFunction subclasses torch.autograd.Function, so it is built on first use: torch stays optional.
    global _function_cls
    if name == "TorchFunction":
        if _function_cls is None:
            _function_cls = _function_class()
        return _function_cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_torch_function(fn: Callable, dtypes: list | tuple | None = None) -> Callable:
    """Wrap ``fn`` (xsim arrays in -> an xsim array or a tuple of them out, launching kernels) as a
    differentiable torch op: ``f = to_torch_function(fn); y = f(x_tensor, w_tensor)``.

    Tensor arguments reach ``fn`` as zero-copy xsim views (``dtypes[i]`` picks each one's element type;
    default: inferred from trailing dims); other arguments pass through unchanged. ``fn`` must write
    its results into fresh arrays, and intermediate arrays need ``requires_grad=True`` to carry
    gradients. The returned tensors share memory with ``fn``'s outputs.
    """
    cls = __getattr__("TorchFunction")

    def apply(*inputs):
        return cls.apply(fn, dtypes, *inputs)

    apply.__doc__ = fn.__doc__
    apply.__name__ = getattr(fn, "__name__", "xsim_function")
    return apply
