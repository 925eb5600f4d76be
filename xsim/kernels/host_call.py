"""Builtins called from Python scope with host values, as Warp allows (``xsim.normalize(xsim.vec3(1, 2, 3))``,
``xsim.quat_from_axis_angle(axis, 0.3)``, ``xsim.transform_identity()``).

The call runs as a one-thread CPU kernel, compiled once per builtin and argument types, so that it
computes exactly what the same call computes inside a kernel (overloads, conversions, errors).
"""

from __future__ import annotations

import ast

import numpy as np

from .. import types as T
from .frontend import Frontend
from .generated import load_source
from .ir import Var
from .scope import ATOMICS

_KERNELS: dict[tuple, tuple] = {}  # (name, argument types) -> (kernel, result type)


def _host_type(value, name: str, k: int):
    from ..array import _value_dtype
    try:
        return _value_dtype(value)
    except TypeError:
        raise TypeError(f"xsim.{name}: argument {k} ({value!r}) is not a number or an xsim value") from None


def _host_dtype(value, name: str, key: str):
    """A keyword argument of a host call, which must be a scalar type (``dtype=float64``, also numpy's)."""
    t = T.resolve(value)
    if not T.is_scalar(t):
        try:
            t = T.scalar_from_numpy(value)
        except TypeError:
            raise TypeError(f"xsim.{name}: keyword {key}={value!r} called from Python must be a scalar type") from None
    return t


def _type_expr(t) -> str:
    """``t`` as the kernel source spells it: its alias (``xsim.vec3f``), else its constructor (a mat23f has no
    alias)."""
    import xsim
    name = T.type_name(t)
    if getattr(xsim, name, None) is t:
        return f"xsim.{name}"
    if T.is_vector(t):
        return f"xsim.types.vector({t._length}, xsim.{T.type_name(t._scalar)})"
    return f"xsim.types.matrix({t._shape}, xsim.{T.type_name(t._scalar)})"


def _source(name: str, arg_types: list, result, kw_types: tuple = ()) -> str:
    """A one-thread kernel calling ``xsim.<name>`` with parameters ``a0, a1...`` (and keyword types): with
    ``result`` None, a probe binding the call to ``r``; else writing each value of the result (a type, or a
    tuple of types for a call giving several values) to its own one-element array ``out0, out1...``."""
    params = "".join(f"a{k}: {_type_expr(t)}, " for k, t in enumerate(arg_types))
    call_args = [f"a{k}" for k in range(len(arg_types))] + [f"{k}=xsim.{T.type_name(t)}" for k, t in kw_types]
    call = f"xsim.{name}({', '.join(call_args)})"
    if result is None:
        outs, body = "", f"    r = {call}\n"
    else:
        results = result if isinstance(result, tuple) else (result,)
        outs = ", ".join(f"out{k}: xsim.array(dtype={_type_expr(t)})" for k, t in enumerate(results))
        names = ", ".join(f"r{k}" for k in range(len(results)))
        body = f"    {names} = {call}\n" + "".join(f"    out{k}[0] = r{k}\n" for k in range(len(results)))
    return f"import xsim\n\n\n@xsim.kernel\ndef host_{name}({params}{outs}):\n{body}"


class _ResultProbe(Frontend):
    """The frontend, noting the value bound to ``r`` (a tuple of values for a call giving several)."""

    result = None

    def assign(self, target, value, node):
        if isinstance(target, ast.Name) and target.id == "r":
            self.result = value
        super().assign(target, value, node)


def _kernel_for(name: str, arg_types: list, kw_types: tuple = ()):
    key = (name, tuple(arg_types), kw_types)
    found = _KERNELS.get(key)
    if found is None:
        from .module import frontend_for
        probe = getattr(load_source(_source(name, arg_types, None, kw_types), f"host_{name}"), f"host_{name}")
        front = frontend_for(probe, _ResultProbe)
        front.build_kernel(probe.symbol)
        value = front.result
        values = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(v, Var) and not isinstance(v.type, T.ArrayType) for v in values):
            raise TypeError(f"xsim.{name} gives no value that can be returned to Python")
        result = tuple(v.type for v in values) if isinstance(value, tuple) else value.type
        kernel = getattr(load_source(_source(name, arg_types, result, kw_types), f"host_{name}"), f"host_{name}")
        found = _KERNELS[key] = (kernel, result)
    return found


_KERNEL_ONLY = {"tid": "reads the thread index", **dict.fromkeys(ATOMICS, "updates an array")}


def call_on_host(name: str, args: tuple, kwargs: dict):
    """``xsim.<name>(*args)`` evaluated on the CPU; a scalar result comes back as a Python number."""
    from ..array import zeros
    from ..errors import CompileError
    from .builtins import HOST_FORMS
    from .builtins_random import SAMPLERS
    from .launch import launch
    if name in HOST_FORMS:
        return HOST_FORMS[name](*args, **kwargs)
    if name in _KERNEL_ONLY or name in SAMPLERS:
        why = _KERNEL_ONLY.get(name, "advances a random state")
        raise TypeError(f"xsim.{name} {why}: it can only be called inside an @xsim.kernel or @xsim.func")
    kw_types = tuple(sorted((k, _host_dtype(v, name, k)) for k, v in kwargs.items()))
    arg_types = [_host_type(a, name, k) for k, a in enumerate(args)]
    args = [a if T.is_scalar(t) else t(a) for a, t in zip(args, arg_types)]
    try:
        kernel, result = _kernel_for(name, arg_types, kw_types)
    except CompileError as e:
        given = ", ".join(T.type_name(t) for t in arg_types)
        raise TypeError(f"xsim.{name}({given}) called from Python: {e.message}") from None
    outs = [zeros(1, dtype=t, device="cpu") for t in (result if isinstance(result, tuple) else (result,))]
    launch(kernel, 1, inputs=[*args, *outs], device="cpu")
    values = [out.list()[0] for out in outs]
    values = [v.item() if isinstance(v, np.generic) else v for v in values]
    return tuple(values) if isinstance(result, tuple) else values[0]
