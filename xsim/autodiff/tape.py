"""``Tape``: a list of records, each knowing its own backward.

``with xsim.Tape() as tape:`` records every kernel launch and every tape-aware array op;
``tape.backward(loss)`` runs their adjoints in reverse order. A record refuses to run its
backward when an array it read has been overwritten since (its version counter moved), because
the gradient would be wrong; in debug mode the overwrite itself raises at once.

What the tape cannot see: a write through ``array.numpy()`` (or a numpy/torch view of the same
memory) changes values without a version bump. Debug mode keeps a checksum of every array a
record reads and ``backward`` refuses when one changed; release mode cannot tell. A tape records
the launches of the thread that opened it only (``xsim.kernels.recording``).
"""

from __future__ import annotations

import copy
import hashlib
import os
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .. import capture, config
from .. import types as T
from ..array import _byte_range, held_arrays, zeros
from ..array import array as Array
from ..errors import CompileError
from ..indexedarray import indexedarray
from ..kernels import launch as _launch
from ..kernels import recording
from ..kernels.adjoint_reads import values_needed


class LaunchRecord:
    """One recorded launch: the kernel, its prepared launch data, shape and arguments, snapshots
    (label -> copy of an in-place array before the launch), the (label, array, version after the
    launch) of what it read and, in debug mode, (label, array, version, digest) checksums of reads.
    A plain slotted class: a rollout records thousands of these."""

    __slots__ = ("checksums", "kernel", "prep", "read_versions", "refusal", "shape", "snapshots", "values")

    def __init__(self, kernel, prep, shape, values, snapshots, read_versions=(), checksums=()):
        self.kernel, self.prep, self.shape, self.values = kernel, prep, shape, values
        self.snapshots, self.read_versions, self.checksums = snapshots, read_versions, checksums
        self.refusal = None  # why this launch's adjoint would be wrong (see _aliased_reads)

    def what(self) -> str:
        return f"kernel '{self.kernel.key}'"

    def written(self):
        return _launch.labelled_arrays(self.prep.write_slots, self.values)

    def arrays(self):
        prep, values = self.prep, self.values
        if prep.arrays_flat:  # no struct holding arrays, no indexed array: the arrays are these parameters
            return [values[i] for i in prep.array_params]
        out = []
        for (_, t), v in zip(self.kernel.params, self.values):
            if isinstance(t, T.ArrayType):
                out.extend(_array_and_referred(v, t))
            elif T.is_struct(t) and t._has_arrays:
                out.extend(_struct_arrays(v, t))
        return out

    def backward(self, tape: Tape):
        prep = self.prep
        meta = prep.meta
        for a in self.arrays():
            if a._requires_grad:
                break
        else:
            return
        if meta.adjoint_error is not None:
            if not self.kernel.enable_backward:
                tape.skipped.append(self.kernel.key)
                warnings.warn(f"tape.backward skipped kernel '{self.kernel.key}' (enable_backward=False): no gradient "
                              "flows through it", stacklevel=3)
                return
            raise CompileError(f"kernel '{self.kernel.key}' cannot be differentiated: {meta.adjoint_error}")
        for func in meta.skipped_funcs:
            tape.skipped.append(f"{self.kernel.key}/{func}")
            warnings.warn(f"tape.backward: kernel '{self.kernel.key}' calls func '{func}' (differentiable=False): "
                          "no gradient flows through its result", stacklevel=3)
        if self.refusal is not None:
            raise RuntimeError(f"tape.backward: {self.refusal}")
        for label, arr, version in self.read_versions:
            if arr.version != version:
                raise RuntimeError(
                    f"tape.backward: array '{label}' read by kernel '{self.kernel.key}' was overwritten afterwards "
                    f"(last by '{arr.last_writer}'), so its gradient would be wrong; write each step into a new "
                    "array (or a tape-aware copy) instead of overwriting one the tape still needs")
        values = self.values
        for label, snap in self.snapshots.items():
            live = _launch.resolve_label(label, self.kernel.params, self.values)
            if live is not None and live.requires_grad:  # the gradient it has now: one set after the launch counts
                snap.grad = live.grad
                snap.retain_grad = live.retain_grad
            if meta.replays_writes:  # the adjoint writes into its copy again: keep the snapshot for a next backward
                scratch = snap.clone_untracked()
                scratch.grad = snap.grad
                scratch.retain_grad = snap.retain_grad
                snap = scratch
            values = _substitute(self.kernel.params, values, label, snap)
        _launch.run_backward(prep, self.shape, values)


