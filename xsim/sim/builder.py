"""``ModelBuilder``: describe particles, constraints, cloth and colliders in Python, then
``finalize`` them into a ``Model``. SI units, z up, quaternions as (x, y, z, w).

Names follow NVIDIA Newton's where the concept is the same (``add_particle``, ``add_spring``,
``add_cloth_grid``, ``add_cloth_mesh``, ``particle_q``...). Compliances are XPBD's alpha, the
inverse of a stiffness: 0 is rigid.
"""

from __future__ import annotations

import contextlib
import gc

import numpy as np

from .. import types as T
from ..array import array
from ..device import get_device
from . import cloth, validate
from .collide import BOX, CAPSULE, MESH, SPHERE, Collider, mesh_arrays
from .declared import Declared
from .model import Model
from .rigid import RigidBuilderMixin
from .soft import SoftBuilderMixin
from .worlds import WorldBuilderMixin

DEFAULT_BEND_COMPLIANCE = 1.0e2  # 1/(N m): a soft fabric
DEFAULT_PARTICLE_RADIUS = 0.01   # m


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a bulk add makes millions of tuples (of numbers: no
    cycles), which set it off again and again (10 of 17 s for a 10^6 x 1 cloth grid); back on after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _lengths(d: np.ndarray) -> np.ndarray:
    """|d| along the last axis (m), the same bits for one vector as for rows of many."""
    return np.sqrt(np.sum(d * d, axis=-1))


