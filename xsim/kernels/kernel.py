"""``@xsim.kernel``, ``@xsim.func``, ``@xsim.func_grad``: the objects the decorators make, and the
content hash that keys a module's build in the cache."""

from __future__ import annotations

import ast
import enum
import hashlib
import inspect
import sys
import types as _pytypes
import typing
import weakref
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, ParamSpec, TypeVar

import numpy as np

from .. import types as T
from .ir import Var
from .scope import (
    _BINOPS,
    MAX_UNROLL,
    BuiltinRef,
    _resolve_annotation,
    _Source,
    annotations,
    snapshot_source,
    source_lines,
    transformed,
)
from .static import fingerprint as static_fingerprint
from .static import table as static_table

_P = ParamSpec("_P")
_R = TypeVar("_R")


class DeterministicMode(enum.IntEnum):
    """Warp's ordering modes for atomics (the ``deterministic`` module option); xsim has the first."""

    NOT_GUARANTEED = 0
    RUN_TO_RUN = 1
    GPU_TO_GPU = 2


class FuncOverload:
    """One definition of a func (a func name may have several, chosen by argument types)."""

    def __init__(self, pyfunc, differentiable: bool = True):
        snapshot_source(pyfunc)
        static_table(pyfunc)  # static() expressions are evaluated at declaration, as in Warp
        self.pyfunc = pyfunc
        self.custom_grad: FuncOverload | None = None
        self.replay: FuncOverload | None = None
        self.differentiable = differentiable
        self._source = None

    def source(self) -> _Source:
        if self._source is None:
            self._source = _Source(self.pyfunc)
        return self._source

    def annotations(self) -> list:
        sig = inspect.signature(self.pyfunc)
        ann = annotations(self.pyfunc)
        return [_resolve_annotation(ann[n]) if n in ann else None for n in sig.parameters]

    def match_cost(self, args: list, kw: dict) -> tuple[int, int, int] | None:
        """None when this definition cannot take the arguments, else how loosely it takes them: (generic
        parameters, literals converted, unannotated parameters); the closest definition wins a call."""
        sig = inspect.signature(self.pyfunc)
        try:
            bound = sig.bind(*args, **kw)
        except TypeError:
            return None
        ann = annotations(self.pyfunc)
        generic = converted = untyped = 0
        for name, v in bound.arguments.items():
            if name not in ann:
                untyped += 1
                continue
            t = _resolve_annotation(ann[name])
            if t is None:
                generic += 1
                continue
            vt = getattr(v, "type", None)
            if vt is t or isinstance(t, T.ArrayType) and vt == t:  # array types are equal, not interned
                continue
            if T.is_generic(t) and isinstance(vt, T.ArrayType) and type(vt) is type(t) and vt.ndim == t.ndim and T.bind(
                    t.dtype, vt.dtype):
                generic += 1
                continue
            if getattr(v, "weak", False) and T.is_scalar(t) and t is not T.bool_ and not (
                    T.is_int(t) and isinstance(v.const, float)):
                converted += 1
                continue
            return None
        return generic, converted, untyped


# the modules of xsim's library funcs, reached as xsim.<name>
_LIBRARY_MODULES = ("xsim.kernels.funcs_math", "xsim.kernels.funcs_transform")


class Function:
    """An ``@xsim.func``: inlined into the kernels that call it."""

    # a library func returning a tuple that Warp also offers in output-argument form: the number of inputs,
    # after which further arguments are local variables receiving the parts (None: no such form)
    outputs_after: int | None = None

    def __init__(self, overload: FuncOverload, others: list[FuncOverload] = ()):
        pyfunc = overload.pyfunc
        self.key = pyfunc.__qualname__
        self.module = pyfunc.__module__
        self.overloads: list[FuncOverload] = [*others, overload]
        self.__doc__ = pyfunc.__doc__
        self.__name__ = pyfunc.__name__

    def resolve(self, args, kw) -> FuncOverload | None:
        """The definition that takes the arguments most closely: concrete before generic, exact types
        before converted literals, and the latest definition among equals."""
        best = None
        for o in reversed(self.overloads):
            cost = o.match_cost(args, kw)
            if cost is not None and (best is None or cost < best[0]):
                best = (cost, o)
        return best[1] if best else None

    def signatures(self) -> str:
        out = []
        for o in self.overloads:
            sig = inspect.signature(o.pyfunc)
            out.append(f"{self.key}{sig}")
        return "; ".join(out)

    def __call__(self, *args, **kwargs):
        """Called from Python (e.g. in a static() expression), a func runs as the Python function it is:
        the definition chosen as in a kernel, a Python float being a float32 and an int an int32. xsim's
        library funcs (Warp's builtins) are written in the kernel language, so they run as a kernel does."""
        if self.module in _LIBRARY_MODULES:
            from .host_call import call_on_host
            return call_on_host(self.__name__, args, kwargs)
        found = self.resolve([_python_arg(a) for a in args], {k: _python_arg(v) for k, v in kwargs.items()})
        if found is None:
            raise RuntimeError(f"Error calling function '{self.key}', no overload found for arguments {args!r}")
        return found.pyfunc(*args, **kwargs)

    def content_hash(self, seen: set) -> str:
        return "".join(_hash_python(p.pyfunc, seen) for o in self.overloads
                       for p in (o, o.custom_grad, o.replay) if p is not None)


