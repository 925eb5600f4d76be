"""Builtins registry, the rest of Warp's math library: interpolation, steps and rounding, the error
function and its inverses, NaN/inf tests of composites, vector reductions and ``cast`` (native code
in ``native/xsim_mathlib.h``)."""

from __future__ import annotations

import numpy as np

from .. import types as T
from ..errors import WarpCodegenTypeError
from .builtins import Overload, builtin, special_form

builtin("lerp", ["Float", "Float", "Float"], "T")
builtin("lerp", ["FVec", "FVec", "Float"], "V")
builtin("lerp", ["FMat", "FMat", "Float"], "M")
builtin("lerp", ["Quat", "Quat", "Float"], "Q")
builtin("lerp", ["Transform", "Transform", "Float"], "X")
builtin("smoothstep", ["Float", "Float", "Float"], "T")
builtin("step", ["Scalar"], "T")
builtin("nonzero", ["Scalar"], "T")
for _f in ("rint", "frac", "erf", "erfc", "erfinv", "erfcinv"):
    builtin(_f, ["Float"], "T")
builtin("isinf", ["Float"], "Bool", differentiable=False)
for _f in ("isfinite", "isnan", "isinf"):
    builtin(_f, ["FVec"], "Bool", native="v" + _f, differentiable=False)
    builtin(_f, ["FMat"], "Bool", native="v" + _f, differentiable=False)
    builtin(_f, ["Quat"], "Bool", native="v" + _f, differentiable=False)
builtin("mod", ["Vec", "Vec"], "V", native="vmod")
builtin("argmin", ["Vec"], lambda v: T.uint32, differentiable=False)
builtin("argmax", ["Vec"], lambda v: T.uint32, differentiable=False)
builtin("min", ["Vec"], "T", native="vmin_elem")
builtin("max", ["Vec"], "T", native="vmax_elem")


def _byte_size(t) -> int | None:
    if T.is_scalar(t):
        return t._np.itemsize
    if T.is_composite(t):
        return T.num_components(t) * t._scalar._np.itemsize
    if T.is_struct(t) and not t._has_arrays:  # its bytes as laid out in arrays (the native struct's)
        return np.dtype(t._np).itemsize
    return None


@special_form("cast")
def cast(fe, node):
    """``cast(x, dtype)``: the bits of ``x`` read as ``dtype``, a type of the same size (Warp's bit cast)."""
    if len(node.args) != 2 or node.keywords:
        raise fe.err(node, "cast(value, dtype) takes a value and a type")
    x = fe.value(node.args[0])
    to = T.resolve(fe.eval_static(node.args[1]))
    src, dst = _byte_size(x.type), _byte_size(to) if T.is_value_type(to) else None
    if src is None or dst is None:
        raise fe.err(node, f"cast() reinterprets scalar, vector, matrix, quaternion, transform or struct (without "
                           f"arrays) values, not "
                           f"{T.type_name(x.type)} as {T.type_name(to)}", WarpCodegenTypeError)
    if src != dst:
        raise fe.err(node, f"cast() needs types of the same size: {T.type_name(x.type)} has {src} bytes, "
                           f"{T.type_name(to)} has {dst}", WarpCodegenTypeError)
    ov = Overload("cast", ("Any",), "", f"bitcast<{to._ctype}>", differentiable=False)
    return fe.emit("call", to, [x], node, overload=ov)


del _f
