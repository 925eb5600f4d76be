"""The model's body, shape and joint arrays, and a step's contacts, as the rigid kernels take them: one
struct argument each (``@xsim.struct``, generic over the scalar type like the kernels) instead of up to
ten arrays apiece. Each field of the model's is the Model array of the same name with its prefix
(``BodyArrays.inv_mass`` is ``model.body_inv_mass``), so its gradient lands on that array."""

from __future__ import annotations

import xsim
from xsim.sim.generic import Floats, Ints, Ints2, Mat33s, Transforms, Vec2s, Vec3s


@xsim.struct
class BodyArrays:
    """The bodies' constant arrays, [body_count]."""

    inv_mass: Floats  # 1/kg (0: kinematic)
    inertia: Mat33s  # kg m^2, body frame about the com
    inv_inertia: Mat33s  # 1/(kg m^2), body frame


@xsim.struct
class ShapeArrays:
    """The shapes' arrays, [shape_count] (points: [shape point total])."""

    body: Ints  # owning body, -1 for static shapes
    type: Ints  # SHAPE_* code of xsim.sim.shapes
    xform: Transforms  # m, xyzw: shape frame in its body's com frame (static shapes: in the world)
    size: Vec3s  # m: sphere (r, 0, 0), box half extents, capsule (r, half height, 0)
    radius: Floats  # m, radius of the shape's contact points
    point_start: Ints  # first contact point of a shape in ``points``
    point_count: Ints  # its number of contact points
    points: Vec3s  # m, contact points in shape frames
    mu: Floats  # friction coefficient
    restitution: Floats  # fraction of the approach speed a contact leaves with


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


@xsim.struct
class ContactArrays:
    """A step's kept contacts (``RigidStepper._find_contacts``), grouped by shape pair."""

    pairs: Ints2  # the pairs with kept contacts: (shape a, shape b, a's points, b's), [n_pairs, 4]
    pair: Ints  # each contact's row in ``pairs``, [n_contacts]
    index: Ints  # each contact's index in its pair (``contacts_rigid.contact_roles``), [n_contacts]
    pair_first: Ints  # each pair's first contact, then n_contacts: [n_pairs + 1]


def model_arrays(template, model, prefix: str, kept=None, **override):
    """A ``template`` value holding ``model``'s arrays ``prefix + field`` (or the ``override`` given for a
    field): ``kept`` while it holds them all still, else a new value (records on a tape keep theirs, so a
    value is never changed)."""
    arrays = {f: override[f] if f in override else getattr(model, prefix + f) for f in template._fields}
    if kept is not None and all(getattr(kept, f) is a for f, a in arrays.items()):
        return kept
    return template(**arrays)