@typing.overload
def func(pyfunc: Callable[_P, _R]) -> Callable[_P, _R]: ...


@typing.overload
def func(pyfunc: None = None, *, differentiable: bool = True, module=None,
         inline: bool | None = None) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def func(pyfunc=None, *, differentiable: bool = True, module=None, inline: bool | None = None):
    """Decorator: a function callable from kernels (inlined at each call). A definition whose name
    is already a func in the defining scope adds an overload chosen by argument types, or replaces
    the one with the same signature in a new func (kernels built on the old one keep it); in a
    fresh scope (each call of a factory) it is a new func. ``module`` and ``inline`` are accepted as
    Warp takes them; a func is always inlined into the kernels that call it, so neither changes the code."""
    from .module import Module
    if not (module is None or isinstance(module, (str, Module))):
        raise TypeError(f"func(module=...) takes a module, a module name or \"unique\", got {module!r}")
    if inline is not None and not isinstance(inline, bool):
        raise TypeError(f"func(inline=...) takes a bool or None, got {inline!r}")
    scope = inspect.currentframe().f_back.f_locals

    def wrap(f):
        existing = scope.get(f.__name__)
        overload = FuncOverload(f, differentiable)
        if not isinstance(existing, Function):
            return Function(overload)
        if _same_signature(existing, f):
            return Function(overload, [o for o in existing.overloads if not _same_annotations(o.pyfunc, f)])
        existing.overloads.append(overload)
        return existing
    return wrap(pyfunc) if pyfunc is not None else wrap


def _same_annotations(a, b) -> bool:
    return annotations(a) == annotations(b) and inspect.signature(a) == inspect.signature(b)


def _same_signature(fn: Function, f) -> bool:
    return any(_same_annotations(o.pyfunc, f) for o in fn.overloads)


def func_grad(target: Function):
    """Decorator: give the func ``target`` its own adjoint. The decorated function takes the
    func's parameters plus the adjoint of its result, and adds into ``xsim.adjoint[param]``. With
    several definitions of ``target``, it belongs to the one whose parameter types it repeats."""
    if not isinstance(target, Function):
        raise TypeError("func_grad(f) needs an @xsim.func")

    def wrap(g):
        _definition_for(target, g, "func_grad").custom_grad = FuncOverload(g)
        return g
    return wrap


def func_replay(target: Function):
    """Decorator: the function the backward pass runs instead of the func ``target`` when it replays
    the forward pass (same parameters, same result type), e.g. to read back what an atomic returned in
    the forward pass rather than add again. Without a ``func_grad``, the adjoint is the replay's."""
    if not isinstance(target, Function):
        raise TypeError("func_replay(f) needs an @xsim.func")

    def wrap(r):
        found = _definition_for(target, r, "func_replay")
        if len(inspect.signature(r).parameters) != len(inspect.signature(found.pyfunc).parameters):
            raise TypeError(f"func_replay of '{target.key}': takes {len(inspect.signature(r).parameters)} "
                            f"parameters, the func {len(inspect.signature(found.pyfunc).parameters)}")
        found.replay = FuncOverload(r)
        return r
    return wrap


def _definition_for(target: Function, helper, what: str) -> FuncOverload:
    """The definition of ``target`` whose parameter annotations ``helper``'s first parameters repeat (the
    latest such), or its only definition."""
    hann = annotations(helper)
    hparams = list(inspect.signature(helper).parameters)
    for o in reversed(target.overloads):
        params = list(inspect.signature(o.pyfunc).parameters)
        oann = annotations(o.pyfunc)
        if len(hparams) >= len(params) and all(
                T.resolve(oann.get(p)) == T.resolve(hann.get(h)) for p, h in zip(params, hparams)):
            return o
    if len(target.overloads) == 1:
        return target.overloads[0]
    raise TypeError(f"{what} '{helper.__name__}': no definition of func '{target.key}' has its parameter types; "
                    f"expected one of {target.signatures()}")


