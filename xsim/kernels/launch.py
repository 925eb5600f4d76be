"""``xsim.launch``: check and pack a kernel's arguments, make one native call, and tell this thread's
active recorder (the autodiff Tape, a layer above; see ``recording``) about it."""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Callable

import numpy as np

from .. import config
from .. import types as T
from ..array import array as Array
from ..array import held_arrays
from ..capture import OPEN as _CAPTURES
from ..capture import capturing, defer
from ..device import get_device
from ..indexedarray import indexedarray as IndexedArray
from . import handles
from .recording import current as _current_recorder
from .threads import Pacer


class LaunchDims(ctypes.Structure):
    _fields_ = [("shape", ctypes.c_int64 * 4)]


def _args_struct(kernel) -> type:
    fields = []
    for name, t in kernel.params:
        if isinstance(t, T.ArrayType):
            fields.append((name, t.desc_ctype()))
        else:
            fields.append((name, t._ctypes))
    if not fields:
        fields = [("unused_", ctypes.c_char)]
    return type(f"{kernel.key}_args", (ctypes.Structure,), {"_fields_": fields})


def _to_c(value, t):
    """A checked Python value of xsim type ``t`` as the ctypes value of its kernel argument."""
    if T.is_scalar(t):  # 16-bit floats travel as their bit patterns (ctypes c_uint16)
        return _bits16(t, value) if t is T.float16 or t is T.bfloat16 else value
    if T.is_struct(t):
        c = t._ctypes()
        for f, ft in t._fields.items():
            fv = getattr(value, f)
            if isinstance(ft, T.ArrayType):
                if fv is not None:
                    setattr(c, f, fv._desc)
            else:
                setattr(c, f, _to_c(fv, ft))
        return c
    comps = t._scalar._store(np.asarray(value)).view(t._ctypes._type_)
    return t._ctypes(*comps.ravel().tolist())


def _bits16(t, value) -> int:
    return int(t._store(value).view(np.uint16))


def _struct_packed(value, t) -> tuple[bytes, bool]:
    """A struct argument's bytes and whether its arrays are all contiguous; kept on the value until one of
    its fields is assigned, where nothing else can change it (``t._packable``)."""
    packed = value._packed
    if packed is None:
        packed = (bytes(_to_c(value, t)), _all_contiguous((value,), (("", t),)))
        if t._packable:
            object.__setattr__(value, "_packed", packed)
    return packed


def _struct_grads_packed(value, t) -> tuple[bytes, bool]:
    """For a struct argument of a ``_packable`` type: the bytes of the same struct with each array field
    replaced by its grad (a null array where it has none), and whether those grads are all contiguous;
    kept on the value while its fields and their grads are the same arrays."""
    grads = tuple(None if a is None else a.grad for a in (getattr(value, f) for f in t._array_fields))
    kept = value._packed_grads
    if kept is not None and all(g is k for g, k in zip(grads, kept[0])):
        return kept[1], kept[2]
    packed = bytes(_grad_struct(value, t))
    contig = all(g is None or g.is_contiguous for g in grads)
    object.__setattr__(value, "_packed_grads", (grads, packed, contig))
    return packed, contig


def _grad_struct(value, t):
    """For a struct argument: the same struct with each array field replaced by its grad."""
    c = t._ctypes()
    for f, ft in t._fields.items():
        fv = getattr(value, f)
        if isinstance(ft, T.ArrayType):
            grad = None if fv is None else element_grads(fv) if _holds_arrays(ft) else fv.grad
            if grad is not None:
                setattr(c, f, grad._desc)
        elif T.is_struct(ft):
            setattr(c, f, _grad_struct(fv, ft))
    return c


_MAX_THREADS = 2**63 - 1  # the native thread counter is an int64
_MAX_EXTENT = 2**31 - 1  # each tid() component is an int32


def normalize_dim(kernel, dim) -> tuple[int, ...]:
    shape = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    if not 1 <= len(shape) <= 4 or any(isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
                                       or d < 0 for d in shape):
        raise ValueError(f"launch of kernel '{kernel.key}': dim must be a non-negative int or a tuple of 1 to 4 of "
                         f"them, got {dim!r}")
    if math.prod(int(d) for d in shape) > _MAX_THREADS:
        raise ValueError(f"launch of kernel '{kernel.key}': dim {dim!r} asks for {math.prod(int(d) for d in shape)} "
                         f"threads, more than the {_MAX_THREADS} (2**63 - 1) a launch can count")
    if any(d > _MAX_EXTENT for d in shape):
        raise ValueError(f"launch of kernel '{kernel.key}': dim {dim!r} is larger than {_MAX_EXTENT} (2**31 - 1) "
                         "on an axis, the most a tid() index (an int32) can count; split the launch or use a "
                         "multi-dimensional dim")
    return tuple(int(d) for d in shape)


def _shape_test(checks) -> Callable | None:
    """For ``KernelMeta.tid_indexed`` ``checks``, one expression made once per kernel: ``test(shape,
    values)`` is true when a launch of ``shape`` indexes past an array that every thread indexes with
    its ``tid()`` (then :func:`check_shapes` says which). None when there is nothing to check. The
    launch pays one call and one comparison per such access, no walk."""
    if not checks:
        return None
    terms = " or ".join(f"{f's[{d}]' if d == 0 else f'(s[{d}] if len(s) > {d} else 1)'} > v[{i}].shape[{axis}]"
                        for i, axis, d in checks)
    return eval(f"lambda s, v: {terms}")  # built from the ints of the kernel's own metadata


