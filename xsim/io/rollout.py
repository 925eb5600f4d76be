"""Running a scene: build its model, step the XPBD solver frame by frame, keep the positions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..sim.validate import memory_bytes
from .scene import Scene, scene_error
from .schema import Invalid


@dataclass
class Rollout:
    """Particle positions of a run, ``frames`` (F + 1, n, 3) metres in the model's precision (frame 0 = initial state), body
    poses ``body_q`` (F + 1, bodies, 7): position (m) then quaternion (x, y, z, w) of each body frame,
    with the model that made them."""

    scene: Scene
    model: object
    frames: np.ndarray
    body_q: np.ndarray | None = None


def simulate(scene: Scene, frames: int | None = None, device: str | None = None,
             on_frame: Callable[[int, int], None] | None = None, model=None,
             on_compile: Callable[[int], None] | None = None,
             on_state: Callable[[int, object], None] | None = None,
             on_substep: Callable[[int, int, int], None] | None = None) -> Rollout:
    """Simulate ``frames`` frames (default ``scene.sim.frames``) of ``scene.sim.dt`` seconds each on
    ``device`` (default ``scene.sim.device``); ``on_frame(done, total)`` is called after each.
    ``model``: one finalized from ``scene.builder()`` and then edited; default: a fresh one.
    ``on_compile(n)`` is called before ``n`` kernel modules not in the cache are compiled;
    ``on_state(k, state)`` sees the State of every frame k = 0..frames (velocities too). A NaN/inf in
    the state after a frame raises ``xsim.errors.NonFiniteError`` naming the frame and the first such array.
    ``on_substep(k, done, substeps)`` is called after each substep of frame k (1-based): a frame of many
    substeps reports its progress before it ends."""
    from ..array import array as xsim_array
    from ..kernels.finite import check_arrays
    from ..sim.generic import modules_handed_out
    from ..solvers import SolverXPBD

    frames = scene.sim.frames if frames is None else frames
    if model is None:
        model = scene.builder().finalize(device=device or scene.sim.device)
    need = (frames + 1) * (model.particle_count * 3 * 4 + model.body_count * 7 * 8)
    if need > memory_bytes():
        raise scene_error(scene.path, Invalid("sim.frames", f"frames whose positions fit in memory "
                                              f"({memory_bytes() / 2**30:.0f} GiB here)",
                                              f"{frames} frames, which need {need / 2**30:,.0f} GiB"))
    with modules_handed_out() as modules:
        solver = SolverXPBD(model, substeps=scene.sim.substeps, iterations=scene.sim.iterations)
    frame = [1]  # the frame being stepped, for on_substep
    if on_substep is not None:
        solver.on_substep = lambda done, substeps: on_substep(frame[0], done, substeps)
    compile_kernels(model.device, on_compile, modules=modules)  # the kernels the solver made for its model
    state, next_state, control = model.state(), model.state(), model.control()
    positions = np.empty((frames + 1, model.particle_count, 3), dtype=state.particle_q.numpy().dtype)
    positions[0] = state.particle_q.numpy()
    poses = np.empty((frames + 1, model.body_count, 7), dtype=np.float64)
    if model.body_count:
        poses[0] = state.body_q.numpy()
    if on_state is not None:
        on_state(0, state)
    for k in range(1, frames + 1):
        frame[0] = k
        solver.step(state, next_state, control, scene.sim.dt)
        state, next_state = next_state, state
        positions[k] = state.particle_q.numpy()
        if model.body_count:
            poses[k] = state.body_q.numpy()
        check_arrays({f"state.{name}": a for name, a in vars(state).items() if isinstance(a, xsim_array)},
                     f"{scene.path}: frame {k} (t = {k * scene.sim.dt:g} s)")
        if on_state is not None:
            on_state(k, state)
        if on_frame is not None:
            on_frame(k, frames)
    return Rollout(scene, model, positions, poses)


def compile_kernels(device, on_compile: Callable[[int], None] | None = None, backward: bool = False,
                    modules: set | None = None):
    """Compile xsim's own kernel modules for ``device`` now, so that no frame's time includes a compile:
    ``modules`` (those a solver was handed when made: ``sim.generic.modules_handed_out``), else every one
    defined so far. ``on_compile(n)`` is called first when ``n`` > 0 of them are not in the kernel cache;
    ``backward``: their adjoints too, for a rollout that will be differentiated."""
    from .. import config, solvers  # noqa: F401 - importing the solvers registers their kernel modules
    from ..device import get_device
    from ..kernels.module import build_modules, pending_modules

    dev = get_device(device)
    debug = config.mode == "debug"
    pending = [m for m in pending_modules("xsim.", dev, debug, backward) if modules is None or m in modules]
    if pending and on_compile is not None:
        on_compile(len(pending))
    build_modules(pending, dev, debug, backward)


def write_rollout(usd: Path, preview: Path | None, scene: Scene, frames: np.ndarray, body_q: np.ndarray | None):
    """Write a rollout's USD file and preview (a PNG strip, or a .gif/.mp4 animation; None = none) of
    ``scene``; ``frames``: particle positions (F, n, 3) metres. Both go to temporaries, renamed over
    ``usd`` and ``preview`` only once both are complete (with any enclosing ``all_or_nothing``)."""
    from .files import ANIMATION_SUFFIXES, all_or_nothing
    from .preview import save_animation, save_preview
    from .usd import write_usd

    parts, colliders = scene.parts, scene.placed_colliders()
    with all_or_nothing():
        write_usd(usd, frames, parts, colliders, fps=scene.output.fps, bodies=scene.body_parts, body_q=body_q)
        if preview is not None and preview.suffix in ANIMATION_SUFFIXES:
            save_animation(preview, frames, parts, colliders, fps=scene.output.fps, title=scene.name,
                           bodies=scene.body_parts, body_q=body_q)
        elif preview is not None:
            save_preview(preview, frames, parts, colliders, shown=scene.output.preview_frames,
                         fps=scene.output.fps, title=scene.name, bodies=scene.body_parts, body_q=body_q)
