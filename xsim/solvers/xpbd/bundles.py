"""The solver kernels' arguments grouped by concept, one struct argument each (``@xsim.struct``, generic over
the scalar type like the kernels) instead of up to ten arrays apiece: the model's particle, body, shape, mesh
and joint arrays, a step's contacts, and what a substep or pass hands the next kernel. Each field of the
model's is the Model array of the same name with its prefix (``BodyArrays.inv_mass`` is
``model.body_inv_mass``), so its gradient lands on that array. Outputs that come in groups are struct fields
too (``ContactGeometry``, ``ContactArms``, ``Multipliers``)."""

from __future__ import annotations

import xsim
from xsim.sim.generic import Float, Floats, Ints, Ints2, Mat33s, Transforms, Vec2s, Vec3s, Vec6s


@xsim.struct
class ParticleArrays:
    """The particles' constant arrays the contact kernels read, [particle_count]."""

    inv_mass: Floats  # 1/kg (0: pinned)
    radius: Floats  # m
    world: Ints  # world index (-1: meets every world)


@xsim.struct
class BodyArrays:
    """The bodies' constant arrays, [body_count]."""

    inv_mass: Floats  # 1/kg (0: kinematic)
    inertia: Mat33s  # kg m^2, body frame about the com
    inv_inertia: Mat33s  # 1/(kg m^2), body frame


@xsim.struct
class MeshArrays:
    """The static meshes' triangles, [triangle count] (vertices: [vertex total])."""

    indices: Ints2  # a triangle's three rows of ``vertices``, [n, 3]
    vertices: Vec3s  # m, in the frame of the triangle's shape
    shape: Ints  # the triangle's shape


@xsim.struct
class JointArrays:
    """The joints' arrays, [joint_count]."""

    type: Ints  # JOINT_* code of xsim.sim.rigid
    parent: Ints  # parent body, -1 for the world
    child: Ints  # child body
    X_p: Transforms  # m, xyzw: joint frame in the parent's com frame
    X_c: Transforms  # m, xyzw: joint frame in the child's com frame
    axis: Vec3s  # unit hinge, slider or swing-twist axis in the joint frame
    limit: Vec2s  # lower, upper (rad or m; ball joints: twist, rad)
    cone_limit: Floats  # rad, a ball joint's swing limit
    target_ke: Floats  # drive stiffness (N m/rad or N/m; 0: no position drive)
    target_kd: Floats  # drive damping (N m s/rad or N s/m)
    armature: Floats  # inertia of the joint's own coordinate (kg m^2 or kg; 0: none)
    d6_dim: Ints  # a D6 joint's free linear, angular axes: [2 j], [2 j + 1]
    d6_axis: Vec3s  # its axes, joint frame: 6 rows per joint, linear then angular
    d6_limit: Vec2s  # their limits


@xsim.struct
class ContactArrays:
    """A step's kept contacts (``RigidStepper._find_contacts``), grouped by shape pair."""

    pairs: Ints2  # the pairs with kept contacts: (shape a, shape b, a's points, b's), [n_pairs, 4]
    pair: Ints  # each contact's row in ``pairs``, [n_contacts]
    index: Ints  # each contact's index in its pair (``xsim.collision.pairs.contact_roles``), [n_contacts]
    pair_first: Ints  # each pair's first contact, then n_contacts: [n_pairs + 1]


@xsim.struct
class ContactGeometry:
    """A position pass's geometry of the step's contacts at its poses (``measure_contacts``), [n_contacts]."""

    n: Vec3s  # unit normal, from the surface shape to the point shape
    pen: Floats  # m, depth (< 0: apart)
    ca: Vec3s  # m, world contact point on the point shape
    cb: Vec3s  # m, and on the surface shape


@xsim.struct
class ContactArms:
    """The contacts' geometry the velocity pass reads, from the last position pass, [n_contacts]."""

    n: Vec3s  # unit normal from the pair's shape b to shape a
    ra: Vec3s  # m, contact point on a's body, in its com frame
    rb: Vec3s  # m, and on b's body


@xsim.struct
class Multipliers:
    """The contacts' multipliers of the substep so far, [n_contacts]."""

    normal: Floats  # position-level normal multiplier (N s^2)
    tangent: Floats  # and the friction's
    held: Ints  # 1 where static friction held (``solve_pair_positions``)


@xsim.struct
class ParticleSubstep:
    """What the particles' contact kernels read of the current substep."""

    x: Vec3s  # m, positions at the substep start, [particle_count]
    v: Vec3s  # m/s, velocities at the substep start
    mesh_tri: Ints  # each particle's static mesh triangle this substep (``find_mesh_contacts``), -1: none
    h: Float  # s, the substep
    bounce_speed: Float  # m/s, the approach speed below which contacts do not bounce


@xsim.struct
class BodyMotion:
    """The bodies as a pass of the particle contacts sees them, [body_count]; a pass leaves the fields it
    does not read None."""

    pose: Transforms  # com displacements since the step start, and rotations, of this pass (``rigid_kernels``)
    pose_start: Transforms  # and at the substep start (the position pass's friction)
    start: Transforms  # com frames at the step start (world)
    qd: Vec6s  # velocities of this pass (linear, angular; m/s, rad/s; the velocity pass)
    qd_pre: Vec6s  # predicted velocities of the substep (restitution's pre-solve ones)
    split: Floats  # each body's number of particle contacts in the pass (mass splitting)


def model_arrays(template, model, prefix: str, kept=None, **override):
    """A ``template`` value holding ``model``'s arrays ``prefix + field`` (or the ``override`` given for a
    field): ``kept`` while it holds them all still, else a new value (records on a tape keep theirs, so a
    value is never changed)."""
    arrays = {f: override[f] if f in override else getattr(model, prefix + f) for f in template._fields}
    if kept is not None and holds(kept, arrays):
        return kept
    return template(**arrays)


def holds(value, fields: dict) -> bool:
    """Whether struct ``value`` holds ``fields``: the same arrays (or None), equal numbers."""
    for f, a in fields.items():
        b = getattr(value, f)
        if b is not a and (a is None or isinstance(a, xsim.array) or b != a):
            return False
    return True


class BundleCache:
    """Struct values by role and contents, kept for steps without gradients: a launch packs a kept value once
    (its ``_packed`` bytes), a new value at every launch, and the pooled buffers of such steps come back step
    after step (a role's arrays alternate between a few buffers). With gradients a kept value would hold on to
    arrays that ``BufferPool.recorded`` could otherwise hand out again, so it makes a new value."""

    LIMIT = 64  # values kept before starting afresh (pools grow now and then: the old buffers are let go)

    def __init__(self):
        self._kept: dict = {}  # (role, each field's array id or number) -> the value, which keeps its arrays alive

    def get(self, key: str, template, keep: bool, **fields):
        """A ``template`` value of ``fields``: where ``keep``, the one kept for ``key`` with these fields."""
        if not keep:
            return template(**fields)
        ident = (key, *(id(a) if isinstance(a, xsim.array) else a for a in fields.values()))
        kept = self._kept.get(ident)
        if kept is None:
            if len(self._kept) >= self.LIMIT:
                self._kept.clear()
            kept = self._kept[ident] = template(**fields)
        return kept