def _quat_rotate(q, v: np.ndarray) -> np.ndarray:
    """Rotate rows of ``v`` (n, 3) by the unit quaternion ``q`` (x, y, z, w)."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q)
    u, w = q[:3], q[3]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


class ModelBuilder(Declared, WorldBuilderMixin, RigidBuilderMixin, SoftBuilderMixin):
    """Accumulates a scene; ``finalize`` turns it into a ``Model``.

    ``gravity``: (3,) m/s^2. ``particle_damping``: velocity damping rate, 1/s (applied implicitly:
    v <- v / (1 + damping * h) each substep). Entities belong to worlds (``xsim.sim.worlds``)."""

    gravity: tuple[float, float, float]
    """Gravity [m/s^2]"""
    particle_damping: float
    """Particle velocity damping rate [1/s]"""
    particle_q: list[tuple[float, float, float]]
    """Particle positions [m]"""
    particle_qd: list[tuple[float, float, float]]
    """Particle velocities [m/s]"""
    particle_mass: list[float]
    """Particle masses [kg] (0: pinned)"""
    particle_radius: list[float]
    """Particle contact radii [m]"""
    particle_world: list[int]
    """World of each particle"""
    particle_thickness: list[float]
    """Self-collision thickness of each particle's cloth [m] (0: the particle is not in cloth self-collision)"""
    particle_contact: bool
    """Whether free particles (those in no constraint) meet other particles (``self_contact.py``)"""
    particle_mu: float
    """Friction coefficient of particle-particle and cloth-cloth contacts"""
    particle_restitution: float
    """Restitution of particle-particle contacts, in [0, 1]"""
    spring_indices: list[tuple[int, int]]
    """Particles of each distance constraint"""
    spring_rest_length: list[float]
    """Rest lengths [m]"""
    spring_compliance: list[float]
    """Compliances [m/N]"""
    spring_damping: list[float]
    """Damping [N s/m]"""
    bending_indices: list[tuple[int, int, int, int]]
    """Edge and opposite vertices of each bending stencil"""
    bending_compliance: list[float]
    """Bend compliances [1/(N m)], per unit of bending energy (before area scaling)"""
    bending_damping: list[float]
    """Bend damping [N m s], likewise"""
    area_indices: list[tuple[int, int, int]]
    """Triangles with an area constraint"""
    area_compliance: list[float]
    """Area compliances [m^3/N]"""
    area_damping: list[float]
    """Area damping [N s/m^3]"""
    tri_indices: list[tuple[int, int, int]]
    """Cloth triangles (rendered and exported)"""
    colliders: list[Collider]
    """Descriptions of the static colliders (``add_collider_*``; each is also a shape on body -1)"""
    ground: dict | None
    """The ground plane's height, mu and restitution (None: no ground)"""

    def __init__(self, gravity=(0.0, 0.0, -9.81)):
        validate.args("ModelBuilder", gravity=gravity)
        self.gravity = tuple(float(g) for g in gravity)
        self.particle_damping = 0.0
        self.particle_q = []
        self.particle_qd = []
        self.particle_mass = []
        self.particle_radius = []
        self.particle_world = []
        self.particle_thickness = []
        self.particle_contact = True
        self.particle_mu = 0.5
        self.particle_restitution = 0.0
        self.spring_indices = []
        self.spring_rest_length = []
        self.spring_compliance = []
        self.spring_damping = []
        self.bending_indices = []
        self.bending_compliance = []
        self.bending_damping = []
        self.area_indices = []
        self.area_compliance = []
        self.area_damping = []
        self.tri_indices = []
        self.colliders = []
        self.ground = None
        self._init_worlds()
        self._init_rigid()
        self._init_soft()

    @property
    def particle_count(self) -> int:
        return len(self.particle_q)

    # -- particles and constraints ------------------------------------------------------------------

    def add_particle(self, pos, vel=(0.0, 0.0, 0.0), mass: float = 1.0, radius: float = DEFAULT_PARTICLE_RADIUS) -> int:
        """A particle at ``pos`` (m) with velocity ``vel`` (m/s), ``mass`` (kg; 0 pins it) and contact
        ``radius`` (m). Returns its index."""
        validate.args("add_particle", pos=pos, vel=vel, mass=mass, radius=radius)
        self.particle_q.append(tuple(float(c) for c in pos))
        self.particle_qd.append(tuple(float(c) for c in vel))
        self.particle_mass.append(float(mass))
        self.particle_radius.append(float(radius))
        self.particle_world.append(self.current_world)
        self.particle_thickness.append(0.0)
        return len(self.particle_q) - 1

    def pin_particle(self, i: int) -> None:
        """Make particle ``i`` kinematic (zero inverse mass): it moves only at its own velocity or
        towards ``Control.particle_target``."""
        self._check_particles((i,), "pin_particle")
        self.particle_mass[i] = 0.0

    def add_distance_constraint(self, i: int, j: int, rest_length: float | None = None,
                                compliance: float = 0.0, damping: float = 0.0) -> int:
        """C = |x_i - x_j| - rest_length (m; default: the current distance), with ``compliance``
        (m/N) and ``damping`` (N s/m: the force -damping * dC/dt, XPBD's damping term, which acts
        only where the compliance is > 0). Returns its index."""
        validate.args("add_distance_constraint", rest_length=rest_length, compliance=compliance, damping=damping)
        self._check_particles((i, j), "add_distance_constraint")
        _check_nonnegative(damping, "add_distance_constraint", "damping")
        if rest_length is None:
            rest_length = float(_lengths(np.subtract(self.particle_q[i], self.particle_q[j])))
        self.spring_indices.append((i, j))
        self.spring_rest_length.append(float(rest_length))
        self.spring_compliance.append(float(compliance))
        self.spring_damping.append(float(damping))
        return len(self.spring_indices) - 1

    add_spring = add_distance_constraint

    def add_bending_constraint(self, v0: int, v1: int, o0: int, o1: int, compliance: float = DEFAULT_BEND_COMPLIANCE,
                               damping: float = 0.0) -> int:
        """Isometric bending across the edge (v0, v1) between triangles (v0, v1, o0) and (v0, v1, o1);
        ``compliance`` in 1/(N m) (the inverse of the bending stiffness), ``damping`` in N m s (the
        bending stiffness's damping: the stiffness times a time). Its weights come from the
        particles' positions at ``finalize``."""
        validate.args("add_bending_constraint", compliance=compliance, damping=damping)
        self._check_particles((v0, v1, o0, o1), "add_bending_constraint")
        _check_nonnegative(damping, "add_bending_constraint", "damping")
        self.bending_indices.append((v0, v1, o0, o1))
        self.bending_compliance.append(float(compliance))
        self.bending_damping.append(float(damping))
        return len(self.bending_indices) - 1

    def add_triangle(self, i: int, j: int, k: int, area_compliance: float | None = None,
                     area_damping: float = 0.0) -> int:
        """A cloth triangle (rendered and exported); with ``area_compliance`` (m^3/N: XPBD alpha of
        C = area - rest area, m^2) it also keeps its area, with ``area_damping`` (N s/m^3)."""
        validate.args("add_triangle", area_compliance=area_compliance, area_damping=area_damping)
        self._check_particles((i, j, k), "add_triangle")
        _check_nonnegative(area_damping, "add_triangle", "area_damping")
        self.tri_indices.append((i, j, k))
        if area_compliance is not None:
            self.area_indices.append((i, j, k))
            self.area_compliance.append(float(area_compliance))
            self.area_damping.append(float(area_damping))
        return len(self.tri_indices) - 1

    def _check_particles(self, ids, where: str) -> None:
        n = len(self.particle_q)
        for i in ids:
            if not 0 <= int(i) < n:
                raise IndexError(f"{where}: particle index {i} out of range (there are {n} particles)")
        self._world_of(where, [self.particle_world[int(i)] for i in ids])

    # -- cloth ----------------------------------------------------------------------------------------

    def add_cloth_grid(self, pos, rot, vel, dim_x: int, dim_y: int, cell_x: float, cell_y: float, mass: float,
                       fix_left: bool = False, fix_right: bool = False, fix_top: bool = False,
                       fix_bottom: bool = False, stretch_compliance: float = 0.0, shear_compliance: float = 0.0,
                       bend_compliance: float | None = DEFAULT_BEND_COMPLIANCE,
                       area_compliance: float | None = None,
                       particle_radius: float = DEFAULT_PARTICLE_RADIUS, *, stretch_stiffness: float | None = None,
                       bend_stiffness: float | None = None, stretch_damping: float = 0.0, bend_damping: float = 0.0,
                       density: float | None = None, self_collision: bool = False,
                       thickness: float | None = None) -> int:
        """A rectangular cloth of ``dim_x`` x ``dim_y`` cells of ``cell_x`` x ``cell_y`` m, so
        (dim_x + 1) * (dim_y + 1) particles of ``mass`` kg each, indexed row by row from ``pos`` (the
        corner) along local x then y, rotated by ``rot`` (xyzw). Grid-aligned edges get
        ``stretch_compliance``, cell diagonals ``shear_compliance``; interior edges get isometric
        bending (None: no bending); ``fix_*`` pins an edge column/row (left: x = 0, bottom: y = 0).
        The material may instead be given in physical units (``cloth_material``): ``stretch_stiffness``,
        ``bend_stiffness``, ``density``; and damping (``stretch_damping``, ``bend_damping``).
        Returns the index of the first particle."""
        validate.args("add_cloth_grid", pos=pos, rot=rot, vel=vel, dim_x=dim_x, dim_y=dim_y, cell_x=cell_x,
                      cell_y=cell_y, mass=mass, stretch_compliance=stretch_compliance,
                      shear_compliance=shear_compliance, bend_compliance=bend_compliance,
                      area_compliance=area_compliance, particle_radius=particle_radius,
                      stretch_stiffness=stretch_stiffness, bend_stiffness=bend_stiffness,
                      stretch_damping=stretch_damping, bend_damping=bend_damping, density=density)
        thick = _self_thickness("add_cloth_grid", self_collision, thickness, particle_radius)
        gx, gy = np.meshgrid(np.arange(dim_x + 1) * cell_x, np.arange(dim_y + 1) * cell_y)
        local = np.stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)], axis=1)
        ix, iy = np.meshgrid(np.arange(dim_x + 1), np.arange(dim_y + 1))
        ix, iy = ix.ravel(), iy.ravel()
        pinned = (fix_left & (ix == 0)) | (fix_right & (ix == dim_x)) | (fix_bottom & (iy == 0)) | (
            fix_top & (iy == dim_y))
        tris = cloth.grid_triangles(dim_x, dim_y)

        def edge_compliance(edges):
            diagonal = (ix[edges[:, 0]] != ix[edges[:, 1]]) & (iy[edges[:, 0]] != iy[edges[:, 1]])
            return np.where(diagonal, shear_compliance, stretch_compliance)
        material = _cloth_material("add_cloth_grid", stretch_compliance != 0.0 or shear_compliance != 0.0,
                                   bend_compliance, stretch_stiffness, bend_stiffness, stretch_damping, bend_damping,
                                   mass, density)
        return self._add_cloth(_quat_rotate(rot, local) + np.asarray(pos, dtype=np.float64), tris, vel, pinned,
                               edge_compliance, material, area_compliance, particle_radius, thick)

    def add_cloth_mesh(self, vertices, indices=None, pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0),
                       vel=(0.0, 0.0, 0.0), mass: float = 0.1, scale: float = 1.0,
                       stretch_compliance: float = 0.0, bend_compliance: float | None = DEFAULT_BEND_COMPLIANCE,
                       area_compliance: float | None = None,
                       particle_radius: float = DEFAULT_PARTICLE_RADIUS, *, stretch_stiffness: float | None = None,
                       bend_stiffness: float | None = None, stretch_damping: float = 0.0, bend_damping: float = 0.0,
                       density: float | None = None, self_collision: bool = False,
                       thickness: float | None = None) -> int:
        """Cloth from a triangle mesh (``vertices`` (n, 3) and ``indices`` (m, 3), or a
        ``trimesh.Trimesh``), scaled, rotated by ``rot`` and moved to ``pos``; ``mass`` kg per
        particle; every edge is a distance constraint, every interior edge bends. Material, damping and
        self-collision keywords as in ``add_cloth_grid``. Returns the index of the first particle."""
        validate.args("add_cloth_mesh", vertices=vertices, pos=pos, rot=rot, vel=vel, mass=mass, scale=scale,
                      stretch_compliance=stretch_compliance, bend_compliance=bend_compliance,
                      area_compliance=area_compliance, particle_radius=particle_radius,
                      stretch_stiffness=stretch_stiffness, bend_stiffness=bend_stiffness,
                      stretch_damping=stretch_damping, bend_damping=bend_damping, density=density)
        thick = _self_thickness("add_cloth_mesh", self_collision, thickness, particle_radius)
        v, f = mesh_arrays(vertices, indices)
        x = _quat_rotate(rot, v * scale) + np.asarray(pos, dtype=np.float64)
        material = _cloth_material("add_cloth_mesh", stretch_compliance != 0.0, bend_compliance, stretch_stiffness,
                                   bend_stiffness, stretch_damping, bend_damping, mass, density)
        return self._add_cloth(x, f.astype(np.int64), vel, np.zeros(len(v), dtype=bool),
                               lambda edges: np.full(len(edges), stretch_compliance), material, area_compliance,
                               particle_radius, thick)

    def _add_cloth(self, x, tris, vel, pinned, edge_compliance, material: dict, area_compliance, radius,
                   thickness: float) -> int:
        """Particles, triangles, distance and bending constraints of a cloth; ``edge_compliance(edges)``:
        the raw compliance of each edge (m/N) where ``material`` gives no stretch stiffness; ``thickness``:
        its self-collision thickness (m, 0: none)."""
        with _collector_paused():
            return self._add_cloth_rows(x, tris, vel, pinned, edge_compliance, material, area_compliance, radius,
                                        thickness)

    def _add_cloth_rows(self, x, tris, vel, pinned, edge_compliance, material: dict, area_compliance, radius,
                        thickness: float) -> int:
        start = len(self.particle_q)
        density = material["density"]
        mass = cloth.vertex_areas(x, tris) * density if density is not None else np.full(len(x), material["mass"])
        # in bulk, as add_particle, add_triangle, add_distance_constraint and add_bending_constraint would add
        # them one by one (the arguments were checked as a whole; the indices are the cloth's own): a call per
        # element took 122 s for a 10^6 x 1 grid
        validate.args("add_particle", vel=vel, radius=radius)
        n = len(x)
        self.particle_q.extend(map(tuple, np.asarray(x, dtype=np.float64).tolist()))
        self.particle_qd.extend([tuple(float(c) for c in vel)] * n)
        self.particle_mass.extend(np.where(pinned, 0.0, mass).astype(np.float64).tolist())
        self.particle_radius.extend([float(radius)] * n)
        self.particle_world.extend([self.current_world] * n)
        self.particle_thickness.extend([float(thickness)] * n)
        validate.args("add_triangle", area_compliance=area_compliance)
        tri_rows = list(map(tuple, (tris + start).tolist()))
        self.tri_indices.extend(tri_rows)
        if area_compliance is not None:
            self.area_indices.extend(tri_rows)
            self.area_compliance.extend([float(area_compliance)] * len(tri_rows))
            self.area_damping.extend([0.0] * len(tri_rows))
        edges, stencils = cloth.edges_and_stencils(tris)
        if material["stretch_stiffness"] is not None:
            # spring k_e = k A_e / l_e^2: a uniform stretch e of the sheet stores k e^2 / 2 per m^2
            shape = cloth.edge_areas(x, tris, edges) / np.sum((x[edges[:, 0]] - x[edges[:, 1]]) ** 2, axis=1)
            compliance = 1.0 / (material["stretch_stiffness"] * shape)
            damping = material["stretch_damping"] * shape
        else:
            compliance = edge_compliance(edges)
            damping = np.full(len(edges), material["stretch_damping"])
        compliance, damping = np.broadcast_to(compliance, len(edges)), np.broadcast_to(damping, len(edges))
        for name, values in (("compliance", compliance), ("damping", damping)):  # the first bad one, as one by one
            bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0.0)))
            if len(bad):
                validate.args("add_distance_constraint", **{name: float(values[bad[0]])})
                _check_nonnegative(float(values[bad[0]]), "add_distance_constraint", name)
        xs = np.array(self.particle_q[start:], dtype=np.float64)
        self.spring_indices.extend(map(tuple, (edges + start).tolist()))
        self.spring_rest_length.extend(_lengths(xs[edges[:, 0]] - xs[edges[:, 1]]).tolist() if len(edges) else [])
        self.spring_compliance.extend(compliance.astype(np.float64).tolist())
        self.spring_damping.extend(damping.astype(np.float64).tolist())
        if material["bend_compliance"] is not None:
            validate.args("add_bending_constraint", compliance=material["bend_compliance"],
                          damping=material["bend_damping"])
            _check_nonnegative(material["bend_damping"], "add_bending_constraint", "damping")
            self.bending_indices.extend(map(tuple, (stencils + start).tolist()))
            self.bending_compliance.extend([float(material["bend_compliance"])] * len(stencils))
            self.bending_damping.extend([float(material["bend_damping"])] * len(stencils))
        return start

    # -- colliders: static shapes (body -1) ---------------------------------------------------------

    def add_ground_plane(self, mu: float = 0.5, restitution: float = 0.0, height: float = 0.0) -> None:
        """The plane z = ``height`` (m), with friction coefficient ``mu`` and ``restitution``: a plane
        shape shared by every world (the model's last shape; ``add_shape_plane`` adds any other plane)."""
        validate.args("add_ground_plane", mu=mu, restitution=restitution, height=height)
        self.ground = {"mu": float(mu), "restitution": float(restitution), "height": float(height)}

    def add_collider_sphere(self, center, radius: float, mu: float = 0.5, restitution: float = 0.0) -> int:
        """A static sphere (m): ``add_shape_sphere(-1, ...)``, also described in ``colliders`` for export.
        ``restitution``: particles that hit it leave at this fraction of their approach speed (0..1).
        Returns the shape index."""
        validate.args("add_collider_sphere", center=center, radius=radius, mu=mu, restitution=restitution)
        c = self._add_collider(Collider(SPHERE, pos=tuple(center), mu=mu, restitution=restitution,
                                        radius=float(radius)))
        return self.add_shape_sphere(-1, (c.pos, c.rot), radius=c.radius, mu=c.mu, restitution=c.restitution)

    def add_collider_box(self, center, half_extents, rot=(0.0, 0.0, 0.0, 1.0), mu: float = 0.5,
                         restitution: float = 0.0) -> int:
        """A static box with ``half_extents`` (m) along its local axes: ``add_shape_box(-1, ...)``.
        Returns the shape index."""
        validate.args("add_collider_box", center=center, half_extents=half_extents, rot=rot, mu=mu,
                      restitution=restitution)
        c = self._add_collider(Collider(BOX, pos=tuple(center), rot=tuple(rot), mu=mu, restitution=restitution,
                                        half_extents=tuple(float(h) for h in half_extents)))
        return self.add_shape_box(-1, (c.pos, c.rot), *c.half_extents, mu=c.mu, restitution=c.restitution)

    def add_collider_capsule(self, center, radius: float, half_height: float, rot=(0.0, 0.0, 0.0, 1.0),
                             mu: float = 0.5, restitution: float = 0.0) -> int:
        """A static capsule along its local z axis: a segment of half length ``half_height`` (m)
        swept by ``radius``: ``add_shape_capsule(-1, ...)``. Returns the shape index."""
        validate.args("add_collider_capsule", center=center, radius=radius, half_height=half_height, rot=rot,
                      mu=mu, restitution=restitution)
        c = self._add_collider(Collider(CAPSULE, pos=tuple(center), rot=tuple(rot), mu=mu, restitution=restitution,
                                        radius=float(radius), half_height=float(half_height)))
        return self.add_shape_capsule(-1, (c.pos, c.rot), radius=c.radius, half_height=c.half_height, mu=c.mu,
                                      restitution=c.restitution)

    def add_collider_mesh(self, mesh, pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), mu: float = 0.5,
                          restitution: float = 0.0) -> int:
        """A static triangle mesh (a ``trimesh.Trimesh`` or ``(vertices, indices)``) placed at
        ``pos``/``rot``: ``add_shape_mesh(-1, ...)``. Triangles should wind counter-clockwise seen from
        outside: a particle behind a face is pushed out to its front. Returns the shape index."""
        validate.args("add_collider_mesh", mesh=mesh, pos=pos, rot=rot, mu=mu, restitution=restitution)
        v, f = mesh_arrays(*mesh) if isinstance(mesh, tuple) else mesh_arrays(mesh, None)
        c = self._add_collider(Collider(MESH, pos=tuple(pos), rot=tuple(rot), mu=mu, restitution=restitution,
                                        vertices=v, indices=f))
        return self.add_shape_mesh(-1, (v, f), (c.pos, c.rot), mu=c.mu, restitution=c.restitution)

    def _add_collider(self, c: Collider) -> Collider:
        """Record the description of a static collider (for USD export and previews), its pose normalized."""
        c.pos = tuple(float(p) for p in c.pos)
        rot = np.asarray(c.rot, dtype=np.float64)
        c.rot = tuple(float(q) for q in rot / np.linalg.norm(rot))  # tolerate rounded quaternions
        c.mu = float(c.mu)
        c.restitution = float(c.restitution)
        if not 0.0 <= c.restitution <= 1.0:
            raise ValueError(f"add_collider_{c.type}: restitution must be in [0, 1], got {c.restitution}")
        self.colliders.append(c)
        return c

    # -- robots from files ------------------------------------------------------------------------------

    def add_mjcf(self, source, xform=None, floating: bool | None = None, unsupported_geoms: str = "error",
                 collision: bool = True):
        """Import an MJCF robot compiled by MuJoCo (``xsim[mjcf]``): a path, XML text, ``MjSpec`` or
        ``MjModel``, placed by ``xform``. Returns the index maps (``xsim.io.importers.mjcf``)."""
        from ..io.importers.mjcf import add_mjcf

        return add_mjcf(self, source, xform=xform, floating=floating, unsupported_geoms=unsupported_geoms,
                        collision=collision)

    def add_urdf(self, source, xform=None, floating: bool = False, package_dirs=(), unsupported_geoms: str = "error",
                 collision: bool = True):
        """Import a URDF robot parsed by yourdfpy (``xsim[urdf]``): a path or XML text, its root link
        placed by ``xform``, welded to the world unless ``floating``. Returns the name maps
        (``xsim.io.importers.urdf``)."""
        from ..io.importers.urdf import add_urdf

        return add_urdf(self, source, xform=xform, floating=floating, package_dirs=package_dirs,
                        unsupported_geoms=unsupported_geoms, collision=collision)

    # -- finalize -------------------------------------------------------------------------------------

    def finalize(self, device="cpu", requires_grad: bool = False, dtype=T.float32) -> Model:
        """The ``Model`` on ``device`` with arrays of scalar type ``dtype`` (float32 or float64). A kind's
        damping array requires grad only where some of its damping is non-zero (an undamped kind then
        skips the damping term; set ``requires_grad`` on the array to optimize damping from zero)."""
        dtype = T.resolve(dtype)
        if dtype not in (T.float32, T.float64):
            raise TypeError(f"finalize: dtype must be xsim.float32 or xsim.float64, got {dtype!r}")
        v3, v4, qt = T.vector(3, dtype), T.vector(4, dtype), T.quaternion(dtype)

        def arr(data, t, grad=False, shape=None):
            return array(np.asarray(data, dtype=dtype._np if t in (dtype, v3, v4, qt) else np.int32),
                         dtype=t, shape=shape, device=device, requires_grad=grad and requires_grad)

        def ints(rows, width):
            return arr(np.asarray(rows, dtype=np.int32).reshape(-1, width), int)

        n = len(self.particle_q)
        x = np.asarray(self.particle_q, dtype=np.float64).reshape(n, 3)
        mass = np.asarray(self.particle_mass, dtype=np.float64)
        inv_mass = np.divide(1.0, mass, out=np.zeros(n), where=mass > 0.0)
        springs = np.asarray(self.spring_indices, dtype=np.int64).reshape(-1, 2)
        bends = np.asarray(self.bending_indices, dtype=np.int64).reshape(-1, 4)
        areas = np.asarray(self.area_indices, dtype=np.int64).reshape(-1, 3)
        weights, bend_area = cloth.isometric_bending_weights(x, bends)
        # the energy 3/(A0+A1) |C|^2 / (2 alpha) of a vector constraint C of compliance alpha*(A0+A1)/3
        bend_compliance = np.asarray(self.bending_compliance, dtype=np.float64) * bend_area / 3.0
        bend_damping = np.asarray(self.bending_damping, dtype=np.float64) * 3.0 / np.maximum(bend_area, 1e-300)
        worlds = self._world_arrays()
        return Model(
            device=get_device(device), dtype=dtype, requires_grad=requires_grad, gravity=self.gravity,
            world_count=max(1, self.world_count), particle_world=arr(worlds["particle_world"], int, shape=n),
            particle_damping=float(self.particle_damping), particle_count=n,
            particle_q=arr(x, v3, shape=n), particle_qd=arr(np.asarray(self.particle_qd).reshape(n, 3), v3, shape=n),
            particle_mass=arr(mass, dtype, True, shape=n), particle_inv_mass=arr(inv_mass, dtype, True, shape=n),
            particle_radius=arr(self.particle_radius, dtype, True, shape=n),
            particle_thickness=arr(self.particle_thickness, dtype, shape=n),
            particle_contact=bool(self.particle_contact), particle_mu=_setting("particle_mu", self.particle_mu),
            particle_restitution=_setting("particle_restitution", self.particle_restitution, 1.0),
            spring_count=len(springs), spring_indices=ints(springs, 2),
            spring_rest_length=arr(self.spring_rest_length, dtype, True, shape=len(springs)),
            spring_compliance=arr(self.spring_compliance, dtype, True, shape=len(springs)),
            spring_damping=arr(self.spring_damping, dtype, any(self.spring_damping), shape=len(springs)),
            bending_count=len(bends), bending_indices=ints(bends, 4),
            bending_weights=arr(weights, v4, shape=len(bends)),
            bending_compliance=arr(bend_compliance, dtype, True, shape=len(bends)),
            bending_damping=arr(bend_damping, dtype, any(self.bending_damping), shape=len(bends)),
            area_count=len(areas), area_indices=ints(areas, 3),
            area_rest=arr(cloth.triangle_areas(x, areas), dtype, True, shape=len(areas)),
            area_compliance=arr(self.area_compliance, dtype, True, shape=len(areas)),
            area_damping=arr(self.area_damping, dtype, any(self.area_damping), shape=len(areas)),
            tri_indices=np.asarray(self.tri_indices, dtype=np.int32).reshape(-1, 3),
            ground=self.ground is not None, ground_height=self.ground["height"] if self.ground else 0.0,
            colliders=list(self.colliders),
            **self._finalize_rigid(device, dtype, requires_grad, self.ground, worlds),
            **self._finalize_soft(device, dtype, requires_grad, x),
        )