def _aliased_reads(key: str, meta, written, read):
    """The labels kernel ``key`` reads (of the ``read`` (label, array) pairs) whose memory the launch also writes
    under another label (the kernel was compiled taking them for two arrays), and why its adjoint would be
    wrong, or None: it reads one of them after writing the other, which the adjoint cannot replay."""
    spans = [(w, *_byte_range(arr)) for w, arr in written]
    aliased, refusal = [], None
    for r, arr in read:
        lo, hi = _byte_range(arr)
        for w, wlo, whi in spans:
            if lo < whi and wlo < hi and w != r:
                aliased.append(r)
                where = next((at for w2, r2, at in meta.rereads_across if w2 == w and r2 == r), None)
                if refusal is None and where is not None:
                    refusal = (f"kernel '{key}' was launched with overlapping memory as '{w}' and '{r}', and it reads "
                               f"'{r}' after writing '{w}' ({where}); its adjoint takes them for two arrays, so the "
                               "gradient would be wrong: pass separate arrays")
    return aliased, refusal


def _substitute(params, values, label: str, snap):
    """``values`` with the array named ``label`` ("x" or "s.field") replaced by ``snap``; structs
    on the way are shallow-copied, so the user's objects are untouched."""
    head, _, rest = label.partition(".")
    out = list(values)
    for i, (name, _) in enumerate(params):
        if name == head:
            out[i] = _replace_path(out[i], rest.split(".") if rest else [], snap)
    return out


def _replace_path(obj, path, snap):
    if not path:
        return obj._over(snap) if isinstance(obj, indexedarray) else snap
    clone = copy.copy(obj)
    # assigned as a field (not object.__setattr__): that drops the packed bytes the copy took from the
    # original, which name the live array, not the snapshot
    setattr(clone, path[0], _replace_path(getattr(obj, path[0]), path[1:], snap))
    return clone


def _struct_arrays(v, t):
    """The arrays struct ``v`` (of type ``t``) holds, through nested structs and arrays' elements; kept on a
    value of a ``_packable`` type whose arrays' elements refer to no arrays (nothing then changes what it
    holds but assigning a field, which drops what was kept)."""
    if t._arrays_kept:
        kept = v._arrays
        if kept is None:
            kept = tuple(_walk_struct_arrays(v, t))
            object.__setattr__(v, "_arrays", kept)
        return kept
    return _walk_struct_arrays(v, t)


def _walk_struct_arrays(v, t):
    for f, ft in t._fields.items():
        fv = getattr(v, f)
        if isinstance(ft, T.ArrayType) and fv is not None:
            yield from _array_and_referred(fv, ft)
        elif T.is_struct(ft) and ft._has_arrays:
            yield from _struct_arrays(fv, ft)


def _array_and_referred(v, t):
    """Array ``v`` (an indexedarray's data) and, for an array of structs holding arrays, those its elements
    refer to."""
    yield v.data if isinstance(v, indexedarray) else v
    if T.is_struct(t.dtype) and t.dtype._has_arrays:
        yield from (a.data if isinstance(a, indexedarray) else a for a in held_arrays(v).values())


