"""``[optimize]`` in a scene file: which scene values to fit (by key path: ``cloth[0].compliance.stretch``,
``body[1].velocity``), to what (recorded particle positions from an NPZ with ``positions`` (F+1, n, 3)
or a USD file this project wrote, at chosen frames; or a point that a named particle or body should
reach at a frame), and how (optimizer, iterations). Checked with the rest of the scene.
The run itself is ``xsim.optim.scene.run_optimize`` (the optimization layer sits above this one).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .schema import (
    Invalid,
    Key,
    boolean,
    check_table,
    check_typed_table,
    describe,
    integer,
    join,
    list_of,
    number,
    string,
    table,
    vector,
)

_PARAMETER = re.compile(r"(cloth|body)\[(\d+)\]\.(compliance\.(?:stretch|shear|bend)|velocity|angular_velocity)"
                        r"|(soft)\[(\d+)\]\.(youngs_modulus|poisson_ratio)")
PARAMETER_PATHS = ("cloth[N].compliance.stretch", "cloth[N].compliance.shear", "cloth[N].compliance.bend",
                   "cloth[N].velocity", "body[N].velocity", "body[N].angular_velocity", "soft[N].youngs_modulus",
                   "soft[N].poisson_ratio")


def _vector_bounds(value: Any, path: str) -> tuple[float, float]:
    lo, hi = vector(2)(value, path)
    if lo >= hi:
        raise Invalid(path, "[lower, upper] with lower < upper", describe(value))
    return lo, hi


PARAMETER_KEYS = {
    "key": Key(string(expected="a scene key path such as \"cloth[0].compliance.stretch\""),
               doc="the scene value to fit: " + ", ".join(PARAMETER_PATHS)),
    "log": Key(boolean, False, "optimize the logarithm (positive values spanning decades: compliances)"),
    "bounds": Key(_vector_bounds, None, "[lower, upper] on the value, in its units"),
}

_TARGET_TYPES = {
    "recorded": {"file": Key(string(), doc="NPZ (array 'positions', (frames + 1, particles, 3) m) or USD file, "
                                           "relative to the scene file"),
                 "frames": Key(list_of(integer(minimum=1), "an array of frame numbers >= 1"),
                               doc="frames compared (frame 0 is the initial state)"),
                 "weight": Key(number(above=0.0), 1.0, "factor on this target's loss")},
    "point": {"body": Key(string(), None, "name of the body whose frame origin (or `point`) is aimed"),
              "cloth": Key(string(), None, "name of the cloth holding the particle"),
              "particle": Key(integer(minimum=0), None, "particle index within that cloth"),
              "point": Key(vector(3), (0.0, 0.0, 0.0), "point in the body frame, m"),
              "frame": Key(integer(minimum=1), doc="the frame at which the point is reached"),
              "position": Key(vector(3), doc="target position [x, y, z], m"),
              "weight": Key(number(above=0.0), 1.0, "factor on this target's loss")},
}
TARGET_KEYS = {kind: {"type": Key(string(tuple(_TARGET_TYPES))), **keys} for kind, keys in _TARGET_TYPES.items()}

OPTIMIZE_KEYS = {
    "parameter": Key(list_of(table(PARAMETER_KEYS, "a table [[optimize.parameter]]"),
                             "an array of tables [[optimize.parameter]]"), doc="the values to fit"),
    "target": Key(lambda v, p: v, doc="what the rollout should match ([[optimize.target]])"),
    "optimizer": Key(string(("lbfgs", "adam", "sgd")), "lbfgs", "lbfgs (scipy L-BFGS-B), adam or sgd"),
    "iterations": Key(integer(minimum=1), 20, "optimizer iterations"),
    "learning_rate": Key(number(above=0.0), 0.05, "step size of adam and sgd (in the free coordinates)"),
    "momentum": Key(number(minimum=0.0), 0.0, "sgd momentum, in [0, 1)"),
    "clip_norm": Key(number(above=0.0), None, "adam/sgd: clip the gradient to this norm"),
    "tolerance": Key(number(above=0.0), 1e-15, "lbfgs stops when an iteration lowers the loss by less than "
                                               "this fraction"),
    "loss": Key(string(("mean", "sum")), "mean", "mean or sum of squared distances over target points, m^2"),
    "frames": Key(integer(minimum=1), None, "frames per rollout (default: [sim].frames)"),
    "output": Key(string(), "out", "folder for the fitted scene, the loss curve and the USD file"),
}


@dataclass
class OptimizeSettings:
    """A checked ``[optimize]`` table (parameters and targets as checked tables)."""

    parameters: list[dict]
    targets: list[dict]
    optimizer: str
    iterations: int
    learning_rate: float
    momentum: float
    clip_norm: float | None
    tolerance: float
    loss: str
    frames: int | None
    output: Path


def check_optimize(raw: Any, scene) -> OptimizeSettings:
    """Check ``[optimize]`` against the scene's cloths and bodies; raises ``Invalid`` with the key path."""
    spec = check_table(raw, "optimize", OPTIMIZE_KEYS, "a table [optimize]")
    if not spec["parameter"]:
        raise Invalid("optimize.parameter", "at least one [[optimize.parameter]]", "an empty array")
    for i, p in enumerate(spec["parameter"]):
        _check_parameter_key(p, join(join("optimize.parameter", i), "key"), scene)
    targets = spec["target"]
    if not isinstance(targets, list) or not targets:
        raise Invalid("optimize.target", "an array of tables [[optimize.target]] (at least one)", describe(targets))
    spec["target"] = [_check_target(t, join("optimize.target", i), scene, spec["frames"] or scene.sim.frames)
                      for i, t in enumerate(targets)]
    if spec["momentum"] >= 1.0:
        raise Invalid("optimize.momentum", "a number in [0, 1)", describe(raw["momentum"]))
    return OptimizeSettings(spec["parameter"], spec["target"], spec["optimizer"], spec["iterations"],
                            spec["learning_rate"], spec["momentum"], spec["clip_norm"], spec["tolerance"], spec["loss"],
                            spec["frames"], Path(spec["output"]))