def check_shapes(prep, shape, values) -> None:
    """Refuse, in every mode and before anything runs, a launch whose ``dim`` is larger than an array
    that each thread indexes directly with its ``tid()`` (``KernelMeta.tid_indexed``): a ``ValueError``
    naming the kernel, the parameter, its shape and the dim. Called where ``prep.shape_test`` found
    such an array; a launch given a null array (None) is not checked: it runs in debug mode, which
    reports the null array's reads as an ``IndexError``."""
    padded = (*shape, 1, 1, 1)
    for i, axis, d in prep.meta.tid_indexed:
        v = values[i]
        if padded[d] > v.shape[axis]:
            name = prep.kernel.params[i][0]
            which = "" if len(shape) == 1 and axis == 0 else f" (tid component {d} indexes its axis {axis})"
            raise ValueError(f"launch of kernel '{prep.kernel.key}' with dim {shape if len(shape) > 1 else shape[0]}: "
                             f"parameter '{name}' has shape {v.shape}, but every thread indexes it with its "
                             f"tid(){which}, so threads past {v.shape[axis]} would read or write outside it; "
                             f"launch with a dim of at most the array's shape")


def check_writable(kernel, prep, values) -> None:
    """Refuse, naming the parameter, an array the kernel writes whose memory must not or cannot be
    written element by element (read-only numpy data, a broadcast view)."""
    for label in prep.meta.writes:
        arr = resolve_label(label, kernel.params, values)
        if arr is not None and arr._unwritable:
            raise ValueError(f"kernel '{kernel.key}' parameter '{label}': the kernel writes this array, but it is "
                             f"{arr._unwritable}; pass a writable array of its own memory (e.g. a copy: "
                             "numpy.array(a), tensor.clone(), xsim.clone(a))")


def coerce_arg(kernel, name: str, t, value, device):
    """Check one argument against its parameter type; wrap foreign arrays (numpy, torch)."""
    where = f"kernel '{kernel.key}' parameter '{name}'"
    if isinstance(t, T.ArrayType):
        return _coerce_array(t, value, device, where)
    if T.is_scalar(t):
        if isinstance(value, (bool, np.bool_)) and t is not T.bool_ or (
                T.is_int(t) and isinstance(value, (float, np.floating))):
            raise TypeError(f"{where}: expected {T.type_name(t)}, got {type(value).__name__} {value!r}")
        if not isinstance(value, (int, float, bool, np.number, np.bool_)):
            raise TypeError(f"{where}: expected {T.type_name(t)}, got {type(value).__name__}")
        if T.is_int(t) and not isinstance(value, (bool, np.bool_)):
            lo, hi = np.iinfo(t._np).min, np.iinfo(t._np).max
            if not lo <= int(value) <= hi:
                raise ValueError(f"{where}: {value} does not fit in {T.type_name(t)} ({lo} to {hi})")
        return value
    if T.is_struct(t):
        if not isinstance(value, t):
            raise TypeError(f"{where}: expected struct {t.__name__}, got {type(value).__name__}")
        return value
    try:
        arr = np.asarray(value, dtype=t._np)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.size != T.num_components(t):
        raise TypeError(f"{where}: expected {T.type_name(t)}, got {type(value).__name__} {value!r}")
    return value


def _coerce_array(t, value, device, where):
    """An array or indexedarray argument checked against its parameter type ``t``: the kind of array,
    its dtype and ndim, its device (None: Warp's null array; numpy and torch arrays are wrapped)."""
    indexed = isinstance(t, T.IndexedArrayType)
    if value is None:  # Warp's null array: shape 0 in every dimension, false in a kernel's `if a:`
        null = Array._from_device(0, t.dtype, device, (0,) * t.ndim, (0,) * t.ndim, None)
        return IndexedArray(null) if indexed else null
    kind = "indexedarray" if indexed else "array"
    if indexed and not isinstance(value, IndexedArray):
        raise TypeError(f"{where}: expected {t!r}, got {type(value).__name__} (make one with "
                        "xsim.indexedarray(data, indices) or data[index_array])")
    if not indexed and isinstance(value, IndexedArray):
        raise TypeError(f"{where}: expected {t!r}, got an indexedarray; declare the parameter "
                        f"xsim.indexedarray(dtype={T.type_name(t.dtype)}, ndim={t.ndim}) or pass "
                        "value.contiguous()")
    if not indexed and not isinstance(value, Array):
        value = _wrap_foreign(value, t, where)
    if value.dtype is not t.dtype or value.ndim != t.ndim:
        raise TypeError(f"{where}: expected {kind}(dtype={T.type_name(t.dtype)}, ndim={t.ndim}), got "
                        f"{kind}(dtype={T.type_name(value.dtype)}, ndim={value.ndim})")
    if value.device != device:
        raise ValueError(f"{where}: {kind} is on device '{value.device}' but the launch runs on '{device}'")
    return value


def _wrap_foreign(value, t, where):
    from ..array import from_numpy
    if isinstance(value, np.ndarray):
        # a numpy array is used in place or refused: a converted copy would drop the kernel's writes
        if value.dtype != t.dtype._np:
            raise TypeError(f"{where}: got a numpy array of dtype {value.dtype} for elements of "
                            f"{T.type_name(t.dtype)}; converting it would copy it and the kernel's writes would not "
                            f"reach it, so convert it first (e.g. arr.astype(numpy.{t.dtype._np}))")
        arr = from_numpy(value, dtype=t.dtype, device="cpu")  # host memory: a launch elsewhere then says so
        if arr.size and arr.ptr != value.__array_interface__["data"][0]:
            raise TypeError(f"{where}: this numpy array's layout cannot be shared without a copy (its element "
                            "components are not packed); pass numpy.ascontiguousarray(arr) and read results from it")
        return arr
    if type(value).__module__.startswith("torch"):
        from ..torch_view import torch_scalar_matches, wrap_torch_for_launch
        if not torch_scalar_matches(value, t.dtype):
            raise TypeError(f"{where}: got a torch tensor of dtype {value.dtype} for elements of "
                            f"{T.type_name(t.dtype)}; converting it would copy it and the kernel's writes would not "
                            f"reach it, so convert it first (e.g. t.to(torch.{t.dtype._np}))")
        try:
            return wrap_torch_for_launch(value, t.dtype)
        except (TypeError, ValueError, NotImplementedError) as e:
            raise type(e)(f"{where}: {e}") from None
    raise TypeError(f"{where}: expected {t!r}, got {type(value).__name__}")


