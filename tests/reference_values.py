"""Host values and builtins of the forward reference (tests/reference.py): arithmetic with Warp's rules,
arrays, records and views, vector/matrix constructor forms, builtins from their definitions, and Warp's
PCG random samplers. A test utility, not part of xsim."""

from __future__ import annotations

import copy
import operator

import numpy as np
import scipy.special

from xsim import types as T

# ---------------------------------------------------------------------------------------------
# integer and float arithmetic with Warp's rules


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _result_type(a, b):
    with np.errstate(all="ignore"):
        return type(a + b) if not (isinstance(a, int) and isinstance(b, int)) else np.int32


def _wrap(value: int, t):
    bits = np.dtype(t).itemsize * 8
    value %= 1 << bits
    if np.issubdtype(t, np.signedinteger) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return t(value)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def div(a, b):
    if _is_int(a) and _is_int(b):
        t = _result_type(a, b)
        return t(0) if b == 0 else _wrap(_trunc_div(int(a), int(b)), t)
    if isinstance(a, T._Composite) and T.is_int(a._scalar):  # componentwise, with the integer rules
        return type(a)._wrap([div(x, b) for x in a._v.ravel()])
    with np.errstate(all="ignore"):
        if isinstance(b, T._Composite):  # scalar / vector: componentwise
            return type(b)._wrap(a / b._v)
        return a / b


def floordiv(a, b):
    if _is_int(a) and _is_int(b):
        t = _result_type(a, b)
        return t(0) if b == 0 else _wrap(int(a) // int(b), t)
    with np.errstate(all="ignore"):
        return np.floor(a / b)


def mod(a, b):
    if _is_int(a) and _is_int(b):
        t = _result_type(a, b)
        if b == 0:
            return t(a)
        return _wrap(int(a) - int(b) * _trunc_div(int(a), int(b)), t)
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


def power(a, b):
    """``**``: C's pow (as Warp computes it), so a negative base to a fractional power is NaN and zero to a
    negative power is +-inf, not Python's complex number or ZeroDivisionError; integers to a power
    >= 0 as Python."""
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        return a ** b
    if isinstance(a, T._Composite) or isinstance(b, T._Composite):
        return a ** b
    with np.errstate(all="ignore"):
        return np.power(a, b)


_COMPARISONS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
                "ne": operator.ne}


def compare(op: str, a, b):
    """A comparison as Warp makes it: an integer (numpy or a Python int, not a bool) against a numpy float
    is converted to that float's type first, so float32(16777216) == 16777217; anything else as Python."""
    def is_int(x):
        return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
    if isinstance(a, np.floating) and is_int(b):
        b = a.dtype.type(b)
    elif isinstance(b, np.floating) and is_int(a):
        a = b.dtype.type(a)
    return _COMPARISONS[op](a, b)


def _segment_meets_triangle(p, q, a, b, c) -> bool:
    """Whether segment pq meets triangle abc (float64; a segment in the triangle's plane does not)."""
    n = np.cross(b - a, c - a)
    dp, dq = n @ (p - a), n @ (q - a)
    if dp * dq > 0 or dp == dq:
        return False
    x = p + (dp / (dp - dq)) * (q - p)
    return all(np.cross(w - v, x - v) @ n >= 0 for v, w in ((a, b), (b, c), (c, a)))


