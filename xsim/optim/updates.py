"""``Adam`` and ``SGD``: update xsim arrays in place from their ``.grad``, with kernels (any device),
launched off the tape (``record_tape=False``), so an update is never part of a rollout's gradient.

Formulas (``t`` counts steps from 1; ``g`` is the gradient, scaled by the clipping factor first):

- Adam (Kingma & Ba 2015, as ``torch.optim.Adam``): ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
  ``p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``.
- SGD with momentum, PyTorch's and Warp's convention: ``g += weight_decay p``, ``b = mu b + (1 - dampening) g``
  (``b = g`` on the first step), ``p -= lr b``; ``nesterov``: ``p -= lr (g + mu b)``. Sutskever's form
  ``p -= lr g`` folded into the velocity is the same sequence of points for a constant ``lr``.
- Clipping (``clip_norm``, as ``torch.nn.utils.clip_grad_norm_``): every gradient is scaled by
  ``min(1, clip_norm / (|g| + 1e-6))``, ``|g|`` the Euclidean norm over all the optimizer's arrays.
- ``bounds=(lower, upper)``: after each step a parameter is clamped into the box (projected descent).

Optimizer state (moments, velocities) is float64 whatever the parameter's precision.

The constructors and ``step`` also take Warp's ``warp.optim`` forms, so ``import xsim.optim`` replaces
``import warp.optim``: ``Adam(params=None, lr, betas, eps)``, ``SGD(params=None, lr, momentum, dampening,
weight_decay, nesterov)``, ``set_params(params)``, ``reset_internal_state()`` and ``step(grad)`` with the list
of gradient arrays (same shapes and dtypes as the parameters) instead of the parameters' own ``.grad``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import xsim

from .. import types as T
from ..array import array as Array


@xsim.func
def _clip_scale(norm_sq: xsim.array(dtype=xsim.float64), clip_norm: xsim.float64) -> xsim.float64:
    """The factor every gradient is scaled by: min(1, clip / (|g| + 1e-6)), or 1 when clip_norm <= 0."""
    s = xsim.float64(1.0)
    if clip_norm > xsim.float64(0.0):
        s = xsim.min(s, clip_norm / (xsim.sqrt(norm_sq[0]) + xsim.float64(1.0e-6)))
    return s


@xsim.func
def _adam_delta(g: xsim.float64, m: xsim.array(dtype=xsim.float64), v: xsim.array(dtype=xsim.float64), i: int,
                lr: xsim.float64, b1: xsim.float64, b2: xsim.float64, c1: xsim.float64, c2: xsim.float64,
                eps: xsim.float64) -> xsim.float64:
    """Update the moments of entry ``i`` and return the Adam step (to subtract); c1, c2 = 1 - b^t."""
    mi = b1 * m[i] + (xsim.float64(1.0) - b1) * g
    vi = b2 * v[i] + (xsim.float64(1.0) - b2) * g * g
    m[i] = mi
    v[i] = vi
    return lr * (mi / c1) / (xsim.sqrt(vi / c2) + eps)


@xsim.func
def _sgd_delta(g: xsim.float64, buf: xsim.array(dtype=xsim.float64), i: int, lr: xsim.float64, mu: xsim.float64,
               damp: xsim.float64, first: int, nesterov: int) -> xsim.float64:
    """Update the momentum buffer of entry ``i`` and return the SGD step (to subtract); ``first``: the
    first step, whose buffer is the gradient undamped (PyTorch's and Warp's convention)."""
    d = g
    if mu != xsim.float64(0.0):
        b = g
        if first == 0:
            b = mu * buf[i] + (xsim.float64(1.0) - damp) * g
        buf[i] = b
        d = b
        if nesterov != 0:
            d = g + mu * b
    return lr * d


@xsim.kernel
def _norm_sq(g: xsim.array(dtype=xsim.Float), out: xsim.array(dtype=xsim.float64)):
    i = xsim.tid()
    x = xsim.float64(g[i])
    xsim.atomic_add(out, 0, x * x)


@xsim.kernel
def _adam(p: xsim.array(dtype=xsim.Float), g: xsim.array(dtype=xsim.Float),
          m: xsim.array(dtype=xsim.float64), v: xsim.array(dtype=xsim.float64),
          lo: xsim.array(dtype=xsim.float64), hi: xsim.array(dtype=xsim.float64),
          norm_sq: xsim.array(dtype=xsim.float64), clip_norm: xsim.float64, lr: xsim.float64,
          b1: xsim.float64, b2: xsim.float64, c1: xsim.float64, c2: xsim.float64, eps: xsim.float64):
    i = xsim.tid()
    gi = xsim.float64(g[i]) * _clip_scale(norm_sq, clip_norm)
    x = xsim.float64(p[i]) - _adam_delta(gi, m, v, i, lr, b1, b2, c1, c2, eps)
    p[i] = p.dtype(xsim.clamp(x, lo[i], hi[i]))


@xsim.kernel
def _sgd(p: xsim.array(dtype=xsim.Float), g: xsim.array(dtype=xsim.Float),
         buf: xsim.array(dtype=xsim.float64), lo: xsim.array(dtype=xsim.float64),
         hi: xsim.array(dtype=xsim.float64), norm_sq: xsim.array(dtype=xsim.float64), clip_norm: xsim.float64,
         lr: xsim.float64, mu: xsim.float64, damp: xsim.float64, decay: xsim.float64, first: int, nesterov: int):
    i = xsim.tid()
    gi = xsim.float64(g[i]) * _clip_scale(norm_sq, clip_norm) + decay * xsim.float64(p[i])
    x = xsim.float64(p[i]) - _sgd_delta(gi, buf, i, lr, mu, damp, first, nesterov)
    p[i] = p.dtype(xsim.clamp(x, lo[i], hi[i]))


def flat_view(a: Array) -> Array:
    """A 1-D view of the scalars of contiguous float32/float64 array ``a`` (a vec3 array of n
    elements gives 3 n floats), sharing its memory; its ``grad`` is the same view of ``a.grad``."""
    if not isinstance(a, Array):
        raise TypeError(f"expected an xsim array, got {type(a).__name__}")
    scalar = getattr(a.dtype, "_scalar", None)
    if T.is_struct(a.dtype) or scalar not in (T.float32, T.float64):
        raise TypeError(f"an optimizer parameter must hold float32 or float64 values (scalars, vectors, matrices), "
                        f"got {T.type_name(a.dtype)}")
    if not a.is_contiguous:
        raise ValueError(f"an optimizer parameter must be contiguous (a whole array or a slice along its first "
                         f"axis), got shape {a.shape} with strides {a.strides}")
    count = a.size * math.prod(a.dtype._shape)
    if a._host is not None:
        out = Array._from_host(a._host.reshape(-1), scalar, a.device, owner=a)
    else:
        out = Array._from_device(a.ptr, scalar, a.device, (count,), (np.dtype(scalar._np).itemsize,), a)
    if a.grad is not None:
        out._grad, out._requires_grad = flat_view(a.grad), True
    return out


class _Optimizer:
    """What Adam and SGD share: flat views of the parameters, bounds, gradient clipping."""

    def __init__(self, params: Sequence[Array] | None, lr: float, clip_norm: float | None, bounds):
        if lr <= 0 or not math.isfinite(lr):
            raise ValueError(f"learning rate must be a positive number, got {lr!r}")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be a positive number or None, got {clip_norm!r}")
        self.lr, self.clip_norm = float(lr), float(clip_norm or 0.0)
        self.bounds = bounds
        self.t = 0
        self.params = None
        if params is not None:
            self.set_params(params)

    def set_params(self, params: Sequence[Array]) -> None:
        """Optimize ``params`` (an array or a list of arrays) from now on, with fresh optimizer state."""
        if isinstance(params, Array):
            params = [params]
        if not params:
            raise ValueError("an optimizer needs at least one parameter array")
        self.params = list(params)
        self.flat = [flat_view(p) for p in self.params]
        self._grads: list = [None] * len(self.flat)  # (array, flat view) of the gradients step(grad) was given
        lo, hi = (-np.inf, np.inf) if self.bounds is None else self.bounds
        self.lower = [self._per_entry(lo, f, "lower", k) for k, f in enumerate(self.flat)]
        self.upper = [self._per_entry(hi, f, "upper", k) for k, f in enumerate(self.flat)]
        self.norm_sq = xsim.zeros(1, dtype=xsim.float64, device=self.flat[0].device)
        self.t = 0
        self._new_state()

    def _new_state(self) -> None:
        raise NotImplementedError

    def reset_internal_state(self) -> None:
        """Zero the optimizer's state (moments, momentum) and its step count, keeping the parameters."""
        if self.params is not None:
            self._new_state()
        self.t = 0

    def _per_entry(self, bound, f: Array, which: str, k: int) -> Array:
        """A float64 array of one bound per scalar of flat parameter ``f``."""
        value = bound[k] if isinstance(bound, (list, tuple)) else bound
        values = np.broadcast_to(np.asarray(value, np.float64).reshape(-1) if np.ndim(value) else value, f.shape)
        if np.isnan(values).any():
            raise ValueError(f"{which} bound of parameter {k} is NaN")
        return xsim.array(np.ascontiguousarray(values), dtype=xsim.float64, device=f.device)

    def state_array(self, f: Array) -> Array:
        return xsim.zeros(f.shape, dtype=xsim.float64, device=f.device)

    def _gradients(self, grad) -> list[Array]:
        """The flat gradient of each parameter: the arrays of ``grad`` (Warp's ``step(grad)``), else their ``.grad``."""
        if self.params is None:
            raise RuntimeError("the optimizer has no parameters: pass them to its constructor or to set_params()")
        if grad is None:
            for k, (p, f) in enumerate(zip(self.params, self.flat)):
                if f.grad is None:
                    raise ValueError(f"parameter {k} (shape {p.shape}) has no gradient: create it with requires_grad="
                                     "True (or finalize the model with requires_grad=True), or pass the gradients to "
                                     "step(grad)")
            return [f.grad for f in self.flat]
        if isinstance(grad, Array):
            grad = [grad]
        if len(grad) != len(self.params):
            raise ValueError(f"step(grad) needs one gradient array per parameter ({len(self.params)}), got {len(grad)}")
        out = []
        for k, (g, p) in enumerate(zip(grad, self.params)):
            kept = self._grads[k]
            if kept is None or kept[0] is not g:
                if not isinstance(g, Array) or g.dtype is not p.dtype or g.shape != p.shape:
                    raise TypeError(f"step(grad): gradient {k} must be an xsim array of parameter {k}'s dtype "
                                    f"{T.type_name(p.dtype)} and shape {p.shape}, got "
                                    + (f"{T.type_name(g.dtype)} of shape {g.shape}" if isinstance(g, Array)
                                       else type(g).__name__))
                kept = self._grads[k] = (g, flat_view(g))
            out.append(kept[1])
        return out

    def _clip(self, grads: list[Array]):
        if self.clip_norm > 0:
            self.norm_sq.zero_untracked()
            for g in grads:
                xsim.launch(_norm_sq, g.size, inputs=[g], outputs=[self.norm_sq], device=g.device, record_tape=False)

    def zero_grad(self):
        """Set the gradients of all parameters to zero (those that have one)."""
        for f in self.flat if self.params is not None else ():
            if f.grad is not None:
                f.grad.zero_untracked()


