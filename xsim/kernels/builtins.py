"""The builtins registry: one row per builtin overload.

A row names the builtin as kernels call it, the argument type patterns, the return-type rule,
the native function in ``native/xsim.h`` and whether it is differentiable. The native header
keeps each forward function next to its adjoint twin, always with the signature

    adj_<native>(args..., ret, adj_args&..., adj_ret)

where ``ret`` is the forward result and each ``adj_arg`` is accumulated into (``+=``).

Type patterns (all patterns of one overload share one component scalar type ``T``):

``Float`` ``Int`` ``Scalar`` ``Bool``; ``Vec`` (any vector, and every ``Vec`` of the overload is
the same type), ``Vec2`` ``Vec3`` ``Vec4``, ``Vec'`` (a second, independent vector length);
``Mat`` (any matrix, every ``Mat`` the same type), ``SqMat`` (square), ``Mat33``, ``Mat44``; ``Quat``;
``Transform``. A leading ``F`` (``FVec``, ``FMat``, ``FSqMat``) asks for float components.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .. import types as T
from ..errors import WarpCodegenTypeError

Type = object  # an xsim type class


@dataclass(frozen=True)
class Overload:
    name: str
    params: tuple[str, ...]
    returns: str | Callable[..., Type]
    native: str
    differentiable: bool = True


@dataclass
class Builtin:
    name: str
    overloads: list[Overload] = field(default_factory=list)

    def signatures(self) -> str:
        return "; ".join(f"{self.name}({', '.join(o.params)})" for o in self.overloads)


BUILTINS: dict[str, Builtin] = {}


def builtin(name: str, params: list[str], returns, native: str | None = None, differentiable: bool = True):
    """Declare one overload of a builtin (see the module docstring for the pattern language)."""
    b = BUILTINS.setdefault(name, Builtin(name))
    b.overloads.append(Overload(name, tuple(params), returns, native or name, differentiable))


# Builtins that write into local variables named by some of their arguments (Warp's by-reference
# outputs, e.g. ``hash_grid_query_next(query, index)``): name -> a function of the number of call
# arguments giving those positions. A dynamic loop carries these names, also from its condition.
OUTPUT_ARGS: dict[str, Callable[[int], Iterable[int]]] = {}

# Builtins whose arguments are not all values (a type, an output variable, a default): each is a
# function ``(frontend, call_node) -> Var`` that builds the call itself.
SPECIAL_FORMS: dict[str, Callable] = {}


# Special forms that Warp also runs from Python scope where a one-thread kernel cannot serve, because they
# change their host argument in place (``transform_set_translation(t, p)`` on a host transform): name -> the
# Python function doing it.
HOST_FORMS: dict[str, Callable] = {}


def special_form(name: str):
    """Register the decorated function as the special form of builtin ``name``."""
    def register(fn):
        SPECIAL_FORMS[name] = fn
        return fn
    return register


def store_to_arguments(fe, node, targets: list, values: list) -> None:
    """Warp's output-argument forms (``svd3(A, U, sigma, V)``, ``transform_set_translation(t, p)``):
    rebind each local variable named by ``targets`` (call argument nodes) to its value. Anything but
    a plain local name is refused: Warp would write a discarded copy."""
    for target, value in zip(targets, values):
        if not isinstance(target, ast.Name):
            raise fe.err(target, f"{node.func.attr if isinstance(node.func, ast.Attribute) else 'this call'}() "
                                 f"writes its result into this argument, which must be a local variable name "
                                 f"(assign an array element or a component from that variable afterwards)")
        old = fe.value(target)
        if old.type is not value.type:
            raise fe.err(target, f"expected a {T.type_name(value.type)} variable here, got "
                                 f"{T.type_name(old.type)}", WarpCodegenTypeError)
        fe.assign(target, value, node)


# ---------------------------------------------------------------------------------------------
# pattern matching


def _match_one(pattern: str, t, env: dict) -> bool:
    if T.is_scalar(t):
        comp = t
    else:
        comp = getattr(t, "_scalar", None)
    want_float = pattern.startswith("F") and pattern not in ("Float",)
    want_int = pattern.startswith("I") and pattern not in ("Int",)
    base = pattern[1:] if want_float or want_int else pattern
    if base in ("Float", "Int", "Scalar", "Bool"):
        if not T.is_scalar(t):
            return False
        ok = {"Float": T.is_float(t), "Int": T.is_int(t), "Scalar": t is not T.bool_, "Bool": t is T.bool_}[base]
        if not ok:
            return False
    else:
        kind = getattr(t, "_kind", None)
        if base.startswith("Vec"):
            if kind != "vector":
                return False
            key = "V'" if base.endswith("'") else "V"
            size = base[3:].rstrip("'")
            if size and t._length != int(size):
                return False
            if env.setdefault(key, t) is not t:
                return False
        elif base.rstrip("'") in ("Mat", "SqMat", "Mat33", "Mat44"):
            if kind != "matrix":
                return False
            r, c = t._shape
            if base == "SqMat" and r != c or base in ("Mat33", "Mat44") and (r, c) != (int(base[3]),) * 2:
                return False
            if env.setdefault("M'" if base.endswith("'") else "M", t) is not t:
                return False
        elif base == "Quat":
            if kind != "quat":
                return False
        elif base == "Transform":
            if kind != "transform":
                return False
        else:
            raise ValueError(f"unknown builtin type pattern {pattern!r}")
        if want_float and not T.is_float(comp) or want_int and not T.is_int(comp):
            return False
    if base == "Bool":
        return True
    return env.setdefault("T", comp) is comp


_RETURNS: dict[str, Callable[[dict], Type]] = {
    "T": lambda e: e["T"],
    "Bool": lambda e: T.bool_,
    "V": lambda e: e["V"],
    "M": lambda e: e["M"],
    "Q": lambda e: T.quaternion(e["T"]),
    "X": lambda e: T.transformation(e["T"]),
    "Vec3": lambda e: T.vector(3, e["T"]),
    "Mat33": lambda e: T.matrix((3, 3), e["T"]),
    "MT": lambda e: T.matrix((e["M"]._shape[1], e["M"]._shape[0]), e["T"]),
    "Outer": lambda e: T.matrix((e["V"]._length, e.get("V'", e["V"])._length), e["T"]),
    "Diag": lambda e: T.matrix((e["V"]._length, e["V"]._length), e["T"]),
}


def resolve_overload(name: str, arg_types: list) -> tuple[Overload, Type] | None:
    """The first overload of builtin ``name`` matching ``arg_types`` and its return type, or None."""
    b = BUILTINS.get(name)
    if b is None:
        return None
    for o in b.overloads:
        if len(o.params) != len(arg_types):
            continue
        env: dict = {}
        if all(_match_one(p, t, env) for p, t in zip(o.params, arg_types)):
            ret = o.returns(*arg_types) if callable(o.returns) else _RETURNS[o.returns](env)
            if ret is not None:
                return o, ret
    return None


def _mat_mat(a, b):
    if a._shape[1] != b._shape[0]:
        return None
    return T.matrix((a._shape[0], b._shape[1]), a._scalar)


def _mat_vec(m, v):
    return T.vector(m._shape[0], m._scalar) if m._shape[1] == v._length else None


def _vec_mat(v, m):
    return T.vector(m._shape[1], m._scalar) if m._shape[0] == v._length else None


# ---------------------------------------------------------------------------------------------
# operators (the frontend maps Python operators to these names)

for _op in ("add", "sub"):
    builtin(_op, ["Scalar", "Scalar"], "T")
    builtin(_op, ["Vec", "Vec"], "V")
    builtin(_op, ["Mat", "Mat"], "M")
    builtin(_op, ["Quat", "Quat"], "Q")
    builtin(_op, ["Transform", "Transform"], "X")
builtin("mul", ["Scalar", "Scalar"], "T")
builtin("mul", ["Vec", "Scalar"], "V")
builtin("mul", ["Scalar", "Vec"], "V")
builtin("mul", ["Mat", "Scalar"], "M")
builtin("mul", ["Scalar", "Mat"], "M")
builtin("mul", ["Quat", "Scalar"], "Q")
builtin("mul", ["Scalar", "Quat"], "Q")
builtin("mul", ["Transform", "Scalar"], "X")
builtin("mul", ["Scalar", "Transform"], "X")
builtin("mul", ["Mat", "Vec"], _mat_vec, native="mat_vec")
builtin("mul", ["Vec", "Mat"], _vec_mat, native="vec_mat")
builtin("mul", ["Quat", "Quat"], "Q", native="quat_mul")
builtin("mul", ["Transform", "Transform"], "X", native="transform_multiply")
builtin("div", ["Scalar", "Scalar"], "T")
builtin("div", ["Vec", "Scalar"], "V")
builtin("div", ["Scalar", "Vec"], "V")
builtin("div", ["Mat", "Scalar"], "M")
builtin("div", ["Quat", "Scalar"], "Q")
builtin("div", ["Scalar", "Quat"], "Q")
builtin("div", ["Scalar", "Mat"], "M")
builtin("floordiv", ["Scalar", "Scalar"], "T")
builtin("mod", ["Scalar", "Scalar"], "T")
builtin("neg", ["Scalar"], "T")
builtin("neg", ["Vec"], "V")
builtin("neg", ["Mat"], "M")
builtin("neg", ["Quat"], "Q")
for _op in ("lt", "le", "gt", "ge"):
    builtin(_op, ["Scalar", "Scalar"], "Bool", differentiable=False)
    builtin(_op, ["Bool", "Bool"], "Bool", differentiable=False)  # False < True, as in Python and Warp
for _op in ("eq", "ne"):
    builtin(_op, ["Scalar", "Scalar"], "Bool", differentiable=False)
    builtin(_op, ["Bool", "Bool"], "Bool", differentiable=False)
    builtin(_op, ["Vec", "Vec"], "Bool", differentiable=False)
    builtin(_op, ["Mat", "Mat"], "Bool", differentiable=False)
    builtin(_op, ["Quat", "Quat"], "Bool", differentiable=False)
for _op in ("bit_and", "bit_or", "bit_xor", "lshift", "rshift"):
    builtin(_op, ["Int", "Int"], "T", differentiable=False)
    builtin(_op, ["IVec", "IVec"], "V", native="cw_" + _op, differentiable=False)
    builtin(_op, ["IMat", "IMat"], "M", native="cw_" + _op, differentiable=False)
builtin("invert", ["Int"], "T", differentiable=False)
builtin("invert", ["IVec"], "V", native="cw_invert", differentiable=False)
builtin("invert", ["IMat"], "M", native="cw_invert", differentiable=False)

# ---------------------------------------------------------------------------------------------
# scalar math

for _f in ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sqrt", "cbrt",
           "exp", "log", "log2", "log10", "degrees", "radians"):
    builtin(_f, ["Float"], "T")
builtin("atan2", ["Float", "Float"], "T")
builtin("pow", ["Float", "Float"], "T")
for _f in ("floor", "ceil", "round", "trunc"):
    builtin(_f, ["Float"], "T")
builtin("abs", ["Scalar"], "T")
builtin("abs", ["Vec"], "V", native="vabs")
builtin("sign", ["Scalar"], "T")
builtin("sign", ["Vec"], "V", native="vsign")
builtin("min", ["Scalar", "Scalar"], "T")
builtin("min", ["Vec", "Vec"], "V", native="vmin")
builtin("max", ["Scalar", "Scalar"], "T")
builtin("max", ["Vec", "Vec"], "V", native="vmax")
builtin("clamp", ["Scalar", "Scalar", "Scalar"], "T")
builtin("isfinite", ["Float"], "Bool", differentiable=False)
builtin("isnan", ["Float"], "Bool", differentiable=False)

# ---------------------------------------------------------------------------------------------
# vectors and matrices

builtin("dot", ["Vec", "Vec"], "T")
builtin("dot", ["Quat", "Quat"], "T", native="qdot")
builtin("cross", ["Vec3", "Vec3"], "V")
builtin("length", ["FVec"], "T")
builtin("length", ["Quat"], "T", native="qlength")
builtin("length_sq", ["Vec"], "T")
builtin("length_sq", ["Quat"], "T", native="qlength_sq")
builtin("normalize", ["FVec"], "V")
builtin("normalize", ["Quat"], "Q", native="qnormalize")
builtin("outer", ["Vec", "Vec'"], "Outer")  # Vec' may have Vec's length too
builtin("cw_mul", ["Vec", "Vec"], "V")
builtin("cw_div", ["Vec", "Vec"], "V")
builtin("transpose", ["Mat"], "MT")
builtin("inverse", ["FSqMat"], "M")
builtin("determinant", ["FSqMat"], "T")
builtin("trace", ["SqMat"], "T")
builtin("diag", ["Vec"], "Diag")
builtin("skew", ["Vec3"], "Mat33")
builtin("mul", ["Mat", "Mat'"], _mat_mat, native="mat_mat")
builtin("ddot", ["Mat", "Mat"], "T")

# ---------------------------------------------------------------------------------------------
# quaternions and transforms

builtin("quat_from_axis_angle", ["FVec3", "Float"], "Q")
builtin("quat_rotate", ["Quat", "Vec3"], "V")
builtin("quat_rotate_inv", ["Quat", "Vec3"], "V")
builtin("quat_inverse", ["Quat"], "Q")
builtin("quat_to_matrix", ["Quat"], "Mat33")
builtin("transform_point", ["Transform", "Vec3"], "V")
builtin("transform_vector", ["Transform", "Vec3"], "V")
builtin("transform_point", ["Mat44", "Vec3"], "V")
builtin("transform_vector", ["Mat44", "Vec3"], "V")
builtin("transform_multiply", ["Transform", "Transform"], "X")
builtin("transform_inverse", ["Transform"], "X")
builtin("transform_get_translation", ["Transform"], "Vec3")
builtin("transform_get_rotation", ["Transform"], "Q")

# the parameter names of Warp's builtins, so that calls may pass them by keyword (``pow(x=2.0, y=4.0)``)
ARG_NAMES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sqrt", "cbrt", "exp",
                     "log", "log2", "log10", "degrees", "radians", "floor", "ceil", "round", "trunc", "abs",
                     "sign"), ("x",)),
    **dict.fromkeys(("length", "length_sq", "normalize", "transpose", "inverse", "determinant", "trace",
                     "isfinite", "isnan"), ("a",)),
    **dict.fromkeys(("min", "max", "dot", "cross", "outer", "cw_mul", "cw_div", "ddot", "transform_multiply"),
                    ("a", "b")),
    **dict.fromkeys(("diag", "skew"), ("vec",)),
    **dict.fromkeys(("quat_inverse", "quat_to_matrix"), ("quat",)),
    **dict.fromkeys(("transform_inverse", "transform_get_translation", "transform_get_rotation"), ("xform",)),
    **dict.fromkeys(("quat_rotate", "quat_rotate_inv"), ("quat", "vec")),
    "atan2": ("y", "x"), "pow": ("x", "y"), "clamp": ("x", "low", "high"),
    "quat_from_axis_angle": ("axis", "angle"), "transform_point": ("xform", "point"),
    "transform_vector": ("xform", "vec"),
}

del _op, _f
