"""Scene files, rigid half: ``[[body]]`` (pose, mass, velocities, ``[[body.shape]]``) and
``[[joint]]`` (revolute, prismatic, ball, fixed, free), checked and added to a ``ModelBuilder``.

Checking raises :class:`~xsim.io.schema.Invalid` like the rest of the scene loader (which adds the
file name); building calls ``add_body``, ``add_shape_*`` and ``add_joint_*`` of
``xsim.sim.rigid``. The format is documented in ``docs/scenes.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..sim.shapes import convex_hull, hull_mesh, quat_multiply
from .schema import (
    Invalid,
    Key,
    check_table,
    check_typed_table,
    describe,
    either,
    integer,
    join,
    number,
    string,
    suggestion,
    vector,
)

WORLD = "world"
"""The name (or index -1) a joint's ``parent`` uses for the static world."""

_positive = number(above=0.0)
_SHAPE_TYPES = {
    "sphere": {"radius": Key(_positive, doc="radius in metres")},
    "box": {"half_extents": Key(vector(3, _positive, "an array of 3 numbers > 0"), doc="half sizes [x, y, z], m")},
    "capsule": {"radius": Key(_positive, doc="radius in metres"),
                "half_height": Key(_positive, doc="half length of the axis segment (local z), m")},
    "mesh": {"mesh": Key(string(), doc="a mesh file path, relative to the scene file"),
             "scale": Key(_positive, 1.0, "scale applied to the mesh file")},
    "cylinder": {"radius": Key(_positive, doc="radius in metres"),
                 "half_height": Key(_positive, doc="half length along local z, m")},
    "cone": {"radius": Key(_positive, doc="base radius in metres (base at z = -half_height)"),
             "half_height": Key(_positive, doc="half length along local z, m (apex at +half_height)")},
    "ellipsoid": {"rx": Key(_positive, doc="semi-axis along local x, m"),
                  "ry": Key(_positive, doc="semi-axis along local y, m"),
                  "rz": Key(_positive, doc="semi-axis along local z, m")},
    "convex_hull": {"mesh": Key(string(), doc="a mesh (or point) file path, relative to the scene file: its "
                                "convex hull"),
                    "scale": Key(_positive, 1.0, "scale applied to the mesh file")},
}
_JOINT_TYPES = ("revolute", "prismatic", "ball", "fixed", "free")
_DRIVE = {
    "target": Key(number(), 0.0, "position target, rad (revolute) or m (prismatic)"),
    "stiffness": Key(number(minimum=0.0), 0.0, "N m/rad or N/m; 0: no position drive"),
    "target_velocity": Key(number(), 0.0, "velocity target, rad/s or m/s"),
    "damping": Key(number(minimum=0.0), 0.0, "N m s/rad or N s/m; 0: no velocity drive"),
}


@dataclass
class BodyPart:
    """Where one scene body landed in the model: its index and its shapes as checked dicts
    (``type``, ``position``/``rotation`` in the body frame, sizes, ``vertices``/``indices`` for
    meshes), which the USD writer and the preview draw."""

    name: str
    index: int
    shapes: list[dict]


def body_keys(placement: dict[str, Key], mu: Key, name: Key) -> tuple[dict[str, Key], dict[str, dict[str, Key]]]:
    """The keys of ``[[body]]`` and of each shape type of ``[[body.shape]]``, built on the scene's
    ``placement`` keys (``position``, ``rotation``), friction key ``mu`` and ``name`` key."""
    shape_keys = {t: {"type": Key(string(tuple(_SHAPE_TYPES))), **keys, **placement,
                      "density": Key(_positive, None, "kg/m^3 (default: the body's, else 1000)"), "mu": mu,
                      "restitution": Key(number(minimum=0.0), 0.0, "bounciness, 0..1")}
                  for t, keys in _SHAPE_TYPES.items()}
    body = {
        "name": name,
        **placement,
        "velocity": Key(vector(3), (0.0, 0.0, 0.0), "initial linear velocity of the centre of mass, m/s"),
        "angular_velocity": Key(vector(3), (0.0, 0.0, 0.0), "initial angular velocity, rad/s, world axes"),
        "mass": Key(number(minimum=0.0, strict=True), None, "kg, overrides the shapes' (0: kinematic)"),
        "density": Key(_positive, None, "kg/m^3 of the body's shapes (default 1000)"),
        "shape": Key(lambda v, p: v, doc="an array of tables [[body.shape]]"),
    }
    return body, shape_keys


def check_body(raw: Any, path: str, body: dict[str, Key], shapes: dict[str, dict[str, Key]], load_mesh) -> dict:
    """One ``[[body]]`` table, checked; ``load_mesh(file, key, scale)`` loads mesh shapes."""
    spec = check_table(raw, path, body, "a table [[body]]")
    if spec["mass"] is not None and spec["density"] is not None:
        raise Invalid(join(path, "density"), "either mass or density on a body, not both",
                      describe(raw["density"]) + f" next to mass = {spec['mass']:g}")
    raw_shapes = raw.get("shape", [])
    if not isinstance(raw_shapes, list) or not raw_shapes:
        raise Invalid(join(path, "shape"), "at least one table [[body.shape]] (" + ", ".join(_SHAPE_TYPES) + ")",
                      "nothing (the key is missing)" if "shape" not in raw else describe(raw_shapes))
    spec["shape"] = [_check_shape(s, join(path, "shape"), i, shapes, load_mesh) for i, s in enumerate(raw_shapes)]
    return spec


def _check_shape(raw: Any, table: str, index: int, shapes: dict[str, dict[str, Key]], load_mesh) -> dict:
    path = join(table, index)
    kind, spec = check_typed_table(raw, path, shapes, "a table [[body.shape]]")
    spec["name"] = f"{kind}{index}"  # its prim's name under the body's: box0, sphere1...
    if kind in ("mesh", "convex_hull"):
        spec["vertices"], spec["indices"] = load_mesh(spec["mesh"], join(path, "mesh"), spec["scale"])
    if kind == "convex_hull":  # drawn and exported as its hull; refused here when the points span no volume
        try:
            spec["vertices"], spec["indices"] = hull_mesh(convex_hull(spec["vertices"], "convex hull"))
        except ValueError as e:
            raise Invalid(join(path, "mesh"), "points that span a volume", str(e)) from None
    return spec


def _body_ref(allow_world: bool):
    """A body named by its ``name`` or its index (``"world"`` / -1 for the world when allowed)."""
    expected = "a body name or index" + (' (or "world" / -1)' if allow_world else "")
    return either((lambda v: isinstance(v, str), string()),
                  (lambda v: isinstance(v, int) and not isinstance(v, bool), integer(minimum=-1 if allow_world else 0)),
                  expected=expected)


def _limits(value: Any, path: str) -> tuple[float, float]:
    lo, hi = vector(2, expected="an array [lower, upper] of 2 numbers")(value, path)
    if lo > hi:
        raise Invalid(path, "lower <= upper", describe(value))
    return lo, hi


def _nonzero_axis(value: Any, path: str) -> tuple[float, float, float]:
    axis = vector(3)(value, path)
    if not any(axis):
        raise Invalid(path, "a non-zero axis [x, y, z]", describe(value))
    return axis