class Kernel:
    """An ``@xsim.kernel``: compiled with the other kernels of its Python module. Kernels of one
    name (a factory's, a redefinition's) are distinct: each is compiled under a symbol made of its
    name and its content hash, so equal definitions share code and different ones never do."""

    def __init__(self, func, key: str | None = None, module=None, options: dict | None = None, *,
                 enable_backward: bool | None = None, param_types: list | None = None, code_transformers=None,
                 grid_stride: bool | None = None):
        """``func``: the Python function; ``key``: its name in messages (default its own name);
        ``module``: a module name, a module, or "unique" for a module of its own (default the
        function's Python module); ``options``: Warp's per-kernel options (``enable_backward``; when
        neither gives it, the module's option, see ``set_module_options``); ``code_transformers``:
        ``ast.NodeTransformer`` objects run on the function's syntax tree, in order, before it is compiled;
        ``grid_stride``: see :attr:`grid_stride` (None: the module's ``default_grid_stride``, else
        ``xsim.config.default_grid_stride``)."""
        pyfunc = transformed(func, code_transformers) if code_transformers else func
        snapshot_source(pyfunc)
        static_table(pyfunc)
        self.pyfunc = pyfunc
        self.key = key or pyfunc.__name__
        explicit = (options or {}).get("enable_backward", enable_backward)
        self._enable_backward = None if explicit is None else bool(explicit)
        self._grid_stride = None if grid_stride is None else bool(grid_stride)
        self._grid_stride_resolved: bool | None = None  # frozen with the code hash
        self.__doc__ = pyfunc.__doc__
        self.__name__ = pyfunc.__name__
        sig = inspect.signature(pyfunc)
        ann = annotations(pyfunc)
        if param_types is None:
            param_types = [_param_annotation(ann[name]) if name in ann else None for name in sig.parameters]
        self.params: list[tuple[str, Any]] = list(zip(sig.parameters, param_types))
        # a generic kernel (Any, Float, array(dtype=Any)...) is not compiled itself: each launch binds its
        # parameters to the arguments' types and runs the specialisation for them, made once
        self.generic = any(T.is_generic(t) for _, t in self.params)
        self.specializations: dict[tuple, Kernel] = {}
        self.bound = param_types is not None  # a specialisation: its types are not its annotations
        self.launch_cache = None  # filled by launch.py: packing info per built module
        self._hash: str | None = None
        self._files: list[str] = []  # the files of the sources in _hash (set with it)
        from .module import Module, get_module
        if isinstance(module, Module):
            self.module = module
        elif module == "unique":
            # named by its content too (as Warp's are): two definitions of one function with different
            # source (a file edited between them) get modules of different names, so they never share a build
            digest = hashlib.blake2b(_hash_python(pyfunc, set()).encode(), digest_size=4).hexdigest()
            self.module = Module(f"{pyfunc.__module__}.{pyfunc.__qualname__}" + (f".{key}" if key else "")
                                 + f"_{digest}")
        else:
            self.module = get_module(module or pyfunc.__module__)
        self.module_name = self.module.options_name
        self.__module__ = pyfunc.__module__  # as Warp's: get_module(k.__module__) is the module of its file
        self.module.add(self)
        if self.generic:  # (a specialisation is not generic)
            name = (pyfunc.__module__, pyfunc.__qualname__)
            latest = _LATEST_GENERIC.get(name)
            same_def = latest is not None and latest[0].pyfunc is pyfunc
            _LATEST_GENERIC[name] = (self, {**(latest[1] if same_def else {}), self.key: self})

    @property
    def adj(self):
        """Its definition as Warp's ``kernel.adj`` shows it (source, name, file, resolved statics, args)."""
        from .static import Definition
        return Definition(self.pyfunc, self)

    @property
    def options(self) -> dict:
        """The options given to this kernel itself (Warp's ``kernel.options``); the module's apply to the rest."""
        return {} if self._enable_backward is None else {"enable_backward": self._enable_backward}

    @property
    def enable_backward(self) -> bool:
        """Whether the adjoint may run: the kernel's own setting, else its module's option."""
        if self._enable_backward is not None:
            return self._enable_backward
        return get_module_options(self.module_name)["enable_backward"]

    @property
    def grid_stride(self) -> bool:
        """Whether its CUDA entry points loop over the launch in grid strides (any launch size, any grid)
        or run one thread per index (lean: no loop; the grid must cover the launch, so ``max_blocks`` is
        refused). The kernel's own choice, else its module's ``default_grid_stride`` option, else
        ``xsim.config.default_grid_stride``: resolved with its code hash (its first build or hash) and kept
        until its module is invalidated. CPU builds are the same either way."""
        if self._grid_stride is not None:
            return self._grid_stride
        self.code_hash()
        return self._grid_stride_resolved

    def _resolve_grid_stride(self) -> bool:
        if self._grid_stride is not None:
            return self._grid_stride
        from .. import config
        option = get_module_options(self.module_name)["default_grid_stride"]
        return bool(config.default_grid_stride if option is None else option)

    def specialize(self, values: list) -> Kernel:
        """The kernel for launch arguments ``values`` (a generic kernel's specialisation, made once)."""
        if not self.generic:
            return self
        types = tuple(_bind_param(self, name, t, v) for (name, t), v in zip(self.params, values))
        spec = self.specializations.get(types)
        if spec is None:
            # Built apart from the module's other kernels: a specialisation first launched later would
            # otherwise rebuild the whole module, and the code cached would depend on the launch order
            # (a cold test run compiled the particle contact module 13 times, growing to 640 kB).
            from .module import get_module
            digest = hashlib.blake2b(",".join(map(T.type_name, types)).encode(), digest_size=5).hexdigest()
            unit = get_module(f"{self.module.name}.{self.key}.{digest}", options_name=self.module.options_name)
            spec = self.specializations[types] = Kernel(self.pyfunc, self.key, unit,
                                                        enable_backward=self.enable_backward,
                                                        param_types=list(types), grid_stride=self._grid_stride)
        return spec

    @property
    def overloads(self) -> dict:
        """Its specialisations declared or launched so far, by parameter types (Warp's name)."""
        return self.specializations

    def overload(self, arg_types: list | dict) -> Kernel:
        """The specialisation of this generic kernel for ``arg_types`` (a list in parameter order, or
        {name: type} for some; an array instance stands for its array type), compiled with the others of its
        module (Warp's ``wp.overload``)."""
        if not self.generic:
            raise RuntimeError(f"kernel '{self.key}' is not generic (no Any, type variable or "
                               "array(dtype=Any) parameter), so it has no overloads")
        if isinstance(arg_types, dict):
            names = [n for n, _ in self.params]
            unknown = [n for n in arg_types if n not in names]
            if unknown:
                raise RuntimeError(f"kernel '{self.key}' has no parameter {unknown[0]!r} (overload types)")
            given = [arg_types.get(n, t) for n, t in self.params]
        elif isinstance(arg_types, (list, tuple)):
            if len(arg_types) != len(self.params):
                raise TypeError(f"kernel '{self.key}' takes {len(self.params)} parameters, the overload "
                                f"gives {len(arg_types)} types")
            given = list(arg_types)
        else:
            raise TypeError("kernel overload types must be given in a list or a dict")
        types = tuple(_bind_declared(self, n, t, _param_annotation(_array_type_of(g)))
                      for (n, t), g in zip(self.params, given))
        spec = self.specializations.get(types)
        if spec is None:
            spec = self.specializations[types] = Kernel(self.pyfunc, self.key, self.module,
                                                        enable_backward=self.enable_backward,
                                                        param_types=list(types), grid_stride=self._grid_stride)
        return spec

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel '{self.key}' is run with xsim.launch({self.key}, dim, inputs=[...])")

    def code_hash(self) -> str:
        """What this kernel's code depends on but for the files its sources came from: the same for the same
        source in another file (Warp's module hash); cached until its module is invalidated."""
        if self._hash is None:
            seen: set = set()
            self._hash = _hash_python(self.pyfunc, seen) + f"|backward={self.enable_backward}"
            self._grid_stride_resolved = self._resolve_grid_stride()
            if not self._grid_stride_resolved:  # other entry points (kernels with the default keep their hash)
                self._hash += "|grid_stride=False"
            self._files = sorted(s[1] for s in seen if isinstance(s, tuple))
            if self.bound:
                self._hash += "|" + ",".join(T.type_name(t) for _, t in self.params)
            # a struct named in an annotation is not in the source's closure: its layout is part of the code
            layouts = [getattr(t, "dtype", t)._ctype for _, t in self.params if T.is_struct(getattr(t, "dtype", t))]
            if layouts:
                self._hash += "|structs=" + ",".join(layouts)
        return self._hash

    def content_hash(self) -> str:
        """What this kernel's generated code depends on, the files of its sources included: expect_*() print
        them, refusals and adjoint errors name them, so the same source elsewhere (another checkout) must
        not load this one's cached code."""
        return self.code_hash() + "|files=" + ",".join(self._files)

    @property
    def symbol(self) -> str:
        """The C++ name of this kernel's code: its name and a digest of its content."""
        return f"{self.key}_{hashlib.blake2b(self.content_hash().encode(), digest_size=5).hexdigest()}"

    def module_build(self, device, debug: bool):
        """The loaded native module holding this kernel for ``device`` (built or loaded on first use)."""
        key = (device.name, debug)
        built = self.module.builds.get(key)
        if built is None:
            if device.is_cpu:
                from .cpu import build
                built = build(self.module, debug)
            else:
                from .cuda import build
                built = build(self.module, debug, device)
            self.module.builds[key] = built
        return built


