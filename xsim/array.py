"""``array``: typed, strided, 1-4 dimensional buffers on a device, with an optional ``grad``.

An array of element type ``dtype`` stores, on the CPU, one numpy ndarray of the dtype's
component scalar holding ``shape + dtype._shape`` (a ``vec3`` adds a trailing ``(3,)``, a
``mat33`` ``(3, 3)``, a transform ``(7,)``); arrays of structs use the struct's numpy record
dtype. Components of one element are always packed; the outer dims may have any byte strides,
which is what lets slices and numpy views share memory.

Native kernels read ``array._desc`` (an ``ArrayDesc``: data pointer, shape, byte strides),
built once per array. The tape-aware ``assign``/``fill_``/``zero_`` live in the autodiff
layer; this module gives them the untracked operations (``*_untracked``) they wrap.
"""

from __future__ import annotations

import ctypes
import math
import operator
import os
import sys
import typing
import weakref
from typing import Any

import numpy as np

from . import capture, config, types
from .device import Device, DeviceBuffer, get_device, get_stream, require_cuda
from .errors import ArrayShapeError, warn_to_stderr
from .types import ArrayDesc, ArrayType

MAX_NDIM = 4
RETAIN_GRAD = 1  # ArrayDesc.flags bit (ARRAY_RETAIN_GRAD in native/xsim_core.h)


def _keep_freed_host_memory() -> None:
    """Let glibc's malloc keep freed memory for reuse, as a caching allocator does.

    Rollouts on a tape allocate fresh state and gradient arrays every step; served as new mmaps,
    each one page-faults its memory in again, and page faults serialise the OpenMP threads (the
    64x64 cloth's 20-step backward: 756 ms -> 181 ms on 2 threads). Set XSIM_HOST_MEMORY_CACHE=0
    to keep the default policy (memory returned to the OS at once)."""
    if os.environ.get("XSIM_HOST_MEMORY_CACHE", "1") == "0" or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)   # blocks up to 1 GiB come from the heap...
    libc.mallopt(m_trim_threshold, 1 << 31)   # ...which keeps up to 2 GiB of freed memory


_keep_freed_host_memory()


def _resolve_dtype(dtype) -> Any:
    """The xsim element type for ``dtype``: an xsim type, Python float/int/bool or a numpy scalar dtype."""
    if dtype is None:
        return None
    try:
        t = types.resolve(dtype)
        if not types.is_value_type(t):
            t = types.scalar_from_numpy(np.dtype(dtype))
    except TypeError:
        raise TypeError(f"array dtype must be an xsim value type, Python float/int/bool or a numpy scalar dtype, "
                        f"got {dtype!r}") from None
    return t