def _coplanar_triangles_meet(v, u, n) -> bool:
    """In the plane of normal n: an edge of one crosses an edge of the other, or one holds a corner of the other."""
    keep = [k for k in range(3) if k != int(np.argmax(np.abs(n)))]
    v2, u2 = v[:, keep], u[:, keep]

    def orient(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    def inside(x, t):
        s = [orient(t[e], t[(e + 1) % 3], x) for e in range(3)]
        return all(z >= 0 for z in s) or all(z <= 0 for z in s)

    def cross(p, q, r, w):
        return orient(r, w, p) * orient(r, w, q) < 0 and orient(p, q, r) * orient(p, q, w) < 0
    return any(cross(v2[e], v2[(e + 1) % 3], u2[f], u2[(f + 1) % 3]) for e in range(3) for f in range(3)) \
        or inside(v2[0], u2) or inside(u2[0], v2)


def _intersect_tri_tri(v0, v1, v2, u0, u1, u2):
    """Whether two triangles meet (1) or not (0), from their edges: one of the six crosses the other triangle,
    or, for two triangles in one plane, their 2D overlap (float64, for inputs away from touching)."""
    v = np.array([_f64(x) for x in (v0, v1, v2)])
    u = np.array([_f64(x) for x in (u0, u1, u2)])
    n = np.cross(v[1] - v[0], v[2] - v[0])
    if np.all(np.abs((u - v[0]) @ n) < 1e-6):
        return np.int32(_coplanar_triangles_meet(v, u, n))
    hits = any(_segment_meets_triangle(s[e], s[(e + 1) % 3], *t) for s, t in ((v, u), (u, v)) for e in range(3))
    return np.int32(hits)


def mul(a, b):
    """``*``: scalars, scalar times composite (either side), matrix products, quaternion and transform
    products."""
    ca, cb = isinstance(a, T._Composite), isinstance(b, T._Composite)
    with np.errstate(all="ignore"):
        if ca and cb:
            if isinstance(a, T._Quat) and isinstance(b, T._Quat):
                return type(a)._wrap(_q_mul(_f64(a), _f64(b)))
            if isinstance(a, T._Transform):
                return BUILTINS["transform_multiply"](a, b)
            if isinstance(a, T._Vector):
                return T.vector(b._shape[1], b._scalar)._wrap(a._v @ b._v)
            return a @ b
        if cb:
            return type(b)._wrap(b._v * a)
        return a * b


def index(base, idx):
    """``base[idx]``, where a matrix row is a vector (a view: ``m[0][1] = s`` writes ``m``) and a slice of
    a vector, matrix or quaternion is a vector or matrix of the components it selects (a copy)."""
    sliced = isinstance(idx, slice) or isinstance(idx, tuple) and any(isinstance(i, slice) for i in idx)
    if isinstance(base, T._Composite) and sliced:
        part = np.array(base._v[idx])
        if part.ndim == 0:
            return _scalar_of(base, part)
        t = T.vector(part.shape[0], base._scalar) if part.ndim == 1 else T.matrix(part.shape, base._scalar)
        return t._wrap(part)
    if isinstance(base, T._Matrix) and not isinstance(idx, tuple):
        return T.vector(base._shape[1], base._scalar)._wrap(base._v[int(idx)])
    return base[idx]


def unpack(x) -> list:
    """``*x`` in a call: typed components of a vector / quaternion, the rows of a matrix (as vectors), the
    elements of a 1-d array or a tuple."""
    if isinstance(x, T._Matrix):
        return [index(x, r) for r in range(x._shape[0])]
    if isinstance(x, T._Composite):
        return [_scalar_of(x, c) for c in x._v]
    return list(x)


def setattr_(obj, name, value):
    """``obj.name = value``, where ``t.p`` / ``t.q`` of a transform write its components in place."""
    if isinstance(obj, T._Transform) and name in ("p", "q"):
        obj._v[slice(0, 3) if name == "p" else slice(3, 7)] = _f64(value)
    else:
        setattr(obj, name, value)


def loop_default(local: dict, name: str):
    """A ``for`` variable before its loop: its value if bound, else 0 (xsim's value after a loop that did not
    run, where Python would leave it unbound)."""
    return local[name] if name in local else np.int32(0)


def struct_ctor(t):
    """A struct type called in a kernel: positional fields in declaration order, keywords, the rest zero;
    array fields hold the reference's arrays."""
    def make(*args, **kw):
        out = t()
        for name, v in {**dict(zip(t._fields, args)), **kw}.items():
            if isinstance(t._fields[name], T.ArrayType):
                object.__setattr__(out, name, v)
            else:
                setattr(out, name, val(v))
        return out
    make.struct_type = t
    return make


def dtype_of(v):
    """``x.dtype``: an array's element type, a vector's or matrix's component type (of a value or of
    its type: ``array.dtype.dtype``)."""
    if isinstance(v, T._Composite) or isinstance(v, type) and issubclass(v, T._Composite):
        return v._scalar
    return v.dtype


def val(v):
    """The value stored by an assignment: composites and structs are copied, bare literals typed; a tuple
    (``a, v = f(...)``, a func's returned values) element by element."""
    if type(v) is tuple:
        return tuple(val(x) for x in v)
    if isinstance(v, T._Composite):
        return type(v)._wrap(v._v.copy())
    if isinstance(v, T._StructBase):
        out = copy.copy(v)
        for f, t in v._fields.items():
            if not isinstance(t, T.ArrayType):
                object.__setattr__(out, f, val(getattr(v, f)))
        return out
    if isinstance(v, _Record):  # a struct read from an array: a copy
        return _Record(v._rec.copy(), v._t)
    if isinstance(v, np.generic):  # before the Python types: np.float64 is a float
        return v
    if isinstance(v, bool):
        return np.bool_(v)
    if isinstance(v, int):
        return np.int32(v)
    if isinstance(v, float):
        return np.float32(v)
    return v


class _Shape(tuple):
    """An array's shape: an index past its dims reads 0, as in kernels (Warp's ``shape_t``)."""

    def __getitem__(self, i):
        return np.int32(0) if isinstance(i, int) and i >= len(self) else super().__getitem__(i)


class _Array:
    """An array argument: numpy storage with xsim's dtype, ``shape`` and truthiness (a None array, Warp's
    null array, is false and has shape 0)."""

    def __init__(self, data: np.ndarray | None, dtype, ndim: int):
        self.data, self.dtype, self.ndim = data, dtype, ndim
        self.shape = _Shape(np.int32(n) for n in (data.shape[:ndim] if data is not None else (0,) * ndim))

    def __bool__(self):
        return self.data is not None

    def _sub(self, idx):
        """The view an index with fewer indices than dimensions, or slices (beside indices), give (None when
        it reaches an element)."""
        parts = idx if isinstance(idx, tuple) else (idx,)
        if any(isinstance(i, slice) for i in parts):
            return type(self)(self.data[idx], self.dtype, self.ndim - sum(not isinstance(i, slice) for i in parts))
        k = len(idx) if isinstance(idx, tuple) else 1
        return type(self)(self.data[idx], self.dtype, self.ndim - k) if k < self.ndim else None

    def __getitem__(self, idx):
        sub = self._sub(idx)
        return self.data[idx] if sub is None else sub

    def __setitem__(self, idx, value):
        self.data[idx] = value

    def __len__(self):
        return int(self.shape[0])


class IndexedData:
    """The storage of an indexed array argument: ``base`` (a numpy copy of the data) seen through one index
    array (or None) per outer dimension; reads and writes map the indices, a partial index gives a view."""

    def __init__(self, base: np.ndarray, indices: list):
        self.base, self.indices = base, indices
        self.shape = tuple(base.shape[d] if ix is None else len(ix) for d, ix in enumerate(indices))

    def _map(self, idx) -> tuple:
        idx = idx if isinstance(idx, tuple) else (idx,)
        return tuple(i if ix is None else ix[i] for i, ix in zip(idx, self.indices))

    def __getitem__(self, idx):
        k = len(idx) if isinstance(idx, tuple) else 1
        got = self.base[self._map(idx)]
        return IndexedData(got, self.indices[k:]) if k < len(self.indices) else got

    def __setitem__(self, idx, value):
        self.base[self._map(idx)] = value


class _CompositeArray(_Array):
    """An array of vectors/matrices/quats: an element is a view, so ``y[i].x = s`` writes the array."""

    def __getitem__(self, idx):
        sub = self._sub(idx)
        return self.dtype._wrap(self.data[idx]) if sub is None else sub

    def __setitem__(self, idx, value):
        self.data[idx] = np.asarray(value)


class _Record:
    """An element of an array of structs: field reads and writes go to the array's record."""

    def __init__(self, rec, t):
        object.__setattr__(self, "_rec", rec)
        object.__setattr__(self, "_t", t)

    def __getattr__(self, name):
        ft = self._t._fields[name]
        if T.is_struct(ft):  # a nested struct: a record viewing the same memory
            return _Record(self._rec[name], ft)
        return ft._wrap(self._rec[name]) if T.is_composite(ft) else self._rec[name]

    def __setattr__(self, name, value):
        self._rec[name] = np.asarray(value)


class _StructArray(_Array):
    def __setitem__(self, idx, value):
        self.data[idx] = value._rec if isinstance(value, _Record) else value

    def __getitem__(self, idx):
        sub = self._sub(idx)
        if sub is not None:
            return sub
        return _Record(self.data[idx:idx + 1][0] if isinstance(idx, (int, np.integer)) else self.data[idx],
                       self.dtype)


def _component_type(args, dtype):
    """The component type of ``vector(...)`` / ``matrix(...)``: ``dtype``, else the first typed
    argument's, else float32 (untyped literals)."""
    if dtype is not None:
        return T.resolve(dtype)
    typed = next((a for a in args if isinstance(a, np.generic)), None)
    return T.scalar_from_numpy(typed.dtype) if typed is not None else T.float32


def _generic_vector(*args, length=None, dtype=None):
    """vector(components...), vector(s, length=n) (filled), vector(length=n) (zero), vector(v) (a copy,
    converted to ``dtype``)."""
    if len(args) == 1 and isinstance(args[0], T._Composite):
        v = args[0]
        return T.vector(v._v.size, T.resolve(dtype) if dtype is not None else v._scalar)._wrap(_f64(v).ravel())
    t = T.vector(length or len(args), _component_type(args, dtype))
    return t(*args) if args else t()


def _generic_matrix(*args, shape=None, dtype=None):
    """matrix(components..., shape=), matrix(s, shape=) (filled), matrix(shape=) (zero), matrix(m) (a copy)."""
    if len(args) == 1 and isinstance(args[0], T._Composite):
        m = args[0]
        return T.matrix(m._shape, T.resolve(dtype) if dtype is not None else m._scalar)._wrap(_f64(m))
    t = T.matrix(shape, _component_type(args, dtype))
    return t(*args) if args else t()


# ---------------------------------------------------------------------------------------------
# builtins, from their definitions (Warp's where it documents one); composites in float64 numpy,
# rounded to the argument's component type at the end


def _common(*args):
    """``args`` with bare Python numbers given the numpy type of the first typed argument (an
    untyped literal takes its partner's type in xsim; alone it is int32 / float32)."""
    typed = next((type(a) for a in args if isinstance(a, np.generic)), None)
    if typed is None:
        return [val(a) if isinstance(a, (int, float)) else a for a in args]
    return [typed(a) if isinstance(a, (int, float)) and not isinstance(a, np.generic) else a for a in args]


def _math(f):
    """A float math function: evaluated in float64 and rounded once to the argument's type."""
    def g(*args):
        args = _common(*args)
        return type(args[0])(f(*[np.float64(a) for a in args]))
    return g


def _round(x):
    """Nearest integer, halfway cases away from zero (C's round, as Warp documents)."""
    r = np.trunc(x)
    return r + np.sign(x) if abs(x - r) >= 0.5 else r


def _sign(x):
    """-1 below zero, 1 otherwise (Warp's definition: sign(0) = sign(-0.0) = 1)."""
    if isinstance(x, T._Composite):
        return type(x)._wrap(np.where(x._v < 0, -1, 1).astype(x._v.dtype))
    return type(x)(-1 if x < 0 else 1)


def _abs(x):
    if isinstance(x, T._Composite):
        return type(x)._wrap(np.abs(x._v))
    with np.errstate(all="ignore"):
        return abs(x)


def _nan_skipping(values: np.ndarray, pick) -> np.ndarray:
    """The reduction ``pick`` (np.min / np.max) over the non-NaN values; the first value when all are NaN."""
    kept = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    return pick(kept) if kept.size else values[0]


def _picks_second(a, b, before) -> bool:
    """Whether min/max (``before`` = lt / gt) pick ``b``: it comes before ``a``, or ``a`` is NaN (C's
    fmin/fmax, as Warp 1.19: a NaN operand is missing); ties keep ``a``."""
    return bool(before(b, a) | np.isnan(np.float64(a)))


def _min(a, b=None):
    if b is None:  # the smallest component
        return _scalar_of(a, _nan_skipping(np.asarray(a._v), np.min))
    if isinstance(a, T._Composite):
        return type(a)._wrap(np.where((b._v < a._v) | np.isnan(np.asarray(a._v, np.float64)), b._v, a._v))
    a, b = _common(a, b)
    return b if _picks_second(a, b, np.less) else a


def _max(a, b=None):
    if b is None:  # the largest component
        return _scalar_of(a, _nan_skipping(np.asarray(a._v), np.max))
    if isinstance(a, T._Composite):
        return type(a)._wrap(np.where((b._v > a._v) | np.isnan(np.asarray(a._v, np.float64)), b._v, a._v))
    a, b = _common(a, b)
    return b if _picks_second(a, b, np.greater) else a


def _clamp(x, lo, hi):
    """Warp's clamp: min(max(x, lo), hi) (a NaN bound is no bound; lo > hi gives hi)."""
    return _min(_max(x, lo), hi)


def _where(c, a, b):
    a, b = _common(a, b)
    return a if c else b


def _select(c, if_false, if_true):
    return _where(c, if_true, if_false)


def _f64(x) -> np.ndarray:
    return np.asarray(x._v if isinstance(x, T._Composite) else x, np.float64)


def _scalar_of(x, value):
    return np.dtype(x._scalar._np).type(value)


def _vec3(like, v):
    return T.vector(3, like._scalar)._wrap(v)


def _mat(like, m):
    return T.matrix(m.shape, like._scalar)._wrap(m)


def _normalize(v):
    """``v / |v|``, and the zero vector for the zero vector."""
    n = np.sqrt(np.dot(_f64(v), _f64(v)))
    return type(v)._wrap(_f64(v) / n if n > 0 else np.zeros(v._shape))


def _q_mul(a, b) -> np.ndarray:
    """Hamilton product of quaternions stored (x, y, z, w)."""
    u, aw, v, bw = a[:3], a[3], b[:3], b[3]
    return np.concatenate([aw * v + bw * u + np.cross(u, v), [aw * bw - np.dot(u, v)]])


def _q_rotate(q, v, sign=1.0) -> np.ndarray:
    """Warp's rotation of ``v`` by ``q`` (exact for a unit ``q``; ``sign=-1`` rotates by its conjugate):
    v (2 w^2 - 1) + 2 u (u . v) + 2 w (u x v)."""
    u, w = q[:3], q[3]
    return v * (2 * w * w - 1) + u * (2 * np.dot(u, v)) + np.cross(u, v) * (2 * sign * w)


def _quat_rotate(q, v):
    return _vec3(q, _q_rotate(_f64(q), _f64(v)))


def _quat_rotate_inv(q, v):
    return _vec3(q, _q_rotate(_f64(q), _f64(v), -1.0))


def _quat_to_matrix(q):
    return _mat(q, np.stack([_q_rotate(_f64(q), e) for e in np.eye(3)], axis=1))


def _quat_from_axis_angle(axis, angle):
    h = np.float64(angle) * 0.5
    return T.quaternion(axis._scalar)._wrap(np.concatenate([_f64(axis) * np.sin(h), [np.cos(h)]]))


def _quat_inverse(q):
    return type(q)._wrap(_f64(q) * [-1, -1, -1, 1])


def _x_parts(t):
    v = _f64(t)
    return v[:3], v[3:]


def _transform_point(t, x):
    if isinstance(t, T._Matrix):  # a 4x4 matrix on the point (x, 1)
        return _vec3(t, (_f64(t) @ np.append(_f64(x), 1.0))[:3])
    p, q = _x_parts(t)
    return _vec3(t, p + _q_rotate(q, _f64(x)))


def _transform_vector(t, x):
    if isinstance(t, T._Matrix):  # a 4x4 matrix on the direction (x, 0)
        return _vec3(t, _f64(t)[:3, :3] @ _f64(x))
    return _vec3(t, _q_rotate(_x_parts(t)[1], _f64(x)))


def _transform_multiply(a, b):
    (pa, qa), (pb, qb) = _x_parts(a), _x_parts(b)
    return type(a)._wrap(np.concatenate([pa + _q_rotate(qa, pb), _q_mul(qa, qb)]))


def _transform_inverse(t):
    p, q = _x_parts(t)
    return type(t)._wrap(np.concatenate([-_q_rotate(q, p, -1.0), q * [-1, -1, -1, 1]]))


def _inverse(m):
    """The inverse; the zero matrix for a singular one (xsim's documented choice)."""
    a = _f64(m)
    return type(m)._wrap(np.zeros(a.shape) if np.linalg.det(a) == 0 else np.linalg.inv(a))


def _skew(v):
    x, y, z = _f64(v)
    return T.matrix((3, 3), v._scalar)._wrap(np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]]))


