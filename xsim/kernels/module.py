"""A module: the kernels of one Python module, compiled together in one compiler invocation.

The build runs the frontend on every kernel, decides which adjoints can be generated (and why
not, for the others), generates one C++ source and hands it to a target backend (``cpu.py`` or
``cuda.py``). Builds are cached on disk by ``cache.py``; a cached load needs no frontend at all.
"""

from __future__ import annotations

import hashlib
import os
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import errors
from .. import types as T
from ..errors import CompileError
from . import ir
from .adjoint_reads import adjoint_reads
from .codegen import module_halves
from .frontend import Frontend
from .ir import If, Loop, Op

_MODULES: dict[str, Module] = {}
_EVERY_MODULE: weakref.WeakSet = weakref.WeakSet()  # named and unique: what an options change invalidates
NATIVE_DIR = Path(__file__).parent / "native"


def get_module(name: str, options_name: str | None = None) -> Module:
    """The module named ``name`` (its kernels compile together), made on first use; ``options_name``: the
    module whose options its kernels take (a launch specialisation's unit takes its kernel's module's)."""
    m = _MODULES.get(name)
    if m is None:
        m = _MODULES[name] = Module(name, options_name, keep_latest=True)
    return m


@dataclass
class KernelMeta:
    """What launch and the tape need to know about a compiled kernel (kept in the cache)."""

    name: str
    tid_dims: int
    adjoint_error: str | None
    arrays: list[str]           # array labels by the id used in debug-mode errors
    reads: list[str]
    writes: list[str]
    inplace: list[str]          # arrays read before being written (the tape snapshots them)
    skipped_funcs: list[str] = field(default_factory=list)  # funcs with differentiable=False (tape warns)
    refused: list | None = None  # (error class name, message, file, line, col, source line): not built
    handles: dict = field(default_factory=dict)  # parameter -> the geometry object kind its id must name
    replays_writes: bool = False  # the adjoint replays some writes, on copies of the in-place arrays
    # [written label, label read after it, "file:line" of that read]: two arrays to the kernel's adjoint, so
    # wrong if a launch passes one memory as both (the tape refuses that launch's backward)
    rereads_across: list = field(default_factory=list)
    grid_stride: bool = True  # the CUDA entry points loop in grid strides; else the grid must cover the launch
    # [parameter index, array axis, tid component] of each unguarded ``a[tid]`` access (``tid_indexed``):
    # launch refuses a dim whose component is larger than that axis
    tid_indexed: list = field(default_factory=list)
    # {read label: labels whose gradients need its values, or ["*"]} (adjoint_reads.py); None: all are needed
    adjoint_reads: dict | None = None

    def compile_error(self, kernel) -> CompileError | None:
        """The error the compiler refused ``kernel`` with, or None when it was built. The metadata (maybe
        from the cache) says whether; the frontend runs again for the error itself, so that it names
        the kernel's file as it is now, not the checkout that filled the cache with the same code."""
        if self.refused is None:
            return None
        try:
            build_ir(kernel)
        except CompileError as e:
            return e
        cls = getattr(errors, self.refused[0], None)
        if not (isinstance(cls, type) and issubclass(cls, CompileError)):
            cls = CompileError
        return cls(*self.refused[1:])


def frontend_for(kernel, cls: type[Frontend] = Frontend) -> Frontend:
    """A frontend (of class ``cls``) set up to build ``kernel`` with its module's options."""
    from .kernel import get_module_options
    return cls(kernel.pyfunc, {"max_unroll": get_module_options(kernel.module_name)["max_unroll"],
                               "enable_backward": kernel.enable_backward})


def build_ir(kernel) -> ir.KernelIR:
    """The frontend's IR of ``kernel`` (a CompileError where it refuses it)."""
    return frontend_for(kernel).build_kernel(kernel.symbol, dict(kernel.params) if kernel.bound else None)


class Module:
    """The live kernels of one module. A kernel nothing refers to any more (a factory's, a redefined
    one) drops out of the next build; kernels with the same symbol (same name and content) are one.
    A named module (``get_module``) keeps the latest kernel of each name alive, as Warp's modules keep
    theirs: its hash and build do not depend on whether the Python module that defined them is still
    referenced, or on when the garbage collector ran."""

    def __init__(self, name: str, options_name: str | None = None, keep_latest: bool = False):
        self.name = name
        self.options_name = options_name or name  # the module whose options (set_module_options) apply
        self._live: weakref.WeakSet = weakref.WeakSet()
        self._latest: dict | None = {} if keep_latest else None
        self._kernels: list | None = None
        self.builds: dict[tuple[str, bool], object] = {}
        self._hash: str | None = None
        _EVERY_MODULE.add(self)

    @property
    def options(self):
        """This module's compile options, defaults included (Warp's ``module.options``): a mapping that
        writes through to ``set_module_options``, so a change applies to its kernels' next build."""
        from .kernel import ModuleOptions
        return ModuleOptions(self.options_name)

    def add(self, kernel):
        self._live.add(kernel)
        if self._latest is not None:
            self._latest[kernel.key] = kernel
        self._kernels = None
        self.builds.clear()
        self._hash = None

    @property
    def kernels(self) -> list:
        """The kernels the next build compiles, one per symbol, in symbol order (held until the next
        change, so a build and its cache key see the same list)."""
        if self._kernels is None:
            by_symbol = {k.symbol: k for k in list(self._live) if not k.generic}
            self._kernels = [by_symbol[s] for s in sorted(by_symbol)]
        return self._kernels

    def symbols(self) -> set[str]:
        return {k.symbol for k in self.kernels}

    def fuse_fp(self) -> bool:
        """The ``fuse_fp`` module option of this module's kernels (compile flags, so part of the cache key)."""
        from .kernel import get_module_options
        return get_module_options(self.options_name)["fuse_fp"]

    def content_hash(self) -> str:
        if self._hash is None:
            h = hashlib.blake2b(digest_size=20)
            for k in self.kernels:
                h.update(k.symbol.encode())
                h.update(k.content_hash().encode())
            self._hash = h.hexdigest()
        return self._hash

    def load(self, device=None, block_dim=None) -> bool:
        """Build (or load from the cache) this module for ``device`` now, forwards and adjoints, as Warp's
        ``Module.load``; raises the CompileError of the first of its kernels the compiler refuses (``block_dim`` is accepted, unused)."""
        from .. import config
        from ..device import get_device
        dev = get_device(device)
        for k in self.kernels:
            built = k.module_build(dev, config.mode == "debug")
            err = built.metas[k.symbol].compile_error(k)
            if err is not None:
                raise err
        if self.kernels and dev.is_cpu:
            built.backward  # noqa: B018 - as Warp's, a load builds the adjoints too (cpu.CpuModule)
        return True

    def hash_module(self) -> str:
        """Warp's module hash: the same for the same kernel sources, funcs, constants and struct layouts, in
        whatever files they are (the cache key, :meth:`content_hash`, also holds the files)."""
        h = hashlib.blake2b(digest_size=20)
        for k in self.kernels:
            h.update(k.key.encode())
            h.update(k.code_hash().encode())
        return h.hexdigest()

    def get_module_hash(self) -> str:
        """Warp 1.19's name of :meth:`hash_module`; computing it fixes each kernel's ``grid_stride``."""
        return self.hash_module()

    def invalidate(self):
        """Forget built code and hashes (a func or constant the kernels use may have changed)."""
        for k in list(self._live):
            k._hash = None
        self._kernels = None
        self.builds.clear()
        self._hash = None

    def generate(self, target: str, debug: bool, front: ModuleIR | None = None) -> tuple[str, dict[str, KernelMeta]]:
        """Run the frontend over every kernel and generate the module's source for ``target``. A
        kernel the frontend refuses is left out, its error kept in its metadata for its launch."""
        sources, metas = self.generate_parts(target, debug, 0, front)
        return sources[0], metas

    def generate_parts(self, target: str, debug: bool, part_chars: int, front: ModuleIR | None = None,
                       half: str = "both") -> tuple[list[str], dict[str, KernelMeta]]:
        """``generate``, as translation units of about ``part_chars`` characters of kernel code (0: one
        unit) that compile separately and link into one library. ``front``: this module's
        :meth:`frontend` pass, when the caller generates several variants (debug, target) from one;
        ``half``: the forward or backward entry points alone (``codegen.module_sources``)."""
        (sources,), metas = self.generate_halves(target, debug, part_chars, front, (half,))
        return sources, metas

    def generate_halves(self, target: str, debug: bool, part_chars: int, front: ModuleIR | None,
                        halves: tuple[str, ...]) -> tuple[list[list[str]], dict[str, KernelMeta]]:
        """:meth:`generate_parts` for each of ``halves`` from one codegen pass (``codegen.module_halves``)."""
        front = front or self.frontend()
        sources, labels = module_halves(front.irs, front.structs, debug, target, part_chars, halves)
        metas = {name: replace(meta) for name, meta in front.metas.items()}  # the labels are this variant's
        for name, arrays in labels.items():
            metas[name].arrays = arrays
        return sources, metas

    def frontend(self, kernels: list | None = None) -> ModuleIR:
        """The frontend's pass over every kernel (or over ``kernels``, the list :attr:`kernels` was when an
        earlier build took it), which every generated variant of the module shares."""
        irs, metas, structs = [], {}, []
        for k in self.kernels if kernels is None else kernels:
            try:
                kir = build_ir(k)
            except CompileError as e:
                metas[k.symbol] = KernelMeta(k.key, 0, None, [], [], [], [],
                                             refused=[type(e).__name__, e.message, e.file, e.line, e.col,
                                                      e.source_line])
                continue
            for p in kir.params:
                _collect_structs(p.type, structs)
            for s in ir.walk(kir.body):
                if isinstance(s, Op) and s.out is not None:
                    _collect_structs(s.out.type, structs)
            kir.grid_stride = k.grid_stride
            kir.tid_indexed = tid_indexed(kir)
            kir.adjoint_error = None if k.enable_backward else (
                f"kernel '{k.key}' has enable_backward=False (its own or its module's option)")
            if kir.adjoint_error is None:
                kir.adjoint_error = adjoint_refusal(kir)
            inplace = sorted(kir.reads & kir.writes)
            replays = kir.adjoint_error is None and any(
                isinstance(s, Op) and s.attrs.get("replayed") for s in ir.walk(kir.body))
            metas[k.symbol] = KernelMeta(k.key, kir.tid_dims, kir.adjoint_error, [], sorted(kir.reads),
                                         sorted(kir.writes), inplace, kir.skipped_funcs,
                                         handles=kir.handles, replays_writes=replays,
                                         rereads_across=_rereads_across(kir), grid_stride=kir.grid_stride,
                                         tid_indexed=kir.tid_indexed,
                                         adjoint_reads=adjoint_reads(kir) if kir.adjoint_error is None else None)
            irs.append(kir)
        return ModuleIR(irs, metas, structs)


