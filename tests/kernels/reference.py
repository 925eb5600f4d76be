"""A forward reference for kernels: runs a kernel's own Python source on the host, thread by thread,
with numpy values, so that any kernel with a host-computable answer can be checked against it.

The source is parsed and lightly rewritten, then executed with a stand-in for ``xsim``:

- scalars are numpy scalars of the declared width (float32 rounds as float32, integers wrap);
  a local assigned a bare Python literal becomes int32 / float32, as an untyped literal does in xsim;
- integer ``/`` truncates toward zero and ``%`` has the sign of the dividend (C, as in Warp), integer
  ``//`` floors (as Warp's ``floordiv``); integer division or modulo by zero gives xsim's defined
  release-mode result (``x / 0 == x // 0 == 0``, ``x % 0 == x``), and ``INT_MIN // -1`` wraps;
- vectors, matrices, quaternions and structs are values: every assignment to a name and every
  func argument is a copy, while an element of an array of vectors is a view into that array;
- atomics return the old value (threads run one after another, so they are exact).

It is a test utility, not part of xsim: it knows only what the tests use.
"""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
import types as pytypes

import numpy as np

import xsim
from xsim import types as T
from xsim.kernels.kernel import Function
from xsim.kernels.scope import BuiltinRef

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
    with np.errstate(all="ignore"):
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


def mul(a, b):
    """``*``, with the row vector times matrix product that the host value types lack."""
    if isinstance(a, T._Vector) and isinstance(b, T._Matrix):
        return T.vector(b._shape[1], b._scalar)._wrap(a._v @ b._v)
    with np.errstate(all="ignore"):
        return a * b


def index(base, idx):
    """``base[idx]``, where a matrix row is a vector (a view: ``m[0][1] = s`` writes ``m``)."""
    if isinstance(base, T._Matrix) and not isinstance(idx, tuple):
        return T.vector(base._shape[1], base._scalar)._wrap(base._v[int(idx)])
    return base[idx]


def val(v):
    """The value stored by an assignment: composites and structs are copied, bare literals typed."""
    if isinstance(v, T._Composite):
        return type(v)._wrap(v._v.copy())
    if isinstance(v, T._StructBase):
        out = copy.copy(v)
        for f, t in v._fields.items():
            if not isinstance(t, T.ArrayType):
                object.__setattr__(out, f, val(getattr(v, f)))
        return out
    if isinstance(v, np.generic):  # before the Python types: np.float64 is a float
        return v
    if isinstance(v, bool):
        return np.bool_(v)
    if isinstance(v, int):
        return np.int32(v)
    if isinstance(v, float):
        return np.float32(v)
    return v


class _CompositeArray:
    """An array of vectors/matrices/quats: an element is a view, so ``y[i].x = s`` writes the array."""

    def __init__(self, data: np.ndarray, dtype):
        self.data, self.dtype, self.ndim = data, dtype, data.ndim - len(dtype._shape)

    def __getitem__(self, idx):
        return self.dtype._wrap(self.data[idx])

    def __setitem__(self, idx, value):
        self.data[idx] = np.asarray(value)

    def __len__(self):
        return self.data.shape[0]


class _Record:
    """An element of an array of structs: field reads and writes go to the array's record."""

    def __init__(self, rec, t):
        object.__setattr__(self, "_rec", rec)
        object.__setattr__(self, "_t", t)

    def __getattr__(self, name):
        ft = self._t._fields[name]
        return ft._wrap(self._rec[name]) if T.is_composite(ft) else self._rec[name]

    def __setattr__(self, name, value):
        self._rec[name] = np.asarray(value)


class _StructArray(_CompositeArray):
    def __getitem__(self, idx):
        return _Record(self.data[idx:idx + 1][0] if isinstance(idx, (int, np.integer)) else self.data[idx],
                       self.dtype)


def _generic_vector(*args, length=None, dtype=None):
    dtype = dtype or (T.scalar_from_numpy(np.asarray(args[0]).dtype) if args and not isinstance(args[0], float)
                      else T.float32)
    n = length or len(args)
    return T.vector(n, dtype)(*args) if args else T.vector(n, dtype)()


def _generic_matrix(*args, shape, dtype=None):
    dtype = dtype or (T.scalar_from_numpy(np.asarray(args[0]).dtype) if args and not isinstance(args[0], float)
                      else T.float32)
    return T.matrix(shape, dtype)(*args) if args else T.matrix(shape, dtype)()


# ---------------------------------------------------------------------------------------------
# the stand-in for ``xsim`` inside kernels


