"""Value types of the kernel language: scalars, vectors, matrices, quaternions, transforms, structs.

Every type is a Python class carrying a small description that the compiler, the array layer
and the launch layer read:

- ``_kind``: ``"scalar" | "vector" | "matrix" | "quat" | "transform" | "struct"``
- ``_scalar``: the scalar type of the components (the type itself for scalars)
- ``_shape``: the component shape, ``()`` for scalars, ``(n,)`` vectors/quat/transform, ``(r, c)`` matrices
- ``_ctype``: the C++ spelling used by the generated code
- ``_np``: the numpy dtype of one component (scalar) or of the whole value (struct)

Vectors, matrices, quaternions and transforms are values with numpy storage; they compare with
``==`` as whole values and convert with ``numpy.asarray``.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import inspect
from typing import Any, ClassVar, TypeVar

import numpy as np

from .errors import warn_to_stderr

# ---------------------------------------------------------------------------------------------
# scalars


class _ScalarMeta(type):
    """Makes ``isinstance(xsim.uint8(1), xsim.uint8)`` true: calling a scalar type gives its numpy scalar."""

    def __instancecheck__(cls, value):
        return type.__instancecheck__(cls, value) or (cls._np is not None and type(value) in (cls._np.type, cls._value))


class _Scalar(metaclass=_ScalarMeta):
    """Base of the scalar type classes; calling one converts a Python number to its numpy scalar (of
    ``_value``, a subclass of numpy's that marks a value made by xsim's type, as Warp's scalar instances
    are apart from numpy's: a struct's vector field refuses ``xsim.float32(1.5)`` but fills from
    ``numpy.float32(1.5)``)."""

    _kind = "scalar"
    _shape: tuple[int, ...] = ()
    _np: Any = None
    _value: Any = None  # numpy's bool cannot be subclassed: xsim.bool(x) is numpy's
    _ctype = ""
    _ctypes: Any = None

    def __new__(cls, value=0):
        make = cls._value or cls._np.type
        if isinstance(value, int) and cls._np.kind in "iu":
            if not -(1 << 63) <= value < 1 << 64:
                raise OverflowError(f"Python integer {value} does not fit in 64 bits")
            return make(wrap_int(value, cls))
        return make(value)

    @classmethod
    def _store(cls, values) -> np.ndarray:
        """``values`` as this type's storage components (what arrays hold and kernels read)."""
        return np.asarray(values, cls._np)

    @classmethod
    def _load(cls, storage) -> np.ndarray:
        """Storage components as numbers (the identity but for bfloat16's bit patterns)."""
        return np.asarray(storage)


def wrap_int(value: int, t) -> int:
    """``value`` wrapped into the integer type ``t`` (two's complement, as a cast to it does: Warp's
    ``uint32(-1)``); a value no 64-bit integer holds is left as it is, for the caller to refuse."""
    if not -(1 << 63) <= value < 1 << 64:
        return value
    bits = t._np.itemsize * 8
    value %= 1 << bits
    return value - (1 << bits) if t._np.kind == "i" and value >= 1 << (bits - 1) else value


class _BFloat16(_Scalar):
    """bfloat16 (float32's 8-bit exponent, 7-bit mantissa): numpy has no such dtype, so arrays hold the
    16-bit patterns (``numpy()`` gives them as uint16, as Warp does without ml_dtypes) and host values are
    float32 numbers rounded to bfloat16."""

    def __new__(cls, value=0.0):
        return cls._load(cls._store(np.float32(value)))[()]

    @classmethod
    def _store(cls, values) -> np.ndarray:
        """Floats -> bfloat16 bit patterns, rounded to nearest even (NaN stays NaN); uint16 input is taken
        as bit patterns already, as Warp takes it."""
        a = np.asarray(values)
        if a.dtype == np.uint16:
            return a
        bits = np.asarray(a, np.float32).view(np.uint32)
        nan = (bits & 0x7FFFFFFF) > 0x7F800000
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16
        return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)

    @classmethod
    def _load(cls, storage) -> np.ndarray:
        return (np.asarray(storage, np.uint16).astype(np.uint32) << 16).view(np.float32)


def _scalar(name: str, np_dtype, ctype: str, c_type, base: type = _Scalar) -> type:
    # _type_: Warp's spelling of the ctypes type (its tests wrap integers with ``t._type_(v).value``)
    # _length_: one component, as a vector's _length_ counts its own (Warp's)
    np_type = np.dtype(np_dtype).type
    value = None
    if base is _Scalar and np_type is not np.bool_:
        value = globals()[f"_{name}_value"] = type(name, (np_type,), {"__module__": __name__,
                                                                      "__qualname__": f"_{name}_value"})
    cls = type(name, (base,), {"_np": np.dtype(np_dtype), "_ctype": ctype, "_ctypes": c_type, "_type_": c_type,
                               "_length_": 1, "_value": value})
    cls._scalar = cls
    cls.__module__ = __name__
    return cls


float16 = _scalar("float16", np.float16, "xs::half", ctypes.c_uint16)
bfloat16 = _scalar("bfloat16", np.uint16, "xs::bfloat16", ctypes.c_uint16, _BFloat16)
float32 = _scalar("float32", np.float32, "float", ctypes.c_float)
float64 = _scalar("float64", np.float64, "double", ctypes.c_double)
int8 = _scalar("int8", np.int8, "int8_t", ctypes.c_int8)
int16 = _scalar("int16", np.int16, "int16_t", ctypes.c_int16)
int32 = _scalar("int32", np.int32, "int32_t", ctypes.c_int32)
int64 = _scalar("int64", np.int64, "int64_t", ctypes.c_int64)
uint8 = _scalar("uint8", np.uint8, "uint8_t", ctypes.c_uint8)
uint16 = _scalar("uint16", np.uint16, "uint16_t", ctypes.c_uint16)
uint32 = _scalar("uint32", np.uint32, "uint32_t", ctypes.c_uint32)
uint64 = _scalar("uint64", np.uint64, "uint64_t", ctypes.c_uint64)
bool_ = _scalar("bool", np.bool_, "bool", ctypes.c_bool)

