"""Geometry objects kernels query by id, as Warp's: ``Mesh`` (a triangle mesh with a BVH, for
closest points, rays and box overlaps) and ``HashGrid`` (points bucketed by cell, for neighbours).

Each object owns a native descriptor (``native/xsim_geometry.h``: ``mesh_desc``, ``grid_desc``) in
memory of its device, holding the pointers of its arrays; ``.id`` is the descriptor's address and
stays the same for the object's life (refit and rebuild rewrite it in place). The structures are
built on the host with numpy and copied to the device; a mesh's refit runs as kernels on its device
(``geometry_refit.py``).
"""

from __future__ import annotations

import operator
import struct

import numpy as np

from . import types as T
from .array import _upload
from .array import array as Array
from .device import get_device
from .kernels import handles

_MESH_MAGIC = 0x4853454D6D697378  # "xsimMESH", as in xsim_geometry.h
_GRID_MAGIC = 0x444952476D697378  # "xsimGRID"
_MESH_DESC = struct.Struct("=10Q4i")      # magic, 9 pointers, 4 counts
_GRID_DESC = struct.Struct("=4Q3iifi")    # magic, 3 pointers, dims, count, 1 / cell width, pad
_CONSTRUCTORS = ("sah", "median", "lbvh", "cubql")
_MAX_CELLS = 2**31 - 1


def _write(a: Array, data: np.ndarray) -> None:
    """Overwrite the whole of array ``a`` (on any device) with host ``data``."""
    if a._host is not None:
        a._host[...] = data.reshape(a._host.shape)
    else:
        _upload(a, data.reshape(a.shape + a.dtype._shape))


def _ptr(a: Array | None) -> int:
    """The address of ``a``'s memory for a native descriptor: 0 for no array or an empty one."""
    return 0 if a is None or a.ptr is None else a.ptr


def _grad_ptr(a: Array | None, keep: list) -> int:
    """The address of ``a``'s gradient buffer (kept alive in ``keep``): 0 for no array or one without a gradient."""
    g = None if a is None else a.grad
    if g is not None:
        keep.append(g)
    return _ptr(g)


def _check_vec3(a, what: str, device=None) -> None:
    if not isinstance(a, Array):
        raise TypeError(f"{what} must be an xsim.array of xsim.vec3, got {type(a).__name__}")
    if a.dtype is not T.vec3 or a.ndim != 1 or not a.is_contiguous:
        raise TypeError(f"{what} must be a contiguous 1-d xsim.array of xsim.vec3, got "
                        f"array(dtype={T.type_name(a.dtype)}, ndim={a.ndim}{'' if a.is_contiguous else ', strided'})")
    if a._intermediate:
        raise ValueError(f"{what} must not be an intermediate (xsim.array.intermediate): the backward pass lends its gradient buffer to "
                         "other arrays, and the mesh keeps that buffer's address; pass an array of its own")
    if device is not None and a.device != device:
        raise ValueError(f"{what} is on '{a.device}' but the object lives on '{device}'")


@T.struct
class BvhNode:
    """One BVH node, as bvh_node in xsim_geometry.h (40 bytes): its box (lo, hi; metres) and, for a leaf
    (count > 0), its triangles ``prims[first:first + count]``; ``right``: an inner node's second child (the
    first is the next node); ``escape``: the node after its subtree."""

    lo: T.vec3
    first: T.int32
    hi: T.vec3
    count: T.int32
    right: T.int32
    escape: T.int32


def is_cubql_available() -> bool:
    """Warp's check for its cuBQL BVH builder: xsim has none (``bvh_constructor="cubql"`` builds xsim's own)."""
    return False


# ---------------------------------------------------------------------------------------------
# BVH