class _Shim(pytypes.SimpleNamespace):
    pass


def _unary(f):
    return lambda x: f(x)


def _atomic(op):
    def atomic(arr, *args):
        *idx, value = args
        idx = tuple(int(i) for i in idx)
        old = val(arr[idx] if len(idx) > 1 else arr[idx[0]])
        new = op(old, value)
        if len(idx) > 1:
            arr[idx] = new
        else:
            arr[idx[0]] = new
        return old
    return atomic


def _where(c, a, b):
    return a if c else b


def _vec_op(f):
    return lambda *a: f(*[np.asarray(x) for x in a])


def _like(v, result):
    return type(v)._wrap(result) if isinstance(v, T._Composite) else result


def _make_shim(state) -> _Shim:
    s = _Shim()
    for name in dir(xsim):
        obj = getattr(xsim, name)
        if isinstance(obj, type) or name in ("struct", "func", "kernel"):
            setattr(s, name, obj)
    s.types = T
    s.vector, s.matrix = _generic_vector, _generic_matrix
    s.tid = lambda: state["tid"]
    for f in ("sin", "cos", "tan", "arcsin", "arccos", "arctan", "sqrt", "exp", "log", "floor", "ceil",
              "tanh", "sinh", "cosh"):
        setattr(s, {"arcsin": "asin", "arccos": "acos", "arctan": "atan"}.get(f, f), _unary(getattr(np, f)))
    s.atan2 = np.arctan2
    s.pow = np.power
    s.abs = lambda x: _like(x, np.abs(np.asarray(x))) if isinstance(x, T._Composite) else abs(x)
    s.sign = lambda x: type(x)(np.sign(x))
    s.min = lambda a, b: b if b < a else a
    s.max = lambda a, b: b if b > a else a
    s.clamp = lambda x, lo, hi: s.min(s.max(x, lo), hi)
    s.where = _where
    s.dot = lambda a, b: np.asarray(a)[0].dtype.type(np.dot(np.asarray(a), np.asarray(b)))
    s.cross = lambda a, b: type(a)._wrap(np.cross(np.asarray(a), np.asarray(b)))
    s.length = lambda a: np.asarray(a).dtype.type(np.sqrt(np.dot(np.asarray(a), np.asarray(a))))
    s.length_sq = lambda a: np.asarray(a).dtype.type(np.dot(np.asarray(a), np.asarray(a)))
    s.cw_mul = lambda a, b: type(a)._wrap(np.asarray(a) * np.asarray(b))
    s.transpose = lambda m: type(m)._wrap(np.asarray(m).T.copy())
    s.trace = lambda m: np.asarray(m).dtype.type(np.trace(np.asarray(m)))
    s.atomic_add = _atomic(lambda a, b: a + b)
    s.atomic_sub = _atomic(lambda a, b: a - b)
    s.atomic_min = _atomic(lambda a, b: b if b < a else a)
    s.atomic_max = _atomic(lambda a, b: b if b > a else a)
    return s


# ---------------------------------------------------------------------------------------------
# source rewriting


_OPS = {ast.Div: "div", ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Mult: "mul"}


class _Rewrite(ast.NodeTransformer):
    """Routes ``/ // %`` through the Warp-rule helpers, copies on assignment, drops annotations."""

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.decorator_list = []
        node.returns = None
        copies = []
        for a in node.args.args:
            a.annotation = None
            copies.append(ast.parse(f"{a.arg} = __ref.val({a.arg})").body[0])
        node.body = copies + node.body
        return node

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return ast.Call(ast.Attribute(ast.Name("__ref", ast.Load()), "index", ast.Load()), [node.value, node.slice], [])

    def visit_BinOp(self, node):
        self.generic_visit(node)
        op = _OPS.get(type(node.op))
        if op is None:
            return node
        return ast.Call(ast.Attribute(ast.Name("__ref", ast.Load()), op, ast.Load()), [node.left, node.right], [])

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if type(node.op) not in _OPS:
            if isinstance(node.target, ast.Name):
                return self._copy_assign(node.target, ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op,
                                                                 node.value))
            return node
        load = copy.deepcopy(node.target)
        for n in ast.walk(load):
            if hasattr(n, "ctx"):
                n.ctx = ast.Load()
        return ast.Assign([node.target], self.visit_BinOp(ast.BinOp(load, node.op, node.value)))

    def visit_Assign(self, node):
        self.generic_visit(node)
        return self._copy_assign(node.targets[0], node.value) if len(node.targets) == 1 else node

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        return self._copy_assign(node.target, ast.Call(node.annotation, [node.value], []))

    @staticmethod
    def _copy_assign(target, value):
        call = ast.Call(ast.Attribute(ast.Name("__ref", ast.Load()), "val", ast.Load()), [value], [])
        return ast.Assign([target], call)