FLOAT_TYPES = (float16, bfloat16, float32, float64)
INT_TYPES = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
SCALAR_TYPES = FLOAT_TYPES + INT_TYPES + (bool_,)

# Warp-style short names, and Warp's names of the type groups
half, float_, int_ = float16, float32, int32
float_types, int_types = FLOAT_TYPES, INT_TYPES
scalar_types, scalar_and_bool_types = INT_TYPES + FLOAT_TYPES, SCALAR_TYPES  # Warp's groups: bool is apart


def is_scalar(t) -> bool:
    return isinstance(t, type) and issubclass(t, _Scalar)


def is_float(t) -> bool:
    return t in FLOAT_TYPES


def is_int(t) -> bool:
    return t in INT_TYPES


def is_value_type(t) -> bool:
    """True for every type a kernel value can have (scalar, vector, matrix, quat, transform, struct)."""
    return isinstance(t, type) and getattr(t, "_kind", None) in (
        "scalar", "vector", "matrix", "quat", "transform", "struct")


_PY_TO_XS = {float: float32, int: int32, bool: bool_}


def resolve(t):
    """Map the Python builtins ``float``/``int``/``bool`` used in annotations to xsim types."""
    return _PY_TO_XS.get(t, t)


def scalar_from_numpy(dt) -> type:
    dt = np.dtype(dt)
    for t in SCALAR_TYPES:
        if t._np == dt and t is not bfloat16:  # uint16 data are uint16; bfloat16 is only ever asked for
            return t
    raise TypeError(f"numpy dtype {dt} has no xsim scalar type")


def dtype_from_numpy(numpy_dtype) -> type:
    """The xsim scalar type of a numpy dtype (``np.float32`` -> ``float32``), as Warp's function."""
    return scalar_from_numpy(numpy_dtype)


def dtype_to_numpy(dtype) -> np.dtype:
    """The numpy dtype of an xsim scalar type (``float``/``int``/``bool`` mean float32/int32/bool)."""
    t = resolve(dtype)
    if not is_scalar(t):
        raise TypeError(f"dtype_to_numpy: dtype must be an xsim scalar type, got {t!r}")
    return np.dtype(t._np)


# ---------------------------------------------------------------------------------------------
# vectors, matrices, quaternions, transforms: values with numpy storage


# numpy's names of the operators whose reflected form a composite value defines
class _Composite:
    """Base of vector/matrix/quat/transform values: a fixed-shape numpy array of components."""

    _kind = ""
    _shape: tuple[int, ...] = ()
    _scalar: Any = float32
    _length = 0
    __slots__ = ("__dict__", "_v")  # other attributes may be set on a value, as on Warp's ctypes-based ones

    def __init__(self, *args):
        # bfloat16 components are built as float32 numbers and held as their bit patterns
        shape, dt = self._shape, (np.dtype(np.float32) if self._scalar is bfloat16 else self._scalar._np)
        if len(args) == 0:
            v = np.zeros(shape, dt)
        elif len(args) == 1 and np.ndim(args[0]) == 0:
            v = np.full(shape, args[0], dt)
        elif len(args) == 1:
            v = np.array(np.asarray(args[0]), dt).reshape(shape)
        elif all(type(a) in (float, int) for a in args) and len(args) == self._length:
            try:
                v = np.array(args, dt).reshape(shape)  # the common vec3(x, y, z): ~1 us instead of ~10
            except OverflowError:  # an int component out of an integer type's range wraps, as in Warp
                v = np.array([wrap_int(a, self._scalar) if type(a) is int else a for a in args], dt).reshape(shape)
        else:
            flat = np.concatenate([np.ravel(np.asarray(a)) for a in args]).astype(dt)
            if flat.size != int(np.prod(shape)):
                raise ValueError(f"{type(self).__name__} needs {int(np.prod(shape))} components, got {flat.size}")
            v = flat.reshape(shape)
        object.__setattr__(self, "_v", self._scalar._store(v) if self._scalar is bfloat16 else v)

    @classmethod
    def _wrap(cls, v):
        out = cls.__new__(cls)
        object.__setattr__(out, "_v", np.asarray(v, cls._scalar._np).reshape(cls._shape))
        return out

    def __array__(self, dtype=None, copy=None):
        return self._v.astype(dtype) if dtype is not None else self._v.copy()

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy meeting a value: ``np.float32(2) * v`` is the value's own ``2 * v`` (as Warp's ctypes values
        give), anything else computes on the components and returns numpy's array."""
        if method == "__call__" and not kwargs and len(inputs) == 2 and ufunc in _REFLECTED:
            a, b = inputs
            if b is self and np.ndim(a) == 0:
                return getattr(self, _REFLECTED[ufunc])(a)
        return getattr(ufunc, method)(*(x._v if isinstance(x, _Composite) else x for x in inputs), **kwargs)

    def __len__(self):
        return self._shape[0]

    def __iter__(self):
        return iter(self._v.tolist() if len(self._shape) == 1 else [self._v[i] for i in range(self._shape[0])])

    def __getitem__(self, key):
        return self._v[key]

    def __setitem__(self, key, value):
        self._v[key] = value

    def __eq__(self, other):
        try:
            o = np.asarray(other)
        except (TypeError, ValueError):
            return NotImplemented
        return o.shape == self._shape and bool(np.all(self._v == o))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def _same(self, v):
        return type(self)._wrap(v)

    def __add__(self, o):
        return self._same(self._v + np.asarray(o))

    def __sub__(self, o):
        return self._same(self._v - np.asarray(o))

    def __rsub__(self, o):
        return self._same(np.asarray(o) - self._v)

    def __neg__(self):
        return self._same(-self._v)

    def __pos__(self):
        return self

    def __mul__(self, o):
        if np.ndim(o) == 0:
            return self._same(self._v * o)
        return NotImplemented

    def __rmul__(self, o):
        if np.ndim(o) == 0:
            return self._same(o * self._v)
        return NotImplemented

    def __truediv__(self, o):
        return self._same(self._v / o)

    def __rtruediv__(self, o):
        return self._same(o / self._v)

    # remainder with the dividend's sign (C's % and fmod), as a kernel's % computes it
    def __mod__(self, o):
        return self._same(np.fmod(self._v, np.asarray(o)))

    def __rmod__(self, o):
        return self._same(np.fmod(np.asarray(o), self._v))

    __radd__ = __add__

    # bit operations, component by component (integer vectors and matrices)
    def __and__(self, o):
        return self._same(self._v & np.asarray(o))

    def __or__(self, o):
        return self._same(self._v | np.asarray(o))

    def __xor__(self, o):
        return self._same(self._v ^ np.asarray(o))

    def __lshift__(self, o):
        return self._same(self._v << np.asarray(o))

    def __rshift__(self, o):
        return self._same(self._v >> np.asarray(o))

    def __invert__(self):
        return self._same(~self._v)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(repr(x) for x in self._v.ravel().tolist())})"

    def __str__(self):
        """Warp's text: the components as a list, a matrix as a list of rows one per line."""
        if self._v.ndim == 1:
            return str(self._v.tolist())
        return "[" + ",\n ".join(str(row) for row in self._v.tolist()) + "]"


