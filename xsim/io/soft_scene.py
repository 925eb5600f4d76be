"""``[[soft]]`` blocks of a scene file: soft bodies from a grid of cells or a mesh file (a tet mesh that meshio
reads, or a closed surface mesh tetrahedralized with TetGen: ``xsim.io.tetmesh``), with a physical material."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .files import file_problem
from .schema import Invalid, Key, check_table, describe, integer, join, list_of, number, string, table, vector

_EDGES = ("left", "right", "top", "bottom")


def soft_keys(placement: dict, name_key: Key, particle_radius: float) -> dict:
    """The keys of a ``[[soft]]`` table (placement keys shared with the other tables)."""
    return {
        "name": name_key,
        "grid": Key(table({"dim": Key(vector(3, integer(minimum=1), "an array of 3 integers >= 1"),
                                      doc="cells along x, y and z"),
                           "cell": Key(vector(3, number(above=0.0), "an array of 3 numbers > 0"),
                                       doc="cell size along x, y and z, m")}), None, "a box of cells, 5 tets each"),
        "mesh": Key(string(), None, "tet mesh file (.msh, .vtk, .vtu, .mesh...) or closed surface (.obj, .stl...), "
                                    "relative to the scene file"),
        "max_volume": Key(number(above=0.0), None, "largest tet volume when a surface is tetrahedralized, m^3"),
        "scale": Key(number(above=0.0), 1.0, "scale applied to the mesh file"),
        **placement,
        "velocity": Key(vector(3), (0.0, 0.0, 0.0), "initial velocity, m/s"),
        "density": Key(number(above=0.0), 1000.0, "kg/m^3"),
        "youngs_modulus": Key(number(above=0.0), 1.0e5, "Young's modulus, Pa"),
        "poisson_ratio": Key(number(), 0.3, "Poisson's ratio, in (-1, 0.5)"),
        "damping": Key(number(minimum=0.0), 0.0, "viscous damping k_damp, Pa s"),
        "pin": Key(list_of(string(_EDGES), "an array of edge names"), [], "grid faces held fixed: left/right (x), "
                                                                          "bottom/top (y)"),
        "particle_radius": Key(number(above=0.0), particle_radius, "contact radius of each particle, m"),
    }


def check_soft(raw: Any, path: str, scene_path: Path, keys: dict) -> dict:
    """The checked ``[[soft]]`` table at key ``path``; its mesh file loaded (``vertices``, ``tets``)."""
    spec = check_table(raw, path, keys, "a table [[soft]]")
    if not -1.0 < spec["poisson_ratio"] < 0.5:
        raise Invalid(join(path, "poisson_ratio"), "a number in (-1, 0.5)", describe(raw["poisson_ratio"]))
    if (spec["grid"] is None) == (spec["mesh"] is None):
        found = "both" if spec["grid"] is not None else "neither"
        raise Invalid(path, "exactly one of grid = {dim, cell} or mesh = \"file\"", found)
    if spec["mesh"] is None:
        for key in ("scale", "max_volume"):
            if key in raw:
                raise Invalid(join(path, key), f"no {key} on a grid soft body", describe(raw[key]))
        return spec
    if spec["pin"]:
        raise Invalid(join(path, "pin"), "no pins on a mesh soft body (pins name grid faces)", describe(raw["pin"]))
    from .tetmesh import TetMeshError, load_tet_mesh

    file = (scene_path.parent / spec["mesh"]).absolute()
    problem = file_problem(file)
    if problem:
        raise Invalid(join(path, "mesh"), "an existing mesh file (paths are relative to the scene file)",
                      f'"{spec["mesh"]}", and {file} {problem}')
    try:
        spec["vertices"], spec["tets"] = load_tet_mesh(file, max_volume=spec["max_volume"])
    except TetMeshError as e:
        raise Invalid(join(path, "mesh"), "a tet mesh file meshio reads, or a closed surface mesh", str(e)) from None
    from ..sim.soft import oriented

    try:
        oriented(str(file), spec["vertices"] * spec["scale"], spec["tets"])
    except ValueError as e:
        raise Invalid(join(path, "mesh"), "a mesh of tetrahedra with volume, all oriented alike", str(e)) from None
    return spec


def add_soft(b, s: dict):
    """Add the checked ``[[soft]]`` ``s`` to builder ``b``; returns (name, first particle, count, surface
    triangles in local indices) for export."""
    common = {"pos": s["position"], "rot": s["rotation"], "vel": s["velocity"], "density": s["density"],
                  "youngs_modulus": s["youngs_modulus"], "poisson_ratio": s["poisson_ratio"], "k_damp": s["damping"],
                  "particle_radius": s["particle_radius"]}
    if s["grid"] is not None:
        (nx, ny, nz), (cx, cy, cz) = s["grid"]["dim"], s["grid"]["cell"]
        first = b.add_soft_grid(dim_x=nx, dim_y=ny, dim_z=nz, cell_x=cx, cell_y=cy, cell_z=cz,
                                **{f"fix_{edge}": edge in s["pin"] for edge in _EDGES}, **common)
        for i in range(first, b.particle_count):  # a pin in a scene file means "held fixed"
            if b.particle_mass[i] == 0.0:
                b.particle_qd[i] = (0.0, 0.0, 0.0)
    else:
        first = b.add_soft_mesh(scale=s["scale"], vertices=s["vertices"], indices=s["tets"], **common)
    body = b.soft_bodies[-1]
    return s["name"], first, body["count"], np.asarray(body["triangles"], dtype=np.int32)