class Reference:
    """Runs kernels' Python sources on the host."""

    def __init__(self):
        self.state = {"tid": np.int32(0)}
        self.shim = _make_shim(self.state)
        self.compiled: dict = {}

    def _namespace(self, pyfunc) -> dict:
        ns = {}
        for name, obj in list(pyfunc.__globals__.items()) + self._closure(pyfunc):
            if obj is xsim:
                obj = self.shim
            elif isinstance(obj, Function):
                obj = self._func(obj)
            elif isinstance(obj, BuiltinRef):
                obj = getattr(self.shim, obj.name)
            ns[name] = obj
        ns["__ref"] = _Helpers
        ns["range"] = _range
        ns["float"] = np.float32
        ns["int"] = lambda x: np.int32(np.trunc(x)) if not _is_int(x) else _wrap(int(x), np.int32)
        ns["min"], ns["max"], ns["abs"] = self.shim.min, self.shim.max, self.shim.abs
        ns["len"] = len
        return ns

    @staticmethod
    def _closure(pyfunc):
        if not pyfunc.__closure__:
            return []
        out = []
        for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
            try:
                out.append((name, cell.cell_contents))
            except ValueError:
                pass
        return out

    def python(self, pyfunc):
        """``pyfunc`` rewritten and executed in the stand-in namespace."""
        got = self.compiled.get(pyfunc)
        if got is None:
            tree = ast.parse(textwrap.dedent(inspect.getsource(pyfunc)))
            tree = ast.fix_missing_locations(_Rewrite().visit(tree))
            ns = self._namespace(pyfunc)
            exec(compile(tree, inspect.getsourcefile(pyfunc) or "<kernel>", "exec"), ns)
            got = self.compiled[pyfunc] = ns[tree.body[0].name]  # __name__ may have been renamed
        return got

    def _func(self, fn: Function):
        def call(*args):
            for o in reversed(fn.overloads):
                if _matches(o.pyfunc, args):
                    return self.python(o.pyfunc)(*args)
            raise TypeError(f"no overload of {fn.key} for {args!r}")
        return call

    def run(self, kernel, dim, args: list) -> None:
        """Run ``kernel`` over ``dim`` threads; array arguments (numpy) are updated in place."""
        params = inspect.signature(kernel.pyfunc).parameters
        ann = xsim.kernels.scope.annotations(kernel.pyfunc)
        host = []
        for name, a in zip(params, args):
            t = T.resolve(ann[name])
            if isinstance(t, T.ArrayType):
                dt = t.dtype
                host.append(_StructArray(a, dt) if T.is_struct(dt) else _CompositeArray(a, dt)
                            if T.is_composite(dt) else a)
            elif T.is_scalar(t):
                host.append(t._np.type(a))
            else:
                host.append(val(a))
        fn = self.python(kernel.pyfunc)
        shape = (dim,) if isinstance(dim, int) else tuple(dim)
        with np.errstate(all="ignore"):
            for idx in np.ndindex(*shape):
                self.state["tid"] = np.int32(idx[0]) if len(idx) == 1 else tuple(np.int32(i) for i in idx)
                fn(*[h for h in host])


class _Helpers:
    div, floordiv, mod, mul, index, val = (staticmethod(f) for f in (div, floordiv, mod, mul, index, val))


def _range(*args):
    strong = next((type(a) for a in args if isinstance(a, np.integer)), np.int32)
    return (strong(v) for v in range(*[int(a) for a in args]))


def _matches(pyfunc, args) -> bool:
    ann = xsim.kernels.scope.annotations(pyfunc)
    for name, v in zip(inspect.signature(pyfunc).parameters, args):
        if name not in ann:
            continue
        t = T.resolve(ann[name])
        if isinstance(t, T.ArrayType):
            data = v.data if isinstance(v, _CompositeArray) else v
            if not isinstance(data, np.ndarray):
                return False
            continue
        if T.is_scalar(t):
            if isinstance(v, np.generic) and v.dtype != t._np:
                return False
        elif not isinstance(v, t):
            return False
    return True


def run(kernel, dim, args: list) -> None:
    """Run ``kernel`` on the host (see the module docstring); numpy array arguments are updated in place."""
    Reference().run(kernel, dim, args)