# the reflected operator a numpy scalar on the left defers to (see _Composite.__array_ufunc__)
_REFLECTED = {np.add: "__radd__", np.subtract: "__rsub__", np.multiply: "__rmul__", np.true_divide: "__rtruediv__",
              np.remainder: "__rmod__"}


class _Vector(_Composite):
    _kind = "vector"
    __slots__ = ()

    def _get(i):
        def check(self):  # a component past the length is no attribute (hasattr(vec2, "z") is False)
            if i >= self._length:
                raise AttributeError(f"'{type(self).__name__}' object has no attribute '{'xyzw'[i]}'")

        def get(self):
            check(self)
            return self._v[i]

        def put(self, s):
            check(self)
            self._v[i] = s
        return property(get, put)

    x, y, z, w = _get(0), _get(1), _get(2), _get(3)
    del _get

    def __setattr__(self, name, value):
        # a swizzle (v.xy = ...) is no attribute: refused rather than stored beside the components
        if len(name) > 1 and set(name) <= set("xyzw"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        super().__setattr__(name, value)


class _Matrix(_Composite):
    _kind = "matrix"
    __slots__ = ()

    def __iter__(self):
        """The rows, as vector values (copies), as Warp's matrices iterate: ``tuple(m)`` compares
        equal to a tuple of row tuples."""
        row = vector(self._shape[1], self._scalar)
        return iter([row._wrap(self._v[i].copy()) for i in range(self._shape[0])])

    def __getitem__(self, key):
        """``m[i, j]`` a component; ``m[i]`` row ``i`` as a vector value (a copy), as in Warp."""
        if isinstance(key, (int, np.integer)):
            return vector(self._shape[1], self._scalar)._wrap(self._v[key].copy())
        return self._v[key]

    def __matmul__(self, o):
        if isinstance(o, _Composite) and o._scalar is not self._scalar:
            raise RuntimeError(f"Couldn't find a function 'mul' compatible with the arguments "
                               f"'{type(self).__name__}, {type(o).__name__}'")
        r = self._v @ np.asarray(o)
        if isinstance(o, _Matrix):
            return matrix((self._shape[0], o._shape[1]), self._scalar)._wrap(r)
        return vector(self._shape[0], self._scalar)._wrap(r)

    def __mul__(self, o):
        if isinstance(o, (_Matrix, _Vector)):
            return self.__matmul__(o)
        return super().__mul__(o)

    def __rmatmul__(self, o):
        """``v @ m`` and ``v * m``: the row vector ``v`` times the matrix, as in Warp."""
        if not isinstance(o, _Vector):
            return NotImplemented
        if o._scalar is not self._scalar:
            raise RuntimeError(f"Couldn't find a function 'mul' compatible with the arguments "
                               f"'{type(o).__name__}, {type(self).__name__}'")
        return vector(self._shape[1], self._scalar)._wrap(o._v @ self._v)

    def __rmul__(self, o):
        return self.__rmatmul__(o) if isinstance(o, _Vector) else super().__rmul__(o)


class _Quat(_Vector):
    _kind = "quat"
    __slots__ = ()

    def __mul__(self, o):
        """``q * r``: the Hamilton product (the rotation r, then q); a scalar scales the components."""
        if isinstance(o, _Quat):
            return self._same(_quat_product(self._v, o._v))
        return super().__mul__(o)


def _quat_product(a, b):
    """The Hamilton product of two (x, y, z, w) quaternions, in their numpy dtype."""
    va, wa, vb, wb = a[:3], a[3], b[:3], b[3]
    return np.concatenate([wa * vb + wb * va + np.cross(va, vb), [wa * wb - va @ vb]]).astype(a.dtype)


def _quat_rotate(q, x):
    """``x`` rotated by the (x, y, z, w) quaternion ``q``, as the kernel builtin computes it (unnormalised q
    scales as it does there)."""
    v, w = q[:3], q[3]
    return (x * (2.0 * w * w - 1.0) + np.cross(v, x) * w * 2.0 + v * (v @ x) * 2.0).astype(q.dtype)


class _Transform(_Composite):
    _kind = "transform"
    __slots__ = ()

    def __init__(self, *args, **pq):
        """``transform()`` (identity), ``transform(p, q)``, ``transform(p)``, ``transform(p=..., q=...)`` (either
        may be left out: p zero, q the identity), seven components, one scalar for all, or another transform."""
        for k in pq:
            if k not in ("p", "q"):
                raise TypeError(f"got an unexpected keyword argument '{k}'")
        if pq or len(args) == 2 or len(args) == 1 and np.ndim(args[0]) > 0 and np.size(args[0]) == 3:
            given = dict(zip(("p", "q"), args))
            clash = given.keys() & pq.keys()
            if clash or len(args) > 2:  # seven components and a part by keyword
                raise TypeError(f"multiple values for argument '{(clash or set(pq)).pop()}'")
            given |= pq
            for k, v in given.items():
                if np.ndim(v) == 0:
                    raise TypeError(f"Invalid argument '{k}' in transformation constructor: expected a sequence, "
                                    f"got {type(v).__name__}")
            p, q = given.get("p", (0.0, 0.0, 0.0)), given.get("q", (0.0, 0.0, 0.0, 1.0))
            args = (np.concatenate([np.ravel(np.asarray(p)), np.ravel(np.asarray(q))]),)
        elif len(args) == 0:
            args = (np.array([0, 0, 0, 0, 0, 0, 1.0]),)
        elif len(args) == 1 and np.ndim(args[0]) == 0 and not isinstance(args[0], (int, float, np.number, np.bool_)):
            raise TypeError(f"Invalid argument in transformation constructor: expected a scalar value, got "
                            f"{type(args[0]).__name__}")
        super().__init__(*args)

    def __mul__(self, o):
        """``a * b``: the transform b, then a (``transform_multiply``); a scalar scales the components."""
        if isinstance(o, _Transform):
            p = self._v[:3] + _quat_rotate(self._v[3:], o._v[:3])
            return self._same(np.concatenate([p, _quat_product(self._v[3:], o._v[3:])]))
        return super().__mul__(o)

    @property
    def p(self):
        return vector(3, self._scalar)._wrap(self._v[:3])

    @p.setter
    def p(self, value):
        self._v[:3] = np.asarray(value)

    @property
    def q(self):
        return quaternion(self._scalar)._wrap(self._v[3:])

    @q.setter
    def q(self, value):
        self._v[3:] = np.asarray(value)


# Warp's suffixes (vec3b holds int8, vec3s int16); Warp names no vector of bools, xsim's are vec3bool
_SUFFIX = {float16: "h", bfloat16: "bf", float32: "f", float64: "d", int8: "b", int16: "s", int32: "i", int64: "l",
           uint8: "ub", uint16: "us", uint32: "ui", uint64: "ul", bool_: "bool"}


def _sized_name(kind: str, shape: tuple, dtype) -> str:
    """The class name of a vector or matrix type: Warp's (``vec3f``, ``mat22d``, ``spatial_vectorf`` for a
    6-vector of floats, ``spatial_matrixd`` for a 6x6 matrix of doubles)."""
    sn = _SUFFIX.get(dtype, "")
    if is_float(dtype) and shape in ((6,), (6, 6)):
        return f"spatial_{kind}{sn}"
    return ("vec" if kind == "vector" else "mat") + "".join(map(str, shape)) + sn


_GENERIC_TYPE_STR = {"vector": "vec_t", "matrix": "mat_t", "quat": "quat_t", "transform": "transform_t"}  # Warp's


def _composite(base, kind: str, name: str, shape, scalar, ctype: str):
    scalar = resolve(scalar)
    if not is_scalar(scalar):
        raise TypeError(f"{kind} components must be a scalar type, got {scalar!r}")
    n = int(np.prod(shape))
    cls = type(name, (base,), {"__slots__": (), "_kind": kind, "_shape": tuple(shape), "_scalar": scalar,
                               "_length": shape[0], "_ctype": ctype, "_np": scalar._np,
                               "_ctypes": scalar._ctypes * n,
                               # Warp's spellings, which ported code and Warp's tests read
                               "_wp_scalar_type_": scalar, "_shape_": tuple(shape), "_length_": n,
                               "_wp_generic_type_str_": _GENERIC_TYPE_STR[kind]})
    cls.__module__ = __name__
    return cls


# ---------------------------------------------------------------------------------------------
# generic parameters: typing.Any and type variables (Scalar, Float, Int), bound at launch


Scalar = TypeVar("Scalar", *SCALAR_TYPES)
Float = TypeVar("Float", *FLOAT_TYPES)
Int = TypeVar("Int", *INT_TYPES)


def is_type_parameter(t) -> bool:
    """``typing.Any``, a ``TypeVar`` or a generic vector/matrix: a type the launch arguments decide."""
    return t is Any or isinstance(t, (TypeVar, GenericComposite))


def is_generic(t) -> bool:
    """A parameter type still to be bound: a type parameter, an array whose dtype is one, or a generic
    struct (``generic_structs.py``)."""
    return (is_type_parameter(t) or isinstance(t, ArrayType) and is_type_parameter(t.dtype)
            or getattr(t, "_is_struct_template", False))


def bind(param, t) -> bool:
    """Whether the concrete type ``t`` can take the place of the type parameter ``param``."""
    if isinstance(param, GenericComposite):
        return param.accepts(t)
    return param is Any or not param.__constraints__ or t in param.__constraints__


def vector(length: int, dtype=float32) -> type:
    """The vector type of ``length`` components of scalar ``dtype`` (e.g. ``vector(3, float64)``); with
    ``Any`` or a type variable for either, a generic parameter type (bound at launch)."""
    dtype = resolve(dtype)
    if is_type_parameter(length) or is_type_parameter(dtype):
        return GenericComposite("vector", (length,), dtype)
    return _vector(int(length), dtype)


def matrix(shape: tuple[int, int], dtype=float32) -> type:
    """The matrix type of ``shape = (rows, cols)`` with scalar ``dtype`` (row-major, like numpy); with
    ``Any`` or a type variable in the shape or dtype, a generic parameter type (bound at launch)."""
    r, c = shape
    dtype = resolve(dtype)
    if is_type_parameter(r) or is_type_parameter(c) or is_type_parameter(dtype):
        return GenericComposite("matrix", (r, c), dtype)
    return _matrix(int(r), int(c), dtype)


class GenericComposite:
    """``vector(length=Any, dtype=Float)``, ``matrix(shape=(Any, Any), dtype=Any)``: the vectors or
    matrices whose fixed sizes and scalar type match, a generic parameter's type."""

    __slots__ = ("dtype", "kind", "shape")

    def __init__(self, kind: str, shape: tuple, dtype):
        self.kind, self.shape, self.dtype = kind, shape, dtype

    def __eq__(self, other):
        return isinstance(other, GenericComposite) and (other.kind, other.shape, other.dtype) == (
            self.kind, self.shape, self.dtype)

    def __hash__(self):
        return hash((self.kind, self.shape, self.dtype))

    def __repr__(self):
        if self.kind in ("quat", "transform"):
            return f"{'quaternion' if self.kind == 'quat' else 'transformation'}(dtype={_param_name(self.dtype)})"
        size = "length" if self.kind == "vector" else "shape"
        shape = self.shape[0] if self.kind == "vector" else self.shape
        return f"{self.kind}({size}={_param_name(shape)}, dtype={_param_name(self.dtype)})"

    def concrete(self, dtype) -> type:
        """These vectors or matrices with scalar ``dtype`` (their sizes must be fixed)."""
        if any(is_type_parameter(n) for n in self.shape):
            raise TypeError(f"{self!r} has no fixed size to make a concrete type of")
        make = {"vector": lambda: vector(self.shape[0], dtype), "matrix": lambda: matrix(self.shape, dtype),
                "quat": lambda: quaternion(dtype), "transform": lambda: transformation(dtype)}[self.kind]
        return make()

    @property
    def __name__(self):  # type_name() reads it
        return repr(self)

    def accepts(self, t) -> bool:
        """Whether the concrete type ``t`` is one of these vectors or matrices."""
        return (getattr(t, "_kind", None) == self.kind and len(t._shape) == len(self.shape)
                and all(is_type_parameter(n) or n == m for n, m in zip(self.shape, t._shape))
                and (bind(self.dtype, t._scalar) if is_type_parameter(self.dtype)
                     else self.dtype is t._scalar))


def _param_name(x) -> str:
    if isinstance(x, tuple):
        return "(" + ", ".join(_param_name(v) for v in x) + ")"
    return getattr(x, "__name__", repr(x))


def quaternion(dtype=float32) -> type:
    """Quaternion ``(x, y, z, w)`` with scalar ``dtype``; with ``Any`` or a type variable, a generic
    parameter type (bound at launch, as Warp's ``quaternion(dtype=Any)``)."""
    dtype = resolve(dtype)
    if is_type_parameter(dtype):
        return GenericComposite("quat", (4,), dtype)
    return _quaternion(dtype)


def transformation(dtype=float32) -> type:
    """Rigid transform ``(p, q)``: translation vec3 then rotation quat, 7 components; with ``Any`` or a
    type variable for ``dtype``, a generic parameter type (bound at launch)."""
    dtype = resolve(dtype)
    if is_type_parameter(dtype):
        return GenericComposite("transform", (7,), dtype)
    return _transformation(dtype)


# The public constructors canonicalise their arguments before these caches, so that equal types are one
# class: vector(3, float), vector(3, dtype=float32) and vec3 are identical.


@functools.cache
def _vector(length: int, dtype) -> type:
    return _composite(_Vector, "vector", _sized_name("vector", (length,), dtype), (length,), dtype,
                      f"xs::vec_t<{length}, {getattr(dtype, '_ctype', '')}>")


@functools.cache
def _matrix(r: int, c: int, dtype) -> type:
    return _composite(_Matrix, "matrix", _sized_name("matrix", (r, c), dtype), (r, c), dtype,
                      f"xs::mat_t<{r}, {c}, {getattr(dtype, '_ctype', '')}>")


@functools.cache
def _quaternion(dtype) -> type:
    return _composite(_Quat, "quat", f"quat{_SUFFIX.get(dtype, '')}", (4,), dtype,
                      f"xs::quat_t<{getattr(dtype, '_ctype', '')}>")


@functools.cache
def _transformation(dtype) -> type:
    return _composite(_Transform, "transform", f"transform{_SUFFIX.get(dtype, '')}", (7,), dtype,
                      f"xs::transform_t<{getattr(dtype, '_ctype', '')}>")


class _Tile:
    """Base of the tile types: a kernel-local block of values of one ``_dtype`` (a scalar or vector type) and a
    ``_shape`` of one or two dimensions known at compile time, Warp's tiles. xsim runs every block of a tiled
    launch on one thread (Warp's CPU model, on CUDA as well), so a tile is a value held by that thread,
    stored row-major (``_rows`` x ``_cols``: a 1-d tile of N is 1 x N). Tiles live only inside kernels: no array,
    struct or parameter holds one."""

    _kind = "tile"


def tile_type(dtype, shape: tuple) -> type:
    """The tile type of ``shape`` (an int or a tuple of one or two ints, each at least 1) holding ``dtype``
    values (a scalar or vector type)."""
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if not 1 <= len(dims) <= 2 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"a tile has one or two dimensions of at least 1, got shape {shape!r}")
    dtype = resolve(dtype)
    if not (is_scalar(dtype) or is_vector(dtype)):
        raise TypeError(f"tiles hold scalars or vectors, got {type_name(dtype)}")
    return _tile(dtype, dims)


