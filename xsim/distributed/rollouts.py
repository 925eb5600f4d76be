"""Rollouts as Ray tasks: a scene file (or a Python builder function) plus parameter overrides in,
the rollout's metrics (and optionally its frames) out."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .metrics import RolloutMetrics
from .tasks import DEFAULT_RETRIES, map_tasks


@dataclass
class RolloutResult:
    """One finished rollout: its position in the list of parameter sets, the overrides it ran with,
    :data:`~xsim.distributed.METRICS` by name, seconds spent building and simulating (``wall_time``,
    in the worker, compiles excluded), how many kernel modules the task had to compile (0 when the
    node's kernel cache had them) and where it ran. With ``keep_frames``: particle positions
    ``frames`` (F + 1, n, 3) m, body poses ``body_q`` (F + 1, bodies, 7), and the scene's cloth and
    body parts, for writing USD."""

    index: int
    params: dict[str, Any]
    metrics: dict[str, float]
    wall_time: float
    compiled: int = 0
    host: str = ""
    pid: int = 0
    frames: np.ndarray | None = None
    body_q: np.ndarray | None = None
    parts: list = field(default_factory=list)
    body_parts: list = field(default_factory=list)


def _builder_scene(fn: Callable, sim: Mapping[str, Any] | None):
    """A Scene holding only ``[sim]`` settings, for rolling out a model made by a builder function."""
    from ..errors import SceneError
    from ..io.scene import SIM_KEYS, OutputSettings, Scene, SimSettings
    from ..io.schema import Invalid, check_table

    name = getattr(fn, "__qualname__", type(fn).__name__)
    try:
        settings = SimSettings(**check_table(dict(sim or {}), "sim", SIM_KEYS, "a table of [sim] settings"))
    except Invalid as e:
        raise SceneError(f"map_rollouts(sim=...): {e}") from None
    output = OutputSettings(usd=Path(f"out/{name}.usda"), fps=1.0 / settings.dt, preview=None, preview_frames=4)
    return Scene(path=Path(f"<{name}>"), name=name, sim=settings, output=output)


def run_rollout(source, params: Mapping[str, Any] | None = None, *, sim: Mapping[str, Any] | None = None,
                frames: int | None = None, keep_frames: bool = False, index: int = 0) -> RolloutResult:
    """Build and simulate one rollout here (what a Ray task runs). ``source``: a checked ``Scene``
    (its overrides already applied), a scene file path (``params`` are then key-path overrides), or a
    function ``fn(**params)`` returning a ``ModelBuilder`` or a finalized ``Model`` (``sim``: its
    ``[sim]`` settings: dt, substeps, iterations, frames, device)."""
    from ..io.rollout import simulate
    from ..io.scene import Scene, load_scene

    params = dict(params or {})
    compiled = []
    t0 = time.perf_counter()
    if isinstance(source, Scene):
        scene, model = source, None
    elif isinstance(source, (str, Path)):
        scene, model = load_scene(source, params), None
    elif callable(source):
        scene = _builder_scene(source, sim)
        made = source(**params)
        model = made.finalize(device=scene.sim.device) if hasattr(made, "finalize") else made
    else:
        raise TypeError(f"run_rollout: source must be a Scene, a scene file path or a builder function, "
                        f"got {type(source).__name__}")
    if model is None:
        model = scene.builder().finalize(device=scene.sim.device)
    metrics = RolloutMetrics(model)
    marks: dict[str, float] = {}

    def on_compile(n: int):
        compiled.append(n)
        marks["compile"] = time.perf_counter()

    def on_state(k: int, state):
        if k == 0:
            marks["first"] = time.perf_counter()
        metrics(k, state)

    rollout = simulate(scene, frames=frames, model=model, on_state=on_state, on_compile=on_compile)
    seconds = time.perf_counter() - t0
    if compiled:  # simulate() compiles between on_compile and the first State: the cache's time, not the run's
        seconds -= marks["first"] - marks["compile"]
    result = RolloutResult(index, params, metrics.values(), seconds, sum(compiled),
                           socket.gethostname(), os.getpid())
    if keep_frames:
        result.frames, result.body_q = rollout.frames, rollout.body_q if model.body_count else None
        result.parts, result.body_parts = scene.parts, scene.body_parts
    return result


def rollout_jobs(source, param_sets: Iterable[Mapping[str, Any]], sim: Mapping[str, Any] | None = None) -> list:
    """``(source, params)`` per parameter set, checked here: for a scene file, the loaded ``Scene`` with
    the overrides applied (a bad key raises ``xsim.SceneError``); for a builder function, itself."""
    param_sets = [dict(p) for p in param_sets]
    if isinstance(source, (str, Path)):
        from ..io.scene import load_scene

        return [(load_scene(source, p), p) for p in param_sets]
    if callable(source):
        _builder_scene(source, sim)  # bad settings fail here, not in every task
        return [(source, p) for p in param_sets]
    raise TypeError(f"map_rollouts: source must be a scene file path or a builder function, got "
                    f"{type(source).__name__}")


def map_rollouts(source, param_sets: Iterable[Mapping[str, Any]], *, sim: Mapping[str, Any] | None = None,
                 frames: int | None = None, keep_frames: bool = False, address: str | None = None,
                 workers: int | None = None, max_retries: int = DEFAULT_RETRIES) -> Iterator[RolloutResult]:
    """Run one rollout per parameter set on Ray and yield each :class:`RolloutResult` as it finishes
    (``result.index`` says which set). ``source``: a scene file (every set is applied and checked
    here first, so a bad key raises ``xsim.SceneError`` before any task starts) or a builder function
    ``fn(**params)`` returning a ``ModelBuilder`` or ``Model``, with ``sim`` settings. ``address``/``workers``: see
    :func:`xsim.distributed.connect`."""
    yield from map_jobs(rollout_jobs(source, param_sets, sim), sim=sim, frames=frames, keep_frames=keep_frames,
                        address=address, workers=workers, max_retries=max_retries)


def map_jobs(jobs: list, *, sim: Mapping[str, Any] | None = None, frames: int | None = None,
             keep_frames: bool = False, address: str | None = None, workers: int | None = None,
             max_retries: int = DEFAULT_RETRIES) -> Iterator[RolloutResult]:
    """:func:`map_rollouts` over jobs made by :func:`rollout_jobs`."""
    args = ((src, p, sim, frames, keep_frames, i) for i, (src, p) in enumerate(jobs))
    for _, result in map_tasks(_rollout_task, args, address=address, workers=workers, max_retries=max_retries):
        yield result


def _rollout_task(source, params, sim, frames, keep_frames, index) -> RolloutResult:
    result = run_rollout(source, params if callable(source) else None, sim=sim, frames=frames,
                         keep_frames=keep_frames, index=index)
    result.params = dict(params)
    return result
