"""Gradient checking: tape gradients against central finite differences, and small Jacobians.

A *problem* is either a kernel with its launch arguments (``inputs`` are all of them, in
parameter order, as for ``xsim.launch``) or a callable taking xsim arrays and returning one xsim
array. The check seeds every output with fixed random weights ``w`` and compares the tape's
gradient of ``L = sum(w * outputs)`` with the central difference ``(L(x + h) - L(x - h)) / 2h``
of each input component. Every evaluation starts from the arrays' original values (kept aside
and restored), so kernels that accumulate into or update their outputs in place check correctly.

Run it on float64 arrays: in float32 the finite differences themselves are only good to ~1e-3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .. import types as T
from ..array import array as Array
from ..kernels import recording
from ..kernels.kernel import Kernel
from .tape import Tape

# -------------------------------------------------------------------------------------------------
# the float components of an array, as writable numpy views


def _float_views(host: np.ndarray) -> list[np.ndarray]:
    """Views of every float component of ``host`` (struct arrays: each float field, recursively)."""
    if host.dtype.names is None:
        return [host] if host.dtype.kind == "f" else []
    out = []
    for name in host.dtype.names:
        out += _float_views(host[name])
    return out


def _flat_get(host: np.ndarray) -> np.ndarray:
    views = _float_views(host)
    return np.concatenate([v.astype(np.float64).ravel() for v in views]) if views else np.zeros(0)


def _flat_size(host: np.ndarray) -> int:
    return sum(v.size for v in _float_views(host))


def _component(host: np.ndarray, k: int) -> tuple[np.ndarray, tuple]:
    """The view and index of the ``k``-th float component (in ``_flat_get`` order)."""
    for v in _float_views(host):
        if k < v.size:
            return v, np.unravel_index(k, v.shape)
        k -= v.size
    raise IndexError(k)


def _flat_set(host: np.ndarray, values: np.ndarray):
    at = 0
    for v in _float_views(host):
        v[...] = values[at:at + v.size].reshape(v.shape)
        at += v.size


def _set_flat(arr: Array, values: np.ndarray):
    """Set ``arr``'s float components from the flat ``values`` (on any device)."""
    host = arr.numpy()
    _flat_set(host, values)
    if not arr.device.is_cpu:  # the host view was a copy
        arr.copy_from_untracked(host)


def _default_eps(arrays) -> float:
    scalars = [getattr(a.dtype, "_scalar", None) for a in arrays]
    return 1e-6 if all(s is T.float64 or T.is_struct(s) for s in scalars) else 1e-3


# -------------------------------------------------------------------------------------------------
# problems: what to run, which arrays are inputs and outputs


class _Problem:
    """Shared machinery: named input and output arrays, state save/restore, gradient buffers."""

    inputs: dict[str, Array]
    outputs: dict[str, Array]
    all_arrays: list[Array]

    def _setup(self):
        self._saved = [(a, a.numpy().copy()) for a in self.all_arrays]
        self._had_grad = [(a, a.grad) for a in self.all_arrays]
        for a in list(self.inputs.values()) + list(self.outputs.values()):
            if a.grad is None:
                a.requires_grad = True

    def saved_host(self, arr: Array) -> np.ndarray:
        """The kept original values of ``arr`` (what every evaluation starts from)."""
        return next(h for a, h in self._saved if a is arr)

    def restore(self):
        for a, host in self._saved:
            a.copy_from_untracked(host)  # numpy() of a GPU array is a copy: write through the array

    def finish(self):
        """Put every array back as it was (values and gradient buffers)."""
        self.restore()
        for a, g in self._had_grad:
            if g is None:
                a.requires_grad = False

    def outputs_flat(self) -> dict[str, np.ndarray]:
        return {n: _flat_get(a.numpy()) for n, a in self.outputs.items()}

    def forward(self, tape: Tape | None) -> None:
        raise NotImplementedError

    def zero_grads(self):
        for a in set(self.inputs.values()) | set(self.outputs.values()):
            a.grad.zero_untracked()


class _KernelProblem(_Problem):
    def __init__(self, kernel: Kernel, args, dim, outputs, wrt):
        from .. import config
        from ..device import get_device
        from ..kernels import launch as L
        if len(args) != len(kernel.params):
            names = ", ".join(n for n, _ in kernel.params)
            raise TypeError(f"gradcheck: kernel '{kernel.key}' takes {len(kernel.params)} arguments ({names}), "
                            f"got {len(args)}")
        kernel = kernel.specialize(list(args))  # a generic kernel: its binding for these arguments
        self.kernel, self.args = kernel, list(args)
        arrays = [a for a in self.args if isinstance(a, Array)]
        if dim is None:
            if not arrays:
                raise ValueError("gradcheck: pass dim= (the kernel has no array argument to take it from)")
            dim = arrays[0].shape
        self.dim = dim
        dev = arrays[0].device if arrays else get_device()
        meta = L.prepare(kernel, dev, config.current_mode()).meta
        params = kernel.params

        def pick(names, default):
            labels = default if names is None else [params[n][0] if isinstance(n, int) else n for n in names]
            out = {}
            for label in labels:
                arr = L.resolve_label(label, params, self.args)
                if arr is None:
                    raise ValueError(f"gradcheck: kernel '{kernel.key}' has no array argument '{label}'")
                if _flat_size(arr.numpy()):  # integer arrays have no gradient
                    out[label] = arr
            return out
        self.outputs = pick(outputs, meta.writes)
        self.inputs = pick(wrt, meta.reads)
        self.all_arrays = _unique([a for a in self.args if isinstance(a, Array)] + list(self.inputs.values()) +
                                  list(self.outputs.values()))
        self._setup()

    def forward(self, tape):
        from ..kernels.launch import launch
        launch(self.kernel, self.dim, inputs=self.args, record_tape=tape is not None)


