"""Rigid-body shapes on the host (numpy): mass, centre of mass and inertia from a shape and a
density, and the contact points each shape offers to the contact solver.

Conventions: SI units (m, kg, kg/m^3); a shape's frame is given relative to its body's frame by
a transform (position, quaternion x, y, z, w); capsules run along their local z axis (Newton's
default); inertia tensors are 3x3 about the centre of mass, in the frame named by the function.
"""

from __future__ import annotations

import enum

import numpy as np

# shape type codes, shared with the solver's contact kernels (``contacts_rigid.py``)
SHAPE_PLANE, SHAPE_SPHERE, SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH = 0, 1, 2, 3, 4
SHAPE_CYLINDER, SHAPE_CONE, SHAPE_ELLIPSOID, SHAPE_CONVEX_MESH = 5, 6, 7, 8
DEFAULT_DENSITY = 1000.0  # kg/m^3, water
RIM_POINTS = 8  # fixed contact points on each circular rim of a cylinder or cone (a flat face's manifold)


class GeoType(enum.IntEnum):
    """Shape kinds under Newton's names (``model.shape_type`` holds these codes; xsim's own numbering)."""

    PLANE = SHAPE_PLANE
    SPHERE = SHAPE_SPHERE
    BOX = SHAPE_BOX
    CAPSULE = SHAPE_CAPSULE
    MESH = SHAPE_MESH
    CYLINDER = SHAPE_CYLINDER
    CONE = SHAPE_CONE
    ELLIPSOID = SHAPE_ELLIPSOID
    CONVEX_MESH = SHAPE_CONVEX_MESH


# Contact points that move with the other shape: the first ``SUPPORT_SLOTS[kind]`` points of a
# cylinder, cone or ellipsoid are its support points towards the surface it meets (a rim's lowest
# point, the ellipsoid's deepest point; ``contacts_rigid.support_point``), found anew at every
# evaluation; the rest are fixed points of its flat faces' rims and its apex.
SUPPORT_SLOTS = {SHAPE_CYLINDER: 2, SHAPE_CONE: 1, SHAPE_ELLIPSOID: 1}


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


def cylinder_mass(radius: float, half_height: float, density: float) -> tuple[float, np.ndarray]:
    """(mass, inertia about the centre) of a solid cylinder along z of ``radius`` and length 2 ``half_height``."""
    r, h = float(radius), float(half_height)
    m = density * np.pi * r * r * 2.0 * h
    ixx = m * (r * r / 4.0 + h * h / 3.0)
    return m, np.diag([ixx, ixx, 0.5 * m * r * r])


def cone_mass(radius: float, half_height: float, density: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(mass, inertia about the centre of mass, centre of mass (3,)) of a solid cone along z, its base of
    ``radius`` at z = -``half_height`` and its apex at +``half_height``: the com is a quarter of the
    height above the base, at z = -half_height / 2."""
    r, h = float(radius), float(half_height)
    height = 2.0 * h
    m = density * np.pi * r * r * height / 3.0
    ixx = m * (3.0 * r * r / 20.0 + 3.0 * height * height / 80.0)
    return m, np.diag([ixx, ixx, 0.3 * m * r * r]), np.array([0.0, 0.0, -0.5 * h])


def ellipsoid_mass(radii, density: float) -> tuple[float, np.ndarray]:
    """(mass, inertia about the centre) of a solid ellipsoid of semi-axes ``radii`` (rx, ry, rz)."""
    a, b, c = (float(x) for x in radii)
    m = density * 4.0 / 3.0 * np.pi * a * b * c
    return m, np.diag([m * (b * b + c * c), m * (a * a + c * c), m * (a * a + b * b)]) / 5.0


def rim_points(radius: float, z: float, count: int = RIM_POINTS) -> np.ndarray:
    """``count`` points (count, 3) evenly spaced on the circle of ``radius`` about z at height ``z``,
    half a spacing off the x axis (where a support point falls when its direction has no sideways part)."""
    a = (np.arange(count) + 0.5) * (2.0 * np.pi / count)
    return np.stack([radius * np.cos(a), radius * np.sin(a), np.full(count, float(z))], 1)


def cylinder_points(radius: float, half_height: float) -> np.ndarray:
    """A cylinder's contact points: two support slots (the rims' lowest points), then both rims'."""
    slots = np.array([[radius, 0.0, -half_height], [radius, 0.0, half_height]])
    return np.concatenate([slots, rim_points(radius, -half_height), rim_points(radius, half_height)])


def cone_points(radius: float, half_height: float) -> np.ndarray:
    """A cone's contact points: a support slot (the base rim's lowest point), the apex, the base rim's."""
    return np.concatenate([[[radius, 0.0, -half_height], [0.0, 0.0, half_height]],
                           rim_points(radius, -half_height)])


def convex_hull(points: np.ndarray, where: str) -> np.ndarray:
    """The vertices (k, 3) of the convex hull of ``points`` (n, 3) (scipy's qhull); a ``ValueError``
    naming ``where`` where the points span no volume (fewer than 4, coplanar or collinear)."""
    from scipy.spatial import ConvexHull, QhullError

    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    if len(p) < 4:
        raise ValueError(f"{where}: a convex hull needs at least 4 points that span a volume, got {len(p)}")
    try:
        hull = ConvexHull(p)
    except QhullError:
        hull = None
    extent = float(np.ptp(p, axis=0).max())
    if hull is None or not hull.volume > 1e-12 * extent ** 3:
        raise ValueError(f"{where}: the points span no volume (coplanar or collinear): their convex hull is "
                         f"degenerate (volume {0.0 if hull is None else hull.volume:.3g} m^3 for an extent of "
                         f"{extent:.3g} m)")
    return p[hull.vertices]


def hull_mass(points: np.ndarray, density: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(mass, centre of mass (3,), inertia about it) of the solid convex hull of ``points`` (n, 3)."""
    import trimesh

    solid = trimesh.convex.convex_hull(np.asarray(points, dtype=np.float64))
    return (density * float(solid.volume), np.asarray(solid.center_mass, dtype=np.float64),
            np.asarray(solid.moment_inertia) * density)


def hull_mesh(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(vertices, triangles) of the convex hull of ``points``: what a hull shape exports and draws."""
    import trimesh

    solid = trimesh.convex.convex_hull(np.asarray(points, dtype=np.float64))
    return np.asarray(solid.vertices, dtype=np.float64), np.asarray(solid.faces, dtype=np.int32)


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
