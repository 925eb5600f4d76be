"""Rigid bodies, their shapes and the joints between them: the builder methods (a mixin that
``ModelBuilder`` inherits) and the static arrays of the ``Model`` they finalize into.

Names follow NVIDIA Newton: ``add_body``, ``add_shape_sphere/box/capsule/mesh``,
``add_joint_revolute/prismatic/ball/fixed/free``, ``body_q``, ``body_qd``, ``joint_target_q``.
SI units; z up; quaternions (x, y, z, w); capsules and the default joint axis run along local z.

- ``body_q``: array(transform), the pose of each body's frame in the world (position, then
  rotation).
- ``body_qd``: array(vector(6)), Newton's convention: first three entries the linear velocity
  (m/s) of the body's centre of mass, last three its angular velocity (rad/s), both in world
  coordinates.

A body gets its mass, centre of mass and inertia from its shapes (density, default 1000 kg/m^3)
unless ``mass``/``com``/``inertia`` are given; ``mass=0`` makes a body kinematic (it moves at its
own velocity and is not pushed). A shape on body -1 is static (part of the world), as in Newton:
the static colliders (``add_collider_*``) and the ground are such shapes, and particles and bodies
meet every shape through the same contact kernels. Planes (``add_shape_plane``) are static, with
any normal and offset. Dynamic mesh shapes use their convex hull for mass and contact points;
static meshes use all vertices (against bodies) and their triangles (against particles).
"""

from __future__ import annotations

import numpy as np

from .. import types as T
from ..array import array
from . import shapes as S
from . import validate

# joint type codes (Newton's numbering), shared with the solver's joint kernels
JOINT_PRISMATIC, JOINT_REVOLUTE, JOINT_BALL, JOINT_FIXED, JOINT_FREE = 0, 1, 2, 3, 4
JOINT_DISTANCE, JOINT_D6 = 5, 6
D6_AXES = 6  # rows per joint of Model.joint_d6_axis / joint_d6_limit: 3 linear, then 3 angular
NO_LIMIT = 1.0e10  # a limit this large (or None) means none
DEFAULT_MU = 0.5
BOX_CORNER_ROUNDING = 0.05  # fraction of the smallest half extent
BOX_EDGE_PAIRS = 144  # contacts of a box-box pair beyond its corners: one per pair of edges (12 x 12)
# segment contacts of a pair beyond its points, by its shape types: a box's 12 edges against a
# capsule's axis, and the closest points of two capsules' axes (see xsim/solvers/xpbd/contacts_rigid.py)
SEGMENT_CONTACTS = {(S.SHAPE_BOX, S.SHAPE_BOX): BOX_EDGE_PAIRS, (S.SHAPE_BOX, S.SHAPE_CAPSULE): 12,
                    (S.SHAPE_CAPSULE, S.SHAPE_BOX): 12, (S.SHAPE_CAPSULE, S.SHAPE_CAPSULE): 1}
_IDENTITY = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
_KIND_NAMES = {S.SHAPE_PLANE: "plane", S.SHAPE_SPHERE: "sphere", S.SHAPE_BOX: "box", S.SHAPE_CAPSULE: "capsule",
               S.SHAPE_MESH: "mesh", S.SHAPE_CYLINDER: "cylinder", S.SHAPE_CONE: "cone",
               S.SHAPE_ELLIPSOID: "ellipsoid", S.SHAPE_CONVEX_MESH: "convex_hull"}


def _xform(x) -> tuple[np.ndarray, np.ndarray]:
    """(position (3,), unit quaternion (4,)) from None, a 7-sequence or a (p, q) pair."""
    if x is None:
        x = _IDENTITY
    if len(x) == 7:
        p, q = x[:3], x[3:]
    else:
        p, q = x
    q = np.asarray(q, dtype=np.float64)
    return np.asarray(p, dtype=np.float64), q / np.linalg.norm(q)