class _CallableProblem(_Problem):
    def __init__(self, fn: Callable, args, wrt):
        self.fn, self.args = fn, list(args)
        for i, a in enumerate(self.args):
            if not isinstance(a, Array):
                raise TypeError(f"gradcheck: inputs[{i}] must be an xsim array, got {type(a).__name__}")
        chosen = range(len(self.args)) if wrt is None else wrt
        self.inputs = {f"inputs[{i}]": self.args[i] for i in chosen}
        self.result = None
        self.outputs = {}
        self.all_arrays = _unique(self.args)
        self._setup()
        self.forward(None)  # find the output array (made by fn) once
        self.restore()

    def forward(self, tape):
        out = self.fn(*self.args)
        if not isinstance(out, Array):
            raise TypeError(f"gradcheck: the function must return an xsim array, got {type(out).__name__}")
        if out.grad is None:
            out.requires_grad = True
        self.outputs = {"output": out}


def _unique(arrays):
    seen, out = set(), []
    for a in arrays:
        if id(a) not in seen:
            seen.add(id(a))
            out.append(a)
    return out


def _problem(fn, inputs, dim, outputs, wrt) -> _Problem:
    if isinstance(fn, Kernel):
        return _KernelProblem(fn, inputs, dim, outputs, wrt)
    if outputs is not None:
        raise ValueError("outputs= names the output arguments of a kernel; a callable returns its output")
    return _CallableProblem(fn, inputs, wrt)


