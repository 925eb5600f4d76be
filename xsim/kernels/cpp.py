"""The C++ spelling shared by codegen and its op handlers: types, literals, struct field and
parameter names, and the names of ``func_native`` snippets."""

from __future__ import annotations

import hashlib
import math

import numpy as np

from .. import types as T


def ctype(t) -> str:
    """The C++ type of values of xsim type ``t`` (an array: its descriptor)."""
    if isinstance(t, T.IndexedArrayType):
        return "xs::indexed_desc"
    if isinstance(t, T.ArrayType):
        return "xs::array_desc"
    return t._ctype


# a kernel parameter's field in the generated argument struct: prefixed, so that a parameter may have
# any Python name, C++ keywords and the runtime's type names included (``signed``, ``int8_t``)
PARAM_PREFIX = "p_"
# a struct field named as a C++ keyword (new, this, union) or a scalar type is prefixed in C++; so is one that starts with
# the prefix, which keeps the mapping one to one (array labels use the Python name). Other fields keep their names: the
# native headers use those of the geometry query structs.
FIELD_PREFIX = "f_"
_CPP_RESERVED = frozenset((
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case",
    "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval",
    "constexpr", "constinit", "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype",
    "default", "delete", "do", "double", "dynamic_cast", "else", "enum", "explicit", "export", "extern",
    "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new",
    "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private", "protected", "public",
    "register", "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
    "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true",
    "try", "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
    "wchar_t", "while", "xor", "xor_eq",
    # the runtime's scalar type names: a member named as its own type changes that name's meaning
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
))


def cfield(name: str) -> str:
    """The C++ name of struct field ``name``."""
    return FIELD_PREFIX + name if name in _CPP_RESERVED or name.startswith(FIELD_PREFIX) else name


def is_diff(t) -> bool:
    """Whether values of type ``t`` carry adjoints (float scalars, float composites, structs)."""
    if isinstance(t, T.ArrayType) or t is None:
        return False
    if T.is_struct(t):
        return True
    s = t._scalar if not T.is_scalar(t) else t
    return T.is_float(s)


def literal(value, t) -> str:
    """The C++ expression of the constant ``value`` of type ``t``."""
    if t is T.bool_:
        return "true" if value else "false"
    if T.is_int(t):
        return f"(({t._ctype}){int(value)}{'ll' if t in (T.int64, T.uint64) else ''})"
    v = float(value)
    if math.isinf(v) or math.isnan(v):
        body = f"xs::special_float<{'double' if t is T.float64 else 'float'}>({0 if math.isnan(v) else (1 if v > 0 else -1)})"
    elif t is T.float64:
        body = repr(v)
    else:
        body = repr(float(np.float32(v))) + "f"
        if "e" not in body and "." not in body:
            body = body[:-1] + ".0f"
    if t is T.float16 or t is T.bfloat16:
        return f"{t._ctype}({body})"
    return f"(({t._ctype}){body})" if t is T.float64 else body


def native_name(fn) -> str:
    """The C++ name of a ``func_native`` (its Python name, made unique per definition)."""
    h = hashlib.blake2b(repr((fn.key, fn.params, fn.ret, fn.snippet, fn.adj_snippet)).encode(), digest_size=4)
    return f"xsn_{fn.pyfunc.__name__}_{h.hexdigest()}"


def adj_zero(t) -> str:
    """The C++ value an adjoint of type ``t`` starts from (and is reset to): negative zero in every float32/float64
    component. It is IEEE arithmetic's additive identity (``-0 + x`` is ``x`` for every ``x``, where ``+0 + -0`` is
    ``+0``), so the compiler may fold an adjoint's first accumulation into a plain assignment (``-0 - x`` into
    ``-x``) without any fast-math flag; from ``+0`` it must keep the add. An adjoint that receives nothing reads
    ``-0``, equal to ``0``: adding it into a gradient array leaves ``+0`` there. Other types start at ``{}``."""
    if T.is_struct(t) or t is None or T.is_tile(t):
        return "{}"
    scalar = t if T.is_scalar(t) else t._scalar
    if scalar is not T.float32 and scalar is not T.float64:
        return "{}"
    z = literal(-0.0, scalar)
    if T.is_scalar(t):
        return z
    if t._kind == "matrix":
        rows, cols = t._shape
        inner = "{" + ", ".join("{" + ", ".join([z] * cols) + "}" for _ in range(rows)) + "}"
    elif t._kind == "transform":
        inner = "{{" + ", ".join([z] * 3) + "}}, {{" + ", ".join([z] * 4) + "}}"
    else:  # vector, quat
        inner = "{" + ", ".join([z] * t._shape[0]) + "}"
    return f"{ctype(t)}{{{inner}}}"