def _identity(n, dtype=T.float32):
    return T.matrix((n, n), T.resolve(dtype))._wrap(np.eye(n))


def _matrix_from(vectors, rows: bool):
    m = np.stack([v._v for v in vectors], axis=0 if rows else 1)
    return T.matrix(m.shape, vectors[0]._scalar)._wrap(m)


def _reduce(f):
    """A builtin reducing composites to one scalar of their component type."""
    return lambda *xs: _scalar_of(xs[0], f(*[_f64(x) for x in xs]))


def _lerp(a, b, t):
    """a (1 - t) + b t, componentwise for composites."""
    if isinstance(a, T._Composite):
        t = np.float64(t)
        return type(a)._wrap(_f64(a) * (1.0 - t) + _f64(b) * t)
    return _math(lambda a, b, t: a * (1.0 - t) + b * t)(a, b, t)


def _smoothstep(e0, e1, x):
    """Hermite step: t = clamp((x - e0) / (e1 - e0), 0, 1), t^2 (3 - 2 t)."""
    def f(e0, e1, x):
        t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
        return t * t * (3.0 - 2.0 * t)
    return _math(f)(e0, e1, x)


def _cast(x, dtype):
    """The bits of ``x`` read as ``dtype`` (a bit cast between types of the same size)."""
    t = T.resolve(getattr(dtype, "struct_type", dtype))  # a struct's name is its constructor in a kernel
    if isinstance(t, type) and issubclass(t, np.generic):  # ``float`` in a kernel is the reference's np.float32
        t = T.scalar_from_numpy(np.dtype(t))
    if isinstance(x, (_Record, T._StructBase)):  # a struct's bytes: its record as laid out in arrays
        rec = x._rec if isinstance(x, _Record) else np.zeros((), dtype=np.dtype(type(x)._np))
        if not isinstance(x, _Record):
            for f in type(x)._fields:
                rec[f] = np.asarray(getattr(x, f))
        raw = rec.tobytes()
    else:
        raw = np.ascontiguousarray(x._v if isinstance(x, T._Composite) else np.asarray(x)).tobytes()
    if T.is_struct(t):
        return _Record(np.frombuffer(raw, np.dtype(t._np)).copy()[0], t)
    if T.is_scalar(t):
        return np.frombuffer(raw, t._np)[0]
    return t._wrap(np.frombuffer(raw, t._scalar._np).copy())


