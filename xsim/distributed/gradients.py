"""Data-parallel gradients: one parameter vector, several scenes fitted at once, each scene's loss and
gradient computed in its own Ray task and summed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .tasks import DEFAULT_RETRIES, map_tasks


def scene_loss_and_grad(scene_file: str | Path, x: np.ndarray) -> tuple[float, np.ndarray]:
    """The loss of one scene's ``[optimize]`` table and its gradient at ``x`` (the free coordinates of
    its parameters, as ``xsim.optim.scene.scene_objective`` orders them), float64."""
    from ..io.scene import load_scene
    from ..optim.scene import scene_objective

    return scene_objective(load_scene(scene_file))(np.asarray(x, np.float64))


def summed_loss_and_grad(scene_files: Sequence[str | Path], x: np.ndarray, *, distributed: bool = True,
                         address: str | None = None, workers: int | None = None,
                         max_retries: int = DEFAULT_RETRIES) -> tuple[float, np.ndarray]:
    """Sum over ``scene_files`` of :func:`scene_loss_and_grad` at ``x``: each scene in its own Ray task
    (``distributed``), or one after another here. The terms are added in the files' order either way,
    so both give the same numbers. The scene files (and their recordings) must be readable on every node."""
    x = np.asarray(x, np.float64)
    args = [(str(f), x) for f in scene_files]
    if distributed:
        terms = dict(map_tasks(scene_loss_and_grad, args, address=address, workers=workers,
                               max_retries=max_retries))
    else:
        terms = {i: scene_loss_and_grad(*a) for i, a in enumerate(args)}
    loss, grad = 0.0, np.zeros_like(x)
    for i in range(len(args)):
        loss, grad = loss + terms[i][0], grad + terms[i][1]
    return loss, grad