class Adam(_Optimizer):
    """Adam on xsim arrays: ``opt = Adam([a, b], lr=0.01)``; after each backward, ``opt.step()`` (or Warp's
    ``opt.step([a.grad, b.grad])``)."""

    def __init__(self, params: Sequence[Array] | None = None, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, clip_norm: float | None = None,
                 bounds=None):
        self.b1, self.b2 = map(float, betas)
        if not (0.0 <= self.b1 < 1.0 and 0.0 <= self.b2 < 1.0):
            raise ValueError(f"Adam betas must lie in [0, 1), got {betas!r}")
        self.eps = float(eps)
        super().__init__(params, lr, clip_norm, bounds)

    def _new_state(self) -> None:
        self.m = [self.state_array(f) for f in self.flat]
        self.v = [self.state_array(f) for f in self.flat]

    def step(self, grad=None):
        """One Adam update of every parameter from ``grad`` (a list of arrays), or from their ``.grad``."""
        grads = self._gradients(grad)
        self.t += 1
        self._clip(grads)
        c1, c2 = 1.0 - self.b1**self.t, 1.0 - self.b2**self.t
        for f, g, m, v, lo, hi in zip(self.flat, grads, self.m, self.v, self.lower, self.upper):
            xsim.launch(_adam, f.size,
                        inputs=[f, g, m, v, lo, hi, self.norm_sq, self.clip_norm, self.lr, self.b1, self.b2,
                                c1, c2, self.eps], device=f.device, record_tape=False)