@functools.cache
def _tile(dtype, dims: tuple) -> type:
    rows, cols = (1, dims[0]) if len(dims) == 1 else dims
    scalar = dtype if is_scalar(dtype) else dtype._scalar
    name = f"tile({type_name(dtype)}, {dims if len(dims) > 1 else dims[0]})"
    return type(name, (_Tile,), {"_dtype": dtype, "_shape": dims, "_scalar": scalar, "_rows": rows, "_cols": cols,
                                 "_ctype": f"xs::tile_t<{dtype._ctype}, {rows}, {cols}>"})


def is_tile(t) -> bool:
    return isinstance(t, type) and issubclass(t, _Tile)


def _named(prefix: str, make):
    out = {}
    for suffix, s in (("", float32), ("f", float32), ("d", float64), ("h", float16)):
        out[prefix + suffix] = make(s)
    return out


_g = globals()
for _n in (2, 3, 4):
    _g.update(_named(f"vec{_n}", lambda s, n=_n: vector(n, s)))
    for _suffix, _s in (("b", int8), ("ub", uint8), ("s", int16), ("us", uint16), ("i", int32), ("ui", uint32),
                        ("l", int64), ("ul", uint64)):
        _g[f"vec{_n}{_suffix}"] = vector(_n, _s)
    _g.update(_named(f"mat{_n}{_n}", lambda s, n=_n: matrix((n, n), s)))
