"""What the frontend works with besides the IR: the source of a function being compiled, the
symbol frame of one function body, compile-time references (modules, funcs, types, builtins),
annotations, and the tables mapping Python operators to builtins."""

from __future__ import annotations

import ast
import copy
import inspect
import linecache
import textwrap
import types as _pytypes
from typing import Any

from .. import types as T
from ..errors import CompileError, WarpCodegenError
from .builtins import OUTPUT_ARGS
from .builtins_random import SAMPLERS
from .ir import Var

MAX_UNROLL = 16
MAX_UNROLL_OPS = 1500

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "mul", ast.BitAnd: "bit_and", ast.BitOr: "bit_or",
           ast.BitXor: "bit_xor", ast.LShift: "lshift", ast.RShift: "rshift"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_FOLD = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
# the atomic builtins: (array, index..., value) -> the old value; atomic_cas takes (..., compare, value)
ATOMICS = ("atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_and", "atomic_or", "atomic_xor",
           "atomic_exch", "atomic_cas")
_UNSUPPORTED = {
    ast.Lambda: "lambdas", ast.ListComp: "list comprehensions", ast.SetComp: "set comprehensions",
    ast.DictComp: "dict comprehensions", ast.GeneratorExp: "generator expressions", ast.Try: "try/except",
    ast.With: "with blocks", ast.Global: "global statements", ast.Nonlocal: "nonlocal statements",
    ast.Delete: "del", ast.ClassDef: "class definitions", ast.Import: "imports", ast.ImportFrom: "imports",
    ast.FunctionDef: "nested function definitions", ast.Yield: "yield", ast.Await: "await",
    ast.Set: "sets", ast.JoinedStr: "f-strings", ast.Raise: "raise",
    ast.AsyncFor: "async for", ast.AsyncWith: "async with", ast.Starred: "star expressions outside call arguments",
    ast.NamedExpr: "walrus assignment", ast.Assert: "assert",
}
# constructs refused in Warp's own words, pointing at what a kernel uses instead
_REFUSED = {
    ast.List: "List constructs are not supported in kernels. Use vectors like `wp.vec3()` for small fixed-size "
              "collections, or `wp.zeros(shape=N, dtype=...)` for stack-allocated arrays.",
    ast.Dict: "Construct `ast.Dict` not supported in kernels.",
}


def unsupported_message(kind: type) -> str | None:
    """Why the AST node type ``kind`` cannot appear in a kernel, or None where it can."""
    if kind in _REFUSED:
        return _REFUSED[kind]
    return f"{_UNSUPPORTED[kind]} are not supported in kernels" if kind in _UNSUPPORTED else None


class Ref:
    """A compile-time Python object met in a kernel: a module, func, type, builtin, constant."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


class _Source:
    """Where one function's code lives: its AST, file, line offset and the names it can see."""

    def __init__(self, pyfunc):
        self.pyfunc = pyfunc
        first = pyfunc.__code__.co_firstlineno
        lines = inspect.getblock(source_lines(pyfunc)[first - 1:])
        if not lines:
            raise OSError(f"no source for {pyfunc.__qualname__}")
        self.file = pyfunc.__code__.co_filename
        self.line0 = first - 1
        self.lines = lines
        src = textwrap.dedent("".join(lines))
        self.indent = len(lines[0]) - len(lines[0].lstrip())
        try:
            tree = ast.parse(src)
        except RecursionError:
            raise CompileError(f"'{pyfunc.__name__}' nests too deeply for the compiler (an expression of thousands "
                               "of terms or levels); split it into several statements, e.g. partial sums",
                               self.file, first, 0, lines[0]) from None
        self.tree = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
        transformed = getattr(pyfunc, "__xsim_transformed__", None)
        if transformed is not None:  # a Kernel's code_transformers ran on it (each source gets its own copy)
            self.tree = copy_tree(transformed)
        self.names = dict(pyfunc.__globals__)
        if pyfunc.__closure__:
            for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
                try:
                    self.names[name] = cell.cell_contents
                except ValueError:
                    pass

    def error(self, node, msg: str, kind: type[CompileError] = WarpCodegenError) -> CompileError:
        """A ``kind`` (a WarpCodegen*Error flavour) naming file:line:col of ``node`` with a caret."""
        line = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0) + self.indent
        src_line = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return kind(msg, self.file, self.line0 + line, col, src_line)

    def lineno(self, node) -> int:
        return self.line0 + getattr(node, "lineno", 1)