def _holds_arrays(t) -> bool:
    """Whether ``t`` is an array type whose elements are structs holding arrays."""
    return isinstance(t, T.ArrayType) and T.is_struct(t.dtype) and t.dtype._has_arrays


def _reaches_element_arrays(t) -> bool:
    """Whether a parameter of type ``t`` is, or holds in its struct fields, an array of structs holding arrays."""
    return _holds_arrays(t) or T.is_struct(t) and t._has_arrays and any(
        _reaches_element_arrays(ft) for ft in t._fields.values())


def _all_contiguous(values, params) -> bool:
    for (name, t), v in zip(params, values):
        if _reaches_element_arrays(t):  # its elements' arrays are known only to the kernel
            return False
        if isinstance(t, T.ArrayType):
            if not v.is_contiguous:
                return False
        elif T.is_struct(t) and t._has_arrays:
            for f, ft in t._fields.items():
                fv = getattr(v, f)
                if isinstance(ft, T.ArrayType) and fv is not None and not fv.is_contiguous:
                    return False
    return True


class _Prepared:
    """Per (kernel, device, mode): the loaded module and the argument structure type."""

    def __init__(self, kernel, device, mode: str):
        if mode not in config.MODES:  # e.g. a bool from a caller of the older prepare(kernel, device, debug)
            raise ValueError(f"launch mode must be one of {config.MODES}, got {mode!r}")
        debug = mode == "debug"
        self.kernel = kernel
        self.device = device
        self.mode = mode
        self.debug = debug
        self.checked = mode != "release"  # after each launch: bounds errors (debug) or a NaN scan (check)
        self.native = kernel.module_build(device, debug)
        self.symbol = kernel.symbol
        self.meta = self.native.metas[self.symbol]
        refused = self.meta.compile_error(kernel)
        if refused is not None:
            raise refused
        self.args_type = _args_struct(kernel)
        self.forward = self.native.forward[self.symbol]  # the adjoint: run_backward (built at the first)
        self.key = (device.name, debug)
        self.layout, self.plan = _layout(kernel, self.args_type, self.meta.writes)
        # the adjoint's gradient struct has the argument struct's layout; indexed arrays and structs holding
        # values that can change in place besides arrays take the general path (their gradients are an
        # indexed view, a struct of grads built field by field)
        # an array of structs holding arrays has a gradient built for each backward (``element_grads``) and
        # arrays no one can check for contiguity before the launch: the general path takes it
        element_arrays = any(_reaches_element_arrays(t) for _, t in kernel.params)
        self.grad_layout = struct.Struct("=" + self.layout.format[len(_HEADER):]) if self.layout and not any(
            k == _STRUCT and t._has_arrays and not t._packable or k == _INDEXED for k, t, _ in self.plan) and \
            not element_arrays else None
        self.array_params = [i for i, (_, t) in enumerate(kernel.params) if isinstance(t, T.ArrayType)]
        # whether the arrays of a launch are all parameters of their own (no struct holding arrays, no indexed array)
        self.arrays_flat = not element_arrays and not any(
            T.is_struct(t) and t._has_arrays or isinstance(t, T.IndexedArrayType) for _, t in kernel.params)
        size = ctypes.sizeof(self.args_type)
        self.grads_pad = b"\0" * (-size % 8)  # the adjoint's gradient struct starts 8-aligned
        self.first_array = next((i for i, (_, t) in enumerate(kernel.params) if isinstance(t, T.ArrayType)), None)
        self.written = [i for i, (name, _) in enumerate(kernel.params) if name in self.meta.writes]
        # (label, parameter index, or None for a struct field) of what the kernel reads and writes
        self.read_slots = _label_slots(kernel.params, self.meta.reads)
        self.write_slots = _label_slots(kernel.params, self.meta.writes)
        self.written_nested = [slot for slot in self.write_slots if slot[2]]
        self.fast = device.is_cpu and self.layout is not None and not element_arrays
        index = {name: i for i, (name, _) in enumerate(kernel.params)}
        # (parameter index, name, kind) of each parameter the kernel uses as a mesh / hash grid id
        self.handles = [(index[name], name, kind) for name, kind in self.meta.handles.items()]
        self.shape_test = _shape_test(self.meta.tid_indexed)
        self.pack_args = _argument_packer(self.plan, device) if self.fast else None
        self.pacers = (Pacer(), Pacer())  # CPU thread choice of the forward and of the adjoint


# a path step from an id to the object it names (a label "mesh_get(m).points": ArrayLabels); no field has this name
_BY_ID = "()"


def _label_slots(params, labels) -> list[tuple[str, int | None, tuple[str, ...]]]:
    """(label, parameter index or None, the struct fields on the way) of each label ("x", "s.field"); "[]"
    on the way stands for every element of an array of structs holding arrays ("a[].values": ``a``, "[]",
    "values"), ``_BY_ID`` for the object an id names ("mesh_get(m).points": the points of the mesh whose id
    is parameter m)."""
    index = {name: i for i, (name, _) in enumerate(params)}
    out = []
    for label in labels:
        head, *path = label.split(".")
        if head.endswith(")") and "(" in head:
            head, path = head[head.index("(") + 1:-1], [_BY_ID, *path]
        parts = [q for p in (head, *path) for q in ((p[:-2], "[]") if p.endswith("[]") else (p,))]
        out.append((label, index.get(parts[0]), tuple(parts[1:])))
    return out


