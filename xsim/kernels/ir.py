"""Typed SSA IR of a kernel: values are assigned once; control flow is structured.

A kernel body is a ``Block`` of statements:

- ``Op``: one operation producing at most one new ``Var`` (``out``) from existing ones.
- ``If``: a condition, two blocks and the ``phis`` that merge values assigned in them.
- ``Loop``: a dynamic loop with ``carried`` values (``var`` takes ``init`` on entry and ``next``
  after each iteration), a condition block and a body. ``break``/``continue``/``return`` are
  already lowered to boolean flags by the frontend, so blocks have a single exit.

Because every assignment, alias and component write makes a new ``Var``, the adjoint of a block
is the adjoints of its statements in reverse order, and aliasing cannot share state by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import types as T

_next_id = 0


@dataclass(eq=False)
class Var:
    """An SSA value. ``const`` holds the Python value of compile-time constants; ``weak`` marks
    untyped Python literals that adopt the type of the operand they meet."""

    type: Any
    const: Any = None
    weak: bool = False
    hint: str = ""
    id: int = field(default=-1)

    def __post_init__(self):
        global _next_id
        if self.id < 0:
            _next_id += 1
            self.id = _next_id

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def __repr__(self):
        return f"%{self.id}{'=' + repr(self.const) if self.is_const else ''}"


@dataclass(eq=False)
class Op:
    """``out = kind(args; attrs)``. Kinds and their attrs are documented in ``codegen_ops.py``."""

    kind: str
    out: Var | None
    args: list[Var]
    attrs: dict = field(default_factory=dict)
    line: int = 0


@dataclass(eq=False)
class Block:
    stmts: list = field(default_factory=list)


@dataclass(eq=False)
class If:
    cond: Var
    then: Block
    orelse: Block
    phis: list[tuple[Var, Var, Var]] = field(default_factory=list)  # (out, then_value, else_value)
    line: int = 0


@dataclass(eq=False)
class Carried:
    var: Var          # the value inside the loop (the phi)
    init: Var         # its value on entry
    next: Var | None  # its value after one iteration (filled in once the body is built)
    # how the adjoint recovers var at iteration k: replay | induction | false (a flag, false while the
    # body runs) | unread (the loop variable's value after the loop: the body never reads it)
    restore: str = "replay"


@dataclass(eq=False)
class Loop:
    carried: list[Carried]
    cond_block: Block
    cond: Var | None
    body: Block
    induction: tuple[Var, Var, Var] | None = None  # (var, start, step) of a range loop
    line: int = 0
    id: int = 0


# The op kinds that read an array and those that write one (codegen_ops.py): element loads, stores and atomics,
# and their tile forms (builtins_tile.py). Every analysis of what a kernel reads and writes goes by these.
ARRAY_LOADS = frozenset({"load", "tile_load"})
ARRAY_WRITES = frozenset({"store", "atomic", "tile_store", "tile_atomic"})
ARRAY_ACCESSES = ARRAY_LOADS | ARRAY_WRITES
TILE_ACCESSES = frozenset({"tile_load", "tile_store", "tile_atomic"})


def walk(block: Block, parts: tuple[str, ...] = ("fwd", "replay", "grad")):
    """Every statement of ``block`` and of the blocks nested in it, in program order; of a custom-gradient
    call, the blocks named in ``parts`` (("fwd",): what the forward pass runs)."""
    for s in block.stmts:
        yield s
        if isinstance(s, Op) and s.kind in ("custom", "grad_of"):
            for part in parts:
                if s.attrs.get(part) is not None:
                    yield from walk(s.attrs[part], parts)
        elif isinstance(s, If):
            yield from walk(s.then, parts)
            yield from walk(s.orelse, parts)
        elif isinstance(s, Loop):
            yield from walk(s.cond_block, parts)
            yield from walk(s.body, parts)


def defined_vars(block: Block) -> list[Var]:
    """The values defined inside ``block`` (op outputs, phis and loop-carried values)."""
    out = []
    for s in walk(block):
        if isinstance(s, Op):
            if s.out is not None:
                out.append(s.out)
            if s.kind == "custom":
                out.extend(s.attrs["adj_rets"])
        elif isinstance(s, If):
            out.extend(p[0] for p in s.phis)
        elif isinstance(s, Loop):
            out.extend(c.var for c in s.carried)
    return out


@dataclass
class Param:
    name: str
    type: Any
    var: Var


@dataclass
class KernelIR:
    """The frontend's result for one kernel."""

    name: str
    params: list[Param]
    body: Block
    tid_dims: int                        # 0 if tid() is not used, else how many indices it yields
    reads: set[str] = field(default_factory=set)    # paths of the arrays read (``a``, ``s.inner.arr``)
    writes: set[str] = field(default_factory=set)   # paths of the arrays written (stores and atomics)
    adjoint_error: str | None = None     # why the adjoint cannot be generated, if it cannot
    skipped_funcs: list[str] = field(default_factory=list)  # funcs with differentiable=False it calls
    handles: dict[str, str] = field(default_factory=dict)  # parameters used as mesh / hash grid ids
    source_file: str = ""
    first_line: int = 0
    grid_stride: bool = True             # CUDA entry points loop in grid strides (else one thread per index)
    # [parameter index, array axis, tid component] of each array every thread indexes by its tid()
    # (module.tid_indexed): what a launch's shape check compares with dim
    tid_indexed: list = field(default_factory=list)


