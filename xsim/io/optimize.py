"""``[optimize]`` in a scene file: which scene values to fit, to what, and how; and the run behind
``xsim optimize SCENE.toml``.

A parameter is a scene key path (``cloth[0].compliance.stretch``, ``body[1].velocity``); the model
entries it sets are found by building the scene twice with two values of the key and keeping the
entries that moved (each is then ``scale * value``, checked to be linear), so the mapping follows the
builder whatever it does with the value (area factors for bending, pinned particles left at rest).
Targets are recorded particle positions (an NPZ with ``positions`` (F+1, n, 3), or a USD file this
project wrote) at chosen frames, or a point that a named particle or body should reach at a frame.
The rollout runs in float64 on a Tape; the fitted values are written back into a copy of the scene.
"""

from __future__ import annotations

import copy
import os
import re
import tomllib
from collections.abc import Callable
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

_PARAMETER = re.compile(r"(cloth|body)\[(\d+)\]\.(compliance\.(?:stretch|shear|bend)|velocity|angular_velocity)")
PARAMETER_PATHS = ("cloth[N].compliance.stretch", "cloth[N].compliance.shear", "cloth[N].compliance.bend",
                   "cloth[N].velocity", "body[N].velocity", "body[N].angular_velocity")


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
                            spec["learning_rate"], spec["momentum"], spec["clip_norm"], spec["loss"], spec["frames"],
                            Path(spec["output"]))


def _check_parameter_key(p: dict, path: str, scene):
    m = _PARAMETER.fullmatch(p["key"])
    if m is None:
        raise Invalid(path, "one of " + ", ".join(PARAMETER_PATHS), describe(p["key"]))
    table_name, index, attr = m.group(1), int(m.group(2)), m.group(3)
    items = scene.cloths if table_name == "cloth" else scene.bodies
    if index >= len(items):
        raise Invalid(path, f"an existing {table_name} (the scene has {len(items)} [[{table_name}]] tables)",
                      describe(p["key"]))
    if attr == "compliance.shear" and items[index]["mesh"] is not None:
        raise Invalid(path, "no shear compliance on a mesh cloth (grids only)", describe(p["key"]))
    if table_name == "body" and items[index]["mass"] == 0.0:
        raise Invalid(path, "a dynamic body (this one has mass 0: kinematic)", describe(p["key"]))
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


# -- the run -----------------------------------------------------------------------------------------


@dataclass
class OptimizeResult:
    """What ``run_optimize`` found and wrote."""

    values: dict[str, Any]       # key path -> fitted value (float or tuple of 3)
    losses: list[float]          # loss per iteration, first = at the scene's own values
    scene_file: Path             # the fitted scene (TOML)
    loss_curve: Path             # PNG
    usd: Path                    # the fitted scene's rollout


def _raw_value(raw: dict, p: dict):
    item = raw[p["table"]][p["index"]]
    if p["attr"].startswith("compliance."):
        return (item.get("compliance") or {}).get(p["attr"].split(".")[1])
    return item.get(p["attr"])


def _set_raw(raw: dict, p: dict, value):
    item = raw[p["table"]][p["index"]]
    if p["attr"].startswith("compliance."):
        item.setdefault("compliance", {})[p["attr"].split(".")[1]] = value
    else:
        item[p["attr"]] = value


def _model_array(model, state, p: dict):
    """(array, columns) the key path's value lands in: a Model array or the initial State's."""
    if p["attr"] == "compliance.bend":
        return model.bending_compliance, None
    if p["attr"].startswith("compliance."):
        return model.spring_compliance, None
    if p["table"] == "cloth":
        return state.particle_qd, None
    return state.body_qd, slice(0, 3) if p["attr"] == "velocity" else slice(3, 6)


def _probe(scene_path: Path, raw: dict, p: dict, value) -> np.ndarray:
    """The entries of the key path's array in a model built with the key set to ``value``."""
    from .scene import _check_scene

    probe_raw = copy.deepcopy(raw)
    probe_raw.pop("optimize")
    _set_raw(probe_raw, p, value)
    scene = _check_scene(probe_raw, scene_path)
    import xsim

    model = scene.builder().finalize(device="cpu", dtype=xsim.float64)
    arr, columns = _model_array(model, model.state(), p)
    host = np.asarray(arr.numpy(), np.float64).reshape(arr.shape[0], -1)
    return host if columns is None else host[:, columns]