_g.update(_named("quat", quaternion))
_g.update(_named("transform", transformation))
# Featherstone's spatial algebra: a 6-vector (angular top, linear bottom) and 6x6 matrices
_g.update(_named("spatial_vector", lambda s: vector(6, s)))
_g.update(_named("spatial_matrix", lambda s: matrix((6, 6), s)))
del _g, _n, _suffix, _s

vec2: type
vec3: type
vec4: type
vec2d: type
vec3d: type
vec4d: type
vec2i: type
vec3i: type
vec4i: type
mat22: type
mat33: type
mat44: type
mat22d: type
mat33d: type
mat44d: type
quat: type
quatd: type
transform: type
transformd: type
spatial_vector: type
spatial_vectord: type
spatial_matrix: type
spatial_matrixd: type

# Warp's group of the concrete (named) vector-like types, by family, each of every scalar type it comes in
vector_types = tuple(globals()[f"vec{n}{s}"] for n in (2, 3, 4) for s in ("b", "ub", "s", "us", "i", "ui", "l", "ul",
                                                                         "h", "f", "d")) + tuple(
    globals()[f"{family}{s}"] for family in ("mat22", "mat33", "mat44", "quat", "transform", "spatial_vector",
                                             "spatial_matrix") for s in "hfd")


def is_vector(t) -> bool:
    return getattr(t, "_kind", None) == "vector"