def slot_array(slot, values) -> Array | None:
    """The array that ``slot`` (label, parameter index or None, struct fields; ``_label_slots``) names in a
    launch's arguments ``values``: the one way from a label to its array. For an indexedarray its data (the
    tape tracks the memory it reads and writes); None where the label names no array (a null struct field)."""
    _, i, path = slot
    if i is None or "[]" in path:  # the arrays of an array's elements are many (``slot_arrays``)
        return None
    arr = values[i]
    for part in path:
        arr = handles.object_of(arr) if part == _BY_ID else getattr(arr, part, None)
    if isinstance(arr, IndexedArray):
        arr = arr.data
    return arr if isinstance(arr, Array) else None


def slot_arrays(slot, values) -> list[Array]:
    """Every array ``slot`` names: the one of ``slot_array``, or through "[]", those that the elements of an
    array of structs holding arrays refer to at the launch."""
    _, i, path = slot
    if "[]" not in path:
        arr = slot_array(slot, values)
        return [] if arr is None else [arr]
    cut = path.index("[]")
    outer = slot_array((slot[0], i, path[:cut]), values)
    return [] if outer is None else _element_arrays(outer, path[cut + 1:])


def _element_arrays(outer: Array, path: tuple[str, ...]) -> list[Array]:
    """The arrays that field ``path`` of the elements of ``outer`` (an array of structs holding arrays)
    refers to, each once (an indexedarray's data)."""
    records, t, held = outer.numpy(), outer.dtype, held_arrays(outer)
    for k, part in enumerate(path):
        ft = t._fields.get(part)
        if T.is_struct(ft):
            records, t = records[part], ft
            continue
        if not isinstance(ft, T.ArrayType):
            return []
        flat = np.ascontiguousarray(records[part]).reshape(-1)
        keys = {key.tobytes() for key in np.unique(flat.view(np.dtype((np.void, flat.dtype.itemsize))))}
        found = {id(a): a for a in (held.get(key) for key in keys) if a is not None}.values()
        rest = path[k + 1:]
        if rest[:1] == ("[]",):
            return list({id(x): x for a in found for x in _element_arrays(a, rest[1:])}.values())
        return list({id(x): x for a in found if isinstance(x := a.data if isinstance(a, IndexedArray) else a,
                                                              Array)}.values())
    return []


def labelled_arrays(slots, values) -> list[tuple[str, Array]]:
    """The (label, array) pairs named by a prepared kernel's ``read_slots`` or ``write_slots`` (a label
    through an array's elements once for each array it reaches). A parameter, or a field of a struct
    parameter, that holds an array is taken directly (the common case, at every launch a tape records)."""
    out = []
    for slot in slots:
        label, i, path = slot
        if i is not None and (not path or len(path) == 1 and path[0] != _BY_ID and path[0] != "[]"):
            arr = getattr(values[i], path[0], None) if path else values[i]
            if type(arr) is Array:
                out.append((label, arr))
                continue
        out.extend((label, a) for a in slot_arrays(slot, values))
    return out


def prepare(kernel, device, mode: str) -> _Prepared:
    """The launch data of ``kernel`` on ``device`` in ``mode`` ("release", "debug", "check")."""
    prep = kernel.launch_cache
    key = (device.name, mode == "debug")
    if prep is None or prep.key != key or prep.mode != mode or prep.native is not kernel.module.builds.get(key):
        prep = kernel.launch_cache = _Prepared(kernel, device, mode)
    return prep


# The CPU launch buffer: one bytes object handed to the native entry point (one ctypes argument is
# the cheapest call). It holds the launch shape padded with 1s, the thread count, the OpenMP thread
# budget and the flags (bit 0: every array packed; bit 1: the entry point checks the shapes the
# compiler found indexed by tid(), codegen._cpu_entry), then the kernel's argument struct; for the adjoint the
# gradient struct follows at the next 8-byte boundary. codegen.entry_points reads the same layout.
_HEADER = "=4qqii"
_ARRAY, _FLOAT, _INT, _BOOL, _VALUE, _STRUCT, _OUT, _INDEXED = range(8)  # how each argument is checked and packed
_SCALAR_CODES = {T.float16: "e", T.float32: "f", T.float64: "d", T.int8: "b", T.uint8: "B", T.int16: "h",
                 T.uint16: "H", T.int32: "i", T.uint32: "I", T.int64: "q", T.uint64: "Q", T.bool_: "?"}


def _layout(kernel, args_type, writes=()) -> tuple[struct.Struct | None, list]:
    """The ``struct`` layout of the launch buffer (the header, then each field at its ctypes offset)
    and the check/pack plan of each parameter: (kind, type, ndim); ``writes``: the parameters the
    kernel writes (kind _OUT for arrays)."""
    codes, plan, end = [_HEADER], [], 0
    for name, t in kernel.params:
        if t is None:
            return None, []
        field = getattr(args_type, name)
        if field.offset > end:
            codes.append(f"{field.offset - end}x")
        end = field.offset + field.size
        if isinstance(t, T.ArrayType):
            codes.append(f"{field.size}s")
            kind = _INDEXED if isinstance(t, T.IndexedArrayType) else _OUT if name in writes else _ARRAY
            plan.append((kind, t.dtype, t.ndim))
        elif t in _SCALAR_CODES:
            codes.append(_SCALAR_CODES[t])
            plan.append((_BOOL if t is T.bool_ else _INT if T.is_int(t) else _FLOAT, t, 0))
        else:
            codes.append(f"{field.size}s")
            plan.append((_STRUCT if T.is_struct(t) else _VALUE, t, 0))
    size = ctypes.sizeof(args_type)
    if size > end:
        codes.append(f"{size - end}x")
    return struct.Struct("".join(codes)), plan


def _pack_item(kind, t, v):
    """One checked argument as the ``struct`` item of its field."""
    if kind == _ARRAY or kind == _OUT or kind == _INDEXED:
        return bytes(v._desc)
    if kind == _VALUE:  # components in storage order, as arrays hold them (16-bit floats as their bits)
        return t._scalar._store(np.asarray(v)).tobytes()
    if kind == _STRUCT:
        return _struct_packed(v, t)[0]
    return v