def make_parameter(scene, raw: dict, p: dict, model, state, path: str):
    """The ``xsim.optim.Parameter`` of one ``[[optimize.parameter]]``: the entries of its array that
    move with the key, each ``scale * value`` (checked linear)."""
    from ..optim import Parameter

    arr, columns = _model_array(model, state, p)
    if p["vector"]:
        a, b = _probe(scene.path, raw, p, [0.0, 0.0, 0.0]), _probe(scene.path, raw, p, [1.0, 2.0, 3.0])
        rows = np.flatnonzero(np.any(a != b, axis=1))
        if len(rows) == 0 or not np.allclose(b[rows] - a[rows], [1.0, 2.0, 3.0]):
            raise Invalid(join(path, "key"), "a value that sets model entries directly", describe(p["key"]))
        scale = None
        shared = True
    else:
        a, b = _probe(scene.path, raw, p, 1.0)[:, 0], _probe(scene.path, raw, p, 2.0)[:, 0]
        rows = np.flatnonzero(a != b)
        if len(rows) == 0:
            raise Invalid(join(path, "key"), "a value that some model entry depends on", describe(p["key"]))
        if not np.allclose(b[rows], 2.0 * a[rows], rtol=1e-12, atol=0.0):
            raise Invalid(join(path, "key"), "a value the model entries are proportional to", describe(p["key"]))
        scale, shared = a[rows], True
    lo, hi = p["bounds"] if p["bounds"] is not None else (None, None)
    return Parameter(arr, index=rows, shared=shared, log=p["log"], bounds=(lo, hi), scale=scale, name=p["key"],
                     columns=columns)


def _recorded_positions(t: dict, scene, path: str) -> dict[int, np.ndarray]:
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


def _loss_terms(settings: OptimizeSettings, scene, model, file: Path):
    """(frame, function adding its loss given the state at that frame) per target, and the point count."""
    from ..optim import add_body_point_distance, add_squared_distance
    from .scene import scene_error

    terms: list[tuple[int, Callable]] = []
    points = 0
    for i, t in enumerate(settings.targets):
        path = join("optimize.target", i)
        try:
            if t["type"] == "recorded":
                for f, pos in _recorded_positions(t, scene, path).items():
                    terms.append((f, lambda loss, s, w, pos=pos: add_squared_distance(loss, s.particle_q, pos,
                                                                                      weight=w * t["weight"])))
                    points += len(pos)
            elif t.get("body_index") is not None:
                b = scene.body_parts[t["body_index"]].index
                terms.append((t["frame"], lambda loss, s, w, t=t, b=b: add_body_point_distance(
                    loss, s.body_q, b, t["position"], t["point"], weight=w * t["weight"])))
                points += 1
            else:
                part = scene.parts[t["cloth_index"]]
                if t["particle"] >= part.count:
                    raise Invalid(join(path, "particle"), f"a particle index < {part.count} (the cloth's particles)",
                                  describe(t["particle"]))
                row = part.first + t["particle"]
                terms.append((t["frame"], lambda loss, s, w, t=t, row=row: add_squared_distance(
                    loss, s.particle_q, [t["position"]], rows=[row], weight=w * t["weight"])))
                points += 1
        except Invalid as e:
            raise scene_error(file, e) from None
    return terms, points