def _param_annotation(a):
    """A kernel parameter's type from its annotation: concrete, generic (kept), or None (refused)."""
    a = T.resolve(a)
    return a if T.is_generic(a) else _resolve_annotation(a)


def _bind_param(kernel: Kernel, name: str, t, value):
    """The concrete type a launch argument gives the parameter ``name`` of type ``t``."""
    if not T.is_generic(t):
        return t
    where = f"kernel '{kernel.key}' parameter '{name}'"
    if getattr(t, "_is_struct_template", False):  # a generic struct: the value's binding of it
        if not isinstance(value, t):
            raise TypeError(f"{where}: expected a struct {t.__name__}, got {type(value).__name__}")
        return type(value)
    param = t.dtype if isinstance(t, T.ArrayType) else t
    if t is Any and isinstance(getattr(value, "dtype", None), type) and hasattr(value, "ndim"):
        # a plain Any parameter takes an array (or an indexed array) too, as in Warp
        t = (T.IndexedArrayType if getattr(value, "is_indexed", False) else T.ArrayType)(Any, value.ndim)
    if isinstance(t, T.ArrayType):
        dtype = getattr(value, "dtype", None)
        if isinstance(value, np.ndarray):
            dtype = T.scalar_from_numpy(value.dtype)
        if not T.is_value_type(dtype):
            raise TypeError(f"{where}: expected {t!r}, got {type(value).__name__}")
        bound = type(t)(dtype, t.ndim)
    else:
        bound = _value_type(value)
        if bound is None:
            raise TypeError(f"{where}: cannot tell the type of the generic ({T.type_name(t)}) argument "
                            f"{value!r}; pass a typed value (e.g. xsim.float32(x))")
        dtype = bound
    if not T.bind(param, dtype):
        if isinstance(param, T.GenericComposite):
            raise TypeError(f"{where}: {T.type_name(dtype)} does not fit {T.type_name(param)}")
        allowed = ", ".join(T.type_name(c) for c in param.__constraints__)
        raise TypeError(f"{where}: {T.type_name(dtype)} is not one of the types {T.type_name(param)} "
                        f"stands for ({allowed})")
    return bound


