"""Check mode (``xsim.config.mode = "check"``): NaN and inf are caught where they first appear.

After every launch the arrays the kernel wrote (after an adjoint launch, the gradients it wrote)
are scanned; the first non-finite value raises ``NonFiniteError`` naming the kernel, the array
parameter, the index and the value, and which of the kernel's inputs already held one (then the
fault came from upstream). Scans copy GPU arrays to the host: check mode is for finding a fault,
not for speed.
"""

from __future__ import annotations

import numpy as np

from .. import types as T
from ..errors import NonFiniteError


def first_non_finite(arr) -> tuple[str, tuple, float] | None:
    """(field suffix, outer index, value) of the first NaN/inf element of ``arr``, or None (also
    for integer arrays); the suffix names a struct field (".field") or is empty."""
    if arr is None or arr.size == 0:
        return None
    bf16 = arr.dtype._scalar is T.bfloat16  # held as bit patterns: scanned as the numbers they are
    kind = "f" if bf16 else arr.dtype._np.kind if not T.is_struct(arr.dtype) else "V"
    if kind not in "fV":
        return None
    host = T.bfloat16._load(arr.numpy()) if bf16 else arr.numpy()
    fields = [("", host)] if kind == "f" else [(f".{name}", host[name]) for name in host.dtype.names
                                               if host.dtype[name].base.kind == "f"]
    for suffix, values in fields:
        finite = np.isfinite(values)
        if finite.all():
            continue
        at = tuple(int(i) for i in np.argwhere(~finite)[0])
        return suffix, at[:arr.ndim], float(values[at])
    return None


def describe(found, label: str) -> str:
    suffix, index, value = found
    return f"'{label}{suffix}' holds {value} at index {index}"


def check_launch(prep, values, adjoint: bool = False) -> None:
    """Raise ``NonFiniteError`` if the launch of ``prep.kernel`` over ``values`` wrote NaN or inf
    (``adjoint``: into the gradients of the arrays it reads)."""
    from .launch import resolve_label
    kernel, meta = prep.kernel, prep.meta
    labels = meta.reads if adjoint else meta.writes
    for label in labels:
        arr = resolve_label(label, kernel.params, values)
        found = first_non_finite(arr.grad if adjoint and arr is not None else arr)
        if found is None:
            continue
        what = f"the adjoint of kernel '{kernel.key}' wrote a non-finite gradient: gradient of " if adjoint else \
            f"kernel '{kernel.key}' wrote a non-finite value: "
        msg = f"{what}{describe(found, label)}"
        upstream = []
        for rlabel in meta.reads:
            if rlabel == label and not adjoint:
                continue
            rarr = resolve_label(rlabel, kernel.params, values)
            rfound = first_non_finite(rarr)
            if rfound is not None:
                upstream.append(describe(rfound, rlabel))
        if upstream:
            msg += "; its input " + ", ".join(upstream) + " already (the fault is upstream)"
        raise NonFiniteError(msg)


def check_arrays(named: dict, where: str) -> None:
    """Raise ``NonFiniteError`` naming ``where`` and the array if any array in ``named`` holds NaN/inf."""
    for label, arr in named.items():
        found = first_non_finite(arr)
        if found is not None:
            raise NonFiniteError(f"{where}: {describe(found, label)}")