class ArrayLabels:
    """Where a kernel's array values come from, for the launch's read/write lists, messages, debug-mode bounds
    errors and the adjoint's read-after-write checks. ``label(arr)`` is the access path from a kernel parameter
    (``a``, ``s.arr``, ``s.inner.arr``): one array reached several times (through locals, funcs, nested
    fields) has one label. A view (``a[i]``, ``a[lo:hi]``) is labelled as the array it views. ``traced`` holds
    the arrays and structs a path from a parameter reaches; any other (a struct a branch chose) is named by
    its local (``h.a``) or its value (``v9``), never by a parameter's path. An element of an array of structs
    holding arrays is ``a[]`` (any of its elements: ``a[].values`` names the ``values`` array of each). A
    ``call`` with a ``grad_view`` (``mesh_get(id)``: arrays a native handle names) is traced too, its gradient
    being that view's, and goes by ``mesh_get(param)`` when the id is the kernel parameter ``param`` (a launch
    finds the object by that id: ``launch.slot_array``), else by ``mesh_get(<v9>)``, which names no argument
    (``unresolved``)."""

    def __init__(self, kir: KernelIR):
        self.view_base: dict[int, Var] = {}  # a view -> the array it views
        self.traced: set[int] = set()  # arrays and structs that are parameters or reached from one
        self.names: dict[int, str] = {}
        for p in kir.params:
            if isinstance(p.type, T.ArrayType) or T.is_struct(p.type):
                self.traced.add(p.var.id)
                self.names[p.var.id] = p.name
        self.from_handle: set[int] = set()  # values reached from a grad_view call
        self.unresolved: set[int] = set()  # those of them whose id is no kernel parameter
        for s in walk(kir.body):
            if isinstance(s, Op) and s.kind == "call" and "grad_view" in s.attrs:
                self.traced.add(s.out.id)
                self.from_handle.add(s.out.id)
                param = s.attrs["handle_param"]
                if param is None:
                    self.unresolved.add(s.out.id)
                self.names[s.out.id] = f"{s.attrs['overload'].name}({param or f'<v{s.args[0].id}>'})"
                continue
            if not isinstance(s, Op) or s.kind not in ("slice", "subarray", "field_get", "field_set", "load"):
                continue
            base = s.args[0]
            if s.kind == "load" and not (T.is_struct(s.out.type) and s.out.type._has_arrays):
                continue
            for derived in (self.from_handle, self.unresolved):
                if base.id in derived:
                    derived.add(s.out.id)
            if s.kind == "load":
                self.names[s.out.id] = f"{self.label(base)}[]"
            elif s.kind in ("slice", "subarray"):
                self.view_base[s.out.id] = base
            elif s.kind == "field_set":
                # a copy of ``base`` with one field set: its other fields are base's (the frontend hands the
                # set one back itself when it is read), so it goes by base's path
                self.names[s.out.id] = self.label(base)
            elif isinstance(s.out.type, T.ArrayType) or T.is_struct(s.out.type):
                self.names[s.out.id] = f"{self.label(base)}.{s.attrs['field']}"
            else:
                continue
            if base.id in self.traced:
                self.traced.add(s.out.id)

    def label(self, arr: Var) -> str:
        """The name ``arr`` goes by (views and their array share one)."""
        while arr.id in self.view_base:
            arr = self.view_base[arr.id]
        return self.names.get(arr.id, arr.hint or f"v{arr.id}")

    def paths(self, arrays) -> set[str]:
        """The labels of those of ``arrays`` that a path from a parameter reaches (what a launch can find)."""
        return {self.label(a) for a in arrays if a.id in self.traced and a.id not in self.unresolved}
