"""``xsim.launch``: check and pack a kernel's arguments, make one native call, and tell the active
recorder (the autodiff Tape, a layer above) about it."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from .. import config
from .. import types as T
from ..array import array as Array
from ..device import get_device

_recorders: list = []  # the Tape pushes itself here while recording


class LaunchDims(ctypes.Structure):
    _fields_ = [("shape", ctypes.c_int64 * 4)]


def _args_struct(kernel) -> type:
    fields = []
    for name, t in kernel.params:
        if isinstance(t, T.ArrayType):
            fields.append((name, T.ArrayDesc))
        else:
            fields.append((name, t._ctypes))
    if not fields:
        fields = [("unused_", ctypes.c_char)]
    return type(f"{kernel.key}_args", (ctypes.Structure,), {"_fields_": fields})


def _to_c(value, t):
    """A checked Python value of xsim type ``t`` as the ctypes value of its kernel argument."""
    if T.is_scalar(t):
        return value
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
    return t._ctypes(*np.asarray(value, dtype=t._np).ravel().tolist())


def _grad_struct(value, t):
    """For a struct argument: the same struct with each array field replaced by its grad."""
    c = t._ctypes()
    for f, ft in t._fields.items():
        fv = getattr(value, f)
        if isinstance(ft, T.ArrayType):
            if fv is not None and fv.grad is not None:
                setattr(c, f, fv.grad._desc)
        elif T.is_struct(ft):
            setattr(c, f, _grad_struct(fv, ft))
    return c


def normalize_dim(kernel, dim) -> tuple[int, ...]:
    shape = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    if not 1 <= len(shape) <= 4 or any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ValueError(f"launch of kernel '{kernel.key}': dim must be a non-negative int or a tuple of 1 to 4 of "
                         f"them, got {dim!r}")
    return tuple(int(d) for d in shape)


def coerce_arg(kernel, name: str, t, value, device):
    """Check one argument against its parameter type; wrap foreign arrays (numpy, torch)."""
    where = f"kernel '{kernel.key}' parameter '{name}'"
    if isinstance(t, T.ArrayType):
        if value is None:
            raise TypeError(f"{where}: expected {t!r}, got None")
        if not isinstance(value, Array):
            value = _wrap_foreign(value, t, where)
        if value.dtype is not t.dtype or value.ndim != t.ndim:
            raise TypeError(f"{where}: expected array(dtype={T.type_name(t.dtype)}, ndim={t.ndim}), got "
                            f"array(dtype={T.type_name(value.dtype)}, ndim={value.ndim})")
        if value.device != device:
            raise ValueError(f"{where}: array is on device '{value.device}' but the launch runs on '{device}'")
        return value
    if T.is_scalar(t):
        if isinstance(value, (bool, np.bool_)) and t is not T.bool_ or (
                T.is_int(t) and isinstance(value, (float, np.floating))):
            raise TypeError(f"{where}: expected {T.type_name(t)}, got {type(value).__name__} {value!r}")
        if not isinstance(value, (int, float, bool, np.number, np.bool_)):
            raise TypeError(f"{where}: expected {T.type_name(t)}, got {type(value).__name__}")
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


def _wrap_foreign(value, t, where):
    from ..array import from_numpy
    if isinstance(value, np.ndarray):
        return from_numpy(value, dtype=t.dtype)
    if type(value).__module__.startswith("torch"):
        from ..autodiff.interop import wrap_torch_for_launch
        return wrap_torch_for_launch(value, t.dtype)
    raise TypeError(f"{where}: expected {t!r}, got {type(value).__name__}")


def _all_contiguous(values, params) -> bool:
    for (name, t), v in zip(params, values):
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

    def __init__(self, kernel, device, debug):
        self.kernel = kernel
        self.device = device
        self.debug = debug
        self.native = kernel.module_build(device, debug)
        self.meta = self.native.metas[kernel.key]
        self.args_type = _args_struct(kernel)
        self.forward = self.native.forward[kernel.key]
        self.backward = self.native.backward.get(kernel.key)


def prepare(kernel, device, debug) -> _Prepared:
    cache = kernel.launch_cache
    key = (device.name, debug)
    if cache is None or cache[0] != key or cache[1].native is not kernel.module.builds.get((device.name, debug)):
        kernel.launch_cache = (key, _Prepared(kernel, device, debug))
    return kernel.launch_cache[1]


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
            grad = explicit if explicit is not None else v.grad
            if grad is not None:
                setattr(g, name, grad._desc)
        elif T.is_struct(t) and t._has_arrays:
            setattr(g, name, _grad_struct(v, t))
    return g


def _dims(shape):
    d = LaunchDims()
    for i, s in enumerate(shape):
        d.shape[i] = s
    for i in range(len(shape), 4):
        d.shape[i] = 1
    return d


def check_errors(prep: _Prepared, kernel):
    err = prep.native.error
    if err.code == 0:
        return
    nd = err.ndim
    index = tuple(err.index[i] for i in range(nd))
    shape = tuple(err.shape[i] for i in range(nd))
    labels = prep.meta.arrays
    name = labels[err.param] if 0 <= err.param < len(labels) else "?"
    file = kernel.pyfunc.__code__.co_filename
    err.code = 0
    raise IndexError(f"kernel '{kernel.key}' ({file}:{err.line}): index {index} is out of bounds for array "
                     f"'{name}' with shape {shape}")


def launch(kernel, dim, inputs=(), outputs=(), adj_inputs=None, adj_outputs=None, device=None,
           adjoint: bool = False, record_tape: bool = True, stream=None):
    """Run ``kernel`` over ``dim`` threads (an int or a tuple of up to 4) with ``inputs + outputs``
    as its arguments, in parameter order. ``adjoint=True`` runs the adjoint instead, with
    ``adj_inputs + adj_outputs`` as the gradients (None entries use each array's ``.grad``)."""
    from .kernel import Kernel
    if not isinstance(kernel, Kernel):
        raise TypeError(f"launch() needs an @xsim.kernel, got {kernel!r}")
    values = list(inputs) + list(outputs)
    params = kernel.params
    if len(values) != len(params):
        names = ", ".join(n for n, _ in params)
        raise TypeError(f"kernel '{kernel.key}' takes {len(params)} arguments ({names}), got {len(values)}")
    shape = normalize_dim(kernel, dim)
    dev = _launch_device(device, values, params)
    values = [coerce_arg(kernel, n, t, v, dev) for (n, t), v in zip(params, values)]
    debug = config.mode == "debug"
    prep = prepare(kernel, dev, debug)
    n = math.prod(shape)
    if adjoint:
        adj = None
        if adj_inputs is not None or adj_outputs is not None:
            adj = list(adj_inputs or [None] * len(inputs)) + list(adj_outputs or [None] * len(outputs))
        run_backward(prep, shape, values, adj)
        return
    recorder = _recorders[-1] if (_recorders and record_tape) else None
    snapshots = recorder.before_launch(kernel, prep.meta, params, values) if recorder is not None else None
    if n > 0:
        run_forward(prep, shape, values)
    if recorder is not None:
        recorder.record_launch(kernel, prep, shape, values, snapshots)
    else:
        bump_versions(prep.meta, params, values, kernel.key)


def _launch_device(device, values, params):
    if device is not None:
        return get_device(device)
    for (_, t), v in zip(params, values):
        if isinstance(t, T.ArrayType) and isinstance(v, Array):
            return v.device
    return get_device()


def run_forward(prep: _Prepared, shape, values):
    args = pack(prep, values)
    contig = _all_contiguous(values, prep.kernel.params)
    if prep.device.is_cpu:
        prep.forward(ctypes.addressof(args), ctypes.addressof(_dims(shape)), math.prod(shape),
                     _threads(), int(contig))
    else:
        prep.native.launch_forward(prep.kernel.key, args, _dims(shape), math.prod(shape), contig)
    if prep.debug:
        check_errors(prep, prep.kernel)


def run_backward(prep: _Prepared, shape, values, adj_values=None):
    if prep.backward is None and prep.device.is_cpu or prep.meta.adjoint_error is not None:
        from ..errors import CompileError
        raise CompileError(f"kernel '{prep.kernel.key}' cannot be differentiated: {prep.meta.adjoint_error}")
    args = pack(prep, values)
    grads = pack_grads(prep, values, adj_values)
    contig = _all_contiguous(values, prep.kernel.params) and _grads_contiguous(values, prep.kernel.params, adj_values)
    n = math.prod(shape)
    if n == 0:
        return
    if prep.device.is_cpu:
        prep.backward(ctypes.addressof(args), ctypes.addressof(grads), ctypes.addressof(_dims(shape)), n,
                      _threads(), int(contig))
    else:
        prep.native.launch_backward(prep.kernel.key, args, grads, _dims(shape), n, contig)
    if prep.debug:
        check_errors(prep, prep.kernel)


def _grads_contiguous(values, params, adj_values) -> bool:
    for i, ((_, t), v) in enumerate(zip(params, values)):
        if isinstance(t, T.ArrayType):
            g = adj_values[i] if adj_values is not None and adj_values[i] is not None else v.grad
            if g is not None and not g.is_contiguous:
                return False
        elif T.is_struct(t) and t._has_arrays:
            return False
    return True


def bump_versions(meta, params, values, writer: str):
    """Count writes on the arrays a launch wrote (the tape checks these counters)."""
    if not meta.writes:
        return
    for label in meta.writes:
        arr = resolve_label(label, params, values)
        if arr is not None:
            arr._version += 1
            arr._last_writer = writer


def resolve_label(label: str, params, values):
    """The array argument named ``label`` ("x" or "s.field") in a launch's arguments."""
    head, _, rest = label.partition(".")
    for (name, _), v in zip(params, values):
        if name == head:
            for part in rest.split(".") if rest else []:
                v = getattr(v, part, None)
            return v if isinstance(v, Array) else None
    return None


_nthreads = None


def _threads() -> int:
    global _nthreads
    if _nthreads is None:
        from .module import num_threads
        _nthreads = num_threads()
    return _nthreads
