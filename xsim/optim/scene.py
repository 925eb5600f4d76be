"""The run behind ``xsim optimize SCENE.toml``: fit a scene's ``[optimize]`` parameters.

A parameter is a scene key path; the model entries it sets are found by building the scene twice
with two values of the key and keeping the entries that moved (each is then ``scale * value``,
checked to be linear), so the mapping follows the builder whatever it does with the value (area
factors for bending, pinned particles left at rest). The rollout runs in float64 on a Tape; the
fitted values are written back into a copy of the scene.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..io.optimize import OptimizeSettings, raw_value, recorded_positions, relocate_files, set_raw_value
from ..io.schema import Invalid, describe, join
from .losses import add_body_point_distance, add_squared_distance, new_loss
from .objective import Objective, Parameter, minimize
from .updates import SGD, Adam


@dataclass
class OptimizeResult:
    """What ``run_optimize`` found and wrote."""

    values: dict[str, Any]       # key path -> fitted value (float or tuple of 3)
    losses: list[float]          # loss per iteration, first = at the scene's own values
    scene_file: Path             # the fitted scene (TOML)
    loss_curve: Path             # PNG
    usd: Path                    # the fitted scene's rollout


def _model_array(model, state, p: dict):
    """(array, columns) the key path's value lands in: a Model array or the initial State's."""
    if p["table"] == "soft":
        return (model.tet_youngs_modulus if p["attr"] == "youngs_modulus" else model.tet_poisson_ratio), None
    if p["attr"] == "compliance.bend":
        return model.bending_compliance, None
    if p["attr"].startswith("compliance."):
        return model.spring_compliance, None
    if p["table"] == "cloth":
        return state.particle_qd, None
    return state.body_qd, slice(0, 3) if p["attr"] == "velocity" else slice(3, 6)


def _probe(scene_path: Path, raw: dict, p: dict, value) -> np.ndarray:
    """The entries of the key path's array in a model built with the key set to ``value``."""
    from ..io.scene import _check_scene

    probe_raw = copy.deepcopy(raw)
    probe_raw.pop("optimize")
    set_raw_value(probe_raw, p, value)
    scene = _check_scene(probe_raw, scene_path)
    import xsim

    model = scene.builder().finalize(device="cpu", dtype=xsim.float64)
    arr, columns = _model_array(model, model.state(), p)
    host = np.asarray(arr.numpy(), np.float64).reshape(arr.shape[0], -1)
    return host if columns is None else host[:, columns]


def make_parameter(scene, raw: dict, p: dict, model, state, path: str):
    """The ``xsim.optim.Parameter`` of one ``[[optimize.parameter]]``: the entries of its array that
    move with the key, each ``scale * value`` (checked linear)."""
    arr, columns = _model_array(model, state, p)
    if p["vector"]:
        a, b = _probe(scene.path, raw, p, [0.0, 0.0, 0.0]), _probe(scene.path, raw, p, [1.0, 2.0, 3.0])
        rows = np.flatnonzero(np.any(a != b, axis=1))
        if len(rows) == 0 or not np.allclose(b[rows] - a[rows], [1.0, 2.0, 3.0]):
            raise Invalid(join(path, "key"), "a value that sets model entries directly", describe(p["key"]))
        scale = None
        shared = True
    else:
        # probed at two values the key allows (a Poisson's ratio is below 0.5), the entries must double
        low = 0.1 if p["attr"] == "poisson_ratio" else 1.0
        a, b = _probe(scene.path, raw, p, low)[:, 0] / low, _probe(scene.path, raw, p, 2.0 * low)[:, 0] / low
        rows = np.flatnonzero(a != b)
        if len(rows) == 0:
            raise Invalid(join(path, "key"), "a value that some model entry depends on", describe(p["key"]))
        if not np.allclose(b[rows], 2.0 * a[rows], rtol=1e-12, atol=0.0):
            raise Invalid(join(path, "key"), "a value the model entries are proportional to", describe(p["key"]))
        scale, shared = a[rows], True
    lo, hi = p["bounds"] if p["bounds"] is not None else (None, None)
    current = raw_value(raw, p)
    if p["log"] and not (current is not None and current > 0):
        raise Invalid(join(path, "log"), f"a positive starting value of {p['key']} for log space (set it in the "
                      "scene)", f"{p['key']} = {current if current is not None else 'its default'}")
    return Parameter(arr, index=rows, shared=shared, log=p["log"], bounds=(lo, hi), scale=scale, name=p["key"],
                     columns=columns)