def run_optimize(scene, on_iteration: Callable[[int, int, float], None] | None = None,
                 on_compile: Callable[[int], None] | None = None) -> OptimizeResult:
    """Fit the scene's ``[optimize]`` parameters; write the fitted scene (TOML), the loss curve (PNG)
    and the fitted scene's rollout (USD) into ``[optimize].output``. ``on_iteration(done, total, loss)``."""
    import tomli_w

    import xsim

    from ..optim import SGD, Adam, Objective, minimize, new_loss
    from ..solvers import SolverXPBD
    from .preview import save_loss_curve
    from .rollout import compile_kernels, simulate
    from .scene import load_scene, scene_error
    from .usd import write_usd

    settings: OptimizeSettings = scene.optimize
    raw = tomllib.loads(scene.path.read_text(encoding="utf-8"))
    frames = settings.frames or scene.sim.frames
    model = scene.builder().finalize(device=scene.sim.device, dtype=xsim.float64, requires_grad=True)
    solver = SolverXPBD(model, substeps=scene.sim.substeps, iterations=scene.sim.iterations)
    compile_kernels(model.device, on_compile)
    state0 = model.state()
    params = []
    for i, p in enumerate(settings.parameters):
        try:
            params.append(make_parameter(scene, raw, p, model, state0, join("optimize.parameter", i)))
        except Invalid as e:
            raise scene_error(scene.path, e) from None
    terms, points = _loss_terms(settings, scene, model, scene.path)
    weight = 1.0 / points if settings.loss == "mean" else 1.0
    control = model.control()
    last = max(f for f, _ in terms)

    def rollout():
        states = [state0]
        loss = new_loss(state0.particle_q if model.particle_count else state0.body_q)
        for k in range(1, last + 1):
            states.append(model.state())
            solver.step(states[k - 1], states[k], control, scene.sim.dt)
        for f, add in terms:
            add(loss, states[f], weight)
        return loss

    objective = Objective(rollout, params)
    losses = _fit(objective, settings, on_iteration, Adam, SGD, minimize)

    fitted = copy.deepcopy(raw)
    fitted.pop("optimize")
    values = {}
    for p, param in zip(settings.parameters, params):
        v = param.value()
        value = [float(c) for c in v] if p["vector"] else float(v[0])
        values[p["key"]] = value
        _set_raw(fitted, p, value)
    out_dir = settings.output
    out_dir.mkdir(parents=True, exist_ok=True)
    _relocate_files(fitted, scene.path.parent, out_dir)
    scene_file = out_dir / f"{scene.name}_fitted.toml"
    fitted.setdefault("output", {})["usd"] = str(out_dir / f"{scene.name}_fitted.usda")
    fitted["output"]["preview"] = str(out_dir / f"{scene.name}_fitted.png")
    tmp = scene_file.with_name(f".{scene_file.name}.{os.getpid()}.tmp")
    tmp.write_text(f"# {scene.path.name} fitted by `xsim optimize`: "
                   + ", ".join(f"{k} = {_fmt(v)}" for k, v in values.items()) + "\n" + tomli_w.dumps(fitted),
                   encoding="utf-8")
    os.replace(tmp, scene_file)
    curve = save_loss_curve(losses, out_dir / f"{scene.name}_loss.png", f"{scene.name}: xsim optimize")
    fitted_scene = load_scene(scene_file)
    run = simulate(fitted_scene, frames=frames)
    usd = write_usd(fitted_scene.output.usd, run.frames, fitted_scene.parts, fitted_scene.colliders,
                    fps=fitted_scene.output.fps, bodies=fitted_scene.body_parts, body_q=run.body_q)
    return OptimizeResult(values, losses, scene_file, curve, usd)


def _fmt(v) -> str:
    return f"[{', '.join(f'{c:.6g}' for c in v)}]" if isinstance(v, list) else f"{v:.6g}"


def _fit(objective, settings: OptimizeSettings, on_iteration, Adam, SGD, minimize) -> list[float]:
    """Run the chosen optimizer; returns the loss per iteration (first = at the start)."""
    import xsim

    n = settings.iterations
    if settings.optimizer == "lbfgs":
        result = minimize(objective, maxiter=n,
                          callback=lambda it, x, f: on_iteration(min(it, n), n, f) if on_iteration else None)
        if on_iteration:
            on_iteration(n, n, result.losses[-1])
        return result.losses
    x = xsim.array(objective.x0(), dtype=xsim.float64, requires_grad=True)
    lo, hi = zip(*objective.bounds())
    bounds = (np.array(lo), np.array(hi))
    opt = (Adam([x], lr=settings.learning_rate, clip_norm=settings.clip_norm, bounds=bounds)
           if settings.optimizer == "adam" else
           SGD([x], lr=settings.learning_rate, momentum=settings.momentum, clip_norm=settings.clip_norm,
               bounds=bounds))
    losses = []
    for it in range(n):
        loss, grad = objective(x.numpy())
        losses.append(loss)
        x.grad[:] = grad
        opt.step()
        if on_iteration:
            on_iteration(it + 1, n, loss)
    losses.append(objective(x.numpy())[0])
    objective.set(x.numpy())
    return losses


def _relocate_files(raw: dict, src: Path, dst: Path):
    """Rewrite mesh file paths (relative to the scene file) to be relative to ``dst``."""
    for key, value in list(raw.items()) if isinstance(raw, dict) else enumerate(raw):
        if key == "mesh" and isinstance(value, str) and not os.path.isabs(value):
            raw[key] = os.path.relpath((src / value).resolve(), dst.resolve())
        elif isinstance(value, (dict, list)):
            _relocate_files(value, src, dst)
