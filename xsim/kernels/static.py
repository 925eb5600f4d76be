"""``xsim.static(expr)``: a Python expression evaluated once, at compile time, in the Python scope of
the kernel or func that contains it (its globals, closure variables and constant locals), whose
result stands in the kernel as a constant value, a func, a builtin or a type (Warp's ``wp.static``).

An expression that reads only the definition's globals and closure is evaluated when the kernel or
func is declared; one that reads a local (an unrolled loop's variable, a constant local) or a name
not yet defined is evaluated by the frontend where it meets it, with those locals' values. Every
result enters the content hash of the definition, so kernels differing only in a static value never
share compiled code.
"""

from __future__ import annotations

import ast
import copy
import enum
import types as _pytypes
from dataclasses import dataclass

import numpy as np

from .. import types as T
from ..errors import WarpCodegenError
from .ir import Var
from .scope import BuiltinRef, Ref, _Source

_NAME = "__xsim_static_{}__"


def static(expr):
    """In a kernel or func: ``expr`` evaluated at compile time in the definition's Python scope, used as a
    constant, a loop bound (``range(static(n))`` is unrolled), a condition (``if static(flag):`` keeps
    one branch) or a callee (``static(funcs[k])(x)``). In plain Python it is ``expr`` itself."""
    return expr


class StaticTable:
    """The ``static(...)`` calls of one function: results known at declaration, by call position
    (line, column in the function's source), and the deferred ones with the local names they read."""

    def __init__(self):
        self.values: dict[tuple, object] = {}
        self.deferred: dict[tuple, set[str]] = {}
        # names read only inside static calls: their values enter the hash through the results (hashing
        # the objects themselves would read their attributes again, e.g. a property with side effects)
        self.static_only: set[str] = set()
        # the deferred calls whose evaluation failed at declaration (not for a name defined later): a
        # kernel named by its content (module="unique") has no value to name them by, so it refuses them
        self.failures: dict[tuple, WarpCodegenError] = {}


def key(call: ast.Call) -> tuple[int, int, int, int, int]:
    """Where a call is in its function's source (``static(f)(x)`` starts where ``static(f)`` does), and which
    of the calls a code transformer put at that position it is."""
    return (call.lineno, call.col_offset, call.end_lineno, call.end_col_offset,
            getattr(call, "xsim_occurrence", 0))


def is_static_call(node, names: dict) -> bool:
    """Whether ``node`` is a call of ``xsim.static`` (by any name or attribute path that reaches it)."""
    if not isinstance(node, ast.Call):
        return False
    f, path = node.func, []
    while isinstance(f, ast.Attribute):
        path.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name) or f.id not in names:
        return False
    obj = names[f.id]
    for attr in reversed(path):
        if not isinstance(obj, (_pytypes.ModuleType, type)):
            return False  # no property getters run just to find out
        obj = getattr(obj, attr, None)
    return obj is static


def table(pyfunc) -> StaticTable | None:
    """The static calls of ``pyfunc`` (found, and the eager ones evaluated, on first use: its
    declaration), or None when it has none."""
    found = pyfunc.__dict__.get("__xsim_static__", False)
    if found is not False:
        return found
    tab = None
    try:
        src = _Source(pyfunc) if any("static" in n for n in _names(pyfunc.__code__)) else None  # cheap test first
    except OSError:  # no source: the frontend says so where it needs it
        src = None
    calls = [n for n in ast.walk(src.tree) if is_static_call(n, src.names)] if src is not None else []
    if calls:
        tab = _declare(src, calls)
    pyfunc.__xsim_static__ = tab
    return tab


def _names(code) -> set[str]:
    """The global, attribute and closure names a code object (and the code nested in it) uses."""
    out = set(code.co_names) | set(code.co_freevars)
    for c in code.co_consts:
        if isinstance(c, _pytypes.CodeType):
            out |= _names(c)
    return out