class RigidBuilderMixin:
    """Builder methods for bodies, shapes and joints (mixed into ``ModelBuilder``)."""

    bodies: list[dict]
    """The bodies added so far (``add_body``)"""
    shapes: list[dict]
    """The shapes added so far (``add_shape_*``)"""
    joints: list[dict]
    """The joints added so far (``add_joint_*``)"""
    body_linear_damping: float
    """Body linear velocity damping rate [1/s]: v <- v / (1 + damping h) each substep"""
    body_angular_damping: float
    """Body angular velocity damping rate [1/s]"""
    rigid_contact_margin: float
    """Shape pairs closer than this (plus their motion) are tested each step [m]"""

    def _init_rigid(self) -> None:
        self.bodies = []
        self.shapes = []
        self.joints = []
        self.body_linear_damping = 0.0
        self.body_angular_damping = 0.0
        self.rigid_contact_margin = 0.01

    @property
    def body_count(self) -> int:
        return len(self.bodies)

    # -- bodies and shapes ---------------------------------------------------------------------------

    def add_body(self, xform=None, mass: float | None = None, density: float | None = None, com=None,
                 inertia=None, lin_vel=(0.0, 0.0, 0.0), ang_vel=(0.0, 0.0, 0.0), label: str | None = None) -> int:
        """A rigid body whose frame starts at ``xform`` ((p, q) or 7 numbers). ``mass`` (kg; 0 makes it
        kinematic), ``com`` (m, body frame) and ``inertia`` (3x3, kg m^2, about the com in the body
        frame) override what its shapes give; ``density`` (kg/m^3) is the default of its shapes;
        ``lin_vel``/``ang_vel``: initial world velocities of the com (m/s, rad/s). Returns its index."""
        validate.args("add_body", xform=xform, mass=mass, density=density, com=com, inertia=inertia,
                      lin_vel=lin_vel, ang_vel=ang_vel)
        p, q = _xform(xform)
        self.bodies.append({"p": p, "q": q, "mass": mass, "density": density, "com": com, "inertia": inertia,
                            "lin_vel": np.asarray(lin_vel, dtype=np.float64),
                            "ang_vel": np.asarray(ang_vel, dtype=np.float64), "label": label,
                            "world": self.current_world})
        return len(self.bodies) - 1

    def _add_shape(self, body: int, kind: int, xform, size, radius: float, points: np.ndarray, mass_fn,
                   density, mu: float, restitution: float, mesh=None) -> int:
        where = f"add_shape_{_KIND_NAMES[kind]}"
        if not -1 <= body < len(self.bodies):
            raise IndexError(f"{where}: body {body} out of range (-1: static; there are {len(self.bodies)} bodies)")
        if not 0.0 <= restitution <= 1.0:
            raise ValueError(f"{where}: restitution must be in [0, 1], got {restitution}")
        p, q = _xform(xform)
        if density is None:
            density = self.bodies[body]["density"] if body >= 0 else None
        density = S.DEFAULT_DENSITY if density is None else float(density)
        self.shapes.append({"body": int(body), "type": kind, "p": p, "q": q, "size": tuple(float(s) for s in size),
                            "radius": float(radius), "points": np.asarray(points, dtype=np.float64).reshape(-1, 3),
                            "mass_fn": mass_fn, "density": density, "mu": float(mu),
                            "restitution": float(restitution), "mesh": mesh, "label": None,
                            "contype": 1, "conaffinity": 1,
                            "world": self.bodies[body]["world"] if body >= 0 else self.current_world})
        return len(self.shapes) - 1

    def add_shape_plane(self, plane=(0.0, 0.0, 1.0, 0.0), xform=None, body: int = -1, mu: float = DEFAULT_MU,
                        restitution: float = 0.0) -> int:
        """A static plane (Newton's convention): ``plane`` = (a, b, c, d) is a x + b y + c z + d = 0, the
        normal (a, b, c) pointing out of the solid side (any length but zero), or ``xform`` places it
        directly (its local z is the normal). Planes are static: ``body`` must be -1. Returns its index."""
        validate.args("add_shape_plane", xform=xform, mu=mu, restitution=restitution)
        if body != -1:
            raise ValueError(f"add_shape_plane: planes are static; body must be -1, got {body}")
        if xform is None:
            xform = plane_xform(plane)
        return self._add_shape(-1, S.SHAPE_PLANE, xform, (0.0, 0.0, 0.0), 0.0, np.zeros((0, 3)), None, None, mu,
                               restitution)

    def add_shape_sphere(self, body: int, xform=None, radius: float = 0.5, density: float | None = None,
                         mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A sphere of ``radius`` (m) on ``body`` (-1: static), placed by ``xform`` in the body frame."""
        validate.args("add_shape_sphere", xform=xform, radius=radius, density=density, mu=mu,
                      restitution=restitution)
        return self._add_shape(body, S.SHAPE_SPHERE, xform, (radius, 0.0, 0.0), radius, np.zeros((1, 3)),
                               lambda d: (*S.sphere_mass(radius, d), None), density, mu, restitution)

    def add_shape_box(self, body: int, xform=None, hx: float = 0.5, hy: float = 0.5, hz: float = 0.5,
                      density: float | None = None, mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A box with half extents ``hx, hy, hz`` (m) on ``body``. Its contact points are its corners,
        rounded by ``BOX_CORNER_ROUNDING`` of its smallest half extent: a corner that lies exactly on
        another box's edge (equal boxes stacked) still finds that box's face. Against another box its
        edges collide too (``BOX_EDGE_PAIRS``), so a box turned on a box does not sink through it."""
        validate.args("add_shape_box", xform=xform, hx=hx, hy=hy, hz=hz, density=density, mu=mu,
                      restitution=restitution)
        r = BOX_CORNER_ROUNDING * min(hx, hy, hz)
        corners = S.box_corners((hx - r, hy - r, hz - r))
        return self._add_shape(body, S.SHAPE_BOX, xform, (hx, hy, hz), r, corners,
                               lambda d: (*S.box_mass((hx, hy, hz), d), None), density, mu, restitution)

    def add_shape_capsule(self, body: int, xform=None, radius: float = 0.25, half_height: float = 0.5,
                          density: float | None = None, mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A capsule along the shape's local z: a segment of half length ``half_height`` (m) swept
        by ``radius``. Its contact points are the segment's two ends (spheres of ``radius``); against
        another capsule's axis and a box's edges the segment collides too, at the closest points of
        the two segments (``SEGMENT_CONTACTS``), so its contacts are exact along its length."""
        validate.args("add_shape_capsule", xform=xform, radius=radius, half_height=half_height,
                      density=density, mu=mu, restitution=restitution)
        points = np.array([[0.0, 0.0, -half_height], [0.0, 0.0, half_height]])
        return self._add_shape(body, S.SHAPE_CAPSULE, xform, (radius, half_height, 0.0), radius, points,
                               lambda d: (*S.capsule_mass(radius, half_height, d), None), density, mu, restitution)

    def add_shape_mesh(self, body: int, mesh, xform=None, scale: float = 1.0, density: float | None = None,
                       mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A triangle mesh (a ``trimesh.Trimesh`` or ``(vertices, indices)``) on ``body``. Its vertices
        (the convex hull's for a dynamic body) collide with the other bodies' primitives and the
        ground; mass and inertia come from the convex hull."""
        validate.args("add_shape_mesh", mesh=mesh, xform=xform, scale=scale, density=density, mu=mu,
                      restitution=restitution)
        from .collide import mesh_arrays

        v, f = mesh_arrays(*mesh) if isinstance(mesh, tuple) else mesh_arrays(mesh, None)
        if not len(f):
            raise ValueError(f"add_shape_mesh: mesh must have at least one triangle, got {len(v)} vertices and "
                             f"{len(f)} triangles")
        v = v * float(scale)
        points = v if body < 0 else S.convex_hull_vertices(v, f)

        def mass_fn(d):
            m, c, i = S.mesh_mass(v, f, d)
            return m, i, c
        return self._add_shape(body, S.SHAPE_MESH, xform, (0.0, 0.0, 0.0), 0.0, points, mass_fn, density, mu,
                               restitution, mesh=(v, f))

    def add_shape_cylinder(self, body: int, xform=None, radius: float = 1.0, half_height: float = 0.5,
                           density: float | None = None, mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A solid cylinder along the shape's local z, of ``radius`` (m) and length 2 ``half_height`` (m),
        its frame at its centre (Newton's). Its contacts: each rim's lowest point towards the surface it
        meets (so it rolls on a smooth circle) and ``RIM_POINTS`` fixed points on each rim (a face
        resting flat stands on them)."""
        validate.args("add_shape_cylinder", xform=xform, radius=radius, half_height=half_height,
                      density=density, mu=mu, restitution=restitution)
        return self._add_shape(body, S.SHAPE_CYLINDER, xform, (radius, half_height, 0.0), 0.0,
                               S.cylinder_points(radius, half_height),
                               lambda d: (*S.cylinder_mass(radius, half_height, d), None), density, mu, restitution)

    def add_shape_cone(self, body: int, xform=None, radius: float = 1.0, half_height: float = 0.5,
                       density: float | None = None, mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A solid cone along the shape's local z (Newton's): its base of ``radius`` (m) at z =
        -``half_height``, its apex at +``half_height``, the frame at the axis's midpoint (the centre of
        mass lies at z = -half_height / 2). Contacts: the base rim's lowest point towards the surface
        it meets, the apex, and ``RIM_POINTS`` fixed points on the base rim."""
        validate.args("add_shape_cone", xform=xform, radius=radius, half_height=half_height, density=density,
                      mu=mu, restitution=restitution)
        return self._add_shape(body, S.SHAPE_CONE, xform, (radius, half_height, 0.0), 0.0,
                               S.cone_points(radius, half_height), lambda d: S.cone_mass(radius, half_height, d),
                               density, mu, restitution)

    def add_shape_ellipsoid(self, body: int, xform=None, rx: float = 1.0, ry: float = 0.75, rz: float = 0.5,
                            density: float | None = None, mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """A solid ellipsoid of semi-axes ``rx, ry, rz`` (m) along the shape's local axes (Newton's
        keywords). Its contact is its deepest point towards the surface it meets (a support point)."""
        validate.args("add_shape_ellipsoid", xform=xform, rx=rx, ry=ry, rz=rz, density=density, mu=mu,
                      restitution=restitution)
        radii = (float(rx), float(ry), float(rz))
        return self._add_shape(body, S.SHAPE_ELLIPSOID, xform, radii, 0.0, np.array([[0.0, 0.0, -radii[2]]]),
                               lambda d: (*S.ellipsoid_mass(radii, d), None), density, mu, restitution)

    def add_shape_convex_hull(self, body: int, xform=None, mesh=None, scale=1.0, density: float | None = None,
                              mu: float = DEFAULT_MU, restitution: float = 0.0) -> int:
        """The convex hull of ``mesh`` (a ``trimesh.Trimesh``, ``(vertices, indices)`` or points (n, 3)),
        scaled by ``scale`` (a number or per axis), on ``body`` (Newton's ``add_shape_convex_hull``):
        mass and inertia of the solid hull; its vertices are its contact points. A set of points that
        spans no volume (coplanar, collinear, fewer than 4) is refused."""
        where = "add_shape_convex_hull"
        validate.args(where, xform=xform, mesh=mesh, scale=scale, density=density, mu=mu, restitution=restitution)
        if mesh is None:
            raise ValueError(f"{where}: mesh must be a trimesh.Trimesh, (vertices, indices) or points (n, 3), "
                             "got None")
        points = mesh[0] if isinstance(mesh, tuple) else getattr(mesh, "vertices", mesh)
        points = np.asarray(points, dtype=np.float64).reshape(-1, 3) * np.broadcast_to(
            np.asarray(scale, dtype=np.float64), (3,))
        hull = S.convex_hull(points, where)

        def mass_fn(d):
            m, c, i = S.hull_mass(hull, d)
            return m, i, c
        return self._add_shape(body, S.SHAPE_CONVEX_MESH, xform, (0.0, 0.0, 0.0), 0.0, hull, mass_fn, density, mu,
                               restitution, mesh=S.hull_mesh(hull))

    # -- joints --------------------------------------------------------------------------------------

    def _add_joint(self, kind: int, parent: int, child: int, parent_xform, child_xform, axis=(0.0, 0.0, 1.0),
                   limit_lower=None, limit_upper=None, target_q=None, target_qd=None, target_ke: float = 0.0,
                   target_kd: float = 0.0, cone_limit: float | None = None) -> int:
        validate.args("add_joint", parent_xform=parent_xform, child_xform=child_xform, axis=axis,
                      limit_lower=limit_lower, limit_upper=limit_upper, target_q=target_q,
                      target_qd=target_qd, target_ke=target_ke, target_kd=target_kd, cone_limit=cone_limit)
        n = len(self.bodies)
        if not (-1 <= parent < n and 0 <= child < n):
            raise IndexError(f"add_joint: parent {parent} / child {child} invalid (there are {n} bodies: the "
                             "parent is -1 (the world) or a body index, the child a body index)")
        if parent == child:
            raise ValueError(f"add_joint: parent and child are both body {child}; a joint connects two bodies")
        if limit_lower is not None and limit_upper is not None and limit_lower > limit_upper:
            raise ValueError(f"add_joint: lower limit {limit_lower} above upper limit {limit_upper}")
        world = self._world_of("add_joint", [self.bodies[b]["world"] for b in (parent, child) if b >= 0])
        a = np.asarray(axis, dtype=np.float64)
        self.joints.append({
            "world": world,
            "cone": NO_LIMIT if cone_limit is None else float(cone_limit),
            "type": kind, "parent": int(parent), "child": int(child), "xp": _xform(parent_xform),
            "xc": _xform(child_xform), "axis": a / np.linalg.norm(a),
            "limit": (-NO_LIMIT if limit_lower is None else float(limit_lower),
                      NO_LIMIT if limit_upper is None else float(limit_upper)),
            "target_q": 0.0 if target_q is None else float(target_q),
            "target_qd": 0.0 if target_qd is None else float(target_qd),
            "ke": float(target_ke), "kd": float(target_kd), "armature": 0.0, "label": None,
            "d6": ([], [])})
        return len(self.joints) - 1

    def add_joint_revolute(self, parent: int, child: int, parent_xform=None, child_xform=None,
                           axis=(0.0, 0.0, 1.0), limit_lower: float | None = None, limit_upper: float | None = None,
                           target_q: float | None = None, target_qd: float | None = None, target_ke: float = 0.0,
                           target_kd: float = 0.0) -> int:
        """A hinge about ``axis`` (joint frame) through the joint frames ``parent_xform`` (in the parent
        body's frame; parent -1 is the world) and ``child_xform`` (child frame). Angle limits (rad);
        a drive towards ``target_q`` (rad) with stiffness ``target_ke`` (N m/rad, XPBD compliance
        1/ke) and towards ``target_qd`` (rad/s) with damping ``target_kd`` (N m s/rad)."""
        return self._add_joint(JOINT_REVOLUTE, parent, child, parent_xform, child_xform, axis, limit_lower,
                               limit_upper, target_q, target_qd, target_ke, target_kd)

    def add_joint_prismatic(self, parent: int, child: int, parent_xform=None, child_xform=None,
                            axis=(1.0, 0.0, 0.0), limit_lower: float | None = None,
                            limit_upper: float | None = None, target_q: float | None = None,
                            target_qd: float | None = None, target_ke: float = 0.0, target_kd: float = 0.0) -> int:
        """A slider along ``axis``: limits (m), a drive towards ``target_q`` (m, stiffness N/m) and
        ``target_qd`` (m/s, damping N s/m)."""
        return self._add_joint(JOINT_PRISMATIC, parent, child, parent_xform, child_xform, axis, limit_lower,
                               limit_upper, target_q, target_qd, target_ke, target_kd)

    def add_joint_ball(self, parent: int, child: int, parent_xform=None, child_xform=None,
                       axis=(0.0, 0.0, 1.0), cone_limit: float | None = None, twist_lower: float | None = None,
                       twist_upper: float | None = None) -> int:
        """A ball joint: the joint frames' origins coincide; rotation is free up to optional swing
        and twist limits (Mueller et al. 2020, sec. 3.4), both about ``axis`` (joint frame).

        Swing is the angle between ``axis`` carried by the parent joint frame and by the child
        joint frame (both in the world), kept <= ``cone_limit`` (rad, in [0, pi)). Twist is the child's
        rotation about its own ``axis`` left once the swing is removed (swing-twist decomposition of
        the child joint frame relative to the parent's; 0 when the frames coincide, positive
        counter-clockwise about the axis, like a revolute joint's angle), kept within
        [``twist_lower``, ``twist_upper``] (rad, within (-pi, pi]). ``None``: no limit.
        Both limits are hard (zero compliance). Newton's ``add_joint_ball`` has no limits (it has
        ``add_joint_d6`` with per-axis ones); the ``limit_lower``/``limit_upper`` a Newton user would
        look for are ``twist_lower``/``twist_upper`` here (stored in ``joint_limit``), the cone in
        ``joint_cone_limit``."""
        return self._add_joint(JOINT_BALL, parent, child, parent_xform, child_xform, axis, twist_lower,
                               twist_upper, cone_limit=cone_limit)

    def add_joint_fixed(self, parent: int, child: int, parent_xform=None, child_xform=None) -> int:
        """Welds the child to the parent: the joint frames coincide."""
        return self._add_joint(JOINT_FIXED, parent, child, parent_xform, child_xform)

    def add_joint_distance(self, parent: int, child: int, parent_xform=None, child_xform=None,
                           min_distance: float = -1.0, max_distance: float = 1.0) -> int:
        """Keeps the distance between the joint frames' origins (``parent_xform`` in the parent's frame,
        -1: the world; ``child_xform`` in the child's) within [``min_distance``, ``max_distance``] (m;
        a negative one: no such limit), Newton's meaning; rotation is free. Its coordinates are a free
        joint's (child joint frame in the parent joint frame, 7 and 6)."""
        lo = None if min_distance < 0.0 else float(min_distance)
        hi = None if max_distance < 0.0 else float(max_distance)
        return self._add_joint(JOINT_DISTANCE, parent, child, parent_xform, child_xform, limit_lower=lo,
                               limit_upper=hi)

    def add_joint_d6(self, parent: int, child: int, parent_xform=None, child_xform=None, linear_axes=(),
                     angular_axes=()) -> int:
        """A joint free along up to 3 ``linear_axes`` and about up to 3 ``angular_axes`` (joint frame),
        each an axis or (axis, lower, upper) with limits in m or rad (None: none); the rest is locked.
        The child joint frame sits at sum_i q_i l_i in the parent joint frame, turned by
        R(a_1, theta_1) R(a_2, theta_2) R(a_3, theta_3) (each angle about its axis carried by the
        rotations before it, as MuJoCo's hinges on one body and Newton's D6); ``joint_q`` holds the
        q_i then the theta_i. The axes of a kind must be orthonormal. Drives are not supported yet."""
        groups = []
        for what, axes in (("linear_axes", linear_axes), ("angular_axes", angular_axes)):
            rows = []
            for a in axes:
                plain = len(a) == 3 and all(np.isscalar(c) for c in a)  # an axis alone, else (axis, lower, upper)
                axis, lo, hi = (a, None, None) if plain else a
                v = np.asarray(axis, dtype=np.float64)
                if v.shape != (3,) or not np.linalg.norm(v) > 0.0:
                    raise ValueError(f"add_joint_d6: {what}: each axis must be 3 numbers, not zero, got {axis!r}")
                if lo is not None and hi is not None and lo > hi:
                    raise ValueError(f"add_joint_d6: {what}: lower limit {lo} above upper limit {hi}")
                rows.append((v / np.linalg.norm(v), -NO_LIMIT if lo is None else float(lo),
                             NO_LIMIT if hi is None else float(hi)))
            if len(rows) > 3:
                raise ValueError(f"add_joint_d6: at most 3 {what}, got {len(rows)}")
            basis = np.array([r[0] for r in rows]).reshape(-1, 3)
            if not np.allclose(basis @ basis.T, np.eye(len(rows)), atol=1e-9):
                raise ValueError(f"add_joint_d6: the {what} must be orthonormal, got {basis.tolist()}")
            groups.append(rows)
        k = self._add_joint(JOINT_D6, parent, child, parent_xform, child_xform)
        self.joints[k]["d6"] = tuple(groups)
        return k

    def add_joint_free(self, child: int, parent: int = -1, parent_xform=None, child_xform=None) -> int:
        """A free joint (no constraint): bookkeeping for articulations; ``add_body`` bodies are free."""
        return self._add_joint(JOINT_FREE, parent, child, parent_xform, child_xform)

    # -- finalize ------------------------------------------------------------------------------------

    def _finalize_rigid(self, device, dtype, requires_grad: bool, ground: dict | None, worlds: dict) -> dict:
        """The ``Model`` fields of the bodies, shapes and joints (empty arrays without them; the ground
        is the last shape) and the static meshes' triangles; ``worlds``: the entities' world indices
        (``WorldBuilderMixin._world_arrays``)."""
        nb = len(self.bodies)
        mass, com, inertia = _body_mass_properties(self.bodies, self.shapes)
        inv_mass = np.divide(1.0, mass, out=np.zeros(nb), where=mass > 0.0)
        inv_inertia = np.stack([np.linalg.inv(i) if m > 0.0 else np.zeros((3, 3)) for m, i in zip(mass, inertia)]) \
            if nb else np.zeros((0, 3, 3))
        shapes = list(self.shapes)
        if ground is not None:
            shapes.append({"body": -1, "type": S.SHAPE_PLANE, "p": np.array([0.0, 0.0, ground["height"]]),
                           "q": np.array([0.0, 0.0, 0.0, 1.0]), "size": (0.0, 0.0, 0.0), "radius": 0.0,
                           "points": np.zeros((0, 3)), "mu": ground["mu"], "restitution": ground["restitution"],
                           "world": -1})
        mesh_v, mesh_f, mesh_shape = _static_mesh_triangles(shapes)
        com_of = (lambda b: com[b] if b >= 0 else np.zeros(3))
        # shapes and joint frames are kept relative to the body's centre-of-mass frame (the body frame
        # moved to the com), which is the frame the solver integrates
        shape_xform = [np.concatenate([s["p"] - com_of(s["body"]), s["q"]]) for s in shapes]
        point_start = np.cumsum([0] + [len(s["points"]) for s in shapes])
        shape_world = np.asarray([sh["world"] for sh in shapes], dtype=np.int32).reshape(-1)
        bound = [_bounding_radius(s) for s in shapes]
        joints = self.joints
        s = dtype
        v3, tf, m33, v2, v6 = (T.vector(3, s), T.transformation(s), T.matrix((3, 3), s), T.vector(2, s),
                               T.vector(6, s))

        def arr(data, t, grad=False, n=None):
            npt = np.int32 if t is int else s._np
            return array(np.asarray(data, dtype=npt), dtype=t, shape=n, device=device,
                         requires_grad=grad and requires_grad)

        ns, nj = len(shapes), len(joints)
        body_q = [np.concatenate([b["p"], b["q"]]) for b in self.bodies]
        body_qd = [np.concatenate([b["lin_vel"], b["ang_vel"]]) for b in self.bodies]
        jx = (lambda j, key, b: np.concatenate([j[key][0] - com_of(b), j[key][1]]))
        return dict(  # noqa: C408 (keywords: the Model's field names)
            body_count=nb, shape_count=ns, joint_count=nj,
            body_world=arr(worlds["body_world"], int, n=nb), shape_world=arr(shape_world, int, n=ns),
            joint_world=arr(worlds["joint_world"], int, n=nj),
            body_linear_damping=float(self.body_linear_damping),
            body_angular_damping=float(self.body_angular_damping),
            rigid_contact_margin=float(self.rigid_contact_margin),
            body_q=arr(np.reshape(body_q, (nb, 7)), tf, True, nb),
            body_qd=arr(np.reshape(body_qd, (nb, 6)), v6, True, nb),
            body_com=arr(com.reshape(nb, 3), v3, n=nb), body_mass=arr(mass, s, n=nb),
            body_inv_mass=arr(inv_mass, s, True, nb), body_inertia=arr(inertia.reshape(nb, 3, 3), m33, n=nb),
            body_inv_inertia=arr(inv_inertia.reshape(nb, 3, 3), m33, True, nb),
            shape_body=arr([sh["body"] for sh in shapes], int, n=ns),
            shape_type=arr([sh["type"] for sh in shapes], int, n=ns),
            shape_xform=arr(np.reshape(shape_xform, (ns, 7)), tf, True, ns),
            shape_size=arr(np.reshape([sh["size"] for sh in shapes], (ns, 3)), v3, True, ns),
            shape_radius=arr([sh["radius"] for sh in shapes], s, n=ns),
            shape_bound=arr(bound, s, n=ns),
            shape_mu=arr([sh["mu"] for sh in shapes], s, True, ns),
            shape_restitution=arr([sh["restitution"] for sh in shapes], s, True, ns),
            shape_point_start=arr(point_start[:-1], int, n=ns),
            shape_point_count=arr(np.diff(point_start), int, n=ns),
            shape_points=arr(np.concatenate([sh["points"] for sh in shapes]).reshape(-1, 3) if ns
                             else np.zeros((0, 3)), v3, n=int(point_start[-1])),
            joint_type=arr([j["type"] for j in joints], int, n=nj),
            joint_parent=arr([j["parent"] for j in joints], int, n=nj),
            joint_child=arr([j["child"] for j in joints], int, n=nj),
            joint_X_p=arr(np.reshape([jx(j, "xp", j["parent"]) for j in joints], (nj, 7)), tf, True, nj),
            joint_X_c=arr(np.reshape([jx(j, "xc", j["child"]) for j in joints], (nj, 7)), tf, True, nj),
            joint_axis=arr(np.reshape([j["axis"] for j in joints], (nj, 3)), v3, n=nj),
            joint_limit=arr(np.reshape([j["limit"] for j in joints], (nj, 2)), v2, n=nj),
            joint_cone_limit=arr([j["cone"] for j in joints], s, n=nj),
            joint_target_q=arr([j["target_q"] for j in joints], s, True, nj),
            joint_target_qd=arr([j["target_qd"] for j in joints], s, True, nj),
            joint_target_ke=arr([j["ke"] for j in joints], s, True, nj),
            joint_target_kd=arr([j["kd"] for j in joints], s, True, nj),
            joint_armature=arr([j["armature"] for j in joints], s, True, nj),
            joint_d6_dim=arr(np.reshape([(len(j["d6"][0]), len(j["d6"][1])) for j in joints], -1), int, n=2 * nj),
            joint_d6_axis=arr(np.reshape([_d6_rows(j, 0) for j in joints], (-1, 3)), v3, n=D6_AXES * nj),
            joint_d6_limit=arr(np.reshape([_d6_rows(j, 1) for j in joints], (-1, 2)), v2, n=D6_AXES * nj),
            joint_drive_velocity=any(j["kd"] > 0.0 for j in joints),
            body_label=[b["label"] or f"body_{k}" for k, b in enumerate(self.bodies)],
            shape_label=[sh.get("label") or f"shape_{k}" for k, sh in enumerate(shapes)],
            shape_contype=np.asarray([sh.get("contype", 1) for sh in shapes], dtype=np.int64),
            shape_conaffinity=np.asarray([sh.get("conaffinity", 1) for sh in shapes], dtype=np.int64),
            joint_label=[j["label"] or f"joint_{k}" for k, j in enumerate(joints)],
            mesh_indices=arr(mesh_f, int, n=(len(mesh_f), 3)), mesh_vertices=arr(mesh_v, v3, True, len(mesh_v)),
            mesh_shape=arr(mesh_shape, int, n=len(mesh_shape)),
        )


def _d6_rows(joint: dict, part: int) -> list:
    """A joint's ``D6_AXES`` rows of axes (part 0) or limits (part 1): linear then angular, unused rows
    zero axes and no limits."""
    rows = []
    for group in joint["d6"]:
        padded = list(group) + [(np.zeros(3), -NO_LIMIT, NO_LIMIT)] * (3 - len(group))
        rows += [r[0] if part == 0 else (r[1], r[2]) for r in padded]
    return rows


def plane_xform(plane) -> tuple[np.ndarray, np.ndarray]:
    """(point (3,), quaternion (4,) turning z onto the unit normal) of the plane a x + b y + c z + d = 0."""
    a = np.asarray(plane, dtype=np.float64).reshape(-1)
    if a.shape != (4,) or not np.all(np.isfinite(a)):
        raise ValueError(f"add_shape_plane: plane must be 4 finite numbers (a, b, c, d), got {plane!r}")
    length = float(np.linalg.norm(a[:3]))
    if length == 0.0:
        raise ValueError(f"add_shape_plane: the plane's normal (a, b, c) must not be zero, got {plane!r}")
    n = a[:3] / length
    if n[2] < -0.5:  # z onto -z has no unique axis: half a turn about x, then -z onto n
        q = S.quat_multiply((n[1], -n[0], 0.0, 1.0 - n[2]), (1.0, 0.0, 0.0, 0.0))
    else:
        q = np.array([-n[1], n[0], 0.0, 1.0 + n[2]])  # (z x n, 1 + z . n): half the angle from z to n
    return n * (-a[3] / length), q / np.linalg.norm(q)


def _static_mesh_triangles(shapes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vertices (n, 3) in their shapes' frames, triangles (m, 3) indexing them, shape of each triangle)
    of the static mesh shapes: what particles collide with."""
    verts, tris, owner = [np.zeros((0, 3))], [np.zeros((0, 3), dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
    base = 0
    for k, sh in enumerate(shapes):
        if sh["type"] == S.SHAPE_MESH and sh["body"] < 0:
            v, f = sh["mesh"]
            verts.append(v)
            tris.append(np.asarray(f, dtype=np.int64) + base)
            owner.append(np.full(len(f), k, dtype=np.int64))
            base += len(v)
    return np.concatenate(verts), np.concatenate(tris), np.concatenate(owner)


def _body_mass_properties(bodies, shapes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mass (n,), com (n, 3) in the body frame, inertia (n, 3, 3) about the com, body frame)."""
    n = len(bodies)
    mass, com, inertia = np.zeros(n), np.zeros((n, 3)), np.zeros((n, 3, 3))
    parts: list[list] = [[] for _ in range(n)]
    for sh in shapes:
        if sh["body"] < 0:
            continue
        m, i_local, c_local = sh["mass_fn"](sh["density"])
        r = S.quat_to_matrix(sh["q"])
        c = sh["p"] + (r @ c_local if c_local is not None else 0.0)
        parts[sh["body"]].append((m, c, r @ i_local @ r.T))
    for k, b in enumerate(bodies):
        m, c, i = S.combine_mass(parts[k])
        if b["mass"] is not None:
            scale = b["mass"] / m if m > 0.0 else 0.0
            # no shapes: a 10 cm solid sphere's inertia, so an explicit mass alone gives a sane body
            i = i * scale if m > 0.0 else np.eye(3) * 0.4 * b["mass"] * 0.1 ** 2
            m = b["mass"]
        if b["com"] is not None:
            c = np.asarray(b["com"], dtype=np.float64)
        if b["inertia"] is not None:
            i = np.asarray(b["inertia"], dtype=np.float64).reshape(3, 3)
        mass[k], com[k], inertia[k] = m, c, i
    return mass, com, inertia


_POINTS_ONLY = (S.SHAPE_MESH, S.SHAPE_CONVEX_MESH)  # shapes that offer contact points but no surface


def point_roles(ta: int, tb: int) -> tuple[bool, bool] | None:
    """Which shape's contact points are tested against the other's surface: (a's points vs b,
    b's points vs a); None when the pair cannot touch (mesh or convex hull against mesh or convex
    hull, plane against plane). A sphere is a point with a radius, so its centre against the other
    shape covers every case; meshes and convex hulls offer only points, planes only a surface."""
    if (ta in _POINTS_ONLY and tb in _POINTS_ONLY) or ta == tb == S.SHAPE_PLANE:
        return None
    if S.SHAPE_PLANE in (ta, tb):
        return (tb == S.SHAPE_PLANE, ta == S.SHAPE_PLANE)
    if ta in _POINTS_ONLY or tb in _POINTS_ONLY:
        return (ta in _POINTS_ONLY, tb in _POINTS_ONLY)
    if S.SHAPE_SPHERE in (ta, tb):
        return (ta == S.SHAPE_SPHERE, ta != S.SHAPE_SPHERE)
    return (True, True)


def _bounding_radius(shape) -> float:
    """Radius (m) of a sphere about the shape's origin that holds it (planes: 0, handled apart)."""
    t, size = shape["type"], shape["size"]
    if t == S.SHAPE_SPHERE:
        return size[0]
    if t == S.SHAPE_BOX:
        return float(np.linalg.norm(size))
    if t == S.SHAPE_CAPSULE:
        return size[0] + size[1]
    if t in (S.SHAPE_CYLINDER, S.SHAPE_CONE):
        return float(np.hypot(size[0], size[1]))
    if t == S.SHAPE_ELLIPSOID:
        return max(size)
    if t in _POINTS_ONLY:
        return float(np.linalg.norm(shape["points"], axis=1).max()) if len(shape["points"]) else 0.0
    return 0.0