def _wrap_scalar(kind, t, v):
    """A number as the C field stores it (ints wrap around, floats round), like ctypes assignment."""
    if kind == _FLOAT or kind == _INT:
        return np.array(v).astype(t._np).item()
    return v


def cpu_buffer(prep: _Prepared, shape, values, contig: bool, threads: int, grads=None) -> bytes:
    """The launch buffer of checked ``values`` for ``threads`` OpenMP threads (and, for the adjoint,
    the gradient struct ``grads``)."""
    head = (*shape, *(1,) * (4 - len(shape)), math.prod(shape), threads, int(contig))
    items = [_pack_item(kind, t, v) for (kind, t, _), v in zip(prep.plan, values)]
    try:
        buf = prep.layout.pack(*head, *items)
    except (struct.error, OverflowError):
        buf = prep.layout.pack(*head, *(_wrap_scalar(k, t, v) for (k, t, _), v in zip(prep.plan, items)))
    return buf if grads is None else buf + prep.grads_pad + bytes(grads)


def _argument_packer(plan, device) -> Callable:
    """For a kernel's check/pack ``plan`` (``_layout``) on ``device``: ``pack_args(*values)``, the fast
    path's test of one launch's arguments, made once per prepared kernel as straight-line code (a loop
    over the plan cost about 0.14 us per argument, an unrolled test a third of that). It returns None
    when an argument is not plain (not an xsim array of the parameter's dtype and ndim on ``device``, a
    read-only array written, a Python number of another kind, a value of another type, an indexed
    array), else (flags, items): the launch header's flags (bit 0: every array packed; bit 1: the
    entry point checks the shapes, ``codegen._cpu_entry``) and each argument's packed form."""
    names = [f"v{i}" for i in range(len(plan))]
    body, items = ["    flags = 3"], []
    env = {"Array": Array, "dev": device, "_struct_packed": _struct_packed}
    for i, ((kind, t, ndim), v) in enumerate(zip(plan, names)):
        env[f"t{i}"] = t
        if kind in (_ARRAY, _OUT):
            refuse = f"type({v}) is not Array or {v}.dtype is not t{i} or {v}.ndim != {ndim} or {v}.device is not dev"
            body += [f"    if {refuse}{f' or {v}._unwritable' if kind == _OUT else ''}:", "        return None",
                     f"    if not {v}.is_contiguous:", "        flags = 2"]
            items.append(f"{v}._desc_bytes")
        elif kind == _INDEXED:  # the general path checks an indexed array
            body = ["    return None"]
            break
        elif kind in (_FLOAT, _INT, _BOOL):
            refuse = {_FLOAT: f"type({v}) is not float and type({v}) is not int", _INT: f"type({v}) is not int",
                      _BOOL: f"type({v}) is not bool"}[kind]
            body += [f"    if {refuse}:", "        return None"]
            items.append(v)
        elif kind == _VALUE:
            body += [f"    if type({v}) is not t{i}:", "        return None"]
            items.append(f"{v}._v.tobytes()")
        else:
            body += [f"    if type({v}) is not t{i}:", "        return None",
                     f"    p{i}, contiguous = _struct_packed({v}, t{i})", "    if not contiguous:", "        flags = 2"]
            items.append(f"p{i}")
    source = "\n".join([f"def pack_args({', '.join(names)}):", *body,
                        f"    return flags, ({''.join(f'{x}, ' for x in items)})"])
    # made from the plan's own kinds and names
    exec(compile(source, "<xsim launch: pack_args>", "exec"), env)  # noqa: S102
    return env["pack_args"]


def _launch_fast(kernel, dim, inputs, outputs, device, record_tape, run: bool = True) -> bool:
    """Launch a kernel that launched before, when every argument is plain: an xsim array of the
    parameter's dtype and ndim on the kernel's device, a Python number of the parameter's kind, or a
    value of the parameter's exact type. The checks are identity comparisons (``_argument_packer``) and
    the packing one ``struct.pack``. Returns False, having done nothing, for anything else: the general path then
    converts what it can and raises the errors. ``run=False``: only record it (``record``)."""
    prep = getattr(kernel, "launch_cache", None)
    if (prep is None or not prep.fast or prep.mode != config.mode
            or kernel.module.builds.get(prep.key) is not prep.native):
        return False
    values = [*inputs, *outputs]
    if len(values) != len(prep.plan):
        return False
    if type(dim) is int and 0 <= dim <= _MAX_EXTENT:
        shape = (dim,)
    elif type(dim) is tuple and 1 <= len(dim) <= 4 and all(type(d) is int and 0 <= d <= _MAX_EXTENT for d in dim):
        shape = dim
    else:
        return False
    dev = prep.device
    if device is None:
        if prep.first_array is None:  # no array names the device: the general path takes the current one
            return False
    elif device is not dev and device != dev.name:
        return False
    checked = prep.pack_args(*values)  # each array's device is dev
    if checked is None:
        return False
    flags, items = checked
    if prep.handles:
        for i, _, kind in prep.handles:
            if not handles.is_live(values[i], kind, dev.name):
                return False
    n = math.prod(shape)
    if run:  # a recorded launch packs its buffer when the backward pass runs its adjoint
        pacer = prep.pacers[0]
        threads = pacer.threads(n)
        try:
            buf = prep.layout.pack(*shape, *(1,) * (4 - len(shape)), n, threads, flags, *items)
        except (struct.error, OverflowError):
            return False
    # a launch that runs has its shapes checked by its entry point (flags bit 1), where it costs nothing and
    # before_launch has kept nothing on the tape yet; one only recorded (``record``), or of no thread (which
    # never calls the entry), is checked here, as the general path checks it
    if (not run or n == 0) and prep.shape_test is not None and prep.shape_test(shape, values):
        check_shapes(prep, shape, values)
    recorder = _current_recorder() if record_tape else None
    before = recorder.before_launch(kernel, prep, values) if recorder is not None else None
    if n > 0 and run:
        if pacer.run(prep.forward, buf, n, threads):
            check_shapes(prep, shape, values)
            raise AssertionError(f"kernel '{kernel.key}': its entry point refused dim {shape} that "
                                 "launch.check_shapes accepts")  # they test the same comparisons
        if prep.checked:
            after_launch(prep, values)
    if recorder is not None:
        recorder.record_launch(kernel, prep, shape, values, before)
    else:
        key = kernel.key
        for i in prep.written:  # Array.mark_written, inlined
            a = values[i]
            a._version += 1
            a._last_writer = key
        if prep.written_nested:
            for _, arr in labelled_arrays(prep.written_nested, values):
                arr.mark_written(key)
    return True


