"""``Adam`` and ``SGD``: update xsim arrays in place from their ``.grad``, with kernels (any device),
launched off the tape (``record_tape=False``), so an update is never part of a rollout's gradient.

Formulas (``t`` counts steps from 1; ``g`` is the gradient, scaled by the clipping factor first):

- Adam (Kingma & Ba 2015, as ``torch.optim.Adam``): ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
  ``p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``.
- SGD with momentum, PyTorch's convention (dampening 0): ``b = mu b + g`` (``b = g`` on the first
  step), ``p -= lr b``; ``nesterov``: ``p -= lr (g + mu b)``. Sutskever's form ``p -= lr g`` folded
  into the velocity is the same sequence of points for a constant ``lr``.
- Clipping (``clip_norm``, as ``torch.nn.utils.clip_grad_norm_``): every gradient is scaled by
  ``min(1, clip_norm / (|g| + 1e-6))``, ``|g|`` the Euclidean norm over all the optimizer's arrays.
- ``bounds=(lower, upper)``: after each step a parameter is clamped into the box (projected descent).

Optimizer state (moments, velocities) is float64 whatever the parameter's precision.
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
               nesterov: int) -> xsim.float64:
    """Update the momentum buffer of entry ``i`` and return the SGD step (to subtract)."""
    b = mu * buf[i] + g
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
         lr: xsim.float64, mu: xsim.float64, nesterov: int):
    i = xsim.tid()
    gi = xsim.float64(g[i]) * _clip_scale(norm_sq, clip_norm)
    x = xsim.float64(p[i]) - _sgd_delta(gi, buf, i, lr, mu, nesterov)
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

    def __init__(self, params: Sequence[Array], lr: float, clip_norm: float | None, bounds):
        if isinstance(params, Array):
            params = [params]
        if not params:
            raise ValueError("an optimizer needs at least one parameter array")
        self.params = list(params)
        self.flat = [flat_view(p) for p in self.params]
        for k, (p, f) in enumerate(zip(self.params, self.flat)):
            if f.grad is None:
                raise ValueError(f"parameter {k} (shape {p.shape}) has no gradient: create it with requires_grad=True "
                                 "(or finalize the model with requires_grad=True)")
        if lr <= 0 or not math.isfinite(lr):
            raise ValueError(f"learning rate must be a positive number, got {lr!r}")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be a positive number or None, got {clip_norm!r}")
        self.lr, self.clip_norm = float(lr), float(clip_norm or 0.0)
        self.t = 0
        lo, hi = (-np.inf, np.inf) if bounds is None else bounds
        self.lower = [self._per_entry(lo, f, "lower", k) for k, f in enumerate(self.flat)]
        self.upper = [self._per_entry(hi, f, "upper", k) for k, f in enumerate(self.flat)]
        self.norm_sq = xsim.zeros(1, dtype=xsim.float64, device=self.flat[0].device)

    def _per_entry(self, bound, f: Array, which: str, k: int) -> Array:
        """A float64 array of one bound per scalar of flat parameter ``f``."""
        value = bound[k] if isinstance(bound, (list, tuple)) else bound
        values = np.broadcast_to(np.asarray(value, np.float64).reshape(-1) if np.ndim(value) else value, f.shape)
        if np.isnan(values).any():
            raise ValueError(f"{which} bound of parameter {k} is NaN")
        return xsim.array(np.ascontiguousarray(values), dtype=xsim.float64, device=f.device)

    def state_array(self, f: Array) -> Array:
        return xsim.zeros(f.shape, dtype=xsim.float64, device=f.device)

    def _clip(self):
        if self.clip_norm > 0:
            self.norm_sq.zero_untracked()
            for f in self.flat:
                xsim.launch(_norm_sq, f.size, inputs=[f.grad], outputs=[self.norm_sq],
                            device=f.device, record_tape=False)

    def zero_grad(self):
        """Set the gradients of all parameters to zero."""
        for f in self.flat:
            f.grad.zero_untracked()


class Adam(_Optimizer):
    """Adam on xsim arrays: ``opt = Adam([a, b], lr=0.01)``; after each backward, ``opt.step()``."""

    def __init__(self, params: Sequence[Array], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, clip_norm: float | None = None, bounds=None):
        super().__init__(params, lr, clip_norm, bounds)
        self.b1, self.b2 = map(float, betas)
        if not (0.0 <= self.b1 < 1.0 and 0.0 <= self.b2 < 1.0):
            raise ValueError(f"Adam betas must lie in [0, 1), got {betas!r}")
        self.eps = float(eps)
        self.m = [self.state_array(f) for f in self.flat]
        self.v = [self.state_array(f) for f in self.flat]

    def step(self):
        """One Adam update of every parameter from its current ``.grad``."""
        self.t += 1
        self._clip()
        c1, c2 = 1.0 - self.b1**self.t, 1.0 - self.b2**self.t
        for f, m, v, lo, hi in zip(self.flat, self.m, self.v, self.lower, self.upper):
            xsim.launch(_adam, f.size,
                        inputs=[f, f.grad, m, v, lo, hi, self.norm_sq, self.clip_norm, self.lr, self.b1, self.b2,
                                c1, c2, self.eps], device=f.device, record_tape=False)


class SGD(_Optimizer):
    """Gradient descent with (heavy-ball or Nesterov) momentum on xsim arrays, PyTorch's convention."""

    def __init__(self, params: Sequence[Array], lr: float, momentum: float = 0.0, nesterov: bool = False,
                 clip_norm: float | None = None, bounds=None):
        super().__init__(params, lr, clip_norm, bounds)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"SGD momentum must lie in [0, 1), got {momentum!r}")
        self.momentum, self.nesterov = float(momentum), bool(nesterov)
        self.buf = [self.state_array(f) for f in self.flat]

    def step(self):
        """One SGD update of every parameter from its current ``.grad``."""
        self.t += 1
        self._clip()
        for f, b, lo, hi in zip(self.flat, self.buf, self.lower, self.upper):
            xsim.launch(_sgd, f.size,
                        inputs=[f, f.grad, b, lo, hi, self.norm_sq, self.clip_norm, self.lr, self.momentum,
                                int(self.nesterov)], device=f.device, record_tape=False)