@dataclass
class OpRecord:
    """A tape-aware array op (clone, copy, assign, fill, zero): its name, the arrays it read and
    wrote, and its backward as a closure."""

    name: str
    backward_fn: object
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)
    read_versions: list = field(default_factory=list)
    checksums: list = field(default_factory=list)

    def what(self) -> str:
        return f"xsim.{self.name}"

    def written(self):
        for arr in self.writes:
            yield "destination", arr

    def arrays(self):
        yield from self.reads
        yield from self.writes

    def backward(self, tape: Tape):
        self.backward_fn()


def _differentiable(arr) -> bool:
    """Whether an array's values can carry a gradient: float components (structs: assumed so)."""
    scalar = getattr(arr.dtype, "_scalar", None)
    return scalar is None or T.is_float(scalar)


class Tape:
    """Records launches and array ops; ``backward`` runs their adjoints in reverse order."""

    def __init__(self):
        self.records: list = []
        self.scopes: list[tuple] = []  # (record index, name, metadata); (index, None, None) closes one
        self._kept_gradients: list = []  # what gradients held when reset() forgot the records
        self.skipped: list[str] = []
        self._on_grad_path: set[int] = set()  # ids of arrays computed from arrays that have grads
        self._checksummed = False  # a record holds debug-mode checksums of its reads
        self._warned: set[int] = set()
        self._thread = None  # the thread recording on this tape, while it records

    def __enter__(self):
        if self._thread is not None:
            where = "" if self._thread is threading.current_thread() else f" in thread '{self._thread.name}'"
            raise RuntimeError(f"this Tape is already recording{where}; a Tape records in one thread at a time "
                               "(give each thread its own Tape)")
        self._refuse_nesting()
        self._thread = threading.current_thread()
        recording.push(self)
        return self

    @staticmethod
    def _refuse_nesting():
        """Tape scopes do not nest (as in Warp): a launch would belong to two tapes' backward passes."""
        if recording.is_recording():
            raise RuntimeError("another Tape is already recording: tape scopes do not nest; end the outer "
                               "`with tape:` first, or record both parts on one tape")

    def __exit__(self, *exc):
        recording.pop(self)
        self._thread = None
        return False

    # -- recording --------------------------------------------------------------------------------

    def before_launch(self, kernel, prep, values):
        """Copy the arrays this launch both reads and writes, so its adjoint can read their old values: those
        the kernel reads and writes by one label, and those it reads whose memory it writes by another (one
        array passed twice). Returns what record_launch takes: the (label, array) pairs written and read, the
        copies by label, and why the adjoint would be wrong, or None."""
        meta, params = prep.meta, kernel.params
        written = _launch.labelled_arrays(prep.write_slots, values)
        read = _launch.labelled_arrays(prep.read_slots, values)
        if config.mode == "debug":
            for label, arr in written:
                self._check_overwrite(arr, kernel.key, label)
        snapshots, refusal = {}, None
        if meta.adjoint_error is None:
            aliased, refusal = _aliased_reads(kernel.key, meta, written, read) if written else ((), None)
            for label in (*meta.inplace, *aliased):
                if "[]" in label and refusal is None:  # no one copy can stand in for the elements' arrays
                    refusal = (f"kernel '{kernel.key}' reads array '{label}' (an array that elements of an array of "
                               "structs refer to) whose memory it also writes, so its adjoint would read the new "
                               "values; write the results into other arrays")
                arr = _launch.resolve_label(label, params, values)
                if arr is not None and label not in snapshots:
                    snap = arr.clone_untracked()
                    if arr.requires_grad:
                        snap.grad = arr.grad
                    snapshots[label] = snap
        return written, read, snapshots, refusal

    def _check_overwrite(self, arr, writer: str, label: str):
        for rec in self.records:
            for rlabel, rarr, _ in rec.read_versions:
                if rarr is arr:
                    who = rec.kernel.key if isinstance(rec, LaunchRecord) else rec.name
                    raise RuntimeError(
                        f"'{writer}' writes array '{label}', which '{who}' read earlier on this tape (as '{rlabel}'); "
                        "the backward pass would see the new values. Write into a new array instead")

    def record_launch(self, kernel, prep, shape, values, before):
        """Record a launch that just ran; ``values`` (its argument list) is kept as it is, not copied; ``before``
        is what before_launch returned."""
        written, read, snapshots, refusal = before
        key = kernel.key
        for _, arr in written:
            arr._version += 1
            arr._last_writer = key
        # a scratch intermediate's values are never read by an adjoint: overwriting it later is harmless
        reads = [(label, arr, arr._version) for label, arr in read if not arr._scratch]
        self._track_grad_path(key, reads, written)
        if config.verify_autograd_array_access:
            code = kernel.pyfunc.__code__
            for label, arr in written:  # writes first: a kernel may read what it writes itself
                arr.mark_write(arg_name=label, kernel_name=key, filename=code.co_filename,
                               lineno=code.co_firstlineno)
            for _, arr, _ in reads:
                arr.mark_read()
        # the adjoint of an in-place launch reads its snapshot, so later writes to the array are harmless
        kept = [r for r in reads if r[0] not in snapshots] if snapshots else reads
        needed = prep.meta.adjoint_reads
        if needed is not None and kept:  # nor are later writes to an array whose values the adjoint never reads
            with_grad = {label for label, arr in read if arr._requires_grad}
            kept = [r for r in kept if values_needed(needed.get(r[0]), with_grad)]
        rec = LaunchRecord(kernel, prep, shape, values, snapshots, kept)
        rec.refusal = refusal
        if config.mode == "debug":
            rec.checksums = [(label, arr, version, _checksum(arr)) for label, arr, version in kept]
            self._checksummed = True
        self.records.append(rec)

    def _track_grad_path(self, who: str, reads, written):
        """Warn when a kernel reads an array that was computed from differentiable inputs but has no
        grad itself: the gradient path is cut there, and upstream gradients would silently be zero.
        Arrays of ints (indices, flags) carry no gradient and are never on the path."""
        on_path, path = False, self._on_grad_path
        for label, arr, _ in reads:
            if arr._requires_grad:
                on_path = True
            elif path and id(arr) in path and _differentiable(arr):
                on_path = True
                if id(arr) in self._warned:
                    continue
                self._warned.add(id(arr))
                warnings.warn(f"'{who}' reads array '{label}', which was computed on this tape from arrays that "
                              "require gradients but has no grad itself, so no gradient flows through it; "
                              "create it with requires_grad=True", stacklevel=4)
        if on_path:
            for _, a in written:
                if _differentiable(a):
                    path.add(id(a))

    def record_func(self, backward, arrays, outputs=()):
        """Record a Python callable (no arguments) that the backward pass runs at this point: a custom
        adjoint for work done off the tape. ``arrays``: the arrays it uses, each with a gradient (their
        gradients are zeroed by ``zero()``; the tape does not check them for overwrites); ``outputs``: those of
        them the work wrote (so ``backward`` counts them as computed on this tape)."""
        if not callable(backward):
            raise TypeError(f"tape.record_func: backward must be callable, got {type(backward).__name__}")
        arrays, outputs = list(arrays), list(outputs)
        for a in arrays + outputs:  # requires_grad, not grad: an intermediate's gradient is allocated when needed
            if not isinstance(a, Array) or not a.requires_grad:
                raise RuntimeError(f"tape.record_func: {a!r} is not an xsim array with a gradient; create it with "
                                   "requires_grad=True")
        self.records.append(OpRecord("record_func", backward, reads=arrays, writes=outputs))

    def record_op(self, rec: OpRecord):
        if config.mode == "debug":
            for arr in rec.writes:
                self._check_overwrite(arr, rec.name, "destination")
        if config.verify_autograd_array_access:
            filename, lineno = _caller_outside_xsim()
            what = "an array copy" if rec.name in ("copy", "clone") else f"array.{rec.name}()"
            for arr in rec.writes:
                arr.mark_write(operation=what, filename=filename, lineno=lineno)
            for arr in rec.reads:
                arr.mark_read()
        for arr in rec.writes:
            arr.mark_written(rec.name)
        rec.read_versions = [("source", a, a.version) for a in rec.reads]
        if config.mode == "debug":
            rec.checksums = [(label, arr, version, _checksum(arr)) for label, arr, version in rec.read_versions]
            self._checksummed = True
        self.records.append(rec)

    # -- backward ---------------------------------------------------------------------------------

    def backward(self, loss: Array | None = None, grads: dict | None = None):
        """Propagate gradients to every recorded input. ``loss``: a one-element array (its grad is
        seeded with 1); ``grads``: {array: seed} for other outputs. Gradients accumulate across
        calls until ``zero()``. Warns when the tape recorded nothing or did not compute ``loss``
        (or an array in ``grads``): then no gradient flows from it."""
        if capture.capturing() is not None:
            raise RuntimeError("tape.backward() inside a graph capture: xsim runs a backward pass at once and cannot "
                               "defer it to capture_launch; call it outside the capture")
        if loss is not None:
            if not isinstance(loss, Array) or loss.size != 1:
                raise ValueError("tape.backward(loss): loss must be a one-element xsim array")
            if loss.grad is None:
                raise ValueError("tape.backward(loss): the loss array has no gradient; create it with "
                                 "requires_grad=True")
        seeds = [(arr, self._seed(arr, seed)) for arr, seed in (grads or {}).items()]
        self._check_unseen_writes()
        for what, arr in ([("loss", loss)] if loss is not None else []) + [("grads", a) for a, _ in seeds]:
            self._warn_if_not_computed(what, arr)
        if loss is not None:
            loss.grad.fill_untracked(1.0)
        for arr, seed in seeds:
            if isinstance(seed, np.ndarray) and seed.ndim == 0:
                arr.grad.fill_untracked(seed.item())
            elif arr.grad is not seed:
                arr.grad.copy_from_untracked(seed)
        pool = _GradPool()
        needs, spent = self._intermediates()
        skipped = len(self.skipped)
        for i in range(len(self.records) - 1, -1, -1):
            for root in needs.get(i, ()):
                if root._grad is None:
                    root._grad = pool.take(root)
            self.records[i].backward(self)
            for a in spent.get(i, ()):
                # a skipped adjoint (enable_backward=False) may not have zeroed what its launch wrote
                pool.give_back(a, self, clean_ok=len(self.skipped) == skipped)
        self._forget_reads()

    def _forget_reads(self):
        """The backward pass consumed what the records read: later writes to those arrays are safe
        (``config.verify_autograd_array_access``). Another tape's pending reads of them are forgotten too."""
        if config.verify_autograd_array_access:
            for rec in self.records:
                for arr in rec.arrays():
                    arr.mark_init()

    def _intermediates(self) -> tuple[dict, dict]:
        """For the records' intermediates (``xsim.array.intermediate``), grouped by the array they
        view: {record index: roots whose gradient that record uses}, {record index: arrays whose
        gradient no earlier record uses, so the backward pass can give it back after that record}."""
        needs, first = {}, {}
        for i, rec in enumerate(self.records):
            for a in rec.arrays():
                if not a._intermediate:
                    continue
                root = a
                while root._grad_source is not None:
                    root = root._grad_source[0]
                needs.setdefault(i, []).append(root)
                group = first.get(id(root))
                if group is None:
                    group = first[id(root)] = (i, {id(root): root})
                group[1][id(a)] = a
        spent = {}
        for i, members in first.values():
            spent.setdefault(i, []).extend(members.values())
        return needs, spent

    def _seed(self, arr, seed) -> Array:
        """``seed`` for ``arr``'s gradient as an array of ``arr``'s shape (a scalar fills it), or a
        ValueError naming the array and both shapes; an array without a grad gets one first."""
        if not isinstance(arr, Array):
            raise TypeError(f"tape.backward(grads=...): keys must be xsim arrays, got {type(arr).__name__}")
        if arr.grad is None:
            _give_seed_buffer(arr, seed)
        if not isinstance(seed, Array):
            host = _as_host(seed, arr)
            if host.ndim == 0:
                return host
            seed_shape = host.shape[:host.ndim - len(arr.dtype._shape)] if arr.dtype._shape and \
                host.shape[host.ndim - len(arr.dtype._shape):] == arr.dtype._shape else host.shape
            if seed_shape == arr.shape:
                return host
            got = f"shape {host.shape} ({host.size} numbers)"
        elif seed.shape == arr.shape and seed.dtype is arr.dtype:
            return seed
        else:
            got = f"an array of shape {seed.shape} ({seed.size} elements of {T.type_name(seed.dtype)})"
        want = f"shape {arr.shape} ({arr.size} elements of {T.type_name(arr.dtype)})"
        raise ValueError(f"tape.backward(grads=...): the seed for {self._describe(arr)} has {got}, but the array has "
                         f"{want}")

    def _describe(self, arr) -> str:
        """An array named by the last record of this tape that wrote it, else by its shape and dtype."""
        for rec in reversed(self.records):
            for label, written in rec.written():
                if written is arr:
                    return f"array '{label}' (written by {rec.what()})"
        last = f", last written by '{arr.last_writer}' off this tape" if arr.last_writer else ""
        return f"the array of shape {arr.shape} and dtype {T.type_name(arr.dtype)}{last}"

    def _warn_if_not_computed(self, what: str, arr) -> None:
        # newest records first: a seeded output is usually written near the end of a rollout (the scan from the
        # start resolved every write label of a 20-step cloth rollout's 840 launches)
        if arr.size == 0 or any(written is arr for rec in reversed(self.records) for _, written in rec.written()):
            return
        if not self.records:
            why = "this tape recorded nothing (were the launches outside `with tape:`, or in another thread?)"
        else:
            why = "no launch or array op on this tape wrote it"
        warnings.warn(f"tape.backward({what}=...): {self._describe(arr)} was not computed on this tape: {why}; "
                      "no gradient flows from it to any input", stacklevel=3)

    def _check_unseen_writes(self) -> None:
        """Debug mode: refuse when an array a record read changed without a launch or op (``numpy()`` writes)."""
        if not self._checksummed:
            return
        for rec in self.records:
            for label, arr, version, digest in rec.checksums:
                if arr.version == version and _checksum(arr) != digest:
                    raise RuntimeError(
                        f"tape.backward: array '{label}' read by {rec.what()} was changed after it was recorded, "
                        "without a launch or array op (a write through array.numpy() or a numpy/torch view of its "
                        "memory?), so its gradient would be wrong; change arrays the tape recorded only through "
                        "launches or xsim's array ops, or copy them first")

    def zero(self):
        """Zero the gradient of every array the tape touched (arrays inside structs included)."""
        seen = set()
        for rec in self.records:
            for arr in rec.arrays():
                if arr._grad is not None and id(arr._grad) not in seen:  # a pending grad is zero already
                    seen.add(id(arr._grad))
                    arr._grad.zero_untracked()

    def reset(self):
        """Zero the gradients the tape touched and forget every record."""
        self.zero()
        self._forget_reads()
        self._kept_gradients = list(self.gradients.items())
        self.scopes.clear()
        self.records.clear()
        self.skipped.clear()
        self._on_grad_path.clear()
        self._checksummed = False
        self._warned.clear()

    # -- Warp's names --------------------------------------------------------------------------------

    @property
    def launches(self) -> list:
        """The records (Warp's name for them)."""
        return self.records

    @property
    def gradients(self) -> Gradients:
        """{array or struct value: its gradient} for every argument of a recorded launch or op that has
        one (a struct maps to a copy whose array fields are their grads, and each of those arrays, reached
        through the struct, to its own grad, as Warp's ``tape.gradients[mesh.rot]``), kept across ``reset()``."""
        out = Gradients(self._kept_gradients)

        def add(v, g):
            if v in out:
                return
            out.add(v, g)
            if not isinstance(v, Array):  # a struct: its arrays (and nested structs') by themselves too
                for f in type(v)._fields:
                    fg = getattr(g, f)
                    if fg is not None and fg is not getattr(v, f):
                        add(getattr(v, f), fg)

        for rec in self.records:
            for v in _record_values(rec):
                if v not in out:
                    g = _gradient_of(v)
                    if g is not None:
                        add(v, g)
        return out

    def record_scope_begin(self, scope_name: str, metadata: dict | None = None):
        """Open a named group of the launches that follow (a label for tools; backward ignores it)."""
        self.scopes.append((len(self.records), scope_name, metadata or {}))

    def record_scope_end(self, remove_scope_if_empty: bool = True):
        """Close the innermost open scope (dropped when empty, unless ``remove_scope_if_empty=False``)."""
        depth = sum(1 if name is not None else -1 for _, name, _ in self.scopes)
        if depth <= 0:
            raise RuntimeError("tape.record_scope_end(): ended tape scope, but scope not present (call "
                               "record_scope_begin first)")
        last_index, last_name, _ = self.scopes[-1]
        if remove_scope_if_empty and last_name is not None and last_index == len(self.records):
            self.scopes.pop()
        else:
            self.scopes.append((len(self.records), None, None))

    def visualize(self, filename: str | None = None, simplify_graph: bool = True, hide_readonly_arrays: bool = False,
                  array_labels: dict | None = None, graph_direction: str = "LR") -> str:
        """The recorded launches and ops as GraphViz dot source (written to ``filename`` too, if given):
        arrays and records as nodes, scopes as clusters, repeated launches as one (``xsim.autodiff.visualize``)."""
        from .visualize import dot_source
        code = dot_source(self, simplify_graph, hide_readonly_arrays, array_labels, graph_direction)
        if filename is not None:
            with open(filename, "w") as f:
                f.write(code)
        return code

    def memory(self) -> int:
        """Bytes the tape keeps alive for its backward pass: every array its records hold (launch
        arguments, op sources and destinations, snapshots of in-place arrays) and their gradients,
        each buffer counted once; a view counts the whole buffer it keeps alive."""
        buffers = {}
        for rec in self.records:
            for arr in (*rec.arrays(), *getattr(rec, "snapshots", {}).values()):
                for a in (arr, arr._grad):
                    if a is not None:
                        key, nbytes = _buffer(a)
                        buffers[key] = nbytes
        return sum(buffers.values())