def pack(prep: _Prepared, values):
    args = prep.args_type()
    for (name, t), v in zip(prep.kernel.params, values):
        if isinstance(t, T.ArrayType):
            setattr(args, name, v._desc)
        else:
            setattr(args, name, _to_c(v, t))
    return args


def pack_grads(prep: _Prepared, values, adj_values=None):
    """The adjoint argument structure: each array's grad (explicit ``adj_values`` first)."""
    g = prep.args_type()
    for i, ((name, t), v) in enumerate(zip(prep.kernel.params, values)):
        explicit = adj_values[i] if adj_values is not None and i < len(adj_values) else None
        if isinstance(t, T.ArrayType):
            grad = explicit if explicit is not None else element_grads(v) if _holds_arrays(t) else v.grad
            if grad is not None:
                setattr(g, name, grad._desc)
        elif T.is_struct(t) and t._has_arrays:
            setattr(g, name, _grad_struct(v, t))
    return g


def element_grads(a):
    """The gradient of ``a``, an array of structs holding arrays, as the adjoint reads it: ``a.grad`` (a
    buffer of its own where ``a`` has none: its other fields' gradients then go nowhere) with each
    element's array fields set to the grads of the arrays that element refers to (null where one has
    none), so that the gradient of ``a[i].values`` reaches ``a[i].values.grad`` (Warp's array views carry
    their grad pointers). Built for each backward, from what the elements refer to then."""
    if a.size == 0:  # no elements (Warp's null array among them): nothing to reach
        return None
    g = a.grad
    if g is None:
        g = getattr(a, "_element_grads", None)
        if g is None or g.shape != a.shape:
            g = Array(shape=a.shape, dtype=a.dtype, device=a.device)
            a.__dict__["_element_grads"] = g
    records, out = a.numpy(), g.numpy()
    held = held_arrays(a)
    _set_element_grads(records, out, a.dtype, held)
    if g._host is None:  # ``out`` was a host copy
        g.copy_from_untracked(out)
    return g


def _set_element_grads(records, out, t, held: dict) -> None:
    """Into records ``out`` (the gradient of ``records``, of struct ``t``): each array field's grad view."""
    for f, ft in t._fields.items():
        if T.is_struct(ft) and ft._has_arrays:
            _set_element_grads(records[f], out[f], ft, held)
        elif isinstance(ft, T.ArrayType):
            descs = records[f]
            flat = np.ascontiguousarray(descs).reshape(-1)
            keys = flat.view(np.dtype((np.void, flat.dtype.itemsize)))
            unique, inverse = np.unique(keys, return_inverse=True)
            grads = np.zeros(len(unique), flat.dtype)
            for j, key in enumerate(unique):
                arr = held.get(key.tobytes())
                grad = None if arr is None else arr.grad
                if grad is not None:
                    grads[j] = np.frombuffer(bytes(grad._desc), flat.dtype)[0]
            out[f] = grads[inverse.reshape(-1)].reshape(descs.shape)


def _dims(shape):
    d = LaunchDims()
    for i, s in enumerate(shape):
        d.shape[i] = s
    for i in range(len(shape), 4):
        d.shape[i] = 1
    return d


def check_errors(prep: _Prepared, kernel, adjoint: bool = False):
    err = prep.native.backward_error if adjoint and prep.device.is_cpu else prep.native.error
    if err.code == 0:
        return
    file = kernel.pyfunc.__code__.co_filename
    if err.code == 2:
        err.code = 0
        raise ZeroDivisionError(f"kernel '{kernel.key}' ({file}:{err.line}): integer division or modulo by zero")
    nd = err.ndim
    index = tuple(err.index[i] for i in range(nd))
    shape = tuple(err.shape[i] for i in range(nd))
    labels = prep.meta.arrays
    name = labels[err.param] if 0 <= err.param < len(labels) else "?"
    err.code = 0
    raise IndexError(f"kernel '{kernel.key}' ({file}:{err.line}): index {index} is out of bounds for array "
                     f"'{name}' with shape {shape}")


def after_launch(prep: _Prepared, values, adjoint: bool = False):
    """Debug mode: raise the launch's out-of-bounds error; check mode: its NaN/inf (``finite``)."""
    if prep.debug:
        check_errors(prep, prep.kernel, adjoint)
    elif prep.mode == "check":
        from .finite import check_launch
        check_launch(prep, values, adjoint)


def _captured(kernel, dim, inputs, outputs, adj_inputs, adj_outputs, device, adjoint, record_tape, stream) -> bool:
    """Inside this thread's graph capture (``xsim.capture``): check the launch as ``launch`` would, then record it
    in the graph instead of running it; True when it did."""
    if capturing() is None:
        return False
    if record_tape and not adjoint and _current_recorder() is not None:
        raise RuntimeError(f"launch(): kernel '{getattr(kernel, 'key', kernel)}' was launched while a Tape records "
                           "inside a graph capture; the capture runs nothing until capture_launch, so the tape could "
                           "not keep the values its backward pass needs. Record the tape outside the capture")
    _prepared_call(kernel, dim, inputs, outputs, device, "launch()")
    inputs, outputs = tuple(inputs), tuple(outputs)  # the graph keeps these arrays and values, not the lists
    adj_inputs = None if adj_inputs is None else tuple(adj_inputs)
    adj_outputs = None if adj_outputs is None else tuple(adj_outputs)
    return defer(lambda: launch(kernel, dim, inputs, outputs, adj_inputs, adj_outputs, device, adjoint, record_tape,
                                stream))


