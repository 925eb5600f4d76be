"""``indexedarray``: an xsim array seen through per-dimension int32 index arrays (Warp's indexedarray).

Element ``(i, j)`` of ``indexedarray(data, [rows, None])`` is ``data[rows[i], j]``. Kernels read, write
and atomically update it in place, and their adjoints add into ``data.grad`` at the same positions
(the gradient of an indexed array is the same indexed view of the data's gradient). On the host it is
gathered into a new array (``numpy``, ``contiguous``, ``list``) and scattered back (``assign``,
``fill_``, ``copy`` into it). ``data[index_array]`` makes one, as in Warp.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import types
from .array import _annotation_dtype, _resolve_dtype, _subscript_annotation, _upload, array
from .types import IndexedArrayDesc, IndexedArrayType

MAX_NDIM = 4


def _check_index_array(idx, dim: int, data: array) -> None:
    where = f"indexedarray: the index array of dimension {dim}"
    if not isinstance(idx, array):
        raise TypeError(f"{where} must be an xsim array of int32, got {type(idx).__name__}")
    if idx.ndim != 1 or idx.dtype is not types.int32:
        raise TypeError(f"{where} must be a 1-d array of int32, got array(dtype="
                        f"{types.type_name(idx.dtype)}, ndim={idx.ndim})")
    if idx.device != data.device:
        raise ValueError(f"{where} is on device '{idx.device}' but the data is on '{data.device}'")
    if not idx.is_contiguous:
        raise ValueError(f"{where} must be contiguous (kernels read it as a packed int32 list); "
                         "pass idx.contiguous()")


class indexedarray:
    """``indexedarray(data, indices)``: ``data`` (an xsim array, 1-4 d) indexed by ``indices``, one
    1-d int32 array per dimension or None (a single array indexes the first dimension).

    Called without ``data`` it is a kernel annotation: ``indexedarray(dtype=float, ndim=2)`` returns
    the ``IndexedArrayType``.
    """

    is_indexed = True
    is_contiguous = False

    def __new__(cls, data=None, indices=None, dtype=None, ndim=None):
        if data is None:
            return IndexedArrayType(types.float32 if dtype is None else _annotation_dtype(dtype), ndim or 1)
        return super().__new__(cls)

    def __class_getitem__(cls, params) -> IndexedArrayType:
        """The annotation ``indexedarray[T]`` (1-d) or ``indexedarray[T, N]``."""
        t = _subscript_annotation("indexedarray", params, None)
        return IndexedArrayType(t.dtype, t.ndim)

    def __init__(self, data: array, indices: Any = None, dtype: Any = None, ndim: int | None = None):
        if not isinstance(data, array):
            raise TypeError(f"indexedarray: data must be an xsim array, got {type(data).__name__}")
        if dtype is not None and _resolve_dtype(dtype) is not data.dtype:
            raise TypeError(f"indexedarray: dtype {types.type_name(_resolve_dtype(dtype))} does not match the data's "
                            f"{types.type_name(data.dtype)}")
        if ndim is not None and ndim != data.ndim:
            raise ValueError(f"indexedarray: ndim={ndim} does not match the data's {data.ndim} dimensions")
        if isinstance(indices, array):
            indices = [indices]
        indices = list(indices or [])
        if len(indices) > data.ndim:
            raise ValueError(f"indexedarray: {len(indices)} index arrays for {data.ndim}-d data")
        indices += [None] * (data.ndim - len(indices))
        for d, idx in enumerate(indices):
            if idx is not None:
                _check_index_array(idx, d, data)
        self.data = data
        self.indices: list[array | None] = indices
        self.dtype = data.dtype
        self.ndim = data.ndim
        self.device = data.device
        self.shape: tuple[int, ...] = tuple(data.shape[d] if idx is None else idx.size for d, idx in enumerate(indices))
        self.size = int(np.prod(self.shape))
        self._desc = self._make_desc(data)

    def _make_desc(self, data: array) -> IndexedArrayDesc:
        d = IndexedArrayDesc()
        d.data = data.ptr
        d.shape[:] = self.shape + (1,) * (MAX_NDIM - self.ndim)
        d.strides[:] = data.strides + (0,) * (MAX_NDIM - self.ndim)
        for i, idx in enumerate(self.indices):
            d.indices[i] = None if idx is None else idx.ptr
        return d

    def _over(self, data: array) -> indexedarray:
        """The same indices over other data of the same shape (the gradient, a snapshot)."""
        return indexedarray(data, self.indices)

    @property
    def desc(self) -> IndexedArrayDesc:
        return self._desc

    # -- gradients: those of the data, at the indexed positions -----------------------------------

    @property
    def requires_grad(self) -> bool:
        return self.data.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.data.requires_grad = value

    @property
    def grad(self) -> indexedarray | None:
        """The indexed view of ``data.grad`` (None when the data has no gradient)."""
        g = self.data.grad
        return None if g is None else self._over(g)

    @property
    def retain_grad(self) -> bool:
        """Always False: a view does not retain its gradient (``array.retain_grad``; Warp's rule for views)."""
        return False

    # -- host access: gather and scatter ----------------------------------------------------------

    def _ix(self) -> tuple:
        """The numpy index of the selected elements: an open mesh of each dimension's positions."""
        return np.ix_(*(np.arange(n) if idx is None else idx.numpy().astype(np.int64)
                        for n, idx in zip(self.data.shape, self.indices)))

    def _check_positions(self) -> None:
        for d, (n, idx) in enumerate(zip(self.data.shape, self.indices)):
            if idx is not None and idx.size and (idx.numpy().min() < 0 or idx.numpy().max() >= n):
                raise IndexError(f"indexedarray: the index array of dimension {d} holds {idx.numpy().min()}.."
                                 f"{idx.numpy().max()}, outside the data's {n} entries")

    def numpy(self) -> np.ndarray:
        """A new numpy array of the selected elements: shape + component dims."""
        self._check_positions()
        return np.array(self.data.numpy()[self._ix()])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def list(self) -> list:
        """All elements in row-major order as Python values."""
        return self.contiguous().list()

    def contiguous(self) -> array:
        """A new packed array of the selected elements; recorded on the active tape like ``clone``, so
        gradients flow back into ``data``."""
        from .autodiff.ops import copy
        out = array(shape=self.shape, dtype=self.dtype, device=self.device, requires_grad=self.requires_grad)
        copy(out, self)
        return out

    def clone_untracked(self) -> array:
        return array(self.numpy(), dtype=self.dtype, device=self.device)

    def _scatter(self, value, accumulate: bool = False) -> None:
        """Write (or add) ``value``, broadcastable to the selected elements, into ``data``."""
        self._check_positions()
        data = self.data
        host = data.numpy() if data._host is not None else data.numpy().copy()
        value = np.broadcast_to(np.asarray(value, dtype=self.dtype._np), self.shape + self.dtype._shape)
        if accumulate:
            np.add.at(host, self._ix(), value)  # repeated indices add up
        else:
            host[self._ix()] = value
        if data._host is None:
            _upload(data, host)

    def copy_from_untracked(self, src, dst_offset: int = 0, src_offset: int = 0, count: int | None = None, *,
                            accumulate: bool = False) -> None:
        if dst_offset or src_offset or count is not None:
            raise ValueError("copying into an indexedarray takes whole arrays: offsets and count are not supported")
        if src.shape != self.shape:
            raise ValueError(f"cannot copy an array of shape {src.shape} into an indexedarray of shape {self.shape}")
        self._scatter(np.asarray(src), accumulate)

    def fill_untracked(self, value) -> None:
        self._scatter(value)

    def zero_untracked(self) -> None:
        self._scatter(np.zeros((), self.dtype._np))

    def assign(self, src) -> indexedarray:
        """Copy ``src`` (an array of this shape, or host data) into the selected elements of ``data``."""
        from .autodiff.ops import copy
        if not isinstance(src, (array, indexedarray)):
            src = array(src, dtype=self.dtype, shape=self.shape, device=self.device)
        copy(self, src)
        return self

    def fill_(self, value) -> indexedarray:
        """Set every selected element to ``value``."""
        from .autodiff.ops import fill_
        fill_(self, value)
        return self

    def zero_(self) -> indexedarray:
        """Set every selected element to zero."""
        return self.fill_(0)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"indexedarray({np.array2string(self.numpy(), separator=', ', threshold=64)}, shape={self.shape}, "
                f"dtype={types.type_name(self.dtype)}, device={self.device})")


def _fixed_ndim(n: int):
    def make(*args, **kwargs):
        kwargs["ndim"] = n
        return indexedarray(*args, **kwargs)

    make.__name__ = make.__qualname__ = f"indexedarray{n}d"
    make.__doc__ = f"A {n}-d indexedarray (``indexedarray{n}d(data, indices)``), or its annotation " \
                   f"``indexedarray{n}d(dtype=T)``."
    return make


indexedarray1d, indexedarray2d, indexedarray3d, indexedarray4d = (_fixed_ndim(n) for n in (1, 2, 3, 4))


def index_with_arrays(a: array, key: tuple) -> indexedarray:
    """``a[key]`` where ``key`` holds int32 index arrays (and ints or slices): slices and ints make a view
    first, then the index arrays select along the dimensions that remain (Warp's ``arr[idx]``)."""
    view_key, indices = [], []
    for k in key:
        if isinstance(k, array):
            view_key.append(slice(None))
            indices.append(k)
        else:
            view_key.append(k)
            if not isinstance(k, (int, np.integer)):
                indices.append(None)
    view = a[tuple(view_key)] if any(not (isinstance(k, slice) and k == slice(None)) for k in view_key) else a
    return indexedarray(view, indices)