def is_matrix(t) -> bool:
    return getattr(t, "_kind", None) == "matrix"


def is_composite(t) -> bool:
    return getattr(t, "_kind", None) in ("vector", "matrix", "quat", "transform")


def num_components(t) -> int:
    return int(np.prod(t._shape)) if t._shape else 1


def type_size(t) -> int:
    """Warp's ``types.type_size``: the components of one value (1 for scalars and structs, 3 for vec3, 9 for
    mat33, 7 for a transform)."""
    t = resolve(t)
    return 1 if is_struct(t) else num_components(t)


def types_equal(a, b) -> bool:
    """Warp's ``types.types_equal``: whether two types (Python float/int included) are the same xsim type."""
    return resolve(a) == resolve(b)


_WARP_SUFFIX = {float16: "h", bfloat16: "bf", float32: "f", float64: "d", int8: "b", int16: "s", int32: "i",
                int64: "l", uint8: "ub", uint16: "us", uint32: "ui", uint64: "ul"}


def type_repr(t) -> str:
    """Warp's ``types.type_repr``: a type as Warp's messages spell it (``vec3b`` for a vector of three int8,
    ``mat22f``, ``vector(length=5, dtype=float32)``)."""
    t = resolve(t)
    if isinstance(t, ArrayType):
        return f"array(ndim={t.ndim}, dtype={type_repr(t.dtype)})"
    kind = getattr(t, "_kind", None)
    if kind not in ("vector", "matrix", "quat", "transform"):
        return type_name(t)
    sn, shape = _WARP_SUFFIX.get(t._scalar), t._shape
    if kind in ("quat", "transform"):
        return f"{kind}{sn}" if sn else f"{kind}(dtype={type_repr(t._scalar)})"
    if kind == "vector":
        return f"vec{shape[0]}{sn}" if sn and shape[0] <= 4 else \
            f"vector(length={shape[0]}, dtype={type_repr(t._scalar)})"
    return f"mat{shape[0]}{shape[1]}{sn}" if sn and max(shape) <= 4 else \
        f"matrix(shape={shape}, dtype={type_repr(t._scalar)})"


def type_name(t) -> str:
    """A readable name for error messages."""
    if t is None:
        return "None"
    if isinstance(t, ArrayType):
        return repr(t)
    return getattr(t, "__name__", repr(t))


# ---------------------------------------------------------------------------------------------
# structs


class _StructBase:
    """Base of ``@xsim.struct`` instances: attribute storage with per-field type conversion."""

    _kind = "struct"
    _fields: ClassVar[dict[str, Any]] = {}
    # the launch's packing of this value and of its arrays' grads (``kernels/launch.py``), kept on a value
    # whose fields are all arrays and numbers (``_packable``: nothing in it changes but by assigning a
    # field) and dropped whenever a field is assigned
    _packable: ClassVar[bool] = False
    _template = None  # the generic struct (``generic_structs.py``) this struct is a binding of, if any
    _packed = None
    _packed_grads = None
    _arrays = None  # the arrays its fields hold, for a tape (``autodiff/tape.py``), where ``_arrays_kept``
    # a ``_packable`` type none of whose arrays holds structs that refer to arrays (what those refer to can
    # change without a field being assigned)
    _arrays_kept: ClassVar[bool] = False

    @classmethod
    def _store(cls, values) -> np.ndarray:
        """``values`` as this struct's numpy records (the scalars' ``_store`` for structs)."""
        return np.asarray(values, cls._np)

    @classmethod
    def numpy_dtype(cls) -> np.dtype:
        """The numpy record dtype of this struct's array elements (Warp's ``Struct.numpy_dtype()``)."""
        return cls._np

    def __init__(self, **values):
        for name, t in self._fields.items():
            if isinstance(t, ArrayType):
                default = None
            elif t._kind == "struct":
                default = t()
            elif is_scalar(t):
                default = t(0)
            else:
                default = t()
            object.__setattr__(self, name, default)
        for k, v in values.items():
            setattr(self, k, v)

    def __setattr__(self, name, value):
        t = self._fields.get(name)
        if t is None:
            raise AttributeError(f"struct {type(self).__name__} has no field '{name}'")
        if isinstance(t, ArrayType):
            if value is not None:
                _check_array_field(name, t, value)
            # Warp's keep-alive of the field's gradient (``_<field>_grad``): the grad buffer of the array
            # assigned, dropped when the field is replaced by an array without one (or None)
            owner = getattr(value, "data", None) if isinstance(t, IndexedArrayType) else value
            grad = owner.grad if getattr(owner, "requires_grad", False) else None
            object.__setattr__(self, f"_{name}_grad", grad)
        elif is_scalar(t):
            converted = t(value)
            # a Python number stays one (as in Warp), unless the field's type would change its kind
            keep = (type(value) in (int, bool) and converted == value) or (type(value) is float and t in FLOAT_TYPES)
            value = value if keep else converted
        elif value is None:
            value = t()
        elif not isinstance(value, t):
            value = _composite_field_value(name, t, value)
        object.__setattr__(self, name, value)
        if self._packable:
            object.__setattr__(self, "_packed", None)
            object.__setattr__(self, "_packed_grads", None)
            object.__setattr__(self, "_arrays", None)

    def __eq__(self, other):
        return type(other) is type(self) and all(
            (getattr(self, f) is getattr(other, f)) if isinstance(t, ArrayType) else
            bool(np.all(np.asarray(getattr(self, f)) == np.asarray(getattr(other, f))))
            for f, t in self._fields.items())

    __hash__ = None

    def __repr__(self):
        body = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({body})"


