"""Library funcs of the kernel language written in it (inlined like any ``@xsim.func``, so their
adjoints are generated): vector norms and ``lower_bound``, with Warp's names and defaults."""

from __future__ import annotations

import xsim  # resolved when a kernel calling these compiles, after xsim is fully imported

from .kernel import func

__all__ = ["lower_bound", "norm_huber", "norm_l1", "norm_l2", "norm_pseudo_huber", "smooth_normalize"]


@func
def norm_l1(v):
    """The L1 norm sum_i |v_i| of a vector."""
    n = xsim.abs(v[0])
    for i in range(1, len(v)):
        n += xsim.abs(v[i])
    return n


@func
def norm_l2(v):
    """The Euclidean norm of a vector."""
    return xsim.length(v)


@func
def norm_huber(v, delta=1.0):
    """Huber norm: |v|^2 / 2 up to |v| = delta, then delta (|v| - delta / 2) (linear, same slope)."""
    a = xsim.dot(v, v)
    if a <= delta * delta:
        return 0.5 * a
    return delta * (xsim.sqrt(a) - 0.5 * delta)


@func
def norm_pseudo_huber(v, delta=1.0):
    """Pseudo-Huber norm delta sqrt(1 + |v|^2 / delta^2): smooth everywhere, ~|v| far from 0."""
    return delta * xsim.sqrt(1.0 + xsim.dot(v, v) / (delta * delta))


@func
def smooth_normalize(v, delta=1.0):
    """``v`` divided by its pseudo-Huber norm: a normalisation with a gradient at the zero vector."""
    return v / norm_pseudo_huber(v, delta)


@func
def lower_bound(arr, value):
    """The first index of the sorted 1-d array ``arr`` whose element is >= ``value`` (the last index if
    none, as in Warp)."""
    return lower_bound(arr, 0, len(arr), value)


@func
def lower_bound(arr, arr_begin: int, arr_end: int, value):  # noqa: F811 - the range overload
    """The first index in [arr_begin, arr_end) of the sorted array ``arr`` whose element is >= ``value``;
    ``arr_end - 1`` if none (Warp's answer: an index into the range, never past it; ``arr_begin`` for an
    empty range)."""
    lo = arr_begin
    hi = arr_end - 1
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if arr[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo
