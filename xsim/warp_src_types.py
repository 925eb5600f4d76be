"""The names Warp's own tests reach in ``warp._src.types`` beyond its public ones (numpy dtype tables,
contiguous strides), over ``xsim.types``: what ``xsim._src.types`` gives."""

from __future__ import annotations

import numpy as np

from . import types as _types

# numpy scalar types and dtypes -> xsim scalar types, as Warp's table (bool data are xsim's bool)
np_dtype_to_warp_type = {
    key: t for t in _types.SCALAR_TYPES if t is not _types.bfloat16
    for key in (t._np.type, np.dtype(t._np))
}
warp_type_to_np_dtype = {t: t._np.type for t in _types.SCALAR_TYPES}
# the types whose atomics Warp does not make atomic (kernels may still add to them in place)
non_atomic_types = (_types.int8, _types.uint8, _types.int16, _types.uint16)


def strides_from_shape(shape: tuple, dtype) -> tuple:
    """The byte strides of a contiguous row-major array of ``shape`` with elements of ``dtype``."""
    t = _types.resolve(dtype)
    item = t._np.itemsize * (1 if _types.is_struct(t) else _types.num_components(t))
    return tuple(int(item * np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape)))


def __getattr__(name: str):
    return getattr(_types, name)