def _bind_declared(kernel: Kernel, name: str, t, g):
    """The type an overload declares for parameter ``name`` of type ``t``, checked against it."""
    where = f"overload of kernel '{kernel.key}' parameter '{name}'"
    if g is None or T.is_generic(g):
        raise TypeError(f"{where}: needs a concrete type, got {g!r}")
    if not T.is_generic(t):
        if g != t:
            raise TypeError(f"{where}: the kernel declares {T.type_name(t)}, the overload {T.type_name(g)}")
        return t
    if getattr(t, "_is_struct_template", False):
        if getattr(g, "_template", None) is not t:
            raise TypeError(f"{where}: {T.type_name(g)} is not a struct {t.__name__}")
        return g
    if isinstance(t, T.ArrayType):
        if not (isinstance(g, T.ArrayType) and type(g) is type(t) and g.ndim == t.ndim and T.bind(t.dtype, g.dtype)):
            raise TypeError(f"{where}: {T.type_name(g)} does not fit {T.type_name(t)}")
    elif isinstance(g, T.ArrayType) and t is not Any or not isinstance(g, T.ArrayType) and not T.bind(t, g):
        raise TypeError(f"{where}: {T.type_name(g)} does not fit {T.type_name(t)}")
    return g


# the last generic kernel defined under each (module, qualname): a stub defined after it takes its name,
# and overload(stub) must still find it (one per name, so kernel factories do not accumulate); with it,
# the kernels made from that same function under other keys (kernel(name=...)), which make a stub ambiguous
_LATEST_GENERIC: dict[tuple[str, str], tuple[Kernel, dict[str, Kernel]]] = {}


def overload(kernel, arg_types: list | dict | None = None) -> Kernel:
    """Declare a specialisation of a generic kernel: ``overload(k, [types])``, ``overload(k, {name: type})``,
    or ``@overload`` on a stub of the same name whose annotations are the types (returns the kernel)."""
    if isinstance(kernel, Kernel):
        return kernel.overload(arg_types if arg_types is not None else [])
    if not isinstance(kernel, _pytypes.FunctionType):
        raise TypeError(f"overload() takes a kernel or decorates a function stub, got {kernel!r}")
    stub = kernel
    caller = inspect.currentframe().f_back
    found = caller.f_locals.get(stub.__name__, caller.f_globals.get(stub.__name__))
    del caller
    if not isinstance(found, Kernel):  # the stub's def replaced the kernel's name
        found, by_key = _LATEST_GENERIC.get((stub.__module__, stub.__qualname__), (None, {}))
        if len(by_key) > 1:
            raise RuntimeError(f"Ambiguous kernel lookup for the @overload stub '{stub.__qualname__}': the function "
                               f"was made into the kernels {sorted(by_key)}; use overload(kernel, [types]) instead")
    if not isinstance(found, Kernel):
        raise RuntimeError(f"@overload: no kernel named '{stub.__name__}' is defined before this stub")
    ann = dict(annotations(stub))
    if ann.get("return", None) not in (None, type(None)):
        raise TypeError(f"Return annotations are not allowed on @wp.overload stubs (xsim.overload): kernel "
                        f"'{found.key}' returns nothing, but the stub declares -> {ann['return']!r}")
    ann.pop("return", None)
    missing = [n for n in inspect.signature(stub).parameters if n not in ann]
    if missing:
        raise TypeError(f"@overload stub '{stub.__name__}': parameter '{missing[0]}' needs a type annotation")
    found.overload([ann[n] for n in inspect.signature(stub).parameters])
    return found


def _python_arg(value) -> Var:
    """A Python argument of a func called from Python, as the typed value a kernel would pass."""
    from ..array import array
    from ..indexedarray import indexedarray
    if isinstance(value, indexedarray):
        return Var(T.IndexedArrayType(value.dtype, value.ndim))
    if isinstance(value, array):
        return Var(T.ArrayType(value.dtype, value.ndim))
    return Var(_value_type(value))


def _array_type_of(given):
    """An overload's type for a parameter: an array instance stands for its array type (Warp's optimizers pass
    the live arrays, ``overload(k, {"g": grad})``), anything else is the type itself."""
    from ..array import array
    from ..indexedarray import indexedarray
    if isinstance(given, indexedarray):
        return T.IndexedArrayType(given.dtype, given.ndim)
    if isinstance(given, array):
        return T.ArrayType(given.dtype, given.ndim)
    return given


def _value_type(value):
    """The kernel type of a Python launch value (Warp's rule: int -> int32, float -> float32)."""
    if isinstance(value, np.generic):  # before float: numpy.float64 is a float
        return T.scalar_from_numpy(value.dtype)
    if isinstance(value, bool):
        return T.bool_
    if isinstance(value, int):
        return T.int32
    if isinstance(value, float):
        return T.float32
    if T.is_value_type(type(value)):
        return type(value)
    return None


def kernel(pyfunc=None, *, enable_backward: bool | None = None, module=None, name: str | None = None,
           module_options: dict | None = None, entry_point_abi: str = "warp", grid_stride: bool | None = None):
    """Decorator: compile a Python function to a native kernel with a generated adjoint. ``module``:
    a module name to compile it with (default its Python module), or "unique" for its own;
    ``enable_backward`` defaults to ``module_options``, else to the module's option (True unless
    ``set_module_options`` says); ``name``: the kernel's key (a C++ identifier) instead of the
    function's name; ``module_options``: options of its own module (``module="unique"`` only, as in Warp:
    they would change every kernel of a shared module). ``entry_point_abi``: "warp" (a kernel launched
    over a grid); Warp's "external_constant_params" (an OptiX program reading one struct from constant
    memory) is refused, xsim having no OptiX backend. ``grid_stride``: see :attr:`Kernel.grid_stride`."""
    _check_entry_point_abi(entry_point_abi, enable_backward, module_options)
    if name is not None and not (isinstance(name, str) and name.isidentifier() and name.isascii()):
        raise ValueError(f"kernel(name={name!r}): the name must be a valid C++ identifier")
    options = _checked_options(module_options if module_options is not None else {}, "kernel(module_options=...)")
    if options and module != "unique":
        raise ValueError("kernel(module_options=...) needs module=\"unique\": the options would change every kernel "
                         "of a shared module (use set_module_options for that)")

    def wrap(f):
        k = Kernel(f, key=name, module=module, enable_backward=enable_backward, grid_stride=grid_stride)
        if module_options:
            set_module_options(module_options, k.module_name)
        if module != "unique":
            return k
        statics = static_table(f)
        if statics is not None and statics.failures:
            # a unique module is named by its content, static values included, when it is declared (Warp
            # builds it then): a static expression that cannot be evaluated fails the declaration
            raise next(iter(statics.failures.values()))
        # as in Warp, redeclaring a unique-module kernel with the same content (a factory called again
        # with the same arguments) gives the kernel made before, with its built code
        return _UNIQUE.setdefault((k.module_name, k.key, k.content_hash(), *_definition_identity(f)), k)
    return wrap(pyfunc) if pyfunc is not None else wrap


def _check_entry_point_abi(abi, enable_backward, module_options) -> None:
    """Warp's checks of ``kernel(entry_point_abi=...)``, in its order, then xsim's refusal of the OptiX one."""
    if abi == "warp":
        return
    if abi != "external_constant_params":
        raise ValueError(f"kernel(entry_point_abi={abi!r}): must be 'warp' or 'external_constant_params'")
    if enable_backward is not False and (module_options or {}).get("enable_backward") is not False:
        raise ValueError("kernel(entry_point_abi='external_constant_params') requires enable_backward=False: "
                         "an external entry point has no adjoint")
    raise NotImplementedError("kernel(entry_point_abi='external_constant_params') is OptiX's program ABI; "
                              "xsim has no OptiX backend, so its kernels take entry_point_abi='warp' only")


def _definition_identity(f) -> tuple:
    """What makes two definitions of one function the same beyond their content hash (which hashes an
    object it captures by type where it cannot hash its value): the code, the globals and each captured
    value (a number or string by value, anything else by identity; the kernel keeps them alive)."""
    cells = []
    for cell in f.__closure__ or ():
        try:
            c = cell.cell_contents
        except ValueError:
            c = None
        cells.append(c if isinstance(c, (bool, int, float, str, np.generic)) else ("id", id(c)))
    return id(f.__code__), id(f.__globals__), tuple(cells)


_UNIQUE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


# -------------------------------------------------------------------------------------------------
# content hashing: what a kernel's generated code depends on, found without running the frontend


def _source_text(pyfunc) -> str:
    """The lines of a function's definition, decorators included, from its source snapshot: the
    text inspect.getsource finds, without its tokenizer pass, which was most of the time a fresh
    process spent loading a module from the cache."""
    code = pyfunc.__code__
    lines = source_lines(pyfunc)
    last = max((end for c in _code_objects(code) for _, end, _, _ in c.co_positions() if end is not None),
               default=0)
    if not lines or last < code.co_firstlineno:
        raise OSError(f"no source for {pyfunc.__qualname__}")
    return "".join(lines[code.co_firstlineno - 1:last])


def _code_objects(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, _pytypes.CodeType):
            yield from _code_objects(c)


def _hash_python(pyfunc, seen: set) -> str:
    if id(pyfunc) in seen:
        return ""
    seen.add(id(pyfunc))
    seen.add(("file", pyfunc.__code__.co_filename))  # kept apart: Kernel.content_hash adds the files
    h = hashlib.blake2b(digest_size=16)
    try:
        h.update(_source_text(pyfunc).encode())
    except OSError:
        h.update(pyfunc.__code__.co_code)
    names = dict(pyfunc.__globals__)
    if pyfunc.__closure__:
        for n, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
            try:
                names[n] = cell.cell_contents
            except ValueError:
                pass
    tab = static_table(pyfunc)
    # funcs named like an operator (add, mul...) overload it without the code naming them
    operators = {n for n in set(_BINOPS.values()) if isinstance(names.get(n), Function)}
    for n in sorted((_code_names(pyfunc.__code__) | operators) - (tab.static_only if tab else set())):
        if n in names:
            h.update(_hash_object(n, names[n], seen, _code_names(pyfunc.__code__)).encode())
    for v in pyfunc.__annotations__.values():
        h.update(_hash_object("ann", v, seen, set()).encode())
    h.update(static_fingerprint(pyfunc, lambda n, o, attrs: _hash_object(n, o, seen, set(attrs))).encode())
    tree = getattr(pyfunc, "__xsim_transformed__", None)
    if tree is not None:  # compiled from a code transformer's tree, not from the source text
        h.update(ast.dump(tree).encode())
        for node in ast.walk(tree):
            if hasattr(node, "warp_func"):
                h.update(_hash_object("warp_func", node.warp_func, seen, set()).encode())
    return h.hexdigest()


