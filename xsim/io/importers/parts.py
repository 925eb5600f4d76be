"""The bodies of an imported robot as the USD writer and previews draw them (``BodyPart``)."""

from __future__ import annotations

import re

from ...sim import shapes as S
from ..bodies import BodyPart

_TYPES = {S.SHAPE_SPHERE: "sphere", S.SHAPE_BOX: "box", S.SHAPE_CAPSULE: "capsule", S.SHAPE_MESH: "mesh"}


def _prim_name(label: str, taken: set) -> str:
    """A USD prim name from ``label`` (letters, digits and _; not starting with a digit), unique in ``taken``."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", label) or "body"
    if name[0].isdigit():
        name = f"_{name}"
    base, k = name, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def body_parts(builder) -> list[BodyPart]:
    """One ``BodyPart`` per body of ``builder`` with its shapes in the body frame (``write_usd``'s ``bodies``)."""
    parts: list[BodyPart] = [BodyPart("", k, []) for k in range(len(builder.bodies))]
    taken: set = set()
    for k, b in enumerate(builder.bodies):
        parts[k].name = _prim_name(b["label"] or f"body_{k}", taken)
    for sh in builder.shapes:
        if sh["body"] < 0 or sh["type"] not in _TYPES:
            continue
        kind = _TYPES[sh["type"]]
        d = {"type": kind, "position": tuple(sh["p"]), "rotation": tuple(sh["q"])}
        if kind == "sphere":
            d["radius"] = sh["size"][0]
        elif kind == "box":
            d["half_extents"] = tuple(sh["size"])
        elif kind == "capsule":
            d["radius"], d["half_height"] = sh["size"][0], sh["size"][1]
        else:
            d["vertices"], d["indices"] = sh["mesh"]
        parts[sh["body"]].shapes.append(d)
    return parts