def _build_bvh(centroids: np.ndarray, leaf_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median split along the widest centroid axis, one tree level at a time: the node records in
    depth-first order (bounds unset), the triangle order of the leaves and each node's depth.

    Every node covers a range of the triangle order and its left child starts where it does, so
    sorting the nodes by (start, larger range first) is their depth-first order."""
    n = len(centroids)
    perm = np.arange(n, dtype=np.int64)
    starts, ends, depths = [np.array([0])], [np.array([n])], [np.array([0])]
    seg_s, seg_e = (np.array([0]), np.array([n])) if n > leaf_size else (np.zeros(0, int), np.zeros(0, int))
    depth = 0
    while seg_s.size:
        depth += 1
        sizes = seg_e - seg_s
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        seg_id = np.repeat(np.arange(len(sizes)), sizes)
        elem = np.arange(sizes.sum()) - offsets[seg_id] + seg_s[seg_id]  # positions in perm, by segment
        c = centroids[perm[elem]]
        axis = np.argmax(np.maximum.reduceat(c, offsets) - np.minimum.reduceat(c, offsets), axis=1)
        perm[elem] = perm[elem[np.lexsort((c[np.arange(len(elem)), axis[seg_id]], seg_id))]]
        mid = seg_s + sizes // 2
        child_s, child_e = np.concatenate([seg_s, mid]), np.concatenate([mid, seg_e])
        starts.append(child_s)
        ends.append(child_e)
        depths.append(np.full(len(child_s), depth))
        split = child_e - child_s > leaf_size
        seg_s, seg_e = child_s[split], child_e[split]
    start, end, depth_of = (np.concatenate(x) for x in (starts, ends, depths))
    order = np.lexsort((-end, start))
    start, end, depth_of = start[order], end[order], depth_of[order]
    key = start * (n + 1) + (n - end)  # sorted: the depth-first order
    size = end - start
    inner = size > leaf_size
    nodes = np.zeros(len(start), BvhNode._np)
    nodes["first"] = start
    nodes["count"] = np.where(inner, 0, size)
    right_key = (start + size // 2) * (n + 1) + (n - end)
    nodes["right"] = np.where(inner, np.searchsorted(key, right_key), -1)
    nodes["escape"] = np.searchsorted(start, end, side="left")
    return nodes, perm.astype(np.int32), depth_of


# ---------------------------------------------------------------------------------------------
# Mesh


class Mesh:
    """A triangle mesh kernels query by ``id``: closest points, rays, box overlaps, interpolation.

    ``points``: array(vec3) of vertex positions, metres; ``indices``: 1-d int32 array of
    3 x num_tris vertex indices; ``velocities``: optional array(vec3) per vertex. After changing
    ``points`` in place, call ``refit()``; assigning a new points array refits by itself.
    ``bvh_constructor`` (Warp's "sah", "median", "lbvh", "cubql") is accepted for portability;
    every tree is built by a median split, which changes speed, never results. As in Warp, gradients
    of the queries reach the query point and the barycentrics, not the mesh's points. A kernel's reads
    of ``mesh_get(id).points`` (and ``.velocities``), ``id`` a kernel parameter, do reach ``points.grad`` in
    the backward pass: the gradient buffer the array had when the Mesh was built, refit or given it (a Tape
    does not zero it). Writes through ``mesh_get`` run forward, but refuse the backward pass.
    """

    def __init__(self, points: Array, indices: Array, velocities: Array | None = None,
                 support_winding_number: bool = False, bvh_constructor: str | None = None,
                 bvh_leaf_size: int | None = None, groups: Array | None = None):
        from . import geometry_refit  # imports xsim (its kernels' names), which imports this module

        self.id = 0
        _check_vec3(points, "Mesh points")
        self.device = points.device
        if not isinstance(indices, Array) or indices.dtype is not T.int32 or indices.ndim != 1 \
                or not indices.is_contiguous:
            got = (f"array(dtype={T.type_name(indices.dtype)}, ndim={indices.ndim})" if isinstance(indices, Array)
                   else type(indices).__name__)
            raise TypeError(f"Mesh indices must be a contiguous 1-d xsim.array of int32 (3 per triangle), got {got}")
        if indices.device != self.device:
            raise ValueError(f"Mesh indices are on '{indices.device}' but the points on '{self.device}'")
        if velocities is not None:
            _check_vec3(velocities, "Mesh velocities", self.device)
            if velocities.shape != points.shape:
                raise ValueError(f"Mesh velocities have shape {velocities.shape}, the points {points.shape}")
        if groups is not None:
            raise NotImplementedError("Mesh groups (grouped BVHs) are not supported; make one Mesh per group")
        if bvh_constructor is not None and str(getattr(bvh_constructor, "name", bvh_constructor)).lower() \
                not in _CONSTRUCTORS:
            raise ValueError(f"Mesh bvh_constructor must be one of {_CONSTRUCTORS} or None, got {bvh_constructor!r}")
        leaf_size = 4 if bvh_leaf_size is None else operator.index(bvh_leaf_size)
        if leaf_size < 1:
            raise ValueError(f"Mesh bvh_leaf_size must be at least 1, got {bvh_leaf_size}")
        n = indices.shape[0]
        if n == 0 or n % 3:
            raise ValueError(f"Mesh indices must hold 3 vertex indices per triangle (a positive multiple of 3), "
                             f"got {n}")
        tris = indices.numpy().reshape(-1, 3)
        bad = np.flatnonzero((tris < 0) | (tris >= points.shape[0]))
        if len(bad):
            raise ValueError(f"Mesh indices[{bad[0]}] = {tris.ravel()[bad[0]]} is out of range for "
                             f"{points.shape[0]} points ({len(bad)} indices out of range)")
        self.indices = indices
        self.support_winding_number = bool(support_winding_number)
        self._points, self._velocities, self._tris = points, velocities, tris
        pts = points.numpy()
        nodes, perm, depth = _build_bvh(pts[tris].mean(axis=1), leaf_size)
        dev = self.device
        self._prims = Array(perm, dtype=T.int32, device=dev)
        self._nodes = Array(nodes, dtype=BvhNode, device=dev)
        self._vertex_normals = Array(np.zeros((len(pts), 3), np.float32), dtype=T.vec3, device=dev)
        self._edge_normals = Array(np.zeros((3 * len(tris), 3), np.float32), dtype=T.vec3, device=dev)
        self._refit = geometry_refit.MeshRefit(nodes, depth, tris, len(pts), dev)
        self._desc = Array(np.zeros(_MESH_DESC.size // 8, np.uint64), dtype=T.uint64, device=dev)
        self._desc_bytes = b""
        self.refit()
        self.id = self._desc.ptr
        handles.register(self.id, "mesh", dev.name, self)

    def _write_desc(self) -> None:
        self._grads = []  # the descriptor's gradient buffers live as long as it names them
        raw = _MESH_DESC.pack(_MESH_MAGIC, _ptr(self._points), _ptr(self._velocities), _ptr(self.indices),
                              _ptr(self._nodes), _ptr(self._prims), _ptr(self._edge_normals),
                              _ptr(self._vertex_normals), _grad_ptr(self._points, self._grads),
                              _grad_ptr(self._velocities, self._grads),
                              self._points.shape[0], len(self._tris), self._nodes.shape[0], 0)
        if raw != self._desc_bytes:  # a refit of the same arrays leaves it as it was: no upload
            _write(self._desc, np.frombuffer(raw, np.uint64))
            self._desc_bytes = raw

    def refit(self) -> None:
        """Refit the BVH (and the pseudo-normals of the sign test) to the current ``points``: kernels on the
        mesh's device (``geometry_refit.py``), not recorded on a Tape."""
        self._refit(self._points, self.indices, self._prims, self._nodes, self._vertex_normals,
                    self._edge_normals)
        self._write_desc()

    @property
    def points(self) -> Array:
        """The vertex positions, array(vec3); assigning an array of the same shape refits."""
        return self._points

    @points.setter
    def points(self, value: Array) -> None:
        _check_vec3(value, "Mesh points", self.device)
        if value.shape != self._points.shape:
            raise ValueError(f"new Mesh points must have the shape {self._points.shape} of the old, got {value.shape}")
        self._points = value
        self.refit()

    @property
    def velocities(self) -> Array | None:
        """The vertex velocities, array(vec3) or None; assigning one needs no refit."""
        return self._velocities

    @velocities.setter
    def velocities(self, value: Array) -> None:
        _check_vec3(value, "Mesh velocities", self.device)
        if value.shape != self._points.shape:
            raise ValueError(f"Mesh velocities must have the points' shape {self._points.shape}, got {value.shape}")
        self._velocities = value
        self._write_desc()

    def __del__(self):
        if self.id:
            handles.unregister(self.id)


# ---------------------------------------------------------------------------------------------
# HashGrid


class HashGrid:
    """Points bucketed into ``dim_x * dim_y * dim_z`` hashed cells (space wraps around the grid), for
    ``hash_grid_query``. Call ``build(points, radius)`` whenever the points move."""

    def __init__(self, dim_x: int, dim_y: int, dim_z: int, device=None, dtype=None):
        self.id = 0
        if dtype not in (None, T.float32, float):
            raise NotImplementedError(f"HashGrid supports float32 points only, got dtype {dtype!r}")
        try:
            dims = [operator.index(d) for d in (dim_x, dim_y, dim_z)]
        except TypeError:
            raise TypeError(f"HashGrid dimensions must be integers, got {(dim_x, dim_y, dim_z)!r}") from None
        if min(dims) <= 0:
            raise ValueError(f"HashGrid dimensions must be positive, got {tuple(dims)}")
        if dims[0] * dims[1] * dims[2] > _MAX_CELLS:
            raise ValueError(f"HashGrid has {dims[0] * dims[1] * dims[2]} cells, more than the {_MAX_CELLS} supported")
        self.device = get_device(device)
        self.dtype = T.float32
        self.dims = tuple(dims)
        self.reserved = False
        self._arrays: tuple[Array, Array, Array] | None = None
        self._desc = Array(np.zeros(_GRID_DESC.size // 8, np.uint64), dtype=T.uint64, device=self.device)
        self._write_desc(0, 1.0)
        self.id = self._desc.ptr
        handles.register(self.id, "hash_grid", self.device.name, self)

    def _write_desc(self, num_points: int, inv_width: float) -> None:
        ids, starts, ends = self._arrays or (None, None, None)
        raw = _GRID_DESC.pack(_GRID_MAGIC, _ptr(ids), _ptr(starts), _ptr(ends), *self.dims, num_points, inv_width, 0)
        _write(self._desc, np.frombuffer(raw, np.uint64))

    def build(self, points: Array, radius: float, groups: Array | None = None) -> None:
        """Bucket ``points`` (array(vec3), metres) into cubic cells of edge ``radius``."""
        if groups is not None:
            raise NotImplementedError("HashGrid groups are not supported; build one grid per group")
        if not isinstance(points, Array) or points.dtype is not T.vec3:
            got = f"array(dtype={T.type_name(points.dtype)})" if isinstance(points, Array) else type(points).__name__
            raise TypeError(f"HashGrid points must be an xsim.array of xsim.vec3, got {got}")
        if points.device != self.device:
            raise ValueError(f"HashGrid points are on '{points.device}' but the grid lives on '{self.device}'")
        if not radius > 0.0:
            raise ValueError(f"HashGrid cell width (radius) must be positive, got {radius}")
        # the cell of a point exactly as hash_grid_query computes it (xsim_geometry.h: grid_coord), in
        # float32 as Warp does: 1 / width and the product rounded to float32, saturated to the int range
        inv = np.float32(1.0) / np.float32(radius)
        with np.errstate(invalid="ignore", over="ignore"):
            f = np.floor(points.numpy().reshape(-1, 3) * inv)
        c = np.where(f >= 2.0**31, 2**31 - 2, np.where(f >= -2.0**31, f, np.where(f < -2.0**31, -2**31, 0)))
        c = c.astype(np.int64) % np.array(self.dims)
        cell = (c[:, 2] * self.dims[1] + c[:, 1]) * self.dims[0] + c[:, 0]
        counts = np.bincount(cell, minlength=int(np.prod(self.dims)))
        ends = np.cumsum(counts)
        ids = np.argsort(cell, kind="stable").astype(np.int32)
        self._arrays = (Array(ids if len(ids) else np.zeros(1, np.int32), dtype=T.int32, device=self.device),
                        Array((ends - counts).astype(np.int32), dtype=T.int32, device=self.device),
                        Array(ends.astype(np.int32), dtype=T.int32, device=self.device))
        self._write_desc(len(ids), float(inv))
        self.reserved = True

    def __del__(self):
        if self.id:
            handles.unregister(self.id)