def _tape_gradients(p: _Problem, seeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One recorded forward and one backward seeded with ``seeds`` (flat per output)."""
    p.restore()
    p.zero_grads()
    with recording.suspended(), Tape() as tape:  # usable while a user's tape records
        p.forward(tape)
    grads = {}
    for name, seed in seeds.items():
        out = p.outputs[name]
        _set_flat(out.grad, seed)
        grads[out] = out.grad
    tape.backward(grads=grads)
    return {n: _flat_get(a.grad.numpy()) for n, a in p.inputs.items()}


def _evaluate(p: _Problem) -> dict[str, np.ndarray]:
    p.forward(None)
    return p.outputs_flat()


# -------------------------------------------------------------------------------------------------
# gradcheck


@dataclass
class InputCheck:
    """The comparison for one input array: tape gradient vs finite differences (flat components),
    both of ``L = sum(w * outputs)`` with the check's fixed random weights ``w``."""

    name: str
    analytic: np.ndarray
    numeric: np.ndarray
    max_abs_error: float
    max_rel_error: float
    worst_index: int
    passed: bool

    def __str__(self):
        mark = "ok  " if self.passed else "FAIL"
        s = f"{mark} {self.name}: max abs error {self.max_abs_error:.3e}, max rel error {self.max_rel_error:.3e}"
        if self.analytic.size:
            k = self.worst_index
            s += f" (component {k}: tape {self.analytic[k]:.9g}, finite differences {self.numeric[k]:.9g})"
        return s


@dataclass
class GradcheckReport:
    """Per input: the worst absolute and relative error; ``passed`` if every component satisfies
    ``|tape - fd| <= atol + rtol * |fd|``."""

    checks: list[InputCheck] = field(default_factory=list)
    atol: float = 0.0
    rtol: float = 0.0
    eps: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def __getitem__(self, name: str) -> InputCheck:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(name)

    def __bool__(self):
        return self.passed

    def __str__(self):
        head = f"gradcheck {'passed' if self.passed else 'FAILED'} (eps={self.eps:g}, atol={self.atol:g}, " \
               f"rtol={self.rtol:g})"
        return "\n".join([head] + ["  " + str(c) for c in self.checks])

    def assert_ok(self):
        """Raise AssertionError with the report if any input failed."""
        if not self.passed:
            raise AssertionError(str(self))


def gradcheck(fn, inputs, *, dim=None, outputs=None, wrt=None, eps: float | None = None, atol: float = 1e-6,
              rtol: float = 1e-5, seed: int = 0, raise_on_failure: bool = False) -> GradcheckReport:
    """Compare tape gradients with central finite differences.

    ``fn``: an ``@xsim.kernel`` (``inputs`` = its launch arguments in parameter order, ``dim`` = the
    launch dimension, default the shape of the first array argument; ``outputs``/``wrt`` = names or
    indices of the arrays to seed and to check, default the arrays it writes / reads), or a callable
    taking the xsim arrays ``inputs`` and returning one xsim array (``wrt`` = input indices).
    Returns a ``GradcheckReport``; ``raise_on_failure=True`` raises AssertionError when it fails.
    Array values are restored afterwards.
    """
    p = _problem(fn, inputs, dim, outputs, wrt)
    try:
        eps = eps if eps is not None else _default_eps(p.inputs.values())
        rng = np.random.default_rng(seed)
        base = _evaluate(p)
        seeds = {n: rng.uniform(0.5, 1.5, v.size) * rng.choice([-1.0, 1.0], v.size) for n, v in base.items()}
        analytic = _tape_gradients(p, seeds)

        def loss() -> float:
            p.restore()
            outs = _evaluate(p)
            return float(sum(np.dot(seeds[n], outs[n]) for n in seeds))
        report = GradcheckReport(atol=atol, rtol=rtol, eps=eps)
        for name, arr in p.inputs.items():
            numeric = np.zeros(_flat_size(arr.numpy()))
            for k in range(numeric.size):
                hi = _perturbed(p, arr, k, eps, loss)
                lo = _perturbed(p, arr, k, -eps, loss)
                numeric[k] = (hi - lo) / _step(p, arr, k, eps)
            report.checks.append(_compare(name, analytic[name], numeric, atol, rtol))
    finally:
        p.finish()
    if raise_on_failure:
        report.assert_ok()
    return report


def _perturbed(p: _Problem, arr: Array, k: int, delta: float, fn):
    """``fn()`` with component ``k`` of ``arr``'s original value moved by ``delta``."""
    view, idx = _component(p.saved_host(arr), k)
    original = view[idx].copy()
    view[idx] = original + delta
    try:
        return fn()
    finally:
        view[idx] = original


def _step(p: _Problem, arr: Array, k: int, eps: float) -> float:
    """The distance between the two perturbed values of a component, as stored (not quite 2 eps)."""
    view, idx = _component(p.saved_host(arr), k)
    x = view[idx]
    return float((x + view.dtype.type(eps)) - (x - view.dtype.type(eps)))


def _compare(name, analytic, numeric, atol, rtol) -> InputCheck:
    err = np.abs(analytic - numeric)
    if err.size == 0:
        return InputCheck(name, analytic, numeric, 0.0, 0.0, 0, True)
    rel = err / np.maximum(np.abs(numeric), np.maximum(np.abs(analytic), 1e-30))
    rel[err == 0] = 0.0
    ok = bool(np.all(err <= atol + rtol * np.abs(numeric))) and bool(np.all(np.isfinite(analytic)))
    k = int(np.argmax(err)) if np.all(np.isfinite(err)) else int(np.argmin(np.isfinite(err)))
    return InputCheck(name, analytic, numeric, float(err.max()), float(rel.max()), k, ok)


# -------------------------------------------------------------------------------------------------
# Jacobians


def jacobian(fn, inputs, outputs=None, *, dim=None, wrt=None) -> dict[tuple[str, str], np.ndarray]:
    """The Jacobian through the tape: one recorded forward, then one backward per output component.

    Returns ``{(output_name, input_name): J}`` with ``J[i, j] = d out_i / d in_j`` over the flat
    float components. Arguments as for ``gradcheck``."""
    p = _problem(fn, inputs, dim, outputs, wrt)
    try:
        p.restore()
        p.zero_grads()
        with recording.suspended(), Tape() as tape:  # usable while a user's tape records
            p.forward(tape)
        result = {}
        for oname, out in p.outputs.items():
            n_out = _flat_size(out.numpy())
            rows = {iname: np.zeros((n_out, _flat_size(a.numpy()))) for iname, a in p.inputs.items()}
            for i in range(n_out):
                tape.zero()
                p.zero_grads()
                one_hot = np.zeros(n_out)
                one_hot[i] = 1.0
                _set_flat(out.grad, one_hot)
                tape.backward(grads={out: out.grad})
                for iname, a in p.inputs.items():
                    rows[iname][i] = _flat_get(a.grad.numpy())
            for iname, J in rows.items():
                result[(oname, iname)] = J
    finally:
        p.finish()
    return result


def jacobian_fd(fn, inputs, outputs=None, *, dim=None, wrt=None, eps: float | None = None
                ) -> dict[tuple[str, str], np.ndarray]:
    """The Jacobian by central finite differences, in the same layout as ``jacobian``."""
    p = _problem(fn, inputs, dim, outputs, wrt)
    try:
        eps = eps if eps is not None else _default_eps(p.inputs.values())

        def outs():
            p.restore()
            return _evaluate(p)
        base = outs()
        result = {(o, i): np.zeros((base[o].size, _flat_size(a.numpy()))) for o in base for i, a in p.inputs.items()}
        for iname, arr in p.inputs.items():
            for k in range(_flat_size(arr.numpy())):
                hi = _perturbed(p, arr, k, eps, outs)
                lo = _perturbed(p, arr, k, -eps, outs)
                for o in base:
                    result[(o, iname)][:, k] = (hi[o] - lo[o]) / _step(p, arr, k, eps)
    finally:
        p.finish()
    return result