def _declare(src: _Source, calls: list[ast.Call]) -> StaticTable:
    tab = StaticTable()
    local = _local_names(src.tree)
    loops = _enclosing_loop_vars(src.tree)
    inside = {n.id for c in calls for n in ast.walk(c) if isinstance(n, ast.Name)}
    tab.static_only = inside - _names_outside(src.tree, {id(c) for c in calls})
    # innermost first: an outer expression uses the value of the static calls nested in it
    for call in sorted(calls, key=lambda c: sum(1 for _ in ast.walk(c))):
        k = key(call)
        if len(call.args) != 1 or call.keywords:
            tab.deferred[k] = set()  # refused where the frontend meets it
            continue
        # as Warp: deferred when it reads the variable of a loop around it, or a local the definition's scope
        # lacks; a local of the name of a global outside such a loop reads the global, here
        reads = {n.id for n in ast.walk(call.args[0]) if isinstance(n, ast.Name)} & local
        reads = reads & loops.get(id(call), set()) | reads - set(src.names)
        nested = [key(n) for n in ast.walk(call) if n is not call and isinstance(n, ast.Call) and key(n) in tab.deferred]
        if reads or nested:
            tab.deferred[k] = reads
            continue
        try:
            tab.values[k] = evaluate(src, call, src.names, tab.values.get)
        except _Undefined:
            # a name defined after the declaration: evaluated again at build
            tab.deferred[k] = set()
        except WarpCodegenError as e:
            # evaluated again at build, where the error refuses this kernel at its launch instead of failing
            # the import of its Python module
            tab.deferred[k] = set()
            tab.failures[k] = e
    return tab


class _Undefined(Exception):
    pass


def _argument(src: _Source, call: ast.Call):
    if len(call.args) != 1 or call.keywords:
        raise src.error(call, "xsim.static() takes one expression")
    return call.args[0]


def evaluate(src: _Source, call: ast.Call, names: dict, known, defer_undefined: bool = True,
             lengths: dict | None = None):
    """The value of the static call ``call`` evaluated in ``names``; nested static calls take their
    value from ``known(key)`` or are evaluated the same way, and ``len(x)`` of a local whose length
    its type fixes is ``lengths[x]``. A NameError raises ``_Undefined`` when ``defer_undefined`` (the
    name may be defined later), else a CompileError."""
    expr = _argument(src, call)
    scope = dict(names)
    lengths = lengths or {}

    class Nested(ast.NodeTransformer):
        def visit_Call(self, node):
            if isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1 and isinstance(
                    node.args[0], ast.Name) and node.args[0].id in lengths:
                return ast.copy_location(ast.Constant(lengths[node.args[0].id]), node)
            if node is call or not is_static_call(node, names):
                return self.generic_visit(node)
            value = known(key(node))
            if value is None:
                value = evaluate(src, node, names, known, defer_undefined, lengths)
            name = _NAME.format(len(scope))
            scope[name] = value
            return ast.copy_location(ast.Name(name, ast.Load()), node)

    tree = ast.fix_missing_locations(ast.Expression(Nested().visit(copy.deepcopy(expr))))
    try:
        value = eval(compile(tree, src.file, "eval"), scope)
    except NameError as e:
        if defer_undefined:
            raise _Undefined from e
        raise src.error(call, f"Error evaluating static expression: {e}. Make sure all variables used in the "
                              "static expression are constant.") from None
    except WarpCodegenError:
        raise
    except Exception as e:  # noqa: BLE001 - any error of the user's expression is reported the same way
        raise src.error(call, f"Error evaluating static expression: {e}") from None
    if isinstance(value, enum.Enum) and isinstance(value, int):
        value = int(value)
    try:
        check_result(value)
    except TypeError as e:
        raise src.error(call, f"Static expression returns an unsupported value: {e}") from None
    return value


