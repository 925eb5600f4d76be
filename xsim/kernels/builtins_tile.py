"""Builtins registry, tiles: Warp's tile API as its CPU runs it (native code in ``native/xsim_tile.h``).

Warp gives each block of a tiled launch ``block_dim`` cooperating threads; on the CPU it runs a block as one
thread (``block_dim`` resolves to 1), and so does xsim on every device: ``launch_tiled`` appends a trailing
dimension of 1 to the grid, and a tile is a value that one thread holds. The results are Warp's CPU results
whatever ``block_dim`` asks for. ``tile(x)`` is therefore a one-element tile, ``tile_sum`` of it is ``x``.

Array accesses through tiles (``tile_load``, ``tile_store``, ``tile_atomic_add``) are their own op kinds
(``ir.ARRAY_LOADS``, ``ir.ARRAY_WRITES``), so every analysis of array reads and writes sees them; elements
outside the array read as zero and are not written (Warp's bounds check). ``tile_fft`` and ``tile_ifft``
transform a tile in place in Warp; here they rebind the variable named by their argument to the transformed
value, as the other output-argument builtins do (``store_to_arguments``).
"""

from __future__ import annotations

from .. import types as T
from ..errors import WarpCodegenTypeError, WarpCodegenValueError
from .builtins import Overload, special_form, store_to_arguments


def _named_args(fe, node, name: str, params: tuple[str, ...], required: int) -> dict:
    """The call's argument nodes by Warp's parameter names (positional or keyword)."""
    if len(node.args) > len(params):
        raise fe.err(node, f"{name}() takes at most {len(params)} arguments ({', '.join(params)})")
    return fe.place_keywords(node, name, params, dict(zip(params, node.args)), required, lambda n: n)


def _tile_array(fe, node, name: str) -> object:
    """The array argument of a tile load or store: a 1-d or 2-d plain array (a Var)."""
    arr = fe.value(node)
    if not isinstance(arr.type, T.ArrayType) or isinstance(arr.type, T.IndexedArrayType):
        raise fe.err(node, f"{name}() takes an array (not an indexed array) here, got {T.type_name(arr.type)}",
                     WarpCodegenTypeError)
    if arr.type.ndim not in (1, 2):
        raise fe.err(node, f"{name}() supports 1-d and 2-d arrays (tiles of one or two dimensions), got a "
                           f"{arr.type.ndim}-d array", WarpCodegenValueError)
    if not (T.is_scalar(arr.type.dtype) or T.is_vector(arr.type.dtype)):
        raise fe.err(node, f"{name}(): tiles hold scalars or vectors, the array holds "
                           f"{T.type_name(arr.type.dtype)}", WarpCodegenTypeError)
    return arr


def _offsets(fe, node, given: dict, name: str, ndim: int) -> list:
    """The tile's offset in the array, one int value per array dimension (zeros by default)."""
    if "offset" not in given:
        return [fe.const(0, T.int32)] * ndim
    off = given["offset"]
    parts = off.elts if hasattr(off, "elts") else [off]
    values = [fe.value(p) for p in parts]
    if len(values) != ndim:
        raise fe.err(off, f"{name}(): offset has {len(values)} entries for a {ndim}-d array", WarpCodegenValueError)
    for p, v in zip(parts, values):
        if not T.is_int(v.type):
            raise fe.err(p, f"{name}(): offsets are ints, got {T.type_name(v.type)}", WarpCodegenTypeError)
    return values


def _tile_value(fe, node, name: str):
    v = fe.value(node)
    if not T.is_tile(v.type):
        raise fe.err(node, f"{name}() takes a tile, got {T.type_name(v.type)}", WarpCodegenTypeError)
    return v


@special_form("tile_load")
def _tile_load(fe, node):
    """``tile_load(a, shape, offset=(0, ...), storage="register", bounds_check=True, aligned=False)``."""
    given = _named_args(fe, node, "tile_load", ("a", "shape", "offset", "storage", "bounds_check", "aligned"), 2)
    arr = _tile_array(fe, given["a"], "tile_load")
    shape = fe.constant_ints(given["shape"], "tile_load(): shape must be an int or a tuple of ints known at "
                                             "compile time")
    if len(shape) != arr.type.ndim or min(shape) < 1:
        raise fe.err(given["shape"], f"tile_load(): a {arr.type.ndim}-d array takes a tile shape of "
                                     f"{arr.type.ndim} positive ints, got {shape}", WarpCodegenValueError)
    offsets = _offsets(fe, node, given, "tile_load", arr.type.ndim)
    fe.reads.add(arr)
    return fe.emit("tile_load", T.tile_type(arr.type.dtype, shape), [arr, *offsets], node)