def _setting(name: str, value, upper: float | None = None) -> float:
    """A builder's model-wide contact setting, refused at ``finalize`` where it is not a number >= 0
    (and <= ``upper``)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"ModelBuilder.{name} must be a number, got {value!r}") from None
    if not (value >= 0.0 and (upper is None or value <= upper)):
        bound = f" and <= {upper}" if upper is not None else ""
        raise ValueError(f"ModelBuilder.{name} must be >= 0{bound}, got {value}")
    return value


def _self_thickness(where: str, self_collision: bool, thickness, radius: float) -> float:
    """A cloth's self-collision thickness (m; 0 without self-collision): ``thickness``, else its particle
    radius; refused where not a number, not as the builder's other lengths are (``validate.args``: positive,
    in float32's range), or given without ``self_collision``."""
    if not isinstance(self_collision, (bool, np.bool_)):
        raise TypeError(f"{where}: self_collision must be True or False, got {self_collision!r}")
    if not self_collision:
        if thickness is not None:
            raise ValueError(f"{where}: thickness={thickness!r} is given but self_collision is off; "
                             f"pass self_collision=True")
        return 0.0
    value = radius if thickness is None else thickness
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: thickness must be a number (m), got {thickness!r}") from None
    validate.args(where, thickness=value)
    return value


