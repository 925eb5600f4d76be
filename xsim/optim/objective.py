"""Objectives over chosen parameters: from a function that simulates and returns a loss, get
``(loss, gradient)`` for a flat vector of free parameters, and minimize it with scipy.

A :class:`Parameter` picks values out of an xsim array (a whole Model/State/Control array, some
elements of its first axis, or one value shared by many elements) and says how they are
optimized (log space, box bounds). :class:`Objective` writes a vector ``x`` into those arrays,
runs the simulation on a Tape (or lets the function run ``checkpointed_rollout`` itself),
backpropagates and gathers the gradient with respect to ``x`` (a shared value's gradient is the
sum over its elements, chained through the log transform).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import types as T
from ..array import array as Array
from ..autodiff import RolloutResult, Tape


class Parameter:
    """Values of ``array`` to optimize.

    - ``index``: None (the whole array), an int, a slice or a sequence of ints along the first axis.
    - ``columns``: which scalars of each element (flattened components), e.g. ``slice(0, 3)`` for the
      linear part of a ``body_qd`` spatial vector; default all.
    - ``shared``: one value (one per component for vector elements) written to every selected
      element, times ``scale`` (per element, default 1); its gradient is the sum over them.
    - ``log``: optimize log(value) (values must stay > 0; compliances and stiffnesses span decades).
    - ``bounds``: (lower, upper) on the value, in the array's units; None for no bound.
    - ``name``: how reports and errors call it.
    """

    def __init__(self, array: Array, index=None, shared: bool = False, log: bool = False,
                 bounds: tuple[float | None, float | None] | None = None, scale=None, name: str | None = None,
                 columns=None):
        if not isinstance(array, Array):
            raise TypeError(f"Parameter: expected an xsim array, got {type(array).__name__}")
        if T.is_struct(array.dtype) or getattr(array.dtype, "_scalar", None) not in (T.float32, T.float64):
            raise TypeError(f"Parameter {name or ''}: the array must hold float32 or float64 values, got "
                            f"{T.type_name(array.dtype)}")
        self.array, self.shared, self.log, self.name = array, bool(shared), bool(log), name or "parameter"
        self.rows = np.arange(array.shape[0])[index if index is not None else slice(None)].reshape(-1)
        if len(self.rows) == 0:
            raise ValueError(f"Parameter {self.name}: index {index!r} selects no element of an array of "
                             f"shape {array.shape}")
        width = math.prod(array.shape[1:]) * math.prod(array.dtype._shape)
        self.columns = np.arange(width)[columns if columns is not None else slice(None)].reshape(-1)
        if len(self.columns) == 0:
            raise ValueError(f"Parameter {self.name}: columns {columns!r} select no component of elements of "
                             f"{width} scalars")
        self.width, self.components = width, len(self.columns)
        self.scale = np.ones(len(self.rows)) if scale is None else np.broadcast_to(
            np.asarray(scale, np.float64), (len(self.rows),)).copy()
        if scale is not None and not self.shared:
            raise ValueError(f"Parameter {self.name}: scale only applies to a shared value (shared=True)")
        lo, hi = bounds if bounds is not None else (None, None)
        self.lower = (0.0 if self.log else -np.inf) if lo is None else float(lo)
        self.upper = np.inf if hi is None else float(hi)
        if self.lower >= self.upper:
            raise ValueError(f"Parameter {self.name}: bounds ({lo}, {hi}) leave no room (lower >= upper)")
        if self.log and (self.lower < 0 or np.any(self.scale <= 0)):
            raise ValueError(f"Parameter {self.name}: a log-space parameter needs positive values (lower bound >= 0 "
                             "and scale > 0)")
        if array.grad is None:
            array.requires_grad = True

    @property
    def size(self) -> int:
        """How many free numbers this parameter adds to ``x``."""
        return self.components if self.shared else len(self.rows) * self.components

    def value(self) -> np.ndarray:
        """The current values (float64, flat): the shared value is the first element's over its scale."""
        host = self._host()
        if self.shared:
            return host[0] / self.scale[0]
        return host.reshape(-1)

    def _host(self) -> np.ndarray:
        return self._pick(self.array.numpy())

    def _pick(self, host: np.ndarray) -> np.ndarray:
        """The selected rows and columns of ``host`` (the array's numpy view) as (rows, components)."""
        return np.asarray(host[self.rows], np.float64).reshape(len(self.rows), self.width)[:, self.columns]

    def set_value(self, value: np.ndarray):
        """Write ``value`` (flat, as :meth:`value` returns) into the array."""
        value = np.asarray(value, np.float64)
        rows = (self.scale[:, None] * value[None, :] if self.shared else value.reshape(len(self.rows), -1))
        host = np.array(self.array.numpy())
        picked = host[self.rows].reshape(len(self.rows), self.width)
        picked[:, self.columns] = rows
        host[self.rows] = picked.reshape((len(self.rows),) + host.shape[1:])
        self.array[:] = host

    def gradient(self) -> np.ndarray:
        """d loss / d value (flat), from the array's ``.grad``."""
        g = self._pick(self.array.grad.numpy())
        return (self.scale[:, None] * g).sum(axis=0) if self.shared else g.reshape(-1)

    def to_free(self, value):
        return np.log(value) if self.log else np.asarray(value, np.float64)

    def from_free(self, x):
        return np.exp(x) if self.log else np.asarray(x, np.float64)

    def free_bounds(self) -> tuple[float, float]:
        """(lower, upper) in the free coordinate (log of the bounds in log space; 0 maps to -inf)."""
        if not self.log:
            return self.lower, self.upper
        return (math.log(self.lower) if self.lower > 0 else -math.inf,
                math.log(self.upper) if math.isfinite(self.upper) else math.inf)