def _check_array_field(name: str, t: ArrayType, value):
    """A TypeError naming the field unless ``value`` is an array of ``t``'s kind, dtype and ndim."""
    indexed = isinstance(t, IndexedArrayType)
    if not (hasattr(value, "dtype") and hasattr(value, "ndim")) or bool(getattr(value, "is_indexed", False)) != indexed:
        kind = "a Warp indexed array" if indexed else "a Warp array"
        raise TypeError(f"Struct field '{name}' expects {kind}, got {type(value).__name__}")
    if value.dtype is not t.dtype:
        raise TypeError(f"Struct field '{name}' expects dtype {type_name(t.dtype)}, got {type_name(value.dtype)}")
    if value.ndim != t.ndim:
        raise TypeError(f"Struct field '{name}' expects an array with {t.ndim} dimension(s), got {value.ndim} "
                        "dimension(s)")


def _is_xsim_scalar_value(value) -> bool:
    """A number made by one of xsim's scalar types (``xsim.float32(1.5)``), not by numpy itself."""
    return any(type(value) is s._value for s in SCALAR_TYPES if s._value is not None)


def _composite_field_value(name: str, t, value):
    """``value`` as the vector/matrix/quat/transform (or struct) ``t`` of field ``name``. A single number
    is refused, as Warp refuses it; a bool (Python's, numpy's, xsim's) or a numpy number still fills every
    component, with a DeprecationWarning written to stderr (Warp's logger writes it there)."""
    if is_composite(t) and (isinstance(value, (bool, np.bool_)) or isinstance(value, (np.integer, np.floating))
                            and not _is_xsim_scalar_value(value)):
        warn_to_stderr(f"Implicit conversion from a value of type `{type(value).__name__}` to the composite type "
                       f"`{type_name(t)}` for struct field '{name}' is deprecated. Construct the value explicitly, "
                       f"e.g.: `{type_name(t)}(...)`.", DeprecationWarning, stacklevel=3)
        fill = float(value) if isinstance(value, np.floating) else int(value)
        return t(*([fill] * num_components(t)))
    if is_composite(t) and not hasattr(value, "__len__"):
        raise TypeError(f"Struct field '{name}' expects {type_name(t)} but got a single value of type "
                        f"{type(value).__name__}. Construct the value explicitly, e.g.: {type_name(t)}(...)")
    return t(value)


def _desc_record(desc) -> np.dtype:
    """The numpy record of a native array view (``ArrayDesc``, ``IndexedArrayDesc``): how an array field is
    laid out in the elements of an array of structs (its pointers as uint64)."""
    fields = []
    for name, c in desc._fields_:
        n = getattr(c, "_length_", None)
        base = getattr(c, "_type_", c) if n is not None else c
        dt = np.uint64 if base is ctypes.c_void_p else np.int64
        fields.append((name, dt) if n is None else (name, dt, (n,)))
    return np.dtype(fields, align=True)


def _struct_cname(cls, fields) -> str:
    """A C++ name given by the struct's name and layout, the same in every process (the kernel cache key
    includes it). Not by its Python module: the same struct defined in two modules is one C++ type (as in
    Warp, a module's hash does not depend on which module defined its structs), and structs of one name with
    different fields are different types."""
    spec = f"{cls.__qualname__}:" + ";".join(f"{n}:{_layout_name(t)}" for n, t in fields.items())
    return f"{cls.__name__}_{hashlib.blake2b(spec.encode(), digest_size=4).hexdigest()}"


def _layout_name(t) -> str:
    if is_struct(t):
        return t._ctype
    if isinstance(t, ArrayType):
        return f"{type(t).__name__}({t.ndim}, {_layout_name(t.dtype)})"
    return type_name(t)


def struct(cls: type) -> type:
    """Class decorator: a value type with named, typed fields usable in kernels and arrays.

    Fields come from the class annotations: scalars, vectors, matrices, quat, transform,
    other structs and ``array(...)`` references.
    """
    if any(is_struct(b) for b in cls.__mro__[1:]):
        raise RuntimeError("Warp structs must be defined as base classes")
    fields = {}
    for name, ann in inspect.get_annotations(cls, eval_str=True).items():
        t = resolve(_from_warp(ann))
        if not (is_value_type(t) or isinstance(t, ArrayType) or is_generic(t)):
            raise TypeError(f"struct {cls.__name__}: field '{name}' has unsupported type {ann!r}")
        fields[name] = t
    if any(is_generic(t) for t in fields.values()):
        from .generic_structs import GenericStruct
        return GenericStruct(cls, fields)
    np_fields, c_fields = [], []
    has_arrays = False
    for name, t in fields.items():
        if isinstance(t, ArrayType):
            has_arrays = True
            c_fields.append((name, t.desc_ctype()))
            np_fields.append((name, _desc_record(t.desc_ctype())))
        else:
            has_arrays = has_arrays or bool(getattr(t, "_has_arrays", False))
            np_fields.append((name, t._np if t._kind == "struct" else (t._np, t._shape)))
            c_fields.append((name, t._ctypes))
    c_struct = type(f"_c_{cls.__name__}", (ctypes.Structure,), {"_fields_": c_fields})
    np_struct = np.dtype(np_fields, align=True)
    if np_struct.itemsize != ctypes.sizeof(c_struct) or any(
            np_struct.fields[n][1] != getattr(c_struct, n).offset for n in fields):
        raise TypeError(f"struct {cls.__name__}: its numpy record layout differs from its native one")
    # vectors, matrices and nested structs can change in place (``s.v[0] = 1``), arrays and numbers cannot
    packable = all(is_scalar(t) or type(t) is ArrayType for t in fields.values())
    arrays_kept = packable and not any(type(t) is ArrayType and getattr(t.dtype, "_has_arrays", False)
                                       for t in fields.values())
    out = type(cls.__name__, (_StructBase,), {
        "_fields": fields, "_ctype": _struct_cname(cls, fields), "_ctypes": c_struct,
        "_np": np_struct, "_has_arrays": has_arrays,
        "_packable": packable, "_arrays_kept": arrays_kept,
        "_array_fields": tuple(n for n, t in fields.items() if type(t) is ArrayType),
        "_shape": (), "_py": cls, "__doc__": cls.__doc__, "__module__": cls.__module__,
    })
    out._scalar = out
    out.cls = out  # Warp's Struct.cls: the class of the struct's instances
    return out