def _check_parameter_key(p: dict, path: str, scene):
    m = _PARAMETER.fullmatch(p["key"])
    if m is None:
        raise Invalid(path, "one of " + ", ".join(PARAMETER_PATHS), describe(p["key"]))
    table_name, index, attr = (m.group(1), int(m.group(2)), m.group(3)) if m.group(1) else (
        m.group(4), int(m.group(5)), m.group(6))
    items = {"cloth": scene.cloths, "body": scene.bodies, "soft": scene.softs}[table_name]
    if index >= len(items):
        raise Invalid(path, f"an existing {table_name} (the scene has {len(items)} [[{table_name}]] tables)",
                      describe(p["key"]))
    if attr == "compliance.shear" and items[index]["mesh"] is not None:
        raise Invalid(path, "no shear compliance on a mesh cloth (grids only)", describe(p["key"]))
    if table_name == "body" and items[index]["mass"] == 0.0:
        raise Invalid(path, "a dynamic body (this one has mass 0: kinematic)", describe(p["key"]))
    if p["log"] and p["bounds"] is not None and p["bounds"][0] <= 0.0:
        raise Invalid(join(path.rsplit(".", 1)[0], "bounds"), "a lower bound > 0 for a log-space value",
                      f"[{p['bounds'][0]:g}, {p['bounds'][1]:g}]")
    vector_valued = attr.endswith("velocity")
    if p["log"] and vector_valued:
        raise Invalid(join(path.rsplit(".", 1)[0], "log"), "false for a vector value (log space needs positive "
                      "numbers)", "true (a boolean)")
    p["table"], p["index"], p["attr"], p["vector"] = table_name, index, attr, vector_valued