class _GradPool:
    """Gradient buffers of intermediates the backward pass is done with, reused for others of the
    same shape: a rollout's backward then keeps few gradients alive, and those in cache. A buffer
    is zeroed when taken unless it is known to be zero: taken here for a ``written_first``
    intermediate, whose write adjoints consumed every gradient it received."""

    def __init__(self):
        self.free: dict = {}
        self.taken: set[int] = set()  # ids of buffers this pool handed out (seeded gradients are not)

    def take(self, a: Array) -> Array:
        spare = self.free.get((a.shape, a.dtype, a.device.name))
        if spare:
            g, clean = spare.pop()
            if not clean:
                g.zero_untracked()
        else:
            g = zeros(a.shape, a.dtype, a.device)
        self.taken.add(id(g))
        return g

    def give_back(self, a: Array, tape=None, clean_ok: bool = False) -> None:
        """Forget ``a``'s gradient (it reads as zeros again); a buffer it owns goes to the pool, marked
        clean when ``a`` is ``written_first``, the buffer came from this pool and ``clean_ok``."""
        g, a._grad = a._grad, None
        if g is None or a._grad_source is not None or not a._intermediate:
            return
        clean = clean_ok and a._written_first and id(g) in self.taken
        if clean and config.mode == "debug" and np.any(g.numpy()):
            raise RuntimeError(f"tape.backward: {tape._describe(a) if tape is not None else 'an intermediate'} was "
                               "created with intermediate(..., written_first=True), but a recorded launch read or "
                               "accumulated into an element of it that nothing on the tape had written before; "
                               "write every element first, or leave written_first off")
        self.free.setdefault((a.shape, a.dtype, a.device.name), []).append((g, clean))


