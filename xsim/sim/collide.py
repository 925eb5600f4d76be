"""Static colliders: their description (for USD export and previews) and mesh input. The solver
sees each collider as a shape on body -1 (``xsim.sim.rigid``).

A collider's pose is a position (m) and a rotation quaternion (x, y, z, w); capsules run along
their local z axis. Mesh colliders keep their vertices in collider coordinates, so the shape's pose
alone moves (and differentiates) them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SPHERE, BOX, CAPSULE, MESH = "sphere", "box", "capsule", "mesh"


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


def mesh_arrays(vertices, indices) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (n, 3) float64, indices (m, 3) int32) from arrays or a ``trimesh.Trimesh``."""
    if indices is None and hasattr(vertices, "faces"):
        vertices, indices = vertices.vertices, vertices.faces
    v = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
    f = np.asarray(indices, dtype=np.int64).reshape(-1, 3)
    if f.size and (f.min() < 0 or f.max() >= len(v)):
        raise ValueError(f"mesh indices must lie in [0, {len(v)}), got [{f.min()}, {f.max()}]")
    return v, f.astype(np.int32)