def _norm_huber(v, delta=1.0):
    a, d = np.dot(_f64(v), _f64(v)), np.float64(delta)
    return _scalar_of(v, 0.5 * a if a <= d * d else d * (np.sqrt(a) - 0.5 * d))


def _lower_bound(arr, *args):
    """The first index in [begin, end) (default the whole 1-d array) whose element is >= value; end - 1
    if none (begin for an empty range), as Warp answers."""
    *span, value = args
    begin, end = (int(span[0]), int(span[1])) if span else (0, len(arr))
    found = begin + np.searchsorted(arr.data[begin:end], value, side="left")
    return np.int32(max(begin, min(found, end - 1)))


def _axis_quat(axis: int, angle) -> np.ndarray:
    q = np.zeros(4)
    q[axis], q[3] = np.sin(0.5 * angle), np.cos(0.5 * angle)
    return q


def _quat_from_euler(e, i, j, k):
    """q_k q_j q_i: rotations by e[i], e[j], e[k] about the fixed axes i, then j, then k (Warp's docs)."""
    a = _f64(e)
    i, j, k = int(i), int(j), int(k)
    q = _q_mul(_axis_quat(k, a[k]), _q_mul(_axis_quat(j, a[j]), _axis_quat(i, a[i])))
    return T.quaternion(e._scalar)._wrap(q)


def _quat_to_axis_angle(q):
    """(unit axis, angle in [0, pi]) of the rotation q, the axis flipped with the sign of w."""
    v = _f64(q)
    n = np.linalg.norm(v[:3])
    axis = v[:3] / n if n > 0 else np.zeros(3)
    return _vec3(q, -axis if v[3] < 0 else axis), _scalar_of(q, 2.0 * np.arctan2(n, abs(v[3])))


def _quat_twist(axis, q):
    """The twist of q about the unit axis: (axis (axis . q_xyz), q_w) normalized."""
    v, a = _f64(q), _f64(axis)
    t = np.concatenate([a * np.dot(a, v[:3]), [v[3]]])
    n = np.linalg.norm(t)
    return type(q)._wrap(t / n if n > 0 else np.zeros(4))


def _spatial_cross(a, b):
    """Motion cross product of (w, v) pairs: (w_a x w_b, v_a x w_b + w_a x v_b)."""
    x, y = _f64(a), _f64(b)
    return type(a)._wrap(np.concatenate([np.cross(x[:3], y[:3]), np.cross(x[3:], y[:3]) + np.cross(x[:3], y[3:])]))


