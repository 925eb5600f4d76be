"""``[[robot]]`` tables of a scene file: a URDF or MJCF robot placed in the scene, its base fixed or free,
drive targets for its joints by name (``docs/scenes.md``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from .bodies import BodyPart
from .files import file_problem
from .schema import Invalid, Key, boolean, check_table, describe, join, number, string

_SUFFIXES = {".urdf": "urdf", ".xml": "mjcf", ".mjcf": "mjcf"}
# robot collections a file may name by prefix: "pybullet_data:kuka_iiwa/model.urdf", "gymnasium:ant.xml"
_COLLECTIONS = {"pybullet_data": ("pybullet_data", lambda m: m.getDataPath(), "pybullet"),
                "gymnasium": ("gymnasium", lambda m: str(Path(m.__file__).parent / "envs" / "mujoco" / "assets"),
                              "gymnasium")}


def _robot_file(value: str, path: str, scene_path: Path) -> Path:
    """The file ``value`` names: relative to the scene file, or in a collection (``_COLLECTIONS``)."""
    prefix, sep, rest = value.partition(":")
    if sep and prefix in _COLLECTIONS:
        module, folder, package = _COLLECTIONS[prefix]
        try:
            import importlib

            return Path(folder(importlib.import_module(module))) / rest
        except ImportError:
            raise Invalid(path, f"a file of {prefix}, which is not installed (pip install {package})",
                          describe(value)) from None
    return (scene_path.parent / value).resolve()


def _targets(value: Any, path: str) -> dict[str, float]:
    """A table of joint name -> target (rad or m)."""
    if not isinstance(value, dict):
        raise Invalid(path, "a table of joint names and targets {name = rad or m}", describe(value))
    return {k: number()(v, join(path, k)) for k, v in value.items()}


def robot_keys(placement: dict[str, Key], name: Key) -> dict[str, Key]:
    """The keys of ``[[robot]]``, built on the scene's ``placement`` keys and ``name`` key."""
    return {
        "file": Key(string(), doc="a URDF (.urdf) or MJCF (.xml) file, relative to the scene file, or "
                    '"pybullet_data:<path>" / "gymnasium:<file>" for those packages\' robots'),
        "name": name,
        **placement,
        "fixed_base": Key(boolean, None, "weld the root to the world (default: as the file; URDF: fixed)"),
        "joint_targets": Key(_targets, None, "drive targets by joint name, rad or m"),
        "stiffness": Key(number(minimum=0.0), 0.0, "drive stiffness of the joints in joint_targets, N m/rad or N/m"),
        "damping": Key(number(minimum=0.0), 0.0, "drive damping of those joints, N m s/rad or N s/m"),
        "collision": Key(boolean, True, "import the collision geometry"),
        "unsupported_geoms": Key(string(("error", "skip")), "error", "geoms of a type xsim lacks: refuse or skip"),
    }


def _add(builder, spec: dict, quiet: bool = False):
    """Import the robot of ``spec`` into ``builder``; returns the importer's result."""
    xform = (spec["position"], spec["rotation"])
    kw = {"xform": xform, "unsupported_geoms": spec["unsupported_geoms"], "collision": spec["collision"]}
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        if spec["kind"] == "urdf":
            return builder.add_urdf(str(spec["path"]), floating=spec["fixed_base"] is False, **kw)
        floating = None if spec["fixed_base"] is None else not spec["fixed_base"]
        return builder.add_mjcf(str(spec["path"]), floating=floating, **kw)


def check_robot(raw: Any, path: str, keys: dict[str, Key], scene_path: Path) -> dict:
    """One ``[[robot]]`` table, checked: the file is imported once here, so a file xsim cannot import or a
    joint name it does not have is an error of the scene file, naming the key."""
    from ..errors import AssetError
    from ..sim import ModelBuilder
    from ..sim.rigid import JOINT_PRISMATIC, JOINT_REVOLUTE

    spec = check_table(raw, path, keys, "a table [[robot]]")
    file = _robot_file(spec["file"], join(path, "file"), scene_path)
    kind = _SUFFIXES.get(file.suffix.lower())
    if kind is None:
        raise Invalid(join(path, "file"), "a .urdf or .xml (MJCF) file", describe(spec["file"]))
    problem = file_problem(file)
    if problem:
        raise Invalid(join(path, "file"), "a robot file that exists", f'"{spec["file"]}", which {problem}')
    spec["path"], spec["kind"] = file, kind
    probe = ModelBuilder()
    try:
        _add(probe, spec, quiet=True)
    except (AssetError, ImportError) as e:
        raise Invalid(join(path, "file"), f"a {kind.upper()} file xsim can import", str(e)) from None
    driven = [j["label"] for j in probe.joints if j["type"] in (JOINT_REVOLUTE, JOINT_PRISMATIC)]
    for name in spec["joint_targets"] or {}:
        if name not in driven:
            raise Invalid(join(path, f"joint_targets.{name}"),
                          f"the name of a revolute or prismatic joint of {spec['file']}: {', '.join(driven)}",
                          f'"{name}"')
    return spec


def add_robots(builder, robots: list[dict]) -> list[BodyPart]:
    """Add the checked ``[[robot]]`` tables to ``builder``: each robot's drives on the joints its
    ``joint_targets`` name; returns each robot body's part (named ``<robot>_<link>``) for drawing."""
    from .importers.parts import body_parts

    out: list[BodyPart] = []
    for spec in robots:
        first, first_joint = builder.body_count, len(builder.joints)
        _add(builder, spec)
        targets = spec["joint_targets"] or {}
        for j in builder.joints[first_joint:]:
            if j["label"] in targets:
                j["target_q"], j["ke"], j["kd"] = float(targets[j["label"]]), spec["stiffness"], spec["damping"]
        for p in body_parts(builder)[first:]:
            out.append(BodyPart(f"{spec['name']}_{p.name}", p.index, p.shapes))
    return out
