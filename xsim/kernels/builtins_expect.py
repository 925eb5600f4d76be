"""Builtins registry, device-side output: ``expect_eq(a, b)``, ``expect_neq(a, b)`` and
``expect_near(a, b, tolerance=1e-6)`` print a failed expectation with the kernel file:line and return
whether it held; ``printf(format, *args)`` prints as C's printf (native code in ``native/xsim_expect.h``)."""

from __future__ import annotations

import ast

from .. import types as T
from ..errors import WarpCodegenTypeError
from .builtins import Overload, special_form


def _location(fe, node) -> str:
    """Template arguments naming the call site: the line, then the file name's characters."""
    chars = ", ".join(str(b) for b in fe.f.src.file.encode("utf-8") if b < 128)
    return f"{fe.f.src.lineno(node)}, {chars}"


def _operands(fe, node, name: str, n_max: int):
    if node.keywords and name != "expect_near":
        raise fe.err(node, f"{name}() takes no keyword arguments")
    args = [fe.value(a) for a in node.args]
    if not 2 <= len(args) <= n_max:
        raise fe.err(node, f"{name}() takes {'two' if n_max == 2 else 'two or three'} arguments")
    a, b = fe.unify_weak(args[0], args[1], node)
    if a.weak and b.weak:
        a, b = fe.convert(a, a.type, node), fe.convert(b, a.type, node)
    if a.type is not b.type or not (T.is_scalar(a.type) or T.is_composite(a.type)):
        raise fe.err(node, f"{name}() compares two values of one scalar, vector, matrix, quaternion or transform "
                           f"type, got {T.type_name(a.type)} and {T.type_name(b.type)}: Can't test equality for "
                           f"objects with different types", WarpCodegenTypeError)  # Warp's wording ends it
    return a, b, args[2:]


def _expect(fe, node, name: str, a, b, extra):
    ov = Overload(name, (), "", f"{name}<{_location(fe, node)}>", differentiable=False)
    return fe.emit("call", T.bool_, [a, b, *extra], node, overload=ov)


@special_form("expect_eq")
def expect_eq(fe, node):
    """``expect_eq(actual, expected)``: print both values and the call site when they differ."""
    a, b, _ = _operands(fe, node, "expect_eq", 2)
    return _expect(fe, node, "expect_eq", a, b, [])


@special_form("expect_neq")
def expect_neq(fe, node):
    """``expect_neq(actual, expected)``: print both values and the call site when they are equal."""
    a, b, _ = _operands(fe, node, "expect_neq", 2)
    return _expect(fe, node, "expect_neq", a, b, [])


@special_form("expect_near")
def expect_near(fe, node):
    """``expect_near(actual, expected, tolerance=1e-6)``: print the values, the largest componentwise
    difference and the call site when it exceeds ``tolerance`` (floats only)."""
    a, b, rest = _operands(fe, node, "expect_near", 3)
    for kw in node.keywords:
        if kw.arg != "tolerance" or rest:
            raise fe.err(kw, "expect_near() takes the keyword tolerance= once")
        rest = [fe.value(kw.value)]
    s = a.type._scalar
    if not T.is_float(s):
        raise fe.err(node, f"expect_near() compares float values, got {T.type_name(a.type)}", WarpCodegenTypeError)
    tol = rest[0] if rest else fe.const(1e-6)
    if tol.weak:
        tol = fe.convert(tol, s, node)
    if tol.type is not s:
        raise fe.err(node, f"expect_near() needs a {T.type_name(s)} tolerance, got {T.type_name(tol.type)}",
                     WarpCodegenTypeError)
    return _expect(fe, node, "expect_near", a, b, [tol])


@special_form("printf")
def printf(fe, node):
    """``printf(format, *args)``: Warp's printf, C's format (a string literal) and scalar arguments, printed by
    each thread that runs it (in no set order across threads)."""
    if node.keywords or not node.args or not (isinstance(node.args[0], ast.Constant)
                                              and isinstance(node.args[0].value, str)):
        raise fe.err(node, "printf() takes a format string literal, then the values to print")
    args = []
    for a in node.args[1:]:
        v = fe.value(a)
        if v.weak:
            v = fe.typed(v, T.float32 if isinstance(v.const, float) else T.bool_ if isinstance(v.const, bool)
                         else T.int32, a)
        if not T.is_scalar(v.type):
            raise fe.err(a, f"printf() prints scalars, got {T.type_name(v.type)}: pass its components "
                            f"(v[0], v[1], ...)", WarpCodegenTypeError)
        args.append(v)
    chars = ", ".join(str(b) for b in node.args[0].value.encode("utf-8"))
    ov = Overload("printf", (), "", f"printf_format<{chars}>" if chars else "printf_format<>",
                  differentiable=False)
    return fe.emit("call", T.bool_, args, node, overload=ov)