def launch_tiled(kernel, dim, inputs=(), outputs=(), adj_inputs=None, adj_outputs=None, device=None,
                 adjoint: bool = False, record_tape: bool = True, stream=None, block_dim: int | None = None,
                 max_blocks: int = 0):
    """Warp's ``launch_tiled``: ``launch`` over ``dim`` (up to 3 dimensions) with a trailing dimension for the
    threads of each block. xsim runs a block as one thread (``builtins_tile.py``), as Warp's CPU does by
    default, so that dimension is 1 whatever ``block_dim`` (checked, then kept for nothing else) asks for;
    ``tid()`` gives the grid's indices and a last 0."""
    dims = (dim,) if isinstance(dim, int) and not isinstance(dim, bool) else tuple(dim)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"launch_tiled(): dim takes 1 to 3 dimensions (a trailing one is added for the block), "
                         f"got {dim!r}")
    return launch(kernel, (*dims, 1), inputs, outputs, adj_inputs, adj_outputs, device, adjoint, record_tape,
                  stream, block_dim, max_blocks)


def launch(kernel, dim, inputs=(), outputs=(), adj_inputs=None, adj_outputs=None, device=None,
           adjoint: bool = False, record_tape: bool = True, stream=None, block_dim: int | None = None,
           max_blocks: int = 0):
    """Run ``kernel`` over ``dim`` threads (an int or a tuple of up to 4) with ``inputs + outputs``
    as its arguments, in parameter order. ``adjoint=True`` runs the adjoint instead, with
    ``adj_inputs + adj_outputs`` as the gradients (None entries use each array's ``.grad``).
    ``stream``: an ``xsim.Stream`` to run this launch on instead of its device's current stream.
    ``block_dim``, ``max_blocks``: Warp's CUDA block size and grid limit, checked and accepted; xsim has no
    tile programming and covers ``dim`` whatever the grid, so results do not depend on them and xsim keeps
    its own block size and grid."""
    if block_dim is not None or type(max_blocks) is not int or max_blocks > 0:  # (else nothing to check)
        if block_dim is not None and (isinstance(block_dim, bool) or not isinstance(block_dim, int) or block_dim < 1):
            raise ValueError(f"launch(): block_dim must be a positive int, got {block_dim!r}")
        if isinstance(max_blocks, bool) or not isinstance(max_blocks, int):
            raise TypeError(f"launch(): max_blocks must be an int (0 or less: no limit), got {max_blocks!r}")
        if max_blocks > 0 and not getattr(kernel, "grid_stride", True):
            raise ValueError(f"launch(): kernel '{kernel.key}' has grid_stride=False (one thread per index), so "
                             f"its grid cannot be capped with max_blocks={max_blocks}")
    if _CAPTURES and _captured(kernel, dim, inputs, outputs, adj_inputs, adj_outputs, device, adjoint, record_tape,
                               stream):
        return
    if not adjoint and stream is None and _launch_fast(kernel, dim, inputs, outputs, device, record_tape):
        return
    if stream is not None:
        from ..device import ScopedStream
        with ScopedStream(stream):
            return launch(kernel, dim, inputs, outputs, adj_inputs, adj_outputs, device or stream.device, adjoint,
                          record_tape)
    kernel, prep, shape, values = _prepared_call(kernel, dim, inputs, outputs, device, "launch()")
    n = math.prod(shape)
    if not adjoint:
        check_writable(kernel, prep, values)
    if adjoint:
        if prep.meta.replays_writes:
            raise RuntimeError(f"kernel '{kernel.key}' reads an array after writing it: its adjoint replays those "
                               "writes on the array as it was before the launch, which only a Tape keeps; record "
                               "the launch on a Tape and call tape.backward()")
        adj = None
        if adj_inputs is not None or adj_outputs is not None:
            adj = list(adj_inputs or [None] * len(inputs)) + list(adj_outputs or [None] * len(outputs))
        run_backward(prep, shape, values, adj)
        return
    recorder = _current_recorder() if record_tape else None
    before = recorder.before_launch(kernel, prep, values) if recorder is not None else None
    if n > 0:
        run_forward(prep, shape, values)
    if recorder is not None:
        recorder.record_launch(kernel, prep, shape, values, before)
    else:
        bump_versions(prep, values, kernel.key)


def record(kernel, dim, inputs=(), outputs=(), device=None):
    """Record a launch of ``kernel`` on this thread's recording Tape without running it: for a caller
    that computed the same function of the same arrays another way (launches off the tape) and wants
    this kernel's adjoint in the backward pass instead (``SolverXPBD``'s constraint corrections). The
    arguments are checked as ``launch`` checks them; nothing happens when no Tape records."""
    recorder = _current_recorder()
    if recorder is None or _launch_fast(kernel, dim, inputs, outputs, device, True, run=False):
        return
    kernel, prep, shape, values = _prepared_call(kernel, dim, inputs, outputs, device, "record()")
    recorder.record_launch(kernel, prep, shape, values, recorder.before_launch(kernel, prep, values))