@dataclass
class ModuleIR:
    """A module's kernels through the frontend: the IR of those it accepted, the metadata of all (the refused
    ones' say why), and the structs their code uses, in definition order."""

    irs: list[ir.KernelIR]
    metas: dict[str, KernelMeta]
    structs: list


def _collect_structs(t, out: list):
    if isinstance(t, T.ArrayType):
        t = t.dtype
    if T.is_struct(t) and all(s._ctype != t._ctype for s in out):  # one definition per C++ type
        for ft in t._fields.values():
            _collect_structs(ft, out)
        out.append(t)


def adjoint_refusal(kir: ir.KernelIR) -> str | None:
    """Why this kernel's adjoint would be wrong, or None. The adjoint replays the forward without
    its stores, so it cannot recover a value an atomic returned; an array the kernel reads back after
    writing it has its writes replayed too (see ``_replay_writes``)."""
    arrays = ir.ArrayLabels(kir)
    labels = arrays.label
    for s in ir.walk(kir.body):
        # a stack array has no gradient buffer: what flows through it would be lost, so no adjoint at all (Warp's
        # kernel zeros() is not differentiable either)
        if isinstance(s, Op) and s.kind == "local_array":
            return (f"{kir.source_file}:{s.line}: the stack array '{labels(s.out)}' made by zeros() here has no "
                    "gradient, so gradients cannot flow through it; launch this kernel without adjoint, or keep "
                    "differentiable values in vectors or in arrays passed to the kernel")
    for s in ir.walk(kir.body):
        # an array value the adjoint cannot trace to a parameter has no gradient buffer to use, and guessing
        # which one it is would get read-after-write and overlap wrong
        if isinstance(s, Op) and s.kind in ir.ARRAY_ACCESSES and s.args[0].id not in arrays.traced:
            return (f"{kir.source_file}:{s.line}: array '{labels(s.args[0])}' is not a kernel parameter or a "
                    "field of one here (which array it is depends on a branch, a loop or where() at run time), "
                    "so its gradient cannot be tracked; index the parameter directly")
    for s in ir.walk(kir.body):
        # a copy of the array from before the launch (what the tape gives an in-place adjoint) cannot stand in
        # for the arrays that elements of an array of structs refer to
        if isinstance(s, Op) and s.kind in ir.ARRAY_WRITES and "[]" in labels(s.args[0]) and \
                labels(s.args[0]) in kir.reads:
            return (f"{kir.source_file}:{s.line}: array '{labels(s.args[0])}' (the arrays that elements of an array "
                    "of structs refer to) is both read and written by this kernel, so its adjoint would need the "
                    "values from before the launch, which no copy can give for those arrays; write the results "
                    "into other arrays")
        # the adjoint reads a mesh's arrays through the mesh, so it cannot be handed their values from before the
        # launch (as it is a written parameter's copy), and the values such a write overwrites are lost
        if isinstance(s, Op) and s.kind in ir.ARRAY_WRITES and s.args[0].id in arrays.from_handle:
            return (f"{kir.source_file}:{s.line}: array '{labels(s.args[0])}' is written through a mesh id, which "
                    "the backward pass cannot differentiate (it cannot recover the values overwritten); pass the "
                    "array as a kernel parameter to write it")
        # the tape checks that what a launch read is not overwritten before backward; it finds a mesh's arrays
        # by an id that is a kernel parameter only
        if isinstance(s, Op) and s.kind in ir.ARRAY_LOADS and s.args[0].id in arrays.unresolved and \
                T.is_float(getattr(s.args[0].type.dtype, "_scalar", s.args[0].type.dtype)):
            return (f"{kir.source_file}:{s.line}: array '{labels(s.args[0])}' is read through a mesh id that is not "
                    "a kernel parameter, so the tape cannot check that it is unchanged when the backward pass runs; "
                    "pass the mesh id as a kernel parameter")
    for s in ir.walk(kir.body):
        if isinstance(s, Op) and s.kind == "atomic" and s.attrs["fn"] in ("atomic_cas", "atomic_exch") and \
                T.is_float(s.out.type):
            return (f"{kir.source_file}:{s.line}: {s.attrs['fn']}() on the float array '{labels(s.args[0])}' has no "
                    "adjoint (Warp does not differentiate it either): the backward pass cannot know which thread's "
                    "value ended up stored")
    used = set()
    for s in ir.walk(kir.body):
        if isinstance(s, Op):
            used.update(a.id for a in s.args)
            if s.kind == "custom":
                used.update(x.id for pair in s.attrs["accums"] for x in pair)
        elif isinstance(s, If):
            used.add(s.cond.id)
            used.update(x.id for _, a, b in s.phis for x in (a, b))
        elif isinstance(s, Loop):
            used.update(c.init.id for c in s.carried)
            used.update(c.next.id for c in s.carried if c.next is not None)
            if s.cond is not None:
                used.add(s.cond.id)
    for s in ir.walk(kir.body):
        if isinstance(s, Op) and s.kind in ("atomic", "tile_atomic") and s.out.id in used and T.is_float(
                getattr(s.out.type, "_scalar", s.out.type)):
            return (f"{kir.source_file}:{s.line}: the value returned by {s.attrs['fn']}() is used, and the backward "
                    "pass cannot replay it")
    return _replay_writes(kir, labels)