class Gradients(Mapping):
    """A mapping keyed by identity (struct values are not hashable), as ``Tape.gradients`` returns."""

    def __init__(self, items=()):
        self._items = {id(k): (k, g) for k, g in items}

    def add(self, key, grad):
        self._items[id(key)] = (key, grad)

    def __getitem__(self, key):
        entry = self._items.get(id(key))
        if entry is None:
            raise KeyError("no gradient on this tape for this value (not a recorded argument with a grad)")
        return entry[1]

    def __contains__(self, key):
        return id(key) in self._items

    def __iter__(self):
        return (k for k, _ in self._items.values())

    def __len__(self):
        return len(self._items)


def _record_values(rec):
    if isinstance(rec, LaunchRecord):
        params = rec.kernel.params
        return [v for (_, t), v in zip(params, rec.values) if isinstance(t, T.ArrayType) or T.is_struct(t)]
    return list(rec.arrays())


def _gradient_of(v):
    """An array's grad, or for a struct a shallow copy whose array fields are their grads (or None)."""
    if isinstance(v, Array):
        return v._grad  # an intermediate's pending gradient is not one to report
    if not (T.is_struct(type(v)) and type(v)._has_arrays):
        return None
    out, found = copy.copy(v), False
    for f, ft in type(v)._fields.items():
        fv = getattr(v, f)
        if isinstance(ft, T.ArrayType) or T.is_struct(ft) and ft._has_arrays:
            g = _gradient_of(fv) if fv is not None else None
            found = found or g is not None
            object.__setattr__(out, f, g)
    return out if found else None


