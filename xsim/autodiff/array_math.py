"""Warp's host-side arithmetic on arrays: ``a + b``, ``a - 2.0``, ``s * a``, ``a / b``, ``a // b``, ``a % b``,
``a ** b``, ``-a``, ``+a`` and the in-place forms, element by element.

Each operation is a kernel (generated once per operator, operand types and dimension count) launched on
the arrays' device, so it means what the same operator means inside a kernel, and a ``Tape`` records it
like any launch: gradients flow through array arithmetic. An operand is an array of the same shape or one
value (a number, a numpy scalar, an xsim vector/matrix...); with a numpy array the result is numpy's,
on the host values (no tape), as it was before arrays had operators. In-place forms write through the
tape-aware ``assign``: the tape refuses a backward pass through an array they overwrote after reading it.
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

from .. import types as T

_NUMPY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
          "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow}
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "pow": "**",
           "neg": "-", "pos": "+"}
_RESULTS: dict[tuple, object] = {}  # (op, left operand, right operand, ndim) -> result type
_KERNELS: dict[tuple, object] = {}  # (op, left operand, right operand, ndim) -> kernel
_INDEX = ["i", "j", "k", "l"]


def _spell(t) -> str:
    """Python source naming the xsim type ``t`` (for the generated kernel's annotations)."""
    if T.is_scalar(t):
        return f"xsim.types.{t.__name__ if t is not T.bool_ else 'bool_'}"
    s = _spell(t._scalar)
    if t._kind == "vector":
        return f"xsim.types.vector({t._shape[0]}, {s})"
    if t._kind == "matrix":
        return f"xsim.types.matrix({t._shape}, {s})"
    if t._kind == "quat":
        return f"xsim.types.quaternion({s})"
    if t._kind == "transform":
        return f"xsim.types.transformation({s})"
    raise TypeError(f"array arithmetic works on arrays of numbers, vectors and matrices, not {T.type_name(t)}")


def _source(op: str, left, right, ndim: int, out) -> str:
    """A kernel computing ``out[idx] = left <op> right`` (``right`` None: a unary op); an operand is
    ``(type, is_array)``; ``out`` None gives the probe whose last operation has the result type."""
    idx = ", ".join(_INDEX[:ndim])
    params, terms = [], []
    for name, operand in (("a", left), ("b", right)):
        if operand is None:
            continue
        t, is_array = operand
        params.append(f"{name}: xsim.array(dtype={_spell(t)}, ndim={ndim})" if is_array else f"{name}: {_spell(t)}")
        terms.append(f"{name}[{idx}]" if is_array else name)
    expr = f"{SYMBOLS[op]}{terms[0]}" if right is None else f" {SYMBOLS[op]} ".join(terms)
    if out is not None:
        params.append(f"out: xsim.array(dtype={_spell(out)}, ndim={ndim})")
    body = f"out[{idx}] = {expr}" if out is not None else f"r = {expr}"
    return (f"import xsim\n\n\n@xsim.kernel\ndef array_{op}({', '.join(params)}):\n"
            f"    {idx} = xsim.tid()\n    {body}\n")


def _result_type(op: str, left, right, ndim: int):
    """The type ``left <op> right`` gives, as a kernel's frontend types it (no compile); TypeError naming
    the operands where the kernel language has no such operation."""
    key = (op, left, right, ndim)
    found = _RESULTS.get(key)
    if found is None:
        from ..errors import CompileError
        from ..kernels.generated import load_source
        from ..kernels.ir import Op, walk
        from ..kernels.module import build_ir
        try:
            probe = getattr(load_source(_source(op, left, right, ndim, None), f"array_{op}"), f"array_{op}")
            ops = [s for s in walk(build_ir(probe).body) if isinstance(s, Op) and s.out is not None]
        except CompileError as e:
            given = (f"{SYMBOLS[op]}{_describe(left)}" if right is None else
                     f"{_describe(left)} {SYMBOLS[op]} {_describe(right)}")
            raise TypeError(f"array arithmetic {given}: {e.message}") from None
        found = _RESULTS[key] = ops[-1].out.type
    return found


def _kernel(op: str, left, right, ndim: int):
    """The kernel writing ``left <op> right`` into an array of its result type (compiled on first launch)."""
    key = (op, left, right, ndim)
    found = _KERNELS.get(key)
    if found is None:
        from ..kernels.generated import load_source
        result = _result_type(op, left, right, ndim)
        kernel = getattr(load_source(_source(op, left, right, ndim, result), f"array_{op}"), f"array_{op}")
        found = _KERNELS[key] = kernel
    return found


def _describe(operand) -> str:
    t, is_array = operand
    return f"array(dtype={T.type_name(t)})" if is_array else T.type_name(t)


def _operand(value, like):
    """(value to launch with, (type, is_array)) for one operand next to the array ``like``; None when
    it is not something array arithmetic takes (the caller gives Python's NotImplemented)."""
    from ..array import _is_xsim_value, array
    if isinstance(value, array):
        if value.shape != like.shape:
            raise ValueError(f"array arithmetic needs arrays of one shape, got {like.shape} and {value.shape}")
        if value.device != like.device:
            raise ValueError(f"array arithmetic needs arrays on one device, got '{like.device}' and '{value.device}'")
        return value, (value.dtype, True)
    if _is_xsim_value(value):
        return value, (type(value), False)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value, (T.scalar_from_numpy(value.dtype), False)
    if isinstance(value, numbers.Number) and not isinstance(value, complex):
        # a Python number takes the array's scalar type, as a literal next to it in a kernel does
        s = like.dtype._scalar
        if T.is_int(s) and not float(value).is_integer() or T.is_struct(s):
            raise TypeError(f"array arithmetic: {value!r} is not a value of the array's {T.type_name(s)} components")
        return s(value), (s, False)
    return None


def _operands(x, y, reflected: bool, unary: bool):
    """[(value, (type, is_array)), ...] in operator order; None for an operand array arithmetic does not take."""
    if unary:
        return [(x, (x.dtype, True))]
    other = _operand(y, x)
    if other is None:
        return None
    return [other, (x, (x.dtype, True))] if reflected else [(x, (x.dtype, True)), other]


def _launch(op: str, x, operands):
    """A new array holding the operation on ``operands``, launched over ``x``'s shape."""
    from ..array import empty
    from ..kernels.launch import launch
    types = [t for _, t in operands] + [None]
    kernel = _kernel(op, types[0], types[1], x.ndim)
    grad = any(isinstance(v, type(x)) and v.requires_grad for v, _ in operands)
    out = empty(x.shape, _result_type(op, types[0], types[1], x.ndim), x.device, requires_grad=grad)
    launch(kernel, x.shape, inputs=[v for v, _ in operands], outputs=[out], device=x.device)
    return out


def apply(op: str, x, y=None, *, reflected: bool = False, unary: bool = False):
    """``x <op> y`` (``y <op> x`` when ``reflected``; ``<op> x`` when ``unary``) for the array ``x``: a new
    array, recorded on the current tape; NotImplemented for an operand it does not take."""
    if not unary and isinstance(y, np.ndarray):  # with a numpy array: numpy's arithmetic on the host values
        return _NUMPY[op](y, x.numpy()) if reflected else _NUMPY[op](x.numpy(), y)
    operands = _operands(x, y, reflected, unary)
    return NotImplemented if operands is None else _launch(op, x, operands)


def apply_in_place(op: str, x, y):
    """``x <op>= y``: the result written back into ``x`` (through ``assign``, which the tape records); a
    result type ``x`` cannot hold is refused before anything is compiled."""
    if isinstance(y, np.ndarray):
        raise TypeError(f"array {SYMBOLS[op]}= numpy array: arithmetic with a numpy array is numpy's, on the host "
                        f"values, so it cannot write into the array; pass xsim.array(...) instead")
    operands = _operands(x, y, False, False)
    if operands is None:
        return NotImplemented
    result = _result_type(op, operands[0][1], operands[1][1], x.ndim)
    if result is not x.dtype:
        raise TypeError(f"array {SYMBOLS[op]}=: the result is {T.type_name(result)}, which an array of "
                        f"{T.type_name(x.dtype)} cannot hold")
    x.assign(_launch(op, x, operands))
    return x