def _replay_writes(kir: ir.KernelIR, label) -> str | None:
    """Marks the stores and atomics the adjoint must replay (``attrs["replayed"]``): those into an array
    the kernel reads back after writing it. The tape hands the adjoint a copy of such an array as it was
    before the launch, so replaying every access in order gives each read its forward value. That holds
    only where each access runs once in the replay: one inside a loop (whose adjoint replays iterations)
    or a func with a custom adjoint refuses the kernel instead (file:line of the read)."""
    reread: dict[str, int] = {}
    _read_after_write(kir.body, label, set(), reread, {})
    if not reread:
        return None
    nested = {label(s.args[0]) for s in _accesses_in_loops_or_customs(kir.body)}
    for name, line in reread.items():
        if name in nested:
            return (f"{kir.source_file}:{line}: array '{name}' is read after this kernel wrote it, inside a loop "
                    "or a func with a custom adjoint; the backward pass cannot replay those writes to recover "
                    "the value read. Write the result to a separate array, or keep the value in a local variable")
    for s in ir.walk(kir.body):
        if isinstance(s, Op) and s.kind in ir.ARRAY_WRITES and label(s.args[0]) in reread:
            s.attrs["replayed"] = True
    return None


def _accesses_in_loops_or_customs(block, nested: bool = False):
    for s in block.stmts:
        if isinstance(s, Op):
            if nested and s.kind in ir.ARRAY_ACCESSES:
                yield s
            if s.kind in ("custom", "grad_of"):
                for key in ("fwd", "replay", "grad"):
                    if s.attrs.get(key) is not None:
                        yield from _accesses_in_loops_or_customs(s.attrs[key], True)
        elif isinstance(s, If):
            yield from _accesses_in_loops_or_customs(s.then, nested)
            yield from _accesses_in_loops_or_customs(s.orelse, nested)
        elif isinstance(s, Loop):
            yield from _accesses_in_loops_or_customs(s.cond_block, True)
            yield from _accesses_in_loops_or_customs(s.body, True)


