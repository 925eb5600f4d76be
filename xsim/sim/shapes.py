"""Rigid-body shapes on the host (numpy): mass, centre of mass and inertia from a shape and a
density, and the contact points each shape offers to the contact solver.

Conventions: SI units (m, kg, kg/m^3); a shape's frame is given relative to its body's frame by
a transform (position, quaternion x, y, z, w); capsules run along their local z axis (Newton's
default); inertia tensors are 3x3 about the centre of mass, in the frame named by the function.
"""

from __future__ import annotations

import numpy as np

# shape type codes, shared with the solver's contact kernels (``contacts_rigid.py``)
SHAPE_PLANE, SHAPE_SPHERE, SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH = 0, 1, 2, 3, 4
DEFAULT_DENSITY = 1000.0  # kg/m^3, water


def quat_to_matrix(q) -> np.ndarray:
    """The rotation matrix (3, 3) of the unit quaternion ``q`` = (x, y, z, w)."""
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def quat_multiply(a, b) -> np.ndarray:
    """The product ``a * b`` (4,) of quaternions (x, y, z, w): rotation ``b`` then ``a``."""
    ax, ay, az, aw = np.asarray(a, dtype=np.float64)
    bx, by, bz, bw = np.asarray(b, dtype=np.float64)
    return np.array([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz])


def sphere_mass(radius: float, density: float) -> tuple[float, np.ndarray]:
    """(mass kg, inertia about the centre, shape frame) of a solid sphere."""
    m = density * 4.0 / 3.0 * np.pi * radius ** 3
    return m, np.eye(3) * (0.4 * m * radius ** 2)


def box_mass(half_extents, density: float) -> tuple[float, np.ndarray]:
    """(mass, inertia) of a solid box with ``half_extents`` (hx, hy, hz)."""
    hx, hy, hz = (float(h) for h in half_extents)
    m = density * 8.0 * hx * hy * hz
    return m, np.diag([m * (hy * hy + hz * hz), m * (hx * hx + hz * hz), m * (hx * hx + hy * hy)]) / 3.0


def capsule_mass(radius: float, half_height: float, density: float) -> tuple[float, np.ndarray]:
    """(mass, inertia) of a solid capsule: a cylinder of length 2 ``half_height`` along z capped by
    two hemispheres of ``radius``."""
    r, length = float(radius), 2.0 * float(half_height)
    m_cyl = density * np.pi * r * r * length
    m_sph = density * 4.0 / 3.0 * np.pi * r ** 3  # the two caps together
    ixx = m_cyl * (r * r / 4.0 + length * length / 12.0) + m_sph * (0.4 * r * r + length * length / 4.0
                                                                     + 3.0 * length * r / 8.0)
    izz = m_cyl * r * r / 2.0 + m_sph * 0.4 * r * r
    return m_cyl + m_sph, np.diag([ixx, ixx, izz])


def _solid(vertices: np.ndarray, faces: np.ndarray):
    """The convex hull of a mesh (trimesh, through scipy's qhull): what a dynamic mesh body's mass,
    inertia and contact points come from, whatever the mesh's own shape."""
    import trimesh

    return trimesh.Trimesh(vertices, faces, process=True).convex_hull


def mesh_mass(vertices: np.ndarray, faces: np.ndarray, density: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(mass, centre of mass (3,), inertia about it) of the convex hull of a mesh (see ``_solid``)."""
    solid = _solid(vertices, faces)
    m = density * float(solid.volume)
    return m, np.asarray(solid.center_mass, dtype=np.float64), np.asarray(solid.moment_inertia) * density


def convex_hull_vertices(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """The vertices (k, 3) of the convex hull of a mesh: the contact points of a dynamic mesh."""
    return np.asarray(_solid(vertices, faces).vertices, dtype=np.float64)


def box_corners(half_extents) -> np.ndarray:
    """The 8 corners (8, 3) of a box in its own frame."""
    h = np.asarray(half_extents, dtype=np.float64)
    return np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * h


def combine_mass(parts: list[tuple[float, np.ndarray, np.ndarray]]) -> tuple[float, np.ndarray, np.ndarray]:
    """Mass, centre of mass and inertia about it of rigidly joined parts, each given as
    (mass, centre of mass in the body frame, inertia about that centre in the body frame)
    (parallel axis theorem)."""
    total = sum(p[0] for p in parts)
    if total <= 0.0:
        return 0.0, np.zeros(3), np.zeros((3, 3))
    com = sum(p[0] * p[1] for p in parts) / total
    inertia = np.zeros((3, 3))
    for m, c, i in parts:
        d = c - com
        inertia += i + m * (np.dot(d, d) * np.eye(3) - np.outer(d, d))
    return total, com, inertia