def _transform_to_matrix(t):
    p, q = _x_parts(t)
    m = np.eye(4)
    m[:3, :3] = np.stack([_q_rotate(q, e) for e in np.eye(3)], axis=1)
    m[:3, 3] = p
    return _mat(t, m)


def _set_part(first):
    def setter(t, part):
        v = _f64(t).copy()
        p = _f64(part)
        v[first:first + len(p)] = p
        return type(t)._wrap(v)
    return setter


def _qr3(a):
    """Q a rotation, R upper triangular with r00, r11 >= 0 (r22 carries the sign of det A)."""
    q, r = np.linalg.qr(_f64(a))
    s = np.sign(np.diag(r))
    s[s == 0] = 1.0
    q, r = q * s, r * s[:, None]
    if np.linalg.det(q) < 0:
        q[:, 2], r[2] = -q[:, 2], -r[2]
    return type(a)._wrap(q), type(a)._wrap(r)


def _quat_rpy(roll, pitch, yaw):
    """Rotations by roll, pitch, yaw about the fixed x, y, z axes, in that order."""
    q = _q_mul(_axis_quat(2, np.float64(yaw)), _q_mul(_axis_quat(1, np.float64(pitch)), _axis_quat(0, np.float64(roll))))
    return T.quaternion(T.scalar_from_numpy(np.asarray(_common(roll, pitch, yaw)[0]).dtype))._wrap(q)


def _quat_to_rpy(q):
    """(roll, pitch, yaw) by Warp's documented formulas (pitch from asin of the clamped sine)."""
    x, y, z, w = _f64(q)
    return _vec3(q, [np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
                     np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0)),
                     np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))])


def _quat_to_euler(q, i, j, k):
    """Bernardes and Viollet's direct method (PLoS ONE 17(11), 2022), the one Warp documents: angles e
    with quat_from_euler(e, i, j, k) == q, first and third in [-2 pi, 2 pi] (not wrapped); proper
    sequences (i == k) put the third angle in e[3 - i - j]; at gimbal lock (|t2| or |t2 - pi| < 1e-6,
    xsim's threshold) the first angle is 0."""
    i, j, k = int(i), int(j), int(k)
    v = _f64(q)
    proper = i == k
    kk = 3 - i - j if proper else k
    sign = (i - j) * (j - kk) * (kk - i) / 2
    w, qi, qj, qk = v[3], v[i], v[j], v[kk] * sign
    a, b, c, d = (w, qi, qj, qk) if proper else (w - qj, qi + qk, qj + w, qk - qi)
    t2 = np.arccos(np.clip(2 * (a * a + b * b) / (a * a + b * b + c * c + d * d) - 1, -1.0, 1.0))
    tp, tm = np.arctan2(b, a), np.arctan2(d, c)
    t1, t3 = (0.0, 2 * tp) if abs(t2) < 1e-6 else (0.0, 2 * tm) if abs(t2 - np.pi) < 1e-6 else (tp - tm, tp + tm)
    if not proper:
        t2, t3 = t2 - np.pi / 2, t3 * sign
    e = np.zeros(3)
    e[i], e[j], e[kk] = t1, t2, t3
    return _vec3(q, e)


def _quat_from_matrix(m):
    """Shepperd's method on a 3x3 matrix (or a 4x4's top-left block), led by the largest of trace and the
    diagonal, normalised (Warp's: a matrix that is not a rotation still gives a unit quaternion)."""
    r = _f64(m)[:3, :3]
    d, tr = np.diag(r), np.trace(r)
    lead = 3 if tr >= 0 else 1 if d[1] > d[0] and d[1] >= d[2] else 2 if d[2] > d[0] and d[2] > d[1] else 0
    q = np.zeros(4)
    q[lead] = 0.5 * np.sqrt((tr if lead == 3 else 2 * d[lead] - tr) + 1.0)
    s = 0.25 / q[lead]
    a = r - r.T  # the antisymmetric part gives w's partners, the symmetric part the other pairs
    if lead == 3:
        q[:3] = np.array([a[2, 1], a[0, 2], a[1, 0]]) * s
    else:
        j, k = (lead + 1) % 3, (lead + 2) % 3
        q[j], q[k] = (r[lead, j] + r[j, lead]) * s, (r[lead, k] + r[k, lead]) * s
        q[3] = a[k, j] * s
    return T.quaternion(m._scalar)._wrap(q / np.linalg.norm(q))


def _quat_slerp(a, b, t):
    """Along the shorter arc from a (t = 0) to b (t = 1): a exp(t log(a^-1 b))."""
    rel = _q_mul(_f64(a) * [-1, -1, -1, 1], _f64(b))
    n = np.linalg.norm(rel[:3])
    axis = (rel[:3] / n if n > 0 else np.zeros(3)) * (-1 if rel[3] < 0 else 1)
    angle = 2.0 * np.arctan2(n, abs(rel[3])) * np.float64(t)
    return type(a)._wrap(_q_mul(_f64(a), np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])))


def _quat_twist_angle(axis, q):
    v = _f64(q)
    return _scalar_of(q, 2.0 * np.arctan2(abs(np.dot(_f64(axis), v[:3])), v[3]))


def _quat_twist_angle_signed(axis, q):
    v = _f64(q)
    return _scalar_of(q, 2.0 * np.arctan2(np.dot(_f64(axis), v[:3]), v[3]))


def _compose(p, rot, scale) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = np.stack([_q_rotate(rot, e) for e in np.eye(3)], axis=1) * scale
    m[:3, 3] = p
    return m


def _transform_compose(position, rotation, scale):
    return T.matrix((4, 4), position._scalar)._wrap(_compose(_f64(position), _f64(rotation), _f64(scale)))


def _transform_decompose(m):
    a = _f64(m)
    scale = np.linalg.norm(a[:3, :3], axis=0)
    r = T.matrix((3, 3), m._scalar)._wrap(a[:3, :3] / np.where(scale > 0, scale, 1.0))
    return _vec3(m, a[:3, 3]), _quat_from_matrix(r), _vec3(m, scale)


def _transform_from_matrix(m):
    q = _f64(_quat_from_matrix(m))
    return T.transformation(m._scalar)._wrap(np.concatenate([_f64(m)[:3, 3], q]))


def _spatial(like, top, bottom):
    return T.vector(6, like._scalar)._wrap(np.concatenate([top, bottom]))


def _spatial_cross_dual(a, b):
    """Force cross product: (w_a x t_b + v_a x f_b, w_a x f_b)."""
    x, y = _f64(a), _f64(b)
    return _spatial(a, np.cross(x[:3], y[:3]) + np.cross(x[3:], y[3:]), np.cross(x[:3], y[3:]))