def _check_target(raw: Any, path: str, scene, frames: int) -> dict:
    kind, t = check_typed_table(raw, path, TARGET_KEYS, "a table [[optimize.target]]")
    if kind == "recorded":
        if not t["frames"]:
            raise Invalid(join(path, "frames"), "at least one frame", "an empty array")
        file = (scene.path.parent / t["file"]).resolve()
        if not file.is_file():
            raise Invalid(join(path, "file"), "an existing NPZ or USD file (relative to the scene file)",
                          f'"{t["file"]}", and {file} does not exist')
        t["path"] = file
        late = [f for f in t["frames"] if f > frames]
        if late:
            raise Invalid(join(path, "frames"), f"frames <= {frames} (the frames simulated)", describe(raw["frames"]))
        return t
    if t["frame"] > frames:
        raise Invalid(join(path, "frame"), f"a frame <= {frames} (the frames simulated)", describe(raw["frame"]))
    if (t["body"] is None) == (t["cloth"] is None):
        raise Invalid(path, "exactly one of body = \"name\" or cloth = \"name\" with particle = index",
                      "both" if t["body"] is not None else "neither")
    if t["body"] is not None:
        names = [b["name"] for b in scene.bodies]
        if t["body"] not in names:
            raise Invalid(join(path, "body"), "the name of a body: " + (", ".join(names) or "(the scene has none)"),
                          describe(t["body"]))
        t["body_index"] = names.index(t["body"])
    else:
        names = [c["name"] for c in scene.cloths]
        if t["cloth"] not in names:
            raise Invalid(join(path, "cloth"), "the name of a cloth: " + (", ".join(names) or "(the scene has none)"),
                          describe(t["cloth"]))
        if t["particle"] is None:
            raise Invalid(join(path, "particle"), "a particle index within the cloth", "nothing (the key is missing)")
        t["cloth_index"] = names.index(t["cloth"])
    return t


# -- reading and writing scene values and recordings ------------------------------------------------


def raw_value(raw: dict, p: dict):
    """The value a checked ``[[optimize.parameter]]`` names in the raw TOML tables (None: unset)."""
    item = raw[p["table"]][p["index"]]
    if p["attr"].startswith("compliance."):
        return (item.get("compliance") or {}).get(p["attr"].split(".")[1])
    return item.get(p["attr"])


def set_raw_value(raw: dict, p: dict, value):
    """Set the value a checked ``[[optimize.parameter]]`` names in the raw TOML tables."""
    item = raw[p["table"]][p["index"]]
    if p["attr"].startswith("compliance."):
        item.setdefault("compliance", {})[p["attr"].split(".")[1]] = value
    else:
        item[p["attr"]] = value


def recorded_positions(t: dict, scene, path: str) -> dict[int, np.ndarray]:
    """Recorded particle positions (n, 3) by frame from an NPZ (``positions``) or a USD file."""
    file = t["path"]
    n = sum(part.count for part in scene.parts)
    out = {}
    if file.suffix == ".npz":
        with np.load(file) as data:
            if "positions" not in data:
                raise Invalid(join(path, "file"), "an NPZ holding an array 'positions' (frames + 1, particles, 3)",
                              f'"{t["file"]}" with arrays {", ".join(data.files) or "none"}')
            positions = data["positions"]
        if positions.ndim != 3 or positions.shape[1:] != (n, 3):
            raise Invalid(join(path, "file"), f"positions of shape (frames + 1, {n}, 3)",
                          f"shape {positions.shape} in \"{t['file']}\"")
        for f in t["frames"]:
            if f >= len(positions):
                raise Invalid(join(path, "frames"), f"frames < {len(positions)} (the frames recorded)",
                              describe(f))
            out[f] = positions[f].astype(np.float64)
        return out
    from pxr import Usd, UsdGeom

    stage = Usd.Stage.Open(str(file))
    if stage is None:
        raise Invalid(join(path, "file"), "an NPZ or USD file", f'"{t["file"]}", which USD cannot open')
    for f in t["frames"]:
        rows = []
        for part in scene.parts:
            prim = stage.GetPrimAtPath(f"/World/Cloth/{part.name}")
            if not prim:
                raise Invalid(join(path, "file"), f"a USD file with the mesh /World/Cloth/{part.name}",
                              f'"{t["file"]}" without it')
            pts = np.asarray(UsdGeom.Mesh(prim).GetPointsAttr().Get(Usd.TimeCode(f)), np.float64)
            if pts.shape != (part.count, 3):
                raise Invalid(join(path, "file"), f"{part.count} points for cloth {part.name}",
                              f"{len(pts)} at frame {f}")
            rows.append(pts)
        out[f] = np.concatenate(rows)
    return out


def relocate_files(raw: dict, src: Path, dst: Path):
    """Rewrite mesh file paths (relative to the scene file) to be relative to ``dst``."""
    for key, value in list(raw.items()) if isinstance(raw, dict) else enumerate(raw):
        if key == "mesh" and isinstance(value, str) and not os.path.isabs(value):
            raw[key] = os.path.relpath((src / value).resolve(), dst.resolve())
        elif isinstance(value, (dict, list)):
            relocate_files(value, src, dst)
