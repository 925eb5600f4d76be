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
- atomics return the old value (threads run one after another, so they are exact);
- builtins are computed from their definitions (BUILTINS, in tests/reference_values.py with the host
  values: float math in float64 rounded once to the argument's type, quaternions and transforms with numpy, Warp's documented corner cases such as the
  clamped argument of asin/acos and round's halfway cases away from zero). Where xsim documents a choice
  of its own it is followed and named: normalize(0) == 0, the inverse of a
  singular matrix is 0.

``assert_matches_reference`` / ``reference_differences`` launch a kernel on xsim and on the reference
from the same arguments and compare every array; ``checked_launches`` does it for every ``xsim.launch``
in a block (tests/conftest.py wraps every test in it). It is a test utility, not part of xsim: it
knows only what the tests use.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import inspect
import textwrap
import threading
import types as pytypes

import numpy as np
from reference_values import (
    BUILTINS,
    SAMPLERS,
    IndexedData,
    _Array,
    _CompositeArray,
    _curlnoise,
    _generic_matrix,
    _generic_vector,
    _is_int,
    _max,
    _min,
    _perlin,
    _rand_init,
    _Record,
    _StructArray,
    _wrap,
    compare,
    div,
    draw,
    dtype_of,
    floordiv,
    index,
    loop_default,
    mod,
    mul,
    power,
    setattr_,
    struct_ctor,
    unpack,
    val,
)

import xsim
from xsim import types as T
from xsim.kernels.builtins import ARG_NAMES
from xsim.kernels.kernel import Function
from xsim.kernels.scope import BuiltinRef, copy_tree, source_lines

# ---------------------------------------------------------------------------------------------
# the stand-in for ``xsim`` inside kernels


class _Shim(pytypes.SimpleNamespace):
    def __getattr__(self, name):
        raise ReferenceUnsupported(f"the reference lacks xsim.{name}")


def _add_record(dst, src) -> None:
    """Adds every leaf field of the struct record ``src`` into ``dst`` (an atomic add of a whole struct)."""
    for f in dst.dtype.names:
        if dst.dtype[f].names:
            _add_record(dst[f], src[f])
        else:
            dst[f] = dst[f] + src[f]


def _atomic(op):
    def atomic(arr, *args):
        *idx, value = args
        idx = tuple(int(i) for i in idx)
        if isinstance(value, _Record):
            rec = arr.data[idx]
            old = rec.copy()
            _add_record(rec, value._rec)
            return _Record(old, arr.dtype)
        old = val(arr[idx] if len(idx) > 1 else arr[idx[0]])
        new = op(old, value)
        if len(idx) > 1:
            arr[idx] = new
        else:
            arr[idx[0]] = new
        return old
    return atomic


def _by_keyword(name, f):
    """Builtin ``f`` also callable with Warp's parameter names as keywords."""
    names = ARG_NAMES.get(name)
    if names is None:
        return f

    def call(*args, **kw):
        return f(*args, *(kw[n] for n in names[len(args):] if n in kw))
    return call


def _dtype_of(args, dtype):
    """A generic constructor's scalar type: ``dtype``, else that of its first typed argument, else float32."""
    if dtype is not None:
        return T.resolve(dtype)
    for a in args:
        if isinstance(a, np.generic):
            return T.scalar_from_numpy(a.dtype)
        if hasattr(type(a), "_scalar"):
            return type(a)._scalar
    return T.float32


def _transformation(*args, p=None, q=None, dtype=None):
    """Warp's ``transformation(p, q, dtype=...)`` in a kernel: a transform value."""
    args = [*args, *(a for a in (p, q) if a is not None)]
    return T.transformation(_dtype_of(args, dtype))(*args)


def _quaternion(*args, dtype=None):
    """Warp's ``quaternion(x, y, z, w)``, ``quaternion(ijk, real)``, ``quaternion(q, dtype=...)`` in a kernel."""
    return T.quaternion(_dtype_of(args, dtype))(*args)


def _atomic_cas(arr, *args):
    *idx, compare, value = args
    return _atomic(lambda old, v: v if old == compare else old)(arr, *idx, value)


def _make_shim(state) -> _Shim:
    s = _Shim()
    for name in dir(xsim):
        obj = getattr(xsim, name)
        if isinstance(obj, (type, float)) or name in ("struct", "func", "kernel"):  # float: xsim.pi...
            setattr(s, name, obj)
    s.types = _Shim(**{n: getattr(T, n) for n in dir(T) if not n.startswith("__")})
    s.types.vector, s.types.matrix = _generic_vector, _generic_matrix  # in a kernel: value constructors
    s.vector, s.matrix = _generic_vector, _generic_matrix
    s.tid = lambda: state.tid
    for name, f in BUILTINS.items():
        setattr(s, name, _by_keyword(name, f))
    for name in ("pi", "e", "tau", "inf", "nan", "half_pi", "phi", "log2e", "log10e", "ln2", "ln10"):
        setattr(s, name, getattr(xsim, name))
    s.transformation = s.types.transformation = _transformation
    s.quaternion = s.types.quaternion = _quaternion
    s.float, s.int = (lambda x: T.float32(float(x))), (lambda x: T.int32(int(x)))  # Warp's casts xsim.float(x)
    s.rand_init = _rand_init
    s.noise = lambda state, x: _perlin(state, x)
    s.pnoise = lambda state, x, *periods: _perlin(state, x, periods)
    s.curlnoise = _curlnoise
    s.atomic_add = _atomic(lambda a, b: a + b)
    s.atomic_sub = _atomic(lambda a, b: a - b)
    s.atomic_min = _atomic(_min)
    s.atomic_max = _atomic(_max)
    s.atomic_and = _atomic(lambda a, b: a & b)
    s.atomic_or = _atomic(lambda a, b: a | b)
    s.atomic_xor = _atomic(lambda a, b: a ^ b)
    s.atomic_exch = _atomic(lambda a, b: b)
    s.atomic_cas = _atomic_cas
    s.zeros = _stack_array
    s.tile_load, s.tile_store, s.tile_atomic_add = _tile_load, _tile_store, _tile_atomic_add
    s.tile, s.tile_sum, s.tile_transpose = _tile, _tile_sum, _tile_transpose
    s.tile_fft, s.tile_ifft = (lambda t: _tile_dft(t, -1)), (lambda t: _tile_dft(t, 1))
    return s


def _stack_array(shape, dtype):
    """``zeros(shape, dtype)`` in a kernel: a fresh zeroed array of the thread's own (the host layer lays out
    its elements, as it does for the arrays a launch is given)."""
    shape = tuple(int(n) for n in shape) if isinstance(shape, tuple) else (int(shape),)
    if not (isinstance(dtype, type) and T.is_value_type(dtype)):
        dtype = type(dtype(0))  # the reference's own float/int (a cast), or a numpy scalar type
    t = T.scalar_from_numpy(np.dtype(dtype)) if issubclass(dtype, np.generic) else T.resolve(dtype)
    return _host_array(xsim.zeros(shape, dtype=t, device="cpu").numpy().copy(), T.ArrayType(t, len(shape)))


# ---------------------------------------------------------------------------------------------
# tiles, one thread per block (xsim/kernels/builtins_tile.py): numpy blocks of element values


class _RefTile:
    """A tile: ``values`` of the tile's shape followed by its element's component shape, of element type ``dtype``."""

    def __init__(self, values: np.ndarray, dtype):
        self.values, self.dtype = values, dtype


def _tile_window(a, shape, offset):
    """(tile index, array index) of each tile element that lies inside array ``a``."""
    offset = (0,) * a.ndim if offset is None else (offset,) if np.ndim(offset) == 0 else tuple(offset)
    for idx in np.ndindex(*shape):
        src = tuple(int(o) + i for o, i in zip(offset, idx))
        if all(0 <= k < n for k, n in zip(src, a.data.shape)):
            yield idx, src


def _tile_load(a, shape, offset=None, storage=None, bounds_check=None, aligned=None):
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    out = np.zeros(shape + a.data.shape[a.ndim:], a.data.dtype)
    for idx, src in _tile_window(a, shape, offset):
        out[idx] = a.data[src]
    return _RefTile(out, a.dtype)


def _tile_store(a, t, offset=None, bounds_check=None):
    for idx, src in _tile_window(a, t.values.shape[:a.ndim], offset):
        a.data[src] = t.values[idx]


def _tile_atomic_add(a, t, offset=None, bounds_check=None):
    old = np.zeros_like(t.values)
    for idx, src in _tile_window(a, t.values.shape[:a.ndim], offset):
        old[idx] = a.data[src]
        a.data[src] = a.data[src] + t.values[idx]
    return _RefTile(old, t.dtype)


def _tile(x, preserve_type=False):
    v = np.asarray(x)
    if v.ndim and not preserve_type:  # a vector's components down one column
        return _RefTile(v.reshape(-1, 1), T.scalar_from_numpy(v.dtype))
    return _RefTile(v[None], type(x) if v.ndim else T.scalar_from_numpy(v.dtype))


def _tile_sum(t):
    ndim = t.values.ndim - (1 if T.is_vector(t.dtype) else 0)  # the tile's own dimensions, before the components
    flat = t.values.reshape((-1, *t.values.shape[ndim:]))
    total = flat[0].copy()
    for e in flat[1:]:  # in row-major order, rounding at each add as the thread does
        total = total + e
    return _RefTile(total[None], t.dtype)


def _tile_transpose(t):
    return _RefTile(np.swapaxes(t.values, 0, 1).copy(), t.dtype)


def _tile_dft(t, sign: int):
    """Each row's unnormalized DFT from its definition, y_k = sum_j x_j exp(sign 2 pi i j k / n), in float64."""
    n = t.values.shape[1]
    x = t.values[..., 0].astype(np.float64) + 1j * t.values[..., 1].astype(np.float64)
    jk = np.outer(np.arange(n), np.arange(n)) % n
    y = x @ np.exp(sign * 2j * np.pi * jk / n)
    return _RefTile(np.stack([y.real, y.imag], axis=-1).astype(t.values.dtype), t.dtype)


# ---------------------------------------------------------------------------------------------
# source rewriting


_ATOMIC_AUGOPS = (ast.Add, ast.Sub, ast.BitAnd, ast.BitOr, ast.BitXor)
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_OPS = {ast.Div: "div", ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Mult: "mul", ast.Pow: "power"}


class _Rewrite(ast.NodeTransformer):
    """Routes ``/ // % * **`` through the Warp-rule helpers, copies on assignment, drops annotations."""

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

    def visit_Call(self, node):
        """A sampler call on a local state ``s``: ``(__draw := draw(name, s, ...), s := __draw[1], __draw[0])[2]``."""
        self.generic_visit(node)
        name = _called(node)
        if name not in SAMPLERS or not node.args or not isinstance(node.args[0], ast.Name):
            return node
        state = node.args[0].id
        value = ast.parse(f"(__draw := __ref.draw({name!r}, {state}), {state} := __draw[1], __draw[0])[2]",
                          mode="eval").body
        value.value.elts[0].value.args += node.args[1:]
        return value

    def visit_Expr(self, node):
        """Warp's output-argument forms as assignments: ``svd3(A, U, s, V)`` -> ``U, s, V = svd3(A)``,
        ``transform_set_translation(t, p)`` -> ``t = transform_set_translation(t, p)``."""
        self.generic_visit(node)
        call = node.value
        name = _called(call) if isinstance(call, ast.Call) else None
        if name in _SETTERS:
            targets = call.args[:1]
        elif name in OUTPUT_FORMS and len(call.args) > 1:
            targets, call.args = call.args[1:], call.args[:1]
        else:
            return node
        if all(isinstance(t, ast.Name) for t in targets):
            store = [ast.Name(t.id, ast.Store()) for t in targets]
            return ast.Assign([store[0] if len(store) == 1 else ast.Tuple(store, ast.Store())], call)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr != "dtype" or not isinstance(node.ctx, ast.Load):
            return node
        return ast.Call(ast.Attribute(ast.Name("__ref", ast.Load()), "dtype_of", ast.Load()), [node.value], [])

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

    def visit_Compare(self, node):
        """A single comparison as Warp makes it (``compare``: an integer against a float takes the float's
        type); a chain keeps Python's, which evaluates each operand once and stops at the first false link."""
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in _CMPOPS:
            return node
        return _ref_call("compare", [ast.Constant(_CMPOPS[type(node.ops[0])]), node.left, node.comparators[0]])

    def visit_AugAssign(self, node):
        """``t op= v``. ``+= -= &= |= ^=`` into an element or a component (``y[i] += v``, ``y[i].x -= v``)
        evaluate ``v`` first and read the target after it, as the atomic update xsim and Warp make of them: a
        func in ``v`` that writes ``y[i]`` is seen (Python would read ``y[i]`` before the call)."""
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name) and type(node.op) in _ATOMIC_AUGOPS:
            tmp = f"__aug{id(node)}"
            first = ast.Assign([ast.Name(tmp, ast.Store())], node.value)
            node.value = ast.Name(tmp, ast.Load())
            rest = self._aug_assign(node)
            return [first, *(rest if isinstance(rest, list) else [rest])]
        return self._aug_assign(node)

    def _aug_assign(self, node):
        if isinstance(node.target, ast.Attribute):  # o.f op= v -> setattr_(o, "f", o.f op v)
            load = copy.deepcopy(node.target)
            load.ctx = ast.Load()
            return self.visit_Assign(ast.Assign([node.target], self.visit_BinOp(ast.BinOp(load, node.op, node.value))))
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
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            t = node.targets[0]
            return ast.Expr(_ref_call("setattr_", [t.value, ast.Constant(t.attr), _ref_call("val", [node.value])]))
        return self._copy_assign(node.targets[0], node.value) if len(node.targets) == 1 else node

    def visit_Starred(self, node):
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load):
            node.value = _ref_call("unpack", [node.value])
        return node

    def visit_For(self, node):
        """``k = loop_default(locals(), "k")`` before ``for k in ...``: a loop that does not run leaves k
        as it was, or 0."""
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        name = node.target.id
        pre = ast.parse(f"{name} = __ref.loop_default(locals(), {name!r})").body[0]
        return [pre, node]

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        return self._copy_assign(node.target, ast.Call(node.annotation, [node.value], []))

    @staticmethod
    def _copy_assign(target, value):
        call = ast.Call(ast.Attribute(ast.Name("__ref", ast.Load()), "val", ast.Load()), [value], [])
        return ast.Assign([target], call)


