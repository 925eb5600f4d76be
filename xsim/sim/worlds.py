"""Many worlds in one model: ``ModelBuilder.begin_world/end_world/add_world``, ``add_builder`` and
``replicate`` (Newton's names and meaning), a mixin that ``ModelBuilder`` inherits.

Every particle, body, shape, joint and static collider carries a world index: the world open when
it was added (``current_world``), or -1 outside any world. Entities of two different worlds never
interact (the solver filters every contact by world); world -1 is global and meets every world,
which is where a shared ground or a shared static collider belongs. The ground plane is always
global. Parameters stay per entity, so each world can carry its own masses, compliances and
initial velocities; model-wide settings (gravity, damping, contact margin) are one per model.
"""

from __future__ import annotations

import copy

import numpy as np

from .shapes import quat_multiply, quat_to_matrix

# builder settings that are one per model: a merged builder must agree with this one on them
_MODEL_SETTINGS = ("gravity", "particle_damping", "body_linear_damping", "body_angular_damping",
                   "rigid_contact_margin", "particle_contact", "particle_mu", "particle_restitution")


def world_offsets(count: int, spacing) -> np.ndarray:
    """Positions (count, 3) of ``count`` copies laid out as Newton's ``replicate`` does: a line, square
    or cube grid over the axes where ``spacing`` (m) is non-zero, centred about the origin except
    along z (up), so no copy starts below a ground at z = 0."""
    spacing = np.asarray(spacing, dtype=np.float64)
    axes = np.flatnonzero(spacing)
    out = np.zeros((count, 3))
    if count == 0 or len(axes) == 0:
        return out
    side = int(np.ceil(count ** (1.0 / len(axes)) - 1e-9))
    k = np.arange(count)
    for rank, axis in enumerate(axes):  # the first non-zero axis varies fastest
        digit = k // side ** rank
        if rank < len(axes) - 1:
            digit %= side
        out[:, axis] = digit * spacing[axis]
    centre = (out.min(axis=0) + out.max(axis=0)) / 2.0
    centre[2] = 0.0
    return out - centre