def joint_keys(placement: dict[str, Key]) -> dict[str, dict[str, Key]]:
    """The keys of ``[[joint]]`` for each joint type; joint frames take the scene's ``placement``
    keys (``position``, ``rotation``)."""
    frame = placement

    def frame_table(value, path):
        return check_table(value, path, frame, "a table {position, rotation}")

    common = {"type": Key(string(_JOINT_TYPES)), "name": Key(string(), None, "a label"),
              "parent": Key(_body_ref(True), WORLD, 'parent body: name, index, or "world" / -1'),
              "child": Key(_body_ref(False), doc="child body: name or index"),
              "anchor": Key(vector(3), None, "the joint's world position at the start, m"),
              "parent_frame": Key(frame_table, None, "joint frame in the parent body's frame"),
              "child_frame": Key(frame_table, None, "joint frame in the child body's frame")}
    moving = {"axis": Key(_nonzero_axis, None, "hinge / slider axis in the joint frame"),
              "limits": Key(_limits, None, "[lower, upper], rad (revolute) or m (prismatic)"),
              "drive": Key(lambda v, p: check_table(v, p, _DRIVE, "a table {target, stiffness, ...}"), None,
                           "{ target, stiffness, target_velocity, damping }")}
    ball = {"cone_limit": Key(number(minimum=0.0), None, "largest swing of the child's z from the parent's, rad"),
            "twist_limits": Key(_limits, None, "[lower, upper] twist of the child about its z, rad")}
    extra = {"revolute": moving, "prismatic": moving, "ball": ball}
    return {t: {**common, **extra.get(t, {})} for t in _JOINT_TYPES}


def check_joint(raw: Any, path: str, keys: dict[str, dict[str, Key]], bodies: list[dict]) -> dict:
    """One ``[[joint]]`` table, checked; ``parent``/``child`` become body indices (-1: world)."""
    if not isinstance(raw, dict):
        raise Invalid(path, "a table [[joint]]", describe(raw))
    if "type" not in raw:
        raise Invalid(join(path, "type"), "one of " + ", ".join(f'"{t}"' for t in _JOINT_TYPES),
                      "nothing (the key is missing)")
    kind = string(_JOINT_TYPES)(raw["type"], join(path, "type"))
    spec = check_table(raw, path, keys[kind], "a table [[joint]]")
    names = {b["name"]: i for i, b in enumerate(bodies)}
    for role in ("parent", "child"):
        ref, where = spec[role], join(path, role)
        if isinstance(ref, int):
            if ref >= len(bodies):
                raise Invalid(where, f"a body index below {len(bodies)} (the number of [[body]] tables)",
                              describe(ref))
            spec[role] = ref
        elif ref == WORLD and role == "parent":
            spec[role] = -1
        elif ref in names:
            spec[role] = names[ref]
        else:
            known = list(names) + ([WORLD] if role == "parent" else [])
            raise Invalid(where, "the name of a [[body]]" + (' or "world"' if role == "parent" else ""),
                          describe(ref), suggestion(ref, known))
    if spec["parent"] == spec["child"]:
        raise Invalid(join(path, "child"), "a body other than the parent", describe(raw["child"]))
    if spec["anchor"] is not None and (spec["parent_frame"] is not None or spec["child_frame"] is not None):
        raise Invalid(join(path, "anchor"), "either anchor or parent_frame/child_frame, not both",
                      describe(raw["anchor"]))
    return spec


# -- building --------------------------------------------------------------------------------------


def _quat_rotate(q, v) -> np.ndarray:
    u, w = np.asarray(q[:3], np.float64), float(q[3])
    t = 2.0 * np.cross(u, v)
    return np.asarray(v, np.float64) + w * t + np.cross(u, t)


def _inverse(q) -> np.ndarray:
    return np.array([-q[0], -q[1], -q[2], q[3]], dtype=np.float64)


def add_bodies(b, bodies: list[dict]) -> list[BodyPart]:
    """Add the checked ``[[body]]`` tables to builder ``b``; returns where each went."""
    parts = []
    for spec in bodies:
        index = b.add_body((spec["position"], spec["rotation"]), mass=spec["mass"], density=spec["density"],
                           lin_vel=spec["velocity"], ang_vel=spec["angular_velocity"], label=spec["name"])
        for s in spec["shape"]:
            common = {"xform": (s["position"], s["rotation"]), "density": s["density"], "mu": s["mu"],
                      "restitution": s["restitution"]}
            if s["type"] == "sphere":
                b.add_shape_sphere(index, radius=s["radius"], **common)
            elif s["type"] == "box":
                hx, hy, hz = s["half_extents"]
                b.add_shape_box(index, hx=hx, hy=hy, hz=hz, **common)
            elif s["type"] in ("capsule", "cylinder", "cone"):
                getattr(b, f"add_shape_{s['type']}")(index, radius=s["radius"], half_height=s["half_height"], **common)
            elif s["type"] == "ellipsoid":
                b.add_shape_ellipsoid(index, rx=s["rx"], ry=s["ry"], rz=s["rz"], **common)
            elif s["type"] == "convex_hull":
                b.add_shape_convex_hull(index, mesh=s["vertices"], **common)
            else:
                # the vertices are already scaled by the loader
                b.add_shape_mesh(index, (s["vertices"], s["indices"]), **common)
        parts.append(BodyPart(spec["name"], index, spec["shape"]))
    return parts


