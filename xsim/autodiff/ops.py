"""Tape-aware array operations: ``clone``, ``copy``, ``array.assign``, ``array.fill_``, ``array.zero_``
and ``array.detach``.

Each op that moves data is recorded on the active Tape with its adjoint (shared/DESIGN.md):

- ``dst <- src`` (clone, copy, assign): ``src.grad += dst.grad`` over the copied range, then that
  range of ``dst.grad`` is zeroed, because the old values of ``dst`` no longer reach the loss;
- ``fill_``/``zero_``: the gradient of the overwritten range is zeroed.

The adjoints look up ``.grad`` when the backward pass runs, like kernel launches do, so an array
given ``requires_grad`` after the op still takes part. The data movement itself goes through the
array's untracked methods (``clone_untracked``, ``copy_from_untracked``, ``fill_untracked``,
``zero_untracked``), which is what a device backend replaces.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import capture, torch_view, types
from ..array import _byte_range, array, zeros
from ..indexedarray import indexedarray
from ..kernels import recording
from .tape import OpRecord


def _check_array(a, op: str, what: str, indexed: bool = False) -> None:
    if not (isinstance(a, array) or indexed and isinstance(a, indexedarray)):
        kinds = "an xsim array or indexedarray" if indexed else "an xsim array"
        raise TypeError(f"xsim.{op}: {what} must be {kinds}, got {type(a).__name__}")


def _commit(name: str, backward_fn, reads: list, writes: list) -> None:
    """Record the op on the active tape, or (no tape) just count the writes like an unrecorded launch.
    An indexed array counts as its data array (the tape tracks the memory that changes)."""
    reads = [a.data if isinstance(a, indexedarray) else a for a in reads]
    writes = [a.data if isinstance(a, indexedarray) else a for a in writes]
    tape = recording.current()
    if tape is not None:
        tape.record_op(OpRecord(name, backward_fn, reads=reads, writes=writes))
        return
    for a in writes:
        a.mark_written(name)


def _zero_grad_range(a: array, offset: int, count: int | None) -> None:
    """Zero ``a.grad`` over ``count`` elements from flat ``offset`` (``count=None``: all of it), unless
    ``a`` retains its gradient (``retain_grad``, as kernel store adjoints do)."""
    g = a.grad
    if g is None or a.retain_grad:
        return
    if count is None:
        g.zero_untracked()
    elif count > 0:
        g.copy_from_untracked(zeros(count, a.dtype, a.device), dst_offset=offset)


# -- clone and copy ----------------------------------------------------------------------------------


def clone(a: array, device: Any = None, requires_grad: bool | None = None, *, retain_grad: bool = False) -> array:
    """A new contiguous array with the values of ``a`` (on ``device``, default ``a``'s), recorded on the
    active tape.

    ``requires_grad`` defaults to ``a.requires_grad``; ``requires_grad=False`` gives a copy that is
    cut from the graph on purpose (no gradient reaches ``a`` through it: truncated rollouts).
    ``retain_grad`` as in ``zeros``.
    """
    _check_array(a, "clone", "the source")
    out = a.clone_untracked()
    if device is not None:
        out = out.to(device)  # itself when already there
    out.requires_grad = bool(requires_grad or requires_grad is None and a.requires_grad)
    out.retain_grad = retain_grad
    if requires_grad is False:
        return out
    _commit("clone", lambda: _copy_adjoint(out, a, 0, 0, None), reads=[a], writes=[out])
    return out


def copy(dest: array, src: array, dest_offset: int = 0, src_offset: int = 0, count: int = 0, *,
         dst_offset: int | None = None) -> None:
    """Copy ``count`` elements (0: all of ``src``, as in Warp) from flat element ``src_offset`` of ``src``
    to flat element ``dest_offset`` of ``dest``, recorded on the active tape (``dst_offset`` is an
    older spelling of ``dest_offset``).

    Flat element positions count in row-major order of each array's shape, whatever its strides
    (a column view's element 1 is its second row). Either side may be an ``indexedarray`` (whole
    copies of one shape only, as in Warp). While a tape records and ``src`` has a gradient, ``dest``
    is given one too (if it has none) so that the gradient is carried on instead of silently dropped.
    """
    _check_array(dest, "copy", "dest", indexed=True)
    _check_array(src, "copy", "src", indexed=True)
    if dst_offset is not None:
        dest_offset = dst_offset
    count = 0 if count is None else count
    for name, v in (("dest_offset", dest_offset), ("src_offset", src_offset), ("count", count)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"xsim.copy: {name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"xsim.copy: {name} must be non-negative, got {v}")
    n = count or src.size
    if src_offset + n > src.size:
        raise ValueError(f"xsim.copy: src_offset {src_offset} + count {n} exceeds src's {src.size} elements")
    if dest_offset + n > dest.size:
        raise ValueError(f"xsim.copy: dest_offset {dest_offset} + count {n} exceeds dest's {dest.size} elements")
    if n == 0:
        return
    whole = dest_offset == 0 and src_offset == 0 and src.shape == dest.shape and n == src.size
    if not whole and (isinstance(src, indexedarray) or isinstance(dest, indexedarray)):
        raise ValueError(f"xsim.copy: an indexedarray is copied whole, into or from an array of its shape "
                         f"(dest shape {dest.shape}, src shape {src.shape}, dest_offset {dest_offset}, "
                         f"src_offset {src_offset}, count {count})")
    n = None if whole else n
    if capture.defer(lambda: copy(dest, src, dest_offset, src_offset, count)):
        return
    dest.copy_from_untracked(src, dest_offset, src_offset, n)
    if recording.is_recording() and src.requires_grad and not dest.requires_grad:
        dest.requires_grad = True
    _commit("copy", lambda: _copy_adjoint(dest, src, dest_offset, src_offset, n), reads=[src], writes=[dest])


def contiguous(a: array) -> array:
    """``a.contiguous()``: ``a`` itself when contiguous, else a packed copy recorded like ``clone``."""
    _check_array(a, "contiguous", "the array")
    return a if a.is_contiguous else clone(a)


def _copy_adjoint(dst: array, src: array, dst_offset: int, src_offset: int, count: int | None) -> None:
    """``src.grad += dst.grad`` over the copied range, then that range of ``dst.grad`` is zeroed.

    ``count=None`` means whole arrays of equal shape. When the two gradients may share memory (a copy
    within one array, or between views of one array) the incoming gradient is set aside first, so
    overlapping ranges also come out right.
    """
    g, sg = dst.grad, src.grad
    if g is None:
        return
    within = sg is not None and _may_overlap(sg, g)
    if within:
        g = g.clone_untracked()
        _zero_grad_range(dst, dst_offset, count)
    if sg is not None:
        if count is None:
            sg.copy_from_untracked(g, accumulate=True)
        else:
            sg.copy_from_untracked(g, dst_offset=src_offset, src_offset=dst_offset, count=count, accumulate=True)
    if not within:
        _zero_grad_range(dst, dst_offset, count)


def _may_overlap(a: array, b: array) -> bool:
    """Whether two arrays' memory may overlap (their byte spans do; exact overlap is not needed; an
    indexedarray counts as its whole data array)."""
    a, b = (x.data if isinstance(x, indexedarray) else x for x in (a, b))
    if a._host is not None and b._host is not None:
        return bool(np.may_share_memory(a._host, b._host))
    (alo, ahi), (blo, bhi) = _byte_range(a), _byte_range(b)
    return alo < bhi and blo < ahi


def assign(dst: array, src: Any) -> array:
    """``dst.assign(src)``: copy ``src`` (an xsim array, a numpy array or a torch tensor of ``dst``'s
    size) into ``dst``, recorded on the active tape; returns ``dst``.

    From an xsim array or a torch tensor the gradient flows back to the source (to ``t.grad`` for a
    tensor that requires grad); numpy data carries none, so ``dst``'s gradient there is just cleared.
    """
    _check_array(dst, "assign", "the destination")
    if not isinstance(src, array):
        src = _foreign_source(dst, src)
    if src.shape != dst.shape:
        if src.size != dst.size or not (src.is_contiguous and dst.is_contiguous):
            raise ValueError(f"array.assign: source of shape {src.shape} does not match destination shape "
                             f"{dst.shape}")
        copy(dst, src, count=src.size)
    else:
        copy(dst, src)
    return dst


def _foreign_source(dst: array, src: Any) -> array:
    """``src`` (numpy data or a torch tensor) as an xsim array of ``dst``'s dtype, sharing memory where
    it can."""
    if torch_view.is_torch_tensor(src):
        if torch_view.torch_scalar_matches(src, dst.dtype):
            return torch_view.from_torch(src, dtype=dst.dtype)
        if src.requires_grad:
            raise TypeError(f"array.assign: a {src.dtype} tensor that requires grad cannot carry its "
                            f"gradient into an array of {types.type_name(dst.dtype)}; convert it first")
        src = src.detach().cpu().numpy()
    return array(np.asarray(src), dtype=dst.dtype, shape=dst.shape, device=dst.device, copy=False)


# -- fill, zero, detach ------------------------------------------------------------------------------


def fill_(a: array, value: Any) -> array:
    """Set every element of ``a`` to ``value`` (a scalar fills every component); recorded on the active
    tape, whose backward zeroes ``a.grad`` (the old values no longer matter). Returns ``a``."""
    _check_array(a, "fill_", "the array", indexed=True)
    if capture.defer(lambda: fill_(a, value)):
        return a
    a.fill_untracked(value)
    _commit("fill_", lambda: _zero_grad_range(a, 0, None), reads=[], writes=[a])
    return a


def zero_(a: array) -> array:
    """Set every element of ``a`` to zero; recorded like ``fill_``. Returns ``a``."""
    _check_array(a, "zero_", "the array", indexed=True)
    if capture.defer(lambda: zero_(a)):
        return a
    a.zero_untracked()
    _commit("zero_", lambda: _zero_grad_range(a, 0, None), reads=[], writes=[a])
    return a


def detach(a: array) -> array:
    """A view of ``a``'s memory with no gradient: launches on it are cut from the graph.

    Writes through the view change ``a``'s values without the tape's overwrite checks seeing them.
    """
    _check_array(a, "detach", "the array")
    view = a[:]
    view.grad = None
    return view


# The array class lives in the layer below, which must not import the tape; its tape-aware
# methods are attached here, when xsim (which imports this module) is imported.
array.assign = assign
array.fill_ = fill_
array.zero_ = zero_
array.detach = detach
array.contiguous = contiguous