LossFn = Callable[[], "Array | RolloutResult"]


@dataclass
class Objective:
    """``objective(x) -> (loss, gradient)`` over the free vector ``x`` of ``params`` (concatenated).

    ``simulate()`` builds the rollout from the parameter arrays and returns either a one-element
    loss array (its launches are recorded on a Tape here and backpropagated), or the
    ``RolloutResult`` of ``checkpointed_rollout`` (which has run its own backward pass).
    ``history`` keeps every evaluated loss."""

    simulate: LossFn
    params: Sequence[Parameter]
    history: list[float] = field(default_factory=list)

    def __post_init__(self):
        if isinstance(self.params, Parameter):
            self.params = [self.params]
        if not self.params:
            raise ValueError("Objective: no parameters given")
        self.params = list(self.params)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.params)

    def x0(self) -> np.ndarray:
        """The free vector of the parameters' current values."""
        return np.concatenate([p.to_free(p.value()) for p in self.params])

    def bounds(self) -> list[tuple[float, float]]:
        """(lower, upper) of every entry of ``x`` (free coordinates; +-inf where unbounded)."""
        return [p.free_bounds() for p in self.params for _ in range(p.size)]

    def set(self, x: np.ndarray):
        """Write the free vector ``x`` into the parameter arrays."""
        x = np.asarray(x, np.float64).reshape(-1)
        if len(x) != self.size:
            raise ValueError(f"Objective: x has {len(x)} entries, the parameters take {self.size}")
        at = 0
        for p in self.params:
            p.set_value(p.from_free(x[at:at + p.size]))
            at += p.size

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and its gradient with respect to ``x`` (float64)."""
        self.set(x)
        for p in self.params:
            p.array.grad.zero_untracked()
        tape = Tape()
        with tape:
            out = self.simulate()
        if isinstance(out, RolloutResult):
            loss = out.loss
        elif isinstance(out, Array) and out.size == 1:
            tape.backward(out)
            loss = float(out.numpy().reshape(-1)[0])
        else:
            raise TypeError("Objective: simulate() must return a one-element loss array or a RolloutResult, got "
                            f"{type(out).__name__}")
        grads = []
        at = 0
        for p in self.params:
            g = p.gradient()
            if p.log:
                g = g * p.from_free(np.asarray(x, np.float64)[at:at + p.size])
            grads.append(g)
            at += p.size
        tape.reset()  # after reading the gradients: reset zeroes them
        self.history.append(loss)
        return loss, np.concatenate(grads)


def minimize(objective, params: Sequence[Parameter] | None = None, method: str = "L-BFGS-B",
             x0: np.ndarray | None = None, maxiter: int = 50, tol: float | None = None, callback=None, options=None,
             bounds=None):
    """Minimize with ``scipy.optimize.minimize(jac=True)``.

    ``objective``: an :class:`Objective`; or ``simulate`` with ``params`` (an Objective is made);
    or, with ``params`` None, any function ``f(x) -> (loss, gradient)`` started from ``x0``. The
    parameters' bounds (or ``bounds``, one (lower, upper) per entry of x) go to methods that take
    them, and the best point is written into the parameter arrays. ``callback(iteration, x, loss)``.
    Returns scipy's ``OptimizeResult`` with ``losses`` (loss per iteration, first = at ``x0``) and,
    for parameters, ``fitted`` (each one's values). L-BFGS-B's ``gtol`` defaults to 0: it stops on the
    loss's relative decrease (``ftol``), whatever the loss's units."""
    from scipy.optimize import minimize as scipy_minimize

    if isinstance(objective, Objective) or params is not None:
        obj = objective if isinstance(objective, Objective) else Objective(objective, params)
        x0 = obj.x0() if x0 is None else np.asarray(x0, np.float64)
        bounds = obj.bounds() if bounds is None else bounds
    elif x0 is None:
        raise ValueError("minimize: a plain function f(x) -> (loss, gradient) needs x0")
    else:
        obj, x0 = objective, np.asarray(x0, np.float64)
        bounds = bounds or [(-math.inf, math.inf)] * len(x0)
    losses: list[float] = []

    def fun(x):
        loss, grad = obj(x)
        if not losses:
            losses.append(loss)
        return loss, grad

    def on_iteration(intermediate_result):
        losses.append(float(intermediate_result.fun))
        if callback is not None:
            callback(len(losses) - 1, intermediate_result.x, float(intermediate_result.fun))

    takes_bounds = method.upper() in ("L-BFGS-B", "TNC", "SLSQP", "TRUST-CONSTR", "POWELL", "NELDER-MEAD")
    if not takes_bounds and any(math.isfinite(v) for b in bounds for v in b):
        raise ValueError(f"minimize: method {method!r} does not take bounds; use L-BFGS-B")
    # L-BFGS-B stops on the loss's relative decrease, not on an absolute gradient size: a loss in m^2
    # is tiny, and scipy's default gtol ended fits at their first iterations, far from the minimum
    defaults = {"maxiter": maxiter, **({"gtol": 0.0} if method.upper() == "L-BFGS-B" else {})}
    result = scipy_minimize(fun, x0, jac=True, method=method, bounds=bounds if takes_bounds else None, tol=tol,
                            callback=on_iteration, options={**defaults, **(options or {})})
    result.losses = losses
    if not isinstance(obj, Objective):
        return result
    obj.set(result.x)
    bounds_at = np.cumsum([0] + [p.size for p in obj.params])
    result.fitted = [p.from_free(result.x[a:b]) for p, a, b in zip(obj.params, bounds_at[:-1], bounds_at[1:])]
    return result