def _buffer(arr) -> tuple[int, int]:
    """(identity, bytes) of the allocation behind ``arr``: the root numpy buffer on the host."""
    host = getattr(arr, "_host", None)
    if host is None:  # device memory: the allocation the array (or the array it views) owns
        owner = arr
        while isinstance(getattr(owner, "_owner", None), type(arr)):
            owner = owner._owner
        buf = getattr(owner, "_owner", None)
        nbytes = getattr(buf, "nbytes", None) or owner.nbytes  # a DeviceBuffer or a torch tensor
        return (id(buf) if buf is not None else owner.ptr), int(nbytes)
    while isinstance(host.base, np.ndarray):
        host = host.base
    return id(host), host.nbytes


def _give_seed_buffer(arr: Array, seed):
    """An array seeded in ``backward(grads=...)`` without a grad gets one (as in Warp): the seed array
    itself when it is an xsim array (it must fit), else a zeroed buffer the seed is then copied into."""
    if isinstance(seed, Array):
        arr.grad = seed  # raises naming shape/dtype/device when it does not fit
    else:
        arr.requires_grad = True


def _as_host(seed, arr):
    return np.asarray(seed, dtype=arr.dtype._np if not T.is_struct(arr.dtype) else None)


def _caller_outside_xsim() -> tuple[str | None, int | None]:
    """File and line of the innermost caller outside the xsim package (the user's call of an op)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (None, None)


def _checksum(arr) -> bytes:
    """A digest of ``arr``'s values (debug mode: detects writes the tape cannot see)."""
    return hashlib.blake2b(np.ascontiguousarray(arr.numpy()).tobytes(), digest_size=16).digest()