def _prepared_call(kernel, dim, inputs, outputs, device, who: str):
    """(kernel specialized for the arguments, its prepared launch data, launch shape, checked argument
    values) of a call ``who`` (``launch()``, ``record()``)."""
    from .kernel import Kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"{who} needs an @xsim.kernel, got {kernel!r}")
    values = list(inputs) + list(outputs)
    if kernel.generic and len(values) == len(kernel.params):
        kernel = kernel.specialize(values)
    params = kernel.params
    if len(values) != len(params):
        names = ", ".join(n for n, _ in params)
        raise TypeError(f"kernel '{kernel.key}' takes {len(params)} arguments ({names}), got {len(values)}")
    shape = normalize_dim(kernel, dim)
    dev = _launch_device(device, values, params)
    mode = config.current_mode()
    if any(t is None or isinstance(t, T.ArrayType) and T.is_struct(t.dtype) and t.dtype._has_arrays
           for _, t in params):
        prepare(kernel, dev, mode)  # the frontend raises a CompileError naming the parameter
    # a None array (Warp's null array) makes the launch bounds-checked: reading it is an IndexError, no crash
    null = any(v is None and isinstance(t, T.ArrayType) for (_, t), v in zip(params, values))
    if mode == "release" and null:
        mode = "debug"
    values = [coerce_arg(kernel, n, t, v, dev) for (n, t), v in zip(params, values)]
    prep = prepare(kernel, dev, mode)
    for i, name, kind in prep.handles:
        handles.check(kernel, name, values[i], kind, dev.name)
    test = prep.shape_test
    if test is not None and not null and test(shape, values):
        check_shapes(prep, shape, values)
    return kernel, prep, shape, values


def _launch_device(device, values, params):
    if device is not None:
        return get_device(device)
    for (_, t), v in zip(params, values):
        if isinstance(t, T.ArrayType) and isinstance(v, Array):
            return v.device
    return get_device()


def run_forward(prep: _Prepared, shape, values):
    contig = _all_contiguous(values, prep.kernel.params)
    if prep.device.is_cpu:
        n = math.prod(shape)
        threads = prep.pacers[0].threads(n)
        prep.pacers[0].run(prep.forward, cpu_buffer(prep, shape, values, contig, threads), n, threads)
    else:
        prep.native.launch_forward(prep.symbol, pack(prep, values), _dims(shape), math.prod(shape), contig)
    if prep.checked:
        after_launch(prep, values)


def _cpu_adjoint_buffer(prep: _Prepared, shape, values) -> tuple[bytes, int]:
    """The adjoint's launch buffer from each array's ``grad`` and its thread count, packed as
    ``_launch_fast`` packs the forward's: one ``struct.pack`` per struct, no ctypes fields."""
    items, grads, contig = [], [], 1
    for (kind, t, _), v in zip(prep.plan, values):
        if kind == _ARRAY or kind == _OUT:
            g = v.grad
            if not v.is_contiguous or g is not None and not g.is_contiguous:
                contig = 0
            items.append(v._desc_bytes)
            grads.append(b"" if g is None else g._desc_bytes)  # "Ns" pads b"" with zeros: a null array
        elif kind == _STRUCT and t._has_arrays:
            packed, contiguous = _struct_packed(v, t)
            grad, grads_contiguous = _struct_grads_packed(v, t)
            if not (contiguous and grads_contiguous):
                contig = 0
            items.append(packed)
            grads.append(grad)
        else:
            items.append(_pack_item(kind, t, v))
            grads.append(b"" if kind == _VALUE or kind == _STRUCT else False if kind == _BOOL else 0)
    n = math.prod(shape)
    threads = prep.pacers[1].threads(n)
    head = (*shape, *(1,) * (4 - len(shape)), n, threads, contig)
    try:
        buf = prep.layout.pack(*head, *items)
    except (struct.error, OverflowError):
        buf = prep.layout.pack(*head, *(_wrap_scalar(k, t, v) for (k, t, _), v in zip(prep.plan, items)))
    return buf + prep.grads_pad + prep.grad_layout.pack(*grads), threads


def run_backward(prep: _Prepared, shape, values, adj_values=None):
    if prep.meta.adjoint_error is not None:
        from ..errors import CompileError
        raise CompileError(f"kernel '{prep.kernel.key}' cannot be differentiated: {prep.meta.adjoint_error}")
    for i, name, kind in prep.handles:  # a tape may run this after the mesh or grid is gone
        handles.check(prep.kernel, name, values[i], kind, prep.device.name)
    if adj_values is None and prep.grad_layout is not None and prep.device.is_cpu:
        n = math.prod(shape)
        if n:
            buf, threads = _cpu_adjoint_buffer(prep, shape, values)
            prep.pacers[1].run(prep.native.backward[prep.symbol], buf, n, threads)
            if prep.checked:
                after_launch(prep, values, adjoint=True)
        return
    grads = pack_grads(prep, values, adj_values)
    contig = _all_contiguous(values, prep.kernel.params) and _grads_contiguous(values, prep.kernel.params, adj_values)
    n = math.prod(shape)
    if n == 0:
        return
    if prep.device.is_cpu:
        threads = prep.pacers[1].threads(n)
        prep.pacers[1].run(prep.native.backward[prep.symbol], cpu_buffer(prep, shape, values, contig, threads, grads),
                           n, threads)
    else:
        prep.native.launch_backward(prep.symbol, pack(prep, values), grads, _dims(shape), n, contig)
    if prep.checked:
        after_launch(prep, values, adjoint=True)


def _grads_contiguous(values, params, adj_values) -> bool:
    for i, ((_, t), v) in enumerate(zip(params, values)):
        if _reaches_element_arrays(t):
            return False
        if isinstance(t, T.ArrayType):
            g = adj_values[i] if adj_values is not None and adj_values[i] is not None else v.grad
            if g is not None and not g.is_contiguous:
                return False
        elif T.is_struct(t) and t._has_arrays:
            return False
    return True


def bump_versions(prep: _Prepared, values, writer: str):
    """Count writes on the arrays a launch wrote (the tape checks these counters)."""
    for _, arr in labelled_arrays(prep.write_slots, values):
        arr.mark_written(writer)


def resolve_label(label: str, params, values):
    """The array argument named ``label`` ("x" or "s.field") in a launch's arguments (``slot_array``)."""
    return slot_array(_label_slots(params, (label,))[0], values)

