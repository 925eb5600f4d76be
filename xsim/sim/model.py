"""``Model`` (static scene data), ``State`` (positions and velocities at one time) and ``Control``
(inputs). Units are SI throughout: metres, seconds, kilograms; z is up.

A ``Model`` comes from ``ModelBuilder.finalize``. Its arrays are the solver's inputs; those that
make sense to optimize (masses, compliances, rest values, collider poses) are created with
``requires_grad`` when the model is, so a Tape carries gradients to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import xsim
from xsim import types as T

from .collide import Collider
from .kinematics import _layout, eval_ik


class State:
    """The time-varying part of a simulation: ``particle_q`` (positions, array(vec3), m) and
    ``particle_qd`` (velocities, array(vec3), m/s); with bodies ``body_q``/``body_qd``; with joints
    ``joint_q``/``joint_qd``, the joint coordinates of the body state (``xsim.sim.kinematics``;
    ``SolverXPBD`` keeps them current, ``eval_fk`` sets the bodies from them)."""

    def __init__(self, particle_q, particle_qd, body_q=None, body_qd=None, joint_q=None, joint_qd=None):
        self.particle_q = particle_q
        self.particle_qd = particle_qd
        self.body_q = body_q    # array(transform): body frames (see xsim.sim.rigid)
        self.body_qd = body_qd  # array(vector(6)): com linear then angular velocity, world
        self.joint_q = joint_q    # array(float): joint coordinates (layout: model.joint_q_start)
        self.joint_qd = joint_qd  # array(float): joint velocities (layout: model.joint_qd_start)

    @property
    def particle_count(self) -> int:
        return self.particle_q.shape[0] if self.particle_q is not None else 0

    @property
    def requires_grad(self) -> bool:
        return any(a is not None and a.requires_grad for a in (self.particle_q, self.body_q))


@dataclass
class Control:
    """Inputs for one step. ``particle_target`` (array(vec3), m, optional): where each pinned
    (zero-mass) particle should be at the end of the step; pinned particles then move there at
    constant velocity. Without it pinned particles keep their own velocity."""

    particle_target: object = None
    joint_target_q: object = None   # array(float), one per joint: drive position targets (rad or m)
    joint_target_qd: object = None  # array(float), one per joint: drive velocity targets


@dataclass
class Model:
    """Static simulation data (see the module docstring). Counts are plain ints; index arrays are
    int32 xsim arrays; ``tri_indices`` is a numpy (n, 3) int array of the cloth triangles."""

    device: object
    dtype: object
    requires_grad: bool
    gravity: tuple
    world_count: int            # worlds (xsim.sim.worlds); at least 1
    particle_world: object      # array(int): world of each particle, -1: global (meets every world)
    collider_world: object      # array(int): world of each static collider, -1: global
    particle_damping: float
    particle_count: int
    particle_q: object          # initial positions, array(vec3)
    particle_qd: object         # initial velocities, array(vec3)
    particle_mass: object       # array(float), kg; 0 = pinned
    particle_inv_mass: object   # array(float), 1/kg
    particle_radius: object     # array(float), m (contact thickness)
    spring_count: int
    spring_indices: object      # array(int, ndim=2), (n, 2)
    spring_rest_length: object  # array(float), m
    spring_compliance: object   # array(float), m/N (XPBD alpha)
    spring_damping: object      # array(float), N s/m (XPBD beta: force -beta dC/dt)
    bending_count: int
    bending_indices: object     # array(int, ndim=2), (n, 4): edge v0, v1, opposite v2, v3
    bending_weights: object     # array(vec4): cotangent weights K of the isometric bending stencil
    bending_compliance: object  # array(float): alpha of C = sum K_k x_k, i.e. bend compliance * area / 3
    bending_damping: object     # array(float): beta of C, i.e. bend damping * 3 / area
    area_count: int
    area_indices: object        # array(int, ndim=2), (n, 3)
    area_rest: object           # array(float), m^2
    area_compliance: object     # array(float), m^3/N
    area_damping: object        # array(float), N s/m^3
    tri_indices: np.ndarray     # (n, 3) triangles for rendering / export
    ground: bool
    ground_height: float
    ground_mu: float
    ground_restitution: float
    colliders: list[Collider]
    collider_type: object       # array(int)
    collider_pos: object        # array(vec3), m
    collider_rot: object        # array(quat), xyzw
    collider_size: object       # array(vec3): sphere (r,0,0), box half extents, capsule (r, half_height, 0)
    collider_mu: object         # array(float)
    collider_restitution: object  # array(float): particles leave at this fraction of their approach speed
    mesh_indices: object        # array(int, ndim=2): triangles of all mesh colliders
    mesh_vertices: object       # array(vec3): their vertices in collider coordinates
    mesh_collider: object       # array(int): collider index of each mesh triangle
    rigid: object = None        # xsim.sim.rigid.RigidModel: bodies, shapes, joints (None without bodies)

    @property
    def collider_count(self) -> int:
        return len(self.colliders)

    @property
    def edge_count(self) -> int:
        """Newton's name for the number of bending edges."""
        return self.bending_count

    def state(self, requires_grad: bool | None = None) -> State:
        """A new State holding copies of the initial positions and velocities."""
        rg = self.requires_grad if requires_grad is None else requires_grad
        state = State(xsim.array(self.particle_q.numpy(), dtype=self.particle_q.dtype, device=self.device,
                                 requires_grad=rg),
                      xsim.array(self.particle_qd.numpy(), dtype=self.particle_qd.dtype, device=self.device,
                                 requires_grad=rg))
        if self.rigid is not None:
            self.rigid.init_state(state, rg)
            if self.rigid.joint_count:
                q0, qd0 = self._initial_joint_coordinates()
                state.joint_q = xsim.array(q0, dtype=self.dtype, device=self.device, requires_grad=rg)
                state.joint_qd = xsim.array(qd0, dtype=self.dtype, device=self.device, requires_grad=rg)
        return state

    def _initial_joint_coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """(joint_q, joint_qd) of the initial body state as numpy, computed once (off any Tape: they
        are model data, like the initial body_q)."""
        cached = self.rigid.__dict__.get("_joint_q0")
        if cached is None:
            r = self.rigid
            probe = State(None, None, r.body_q, r.body_qd)
            q = xsim.zeros(self.joint_coord_count, dtype=self.dtype, device=self.device)
            qd = xsim.zeros(self.joint_dof_count, dtype=self.dtype, device=self.device)
            eval_ik(self, probe, q, qd, record_tape=False)
            cached = r.__dict__["_joint_q0"] = (q.numpy(), qd.numpy())
        return cached

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
        return xsim.array(self._initial_joint_coordinates()[0], dtype=self.dtype, device=self.device)

    @property
    def joint_qd(self):
        """The joint velocities of the initial body state (a new array)."""
        return xsim.array(self._initial_joint_coordinates()[1], dtype=self.dtype, device=self.device)

    def __getattr__(self, name: str):
        # rigid-body data lives in ``self.rigid`` (xsim.sim.rigid.RigidModel) and reads as model.body_q etc.
        rigid = self.__dict__.get("rigid")
        if rigid is not None and not name.startswith("_"):
            return getattr(rigid, name)
        if name in ("body_count", "shape_count", "joint_count"):
            return 0
        if name in ("body_world", "shape_world", "joint_world"):
            return xsim.zeros(0, dtype=int, device=self.device)
        raise AttributeError(f"'Model' object has no attribute '{name}'")

    def control(self) -> Control:
        """An empty Control (no kinematic targets)."""
        return Control()

    def vec3(self) -> type:
        """The vec3 type of this model's arrays (vec3 or vec3d)."""
        return T.vector(3, self.dtype)