def add_joints(b, joints: list[dict], bodies: list[dict], first_body: int = 0) -> None:
    """Add the checked ``[[joint]]`` tables to builder ``b``; body indices are offset by
    ``first_body`` (where the scene's first body went in ``b``)."""
    for j in joints:
        parent, child = j["parent"], j["child"]
        if j["parent_frame"] is not None or j["child_frame"] is not None:
            xp = _frame(j["parent_frame"])
            xc = _frame(j["child_frame"])
        else:
            # an anchor (default: the child's origin) is one world point, with the joint frames
            # lined up with the world axes at the start: the axis is then given in world axes
            anchor = np.asarray(j["anchor"] if j["anchor"] is not None else bodies[child]["position"], np.float64)
            xp = _world_point_frame(anchor, bodies[parent] if parent >= 0 else None)
            xc = _world_point_frame(anchor, bodies[child])
        ids = (parent + first_body if parent >= 0 else -1, child + first_body)
        kind = j["type"]
        if kind in ("revolute", "prismatic"):
            drive = j["drive"] or {k: key.default for k, key in _DRIVE.items()}
            limits = j["limits"] or (None, None)
            axis = j["axis"] or ((0.0, 0.0, 1.0) if kind == "revolute" else (1.0, 0.0, 0.0))
            add = b.add_joint_revolute if kind == "revolute" else b.add_joint_prismatic
            add(*ids, parent_xform=xp, child_xform=xc, axis=axis, limit_lower=limits[0], limit_upper=limits[1],
                target_q=drive["target"], target_qd=drive["target_velocity"], target_ke=drive["stiffness"],
                target_kd=drive["damping"])
        elif kind == "ball":
            twist = j["twist_limits"] or (None, None)
            b.add_joint_ball(*ids, parent_xform=xp, child_xform=xc, cone_limit=j["cone_limit"], twist_lower=twist[0],
                             twist_upper=twist[1])
        elif kind == "free":
            b.add_joint_free(ids[1], parent=ids[0], parent_xform=xp, child_xform=xc)
        else:
            getattr(b, f"add_joint_{kind}")(*ids, parent_xform=xp, child_xform=xc)


def _frame(spec: dict | None):
    if spec is None:
        return ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
    return (spec["position"], spec["rotation"])


def _world_point_frame(anchor: np.ndarray, body: dict | None):
    """The frame at world point ``anchor`` with world-aligned axes, in ``body``'s frame."""
    if body is None:
        return (tuple(anchor), (0.0, 0.0, 0.0, 1.0))
    inv = _inverse(body["rotation"])
    local = _quat_rotate(inv, anchor - np.asarray(body["position"], np.float64))
    return (tuple(local), tuple(inv))


def shape_world_spec(shape: dict, body_q) -> dict:
    """A body shape as a collider-style description placed in the world at body pose ``body_q``
    (7 numbers: position, quaternion x, y, z, w), for drawing."""
    p, q = np.asarray(body_q[:3], np.float64), np.asarray(body_q[3:7], np.float64)
    center = p + _quat_rotate(q, np.asarray(shape["position"], np.float64))
    rot = tuple(quat_multiply(q, shape["rotation"]))
    return {**shape, "center": center, "position": center, "rotation": rot}