def _hash_code(code) -> str:
    """A code object's instructions, constants and names (nested code included), as a digest."""
    h = hashlib.blake2b(code.co_code, digest_size=16)
    for c in code.co_consts:
        h.update((_hash_code(c) if isinstance(c, _pytypes.CodeType) else f"{type(c).__name__}:{c!r}").encode())
    h.update(repr(code.co_names).encode())
    return h.hexdigest()


def _code_names(code) -> set:
    out = set(code.co_names) | set(code.co_freevars)
    for c in code.co_consts:
        if isinstance(c, _pytypes.CodeType):
            out |= _code_names(c)
    return out


def _hash_object(name, obj, seen, attr_names) -> str:
    if isinstance(obj, Function):
        return f"{name}:func:{obj.content_hash(seen)}"
    if isinstance(obj, NativeFunction):
        return f"{name}:native:{obj.key}:{obj.snippet!r}:{obj.adj_snippet!r}:{_hash_python(obj.pyfunc, seen)}"
    if isinstance(obj, (bool, int, float, str, np.generic)):
        return f"{name}={obj!r}:{type(obj).__name__}"
    if isinstance(obj, type) and T.is_struct(obj):
        return f"{name}:struct:{obj._ctype}:{[(f, T.type_name(t)) for f, t in obj._fields.items()]}"
    if isinstance(obj, T.ArrayType):
        return f"{name}:{obj!r}"
    if isinstance(obj, type) and T.is_value_type(obj):
        return f"{name}:{obj.__name__}"
    if isinstance(obj, BuiltinRef):
        return f"{name}:builtin"
    if T.is_composite(type(obj)):
        return f"{name}={np.asarray(obj).tolist()!r}"
    if isinstance(obj, _pytypes.FunctionType) and name.count(".") < 3:
        # a plain Python function a static() calls at the build (with a loop variable): what it computes
        # is its code and what it captures, so two lambdas of one line do not hash alike
        parts = [_hash_code(obj.__code__)]
        for n, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                parts.append(_hash_object(f"{name}.{n}", cell.cell_contents, seen, set()))
            except ValueError:
                pass
        glob = obj.__globals__
        parts += [_hash_object(f"{name}.{n}", glob[n], seen, set()) for n in sorted(_code_names(obj.__code__))
                  if n in glob and not isinstance(glob[n], _pytypes.ModuleType)]
        return f"{name}:pyfunc[{';'.join(parts)}]"
    if hasattr(obj, "__dict__") and not isinstance(obj, _pytypes.FunctionType) and name.count(".") < 3:
        # a module, class or namespace object: a kernel reads its attributes (cfg.n, mymodule.K), and
        # kernels capturing objects whose attributes differ must not hash alike (depth-limited: cycles)
        parts = []
        for a in sorted(attr_names):
            if hasattr(obj, a) and not isinstance(getattr(obj, a), _pytypes.ModuleType):
                parts.append(_hash_object(f"{name}.{a}", getattr(obj, a), seen, attr_names))
        return f"{name}:{type(obj).__name__}[{';'.join(parts)}]"
    return f"{name}:{type(obj).__name__}"


