"""``Model`` (static scene data), ``State`` (positions and velocities at one time) and ``Control``
(inputs). Units are SI throughout: metres, seconds, kilograms; z is up.

A ``Model`` comes from ``ModelBuilder.finalize``. Its arrays are the solver's inputs; those that
make sense to optimize (masses, compliances, rest values, shape poses) are created with
``requires_grad`` when the model is, so a Tape carries gradients to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from .. import types as T
from ..array import array, zeros
from ..device import Device
from ..types import float32, int32, mat33, spatial_vector, transform, vec2, vec3, vec4
from .collide import Collider
from .declared import Declared
from .kinematics import _layout, eval_ik


class State(Declared):
    """The time-varying part of a simulation. Body and joint fields are None in a model without
    bodies; ``joint_q``/``joint_qd`` are the joint coordinates of the body state
    (``xsim.sim.kinematics``; ``SolverXPBD`` keeps them current, ``eval_fk`` sets the bodies from them)."""

    particle_q: array(dtype=vec3) | None
    """Particle positions [m], shape [particle_count]"""
    particle_qd: array(dtype=vec3) | None
    """Particle velocities [m/s], shape [particle_count]"""
    body_q: array(dtype=transform) | None
    """Body frames in the world (position [m], then rotation quaternion xyzw), shape [body_count]"""
    body_qd: array(dtype=spatial_vector) | None
    """Body velocities, world: the com's linear [m/s], then angular [rad/s], shape [body_count]"""
    body_q_residual: array(dtype=vec3) | None
    """What ``body_q``'s positions lost to rounding when the solver step that wrote them stored them [m],
    shape [body_count]: the bodies are at ``body_q.p + body_q_residual``, less than half a step of the
    array's precision from ``body_q`` (compensated summation: a float32 body far from the origin keeps
    the motion of each step in full); the next step starts from there. Zero in a new state; None is
    zero. Setting ``body_q`` yourself leaves it as it was, which moves the bodies by at most that much"""
    joint_q: array(dtype=float32) | None
    """Joint coordinates [m or rad], shape [joint_coord_count] (layout: ``Model.joint_q_start``)"""
    joint_qd: array(dtype=float32) | None
    """Joint velocities [m/s or rad/s], shape [joint_dof_count] (layout: ``Model.joint_qd_start``)"""
    body_contacts: SimpleNamespace | None
    """What the solver step that wrote this state leaves for the next step from it (``SolverXPBD``:
    the rigid contacts whose static friction held, with their slips); None before any step. A copy
    of the state (``copy.copy``, a checkpoint) shares it, so a step from the copy is the same step"""

    def __init__(self, particle_q, particle_qd, body_q=None, body_qd=None, joint_q=None, joint_qd=None):
        self.particle_q = particle_q
        self.particle_qd = particle_qd
        self.body_q = body_q
        self.body_qd = body_qd
        self.body_q_residual = None
        self.joint_q = joint_q
        self.joint_qd = joint_qd
        self.body_contacts = None

    @property
    def particle_count(self) -> int:
        """Number of particles (0 without ``particle_q``)."""
        return self.particle_q.shape[0] if self.particle_q is not None else 0

    @property
    def requires_grad(self) -> bool:
        """Whether the particle or body positions require grad."""
        return any(a is not None and a.requires_grad for a in (self.particle_q, self.body_q))


@dataclass
class Control(Declared):
    """Inputs for one step; a field left None is not used."""

    particle_target: array(dtype=vec3) | None = None
    """Where each pinned (zero-mass) particle should be at the end of the step [m], shape
    [particle_count]; pinned particles then move there at constant velocity (None: they keep their
    own velocity)"""
    joint_target_q: array(dtype=float32) | None = None
    """Drive position targets [rad or m], shape [joint_count] (None: ``Model.joint_target_q``)"""
    joint_target_qd: array(dtype=float32) | None = None
    """Drive velocity targets [rad/s or m/s], shape [joint_count] (None: ``Model.joint_target_qd``)"""


