"""Builtins registry, transforms: Warp's in-place setters ``transform_set_translation(t, p)`` and
``transform_set_rotation(t, q)``, which rebind the local transform ``t`` (as ``t.p = p`` would) in a kernel
and change the host transform ``t`` itself from Python scope."""

from __future__ import annotations

import numpy as np

from .. import types as T
from ..errors import WarpCodegenTypeError
from .builtins import HOST_FORMS, special_form, store_to_arguments


def _set_part(fe, node, name: str, first: int, size: int):
    if len(node.args) != 2 or node.keywords:
        raise fe.err(node, f"{name}(xform, value) takes a transform variable and the new part")
    x = fe.value(node.args[0])
    part = fe.value(node.args[1])
    if getattr(x.type, "_kind", None) != "transform":
        raise fe.err(node.args[0], f"{name}() needs a transform, got {T.type_name(x.type)}", WarpCodegenTypeError)
    s = x.type._scalar
    want = T.vector(3, s) if size == 3 else T.quaternion(s)
    if part.type is not want:
        raise fe.err(node.args[1], f"{name}() needs a {T.type_name(want)}, got {T.type_name(part.type)}",
                     WarpCodegenTypeError)
    comps = [fe.emit("extract", s, [x, fe.const(i, T.int32)], node) for i in range(7)]
    for i in range(size):
        comps[first + i] = fe.emit("extract", s, [part, fe.const(i, T.int32)], node)
    store_to_arguments(fe, node, [node.args[0]], [fe.emit("construct", x.type, comps, node)])
    return fe.const(False)


@special_form("transform_set_translation")
def transform_set_translation(fe, node):
    """``transform_set_translation(t, p)``: the local transform ``t`` gets translation ``p``."""
    return _set_part(fe, node, "transform_set_translation", 0, 3)


@special_form("transform_set_rotation")
def transform_set_rotation(fe, node):
    """``transform_set_rotation(t, q)``: the local transform ``t`` gets rotation ``q``."""
    return _set_part(fe, node, "transform_set_rotation", 3, 4)


def _set_part_on_host(name: str, first: int, size: int):
    def set_part(xform, part) -> None:
        if getattr(type(xform), "_kind", None) != "transform":
            raise TypeError(f"xsim.{name}(xform, value) needs a transform, got {type(xform).__name__}")
        if np.shape(part) != (size,):
            raise TypeError(f"xsim.{name}() needs {size} components for the new part, got {part!r}")
        xform[first:first + size] = part
    return set_part


HOST_FORMS["transform_set_translation"] = _set_part_on_host("transform_set_translation", 0, 3)
HOST_FORMS["transform_set_rotation"] = _set_part_on_host("transform_set_rotation", 3, 4)