class NativeFunction:
    """A ``@xsim.func_native`` function: C++ ``snippet`` as the body of a function with the Python
    signature's parameters and return type, and ``adj_snippet`` as the body of its adjoint, which
    adds into ``adj_<param>`` from ``adj_ret`` (Warp's convention). Parameters are values (scalars,
    vectors, matrices...), not arrays; the snippet is compiled as written, for the CPU and CUDA alike."""

    def __init__(self, pyfunc, snippet: str, adj_snippet: str | None):
        if not isinstance(snippet, str) or not (adj_snippet is None or isinstance(adj_snippet, str)):
            raise TypeError(f"func_native '{pyfunc.__name__}': snippet and adj_snippet must be strings of C++ code")
        self.pyfunc, self.snippet, self.adj_snippet = pyfunc, snippet, adj_snippet
        self.key = pyfunc.__qualname__
        self.__doc__, self.__name__ = pyfunc.__doc__, pyfunc.__name__
        ann = annotations(pyfunc)
        self.params = []
        for name in inspect.signature(pyfunc).parameters:
            t = _resolve_annotation(ann[name]) if name in ann else None
            if t is None or not T.is_value_type(t) or T.is_struct(t) or T.is_generic(t):
                raise TypeError(f"func_native '{self.key}': parameter '{name}' needs a concrete scalar, vector, "
                                f"matrix, quat or transform annotation (arrays and structs are not supported), "
                                f"got {ann.get(name)!r}")
            self.params.append((name, t))
        ret = ann.get("return")
        self.ret = None if ret is None else _resolve_annotation(ret)
        if ret is not None and (self.ret is None or not T.is_value_type(self.ret) or T.is_struct(self.ret)):
            raise TypeError(f"func_native '{self.key}': return type must be a concrete value type, got {ret!r}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"func_native '{self.key}' is C++ and runs only inside kernels")


def func_native(snippet: str, adj_snippet: str | None = None, replay_snippet: str | None = None):
    """Decorator: a func whose body is the C++ ``snippet`` (see ``NativeFunction``). Without
    ``adj_snippet`` no gradient flows through it (the tape warns, as for ``differentiable=False``)."""
    if replay_snippet is not None:
        raise NotImplementedError("func_native: replay_snippet is not supported; the adjoint replays the snippet")
    return lambda pyfunc: NativeFunction(pyfunc, snippet, adj_snippet)


# -- module options (Warp's set_module_options / get_module_options) --------------------------------

_MODULE_OPTIONS: dict[str, dict] = {}
_OPTION_DEFAULTS = {"enable_backward": True, "max_unroll": MAX_UNROLL,
                    "deterministic": DeterministicMode.NOT_GUARANTEED, "default_grid_stride": None,
                    "fuse_fp": False}


def _checked_options(options, where: str) -> dict:
    """Module options as xsim keeps them, or an error naming ``where``: ``enable_backward`` (a bool),
    ``max_unroll`` (the largest trip count of a constant-bound loop the compiler unrolls, an int >= 0),
    ``default_grid_stride`` (a bool, or None for ``xsim.config.default_grid_stride``), ``fuse_fp`` (a bool: let
    the C++/CUDA compiler fuse a product and a sum into one FMA, g++'s ``-ffp-contract=fast`` and NVRTC's
    ``--fmad=true``; off by default, unlike Warp: then every operation rounds as the kernel wrote it, and results
    do not depend on how the generated code was arranged) and ``deterministic``, which can only be
    NOT_GUARANTEED: xsim's float atomics accumulate in whatever order the threads run, so a sum may differ in
    its last bits from run to run."""
    if not isinstance(options, Mapping):
        raise TypeError(f"{where}: options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(_OPTION_DEFAULTS))
    if unknown:
        raise ValueError(f"{where}: xsim has no module option {unknown[0]!r} (it has: {', '.join(_OPTION_DEFAULTS)})")
    out = {k: bool(v) for k, v in options.items() if k == "enable_backward"}
    for key, none_ok in (("fuse_fp", False), ("default_grid_stride", True)):
        if key in options:
            value = options[key]
            if not (isinstance(value, (bool, np.bool_)) or (none_ok and value is None)):
                raise ValueError(f"{where}: {key} must be a bool{' or None' if none_ok else ''}, got {value!r}")
            out[key] = None if value is None else bool(value)
    if "max_unroll" in options:
        value = options["max_unroll"]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{where}: max_unroll must be a non-negative int, got {value!r}")
        out["max_unroll"] = int(value)
    if "deterministic" in options:
        mode = options["deterministic"]
        if mode not in (DeterministicMode.NOT_GUARANTEED, False):
            raise NotImplementedError(f"{where}: deterministic={mode!r} is not available: xsim's atomics are not "
                                      "ordered; only DeterministicMode.NOT_GUARANTEED is")
        out["deterministic"] = DeterministicMode.NOT_GUARANTEED
    return out


def _module_name(module) -> str:
    """The module an options call is about: a name, a Python module, or (None) the caller's module."""
    if module is None:
        return sys._getframe(2).f_globals.get("__name__", "__main__")
    return module if isinstance(module, str) else module.__name__


def set_module_options(options: dict, module=None) -> None:
    """Set compile options of a module's kernels (default: the calling Python module): ``enable_backward``
    (a kernel's own ``enable_backward=`` overrides it), ``max_unroll``, ``default_grid_stride``, ``fuse_fp`` and
    ``deterministic`` (see ``_checked_options``)."""
    options = _checked_options(options, "set_module_options")
    name = _module_name(module)
    _MODULE_OPTIONS.setdefault(name, {}).update(options)
    from .module import _EVERY_MODULE
    for m in list(_EVERY_MODULE):
        if m.options_name == name:
            m.invalidate()


def get_module_options(module=None) -> dict:
    """The compile options of a module (default: the calling Python module), defaults included."""
    return {**_OPTION_DEFAULTS, **_MODULE_OPTIONS.get(_module_name(module), {})}


class ModuleOptions(MutableMapping):
    """A module's compile options as Warp's ``module.options`` gives them: read, they are
    :func:`get_module_options`; written (``kernel.module.options["enable_backward"] = True``, ``update``), they
    are :func:`set_module_options`, checked the same way and taking effect at the module's next build. Deleting
    an option gives it back its default."""

    def __init__(self, module_name: str):
        self.module_name = module_name

    def __getitem__(self, key):
        return get_module_options(self.module_name)[key]

    def __setitem__(self, key, value):
        set_module_options({key: value}, self.module_name)

    def __delitem__(self, key):
        if key not in _OPTION_DEFAULTS:
            raise KeyError(key)
        set_module_options({key: _OPTION_DEFAULTS[key]}, self.module_name)

    def __iter__(self):
        return iter(_OPTION_DEFAULTS)

    def __len__(self):
        return len(_OPTION_DEFAULTS)

    def copy(self) -> dict:
        """The options as a plain dict (as ``dict.copy`` gives Warp's)."""
        return get_module_options(self.module_name)

    def __repr__(self):
        return repr(get_module_options(self.module_name))