def transformed(pyfunc, transformers: list):
    """A copy of ``pyfunc`` whose body is its syntax tree after the ``ast.NodeTransformer``s ``transformers``
    (Warp's ``code_transformers``), run once, in order. A node a transformer placed in several spots becomes
    one node per spot, and calls sharing a source position are told apart (``static()`` results are kept
    by position: each occurrence is evaluated on its own, as in Warp)."""
    tree = _Source(pyfunc).tree
    for t in transformers:
        if not isinstance(t, ast.NodeTransformer):
            raise TypeError(f"code_transformers of '{pyfunc.__qualname__}': expected ast.NodeTransformer objects, "
                            f"got {type(t).__name__}")
        tree = t.visit(tree)
    if not isinstance(tree, ast.FunctionDef):
        raise TypeError(f"code_transformers of '{pyfunc.__qualname__}' must leave a function definition, "
                        f"got {type(tree).__name__}")
    tree = ast.fix_missing_locations(_unshare(tree, set()))
    count: dict[tuple, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            where = (n.lineno, n.col_offset, n.end_lineno, n.end_col_offset)
            n.xsim_occurrence = count.get(where, 0)
            count[where] = n.xsim_occurrence + 1
    out = _pytypes.FunctionType(pyfunc.__code__, pyfunc.__globals__, pyfunc.__name__, pyfunc.__defaults__,
                                pyfunc.__closure__)
    out.__dict__.update({k: v for k, v in pyfunc.__dict__.items() if not k.startswith("__xsim")})
    out.__kwdefaults__, out.__annotations__ = pyfunc.__kwdefaults__, dict(pyfunc.__annotations__)
    out.__qualname__, out.__module__, out.__doc__ = pyfunc.__qualname__, pyfunc.__module__, pyfunc.__doc__
    out.__xsim_lines__ = source_lines(pyfunc)
    out.__xsim_transformed__ = tree
    return out


def copy_tree(tree):
    """A copy of the syntax tree ``tree`` with new nodes; values a transformer attached to nodes (Warp's
    ``warp_func``) are the same objects, not copies."""
    attached = {id(v): v for n in ast.walk(tree) for k, v in vars(n).items()
                if k not in n._fields and k not in n._attributes}
    return copy.deepcopy(tree, attached)


def _unshare(node, seen: set):
    """``node``'s tree with every node object in one place only (a node met again is copied)."""
    if id(node) in seen:
        node = copy_tree(node)
    seen.add(id(node))
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            value[:] = [_unshare(v, seen) if isinstance(v, ast.AST) else v for v in value]
        elif isinstance(value, ast.AST):
            setattr(node, field, _unshare(value, seen))
    return node


def snapshot_source(pyfunc) -> None:
    """Keep the lines of the file defining ``pyfunc`` as they are now (called at decoration), so that
    re-running an edited file or notebook cell under the same name cannot change what an existing
    kernel or func compiles to."""
    code = pyfunc.__code__
    linecache.checkcache(code.co_filename)
    pyfunc.__xsim_lines__ = linecache.getlines(code.co_filename, pyfunc.__globals__)


def source_lines(pyfunc) -> list[str]:
    """The lines of the file defining ``pyfunc``: its decoration-time snapshot, else linecache's."""
    lines = getattr(pyfunc, "__xsim_lines__", None)
    if lines is None:
        code = pyfunc.__code__
        linecache.checkcache(code.co_filename)
        lines = linecache.getlines(code.co_filename, pyfunc.__globals__)
    return lines


class _Frame:
    """The state of one function body being built: its symbols, flags and the loop it is in."""

    def __init__(self, source: _Source, is_kernel: bool):
        self.src = source
        self.is_kernel = is_kernel
        self.sym: dict[str, Any] = {}
        self.flags: list[str] = ["$ret"]
        self.loop_vars: set[str] = set()
        self.ret_type = None
        self.ret_ann = None  # the return annotation as written, for messages


def _false():
    return Var(T.bool_, const=False)


def _is_attr_chain(node) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _assigned_names(body) -> set[str]:
    """Names a block of statements (or expressions) assigns: plain, augmented, component and tuple
    targets, the random state a sampler such as ``randf(state)`` advances, and the output variables
    of builtins in ``OUTPUT_ARGS``."""
    out = set()
    for s in body:
        for n in ast.walk(s):
            callee = getattr(n.func, "attr", getattr(n.func, "id", None)) if isinstance(n, ast.Call) else None
            if callee in SAMPLERS and n.args and isinstance(n.args[0], ast.Name):
                out.add(n.args[0].id)
            elif callee in OUTPUT_ARGS:
                out.update(n.args[i].id for i in OUTPUT_ARGS[callee](len(n.args))
                           if i < len(n.args) and isinstance(n.args[i], ast.Name))
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, ast.Store):
                root = n
                while isinstance(root, (ast.Subscript, ast.Attribute)):
                    root = root.value
                if isinstance(root, ast.Name):
                    out.add(root.id)
    return out


def annotations(pyfunc) -> dict:
    """A function's annotations as objects, also when its module uses
    ``from __future__ import annotations`` (they are then strings, evaluated in its globals)."""
    cached = getattr(pyfunc, "__xsim_annotations__", None)
    if cached is None:
        try:
            cached = inspect.get_annotations(pyfunc, eval_str=True)
        except (NameError, AttributeError, SyntaxError, TypeError):  # reported where the name is used
            cached = dict(pyfunc.__annotations__)
        pyfunc.__xsim_annotations__ = cached
    return cached


def _resolve_annotation(a):
    if isinstance(a, str):
        return None
    a = T.resolve(a)
    if isinstance(a, T.ArrayType) or T.is_value_type(a):
        return a
    return None


def _describe(obj) -> str:
    if isinstance(obj, _pytypes.ModuleType):
        return f"module '{obj.__name__}'"
    return repr(obj)


class GradOf:
    """``grad(f)`` met in a kernel: the derivative of the func ``f``, callable like it; ``text`` is how the
    kernel wrote it."""

    __slots__ = ("func", "text")

    def __init__(self, func, text: str):
        self.func, self.text = func, text


class BuiltinRef:
    """What ``xsim.sin`` etc. are in Python: a name the frontend resolves to a builtin."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        """Called from Python scope: evaluated on the CPU with host values (see host_call.py)."""
        from .host_call import call_on_host
        return call_on_host(self.name, args, kwargs)

    def __repr__(self):
        return f"<xsim builtin {self.name}>"


class _AdjointMarker:
    """``xsim.adjoint``: in a func_grad body, ``adjoint[x] += value`` accumulates x's gradient."""

    def __getitem__(self, item):
        raise TypeError("xsim.adjoint can only be used inside an @xsim.func_grad body")

    def __repr__(self):
        return "xsim.adjoint"


_ADJOINT = _AdjointMarker()


def _adjoint_marker():
    return _ADJOINT