class SGD(_Optimizer):
    """Gradient descent with (heavy-ball or Nesterov) momentum, dampening and weight decay on xsim arrays,
    PyTorch's and Warp's convention; the arguments in Warp's order."""

    def __init__(self, params: Sequence[Array] | None = None, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 clip_norm: float | None = None, bounds=None):
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"SGD momentum must lie in [0, 1), got {momentum!r}")
        if not 0.0 <= dampening <= 1.0:
            raise ValueError(f"SGD dampening must lie in [0, 1], got {dampening!r}")
        if not (weight_decay >= 0.0 and math.isfinite(weight_decay)):
            raise ValueError(f"SGD weight_decay must be a non-negative number, got {weight_decay!r}")
        if nesterov and (momentum <= 0.0 or dampening != 0.0):
            raise ValueError(f"Nesterov momentum needs momentum > 0 and dampening 0, got momentum={momentum!r}, "
                             f"dampening={dampening!r}")
        self.momentum, self.dampening, self.weight_decay = float(momentum), float(dampening), float(weight_decay)
        self.nesterov = bool(nesterov)
        super().__init__(params, lr, clip_norm, bounds)

    def _new_state(self) -> None:
        self.buf = [self.state_array(f) for f in self.flat]

    def step(self, grad=None):
        """One SGD update of every parameter from ``grad`` (a list of arrays), or from their ``.grad``."""
        grads = self._gradients(grad)
        first = int(self.t == 0)
        self.t += 1
        self._clip(grads)
        for f, g, b, lo, hi in zip(self.flat, grads, self.buf, self.lower, self.upper):
            xsim.launch(_sgd, f.size,
                        inputs=[f, g, b, lo, hi, self.norm_sq, self.clip_norm, self.lr, self.momentum,
                                self.dampening, self.weight_decay, first, int(self.nesterov)],
                        device=f.device, record_tape=False)