def _loss_terms(settings: OptimizeSettings, scene, model, file: Path):
    """(frame, function adding its loss given the state at that frame) per target, and the point count."""
    from ..io.scene import scene_error

    terms: list[tuple[int, Callable]] = []
    points = 0
    for i, t in enumerate(settings.targets):
        path = join("optimize.target", i)
        try:
            if t["type"] == "recorded":
                for f, pos in recorded_positions(t, scene, path).items():
                    terms.append((f, lambda loss, s, w, pos=pos, tw=t["weight"]: add_squared_distance(
                        loss, s.particle_q, pos, weight=w * tw)))
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


def scene_objective(scene, on_compile: Callable[[int], None] | None = None) -> Objective:
    """The ``Objective`` of a scene's ``[optimize]`` table: ``objective(x) -> (loss, gradient)`` over its
    parameters' free coordinates (log where ``log = true``), each call a float64 rollout on a Tape."""
    import xsim

    from ..io.rollout import compile_kernels
    from ..io.scene import scene_error
    from ..sim.generic import modules_handed_out
    from ..solvers import SolverXPBD

    settings: OptimizeSettings = scene.optimize
    raw = tomllib.loads(scene.path.read_text(encoding="utf-8"))
    model = scene.builder().finalize(device=scene.sim.device, dtype=xsim.float64, requires_grad=True)
    with modules_handed_out() as modules:
        solver = SolverXPBD(model, substeps=scene.sim.substeps, iterations=scene.sim.iterations)
    compile_kernels(model.device, on_compile, backward=True, modules=modules)
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

    return Objective(rollout, params)


def run_optimize(scene, on_iteration: Callable[[int, int, float], None] | None = None,
                 on_compile: Callable[[int], None] | None = None, usd: Path | None = None,
                 preview: Path | None = None) -> OptimizeResult:
    """Fit the scene's ``[optimize]`` parameters; write the fitted scene (TOML), the loss curve (PNG)
    into ``[optimize].output``, and the fitted scene's rollout to ``usd`` (default
    ``[optimize].output/<scene>_fitted.usda``) and ``preview`` (None: none). Every file is written
    to a temporary first and renamed only once all are complete. ``on_iteration(done, total, loss)``."""
    import tomli_w

    from ..io.files import all_or_nothing, write_atomically
    from ..io.preview import save_loss_curve
    from ..io.rollout import simulate, write_rollout
    from ..io.scene import scene_from_raw

    settings: OptimizeSettings = scene.optimize
    raw = tomllib.loads(scene.path.read_text(encoding="utf-8"))
    frames = settings.frames or scene.sim.frames
    objective = scene_objective(scene, on_compile)
    params = objective.params
    losses = _fit(objective, settings, on_iteration)

    fitted = copy.deepcopy(raw)
    fitted.pop("optimize")
    values = {}
    for p, param in zip(settings.parameters, params):
        v = param.value()
        value = [float(c) for c in v] if p["vector"] else float(v[0])
        values[p["key"]] = value
        set_raw_value(fitted, p, value)
    out_dir = settings.output
    usd = Path(usd) if usd is not None else out_dir / f"{scene.name}_fitted.usda"
    relocate_files(fitted, scene.path.parent, out_dir)
    scene_file = out_dir / f"{scene.name}_fitted.toml"
    fitted.setdefault("output", {})["usd"] = str(usd)
    fitted["output"]["preview"] = str(preview) if preview is not None else str(out_dir / f"{scene.name}_fitted.png")
    text = (f"# {scene.path.name} fitted by `xsim optimize`: "
            + ", ".join(f"{k} = {_fmt(v)}" for k, v in values.items()) + "\n" + tomli_w.dumps(fitted))
    fitted_scene = scene_from_raw(tomllib.loads(text), scene_file)
    run = simulate(fitted_scene, frames=frames)
    with all_or_nothing():
        write_atomically(scene_file, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        curve = save_loss_curve(losses, out_dir / f"{scene.name}_loss.png", f"{scene.name}: xsim optimize")
        write_rollout(usd, preview, fitted_scene, run.frames, run.body_q)
    return OptimizeResult(values, losses, scene_file, curve, usd)


def _fmt(v) -> str:
    return f"[{', '.join(f'{c:.6g}' for c in v)}]" if isinstance(v, list) else f"{v:.6g}"


def _fit(objective, settings: OptimizeSettings, on_iteration) -> list[float]:
    """Run the chosen optimizer; returns the loss per iteration (first = at the start)."""
    import xsim

    n = settings.iterations
    if settings.optimizer == "lbfgs":
        # The losses are squared distances in m^2, often far below 1: stop on the relative decrease
        # (``tolerance``), never on an absolute gradient size.
        result = minimize(objective, maxiter=n, options={"ftol": settings.tolerance, "gtol": 0.0},
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