def _outer_shape(shape) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as a tuple, checked to have 1 to 4 non-negative dims."""
    shape = (operator.index(shape),) if np.ndim(shape) == 0 else tuple(operator.index(s) for s in shape)
    _check_ndim(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"Array shapes must be non-negative, got {shape}")
    return shape


def _check_ndim(shape: tuple[int, ...]) -> None:
    if not 1 <= len(shape) <= MAX_NDIM:
        raise ValueError(f"xsim arrays have 1 to {MAX_NDIM} dimensions, got shape {shape} ({len(shape)} dims)")


def _python_scalar(dt: np.dtype) -> Any:
    """Scalar type for data that came from Python numbers: floats become float32, ints int32 (Warp's rule)."""
    if dt.kind == "f":
        return types.float32
    if dt.kind in "iu":
        return types.int32
    return types.scalar_from_numpy(dt)


def _is_xsim_value(value) -> bool:
    return types.is_composite(type(value)) or types.is_struct(type(value))


def _infer_python_dtype(data) -> Any:
    """The element type of nested lists of xsim values (``[vec3(...), ...]`` -> vec3), else None."""
    leaf = data
    while isinstance(leaf, (list, tuple)) and len(leaf) > 0:
        leaf = leaf[0]
    return type(leaf) if _is_xsim_value(leaf) else None


def _infer_composite(arr: np.ndarray) -> Any:
    """from_numpy's rule: (..., k, k) with ndim >= 3 and k in 2..4 is a matrix, (..., n) with ndim >= 2 and
    n in 2..4 a vector, anything else a scalar array."""
    scalar = types.scalar_from_numpy(arr.dtype)
    if arr.ndim >= 3 and arr.shape[-1] == arr.shape[-2] and 2 <= arr.shape[-1] <= 4:
        return types.matrix(arr.shape[-2:], scalar)
    if arr.ndim >= 2 and 2 <= arr.shape[-1] <= 4:
        return types.vector(arr.shape[-1], scalar)
    return scalar


def _value_dtype(value) -> Any:
    """The element type a fill value implies (``full`` without a dtype)."""
    if _is_xsim_value(value):
        return type(value)
    if isinstance(value, np.generic):
        return types.scalar_from_numpy(value.dtype)
    if isinstance(value, (bool, int, float)):
        return types.resolve(type(value))
    v = np.asarray(value)
    if v.dtype.kind in "biuf" and 1 <= v.ndim <= 2 and v.size:  # a vector or matrix of any size, as in Warp
        scalar = types.scalar_from_numpy(v.dtype) if isinstance(value, np.ndarray) else _python_scalar(v.dtype)
        return types.vector(v.shape[0], scalar) if v.ndim == 1 else types.matrix(v.shape, scalar)
    raise TypeError(f"cannot infer an array dtype from fill value {value!r}: pass dtype=")


def _record(value):
    """Struct instances (in lists) as the tuples numpy builds records from; tuples are already records. An
    array field becomes its native view's record (``types._desc_record``; zeros for None)."""
    if types.is_struct(type(value)):
        return tuple(_record(getattr(value, f)) if types.is_struct(t) else
                     _desc_values(getattr(value, f), t) if isinstance(t, ArrayType) else np.asarray(getattr(value, f))
                     for f, t in type(value)._fields.items())
    if isinstance(value, list):
        return [_record(v) for v in value]
    return value


def _desc_values(value, t: ArrayType) -> tuple:
    desc = t.desc_ctype()() if value is None else value._desc
    return tuple(list(v) if isinstance(v := getattr(desc, n), ctypes.Array) else v or 0 for n, _ in desc._fields_)


def _held_arrays(value, out: dict) -> dict:
    """The arrays the struct instances in ``value`` (one, or lists of them) refer to, by the bytes of their
    native views: what an array of structs holding arrays keeps alive and hands back for its elements."""
    if types.is_struct(type(value)):
        for f, t in type(value)._fields.items():
            field = getattr(value, f)
            if isinstance(t, ArrayType) and field is not None:
                out[bytes(field._desc)] = field
            elif types.is_struct(t) and t._has_arrays:
                _held_arrays(field, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _held_arrays(v, out)
    return out


def _holder(a) -> Any:
    """The array whose memory ``a`` views (itself if its own): where an array of structs holding arrays keeps
    the arrays its elements refer to (``_held``)."""
    while isinstance(getattr(a, "_owner", None), array):
        a = a._owner
    return a


def held_arrays(a) -> dict:
    """The arrays that the elements of ``a`` (an array of structs holding arrays) may refer to, by the bytes
    of their native views."""
    return _holder(a).__dict__.get("_held", {})


def _hold(a, held: dict) -> None:
    """Keep the arrays of ``held`` alive with array ``a`` (of structs holding arrays) and its views."""
    for arr in held.values():
        if arr.device != a.device:
            raise ValueError(f"an array of {a.dtype.__name__} on {a.device} cannot hold elements referring to an "
                             f"array on {arr.device}: a kernel reads them where the outer array is")
    if held:
        root = _holder(a)
        root.__dict__.setdefault("_held", {}).update(held)


def _struct_value(t, rec, held: dict | None = None) -> Any:
    """A struct instance holding a copy of numpy record ``rec``; an array field is the array (of ``held``,
    by its native view) that the record refers to."""
    values = {}
    for f, ft in t._fields.items():
        if isinstance(ft, ArrayType):
            key = rec[f].tobytes()
            if not np.asarray(rec[f]["data"]).any():
                values[f] = None
                continue
            if held is None or key not in held:
                raise ValueError(f"struct {t.__name__} field '{f}' refers to an array view made inside a kernel "
                                 "or written as raw bytes, which has no Python array to hand back")
            values[f] = held[key]
        else:
            values[f] = _element_value(ft, rec[f], held)
    return t(**values)


def _array_math():
    from .autodiff import array_math  # kernels sit above the array layer: imported when first used
    return array_math


def _element_value(t, elem, held: dict | None = None) -> Any:
    """One element as a Python value: a numpy scalar, or a copy as an xsim vector/matrix/.../struct (of an
    array of structs holding arrays, the arrays of ``held``: ``_struct_value``)."""
    if t._kind == "scalar":
        return t._load(elem)[()] if t is types.bfloat16 else elem
    if t._kind == "struct":
        return _struct_value(t, elem, held)
    return t._wrap(np.array(elem))


def _packed(host: np.ndarray, component_shape: tuple[int, ...]) -> bool:
    """True when the components of each element are contiguous and aligned, as native code expects."""
    step = host.itemsize
    for n, stride in zip(reversed(component_shape), reversed(host.strides)):
        if n > 1 and stride != step:
            return False
        step *= n
    return host.flags.aligned


def _fit_shape(src: np.ndarray, dtype, shape) -> np.ndarray:
    """``src`` (already of the component numpy dtype) reshaped to outer shape + component shape."""
    cs = dtype._shape
    k = types.num_components(dtype)
    if shape is not None:
        target = _outer_shape(shape) + cs
        if src.size == math.prod(target):
            return src.reshape(target)
        if src.ndim == 0 or src.shape == cs:
            return np.array(np.broadcast_to(src, target))
        raise ValueError(f"data of shape {src.shape} does not fit array shape {target[:len(target) - len(cs)]} "
                         f"of {types.type_name(dtype)} (expected {math.prod(target)} components, "
                         f"got {src.size})")
    if not cs:
        return src.reshape(1) if src.ndim == 0 else src
    out = None
    if src.ndim >= len(cs) and src.shape[src.ndim - len(cs):] == cs:
        out = src
    elif src.ndim:  # Warp's rule: inner dims of length 1 dropped, then a last dim of k or a multiple of k
        while src.ndim > 1 and src.shape[-1] == 1:
            src = src[..., 0]
        last = src.shape[-1]
        if last % k == 0:
            out = src.reshape(src.shape[:-1] + ((last // k,) if last != k else ()) + cs)
    if out is not None:
        return out.reshape((1,) + cs) if out.ndim == len(cs) else out
    raise ValueError(f"data of shape {src.shape} does not fit dtype {types.type_name(dtype)}: expected shape "
                     f"(..., {', '.join(map(str, cs))}) or a flat length divisible by {k}")


def _shares_memory(host: np.ndarray, data) -> bool:
    """Whether ``host`` views the memory of ``data``: a numpy array, or any other buffer numpy reads in place (a
    USD Vt array, a memoryview, bytes), which ``array(data)`` must copy as it copies a numpy array."""
    if isinstance(data, np.ndarray):
        return np.may_share_memory(host, data)
    if host.flags.owndata:
        return False
    try:
        return np.may_share_memory(host, np.asarray(data))
    except (TypeError, ValueError):  # not a buffer numpy can view: host was built from its values
        return False


def _host_from_data(data, dtype, shape, copy: bool) -> tuple[Any, np.ndarray, Any]:
    """(dtype, host ndarray, owner) for array construction from ``data``; owner is set when memory is shared."""
    if isinstance(data, array):
        dtype = dtype or data.dtype
        source = data
        data = data.numpy()
    else:
        source = data
    if isinstance(data, np.ndarray):
        src = data
        if dtype is None:
            dtype = types.scalar_from_numpy(src.dtype)
    else:
        dtype = dtype or _infer_python_dtype(data)
        if dtype is not None and types.is_struct(dtype):
            src = np.array(_record(data), dtype=dtype._np)
        elif dtype is not None:
            src = dtype._scalar._store(data)
        else:
            src = np.asarray(data)
            dtype = _python_scalar(src.dtype)
    if src.dtype != dtype._np:
        src = np.asarray(dtype._scalar._store(src), order="C")
    host = _fit_shape(src, dtype, shape)
    if not _packed(host, dtype._shape):
        host = np.ascontiguousarray(host)
    shared = _shares_memory(host, data)
    if shared and copy:
        host, shared = np.array(host, order="C"), False
    return dtype, host, (source if shared else None)


def _raw_host(ptr: int | None, dtype, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A numpy view of host memory at ``ptr`` holding ``dtype`` elements at outer ``shape`` and byte
    ``strides`` (its own empty array when there are no elements). The memory is not touched."""
    layout = tuple(strides) + _component_strides(dtype)
    full = tuple(shape) + dtype._shape
    if math.prod(full) == 0:
        return np.empty(full, dtype._np)
    lo = sum(min(0, (n - 1) * st) for n, st in zip(full, layout))
    hi = sum(max(0, (n - 1) * st) for n, st in zip(full, layout)) + dtype._np.itemsize
    buf = (ctypes.c_ubyte * (hi - lo)).from_address(ptr + lo)
    return np.ndarray(full, dtype._np, buffer=buf, offset=-lo, strides=layout)


def _make_desc(ptr: int | None, shape: tuple[int, ...], strides: tuple[int, ...]) -> ArrayDesc:
    d = ArrayDesc()
    d.data = ptr
    pad = MAX_NDIM - len(shape)
    d.shape[:] = shape + (1,) * pad
    d.strides[:] = strides + (0,) * pad
    return d


def _key_offset(key: tuple, shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Byte offset of the first element of the non-empty view ``key`` (ints and slices over the
    outer dims, as ``_check_key`` returns them) of an array of ``shape`` and byte ``strides``."""
    off = 0
    for k, n, st in zip(key, shape, strides):
        if isinstance(k, slice):
            off += k.indices(n)[0] * st
        else:
            off += (k + n if k < 0 else k) * st
    return off


def _check_key(key, ndim: int) -> tuple:
    key = key if isinstance(key, tuple) else (key,)
    if len(key) > ndim:
        raise IndexError(f"too many indices for a {ndim}-d array: got {len(key)}")
    for k in key:
        if not isinstance(k, slice) and (isinstance(k, bool) or not isinstance(k, (int, np.integer))):
            raise TypeError(f"array indices must be integers or slices over the outer dims, got {k!r}")
    return key


class array:
    _version = 0          # writes counted by mark_written (see ``version``)
    _last_writer = None   # the kernel or op that wrote it last (named in tape errors)
    _unwritable = None    # set in _set_layout: why a kernel must not write it
    # An intermediate's gradient (``intermediate``) is allocated when first used, and the backward
    # pass gives its buffer back once no earlier record needs it: `_requires_grad` with `_grad` None.
    _intermediate = False
    _written_first = False  # an intermediate whose elements are all written on a tape before being read
    _scratch = False  # an intermediate whose values no adjoint reads: later launches may overwrite it
    _grad_source = None   # a view of an intermediate whose grad is pending: (parent, key)
    _is_read = False      # read by a launch or op a Tape recorded (``config.verify_autograd_array_access``)
    _capacity = None      # bytes reachable from ptr, when the caller of array(ptr=...) said so
    """A typed array on a device (``xsim.array(data, dtype, shape, device, requires_grad)``).

    Called with neither ``data`` nor ``shape`` it is a kernel annotation: ``array(dtype=vec3)``
    and ``array(dtype=float, ndim=2)`` return the ``ArrayType``.
    """

    def __new__(cls, data=None, dtype=None, shape=None, device=None, requires_grad=False, ndim=None, copy=True,
                **memory):
        if data is None and shape is None and memory.get("ptr") is None:
            return ArrayType(types.float32 if dtype is None else _annotation_dtype(dtype), ndim or 1)
        return super().__new__(cls)

    def __class_getitem__(cls, params) -> ArrayType:
        """The annotation ``array[T]`` (1-d) or ``array[T, N]``."""
        return _subscript_annotation("array", params, None)

    def __init__(self, data: Any = None, dtype: Any = None, shape: int | tuple[int, ...] | None = None,
                 device: str | Device | None = None, requires_grad: bool = False, ndim: int | None = None,
                 copy: bool = True, *, retain_grad: bool = False, strides: tuple[int, ...] | None = None,
                 ptr: int | None = None,
                 capacity: int | None = None, deleter: Any = None):
        """``ptr``: wrap memory at that address (on ``device``) of ``shape`` and byte ``strides``, as Warp's
        ``array(ptr=...)``: no copy; the memory stays the caller's unless ``deleter(ptr, capacity)`` is given,
        which is called once this array and its views are gone. ``strides`` without ``ptr``: a new zeroed
        array laid out with those byte strides. ``dtype=typing.Any`` infers the type from ``data``."""
        dev = get_device(device)
        dtype = _resolve_dtype(None if dtype is typing.Any else dtype)
        if ptr is not None:
            if data is not None:
                raise RuntimeError("xsim.array: construct an array from either data or ptr, not both")
            self._init_from_ptr(ptr, dtype or types.float32, shape, strides, capacity, dev, deleter)
            if requires_grad:
                self.requires_grad = True
            self.retain_grad = retain_grad
            return
        if strides is not None and data is None:  # this object becomes what zeros(strides=...) makes
            self.__dict__.update(zeros(shape, dtype or types.float32, dev, requires_grad, strides=strides,
                                       retain_grad=retain_grad).__dict__)
            return
        if data is None:
            dtype = dtype or types.float32
            host, owner = np.zeros(_outer_shape(shape) + dtype._shape, dtype._np), None
        else:
            dtype, host, owner = _host_from_data(data, dtype, shape, copy)
        if ndim is not None and host.ndim - len(dtype._shape) != ndim:
            raise ValueError(f"array data has {host.ndim - len(dtype._shape)} dims but ndim={ndim} was given")
        self._init(host, dtype, dev, owner, requires_grad)
        if types.is_struct(dtype) and dtype._has_arrays:
            _hold(self, held_arrays(data) if isinstance(data, array) else
                  _held_arrays(data, {}))
        if retain_grad:
            self.retain_grad = True

    @classmethod
    def _from_host(cls, host: np.ndarray, dtype, device: Device, owner=None, requires_grad: bool = False) -> array:
        out = object.__new__(cls)
        out._init(host, dtype, device, owner, requires_grad)
        return out

    @classmethod
    def _from_device(cls, ptr: int, dtype, device: Device, shape: tuple[int, ...], strides: tuple[int, ...],
                     owner) -> array:
        """A view of GPU memory at ``ptr`` (outer ``shape`` and byte ``strides``; components packed), kept
        alive by ``owner`` (a parent array, a DeviceBuffer, a torch tensor): no copy, no grad."""
        out = object.__new__(cls)
        contiguous = _layout_of(dtype, shape, strides).flags.c_contiguous
        out._set_layout(dtype, device, shape, strides, ptr, contiguous, None, owner)
        out._grad, out._requires_grad = None, False
        return out

    def _init_from_ptr(self, ptr: int, dtype, shape, strides, capacity: int | None, device: Device,
                       deleter) -> None:
        """Wrap ``ptr`` (see ``__init__``): a numpy view of it on the CPU, a device view on a GPU."""
        if shape is None:
            raise TypeError("xsim.array(ptr=...) needs the shape of the memory it wraps")
        shape = _outer_shape(shape)
        if strides is None:
            strides = _contiguous_strides(dtype, shape)
        else:
            strides = tuple(operator.index(st) for st in strides)  # numpy int32 strides as Python ints
            if len(strides) != len(shape):
                raise ValueError(f"Invalid number of strides, expected {len(shape)} strides, got {len(strides)} "
                                 f"(array strides {strides} for shape {shape})")
        extent = _extent(dtype, shape, strides)
        if capacity is not None and capacity < extent:
            raise ValueError(f"xsim.array(ptr=...): capacity {capacity} bytes is less than the {extent} bytes that "
                             f"shape {shape} with strides {strides} reach")
        if not ptr and extent:
            raise ValueError(f"xsim.array(ptr=...): address 0 holds no memory for shape {shape}")
        contiguous = strides == _contiguous_strides(dtype, shape)
        host = None if device.is_cuda else _raw_host(int(ptr), dtype, shape, strides)
        self._set_layout(dtype, device, shape, strides, int(ptr), contiguous, host, None)
        self._grad, self._requires_grad = None, False
        if capacity is not None:
            self._capacity = int(capacity)
        if deleter is not None and self.ptr is not None:
            weakref.finalize(self, deleter, self.ptr, self.capacity)

    def _init(self, host: np.ndarray, dtype, device: Device, owner, requires_grad: bool) -> None:
        nd = host.ndim - len(dtype._shape)
        _check_ndim(host.shape[:nd])
        if device.is_cuda:
            # GPU memory: a packed copy of `host` in an allocation freed with the last array using it
            host = np.ascontiguousarray(host)
            owner = DeviceBuffer(device, host.nbytes)
            require_cuda(device).upload(device.ordinal, owner.ptr, host.ctypes.data, host.nbytes)
            self._set_layout(dtype, device, host.shape[:nd], host.strides[:nd], owner.ptr, True, None, owner)
        else:
            self._set_layout(dtype, device, host.shape[:nd], host.strides[:nd], host.__array_interface__["data"][0],
                             host.flags.c_contiguous, host, owner)
        self._grad: array | None = None
        self._requires_grad = False
        if requires_grad:
            self.requires_grad = True

    def _set_layout(self, dtype, device: Device, shape, strides, ptr: int, contiguous: bool, host, owner) -> None:
        self.dtype = dtype
        self.device = device
        self.shape: tuple[int, ...] = tuple(shape)
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.strides: tuple[int, ...] = tuple(strides)
        self.ptr: int | None = ptr if self.size else None  # Warp's: an empty array addresses no memory
        self.is_contiguous: bool = contiguous
        self._host = host     # the numpy view of CPU memory; None on a GPU
        # why a kernel must not write it (launch refuses it as an output), or None
        self._unwritable = ("read-only" if host is not None and not host.flags.writeable else
                            "a broadcast view (a stride of 0: many elements share one memory slot)"
                            if any(st == 0 and n > 1 for n, st in zip(self.shape, self.strides)) else None)
        self._owner = owner  # whatever owns shared memory (numpy array, parent array, DeviceBuffer): keeps it alive
        self._desc = _make_desc(self.ptr, self.shape, self.strides)
        self._desc_bytes = bytes(self._desc)  # what a CPU launch packs (``launch._launch_fast``)
        self._range = None  # the addresses its elements cover (``_byte_range``), once asked for

    # -- descriptors and gradients ------------------------------------------------------------

    @property
    def desc(self) -> ArrayDesc:
        """The native view (data pointer, shape padded with 1s, byte strides padded with 0s), built once."""
        return self._desc

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = bool(value)
        if value and not self._requires_grad:
            self._grad = zeros(self.shape, self.dtype, self.device)
        elif not value:
            self._grad = None
            self._set_desc_flags(0)
        self._requires_grad = value

    @property
    def retain_grad(self) -> bool:
        """Whether the backward pass keeps this array's gradient where a kernel's store adjoint would zero it
        (as in Warp: to read an intermediate's gradient afterwards; an element written more than once
        then passes its gradient to every write). Only an array that requires grad can retain it."""
        return bool(self._desc.flags & RETAIN_GRAD)

    @retain_grad.setter
    def retain_grad(self, value: bool) -> None:
        if value and not self._requires_grad:
            raise ValueError("retain_grad=True requires requires_grad=True: only an array with a gradient can retain it")
        self._set_desc_flags(RETAIN_GRAD if value else 0)

    def _set_desc_flags(self, flags: int) -> None:
        """Set the native view's flags (``RETAIN_GRAD``), keeping its packed bytes in step."""
        self._desc.flags = flags
        self._desc_bytes = bytes(self._desc)

    @property
    def grad(self) -> array | None:
        """The gradient array (same shape, dtype and device), or None."""
        g = self._grad
        if g is None and self._requires_grad:  # an intermediate's pending gradient: zeros
            src = self._grad_source
            g = self._grad = src[0].grad[src[1]] if src is not None else zeros(self.shape, self.dtype, self.device)
        return g

    @grad.setter
    def grad(self, grad: array | None) -> None:
        self._intermediate = False  # a gradient the caller chose is theirs: the backward pass keeps it
        if grad is None:
            self._grad, self._requires_grad = None, False
            self._set_desc_flags(0)
            return
        if not isinstance(grad, array):
            raise TypeError(f"array.grad must be an xsim array or None, got {type(grad).__name__}")
        if grad.dtype is not self.dtype or grad.shape != self.shape or grad.device != self.device:
            raise ValueError(
                f"gradient must match its array: expected shape {self.shape}, dtype {types.type_name(self.dtype)}, "
                f"device {self.device}; got shape {grad.shape}, dtype {types.type_name(grad.dtype)}, "
                f"device {grad.device}")
        self._grad, self._requires_grad = grad, True

    # -- read/write tracking on a tape (Warp's ``verify_autograd_array_access``) --------------------

    def _lineage(self):
        """This array and the arrays it views, innermost first."""
        a = self
        while isinstance(a, array):
            yield a
            a = a._owner

    def mark_init(self) -> None:
        """Forget that this array (and the arrays it views) was read on a tape."""
        for a in self._lineage():
            a._is_read = False

    def mark_read(self) -> None:
        """Mark this array, and every array it is a view of, as read by a recorded launch or op."""
        for a in self._lineage():
            a._is_read = True

    def mark_write(self, arg_name: str | None = None, kernel_name: str | None = None, filename: str | None = None,
                   lineno: int | None = None, operation: str | None = None) -> None:
        """Warn (on stderr, through ``warnings``) when this array, or an array it views, was read by a
        launch or op recorded earlier: overwriting it now changes what that record's backward pass sees."""
        if not any(a._is_read for a in self._lineage()):
            return
        where = f" at {filename}:{lineno}" if filename is not None and lineno is not None else ""
        if kernel_name is not None:
            who = f" passed to argument {arg_name} in kernel {kernel_name}{where}"
            what = "is being written to but has already been read from"
        else:
            who = ""
            what = (f"is being written to by {operation}{where} but has already been read from" if operation else
                    "is being written to but has already been read from")
        warn_to_stderr(f"Array {self}{who} {what} in a previous launch. This may corrupt gradient computation "
                       "in the backward pass.", stacklevel=3)

    # -- arithmetic, as Warp's arrays have it: element-wise kernels, recorded on the tape (autodiff/array_math.py)

    __array_priority__ = 1000.0  # numpy scalars and arrays leave ``s * a`` to ``a.__rmul__``

    def __add__(self, other):
        return _array_math().apply("add", self, other)

    def __radd__(self, other):
        return _array_math().apply("add", self, other, reflected=True)

    def __iadd__(self, other):
        return _array_math().apply_in_place("add", self, other)

    def __sub__(self, other):
        return _array_math().apply("sub", self, other)

    def __rsub__(self, other):
        return _array_math().apply("sub", self, other, reflected=True)

    def __isub__(self, other):
        return _array_math().apply_in_place("sub", self, other)

    def __mul__(self, other):
        return _array_math().apply("mul", self, other)

    def __rmul__(self, other):
        return _array_math().apply("mul", self, other, reflected=True)

    def __imul__(self, other):
        return _array_math().apply_in_place("mul", self, other)

    def __truediv__(self, other):
        return _array_math().apply("div", self, other)

    def __rtruediv__(self, other):
        return _array_math().apply("div", self, other, reflected=True)

    def __itruediv__(self, other):
        return _array_math().apply_in_place("div", self, other)

    def __floordiv__(self, other):
        return _array_math().apply("floordiv", self, other)

    def __rfloordiv__(self, other):
        return _array_math().apply("floordiv", self, other, reflected=True)

    def __ifloordiv__(self, other):
        return _array_math().apply_in_place("floordiv", self, other)

    def __mod__(self, other):
        return _array_math().apply("mod", self, other)

    def __rmod__(self, other):
        return _array_math().apply("mod", self, other, reflected=True)

    def __imod__(self, other):
        return _array_math().apply_in_place("mod", self, other)

    def __pow__(self, other):
        return _array_math().apply("pow", self, other)

    def __rpow__(self, other):
        return _array_math().apply("pow", self, other, reflected=True)

    def __ipow__(self, other):
        return _array_math().apply_in_place("pow", self, other)

    def __neg__(self):
        return _array_math().apply("neg", self, unary=True)

    def __pos__(self):
        return _array_math().apply("pos", self, unary=True)

    # -- host access ----------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """A zero-copy numpy view: shape + component dims (a struct array gives its record view);
        for an array on a GPU, a host copy of that shape."""
        return self._host if self._host is not None else _download(self)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        host = self.numpy()
        out = host if dtype is None else host.astype(dtype, copy=False)
        return out.copy() if copy and out is self._host else out

    @property
    def __array_interface__(self) -> dict:
        """numpy's array interface of a CPU array (its memory, shared); absent on a GPU, where numpy
        falls back to ``__array__``'s host copy."""
        if self._host is None:
            raise AttributeError("__array_interface__ exists only for arrays in CPU memory")
        out = self._host.__array_interface__
        if not self.size:  # numpy's strides for empty dims vary; Warp's are the row-major ones of the shape
            out = {**out, "strides": _contiguous_strides(self.dtype, self.shape) + _component_strides(self.dtype)}
        return out

    @property
    def _ref(self):
        """What keeps shared memory alive: the numpy array or array this one views (Warp's ``_ref``)."""
        return self._owner

    def list(self) -> list:
        """All elements in row-major order as Python values (int/float/bool for scalars, as Warp's; vec3,
        structs...)."""
        flat = self.numpy().reshape((self.size,) + self.dtype._shape)
        if self.dtype._kind == "scalar":
            return [_element_value(self.dtype, e).item() for e in flat]
        held = held_arrays(self)
        return [_element_value(self.dtype, e, held) for e in flat]

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self):
        for i in range(self.shape[0]):
            yield self[i]

    def __getitem__(self, key):
        if isinstance(key, array) or isinstance(key, tuple) and any(isinstance(k, array) for k in key):
            from .indexedarray import index_with_arrays  # arr[idx]: Warp's indexed view
            return index_with_arrays(self, key if isinstance(key, tuple) else (key,))
        key = _check_key(key, self.ndim)
        if self._host is None:
            view = _device_getitem(self, key)
            if not isinstance(view, array):
                return view
        else:
            sub = self._host[key]
            if sub.ndim == len(self.dtype._shape):
                return _element_value(self.dtype, sub, held_arrays(self))
            view = object.__new__(array)
            nd = sub.ndim - len(self.dtype._shape)
            # the view's address from the key (numpy's __array_interface__ costs microseconds a call)
            ptr = self.ptr + _key_offset(key, self.shape, self.strides) if sub.size else \
                sub.__array_interface__["data"][0]
            view._set_layout(self.dtype, self.device, sub.shape[:nd], sub.strides[:nd], ptr, sub.flags.c_contiguous,
                             sub, self)
            view._grad, view._requires_grad = None, False
        if self._grad is not None:
            view._grad, view._requires_grad = self._grad[key], True
        elif self._requires_grad:  # an intermediate's view: its grad is the parent's, once that exists
            view._grad_source, view._requires_grad, view._intermediate = (self, key), True, True
            view._scratch = self._scratch  # overwritten with its parent, and read as such
        return view

    def __setitem__(self, key, value) -> None:
        key = _check_key(key, self.ndim)
        if types.is_struct(self.dtype) and self.dtype._has_arrays:
            _hold(self, _held_arrays(value, {}) if not isinstance(value, array) else
                  held_arrays(value))
        if self._host is None:
            host = self.numpy()
            host[key] = self._host_value(value)
            _upload(self, host)
        else:
            self._host[key] = self._host_value(value)

    def _host_value(self, value):
        if isinstance(value, array):
            return value.numpy()
        if types.is_struct(self.dtype):
            return _record(value)
        if len(self.dtype._shape) > 1 and isinstance(value, (list, tuple, np.ndarray)) and not _is_xsim_value(value):
            v = np.asarray(value)
            if v.ndim == 1 and v.size == types.num_components(self.dtype):  # a matrix as its flat components
                return self._host_value(v.reshape(self.dtype._shape))
        return self.dtype._scalar._store(value) if self.dtype._scalar is types.bfloat16 else value

    def __str__(self) -> str:
        """The values as numpy prints them (Warp's ``str(array)``: ``print(f"loss {loss}")`` shows ``[0.25]``)."""
        return str(self.numpy())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", threshold=64, prefix="array(")
        return f"array({body}, shape={self.shape}, dtype={types.type_name(self.dtype)}, device={self.device})"

    # -- views: the same memory with another shape, axis order or dtype (Warp's zero-copy views) --

    def _alias(self, dtype, shape: tuple[int, ...], strides: tuple[int, ...]) -> array:
        """A view of this array's memory as ``dtype`` elements with outer ``shape`` and byte ``strides``."""
        if self._host is None:
            return array._from_device(self.ptr, dtype, self.device, shape, strides, self)
        host = _raw_host(self.ptr, dtype, shape, strides)
        host.flags.writeable = self._host.flags.writeable
        return array._from_host(host, dtype, self.device, owner=self)

    def _with_grad_of(self, view: array, make) -> array:
        """``view`` given the matching view of this array's gradient (``make(self.grad)``), if it has one."""
        if self._grad is not None:
            view._grad, view._requires_grad = make(self._grad), True
        return view

    def reshape(self, shape: int | tuple[int, ...]) -> array:
        """A view with outer shape ``shape`` (one entry may be -1); the array must be contiguous."""
        if not self.is_contiguous:
            raise ValueError(f"array.reshape: the array (shape {self.shape}, strides {self.strides}) is not "
                             "contiguous; call .contiguous() first")
        shape = (operator.index(shape),) if np.ndim(shape) == 0 else tuple(operator.index(n) for n in shape)
        if sum(n == -1 for n in shape) > 1 or any(n < -1 for n in shape):
            raise ValueError(f"array.reshape: shape {shape} may hold one -1 and no other negative entry")
        if -1 in shape:
            known = math.prod(n for n in shape if n != -1)
            if known == 0 or self.size % known:
                raise ArrayShapeError(f"array.reshape: cannot reshape size {self.size} into shape {shape}")
            shape = tuple(self.size // known if n == -1 else n for n in shape)
        if math.prod(shape) != self.size:
            raise ArrayShapeError(f"array.reshape: cannot reshape array of shape {self.shape} (size {self.size}) "
                                  f"into shape {shape} (size {math.prod(shape)})")
        _check_ndim(shape)
        view = self._alias(self.dtype, shape, _contiguous_strides(self.dtype, shape))
        return self._with_grad_of(view, lambda g: g.reshape(shape))

    def flatten(self) -> array:
        """A 1-d view of all elements; the array must be contiguous."""
        return self.reshape(-1)

    def transpose(self, axes: tuple[int, ...] | None = None) -> array:
        """A view with its axes permuted (reversed when ``axes`` is None)."""
        axes = tuple(reversed(range(self.ndim))) if axes is None else tuple(axes)
        if sorted(axes) != list(range(self.ndim)) or not all(isinstance(a, (int, np.integer)) for a in axes):
            raise ValueError(f"array.transpose: axes {axes} must be a permutation of 0..{self.ndim - 1}")
        view = self._alias(self.dtype, tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes))
        return self._with_grad_of(view, lambda g: g.transpose(axes))

    def view(self, dtype) -> array:
        """The same memory as elements of ``dtype``: of the same byte size (same shape), or the scalars
        of a vector/matrix dtype (its component dims are appended), or back from such scalars."""
        new = _resolve_dtype(dtype)
        old = self.dtype
        size = lambda t: t._np.itemsize * math.prod(t._shape)
        if size(new) == size(old):
            shape, strides = self.shape, self.strides
        elif not new._shape and old._shape and new._np.itemsize == old._np.itemsize:
            shape, strides = self.shape + old._shape, self.strides + _component_strides(old)
        elif not old._shape and new._shape and new._np.itemsize == old._np.itemsize:
            k = len(new._shape)
            if self.shape[-k:] != new._shape or self.strides[-k:] != _component_strides(new):
                raise ValueError(f"array.view: the inner dims of shape {self.shape} (strides {self.strides}) do "
                                 f"not hold packed {types.type_name(new)} values")
            shape, strides = self.shape[:-k] or (1,), self.strides[:-k] or (size(new),)
        else:  # worded as Warp's: the sizes of the parts that had to match
            src = f"source scalar dtype {types.type_name(old._scalar)}" if old._shape and not new._shape \
                else "source dtype"
            dst = f"target scalar dtype {types.type_name(new._scalar)}" if new._shape and not old._shape \
                else "target dtype"
            src_size = old._np.itemsize if old._shape and not new._shape else size(old)
            dst_size = new._np.itemsize if new._shape and not old._shape else size(new)
            raise TypeError(f"array.view: cannot create an array view with dtype {types.type_name(new)} from source "
                            f"dtype {types.type_name(old)}: {src} has size {src_size} bytes, but {dst} has size "
                            f"{dst_size} bytes")
        view = self._alias(new, shape, strides)
        return self._with_grad_of(view, lambda g: g.view(new)) if types.is_float(
            getattr(new, "_scalar", new)) else view

    # -- write counting: what lets a Tape refuse to differentiate through an overwritten input ------

    @property
    def version(self) -> int:
        """How many launches and tape-aware array ops have written this array (``mark_written``)."""
        return self._version

    @property
    def last_writer(self) -> str | None:
        """The kernel or op that wrote this array last (``mark_written``), named in tape errors."""
        return self._last_writer

    def mark_written(self, writer: str) -> None:
        """Count one write by ``writer`` (a kernel key or an op's name). Launches and the tape-aware
        ops call it; a Tape compares ``version`` with what it saw when it recorded a read."""
        self._version += 1
        self._last_writer = writer

    # -- untracked operations ---------------------------------------------------------------------
    # These skip the Tape and the write count: nothing records them, so a backward pass neither
    # differentiates through them nor notices that they overwrote an array it had recorded. They
    # serve code that manages gradients or scratch memory itself (the Tape's backward pass, the
    # optimizers, checkpoints, a solver's buffer pool); a user's code wants the tape-aware
    # ``assign``, ``fill_``, ``zero_`` and ``xsim.clone``/``xsim.copy`` built on them.

    def fill_untracked(self, value) -> None:
        """Set every element to ``value`` (a scalar fills every component)."""
        if self._host is None:
            _upload(self, self._host_value(value))
        else:
            self._host[...] = self._host_value(value)

    def zero_untracked(self) -> None:
        """Set every element to zero."""
        if self._host is None:
            _device_zero(self)
        else:
            self._host.fill(0)

    def clone_untracked(self) -> array:
        """A new contiguous array with the same values (no grad, not recorded)."""
        out = array(shape=self.shape, dtype=self.dtype, device=self.device)
        out.copy_from_untracked(self)
        return out

    def to(self, device: str | Device) -> array:
        """This array on ``device``: itself when it is there already, else a copy (not recorded on a tape;
        a copy of an array that requires grad gets its own zero grad)."""
        dev = get_device(device)
        if dev == self.device:
            return self
        out = empty(self.shape, self.dtype, dev, self.requires_grad)
        out.copy_from_untracked(self)
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface (v3) of an array on a GPU, for torch, CuPy, Numba (zero-copy)."""
        if self._host is not None:
            raise AttributeError("__cuda_array_interface__ exists only for arrays on a CUDA device")
        np_dtype = self.dtype._np
        out = {"shape": self.shape + self.dtype._shape, "typestr": np_dtype.str, "data": (self.ptr, False),
               "strides": None if self.is_contiguous else self.strides + _component_strides(self.dtype),
               "stream": get_stream(self.device).handle, "version": 3}
        if np_dtype.names:
            out["descr"] = np_dtype.descr
        return out

    @property
    def capacity(self) -> int:
        """Bytes of memory the array's elements span (Warp's allocation size; ``nbytes`` when contiguous), or
        the capacity given with ``array(ptr=..., capacity=...)``."""
        return _extent(self.dtype, self.shape, self.strides) if self._capacity is None else self._capacity

    @property
    def nbytes(self) -> int:
        """Bytes of element storage (shape x element size)."""
        return self.size * self.dtype._np.itemsize * (math.prod(self.dtype._shape) if self.dtype._shape else 1)

    def copy_from_untracked(self, src, dst_offset: int = 0, src_offset: int = 0, count: int | None = None, *,
                            accumulate: bool = False) -> None:
        """Copy ``count`` elements (default: the rest of ``src``) between flat element ranges.

        With default offsets and count, arrays of equal shape copy whatever their strides; flat
        ranges count elements in row-major order of the arrays' shapes, whatever their strides.
        ``accumulate=True`` adds instead of copying (the adjoint of a copy adds the destination's
        gradient into the source's).
        """
        if not isinstance(src, array):
            src = array(src, dtype=self.dtype, device="cpu", copy=False)
        if src.dtype is not self.dtype:
            raise TypeError(f"cannot copy an array of {types.type_name(src.dtype)} into an array of "
                            f"{types.type_name(self.dtype)}")
        on_gpu = self._host is None or src._host is None
        if types.is_struct(self.dtype) and self.dtype._has_arrays:
            _hold(self, held_arrays(src))
        if count is None and dst_offset == 0 and src_offset == 0 and src.shape == self.shape:
            if on_gpu:
                _device_copy(self, src, None, 0, 0, accumulate)
            elif accumulate:
                self._host[...] += src._host
            else:
                self._host[...] = src._host
            return
        if count is None:
            count = src.size - src_offset
        if min(dst_offset, src_offset, count) < 0 or src_offset + count > src.size or dst_offset + count > self.size:
            raise ValueError(f"copy range out of bounds: {count} elements from offset {src_offset} of {src.size} "
                             f"into offset {dst_offset} of {self.size}")
        if on_gpu:
            _device_copy(self, src, count, dst_offset, src_offset, accumulate)
            return
        picked = src._host[_flat_range(src, src_offset, count)]
        if accumulate:
            self._host[_flat_range(self, dst_offset, count)] += picked
        else:
            self._host[_flat_range(self, dst_offset, count)] = picked


def _flat_range(a: array, offset: int, count: int) -> tuple:
    """The numpy index of ``a``'s host view selecting ``count`` elements from row-major element ``offset``
    (each element an index per dimension: the array's strides do not matter)."""
    return np.unravel_index(np.arange(offset, offset + count), a.shape) if a.ndim else ()


# -- arrays in GPU memory --------------------------------------------------------------------------
# A GPU array has no numpy view. Host access goes through copies; views of it get their pointer,
# shape and strides from numpy's own indexing, run on a stand-in array that is never read.


def _component_strides(dtype) -> tuple[int, ...]:
    out, step = [], dtype._np.itemsize
    for n in reversed(dtype._shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _extent(dtype, shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Bytes spanned by elements of ``dtype`` at outer ``shape`` and byte ``strides`` (0 when empty)."""
    if math.prod(shape) == 0:
        return 0
    item = dtype._np.itemsize * (math.prod(dtype._shape) if dtype._shape else 1)
    return item + sum((n - 1) * abs(st) for n, st in zip(shape, strides))


def _contiguous_strides(dtype, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major byte strides of packed elements of ``dtype`` with outer ``shape``."""
    out, step = [], dtype._np.itemsize * math.prod(dtype._shape)
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _layout_of(dtype, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A numpy array with this full shape and these byte strides over a one-element stand-in (never read)."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype._np), tuple(shape) + dtype._shape,
                                           tuple(strides) + _component_strides(dtype), writeable=False)


def _span(a: array) -> tuple[int, int]:
    """Byte offsets [lo, hi) from ``a.ptr`` that the elements of ``a`` cover."""
    elem = a.dtype._np.itemsize * math.prod(a.dtype._shape)
    lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + elem
    return lo, hi


def _byte_range(a: array) -> tuple[int, int]:
    """The addresses [lo, hi) that the elements of ``a`` cover (empty for an empty array); kept on the array,
    whose layout never changes (a tape asks for it at every launch it records)."""
    r = a._range
    if r is None:
        if not a.size:
            r = 0, 0
        elif a.is_contiguous:
            r = a.ptr, a.ptr + a.shape[0] * a.strides[0]
        else:
            lo, hi = _span(a)
            r = a.ptr + lo, a.ptr + hi
        a._range = r
    return r


def _span_view(buf: np.ndarray, lo: int, a: array) -> np.ndarray:
    """The elements of ``a`` inside ``buf``, a host copy of its span."""
    return np.ndarray(a.shape + a.dtype._shape, a.dtype._np, buffer=buf, offset=-lo,
                      strides=a.strides + _component_strides(a.dtype))


def _download(a: array) -> np.ndarray:
    """A packed host copy of GPU array ``a``."""
    out = np.empty(a.shape + a.dtype._shape, a.dtype._np)
    if a.size == 0:
        return out
    rt, ordinal = require_cuda(a.device), a.device.ordinal
    if a.is_contiguous:
        rt.download(ordinal, out.ctypes.data, a.ptr, out.nbytes)
        return out
    lo, hi = _span(a)
    buf = np.empty(hi - lo, np.uint8)
    rt.download(ordinal, buf.ctypes.data, a.ptr + lo, buf.nbytes)
    out[...] = _span_view(buf, lo, a)
    return out


def _upload(a: array, value) -> None:
    """Write ``value`` (host data broadcastable to ``a``'s elements) into GPU array ``a``."""
    if a.size == 0:
        return
    host = np.empty(a.shape + a.dtype._shape, a.dtype._np)
    host[...] = value
    rt, ordinal = require_cuda(a.device), a.device.ordinal
    if a.is_contiguous:
        rt.upload(ordinal, a.ptr, host.ctypes.data, host.nbytes)
        return
    # a strided view: rewrite its whole span, with the bytes between its elements read back unchanged
    lo, hi = _span(a)
    buf = np.empty(hi - lo, np.uint8)
    rt.download(ordinal, buf.ctypes.data, a.ptr + lo, buf.nbytes)
    _span_view(buf, lo, a)[...] = host
    rt.upload(ordinal, a.ptr + lo, buf.ctypes.data, buf.nbytes)


def _device_zero(a: array) -> None:
    if a.is_contiguous:
        require_cuda(a.device).memset_zero(a.device.ordinal, a.ptr, a.nbytes)
    else:
        _upload(a, np.zeros((), a.dtype._np))


def _device_getitem(a: array, key: tuple):
    """``a[key]`` for GPU array ``a``: one element read back to the host, or a view sharing its memory."""
    layout = _layout_of(a.dtype, a.shape, a.strides)
    sub = layout[(*key, ...)]  # the trailing ... keeps a view even for one scalar element (a 0-d array)
    offset = sub.__array_interface__["data"][0] - layout.__array_interface__["data"][0]
    nd = sub.ndim - len(a.dtype._shape)
    if nd == 0:
        elem = np.empty(a.dtype._shape, a.dtype._np)
        require_cuda(a.device).download(a.device.ordinal, elem.ctypes.data, a.ptr + offset, elem.nbytes)
        return _element_value(a.dtype, elem if a.dtype._shape else elem[()], held_arrays(a))
    return array._from_device((a.ptr or 0) + offset, a.dtype, a.device, sub.shape[:nd], sub.strides[:nd], a)


def _copy_bytes(dst: array, dst_ptr: int, src: array, src_ptr: int, nbytes: int) -> None:
    """Copy raw bytes between two arrays' memory, at least one of them on a GPU."""
    if dst._host is None and src._host is None:
        require_cuda(dst.device).copy(dst.device.ordinal, dst_ptr, src.device.ordinal, src_ptr, nbytes)
    elif dst._host is None:
        require_cuda(dst.device).upload(dst.device.ordinal, dst_ptr, src_ptr, nbytes)
    else:
        require_cuda(src.device).download(src.device.ordinal, dst_ptr, src_ptr, nbytes)


def _device_copy(dst: array, src: array, count: int | None, dst_offset: int, src_offset: int,
                 accumulate: bool) -> None:
    """``dst.copy_from_untracked(src, ...)`` where either array is on a GPU: whole arrays of one shape
    (``count`` None) or a flat element range of contiguous arrays (checked by the caller)."""
    if (dst.size if count is None else count) == 0:  # no memory to address (an empty array's ptr is None)
        return
    elem = dst.dtype._np.itemsize * math.prod(dst.dtype._shape)
    if not accumulate and dst.is_contiguous and src.is_contiguous:
        n = dst.size if count is None else count
        _copy_bytes(dst, dst.ptr + dst_offset * elem, src, src.ptr + src_offset * elem, n * elem)
        return
    # strided or accumulating copies go through the host: the tape only needs them for gradients of
    # array ops, rare next to kernel launches
    value = src.numpy()
    if count is not None or accumulate:
        host = dst.numpy().copy() if dst._host is None else dst._host
        flat_dst = host.reshape((dst.size,) + dst.dtype._shape)
        flat_src = value.reshape((src.size,) + src.dtype._shape)
        n = dst.size if count is None else count
        if accumulate:
            flat_dst[dst_offset:dst_offset + n] += flat_src[src_offset:src_offset + n]
        else:
            flat_dst[dst_offset:dst_offset + n] = flat_src[src_offset:src_offset + n]
        value = host
    if dst._host is None:
        _upload(dst, value)
    elif value is not dst._host:
        dst._host[...] = value


def is_array(x) -> bool:
    """True for an xsim array instance."""
    return isinstance(x, array)


# -- annotations ----------------------------------------------------------------------------------


def _annotation_dtype(dtype) -> Any:
    """An annotation's element type: a dtype as arrays take it, or a type parameter (Any, Float...)."""
    return dtype if types.is_type_parameter(dtype) else _resolve_dtype(dtype)


def _subscript_annotation(name: str, params, ndim: int | None) -> ArrayType:
    """``array[T]``, ``array[T, N]`` (``N`` an int or ``typing.Literal[N]``), ``array2d[T]``."""
    if not isinstance(params, tuple):
        return ArrayType(_annotation_dtype(params), ndim or 1)
    if ndim is not None or len(params) != 2:
        expected = "dtype" if ndim else "dtype or dtype, ndim"
        raise TypeError(f"xsim.{name}[...] takes {expected}, got {len(params)} parameters")
    dtype, n = params
    if typing.get_origin(n) is typing.Literal:
        (n,) = typing.get_args(n)
    if not isinstance(n, int):
        raise TypeError(f"xsim.{name}[dtype, ndim]: ndim must be an integer, got {n!r}")
    return ArrayType(_annotation_dtype(dtype), n)


def _fixed_ndim(n: int) -> type:
    """``array{n}d``: ``array{n}d(data, ...)`` makes an n-d array, ``array{n}d(dtype=T)`` and
    ``array{n}d[T]`` are kernel annotations."""
    def __new__(cls, *args, **kwargs):
        if not args and "data" not in kwargs and "shape" not in kwargs:
            return array(dtype=kwargs.get("dtype", float), ndim=n)
        return array(*args, **kwargs, ndim=n)

    def __class_getitem__(cls, params):
        return _subscript_annotation(cls.__name__, params, n)

    doc = f"A {n}-d array (``array{n}d(data, dtype)``), or the annotation ``array{n}d[T]``."
    return type(f"array{n}d", (), {"__new__": __new__, "__class_getitem__": classmethod(__class_getitem__),
                                   "__doc__": doc, "__module__": __name__})


array1d, array2d, array3d, array4d = (_fixed_ndim(n) for n in (1, 2, 3, 4))


def fixedarray(dtype: Any = Any, shape: int | tuple[int, ...] | None = None) -> types.FixedArrayType:
    """Warp's annotation of a stack array (what ``zeros(shape, dtype)`` makes in a kernel), e.g. a func's return
    type: an array of ``len(shape)`` dimensions (its shape is the one the func's zeros() gave it)."""
    ndim = 1 if shape is None or isinstance(shape, int) else len(shape)
    return types.FixedArrayType(_annotation_dtype(dtype), ndim)


# -- creation ------------------------------------------------------------------------------------


def _creation_shape(shape, n: int | None) -> tuple[int, ...]:
    """The shape of ``zeros``/``ones``/``empty``/``full``: ``shape``, or Warp's older ``n=length``
    (a 1-d array); neither gives an empty 1-d array, as in Warp."""
    if n is not None:
        if shape is not None:
            raise TypeError(f"give the array's shape or its length n, not both (shape={shape!r}, n={n!r})")
        return _outer_shape(n)
    return _outer_shape(0 if shape is None else shape)


def _new(shape, dtype, device, requires_grad: bool, make, strides=None) -> array:
    dtype = _resolve_dtype(dtype)
    if strides is not None:  # Warp's custom layout: the bytes the strides reach, seen through them
        strides = tuple(operator.index(st) for st in strides)
        if len(strides) != len(shape):
            raise ValueError(f"Invalid number of strides, expected {len(shape)} strides, got {len(strides)} "
                             f"(array strides {strides} for shape {shape})")
        if min(strides, default=0) < 0:
            raise NotImplementedError(f"Negative strides {strides} are not supported when allocating an array")
        bytes_ = _new((_extent(dtype, shape, strides),), types.uint8, device, False, make)
        out = bytes_._alias(dtype, shape, strides)
        out.requires_grad = requires_grad
        return out
    if dtype._scalar is types.bfloat16:  # made as float32 numbers, held as bit patterns
        host = dtype._scalar._store(make(shape + dtype._shape, np.float32))
    else:
        host = make(shape + dtype._shape, dtype._np)
    return array._from_host(host, dtype, get_device(device), None, requires_grad)


def _retained(out: array, retain_grad: bool) -> array:
    """``out`` with Warp's ``retain_grad`` creation option applied."""
    if retain_grad:
        out.retain_grad = True
    return out


def zeros(shape: int | tuple[int, ...] | None = None, dtype: Any = float,
          device: str | Device | None = None, requires_grad: bool = False, *, n: int | None = None,
          strides: tuple[int, ...] | None = None, retain_grad: bool = False) -> array:
    """A new array of zeros (laid out with byte ``strides`` per outer dim if given, as in Warp)."""
    out = _retained(_new(_creation_shape(shape, n), dtype, device, requires_grad, np.zeros, strides), retain_grad)
    capture.defer(out.zero_untracked)  # inside a capture every replay zeroes it again, as Warp's does
    return out


def ones(shape: int | tuple[int, ...] | None = None, dtype: Any = float,
         device: str | Device | None = None, requires_grad: bool = False, *, n: int | None = None,
         retain_grad: bool = False) -> array:
    """A new array with every component one."""
    out = _retained(_new(_creation_shape(shape, n), dtype, device, requires_grad, np.ones), retain_grad)
    capture.defer(lambda: out.fill_untracked(1))
    return out


def empty(shape: int | tuple[int, ...] | None = None, dtype: Any = float,
          device: str | Device | None = None, requires_grad: bool = False, *, n: int | None = None,
          strides: tuple[int, ...] | None = None, retain_grad: bool = False) -> array:
    """A new array with unspecified contents (zeros in check mode, whose NaN scans of a partly
    written array must not trip over leftover memory); byte ``strides`` per outer dim as in ``zeros``."""
    make = np.zeros if config.mode == "check" else np.empty
    return _retained(_new(_creation_shape(shape, n), dtype, device, requires_grad, make, strides), retain_grad)


def intermediate(shape: int | tuple[int, ...], dtype: Any, device: str | Device | None = None,
                 written_first: bool = False, scratch: bool = False) -> array:
    """An uninitialised array that requires grad, for a solver's intermediate results: its gradient
    is allocated when a backward pass first needs it, and ``Tape.backward`` reuses that buffer for
    other intermediates once no earlier record reads it (its values are then spent: the array's
    ``grad`` reads as zeros again). Keeps a rollout's tape to the values alone, and the backward
    pass's gradients few and cache-warm. ``written_first``: the caller promises that a recording
    launch writes every element before anything on the tape reads it (or accumulates into it); the
    adjoints of those writes then leave the gradient zero, so its buffer is reused without zeroing
    (debug mode checks the promise and raises naming the array). ``scratch``: the caller promises that
    no recorded launch's adjoint needs its values (it is only read linearly, e.g. summed, and written),
    so one array serves every step of a rollout: the tape does not keep its reads' versions, and later
    launches may overwrite it without storing a new array per launch."""
    out = empty(shape, dtype, device)
    out._requires_grad = out._intermediate = True
    out._written_first = bool(written_first)
    out._scratch = bool(scratch)
    return out


def full(shape: int | tuple[int, ...] | None = None, value: Any = 0, dtype: Any = None,
         device: str | Device | None = None, requires_grad: bool = False, *, n: int | None = None,
         retain_grad: bool = False) -> array:
    """A new array with every element ``value``; without ``dtype`` it follows the value (1.0 -> float32,
    vec3 -> vec3, a 3-list of floats -> vec3)."""
    out = empty(shape, _value_dtype(value) if dtype is None else dtype, device, requires_grad, n=n,
                retain_grad=retain_grad)
    out.fill_untracked(value)
    capture.defer(lambda: out.fill_untracked(value))
    return out


def _like(src: array, device, requires_grad) -> tuple:
    return (src.shape, src.dtype, src.device if device is None else device,
            src.requires_grad if requires_grad is None else requires_grad)


def zeros_like(src: array, device: str | Device | None = None, requires_grad: bool | None = None, *,
               retain_grad: bool = False) -> array:
    """Zeros with the shape and dtype of ``src`` (and its device and requires_grad unless given)."""
    return zeros(*_like(src, device, requires_grad), retain_grad=retain_grad)


def ones_like(src: array, device: str | Device | None = None, requires_grad: bool | None = None, *,
              retain_grad: bool = False) -> array:
    """Ones with the shape and dtype of ``src`` (and its device and requires_grad unless given)."""
    return ones(*_like(src, device, requires_grad), retain_grad=retain_grad)


def empty_like(src: array, device: str | Device | None = None, requires_grad: bool | None = None, *,
               retain_grad: bool = False) -> array:
    """Unspecified contents with the shape and dtype of ``src`` (and its device and requires_grad unless given)."""
    return empty(*_like(src, device, requires_grad), retain_grad=retain_grad)


def full_like(src: array, value: Any, device: str | Device | None = None,
              requires_grad: bool | None = None, *, retain_grad: bool = False) -> array:
    """``value`` everywhere, with the shape and dtype of ``src`` (and its device and requires_grad unless given)."""
    shape, dtype, device, requires_grad = _like(src, device, requires_grad)
    return full(shape, value, dtype, device, requires_grad, retain_grad=retain_grad)


def from_numpy(arr: Any, dtype: Any = None, shape: int | tuple[int, ...] | None = None,
               device: str | Device | None = None, requires_grad: bool = False, *,
               retain_grad: bool = False) -> array:
    """Wrap a numpy array, sharing its memory where the layout allows.

    Without ``dtype`` the trailing dims choose the element type: ``(n, 3)`` floats become
    ``array(vec3)``, ``(n, 3, 3)`` become ``array(mat33)`` (float64 data gives ``vec3d``...).
    """
    arr = np.asarray(arr)
    if dtype is None and arr.dtype.names is None:
        dtype = _infer_composite(arr)
    return array(arr, dtype=dtype, shape=shape, device=device, requires_grad=requires_grad, copy=False,
                 retain_grad=retain_grad)
