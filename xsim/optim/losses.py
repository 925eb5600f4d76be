"""Loss kernels for fitting rollouts: squared distances of particles or body points to targets.

Each adds into a one-element loss array (``requires_grad=True``) and is recorded on the active
Tape like any launch; the loss has the scalar type of the positions (float32 or float64).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import xsim

from .. import types as T
from ..array import array as Array


@xsim.kernel
def _points(q: xsim.array(dtype=Any), rows: xsim.array(dtype=xsim.int32), target: xsim.array(dtype=Any),
            weight: xsim.Float, loss: xsim.array(dtype=xsim.Float)):
    i = xsim.tid()
    d = q[rows[i]] - target[i]
    xsim.atomic_add(loss, 0, weight * xsim.dot(d, d))


@xsim.kernel
def _body(body_q: xsim.array(dtype=Any), body: int, point: Any, target: Any, weight: xsim.Float,
          loss: xsim.array(dtype=xsim.Float)):
    d = xsim.transform_point(body_q[body], point) - target
    xsim.atomic_add(loss, 0, weight * xsim.dot(d, d))


def new_loss(like: Array) -> Array:
    """A zero one-element loss array (with a gradient) of ``like``'s scalar type and device."""
    return xsim.zeros(1, dtype=like.dtype._scalar, device=like.device, requires_grad=True)


def add_squared_distance(loss: Array, positions: Array, target, rows=None, weight: float = 1.0):
    """``loss += weight * sum_i |positions[rows[i]] - target[i]|^2`` (m^2). ``positions``: (n,) vec3 or
    vec3d; ``target``: (k, 3) metres (numpy or xsim array); ``rows``: k particle indices (default all)."""
    f64 = positions.dtype._scalar is T.float64
    vec = xsim.vec3d if f64 else xsim.vec3
    target = target if isinstance(target, Array) else xsim.array(
        np.asarray(target, np.float64 if f64 else np.float32).reshape(-1, 3), dtype=vec, device=positions.device)
    rows = np.arange(positions.shape[0]) if rows is None else np.asarray(rows).reshape(-1)
    if len(rows) != target.shape[0]:
        raise ValueError(f"add_squared_distance: {len(rows)} particle rows but {target.shape[0]} target points")
    rows = xsim.array(rows.astype(np.int32), dtype=xsim.int32, device=positions.device)
    xsim.launch(_points, len(rows), inputs=[positions, rows, target, positions.dtype._scalar(weight)],
                outputs=[loss], device=positions.device)


def add_body_point_distance(loss: Array, body_q: Array, body: int, target, point=(0.0, 0.0, 0.0),
                            weight: float = 1.0):
    """``loss += weight * |body_q[body] applied to point - target|^2`` (m^2); ``point`` in the body frame."""
    f64 = body_q.dtype._scalar is T.float64
    vec = xsim.vec3d if f64 else xsim.vec3
    xsim.launch(_body, 1, inputs=[body_q, int(body), vec(*map(float, point)), vec(*map(float, target)),
                                  body_q.dtype._scalar(weight)],
                outputs=[loss], device=body_q.device)