@dataclass
class Model(Declared):
    """Static simulation data (see the module docstring), made by ``ModelBuilder.finalize``.

    Annotations give the float32 types; a model finalized with ``dtype=float64`` holds the float64
    ones (``vec3d``, ``transformd``...). Shapes are the arrays' own shapes (a ``vec3`` array of n
    elements has shape [n]). Bodies, shapes and joints are kept relative to each body's
    centre-of-mass frame (``body_com`` from the body frame): ``shape_xform``, ``joint_X_p`` and
    ``joint_X_c`` are transforms in the com frames (parent -1: the world). Without bodies and
    shapes their arrays are empty."""

    device: Device
    """The device all arrays live on"""
    dtype: type
    """Scalar type of the float arrays: ``float32`` or ``float64``"""
    requires_grad: bool
    """Whether the arrays that make sense to optimize require grad"""
    gravity: tuple[float, float, float]
    """Gravity [m/s^2]"""
    world_count: int
    """Number of worlds (``xsim.sim.worlds``); at least 1"""

    # -- particles and their constraints
    particle_count: int
    """Number of particles"""
    particle_damping: float
    """Particle velocity damping rate [1/s]: v <- v / (1 + damping h) each substep"""
    particle_world: array(dtype=int32)
    """World of each particle (-1: global, meets every world), shape [particle_count]"""
    particle_q: array(dtype=vec3)
    """Initial particle positions [m], shape [particle_count]"""
    particle_qd: array(dtype=vec3)
    """Initial particle velocities [m/s], shape [particle_count]"""
    particle_mass: array(dtype=float32)
    """Particle masses [kg] (0: pinned), shape [particle_count]"""
    particle_inv_mass: array(dtype=float32)
    """Inverse particle masses [1/kg] (0: pinned), shape [particle_count]"""
    particle_radius: array(dtype=float32)
    """Particle contact radii [m], shape [particle_count]"""
    particle_thickness: array(dtype=float32)
    """Cloth self-collision thickness [m] (0: not in self-collision), shape [particle_count]"""
    particle_contact: bool
    """Whether free particles (in no constraint) meet other particles (``xsim.solvers.xpbd.self_contact``)"""
    particle_mu: float
    """Friction coefficient of particle-particle and cloth self contacts"""
    particle_restitution: float
    """Restitution of particle-particle contacts, in [0, 1]"""
    spring_count: int
    """Number of distance constraints"""
    spring_indices: array(dtype=int32, ndim=2)
    """Particles of each distance constraint, shape [spring_count, 2]"""
    spring_rest_length: array(dtype=float32)
    """Rest lengths [m], shape [spring_count]"""
    spring_compliance: array(dtype=float32)
    """XPBD compliance alpha [m/N], shape [spring_count]"""
    spring_damping: array(dtype=float32)
    """XPBD damping beta [N s/m] (force -beta dC/dt), shape [spring_count]"""
    bending_count: int
    """Number of bending constraints (interior cloth edges)"""
    bending_indices: array(dtype=int32, ndim=2)
    """Edge v0, v1 and opposite vertices v2, v3 of each bending stencil, shape [bending_count, 4]"""
    bending_weights: array(dtype=vec4)
    """Cotangent weights K of the isometric bending stencil C = sum K_k x_k, shape [bending_count]"""
    bending_compliance: array(dtype=float32)
    """Compliance alpha of C: bend compliance [1/(N m)] * area / 3 [m^2], shape [bending_count]"""
    bending_damping: array(dtype=float32)
    """Damping beta of C: bend damping [N m s] * 3 / area [1/m^2], shape [bending_count]"""
    area_count: int
    """Number of area constraints"""
    area_indices: array(dtype=int32, ndim=2)
    """Triangle of each area constraint, shape [area_count, 3]"""
    area_rest: array(dtype=float32)
    """Rest areas [m^2], shape [area_count]"""
    area_compliance: array(dtype=float32)
    """XPBD compliance [m^3/N] of C = area - rest area, shape [area_count]"""
    area_damping: array(dtype=float32)
    """XPBD damping [N s/m^3], shape [area_count]"""
    tri_indices: np.ndarray
    """Cloth triangles for rendering and export (numpy int32), shape [triangle_count, 3]"""
    tet_count: int
    """Number of tetrahedra (``xsim.sim.soft``, ``xsim.solvers.xpbd.tetrahedra``)"""
    tet_indices: array(dtype=int32, ndim=2)
    """Particles of each tet, positively oriented, shape [tet_count, 4]"""
    tet_rest_inv: array(dtype=mat33)
    """Inverse rest shape matrix Dm^-1 (Dm's columns: x1 - x0, x2 - x0, x3 - x0 at rest) [1/m], shape [tet_count]"""
    tet_rest_volume: array(dtype=float32)
    """Rest volumes [m^3], shape [tet_count]"""
    tet_youngs_modulus: array(dtype=float32)
    """Young's modulus [Pa], shape [tet_count]"""
    tet_poisson_ratio: array(dtype=float32)
    """Poisson's ratio, in (-1, 0.5), shape [tet_count]"""
    tet_damping: array(dtype=float32)
    """Viscous damping k_damp [Pa s], shape [tet_count]"""
    soft_bodies: list[dict]
    """Each soft body's particles (first, count), tets (first_tet, tet_count), boundary triangles (local
    particle indices, wound outwards) and world"""

    # -- descriptions of the ground and the static colliders (for export; their shapes are below)
    ground: bool
    """Whether the model has a ground plane (``add_ground_plane``: its last shape)"""
    ground_height: float
    """Height of the ground plane z = height [m]"""
    colliders: list[Collider]
    """The static colliders as described to the builder (for export and previews); each is a shape on body -1"""

    # -- rigid bodies, shapes (static ones on body -1: colliders, planes, the ground) and joints (xsim.sim.rigid)
    body_count: int
    """Number of rigid bodies"""
    shape_count: int
    """Number of shapes, static (the ground, colliders, planes) and on bodies"""
    joint_count: int
    """Number of joints"""
    body_linear_damping: float
    """Body linear velocity damping rate [1/s]"""
    body_angular_damping: float
    """Body angular velocity damping rate [1/s]"""
    rigid_contact_margin: float
    """Shape pairs closer than this (plus their motion) are tested each step [m]"""
    body_world: array(dtype=int32)
    """World of each body (-1: global), shape [body_count]"""
    body_q: array(dtype=transform)
    """Initial body frames in the world (position [m], rotation xyzw), shape [body_count]"""
    body_qd: array(dtype=spatial_vector)
    """Initial body velocities, world: com linear [m/s], then angular [rad/s], shape [body_count]"""
    body_com: array(dtype=vec3)
    """Centre of mass in the body frame [m], shape [body_count]"""
    body_mass: array(dtype=float32)
    """Body masses [kg] (0: kinematic), shape [body_count]"""
    body_inv_mass: array(dtype=float32)
    """Inverse body masses [1/kg], shape [body_count]"""
    body_inertia: array(dtype=mat33)
    """Inertia about the com, body frame [kg m^2], shape [body_count]"""
    body_inv_inertia: array(dtype=mat33)
    """Inverse inertia [1/(kg m^2)], shape [body_count]"""
    shape_world: array(dtype=int32)
    """World of each shape (-1: global, as the ground), shape [shape_count]"""
    shape_body: array(dtype=int32)
    """Owning body of each shape (-1: static), shape [shape_count]"""
    shape_type: array(dtype=int32)
    """Shape code (``SHAPE_*`` of ``xsim.sim.shapes``), shape [shape_count]"""
    shape_xform: array(dtype=transform)
    """Shape frame in its body's com frame, static shapes in the world [m, xyzw] (a plane's normal is its
    local z), shape [shape_count]"""
    shape_size: array(dtype=vec3)
    """Sphere (r, 0, 0), box half extents, capsule (r, half height, 0) [m], shape [shape_count]"""
    shape_radius: array(dtype=float32)
    """Radius of the shape's contact points (sphere, capsule, rounded box corners) [m], shape [shape_count]"""
    shape_bound: array(dtype=float32)
    """Bounding radius about the shape's origin (broad phase) [m], shape [shape_count]"""
    shape_mu: array(dtype=float32)
    """Friction coefficients, shape [shape_count]"""
    shape_restitution: array(dtype=float32)
    """Fraction of the approach speed a contact leaves with, shape [shape_count]"""
    shape_point_start: array(dtype=int32)
    """First contact point of each shape in ``shape_points``, shape [shape_count]"""
    shape_point_count: array(dtype=int32)
    """Number of contact points of each shape, shape [shape_count]"""
    shape_points: array(dtype=vec3)
    """Contact points in their shapes' frames [m], shape [total contact points]"""
    joint_world: array(dtype=int32)
    """World of each joint, shape [joint_count]"""
    joint_type: array(dtype=int32)
    """Joint type code (``JOINT_*`` of ``xsim.sim.rigid``), shape [joint_count]"""
    joint_parent: array(dtype=int32)
    """Parent body of each joint (-1: the world), shape [joint_count]"""
    joint_child: array(dtype=int32)
    """Child body of each joint, shape [joint_count]"""
    joint_X_p: array(dtype=transform)
    """Joint frame in the parent's com frame [m, xyzw], shape [joint_count]"""
    joint_X_c: array(dtype=transform)
    """Joint frame in the child's com frame [m, xyzw], shape [joint_count]"""
    joint_axis: array(dtype=vec3)
    """Hinge, slider or ball swing-twist axis in the joint frame (unit), shape [joint_count]"""
    joint_limit: array(dtype=vec2)
    """Lower, upper limit [rad or m; ball joints: twist, rad], shape [joint_count]"""
    joint_cone_limit: array(dtype=float32)
    """Ball joints' swing limit [rad] (``NO_LIMIT``: none), shape [joint_count]"""
    joint_target_q: array(dtype=float32)
    """Drive position targets [rad or m] (used when Control has none), shape [joint_count]"""
    joint_target_qd: array(dtype=float32)
    """Drive velocity targets [rad/s or m/s], shape [joint_count]"""
    joint_target_ke: array(dtype=float32)
    """Drive stiffness [N m/rad or N/m] (0: no position drive), shape [joint_count]"""
    joint_target_kd: array(dtype=float32)
    """Drive damping [N m s/rad or N s/m], shape [joint_count]"""
    joint_armature: array(dtype=float32)
    """Armature of each revolute or prismatic joint [kg m^2 or kg]: inertia added to the joint's own
    coordinate (a motor's reflected rotor inertia, MuJoCo's ``armature``), shape [joint_count]"""
    joint_d6_dim: array(dtype=int32)
    """Free linear, then angular axes of each D6 joint (0 for others), shape [2 joint_count]"""
    joint_d6_axis: array(dtype=vec3)
    """A D6 joint's axes in its joint frame: rows 6 j .. 6 j + 2 linear, 6 j + 3 .. 6 j + 5 angular (unused:
    zero), shape [6 joint_count]"""
    joint_d6_limit: array(dtype=vec2)
    """Their lower, upper limits [m or rad], shape [6 joint_count]"""
    joint_drive_velocity: bool
    """Whether any joint has drive damping (the solver then runs a velocity pass over joints)"""
    mesh_indices: array(dtype=int32, ndim=2)
    """Triangles of all static mesh shapes (indices into ``mesh_vertices``), shape [mesh_triangle_count, 3]"""
    mesh_vertices: array(dtype=vec3)
    """Static mesh vertices in their shapes' frames [m], shape [mesh_vertex_count]"""
    mesh_shape: array(dtype=int32)
    """Shape of each static mesh triangle, shape [mesh_triangle_count]"""

    # -- names (Newton's ``*_label``): the file's names for imported robots, else ``body_3``, ``shape_0``...
    body_label: list[str] = field(default_factory=list)
    """Name of each body, [body_count]"""
    shape_label: list[str] = field(default_factory=list)
    """Name of each shape (the ground: ``shape_<n>``), [shape_count]"""
    joint_label: list[str] = field(default_factory=list)
    """Name of each joint, [joint_count]"""
    shape_contype: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Collision bits of each shape (MuJoCo's ``contype``; numpy int64, default 1): shapes a and b may touch
    only where contype[a] & conaffinity[b] or contype[b] & conaffinity[a] is non-zero, [shape_count]"""
    shape_conaffinity: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Collision affinity bits of each shape (MuJoCo's ``conaffinity``; default 1), [shape_count]"""

    # -- made on first use
    _kinematics: tuple | None = field(default=None, repr=False, compare=False)
    """(joint layout, its device index arrays) of ``xsim.sim.kinematics``"""
    _joint_q0: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    """(joint_q, joint_qd) of the initial body state, numpy"""

    @property
    def has_rigid(self) -> bool:
        """Whether the model has bodies (the solver then steps them)."""
        return self.body_count > 0

    @property
    def edge_count(self) -> int:
        """Newton's name for the number of bending edges."""
        return self.bending_count

    def state(self, requires_grad: bool | None = None) -> State:
        """A new State holding copies of the initial positions and velocities."""
        rg = self.requires_grad if requires_grad is None else requires_grad

        def copy(a):
            return array(a.numpy(), dtype=a.dtype, device=self.device, requires_grad=rg)
        state = State(copy(self.particle_q), copy(self.particle_qd))
        if self.has_rigid:
            state.body_q, state.body_qd = copy(self.body_q), copy(self.body_qd)
            state.body_q_residual = zeros(self.body_count, dtype=self.vec3(), device=self.device, requires_grad=rg)
            if self.joint_count:
                q0, qd0 = self._initial_joint_coordinates()
                state.joint_q = array(q0, dtype=self.dtype, device=self.device, requires_grad=rg)
                state.joint_qd = array(qd0, dtype=self.dtype, device=self.device, requires_grad=rg)
        return state

    def _initial_joint_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """(joint_q, joint_qd) of the initial body state as numpy, computed once (off any Tape: they
        are model data, like the initial body_q)."""
        if self._joint_q0 is None:
            probe = State(None, None, self.body_q, self.body_qd)
            q = zeros(self.joint_coord_count, dtype=self.dtype, device=self.device)
            qd = zeros(self.joint_dof_count, dtype=self.dtype, device=self.device)
            eval_ik(self, probe, q, qd, record_tape=False)
            self._joint_q0 = (q.numpy(), qd.numpy())
        return self._joint_q0

    @property
    def joint_q_start(self) -> np.ndarray:
        """First ``joint_q`` entry of each joint, then the total (numpy; ``xsim.sim.kinematics``)."""
        return _layout(self)[1].q_start.copy() if self.joint_count else np.zeros(1, dtype=np.int32)

    @property
    def joint_qd_start(self) -> np.ndarray:
        """First ``joint_qd`` entry of each joint, then the total (numpy)."""
        return _layout(self)[1].qd_start.copy() if self.joint_count else np.zeros(1, dtype=np.int32)

    @property
    def joint_coord_count(self) -> int:
        """Length of ``joint_q``."""
        return int(self.joint_q_start[-1])

    @property
    def joint_dof_count(self) -> int:
        """Length of ``joint_qd``."""
        return int(self.joint_qd_start[-1])

    @property
    def joint_q(self):
        """The joint coordinates of the initial body state (a new array)."""
        return array(self._initial_joint_coordinates()[0], dtype=self.dtype, device=self.device)

    @property
    def joint_qd(self):
        """The joint velocities of the initial body state (a new array)."""
        return array(self._initial_joint_coordinates()[1], dtype=self.dtype, device=self.device)

    def control(self) -> Control:
        """An empty Control (no kinematic targets)."""
        return Control()

    def vec3(self) -> type:
        """The vec3 type of this model's arrays (vec3 or vec3d)."""
        return T.vector(3, self.dtype)