class WorldBuilderMixin:
    """World contexts and builder merging (mixed into ``ModelBuilder``)."""

    world_count: int
    """Number of worlds begun so far"""
    _current_world: int
    """The world open now (-1: none)"""

    def _init_worlds(self) -> None:
        self.world_count = 0
        self._current_world = -1

    @property
    def current_world(self) -> int:
        """The world new entities go to (-1: global). Managed by ``begin_world``/``end_world``."""
        return self._current_world

    def begin_world(self) -> None:
        """Open a new world (index ``world_count``): entities added until ``end_world`` belong to it."""
        if self._current_world != -1:
            raise RuntimeError(f"begin_world: world {self._current_world} is still open; call end_world first")
        self._current_world = self.world_count
        self.world_count += 1

    def end_world(self) -> None:
        """Close the open world: entities added next are global (world -1)."""
        if self._current_world == -1:
            raise RuntimeError("end_world: no world is open")
        self._current_world = -1

    def add_world(self, other, xform=None) -> None:
        """Add everything in builder ``other`` as one new world, moved rigidly by ``xform``."""
        self.begin_world()
        try:
            self.add_builder(other, xform)
        except BaseException:
            self._current_world = -1
            self.world_count -= 1
            raise
        self.end_world()

    def replicate(self, other, copy_count: int, spacing=(0.0, 0.0, 0.0)) -> None:
        """Add ``copy_count`` copies of builder ``other``, each its own new world, placed by
        ``world_offsets(copy_count, spacing)`` (m). Copies never interact with each other."""
        if int(copy_count) != copy_count or copy_count < 0:
            raise ValueError(f"replicate: copy_count must be an integer >= 0, got {copy_count!r}")
        spacing = tuple(float(s) for s in spacing)
        if len(spacing) != 3 or not all(np.isfinite(spacing)):
            raise ValueError(f"replicate: spacing must be 3 finite numbers (m), got {spacing!r}")
        if self._current_world != -1:
            raise RuntimeError(f"replicate: world {self._current_world} is open; call end_world first")
        for offset in world_offsets(int(copy_count), spacing):
            self.add_world(other, (offset, (0.0, 0.0, 0.0, 1.0)))

    def add_builder(self, other, xform=None) -> None:
        """Copy every entity of builder ``other`` into this one, in the current world (whatever world
        they had in ``other``), moved rigidly by ``xform`` ((p, q) or 7 numbers; None: in place):
        particles, bodies, static shapes and colliders, and joint frames anchored in the world.
        Newton translates particles only; here they turn with the rest. ``other``'s ground plane,
        if any, becomes this model's (global) ground; two different grounds are refused."""
        from .rigid import _xform

        if other is self:
            raise ValueError("add_builder: cannot add a builder to itself")
        self._adopt_settings(other)
        p, q = _xform(xform)
        rot = quat_to_matrix(q)
        world = self._current_world

        def point(x):
            return np.asarray(x, dtype=np.float64).reshape(-1, 3) @ rot.T + p

        def frame(xp, xq):
            return point(xp)[0], quat_multiply(q, xq)

        def shifted(rows, offset):
            return [tuple(i + offset for i in r) for r in rows]

        base = self.particle_count
        n = other.particle_count
        self.particle_q.extend(map(tuple, point(other.particle_q).tolist()))
        self.particle_qd.extend(map(tuple, (np.asarray(other.particle_qd, dtype=np.float64).reshape(n, 3)
                                            @ rot.T).tolist()))
        self.particle_mass.extend(other.particle_mass)
        self.particle_radius.extend(other.particle_radius)
        self.particle_world.extend([world] * n)
        self.particle_thickness.extend(other.particle_thickness)
        for name in ("spring", "bending", "area", "tri"):
            getattr(self, f"{name}_indices").extend(shifted(getattr(other, f"{name}_indices"), base))
        for name in ("spring_rest_length", "spring_compliance", "spring_damping", "bending_compliance",
                     "bending_damping", "area_compliance", "area_damping"):
            getattr(self, name).extend(getattr(other, name))
        self.tet_indices.extend(shifted(other.tet_indices, base))
        for name in ("tet_youngs_modulus", "tet_poisson_ratio", "tet_damping"):
            getattr(self, name).extend(getattr(other, name))
        tet_base = self.tet_count - other.tet_count
        self.soft_bodies.extend(dict(b, first=b["first"] + base, first_tet=b["first_tet"] + tet_base, world=world)
                                for b in other.soft_bodies)
        for c in other.colliders:
            moved = copy.copy(c)
            pos, moved.rot = frame(c.pos, c.rot)
            moved.pos = tuple(pos.tolist())
            moved.rot = tuple(moved.rot.tolist())
            self.colliders.append(moved)  # the description; its shape moves with the shapes below
        self._adopt_ground(other.ground)

        body_base = self.body_count
        for b in other.bodies:
            moved = dict(b, world=world, lin_vel=rot @ b["lin_vel"], ang_vel=rot @ b["ang_vel"])
            moved["p"], moved["q"] = frame(b["p"], b["q"])
            self.bodies.append(moved)
        for s in other.shapes:
            moved = dict(s, world=world)
            if s["body"] >= 0:
                moved["body"] = s["body"] + body_base
            else:
                moved["p"], moved["q"] = frame(s["p"], s["q"])
            self.shapes.append(moved)
        for j in other.joints:
            moved = dict(j, world=world, child=j["child"] + body_base)
            if j["parent"] >= 0:
                moved["parent"] = j["parent"] + body_base
            else:
                moved["xp"] = frame(*j["xp"])
            self.joints.append(moved)

    def _adopt_settings(self, other) -> None:
        """Take ``other``'s model-wide settings into an empty builder; otherwise they must be equal."""
        empty = not (self.particle_count or self.bodies or self.shapes or self.colliders)
        for name in _MODEL_SETTINGS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if empty:
                setattr(self, name, theirs)
            elif mine != theirs:
                raise ValueError(f"add_builder: {name} is one per model; this builder has {mine}, the added "
                                 f"one {theirs}")

    def _adopt_ground(self, ground) -> None:
        if ground is None:
            return
        if self.ground is not None and self.ground != ground:
            raise ValueError(f"add_builder: the ground plane is shared by all worlds; this builder has {self.ground}, "
                             f"the added one {ground}")
        self.ground = dict(ground)

    def _world_of(self, what: str, worlds) -> int:
        """The one world of entities in ``worlds`` (global ones join any), or ValueError naming ``what``."""
        found = {int(w) for w in worlds if w >= 0}
        if len(found) > 1:
            raise ValueError(f"{what}: joins entities of worlds {sorted(found)}; worlds never interact")
        return found.pop() if found else -1

    def _world_arrays(self) -> dict[str, np.ndarray]:
        """World index (int32 numpy) of each particle, body, shape and joint."""
        return {"particle_world": np.asarray(self.particle_world, dtype=np.int32).reshape(-1),
                "body_world": np.asarray([b["world"] for b in self.bodies], dtype=np.int32).reshape(-1),
                "shape_world": np.asarray([s["world"] for s in self.shapes], dtype=np.int32).reshape(-1),
                "joint_world": np.asarray([j["world"] for j in self.joints], dtype=np.int32).reshape(-1)}