class Definition:
    """A kernel's definition as Warp's ``kernel.adj`` shows it, the parts xsim has: its source, name and
    file, and its ``static()`` expressions resolved at declaration (by expression text) and whether some
    wait for the build (they read loop variables or constant locals)."""

    def __init__(self, pyfunc, kernel=None):
        self._kernel = kernel
        src = _Source(pyfunc)
        self.fun_name, self.filename = pyfunc.__name__, src.file
        self.source = "".join(src.lines)
        tab = table(pyfunc)
        texts = {key(c): ast.unparse(c.args[0]) for c in ast.walk(src.tree)
                 if is_static_call(c, src.names) and len(c.args) == 1}
        self.resolved_static_expressions = {texts[k]: v for k, v in (tab.values.items() if tab else ()) if k in texts}
        self.has_unresolved_static_expressions = bool(tab and tab.deferred)
        self._src = src

    def get_references(self) -> tuple[dict, dict, dict]:
        """(constants, types, functions) the body takes from outside it, as Warp's ``adj.get_references()``:
        constant values by name (``"cfg.n"`` for an attribute path), the value and struct types it names,
        and the user funcs it calls, directly or through a resolved ``static()`` (xsim's builtins and
        library funcs are not user funcs)."""
        from .kernel import _LIBRARY_MODULES, Function
        tree, names = self._src.tree, self._src.names
        local = {a.arg for a in ast.walk(tree.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        constants, types, functions = {}, {}, {}

        def note(path: str, obj):
            if isinstance(obj, Function):
                if obj.module not in _LIBRARY_MODULES:
                    functions[obj] = None
            elif isinstance(obj, type) and (T.is_value_type(obj) or T.is_struct(obj)):
                types[obj] = None
            elif isinstance(obj, (bool, int, float, np.generic)) or T.is_composite(type(obj)):
                constants[path] = obj

        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
                if node.id in names:
                    note(node.id, names[node.id])
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                path, base = [node.attr], node.value
                while isinstance(base, ast.Attribute):
                    path.insert(0, base.attr)
                    base = base.value
                if isinstance(base, ast.Name) and base.id not in local and base.id in names:
                    obj = names[base.id]
                    for part in path:
                        obj = getattr(obj, part, None)
                    note(".".join([base.id, *path]), obj)
        for value in self.resolved_static_expressions.values():
            if isinstance(value, Function):
                note("", value)
        return constants, types, functions

    @property
    def args(self) -> list[Arg]:
        """The kernel's parameters (Warp's ``adj.args``), each saying whether the kernel reads or writes it
        (an array, atomics included) as its last build found; both False before it is built."""
        k = self._kernel
        meta = None if k is None else next((b.metas[k.symbol] for b in k.module.builds.values()
                                            if k.symbol in b.metas), None)
        reads, writes = (set(meta.reads), set(meta.writes)) if meta is not None else (set(), set())
        return [Arg(n, t, n in reads, n in writes) for n, t in (k.params if k is not None else [])]


@dataclass(frozen=True)
class Arg:
    """One kernel parameter as Warp's ``adj.args`` lists it."""

    label: str
    type: object
    is_read: bool
    is_write: bool


_NO_ARRAY = "a Warp array cannot be created inside Warp kernels"  # (xsim's arrays are Warp's)


def check_result(value, path: str = "") -> None:
    """Refuse (TypeError) a static result a kernel cannot hold: None, arrays, arbitrary objects."""
    from ..array import array
    from .kernel import Function

    if value is None:
        raise TypeError("None is returned")
    if isinstance(value, array):
        raise TypeError(_NO_ARRAY + (f" at {path}" if path else ""))
    if isinstance(value, T._StructBase):
        for f, ft in value._fields.items():
            sub = f"{path or type(value).__name__}.{f}"
            try:
                if isinstance(ft, T.ArrayType):  # set or not (None), an array field has no constant value
                    raise TypeError(f"{_NO_ARRAY} at {sub}")
                check_result(getattr(value, f), sub)
            except TypeError as e:
                if path:
                    raise
                raise TypeError(f"the returned Warp struct contains a data type that cannot be constructed "
                                f"inside Warp kernels: {e}") from None
        return
    if isinstance(value, (bool, int, float, np.generic, str, Function, BuiltinRef)) or T.is_composite(
            type(value)) or (isinstance(value, type) and T.is_value_type(value)):
        return
    raise TypeError(f"value of type {type(value)} cannot be constructed inside kernels"
                     + (f" at {path}" if path else ""))


def fingerprint(pyfunc, hash_object) -> str:
    """What ``pyfunc``'s static calls contribute to its content hash: each eager result, and for the
    deferred ones the values of the globals they read (``hash_object(name, obj)`` hashes one)."""
    tab = table(pyfunc)
    if tab is None:
        return ""
    parts = [f"{k}={value_hash(v, hash_object)}" for k, v in sorted(tab.values.items(), key=lambda kv: kv[0])]
    if tab.deferred:
        src = _Source(pyfunc)
        for call in ast.walk(src.tree):
            if isinstance(call, ast.Call) and key(call) in tab.deferred and call.args:
                nodes = list(ast.walk(call.args[0]))
                attrs = {n.attr for n in nodes if isinstance(n, ast.Attribute)}  # cfg.n: n's value counts
                for n in sorted({n.id for n in nodes if isinstance(n, ast.Name)}):
                    if n in src.names:
                        parts.append(f"{n}:{value_hash(src.names[n], hash_object, attrs=attrs)}")
    return ";".join(parts)


def value_hash(v, hash_object, depth: int = 0, attrs=frozenset()) -> str:
    """A text that differs when a static value (or a container of them, or the attributes ``attrs`` of
    an object) differs; ``hash_object(name, obj, attrs)`` hashes the other objects."""
    if depth > 4:
        return type(v).__name__
    if isinstance(v, BuiltinRef):
        return f"builtin:{v.name}"
    if isinstance(v, (list, tuple)):
        return f"{type(v).__name__}[{','.join(value_hash(x, hash_object, depth + 1, attrs) for x in v)}]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k!r}:{value_hash(x, hash_object, depth + 1, attrs)}" for k, x in v.items()) + "}"
    if isinstance(v, T._StructBase):
        return f"{type(v)._ctype}(" + ",".join(value_hash(getattr(v, f), hash_object, depth + 1)
                                               for f in v._fields) + ")"
    if isinstance(v, str):
        return repr(v)
    return hash_object("v", v, attrs)


def _names_outside(node, skip: set[int]) -> set[str]:
    """The names ``node`` reads outside the subtrees whose ids are in ``skip``."""
    if id(node) in skip:
        return set()
    out = {node.id} if isinstance(node, ast.Name) else set()
    for child in ast.iter_child_nodes(node):
        out |= _names_outside(child, skip)
    return out


def _enclosing_loop_vars(tree: ast.FunctionDef) -> dict[int, set[str]]:
    """For each call in ``tree`` (by id), the variables of the for loops it is in."""
    out: dict[int, set[str]] = {}

    def walk(node, loop_vars: frozenset):
        if isinstance(node, ast.Call):
            out[id(node)] = set(loop_vars)
        if isinstance(node, ast.For):
            loop_vars = loop_vars | {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        for child in ast.iter_child_nodes(node):
            walk(child, loop_vars)

    walk(tree, frozenset())
    return out


def _local_names(tree: ast.FunctionDef) -> set[str]:
    """The parameters and assigned names of a function: a static expression reading one is evaluated
    where the frontend meets it (a loop variable has its unrolled value there)."""
    a = tree.args
    out = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    return out | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


class Statics:
    """The frontend's side of ``static``, as a mixin of ``Frontend``."""

    def static_call(self, node):
        """The value of ``node`` when it is a static call (from the declaration's table, or evaluated
        here with the constant locals), else None."""
        src = self.f.src
        tab = table(src.pyfunc)
        k = key(node)
        if tab is not None and k in tab.values:
            return self.static_result(tab.values[k], node)
        if not (tab is not None and k in tab.deferred or is_static_call(node, src.names)):
            return None
        known = tab.values.get if tab is not None else (lambda _: None)
        lengths = {n: v.type._shape[0] for n, v in self.f.sym.items()
                   if isinstance(v, Var) and T.is_composite(v.type)}
        value = evaluate(src, node, self.static_scope(), known, defer_undefined=False, lengths=lengths)
        return self.static_result(value, node)

    def static_scope(self) -> dict:
        """The definition's globals and closure, with the constant locals over them; a local that is not
        a compile-time constant hides the global of its name (NameError if the expression reads it)."""
        names = dict(self.f.src.names)
        for n, v in self.f.sym.items():
            if n.startswith("$"):
                continue
            c = _python_constant(v)
            if c is _NOT_CONSTANT:
                names.pop(n, None)
            else:
                names[n] = c
        return names

    def static_result(self, value, node):
        """A static result as a kernel value: a constant, a struct value, or a reference (func, type...)."""
        if isinstance(value, (bool, int, float, np.generic)):
            return self.const(value)
        if isinstance(value, T._StructBase):
            return self.static_struct(value, node)
        if T.is_composite(type(value)):
            return self.single(Ref(value), node)
        return Ref(value)

    def static_struct(self, value, node):
        t = type(value)
        out = self.emit("construct", t, [], node)
        for f, ft in t._fields.items():
            fv = getattr(value, f)
            v = self.static_struct(fv, node) if T.is_struct(ft) else self.typed(self.single(Ref(fv), node), ft, node)
            out = self.emit("field_set", t, [out, v], node, field=f)
        return out

    def static_unrolls(self, node: ast.For) -> bool:
        """Whether the loop must be unrolled: a static expression in it reads its variable."""
        tab = table(self.f.src.pyfunc)
        if tab is None or not tab.deferred:
            return False
        name = node.target.id
        return any(isinstance(n, ast.Call) and name in tab.deferred.get(key(n), ()) for s in node.body
                   for n in ast.walk(s))


_NOT_CONSTANT = object()


def _python_constant(v):
    if isinstance(v, Ref):
        return v.obj
    if isinstance(v, Var):
        return v.const if v.is_const else _NOT_CONSTANT
    if isinstance(v, tuple):
        vals = tuple(_python_constant(x) for x in v)
        return _NOT_CONSTANT if any(x is _NOT_CONSTANT for x in vals) else vals
    return _NOT_CONSTANT