_WARP_STRUCTS: dict = {}  # id of a Warp struct -> (it, its xsim mirror)
_WARP_SCALARS = {t.__name__: t for t in SCALAR_TYPES}  # Warp names its scalar types as xsim does


def _from_warp(t):
    """A field type declared with Warp (a ``@warp.struct`` of another library, its scalar, vector,
    matrix, quat, transform and array types) as the xsim type of the same layout; anything else as is."""
    mod = (t if isinstance(t, type) else type(t)).__module__ or ""
    if not (mod.startswith("warp.") or mod == "warp"):
        return t
    if type(t).__name__ == "Struct" and isinstance(getattr(t, "vars", None), dict):  # a @warp.struct
        known = _WARP_STRUCTS.get(id(t))
        if known is None:
            ann = {n: _from_warp(v.type) for n, v in t.vars.items()}
            mirror = type(t.cls.__name__, (), {"__annotations__": ann, "__module__": t.cls.__module__,
                                               "__qualname__": t.cls.__qualname__, "__doc__": t.cls.__doc__})
            known = _WARP_STRUCTS[id(t)] = (t, struct(mirror))
        return known[1]
    if type(t).__name__ == "array" and hasattr(t, "ndim"):  # warp.array(dtype=..., ndim=...) annotation
        return ArrayType(_from_warp(t.dtype), t.ndim)
    kind = getattr(t, "_wp_generic_type_str_", None)
    scalar = getattr(t, "_wp_scalar_type_", None)
    if kind is None and isinstance(t, type) and t.__name__ in _WARP_SCALARS:
        return _WARP_SCALARS[t.__name__]
    if scalar is None or scalar.__name__ not in _WARP_SCALARS:
        return t
    s = _WARP_SCALARS[scalar.__name__]
    shape = tuple(t._shape_)
    if kind == "vec_t":
        return vector(shape[0], s)
    if kind == "mat_t":
        return matrix(shape, s)
    if kind == "quat_t":
        return quaternion(s)
    if kind == "transform_t":
        return transformation(s)
    return t


def is_struct(t) -> bool:
    return isinstance(t, type) and issubclass(t, _StructBase)


# ---------------------------------------------------------------------------------------------
# array types (annotations)


class ArrayType:
    """The type of an array parameter: element dtype and number of dimensions (1 to 4)."""

    __slots__ = ("dtype", "ndim")

    def __init__(self, dtype, ndim: int = 1):
        dtype = resolve(dtype)
        if not (is_value_type(dtype) or is_type_parameter(dtype)):
            raise TypeError(f"array dtype must be an xsim value type, got {dtype!r}")
        if not 1 <= ndim <= 4:
            raise ValueError(f"array ndim must be 1 to 4, got {ndim}")
        self.dtype, self.ndim = dtype, ndim

    def __eq__(self, other):
        return isinstance(other, ArrayType) and other.dtype is self.dtype and other.ndim == self.ndim

    def __hash__(self):
        return hash((ArrayType, self.dtype, self.ndim))

    def __repr__(self):
        return f"array(dtype={type_name(self.dtype)}, ndim={self.ndim})"

    def accepts(self, value) -> bool:
        return getattr(value, "dtype", None) is self.dtype and getattr(value, "ndim", None) == self.ndim

    @staticmethod
    def desc_ctype():
        return ArrayDesc

    def view(self, ndim: int) -> ArrayType:
        """The type of ``a[i]``-style views of this array with ``ndim`` dimensions left."""
        return ArrayType(self.dtype, ndim)


class IndexedArrayType(ArrayType):
    """The type of an ``indexedarray`` parameter: an array seen through per-dimension index arrays.
    Reads, writes, atomics and gradients act on the underlying array at the indexed positions."""

    __slots__ = ()

    def __eq__(self, other):
        return isinstance(other, IndexedArrayType) and other.dtype is self.dtype and other.ndim == self.ndim

    def __hash__(self):
        return hash((IndexedArrayType, self.dtype, self.ndim))

    def __repr__(self):
        return f"indexedarray(dtype={type_name(self.dtype)}, ndim={self.ndim})"

    def accepts(self, value) -> bool:
        return getattr(value, "is_indexed", False) and super().accepts(value)

    @staticmethod
    def desc_ctype():
        return IndexedArrayDesc

    def view(self, ndim: int) -> IndexedArrayType:
        return IndexedArrayType(self.dtype, ndim)


class FixedArrayType(ArrayType):
    """Warp's ``fixedarray(dtype, shape)`` annotation: a stack array (``zeros(shape, dtype)`` in a kernel), e.g.
    as a func's return type. Equal to the array type of its dtype and ndim: it only tells the annotation apart."""

    __slots__ = ()

    def __repr__(self):
        return f"fixedarray(dtype={type_name(self.dtype)}, ndim={self.ndim})"


class ArrayDesc(ctypes.Structure):
    """Native array view passed to kernels: data pointer, shape and byte strides (4 slots each), flags
    (bit 0: ``retain_grad``)."""

    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4),
                ("flags", ctypes.c_int64)]


class IndexedArrayDesc(ctypes.Structure):
    """Native indexed array view (``xs::indexed_desc``): the data's pointer and byte strides, the indexed
    shape, and one int32 index pointer per dimension (null: the dimension is not indexed)."""

    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4),
                ("indices", ctypes.c_void_p * 4)]