def tid_indexed(kir: ir.KernelIR) -> list[list[int]]:
    """[parameter index, array axis, tid component] of each array parameter that the kernel indexes on
    that axis with a component of ``tid()`` itself (not an expression of it) in a load, store or atomic at
    the top level of its body: one every thread runs, whatever the data. Such an access is out of bounds
    for every launch whose ``dim`` on that component exceeds the axis, so ``launch`` refuses those in
    every mode. An access under an ``if`` (``if i < n: a[i]``), in a loop or after an early ``return`` is
    not counted: a launch larger than the array is legal there. A smaller ``dim`` is always legal."""
    params = {p.var.id: k for k, p in enumerate(kir.params) if type(p.type) is T.ArrayType}
    tids: dict[int, int] = {}
    found: set[tuple[int, int, int]] = set()
    for s in kir.body.stmts:
        if not isinstance(s, Op):
            continue
        if s.kind == "tid":
            tids[s.out.id] = s.attrs["dim"]
        elif s.kind in ("load", "store", "atomic") and s.args[0].id in params:
            index = s.args[1:] if s.kind == "load" else s.args[1:1 + s.attrs["ndim"]]
            for axis, v in enumerate(index):
                if v.id in tids:
                    found.add((params[s.args[0].id], axis, tids[v.id]))
    return [list(t) for t in sorted(found)]


def _rereads_across(kir: ir.KernelIR) -> list:
    """``KernelMeta.rereads_across`` of a kernel the adjoint is generated for."""
    if kir.adjoint_error is not None or not kir.reads or not kir.writes:
        return []
    across: dict[tuple[str, str], int] = {}
    _read_after_write(kir.body, ir.ArrayLabels(kir).label, set(), {}, across)
    return [[w, r, f"{kir.source_file}:{line}"] for (w, r), line in sorted(across.items())]


def _read_after_write(block, label, written: set, reread: dict, across: dict):
    """Collects into ``reread`` the arrays (label -> line of the first such read) read after a write, and into
    ``across`` the (written label, other label read after it) pairs -> line of that read."""
    for s in block.stmts:
        if isinstance(s, Op):
            if s.kind in ir.ARRAY_LOADS:
                name = label(s.args[0])
                if name in written:
                    reread.setdefault(name, s.line)
                for w in written:
                    if w != name:
                        across.setdefault((w, name), s.line)
            if s.kind in ir.ARRAY_WRITES:
                written.add(label(s.args[0]))
            if s.kind == "custom":
                _read_after_write(s.attrs["fwd"], label, written, reread, across)
        elif isinstance(s, If):
            w2 = set(written)
            _read_after_write(s.then, label, written, reread, across)
            _read_after_write(s.orelse, label, w2, reread, across)
            written |= w2
        elif isinstance(s, Loop):
            # a loop body runs again after its own writes: scan it twice
            for _ in range(2):
                _read_after_write(s.body, label, written, reread, across)


def num_threads() -> int:
    v = os.environ.get("XSIM_NUM_THREADS")
    return max(1, int(v)) if v else (os.cpu_count() or 1)


def pending_modules(prefix: str, device, debug: bool, backward: bool = False) -> list[Module]:
    """The modules named ``prefix...`` whose next launch on ``device`` compiles: not loaded in this
    process and not in the on-disk cache (so a caller can show compiling as its own phase). ``backward``:
    also those whose first backward launch on the CPU would compile their adjoints (``cpu.CpuModule``)."""
    from . import cache

    out = []
    for m in list(_MODULES.values()):
        if not m.name.startswith(prefix) or not m.kernels:
            continue
        built = m.builds.get((device.name, debug))
        if device.is_cpu:
            from .cpu import adjoints_pending, entry_key
            if built is None:
                found = cache.lookup(entry_key(m, debug), ".so")
                pending = found is None or backward and adjoints_pending(m, debug, found[1])
            else:
                pending = backward and built.backward_pending()
        elif built is not None:
            continue
        else:
            from ..device import require_cuda
            from .cuda import arch_for, cached_cubin
            pending = cached_cubin(m, debug, arch_for(require_cuda(device).compute_capability(device.ordinal))) is None
        if pending:
            out.append(m)
    return out


def build_modules(modules: list[Module], device, debug: bool, backward: bool = False):
    """Compile (or load) ``modules`` for ``device`` now rather than at their first launch; ``backward``:
    their adjoints too (on the CPU a separate library, otherwise built at the first backward launch)."""
    for m in modules:
        built = m.kernels[0].module_build(device, debug)
        if backward and device.is_cpu:
            built.backward  # noqa: B018 - the property builds or loads the adjoints' library
