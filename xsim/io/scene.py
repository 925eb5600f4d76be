"""Scene files: a TOML description of a simulation, checked and turned into a ``ModelBuilder``.

The format is documented in ``docs/scenes.md``. Reading is two steps so that ``xsim check`` can
stop after the first: :func:`load_scene` parses and checks the whole file (every problem raises
``xsim.SceneError`` naming the file, the key path, what was expected and what was found) and
loads mesh files; :meth:`Scene.builder` then adds everything to a ``ModelBuilder`` that a Python
user may keep editing before ``finalize``. Nothing in the file is ever evaluated as code.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SceneError
from ..sim import validate
from ..sim.builder import DEFAULT_BEND_COMPLIANCE, DEFAULT_PARTICLE_RADIUS
from ..sim.worlds import world_offsets
from .bodies import BodyPart, add_bodies, add_joints, body_keys, check_body, check_joint, joint_keys
from .files import PREVIEW_SUFFIXES, USD_SUFFIXES, file_problem
from .robots import add_robots, check_robot, robot_keys
from .schema import (
    Invalid,
    Key,
    boolean,
    check_table,
    check_typed_table,
    describe,
    either,
    integer,
    join,
    list_of,
    number,
    string,
    suggestion,
    table,
    vector,
    written_fraction,
)
from .soft_scene import add_soft, check_soft, soft_keys

# -- the format ------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEVICE_NAME = re.compile(r"cpu|cuda(:\d+)?")
"""The device names a scene (and ``xsim run --device``) accepts."""
_EDGES = ("left", "right", "top", "bottom")


def _rotation(value: Any, path: str) -> tuple[float, float, float, float]:
    """A rotation as a unit quaternion (x, y, z, w): either written so, or ``{axis, degrees}``."""
    if isinstance(value, dict):
        spec = check_table(value, path, {"axis": Key(vector(3), doc="rotation axis [x, y, z]"),
                                         "degrees": Key(number(), doc="angle in degrees")})
        axis = np.asarray(spec["axis"], dtype=np.float64)
        norm = math.hypot(*axis)
        if norm == 0.0:
            raise Invalid(join(path, "axis"), "a non-zero axis", describe(value["axis"]))
        half = math.radians(spec["degrees"]) / 2.0
        x, y, z = axis / norm * math.sin(half)
        return (float(x), float(y), float(z), math.cos(half))
    quat = vector(4, expected="a quaternion [x, y, z, w] or a table {axis = [x, y, z], degrees = a}")(value, path)
    norm = math.hypot(*quat)
    if norm == 0.0:
        raise Invalid(path, "a non-zero quaternion [x, y, z, w]", describe(value))
    return tuple(c / norm for c in quat)


_IDENTITY = (0.0, 0.0, 0.0, 1.0)
_vec3 = vector(3)
_name = string(pattern=_NAME, expected="a name made of letters, digits and _ (not starting with a digit)")
_mu = Key(number(minimum=0.0), 0.5, "friction coefficient")
_placement = {
    "position": Key(_vec3, (0.0, 0.0, 0.0), "translation [x, y, z], m"),
    "rotation": Key(_rotation, _IDENTITY, "quaternion [x, y, z, w] or {axis, degrees}"),
}

SIM_KEYS = {
    "dt": Key(number(above=0.0), 1.0 / 60.0, "seconds per frame"),
    "substeps": Key(integer(minimum=1), 10, "solver substeps per frame"),
    "iterations": Key(integer(minimum=1), 4, "constraint iterations per substep"),
    "frames": Key(integer(minimum=1), 120, "frames to simulate"),
    "gravity": Key(_vec3, (0.0, 0.0, -9.81), "m/s^2, z up"),
    "device": Key(string(pattern=DEVICE_NAME, expected='"cpu" or "cuda:N"'), "cpu", '"cpu" or "cuda:N"'),
}

OUTPUT_KEYS = {
    "usd": Key(string(), None, "USD file to write, relative to the working directory"),
    "fps": Key(number(above=0.0), None, "frames per second of the USD file (default 1/dt)"),
    "preview": Key(either((lambda v: isinstance(v, str), string()), (lambda v: v is False, boolean),
                          expected='a PNG path or false'), None, "preview PNG path, or false for none"),
    "preview_frames": Key(integer(minimum=1), 4, "how many frames the preview draws"),
}

_COMPLIANCE = {
    "stretch": Key(number(minimum=0.0), 0.0, "m/N"),
    "shear": Key(number(minimum=0.0), 0.0, "m/N (grids only)"),
    "bend": Key(number(minimum=0.0), DEFAULT_BEND_COMPLIANCE, "1/(N m), isometric bending"),
}

_STIFFNESS = {
    "stretch": Key(number(above=0.0), None, "N/m: a uniform stretch e stores stretch * e^2 / 2 per m^2"),
    "bend": Key(number(above=0.0), None, "N m: bending energy stiffness * (k1 + k2)^2 / 2 per m^2"),
}

_DAMPING = {
    "stretch": Key(number(minimum=0.0), 0.0, "N s/m: per edge with compliances, per material with stiffness"),
    "bend": Key(number(minimum=0.0), 0.0, "N m s"),
}

CLOTH_KEYS = {
    "name": Key(_name, None, "prim name in the USD file"),
    "grid": Key(table({"dim": Key(vector(2, integer(minimum=1), "an array of 2 integers >= 1"),
                                  doc="cells along x and y"),
                       "cell": Key(vector(2, number(above=0.0), "an array of 2 numbers > 0"),
                                   doc="cell size along x and y, m")}), None, "a rectangle of cells"),
    "mesh": Key(string(), None, "mesh file (OBJ, STL, PLY...), relative to the scene file"),
    "scale": Key(number(above=0.0), 1.0, "scale applied to the mesh file"),
    **_placement,
    "velocity": Key(_vec3, (0.0, 0.0, 0.0), "initial velocity, m/s"),
    "mass": Key(number(above=0.0), 0.01, "mass of each particle, kg"),
    "density": Key(number(above=0.0), None, "kg/m^2, instead of mass: particles get their share of the area"),
    "pin": Key(list_of(string(_EDGES), "an array of edge names"), [], "grid edges held fixed"),
    "compliance": Key(table(_COMPLIANCE), None, "XPBD compliances (inverse stiffness)"),
    "stiffness": Key(table(_STIFFNESS), None, "material stiffness in physical units, instead of compliances"),
    "damping": Key(table(_DAMPING), None, "constraint damping (XPBD)"),
    "particle_radius": Key(number(above=0.0), DEFAULT_PARTICLE_RADIUS, "contact radius of each particle, m"),
    "self_collision": Key(boolean, False, "the cloth never passes through itself or other self-colliding cloths"),
    "thickness": Key(number(above=0.0), None, "self-collision thickness, m (default: particle_radius)"),
}

_COLLIDER_TYPES = {
    "ground": {"height": Key(number(), 0.0, "the plane z = height, m")},
    "sphere": {"center": Key(_vec3, doc="centre [x, y, z] in metres"),
               "radius": Key(number(above=0.0), doc="radius in metres")},
    "box": {"center": Key(_vec3, doc="centre [x, y, z] in metres"),
            "half_extents": Key(vector(3, number(above=0.0), "an array of 3 numbers > 0"),
                                doc="half sizes [x, y, z] in metres"),
            "rotation": _placement["rotation"]},
    "capsule": {"center": Key(_vec3, doc="centre [x, y, z] in metres"),
                "radius": Key(number(above=0.0), doc="radius in metres"),
                "half_height": Key(number(above=0.0), doc="half length of the axis segment in metres"),
                "rotation": _placement["rotation"]},
    "mesh": {"mesh": Key(string(), doc="a mesh file path, relative to the scene file"),
             "scale": Key(number(above=0.0), 1.0, "scale applied to the mesh file"), **_placement},
}
_restitution = Key(number(minimum=0.0, maximum=1.0), 0.0,
                   "bounciness, 0..1: the fraction of the approach speed kept")
COLLIDER_KEYS = {ctype: {"type": Key(string(tuple(_COLLIDER_TYPES))), "name": Key(_name, None),
                         **keys, "mu": _mu, "restitution": _restitution}
                 for ctype, keys in _COLLIDER_TYPES.items()}

BODY_KEYS, SHAPE_KEYS = body_keys(_placement, _mu, Key(_name, None, "prim name in the USD file; joints refer to it"))
JOINT_KEYS = joint_keys(_placement)
ROBOT_KEYS = robot_keys(_placement, Key(_name, None, "prefix of its bodies' prim names in the USD file"))

PARTICLE_KEYS = {
    "name": Key(_name, None, "prim name in the USD file (a Points prim)"),
    "grid": Key(table({"dim": Key(vector(3, integer(minimum=1), "an array of 3 integers >= 1"),
                                  doc="particles along x, y and z"),
                       "spacing": Key(number(above=0.0), doc="distance between neighbours, m")}),
                doc="a block of particles on a grid"),
    "position": Key(_vec3, (0.0, 0.0, 0.0), "the grid's corner [x, y, z], m"),
    "jitter": Key(number(minimum=0.0), 0.0, "random offsets of up to this much along each axis, m"),
    "seed": Key(integer(minimum=0), 0, "seed of the jitter"),
    "velocity": Key(_vec3, (0.0, 0.0, 0.0), "initial velocity, m/s"),
    "mass": Key(number(above=0.0), 0.001, "mass of each particle, kg"),
    "radius": Key(number(above=0.0), DEFAULT_PARTICLE_RADIUS, "contact radius of each particle, m"),
    "mu": Key(number(minimum=0.0), 0.5, "friction between particles (the model's particle_mu)"),
    "restitution": Key(number(minimum=0.0, maximum=1.0), 0.0,
                       "restitution between particles (the model's particle_restitution)"),
}

LAYOUT_KEYS = {
    "replicate": Key(integer(minimum=1), 1, "copies of the scene, each its own world: copies never touch"),
    "spacing": Key(_vec3, (0.0, 0.0, 0.0), "[x, y, z] m between copies: a line, square or cube grid"),
}

SOFT_KEYS = soft_keys(_placement, Key(_name, None, "prim name in the USD file"), DEFAULT_PARTICLE_RADIUS)

TOP_KEYS = ("replicate", "spacing", "sim", "output", "cloth", "collider", "body", "joint", "robot", "optimize",
            "soft", "particles")
_TOP_TABLES = ("one of the tables [sim], [output], [[cloth]], [[soft]], [[particles]], [[collider]], [[body]], "
               "[[joint]], [[robot]], [optimize] "
               "or the keys replicate, spacing")


# -- the checked scene -----------------------------------------------------------------------------


@dataclass
class SimSettings:
    """``[sim]``: time step (seconds per frame), substeps, iterations, frames, gravity, device."""

    dt: float
    substeps: int
    iterations: int
    frames: int
    gravity: tuple[float, float, float]
    device: str


@dataclass
class OutputSettings:
    """``[output]``: USD path, frames per second, preview PNG (None = no preview), frames drawn."""

    usd: Path
    fps: float
    preview: Path | None
    preview_frames: int


@dataclass
class ClothPart:
    """Where one cloth landed in the model: its particles ``[first, first + count)`` and its
    triangles (indices local to the cloth, (n, 3)); a block of free particles has none and its
    particles' ``radius`` (m), and is drawn as points."""

    name: str
    first: int
    count: int
    triangles: np.ndarray
    radius: float = 0.0