def _ref_call(name: str, args: list) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name("__ref", ast.Load()), name, ast.Load()), args, [])


def _called(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


_SETTERS = {"transform_set_translation", "transform_set_rotation", "tile_fft", "tile_ifft"}
# ``svd3(A, U, sigma, V)``: factors into the variables (one input)
OUTPUT_FORMS = {"svd2", "svd3", "qr3", "eig3", "quat_to_axis_angle"}


class Reference:
    """Runs kernels' Python sources on the host."""

    def __init__(self):
        self.state = threading.local()  # the thread id of the kernel thread being run, per host thread
        self.shim = _make_shim(self.state)
        self.shim.static = lambda x: self._func(x) if isinstance(x, Function) else x  # static(funcs[k])
        self.compiled: dict = {}

    def _namespace(self, pyfunc) -> dict:
        # xsim's builtins, library funcs and types by their bare names (a kernel may name them so, as in
        # Warp); the kernel's own globals come after and win
        ns = {n: self._func(o) for n, o in vars(xsim).items() if isinstance(o, Function)}
        ns.update(vars(self.shim))
        for name, obj in list(pyfunc.__globals__.items()) + self._closure(pyfunc):
            if obj is xsim:
                obj = self.shim
            elif isinstance(obj, pytypes.SimpleNamespace) and any(v is xsim for v in vars(obj).values()):
                obj = pytypes.SimpleNamespace(**{k: self.shim if v is xsim else v for k, v in vars(obj).items()})
            elif isinstance(obj, Function):
                obj = self._func(obj)
            elif isinstance(obj, BuiltinRef):
                obj = getattr(self.shim, obj.name)
            elif isinstance(obj, type) and issubclass(obj, T._StructBase):
                obj = struct_ctor(obj)
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
            ns = self._namespace(pyfunc)
            transformed = getattr(pyfunc, "__xsim_transformed__", None)  # a Kernel's code_transformers ran
            if transformed is not None:
                tree = ast.Module([_bind_transformed(pyfunc, copy_tree(transformed), ns, self._func)], [])
            else:
                first = pyfunc.__code__.co_firstlineno
                lines = inspect.getblock(source_lines(pyfunc)[first - 1:])
                tree = ast.parse(textwrap.dedent("".join(lines)))
            tree = ast.fix_missing_locations(_Rewrite().visit(tree))
            exec(compile(tree, inspect.getsourcefile(pyfunc) or "<kernel>", "exec"), ns)  # noqa: S102 - the point
            got = self.compiled[pyfunc] = ns[tree.body[0].name]  # __name__ may have been renamed
        return got

    def _func(self, fn: Function):
        def call(*args):
            # the closest definition: one whose annotations all fit exactly, else one with generic parameters
            for concrete in (True, False):
                for o in reversed(fn.overloads):
                    if _matches(o.pyfunc, args, concrete):
                        return self.python(o.pyfunc)(*args)
            raise TypeError(f"no overload of {fn.key} for {args!r}")
        return call

    def run(self, kernel, dim, args: list) -> None:
        """Run ``kernel`` over ``dim`` threads; array arguments (numpy, or struct values holding numpy
        arrays) are updated in place."""
        kernel = kernel.specialize(list(args))
        host = [_host_value(t, a) for (_, t), a in zip(kernel.params, args)]
        fn = self.python(kernel.pyfunc)
        shape = (int(dim),) if np.ndim(dim) == 0 else tuple(int(d) for d in dim)
        n = _tid_count(kernel.pyfunc) or len(shape)
        with np.errstate(all="ignore"):
            for linear in range(int(np.prod(shape))):
                idx = []  # xsim's tid() of n components: the linear index over the first n dimensions
                for d in reversed(range(n)):
                    idx.insert(0, linear % shape[d] if d < len(shape) else 0)
                    linear //= shape[d] if d < len(shape) else 1
                self.state.tid = np.int32(idx[0]) if n == 1 else tuple(np.int32(i) for i in idx)
                fn(*host)


def _tid_count(pyfunc) -> int | None:
    """How many components the kernel unpacks ``tid()`` into (``i, j = wp.tid()``: 2), or None where it does
    not say (no such assignment)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(pyfunc)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _called(node.value) == "tid":
            target = node.targets[0]
            return len(target.elts) if isinstance(target, ast.Tuple) else None
    return None


def _host_array(data, t: T.ArrayType):
    cls = _StructArray if T.is_struct(t.dtype) else _CompositeArray if T.is_composite(t.dtype) else _Array
    return cls(data, t.dtype, t.ndim)


def _host_value(t, a):
    if isinstance(t, T.ArrayType):
        return _host_array(a, t)
    if T.is_scalar(t):
        return t._np.type(a)
    if T.is_composite(t) and not isinstance(a, t):
        return t(*a) if isinstance(a, (tuple, list)) else t(a)
    if T.is_struct(t):
        out = copy.copy(a)
        for f, ft in t._fields.items():
            v = getattr(a, f)
            object.__setattr__(out, f, _host_array(v, ft) if isinstance(ft, T.ArrayType) else
                               _host_value(ft, v))
        return out
    return val(a)


# ---------------------------------------------------------------------------------------------
# checking launches against the reference


def _bind_transformed(pyfunc, tree, ns: dict, stand_in):
    """A code transformer's ``tree`` of ``pyfunc`` with each static call resolved at declaration replaced by
    its value (a transformer may place one call in several spots, each with its own value) and each callee
    bound to a func (``warp_func``) replaced by the func's ``stand_in``, both under fresh names in ``ns``."""
    statics = xsim.kernels.static.table(pyfunc)
    values = statics.values if statics is not None else {}

    def name_for(value, node):
        name = f"__bound_{len(ns)}__"
        ns[name] = value
        return ast.copy_location(ast.Name(name, ast.Load()), node)

    class Bind(ast.NodeTransformer):
        def visit_Call(self, node):
            k = xsim.kernels.static.key(node)
            if k in values:
                v = values[k]
                return name_for(stand_in(v) if isinstance(v, Function) else v, node)
            self.generic_visit(node)
            if hasattr(node.func, "warp_func"):
                node.func = name_for(stand_in(node.func.warp_func), node.func)
            return node

    return Bind().visit(tree)


class ReferenceUnsupported(Exception):
    """The reference could not run a kernel (a feature it lacks): the message names the kernel."""


def _numpy_of(a) -> np.ndarray:
    if isinstance(a, xsim.array):
        return a.numpy()
    if isinstance(a, np.ndarray):
        return a
    return a.detach().cpu().numpy()  # a torch tensor


def _is_array(a) -> bool:
    return isinstance(a, (xsim.array, np.ndarray)) or type(a).__module__ == "torch"


def _snapshot(params, values):
    """Host copies of the launch arguments (one copy per distinct array, so that an array passed twice
    stays one array), and the (label, device array, host copy) pairs to compare after the launch."""
    copies: dict[int, np.ndarray] = {}
    pairs = []

    def copy_of(label, a):
        if isinstance(a, xsim.indexedarray):  # a copy of its data, seen through its index arrays
            return IndexedData(copy_of(label, a.data), [None if ix is None else ix.numpy() for ix in a.indices])
        if a is None or not _is_array(a):
            return a
        if id(a) not in copies:
            copies[id(a)] = np.array(_numpy_of(a), copy=True)
            pairs.append((label, a, copies[id(a)]))
        return copies[id(a)]

    def struct_copy(label, t, v):
        """A shallow copy of struct ``v`` whose arrays, at any depth of nesting, are host copies."""
        s = copy.copy(v)
        for f, ft in t._fields.items():
            fv = getattr(v, f)
            if isinstance(ft, T.ArrayType):
                object.__setattr__(s, f, copy_of(f"{label}.{f}", fv))
            elif T.is_struct(ft) and ft._has_arrays and fv is not None:
                object.__setattr__(s, f, struct_copy(f"{label}.{f}", ft, fv))
        return s

    host = []
    for (name, t), v in zip(params, values):
        if getattr(getattr(t, "dtype", t), "_scalar", None) is T.bfloat16:  # numpy has no bfloat16 arithmetic
            raise ReferenceUnsupported(f"parameter '{name}' holds bfloat16, which numpy cannot compute in")
        host.append(struct_copy(name, t, v) if T.is_struct(t) and t._has_arrays and v is not None
                    else copy_of(name, v))
    return host, pairs


TOLERANCE = {np.dtype(np.float64): 1e-10, np.dtype(np.float32): 2e-5, np.dtype(np.float16): 5e-3}  # float16: a few ulps of chains


def _leaf_fields(dtype, prefix=()) -> list:
    """The paths of a structured dtype's scalar/array fields (nested structs flattened); [None] if plain."""
    if not dtype.names:
        return [prefix or None]
    return [p for n in dtype.names for p in _leaf_fields(dtype[n], (*prefix, n))]


def _field(a, path):
    for n in path:
        a = a[n]
    return a


def _differences(pairs, rtol=None) -> list[str]:
    out = []
    for label, a, want in pairs:
        got = _numpy_of(a)
        for f in _leaf_fields(want.dtype):
            g, w = (got, want) if f is None else (_field(got, f), _field(want, f))
            name = label if f is None else ".".join((label, *f))
            if w.dtype.kind in "iub":
                bad = g != w
            else:
                tol = rtol if rtol is not None else TOLERANCE.get(w.dtype, 2e-5)
                finite = np.isfinite(w)
                scale = max(1.0, float(np.max(np.abs(w[finite]), initial=0.0)))
                with np.errstate(invalid="ignore"):
                    bad = ~((np.abs(g - w) <= tol * scale) | (g == w) | (np.isnan(g) & np.isnan(w)))
            if np.any(bad):
                at = np.argwhere(bad)[:3].tolist()
                out.append(f"'{name}' differs at {np.count_nonzero(bad)} of {w.size} components, e.g. at "
                           f"{at}: xsim {[g[tuple(i)].tolist() for i in at]}, reference "
                           f"{[w[tuple(i)].tolist() for i in at]}")
    return out


def _run_checked(launch, kernel, dim, inputs, outputs, rtol, kw):
    """Launch with ``launch`` and run the reference on copies of the arguments taken before it; the
    differences (empty when every array argument agrees). ReferenceUnsupported when the reference fails."""
    values = [*inputs, *outputs]
    try:
        spec = kernel.specialize(values)
        host, pairs = _snapshot(spec.params, values)
    except Exception as e:
        launch(kernel, dim, inputs=inputs, outputs=outputs, **kw)
        raise ReferenceUnsupported(f"{kernel.key}: its arguments cannot be copied to the host: {e}") from e
    launch(kernel, dim, inputs=inputs, outputs=outputs, **kw)
    try:
        _REFERENCE.run(spec, dim, host)
    except Exception as e:
        raise ReferenceUnsupported(f"{kernel.key}: the reference cannot run it: {type(e).__name__}: {e}") from e
    return _differences(pairs, rtol)


def reference_differences(kernel, dim, inputs, outputs=(), rtol=None, **launch_kw) -> list[str]:
    """Launch ``kernel`` on xsim and run its source on the reference from the same arguments; how the
    array arguments differ afterwards (integers must agree exactly, floats to ``rtol`` times
    max(1, max |reference|), by default TOLERANCE for their dtype). Empty when they agree."""
    diffs = _run_checked(xsim.kernels.launch.launch, kernel, dim, inputs, outputs, rtol, launch_kw)
    SESSION.add(kernel)
    return diffs


def assert_matches_reference(kernel, dim, inputs, outputs=(), rtol=None, **launch_kw) -> None:
    """reference_differences must be empty."""
    diffs = reference_differences(kernel, dim, inputs, outputs, rtol, **launch_kw)
    assert not diffs, f"kernel {kernel.key} (dim {dim}) disagrees with the host reference:\n" + "\n".join(diffs)


def _is_library(kernel) -> bool:
    return kernel.pyfunc.__module__.split(".")[0] == "xsim"


class LaunchChecker:
    """Counts of the launches checked against the reference, and the kernels it could not run."""

    def __init__(self):
        self.checked = 0
        self.kernels: set[str] = set()
        self.unsupported: dict[str, str] = {}

    def add(self, kernel):
        self.checked += 1
        self.kernels.add(f"{kernel.module_name}.{kernel.key}")
        if self is not SESSION:
            SESSION.add(kernel)


SESSION = LaunchChecker()  # every check of this test session (tests/conftest.py reports it)


@contextlib.contextmanager
def checked_launches(rtol=None, library: bool = True, skip: frozenset = frozenset()):
    """Within the block, every successful forward ``xsim.launch`` is also run by the reference and must
    agree (AssertionError at that launch); kernels the reference cannot run are collected in the
    yielded LaunchChecker's ``unsupported`` (the caller decides which it excuses). With
    ``library=False``, launches of xsim's own kernels (solver, kinematics, optimizers: checked by
    tests/solvers/test_kernels_match_reference.py) are left alone, so that a test's rollouts stay fast.
    Kernels named in ``skip`` are not run by the reference (listed in ``unsupported``)."""
    launch = xsim.launch
    checker = LaunchChecker()

    def checked(kernel, dim, inputs=(), outputs=(), **kw):
        if kw.get("adjoint") or not isinstance(kernel, xsim.Kernel) or not library and _is_library(kernel) or \
                xsim.is_capture_active():  # a captured launch runs later, at capture_launch
            return launch(kernel, dim, inputs=inputs, outputs=outputs, **kw)
        if kernel.key in skip:
            checker.unsupported.setdefault(kernel.key, f"{kernel.key}: skipped")
            return launch(kernel, dim, inputs=inputs, outputs=outputs, **kw)
        try:
            diffs = _run_checked(launch, kernel, dim, inputs, outputs, rtol, kw)
        except ReferenceUnsupported as e:
            checker.unsupported.setdefault(kernel.key, str(e))
            return None
        checker.add(kernel)
        assert not diffs, f"kernel {kernel.key} (dim {dim}) disagrees with the host reference:\n" + "\n".join(diffs)
        return None

    launch_tiled = xsim.launch_tiled

    def checked_tiled(kernel, dim, inputs=(), outputs=(), **kw):  # a block per thread: a trailing dimension of 1
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if not 1 <= len(dims) <= 3:
            return launch_tiled(kernel, dim, inputs=inputs, outputs=outputs, **kw)
        return checked(kernel, (*dims, 1), inputs=inputs, outputs=outputs, **kw)

    xsim.launch, xsim.launch_tiled = checked, checked_tiled
    try:
        yield checker
    finally:
        xsim.launch, xsim.launch_tiled = launch, launch_tiled


class _Helpers:
    div, floordiv, mod, mul, power, compare, index, val, dtype_of, draw, setattr_, loop_default, unpack = (
        staticmethod(f) for f in (div, floordiv, mod, mul, power, compare, index, val, dtype_of, draw, setattr_,
                                  loop_default, unpack))


def _range(*args):
    strong = next((type(a) for a in args if isinstance(a, np.integer)), np.int32)
    return [strong(v) for v in range(*[int(a) for a in args])]  # a list: reversed(range(...)) reverses it


def _matches(pyfunc, args, concrete: bool = False) -> bool:
    """Whether ``args`` fit ``pyfunc``'s annotations (with ``concrete``, only if none is generic or missing);
    a bare int literal fits integer types, a bare float literal float32."""
    ann = xsim.kernels.scope.annotations(pyfunc)
    for name, v in zip(inspect.signature(pyfunc).parameters, args):
        if name not in ann:
            if concrete:
                return False
            continue
        t = T.resolve(ann[name])
        if T.is_generic(t):
            if concrete:
                return False
            continue
        if isinstance(v, (int, float)) and not isinstance(v, (bool, np.generic)) and T.is_scalar(t):
            if (T.is_int(t) if isinstance(v, int) else t is T.float32):
                continue
            return False
        if isinstance(t, T.ArrayType):
            if not isinstance(v, _Array):
                return False
            continue
        if T.is_scalar(t):
            if isinstance(v, T._Composite) or isinstance(v, np.generic) and v.dtype != t._np:
                return False
        elif not isinstance(v, t):
            return False
    return True


_REFERENCE = Reference()  # one for the session: each kernel's and func's source is rewritten once


def run(kernel, dim, args: list) -> None:
    """Run ``kernel`` on the host (see the module docstring); numpy array arguments are updated in place."""
    _REFERENCE.run(kernel, dim, args)


# builtins of xsim with no host-computable answer: a kernel calling one is excused (and counted in
# LaunchChecker.unsupported), where any other failure of the reference fails its test
_UNIQUE_UP_TO_SIGNS = ("its factors are unique only up to sign flips of paired columns, so the reference cannot "
                       "predict xsim's; tests/kernels/test_linalg_decompositions.py checks the invariants against numpy")
_NATIVE_OBJECT = ("it reads an xsim.Mesh or xsim.HashGrid through its id, native memory the reference cannot "
                  "see; tests/kernels/test_geometry.py and test_mesh_get.py check it against numpy")
NOT_IMPLEMENTED = {"svd2": _UNIQUE_UP_TO_SIGNS, "svd3": _UNIQUE_UP_TO_SIGNS, "eig3": _UNIQUE_UP_TO_SIGNS}
NOT_IMPLEMENTED |= dict.fromkeys(
    ["mesh_query_point", "mesh_query_point_no_sign", "mesh_query_point_sign_normal",
     "mesh_query_point_sign_winding_number", "mesh_query_ray", "mesh_query_aabb", "mesh_query_aabb_next",
     "mesh_query_next", "mesh_eval_position", "mesh_eval_velocity", "hash_grid_query", "hash_grid_query_next",
     "hash_grid_point_id", "mesh_get"], _NATIVE_OBJECT)


def excused(message: str, exclusions: dict[str, str]) -> bool:
    """Whether a ReferenceUnsupported message names a kernel of ``exclusions`` or a NOT_IMPLEMENTED builtin."""
    kernel = message.split(":")[0]
    lacks = message.rsplit("the reference lacks xsim.", 1)
    return kernel in exclusions or len(lacks) == 2 and lacks[1].strip() in NOT_IMPLEMENTED


def every_launch_checked(exclusions: dict[str, str]):
    """The body of an autouse fixture: every launch of a test kernel is checked (checked_launches; xsim's
    own kernels are checked by tests/solvers/test_kernels_match_reference.py), and a kernel the reference
    cannot run fails the test unless ``exclusions`` (kernel name -> why) names it; the reference does not run
    the kernels it names."""
    with checked_launches(library=False, skip=frozenset(exclusions)) as checker:
        yield checker
    unexcused = {k: v for k, v in checker.unsupported.items() if not excused(v, exclusions)}
    assert not unexcused, "kernels the host reference cannot run (fix the reference or list them with a " \
        "reason in this folder's conftest.py):\n" + "\n".join(unexcused.values())
