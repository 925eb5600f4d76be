"""Static colliders: their description (for the solver, USD export and previews) and the packing
of their poses and shapes into the arrays the solver's contact kernels read.

A collider's pose is a position (m) and a rotation quaternion (x, y, z, w); capsules run along
their local z axis. Mesh colliders keep their vertices in collider coordinates, so the pose arrays
alone move (and differentiate) them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .shapes import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH, SHAPE_SPHERE

SPHERE, BOX, CAPSULE, MESH = "sphere", "box", "capsule", "mesh"
TYPE_CODES = {SPHERE: SHAPE_SPHERE, BOX: SHAPE_BOX, CAPSULE: SHAPE_CAPSULE, MESH: SHAPE_MESH}  # one code per shape


@dataclass
class Collider:
    """One static collider. ``type``: "sphere", "box", "capsule" or "mesh"; ``pos``: (3,) m;
    ``rot``: (4,) quaternion xyzw; ``radius`` (sphere, capsule), ``half_extents`` (box),
    ``half_height`` (capsule), ``vertices``/``indices`` (mesh, collider coordinates); ``mu``:
    friction coefficient; ``restitution``: the fraction of a particle's approach speed it leaves with."""

    type: str
    pos: tuple = (0.0, 0.0, 0.0)
    rot: tuple = (0.0, 0.0, 0.0, 1.0)
    mu: float = 0.5
    restitution: float = 0.0
    radius: float = 0.0
    half_extents: tuple = (0.0, 0.0, 0.0)
    half_height: float = 0.0
    vertices: np.ndarray | None = field(default=None, repr=False)
    indices: np.ndarray | None = field(default=None, repr=False)

    def size(self) -> tuple:
        """The shape parameters as the solver's ``collider_size`` row."""
        if self.type == SPHERE:
            return (self.radius, 0.0, 0.0)
        if self.type == BOX:
            return tuple(self.half_extents)
        if self.type == CAPSULE:
            return (self.radius, self.half_height, 0.0)
        return (0.0, 0.0, 0.0)


def mesh_arrays(vertices, indices) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (n, 3) float64, indices (m, 3) int32) from arrays or a ``trimesh.Trimesh``."""
    if indices is None and hasattr(vertices, "faces"):
        vertices, indices = vertices.vertices, vertices.faces
    v = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    f = np.asarray(indices, dtype=np.int64).reshape(-1, 3)
    if f.size and (f.min() < 0 or f.max() >= len(v)):
        raise ValueError(f"mesh indices must lie in [0, {len(v)}), got [{f.min()}, {f.max()}]")
    return v, f.astype(np.int32)


def pack_colliders(colliders: list[Collider]) -> dict[str, np.ndarray]:
    """Numpy arrays of the colliders' types, poses, sizes, friction and restitution, plus the concatenated
    triangles of the mesh colliders (indices into the concatenated vertices) and their owner."""
    n = len(colliders)
    out = {
        "collider_type": np.array([TYPE_CODES[c.type] for c in colliders], dtype=np.int32).reshape(n),
        "collider_pos": np.array([c.pos for c in colliders], dtype=np.float64).reshape(n, 3),
        "collider_rot": np.array([c.rot for c in colliders], dtype=np.float64).reshape(n, 4),
        "collider_size": np.array([c.size() for c in colliders], dtype=np.float64).reshape(n, 3),
        "collider_mu": np.array([c.mu for c in colliders], dtype=np.float64).reshape(n),
        "collider_restitution": np.array([c.restitution for c in colliders], dtype=np.float64).reshape(n),
    }
    verts, tris, owner = [], [], []
    base = 0
    for k, c in enumerate(colliders):
        if c.type != MESH:
            continue
        verts.append(c.vertices)
        tris.append(c.indices + base)
        owner.append(np.full(len(c.indices), k, dtype=np.int32))
        base += len(c.vertices)
    out["mesh_vertices"] = np.concatenate(verts) if verts else np.zeros((0, 3))
    out["mesh_indices"] = np.concatenate(tris).astype(np.int32) if tris else np.zeros((0, 3), dtype=np.int32)
    out["mesh_collider"] = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int32)
    return out