@dataclass
class Scene:
    """A checked scene file. ``builder()`` turns it into a fresh ``ModelBuilder``."""

    path: Path
    name: str
    sim: SimSettings
    output: OutputSettings
    cloths: list[dict] = field(default_factory=list)
    colliders: list[dict] = field(default_factory=list)
    parts: list[ClothPart] = field(default_factory=list)
    bodies: list[dict] = field(default_factory=list)
    joints: list[dict] = field(default_factory=list)
    robots: list[dict] = field(default_factory=list)  # checked [[robot]] tables (``io.robots``)
    body_parts: list[BodyPart] = field(default_factory=list)
    optimize: Any = None  # the checked [optimize] table (``io.optimize.OptimizeSettings``), if any
    softs: list[dict] = field(default_factory=list)  # the checked [[soft]] tables
    particles: list[dict] = field(default_factory=list)  # the checked [[particles]] tables
    replicate: int = 1    # copies of the scene, each its own world (``ModelBuilder.replicate``)
    spacing: tuple = (0.0, 0.0, 0.0)  # m between copies

    def builder(self, builder=None):
        """A ``ModelBuilder`` holding the scene's cloths, colliders, bodies and joints (added to
        ``builder`` when given), ``replicate`` times over as separate worlds. Also fills ``self.parts``
        with where each cloth's particles and triangles went and ``self.body_parts`` with each body's
        index and shapes (copy k's names end in ``_k`` when replicated)."""
        from ..sim import ModelBuilder

        b = builder if builder is not None else ModelBuilder(gravity=self.sim.gravity)
        one = b if self.replicate == 1 else ModelBuilder(gravity=self.sim.gravity)
        parts = [_add_cloth(one, c) for c in self.cloths]
        parts += [ClothPart(*add_soft(one, s)) for s in self.softs]
        parts += [_add_particles(one, p) for p in self.particles]
        for c in self.colliders:
            _add_collider(one, c)
        first_body = one.body_count
        body_parts = add_bodies(one, self.bodies)
        add_joints(one, self.joints, self.bodies, first_body)
        body_parts += add_robots(one, self.robots)
        if self.replicate == 1:
            self.parts, self.body_parts = parts, body_parts
            return b
        particle0, body0 = b.particle_count, b.body_count
        b.replicate(one, self.replicate, self.spacing)
        copies = range(self.replicate)
        self.parts = [ClothPart(f"{p.name}_{k}", particle0 + k * one.particle_count + p.first, p.count, p.triangles,
                                p.radius) for k in copies for p in parts]
        self.body_parts = [BodyPart(f"{p.name}_{k}", body0 + k * one.body_count + p.index, p.shapes)
                           for k in copies for p in body_parts]
        return b

    def placed_colliders(self) -> list[dict]:
        """The static colliders as drawn (USD, previews): every copy's at its place, named ``_k``
        when replicated; the ground, shared by all copies, once."""
        if self.replicate == 1:
            return self.colliders
        out = [c for c in self.colliders if c["type"] == "ground"]
        for k, offset in enumerate(world_offsets(self.replicate, self.spacing)):
            for c in self.colliders:
                if c["type"] != "ground":
                    out.append({**c, "name": f"{c['name']}_{k}",
                                **{key: tuple(np.add(c[key], offset).tolist())
                                   for key in ("center", "position") if key in c}})
        return out


