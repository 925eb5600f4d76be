"""Exchange with DLPack, and torch autograd through xsim computations (the zero-copy torch views,
``from_torch``/``to_torch``, are in ``xsim/torch_view.py``).

- ``xsim.from_dlpack(obj)`` and ``array.__dlpack__`` exchange CPU memory with any DLPack
  producer/consumer (numpy >= 1.22, torch, JAX);
- ``to_torch_function(fn)`` turns a Python function that launches xsim kernels into a
  differentiable torch op (``TorchFunction`` is the underlying ``torch.autograd.Function``).

torch is optional: it is imported only when one of these is used with a tensor. Only CPU memory
is shared so far; CUDA tensors need xsim's CUDA arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import types
from ..array import array
from ..kernels import recording
from ..torch_view import is_torch_tensor, shared_view, tensor_view, torch_module
from .tape import Tape

_DLPACK_CPU = 1  # DLDeviceType kDLCPU
_DLPACK_CUDA_HOST = 3  # kDLCUDAHost: pinned host memory, readable by the CPU


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
    out = shared_view(np.from_dlpack(obj), dtype, "from_dlpack")
    if requires_grad:
        out.requires_grad = True
    return out


# -- torch autograd through xsim --------------------------------------------------------------------


def _function_class():
    torch = torch_module()

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
                a = tensor_view(x.detach().contiguous(), dtypes[i] if dtypes else None, "to_torch_function")
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