def _tile_write(fe, node, name: str, kind: str):
    given = _named_args(fe, node, name, ("a", "t", "offset", "bounds_check"), 2)
    arr = _tile_array(fe, given["a"], name)
    t = _tile_value(fe, given["t"], name)
    if t.type._dtype is not arr.type.dtype:
        raise fe.err(given["t"], f"{name}(): a tile of {T.type_name(t.type._dtype)} into an array of "
                                 f"{T.type_name(arr.type.dtype)}", WarpCodegenTypeError)
    if len(t.type._shape) != arr.type.ndim:
        raise fe.err(given["t"], f"{name}(): a {len(t.type._shape)}-d tile into a {arr.type.ndim}-d array",
                     WarpCodegenValueError)
    offsets = _offsets(fe, node, given, name, arr.type.ndim)
    fe.writes.add(arr)
    out_type = t.type if kind == "tile_atomic" else None
    return fe.emit(kind, out_type, [arr, *offsets, t], node, ndim=arr.type.ndim, fn="tile_atomic_add")


@special_form("tile_store")
def _tile_store(fe, node):
    """``tile_store(a, t, offset=(0, ...), bounds_check=True)``: writes the tile's elements into ``a``."""
    _tile_write(fe, node, "tile_store", "tile_store")
    return fe.const(False)


@special_form("tile_atomic_add")
def _tile_atomic_add(fe, node):
    """``tile_atomic_add(a, t, offset=(0, ...), bounds_check=True)``: adds the tile into ``a``; gives the tile
    of the values there before."""
    return _tile_write(fe, node, "tile_atomic_add", "tile_atomic")


def _call(fe, node, name: str, ret, args: list, native: str | None = None):
    return fe.emit("call", ret, args, node, overload=Overload(name, ("Tile",), "", native or name))


@special_form("tile")
def _tile(fe, node):
    """``tile(x, preserve_type=False)``: the block's values of ``x`` as a tile: one element here (one thread
    per block). A vector ``x`` gives a (length, 1) tile of its components unless ``preserve_type``."""
    given = _named_args(fe, node, "tile", ("x", "preserve_type"), 1)
    x = fe.value(given["x"])
    keep = False
    if "preserve_type" in given:
        flag = fe.expr(given["preserve_type"])
        keep = getattr(flag, "obj", None) if not hasattr(flag, "is_const") else flag.const
        if not isinstance(keep, bool):
            raise fe.err(given["preserve_type"], "tile(): preserve_type must be True or False", WarpCodegenTypeError)
    if T.is_scalar(x.type) and x.type is not T.bool_:
        return _call(fe, node, "tile", T.tile_type(x.type, (1,)), [x], "tile_of_value")
    if T.is_vector(x.type):
        if keep:
            return _call(fe, node, "tile", T.tile_type(x.type, (1,)), [x], "tile_of_value")
        return _call(fe, node, "tile", T.tile_type(x.type._scalar, (x.type._length, 1)), [x], "tile_of_components")
    raise fe.err(given["x"], f"tile() takes a number or a vector, got {T.type_name(x.type)}", WarpCodegenTypeError)


@special_form("tile_sum")
def _tile_sum(fe, node):
    """``tile_sum(t)``: a one-element tile holding the sum of ``t``'s elements (in row-major order)."""
    given = _named_args(fe, node, "tile_sum", ("a",), 1)
    t = _tile_value(fe, given["a"], "tile_sum")
    return _call(fe, node, "tile_sum", T.tile_type(t.type._dtype, (1,)), [t])


@special_form("tile_transpose")
def _tile_transpose(fe, node):
    """``tile_transpose(a)``: the transpose of a 2-d tile."""
    given = _named_args(fe, node, "tile_transpose", ("a",), 1)
    t = _tile_value(fe, given["a"], "tile_transpose")
    if len(t.type._shape) != 2:
        raise fe.err(given["a"], f"tile_transpose() takes a 2-d tile, got shape {t.type._shape}",
                     WarpCodegenValueError)
    m, n = t.type._shape
    return _call(fe, node, "tile_transpose", T.tile_type(t.type._dtype, (n, m)), [t])


def _fft(fe, node, name: str):
    """``tile_fft(inout)``/``tile_ifft(inout)``: the unnormalized discrete Fourier transform of each row of a 2-d
    tile of vec2f or vec2d (real, imaginary), forward (e^-i) or inverse (e^+i), into the tile's variable."""
    given = _named_args(fe, node, name, ("inout",), 1)
    t = _tile_value(fe, given["inout"], name)
    d = t.type._dtype
    if not (T.is_vector(d) and d._length == 2 and d._scalar in (T.float32, T.float64)):
        raise fe.err(given["inout"], f"{name}() takes a tile of vec2f or vec2d (complex numbers), got a tile of "
                                     f"{T.type_name(d)}", WarpCodegenTypeError)
    if len(t.type._shape) != 2:
        raise fe.err(given["inout"], f"{name}() takes a 2-d tile (it transforms each row), got shape "
                                     f"{t.type._shape}", WarpCodegenValueError)
    store_to_arguments(fe, node, [given["inout"]], [_call(fe, node, name, t.type, [t])])
    return fe.const(False)


special_form("tile_fft")(lambda fe, node: _fft(fe, node, "tile_fft"))
special_form("tile_ifft")(lambda fe, node: _fft(fe, node, "tile_ifft"))