def load_scene(path: str | Path, overrides: dict[str, Any] | None = None) -> Scene:
    """Read and check a scene file; mesh files are loaded too. ``overrides``: scene values by key path
    (``{"cloth[0].mass": 0.002}``) set before the check (``xsim.io.overrides``). Raises ``xsim.SceneError``."""
    path = Path(path)
    problem = file_problem(path)
    if problem == "does not exist":
        raise SceneError(f"{path}: scene file not found")
    if problem:
        raise SceneError(f"{path}: cannot read the scene file: it {problem}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SceneError(f"{path}: cannot read the scene file: {e}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _syntax_error(path, e) from None
    except RecursionError:
        raise SceneError(f"{path}: bad TOML: arrays or tables nested too deeply to read") from None
    if overrides:
        from .overrides import apply_overrides

        try:
            raw = apply_overrides(raw, overrides)
        except Invalid as e:
            raise scene_error(path, e) from None
    return scene_from_raw(raw, path)


def scene_from_raw(raw: dict, path: str | Path) -> Scene:
    """Check a scene's parsed TOML ``raw`` as if read from ``path`` (which need not exist yet: its
    folder is where relative mesh paths are found, its stem names the scene). Raises ``xsim.SceneError``."""
    path = Path(path)
    try:
        return _check_scene(raw, path)
    except Invalid as e:
        raise scene_error(path, e) from None


def scene_error(path: Path, e: Invalid) -> SceneError:
    """``xsim.SceneError`` for a failed check; keeps file, key, expected and found as attributes."""
    err = SceneError(f"{path}: {e}")
    err.file, err.key, err.expected, err.found = str(path), e.key, e.expected, e.found
    return err


def _syntax_error(path: Path, e: tomllib.TOMLDecodeError) -> SceneError:
    # Python 3.11's tomllib puts the position only in the message: "... (at line 3, column 7)".
    msg = str(e)
    m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
    line = int(m.group(1)) if m else getattr(e, "lineno", 0)
    col = int(m.group(2)) if m else getattr(e, "colno", 0)
    reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", msg)
    where = f"{path}:{line}:{col}" if line else f"{path}"
    err = SceneError(f"{where}: bad TOML syntax: {reason}")
    err.file, err.line, err.col = str(path), line, col
    return err


def _check_scene(raw: dict, path: Path) -> Scene:
    for key in raw:
        if key not in TOP_KEYS:
            raise Invalid(key, _TOP_TABLES, "an unknown key", suggestion(key, TOP_KEYS))
    sim = SimSettings(**check_table(raw.get("sim", {}), "sim", SIM_KEYS, "a table [sim]"))
    problem = validate.time_step_problem(sim.dt, sim.substeps)
    if problem:
        raise Invalid("sim.dt", problem, describe(raw["sim"].get("dt", sim.dt)))
    name = path.stem
    out = check_table(raw.get("output", {}), "output", OUTPUT_KEYS, "a table [output]")
    preview = out["preview"]
    output = OutputSettings(
        # an empty string is a mistake, not "the default": it is refused below by its suffix
        usd=Path(f"out/{name}.usda" if out["usd"] is None else out["usd"]),
        # 1 / dt as the user meant it: dt = 0.016666667 is 1/60 s, so 60 time codes per second, not 59.9999988.
        fps=out["fps"] or float(1 / written_fraction(sim.dt)),
        preview=None if preview is False else Path(f"out/{name}.png" if preview is None else preview),
        preview_frames=out["preview_frames"])
    if output.usd.suffix not in USD_SUFFIXES:
        raise Invalid("output.usd", "a path ending in .usda, .usdc or .usd", describe(out["usd"]))
    if output.preview is not None and output.preview.suffix not in PREVIEW_SUFFIXES:
        raise Invalid("output.preview", "a path ending in .png (a strip of frames), .gif or .mp4 (an animation), or false", describe(out["preview"]))
    cloths = [_check_cloth(c, f"cloth[{i}]", path, sim) for i, c in enumerate(_array_of_tables(raw, "cloth"))]
    colliders = [_check_collider(c, f"collider[{i}]", path)
                 for i, c in enumerate(_array_of_tables(raw, "collider"))]
    softs = [check_soft(c, f"soft[{i}]", path, SOFT_KEYS) for i, c in enumerate(_array_of_tables(raw, "soft"))]
    particles = [check_table(c, f"particles[{i}]", PARTICLE_KEYS, "a table [[particles]]")
                 for i, c in enumerate(_array_of_tables(raw, "particles"))]
    for key in ("mu", "restitution"):  # the model's, one value for all particles
        for i, spec in enumerate(particles[1:], 1):
            if spec[key] != particles[0][key]:
                raise Invalid(f"particles[{i}].{key}", f"the same {key} as particles[0] ({particles[0][key]}): "
                              "it is the model's, between every two particles", describe(spec[key]))
    _name_parts(cloths, "cloth")
    _name_parts(softs, "soft")
    _name_parts(particles, "particles")
    _name_parts(colliders, None)
    load = (lambda file, key, scale: _load_mesh(path, file, key, scale))
    bodies = [check_body(b, f"body[{i}]", BODY_KEYS, SHAPE_KEYS, load)
              for i, b in enumerate(_array_of_tables(raw, "body"))]
    _name_parts(bodies, "body")
    joints = [check_joint(j, f"joint[{i}]", JOINT_KEYS, bodies) for i, j in enumerate(_array_of_tables(raw, "joint"))]
    robots = [check_robot(r, f"robot[{i}]", ROBOT_KEYS, path) for i, r in enumerate(_array_of_tables(raw, "robot"))]
    _name_parts(robots, "robot")
    layout = check_table({key: raw[key] for key in LAYOUT_KEYS if key in raw}, "", LAYOUT_KEYS)
    scene = Scene(path=path, name=name, sim=sim, output=output, cloths=cloths, colliders=colliders,
                  bodies=bodies, joints=joints, robots=robots, softs=softs, particles=particles, **layout)
    if "optimize" in raw:
        if scene.replicate != 1:
            raise Invalid("replicate", "1 in a scene with [optimize] (an optimization fits one world)",
                          describe(raw["replicate"]))
        from .optimize import check_optimize

        scene.optimize = check_optimize(raw["optimize"], scene)
    return scene


def _array_of_tables(raw: dict, key: str) -> list:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise Invalid(key, f"an array of tables [[{key}]]", describe(value))
    return value


def _name_parts(specs: list[dict], prefix: str | None):
    """Give unnamed parts a name (``cloth0``, ``sphere1``) and refuse duplicates."""
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        kind = prefix or spec["type"]
        spec["name"] = spec["name"] or f"{kind}{i}"
        if spec["name"] in seen:
            table_name = prefix or "collider"
            raise Invalid(f"{table_name}[{i}].name", "a name not used before",
                          f'"{spec["name"]}", already the name of {table_name}[{seen[spec["name"]]}]')
        seen[spec["name"]] = i


def _check_cloth(raw: Any, path: str, scene_path: Path, sim: SimSettings) -> dict:
    spec = check_table(raw, path, CLOTH_KEYS, "a table [[cloth]]")
    if spec["grid"] is not None:
        problem = validate.grid_problem(*spec["grid"]["dim"])
        if problem:
            raise Invalid(join(path, "grid.dim"), problem, describe(raw["grid"]["dim"]))
    for key, value in (spec["compliance"] or {}).items():
        # the solver uses compliance / h^2, which must stay finite in float32
        if value * (sim.substeps / sim.dt) ** 2 > validate.F32_MAX:
            raise Invalid(join(path, f"compliance.{key}"), "a compliance whose compliance / h^2 (h = dt / "
                          f"substeps = {sim.dt / sim.substeps:g} s) fits float32",
                          describe(raw["compliance"][key]))
    if (spec["grid"] is None) == (spec["mesh"] is None):
        found = "both" if spec["grid"] is not None else "neither"
        raise Invalid(path, "exactly one of grid = {dim, cell} or mesh = \"file\"", found)
    if spec["mesh"] is not None:
        if spec["pin"]:
            raise Invalid(join(path, "pin"), "no pins on a mesh cloth (pins name grid edges)",
                          describe(raw["pin"]))
        if isinstance(raw.get("compliance"), dict) and "shear" in raw["compliance"]:
            raise Invalid(join(path, "compliance.shear"), "no shear compliance on a mesh cloth (grids only)",
                          describe(raw["compliance"]["shear"]))
        spec["vertices"], spec["indices"] = _load_mesh(scene_path, spec["mesh"], join(path, "mesh"), spec["scale"])
    elif "scale" in raw:
        raise Invalid(join(path, "scale"), "no scale on a grid cloth (set grid.cell instead)", describe(raw["scale"]))
    spec["compliance"] = spec["compliance"] or {k: key.default for k, key in _COMPLIANCE.items()}
    spec["stiffness"] = spec["stiffness"] or {k: None for k in _STIFFNESS}
    spec["damping"] = spec["damping"] or {k: key.default for k, key in _DAMPING.items()}
    given = raw.get("compliance") if isinstance(raw.get("compliance"), dict) else {}
    for name, clashes in (("stretch", ("stretch", "shear")), ("bend", ("bend",))):
        clash = [c for c in clashes if c in given]
        if spec["stiffness"][name] is not None and clash:
            raise Invalid(join(path, f"stiffness.{name}"), f"either stiffness.{name} or compliance.{clash[0]}",
                          "both")
    if spec["density"] is not None and "mass" in raw:
        raise Invalid(join(path, "density"), "either density or mass", "both")
    if spec["thickness"] is not None and not spec["self_collision"]:
        raise Invalid(join(path, "thickness"), "a thickness only with self_collision = true",
                      describe(raw["thickness"]))
    return spec


def _check_collider(raw: Any, path: str, scene_path: Path) -> dict:
    ctype, spec = check_typed_table(raw, path, COLLIDER_KEYS, "a table [[collider]]")
    if ctype == "mesh":
        spec["vertices"], spec["indices"] = _load_mesh(scene_path, spec["mesh"], join(path, "mesh"), spec["scale"])
    return spec


def _load_mesh(scene_path: Path, name: str, key: str, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (n, 3) float32, metres, and triangle indices (m, 3) int32 of a mesh file, whose
    path is relative to the scene file."""
    import trimesh

    file = (scene_path.parent / name).absolute()
    problem = file_problem(file)
    if problem:
        raise Invalid(key, "an existing mesh file (paths are relative to the scene file)",
                      f'"{name}", and {file} {problem}')
    try:
        stl_problem = _stl_problem(file)
        if stl_problem:
            raise ValueError(stl_problem)
        mesh = trimesh.load(file, force="mesh", process=False)
    except Exception as e:  # noqa: BLE001 - trimesh raises many kinds of errors for unreadable files
        raise Invalid(key, "a mesh file trimesh can read (OBJ, STL, PLY, GLB...)",
                      f'"{name}", an unreadable or corrupt mesh file ({type(e).__name__}: {e})') from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise Invalid(key, "a mesh file with triangles", f'"{name}", which has none')
    vertices, faces = np.asarray(mesh.vertices, np.float64), np.asarray(mesh.faces, np.int64)
    if faces.min() < 0 or faces.max() >= len(vertices):
        raise Invalid(key, "a mesh file whose triangles index its vertices",
                      f'"{name}", with vertex indices {faces.min()}..{faces.max()} for '
                      f'{len(vertices)} vertices')
    scaled = vertices * scale
    bad = ~np.isfinite(scaled) | (np.abs(scaled) > validate.F32_MAX)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        where = _bad_number_line(file)
        found = (f'{file}:{where[0]}: "{where[1]}"' if where else
                 f'"{name}", whose vertex {row} is {tuple(vertices[row].tolist())} (times scale {scale:g})')
        raise Invalid(key, f"a mesh file whose vertices times scale are finite and at most {validate.F32_MAX:.3g} "
                      "in magnitude (float32)", found)
    return scaled.astype(np.float32), faces.astype(np.int32)


def _stl_problem(file: Path) -> str | None:
    """Why an .stl file is neither a whole binary STL (84-byte header and count, then 50 bytes per
    triangle) nor ASCII STL text, or None. Checked here because trimesh reads some corrupt binary
    files as meshes without triangles, which would be reported as empty rather than corrupt."""
    if file.suffix.lower() != ".stl":
        return None
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(84)
    if len(head) == 84 and size == 84 + 50 * int.from_bytes(head[80:84], "little"):
        return None
    if head.lstrip().startswith(b"solid") and head.isascii():
        return None
    count = int.from_bytes(head[80:84], "little") if len(head) == 84 else 0
    return (f"{size} bytes, not ASCII STL, and not the {84 + 50 * count} bytes a binary STL of the "
            f"{count} triangles its header counts has")


def _bad_number_line(file: Path) -> tuple[int, str] | None:
    """(line number, line) of the first number in a text mesh file that is not finite or is beyond
    float32's range; None for binary files or when every number is fine."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line_number, line in enumerate(text.splitlines(), 1):
        for token in line.replace("/", " ").split():
            try:
                x = float(token)
            except ValueError:
                continue
            if not np.isfinite(x) or abs(x) > validate.F32_MAX:
                return line_number, line.strip()
    return None


# -- building --------------------------------------------------------------------------------------


def _add_particles(b, p: dict) -> ClothPart:
    """A ``[[particles]]`` block: free particles on a grid, jittered by a seeded generator."""
    first = b.particle_count
    nx, ny, nz = p["grid"]["dim"]
    k = np.stack(np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij"), axis=-1).reshape(-1, 3)
    x = np.asarray(p["position"]) + k * p["grid"]["spacing"]
    x += np.random.default_rng(p["seed"]).uniform(-p["jitter"], p["jitter"], x.shape)
    for point in x:
        b.add_particle(tuple(point), vel=p["velocity"], mass=p["mass"], radius=p["radius"])
    b.particle_mu, b.particle_restitution = p["mu"], p["restitution"]
    return ClothPart(p["name"], first, len(x), np.zeros((0, 3), dtype=np.int32), p["radius"])


def _add_cloth(b, c: dict) -> ClothPart:
    first = b.particle_count
    tri_first = len(b.tri_indices)
    comp, stiff, damp = c["compliance"], c["stiffness"], c["damping"]
    common = {"pos": c["position"], "rot": c["rotation"], "vel": c["velocity"], "mass": c["mass"],
              "stretch_compliance": comp["stretch"], "bend_compliance": comp["bend"],
              "particle_radius": c["particle_radius"], "stretch_stiffness": stiff["stretch"],
              "bend_stiffness": stiff["bend"], "stretch_damping": damp["stretch"], "bend_damping": damp["bend"],
              "density": c["density"], "self_collision": c["self_collision"], "thickness": c["thickness"]}
    if c["grid"] is not None:
        (nx, ny), (sx, sy) = c["grid"]["dim"], c["grid"]["cell"]
        pins = {f"fix_{edge}": edge in c["pin"] for edge in _EDGES}
        b.add_cloth_grid(dim_x=nx, dim_y=ny, cell_x=sx, cell_y=sy, shear_compliance=comp["shear"], **pins, **common)
        # A pinned particle moves at its own velocity; a pin in a scene file means "held fixed",
        # so the cloth's initial velocity must not carry the pins away.
        for i in range(first, b.particle_count):
            if b.particle_mass[i] == 0.0:
                b.particle_qd[i] = (0.0, 0.0, 0.0)
    else:
        b.add_cloth_mesh(vertices=c["vertices"], indices=c["indices"], **common)
    tris = np.asarray(b.tri_indices[tri_first:], dtype=np.int32).reshape(-1, 3) - first
    return ClothPart(c["name"], first, b.particle_count - first, tris)


def _add_collider(b, c: dict):
    kind = c["type"]
    if kind == "ground":
        b.add_ground_plane(mu=c["mu"], restitution=c["restitution"], height=c["height"])
    elif kind == "sphere":
        b.add_collider_sphere(center=c["center"], radius=c["radius"], mu=c["mu"],
                              restitution=c["restitution"])
    elif kind == "box":
        b.add_collider_box(center=c["center"], half_extents=c["half_extents"], rot=c["rotation"], mu=c["mu"],
                           restitution=c["restitution"])
    elif kind == "capsule":
        b.add_collider_capsule(center=c["center"], radius=c["radius"], half_height=c["half_height"],
                               rot=c["rotation"], mu=c["mu"], restitution=c["restitution"])
    else:
        b.add_collider_mesh((c["vertices"], c["indices"]), pos=c["position"], rot=c["rotation"], mu=c["mu"],
                            restitution=c["restitution"])