def _spatial_adjoint(r, s):
    m = np.zeros((6, 6))
    m[:3, :3] = m[3:, 3:] = _f64(r)
    m[3:, :3] = _f64(s)
    return T.matrix((6, 6), r._scalar)._wrap(m)


def _transform_twist(t, x):
    """(R w, R v + p x R w) of the twist x = (w, v) under t = (p, R)."""
    (p, q), v = _x_parts(t), _f64(x)
    w = _q_rotate(q, v[:3])
    return _spatial(t, w, _q_rotate(q, v[3:]) + np.cross(p, w))


def _transform_wrench(t, x):
    """(R tau + p x R f, R f) of the wrench x = (tau, f) under t = (p, R)."""
    (p, q), v = _x_parts(t), _f64(x)
    f = _q_rotate(q, v[3:])
    return _spatial(t, _q_rotate(q, v[:3]) + np.cross(p, f), f)


def _spatial_jacobian(s, parents, qd_start, first, count, at, jac):
    """Writes each joint's ancestors' motion subspaces into its 6 rows of the articulation's dense Jacobian."""
    qd = qd_start.data.astype(np.int64)
    cols = qd[first + count] - qd[first]
    block = jac.data[at:at + 6 * count * cols].reshape(6 * count, cols)
    for i in range(count):
        j = first + i
        while j != -1:
            block[6 * i:6 * i + 6, qd[j] - qd[first]:qd[j + 1] - qd[first]] = s.data[qd[j]:qd[j + 1]].T
            j = int(parents.data[j])


def _spatial_mass(inertia, first, count, at, mass):
    """Writes the joints' spatial inertias on the diagonal of the articulation's dense mass matrix."""
    block = mass.data[at:at + 36 * count * count].reshape(6 * count, 6 * count)
    for b in range(count):
        block[6 * b:6 * b + 6, 6 * b:6 * b + 6] = inertia.data[first + b]


def _pseudo_huber(v, delta=1.0):
    return np.float64(delta) * np.sqrt(1.0 + np.dot(_f64(v), _f64(v)) / np.float64(delta) ** 2)


def _argext(f):
    return lambda v: np.uint32(f(v._v))


BUILTINS = {
    **{name: _math(getattr(np, npname)) for name, npname in (
        ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("atan", "arctan"), ("sinh", "sinh"), ("cosh", "cosh"),
        ("tanh", "tanh"), ("sqrt", "sqrt"), ("cbrt", "cbrt"), ("exp", "exp"), ("log", "log"), ("log2", "log2"),
        ("log10", "log10"), ("degrees", "degrees"), ("radians", "radians"), ("floor", "floor"),
        ("ceil", "ceil"), ("trunc", "trunc"), ("atan2", "arctan2"), ("pow", "power"))},
    # Warp clamps the argument of asin / acos to [-1, 1]
    "asin": _math(lambda x: np.arcsin(np.clip(x, -1.0, 1.0))),
    "acos": _math(lambda x: np.arccos(np.clip(x, -1.0, 1.0))),
    "round": _math(_round),
    # of a composite: all components finite; any component NaN / infinite
    "isfinite": lambda x: np.bool_(np.all(np.isfinite(_f64(x)))), "isnan": lambda x: np.bool_(np.any(np.isnan(_f64(x)))),
    "isinf": lambda x: np.bool_(np.any(np.isinf(_f64(x)))),
    "abs": _abs, "sign": _sign, "min": _min, "max": _max, "clamp": _clamp, "where": _where, "select": _select,
    "dot": _reduce(np.dot), "length": _reduce(lambda v: np.sqrt(np.dot(v, v))),
    "length_sq": _reduce(lambda v: np.dot(v, v)), "normalize": _normalize,
    "cross": lambda a, b: type(a)._wrap(np.cross(_f64(a), _f64(b))),
    "cw_mul": lambda a, b: type(a)._wrap(a._v * b._v), "cw_div": lambda a, b: type(a)._wrap(div(a._v, b._v)),
    "outer": lambda a, b: _mat(a, np.outer(_f64(a), _f64(b))),
    "transpose": lambda m: _mat(m, _f64(m).T), "inverse": _inverse,
    "determinant": _reduce(np.linalg.det), "trace": _reduce(np.trace),
    "diag": lambda v: _mat(v, np.diag(_f64(v))), "skew": _skew, "ddot": _reduce(lambda a, b: np.sum(a * b)),
    "identity": _identity,
    "matrix_from_rows": lambda *vs: _matrix_from(vs, rows=True),
    "matrix_from_cols": lambda *vs: _matrix_from(vs, rows=False),
    "quat_identity": lambda dtype=T.float32: T.quaternion(T.resolve(dtype))(0, 0, 0, 1),
    "transform_identity": lambda dtype=T.float32: T.transformation(T.resolve(dtype))(),
    "quat_from_axis_angle": _quat_from_axis_angle, "quat_rotate": _quat_rotate,
    "quat_rotate_inv": _quat_rotate_inv, "quat_inverse": _quat_inverse, "quat_to_matrix": _quat_to_matrix,
    "transform_point": _transform_point, "transform_vector": _transform_vector,
    "transform_multiply": _transform_multiply, "transform_inverse": _transform_inverse,
    "transform_get_translation": lambda t: _vec3(t, _x_parts(t)[0]),
    "transform_get_rotation": lambda t: T.quaternion(t._scalar)._wrap(_x_parts(t)[1]),
    # Warp's math library (erf and its inverses from scipy.special)
    **{name: _math(f) for name, f in (
        ("erf", scipy.special.erf), ("erfc", scipy.special.erfc), ("erfinv", scipy.special.erfinv),
        ("erfcinv", scipy.special.erfcinv), ("rint", np.rint), ("frac", lambda x: x - np.trunc(x)))},
    "lerp": _lerp, "smoothstep": _smoothstep, "step": lambda x: type(x)(1 if x < 0 else 0),
    "nonzero": lambda x: type(x)(0 if x == 0 else 1), "cast": _cast,
    "argmin": _argext(np.argmin), "argmax": _argext(np.argmax),
    "norm_l1": _reduce(lambda v: np.sum(np.abs(v))), "norm_l2": _reduce(lambda v: np.sqrt(np.dot(v, v))),
    "norm_huber": _norm_huber,
    "norm_pseudo_huber": lambda v, delta=1.0: _scalar_of(v, _pseudo_huber(v, delta)),
    "smooth_normalize": lambda v, delta=1.0: type(v)._wrap(_f64(v) / _pseudo_huber(v, delta)),
    "lower_bound": _lower_bound,
    # expect_* print when they fail and return whether they held
    "expect_eq": lambda a, b: np.bool_(np.all(_f64(a) == _f64(b))),
    "expect_neq": lambda a, b: np.bool_(np.any(_f64(a) != _f64(b))),
    "expect_near": lambda a, b, tolerance=1e-6: np.bool_(np.max(np.abs(_f64(a) - _f64(b))) <= tolerance),
    "intersect_tri_tri": _intersect_tri_tri,
    # printf writes to stdout, which no launch compares: the reference leaves the output to the kernel's run
    "printf": lambda fmt, *args: np.bool_(True),
    "quat_from_euler": _quat_from_euler, "quat_to_axis_angle": _quat_to_axis_angle, "quat_twist": _quat_twist,
    "spatial_cross": _spatial_cross, "transform_to_matrix": _transform_to_matrix,
    "quat_rpy": _quat_rpy, "quat_to_rpy": _quat_to_rpy, "quat_to_euler": _quat_to_euler,
    "quat_from_matrix": _quat_from_matrix, "quat_slerp": _quat_slerp, "quat_twist_angle": _quat_twist_angle,
    "quat_twist_angle_signed": _quat_twist_angle_signed,
    "transform_compose": _transform_compose, "transform_decompose": _transform_decompose,
    "transform_from_matrix": _transform_from_matrix, "spatial_cross_dual": _spatial_cross_dual,
    "spatial_top": lambda a: _vec3(a, _f64(a)[:3]), "spatial_bottom": lambda a: _vec3(a, _f64(a)[3:]),
    "spatial_dot": _reduce(np.dot), "spatial_adjoint": _spatial_adjoint,
    "spatial_jacobian": _spatial_jacobian, "spatial_mass": _spatial_mass,
    "velocity_at_point": lambda qd, r: _vec3(qd, _f64(qd)[3:] + np.cross(_f64(qd)[:3], _f64(r))),
    "transform_twist": _transform_twist, "transform_wrench": _transform_wrench,
    "transform_set_translation": _set_part(0), "transform_set_rotation": _set_part(3), "qr3": _qr3,
    # the operators' registry names, callable as builtins
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": mul, "div": div, "floordiv": floordiv,
    "mod": mod, "neg": lambda a: -a, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b, "eq": lambda a, b: np.bool_(a == b),
    "ne": lambda a, b: np.bool_(a != b), "bit_and": lambda a, b: a & b, "bit_or": lambda a, b: a | b,
    "bit_xor": lambda a, b: a ^ b, "lshift": lambda a, b: a << b, "rshift": lambda a, b: a >> b,
    "invert": lambda a: ~a,
}


# ---------------------------------------------------------------------------------------------
# random numbers: Warp's PCG hash (Jarzynski and Olano 2020) and its samplers, in uint32 arithmetic.
# A sampler takes its state by reference; the rewrite turns ``randf(s, ...)`` into a call of
# ``draw`` that returns (value, advanced state) and rebinds ``s``.


def _pcg(state) -> np.uint32:
    b = (int(state) * 747796405 + 2891336453) & 0xFFFFFFFF
    c = (((b >> ((b >> 28) + 4)) ^ b) * 277803737) & 0xFFFFFFFF
    return np.uint32((c >> 22) ^ c)


def _rand_init(seed, offset=None):
    seed = int(seed) & 0xFFFFFFFF
    return _pcg(seed) if offset is None else _pcg((seed + int(_pcg(int(offset) & 0xFFFFFFFF))) & 0xFFFFFFFF)


class _Draws:
    """The state of one sampler call: each ``f()`` advances it and gives a float32 in [0, 1)."""

    def __init__(self, state):
        self.state = np.uint32(state)

    def u(self) -> np.uint32:
        self.state = _pcg(self.state)
        return self.state

    def f(self) -> np.float32:
        return np.float32(int(self.u()) >> 8) * np.float32(1.0 / 16777216.0)


_TWO_PI = np.float32(2.0) * np.float32(np.pi)
_F = np.float32


def _sphere(d: _Draws, half: bool, solid: bool):
    phi = np.arccos(_F(1) - (d.f() if half else _F(2) * d.f()))
    theta = _TWO_PI * d.f()
    r = np.power(d.f(), _F(1) / _F(3)) if solid else _F(1)
    return T.vec3(r * np.cos(theta) * np.sin(phi), r * np.sin(theta) * np.sin(phi), r * np.cos(phi))


def _range_u(d, lo, hi, t):
    return t(int(d.u()) % ((int(hi) - int(lo)) & 0xFFFFFFFF) + int(lo))


def _ring(d):
    theta = _TWO_PI * d.f()
    return T.vec2(np.cos(theta), np.sin(theta))


def _disk(d):
    r = np.sqrt(d.f())
    theta = _TWO_PI * d.f()
    return T.vec2(r * np.cos(theta), r * np.sin(theta))


def _triangle(d):
    r = np.sqrt(d.f())
    return T.vec2(_F(1) - r, d.f() * r)


def _randn(d):
    return np.sqrt(_F(-2) * np.log(d.f() + _F(5.96e-8))) * np.cos(_TWO_PI * d.f())


# Stirling-series coefficients of log Gamma (Zhang and Jin, Computation of Special Functions, 1996)
_LOGGAM = [_F(c) for c in (8.333333333333333e-02, -2.777777777777778e-03, 7.936507936507937e-04,
                           -5.952380952380952e-04, 8.417508417508418e-04, -1.917526917526918e-03,
                           6.410256410256410e-03, -2.955065359477124e-02, 1.796443723688307e-01,
                           -1.39243221690590e+00)]


def _loggam(x):
    """log Gamma(x) in float32: the Stirling series at x + n >= 7, then n steps of log down to x."""
    if x in (1, 2):
        return _F(0)
    n = int(_F(7) - x) if x < 7 else 0
    x0 = x + _F(n)
    x2 = (_F(1) / x0) * (_F(1) / x0)
    g = _LOGGAM[9]
    for c in reversed(_LOGGAM[:9]):
        g = g * x2 + c
    gl = g / x0 + _F(0.5) * _F(1.8378770664093453) + (x0 - _F(0.5)) * np.log(x0) - x0
    for _ in range(n):
        gl -= np.log(x0 - _F(1))
        x0 -= _F(1)
    return gl


