"""Generic structs: an ``@xsim.struct`` with a field typed by a type variable (``Float``, ``Scalar``,
``Int``), ``Any``, or a generic vector, matrix or array type is a template of structs, one per binding
of those types, as a generic kernel is a template of kernels. A value is always of one binding: making
one binds the fields' types from the arrays and typed values given (``Bundle(x=a32, v=b32)`` is a
``Bundle`` of float32), and a kernel parameter typed with the template takes a value of any binding,
each compiled once. Warp's structs have concrete fields only; this extends them the way its generic
kernels extend kernels."""

from __future__ import annotations

from typing import Any, TypeVar

from . import types as T


class GenericStruct:
    """The template made by ``@xsim.struct`` from a class with generic fields; calling it makes a value."""

    _is_struct_template = True  # types.is_generic reads it (no import of this module there)

    def __init__(self, cls: type, fields: dict):
        self._py = cls
        self._fields = fields  # name -> declared (generic or concrete) type
        self.__name__, self.__qualname__ = cls.__name__, cls.__qualname__
        self.__module__, self.__doc__ = cls.__module__, cls.__doc__
        self._structs: dict[tuple, type] = {}  # the bindings made so far, by field types

    def __repr__(self):
        return f"<generic struct {self.__name__}>"

    def __call__(self, **values):
        """A value of the binding that ``values`` (field name -> array or typed value) give."""
        return self.bind_values(values)(**values)

    def __instancecheck__(self, value) -> bool:
        return getattr(type(value), "_template", None) is self

    @property
    def type_vars(self) -> list[TypeVar]:
        """The type variables its fields name (``Float``...), in field order."""
        out: list[TypeVar] = []
        for t in self._fields.values():
            for v in _type_vars(t):
                if v not in out:
                    out.append(v)
        return out

    def bind_values(self, values: dict) -> type:
        """The struct whose field types ``values`` bind: each array's or typed value's type fits its field,
        and a type variable means one type in every field that names it (a Python number binds nothing)."""
        bound: dict = {}  # type variable -> (type, the field that bound it)
        types = {}
        for name, t in self._fields.items():
            given = _type_of(values.get(name))
            if T.is_generic(t) and given is not None:
                types[name] = _unify(t, given, bound, f"struct {self.__name__} field '{name}'", name)
        mapping = {v: bt for v, (bt, _) in bound.items()}
        return self._struct({name: types[name] if name in types else
                             _substitute(t, mapping, f"struct {self.__name__} field '{name}'")
                             for name, t in self._fields.items()})

    def specialize(self, mapping: dict) -> type:
        """The struct with each type variable of its fields set as ``mapping`` says (``{Float: float64}``)."""
        types = {n: _substitute(t, mapping, f"struct {self.__name__} field '{n}'") for n, t in self._fields.items()}
        return self._struct(types)

    def _struct(self, types: dict) -> type:
        key = tuple(types.values())
        out = self._structs.get(key)
        if out is None:
            mirror = type(self.__name__, (), {"__annotations__": types, "__module__": self.__module__,
                                               "__qualname__": self.__qualname__, "__doc__": self.__doc__})
            out = self._structs[key] = T.struct(mirror)
            out._template = self
        return out


def _type_vars(t) -> list[TypeVar]:
    if isinstance(t, T.ArrayType):
        return _type_vars(t.dtype)
    if isinstance(t, TypeVar):
        return [t]
    if isinstance(t, T.GenericComposite):
        return _type_vars(t.dtype)
    if isinstance(t, GenericStruct):
        return t.type_vars
    return []


def _type_of(value):
    """The xsim type a field value shows: an array's array type, a typed value's type; None for a Python
    number or None (they bind nothing)."""
    if value is None:
        return None
    if hasattr(value, "dtype") and hasattr(value, "ndim"):
        kind = T.IndexedArrayType if getattr(value, "is_indexed", False) else T.ArrayType
        return kind(value.dtype, value.ndim)
    t = type(value)
    return t if T.is_value_type(t) else None


def _unify(t, given, bound: dict, where: str, field: str):
    """``given`` (concrete) as the type of a field declared ``t``, adding the type variables it binds
    to ``bound``; a TypeError naming the field where it does not fit or binds a variable differently."""
    if isinstance(t, T.ArrayType):
        if type(given) is not type(t) or given.ndim != t.ndim:
            raise TypeError(f"{where}: expected {t!r}, got {given!r}")
        return type(t)(_unify(t.dtype, given.dtype, bound, where, field), t.ndim)
    if isinstance(t, TypeVar):
        if not T.bind(t, given):
            allowed = ", ".join(T.type_name(c) for c in t.__constraints__)
            raise TypeError(f"{where}: {T.type_name(given)} is not one of the types {t.__name__} stands for "
                            f"({allowed})")
        first = bound.setdefault(t, (given, field))
        if first[0] is not given:
            raise TypeError(f"{where}: its {T.type_name(given)} makes {t.__name__} {T.type_name(given)}, but field "
                            f"'{first[1]}' made it {T.type_name(first[0])}; give every field of the struct the same "
                            f"{t.__name__}")
        return given
    if isinstance(t, T.GenericComposite):
        if not t.accepts(given):
            raise TypeError(f"{where}: {T.type_name(given)} does not fit {T.type_name(t)}")
        if isinstance(t.dtype, TypeVar):
            _unify(t.dtype, given._scalar, bound, where, field)
        return given
    if isinstance(t, GenericStruct):
        if getattr(given, "_template", None) is not t:
            raise TypeError(f"{where}: expected a struct {t.__name__}, got {T.type_name(given)}")
        for name, ft in t._fields.items():
            if T.is_generic(ft):
                _unify(ft, given._fields[name], bound, f"{where}.{name}", field)
        return given
    if t is Any:
        return given
    return t  # a concrete field: the value's own check (types._StructBase.__setattr__) says what is wrong


def _substitute(t, mapping: dict, where: str):
    """The declared field type ``t`` with its type variables replaced as ``mapping`` says."""
    if isinstance(t, T.ArrayType):
        return type(t)(_substitute(t.dtype, mapping, where), t.ndim) if T.is_generic(t) else t
    if isinstance(t, TypeVar):
        if t not in mapping:
            raise TypeError(f"{where}: nothing binds its type {t.__name__}; give an array or typed value for a field "
                            f"that names {t.__name__}")
        if not T.bind(t, mapping[t]):
            raise TypeError(f"{where}: {T.type_name(mapping[t])} is not one of the types {t.__name__} stands for")
        return mapping[t]
    if isinstance(t, T.GenericComposite):
        if not isinstance(t.dtype, TypeVar):
            raise TypeError(f"{where}: a field typed {t!r} is bound by its value only; give one")
        return t.concrete(_substitute(t.dtype, mapping, where))
    if isinstance(t, GenericStruct):
        return t.specialize(mapping)
    if t is Any:
        raise TypeError(f"{where}: a field typed Any is bound by its value only; give one")
    return t