def _check_nonnegative(value: float, where: str, name: str) -> None:
    if not value >= 0.0:
        raise ValueError(f"{where}: {name} must be >= 0, got {value}")


def _cloth_material(where: str, raw_stretch: bool, bend_compliance, stretch_stiffness, bend_stiffness,
                    stretch_damping: float, bend_damping: float, mass: float, density) -> dict:
    """Check a cloth's material keywords (one of each raw/physical pair) and return them as used.

    Physical units: ``stretch_stiffness`` k (N/m), each edge's spring k A_e / l_e^2 (A_e: a third
    of the rest area of the triangles beside it, l_e: its length), so a uniform stretch e of the
    sheet stores k e^2 / 2 per m^2 whatever the mesh; ``bend_stiffness`` (N m), the inverse of the
    bend compliance (bending energy per unit area: stiffness * (k1 + k2)^2 / 2, k1, k2 the principal
    curvatures); ``density`` (kg/m^2) replaces ``mass``: each particle gets a third of its
    triangles' area times it. ``stretch_damping`` (N s/m) is per edge with compliances and per
    material (converted like the stiffness) with ``stretch_stiffness``; ``bend_damping`` (N m s)."""
    if stretch_stiffness is not None:
        if raw_stretch:
            raise ValueError(f"{where}: give stretch_stiffness (N/m) or stretch/shear compliances (m/N), not both")
        if not stretch_stiffness > 0.0:
            raise ValueError(f"{where}: stretch_stiffness must be > 0 N/m, got {stretch_stiffness}")
    if bend_stiffness is not None:
        if bend_compliance != DEFAULT_BEND_COMPLIANCE:
            raise ValueError(f"{where}: give bend_stiffness (N m) or bend_compliance (1/(N m)), not both")
        if not bend_stiffness > 0.0:
            raise ValueError(f"{where}: bend_stiffness must be > 0 N m, got {bend_stiffness}")
        bend_compliance = 1.0 / bend_stiffness
    if density is not None and not density > 0.0:
        raise ValueError(f"{where}: density must be > 0 kg/m^2, got {density}")
    _check_nonnegative(stretch_damping, where, "stretch_damping")
    _check_nonnegative(bend_damping, where, "bend_damping")
    return {"stretch_stiffness": stretch_stiffness, "bend_compliance": bend_compliance,
            "stretch_damping": float(stretch_damping), "bend_damping": float(bend_damping), "mass": mass,
            "density": density}