def _poisson(d, lam):
    """Warp's Poisson sampler: 0 at lam = 0; products of uniforms below exp(-lam) for lam < 10 (Knuth);
    Hoermann's transformed rejection (PTRS, 1993) for lam >= 10; in float32."""
    lam = _F(lam)
    if lam == 0:
        return np.uint32(0)
    if lam < 10:
        limit, prod, x = np.exp(-lam), _F(1), 0
        while True:
            prod *= d.f()
            if not prod > limit:
                return np.uint32(x)
            x += 1
    slam, loglam = np.sqrt(lam), np.log(lam)
    b = _F(0.931) + _F(2.53) * slam
    a = _F(-0.059) + _F(0.02483) * b
    invalpha = _F(1.1239) + _F(1.1328) / (b - _F(3.4))
    vr = _F(0.9277) - _F(3.6224) / (b - _F(2))
    while True:
        u = d.f() - _F(0.5)
        v = d.f()
        us = _F(0.5) - abs(u)
        k = np.floor((_F(2) * a / us + b) * u + lam + _F(0.43))
        if us >= _F(0.07) and v <= vr:
            return np.uint32(k)
        if k < 0 or us < _F(0.013) and v > us:
            continue
        if np.log(v) + np.log(invalpha) - np.log(a / (us * us) + b) <= -lam + k * loglam - _loggam(k + _F(1)):
            return np.uint32(k)


SAMPLERS = {
    "randi": lambda d, lo=None, hi=None: d.u().astype(np.int32) if lo is None else
    _wrap(_range_u(d, lo, hi, int), np.int32),
    "randu": lambda d, lo=None, hi=None: d.u() if lo is None else _wrap(_range_u(d, lo, hi, int), np.uint32),
    "randf": lambda d, lo=None, hi=None: d.f() if lo is None else (_F(hi) - _F(lo)) * d.f() + _F(lo),
    "randn": _randn, "poisson": _poisson,
    "sample_unit_ring": _ring,
    "sample_unit_disk": _disk, "sample_triangle": _triangle,
    "sample_unit_square": lambda d: T.vec2(d.f() - _F(0.5), d.f() - _F(0.5)),
    "sample_unit_cube": lambda d: T.vec3(d.f() - _F(0.5), d.f() - _F(0.5), d.f() - _F(0.5)),
    "sample_unit_sphere": lambda d: _sphere(d, False, True),
    "sample_unit_sphere_surface": lambda d: _sphere(d, False, False),
    "sample_unit_hemisphere": lambda d: _sphere(d, True, True),
    "sample_unit_hemisphere_surface": lambda d: _sphere(d, True, False),
}


# Perlin gradient noise as Warp documents it: a random unit gradient at each lattice point (hashed from
# the state and the point), smootherstep interpolation of the gradients' dot products with the offsets.
_LATTICE_PRIMES = (73856093, 19349663, 53471161, 10000019)


def _lattice_gradient(state, point) -> np.ndarray:
    """The gradient at integer ``point``: its coordinates times primes, xor-ed, the state added to the last
    term (C precedence: ``+`` before ``^``); one float in [-1, 1) in 1-d, else a unit vector of uniforms."""
    terms = [(int(c) * p) & 0xFFFFFFFF for c, p in zip(point, _LATTICE_PRIMES)]
    terms[-1] = (terms[-1] + int(state)) & 0xFFFFFFFF
    h = 0
    for t in terms:
        h ^= t
    d = _Draws(h)
    if len(point) == 1:
        return np.array([_F(2) * d.f() + _F(-1)], np.float64)
    g = np.array([d.f() - _F(0.5) for _ in point], np.float64)
    return g / np.linalg.norm(g)


def _perlin(state, x, periods=None):
    """noise(state, x) (``periods`` None) or pnoise(state, x, *periods) of 1 to 4 float32 coordinates."""
    return _F(_perlin_parts(state, x, periods)[0])


def _perlin_parts(state, x, periods=None):
    """The noise value at x and its gradient with respect to x (the product rule through the interpolation)."""
    x = np.atleast_1d(np.asarray(_f64(x), np.float32))
    base = np.floor(x)
    frac = (x - base).astype(np.float64)
    lo = [int(b) for b in base]
    hi = [c + 1 for c in lo]
    if periods is not None:
        lo = [int(mod(np.int32(c), np.int32(p))) for c, p in zip(lo, periods)]
        hi = [int(mod(np.int32(c + 1), np.int32(p))) for c, p in zip(lo, periods)]
    n = len(x)
    values, grads = np.zeros((2,) * n), np.zeros((2,) * n + (n,))
    for corner in np.ndindex(*values.shape):
        point = [hi[a] if corner[a] else lo[a] for a in range(n)]
        grads[corner] = _lattice_gradient(state, point)
        values[corner] = np.dot(grads[corner], frac - np.array(corner))
    for a in range(n):  # x first, then y, z, t
        t = frac[a]
        s, ds = t * t * t * (t * (t * 6 - 15) + 10), 30 * t * t * (t - 1) ** 2
        grads = (grads[1] - grads[0]) * s + grads[0] + np.multiply.outer(values[1] - values[0], np.eye(n)[a] * ds)
        values = (values[1] - values[0]) * s + values[0]
    return values, grads


def _curlnoise(state, x, octaves=1, lacunarity=2.0, gain=0.5):
    """Warp's curl noise: octaves of noise gradients (frequency times lacunarity, amplitude times gain);
    in 2-d the rotated gradient, in 3-d/4-d the curl of three potentials whose states follow each other by
    rand_init(state, 10019689) and rand_init(state, 13112221)."""
    x = np.asarray(_f64(x), np.float32)
    freq, amp = _F(1), _F(1)
    sums = np.zeros((3, len(x)))
    state = int(state)
    for _ in range(int(octaves)):
        pt = freq * x
        for f in range(1 if len(x) == 2 else 3):
            if f:
                state = int(_rand_init(state, (10019689, 13112221)[f - 1]))
            sums[f] += np.float64(amp) * _perlin_parts(state, pt)[1]
        amp, freq = amp * _F(gain), freq * _F(lacunarity)
    if len(x) == 2:
        return T.vec2(-sums[0][1], sums[0][0])
    c1, c2, c3 = sums
    return T.vec3(c3[1] - c2[2], c1[2] - c3[0], c2[0] - c1[1])


def draw(name, state, *args):
    """(value, advanced state) of the sampler ``name``."""
    d = _Draws(state)
    value = SAMPLERS[name](d, *args)
    return value, d.state
