"""Checks of the numbers a model is built from, shared by ``ModelBuilder``'s ``add_*`` methods (a
``ValueError`` naming the method and the argument) and the scene loader (``xsim.SceneError``
naming the key path).

A number must be finite and at most float32's largest (3.4e38) in magnitude: a model is float32
by default, where anything larger becomes inf. Sizes, masses and time steps must also be 0 or at
least float32's smallest normal number (1.2e-38): rounded to 0 they would mean something else (a
mass of 0 pins a particle) and 1/mass of a denormal mass is inf; anywhere else a value that small
only rounds towards 0. Arguments are checked by name (``_RULES``, ``_STRICT``), so every method
that takes a ``radius`` or a ``rot`` refuses the same values with the same words.
"""

from __future__ import annotations

import math
import os
from numbers import Real
from typing import Any

import numpy as np

F32 = np.finfo(np.float32)
F32_MAX, F32_TINY = float(F32.max), float(F32.tiny)
"""The largest finite and the smallest normal float32, as Python floats (comparing never overflows)."""
FLOAT32_RANGE = f"within float32's normal range (0, or a magnitude from {F32_TINY:.3g} to {F32_MAX:.3g})"
FLOAT32_FINITE = f"within float32's range (a magnitude at most {F32_MAX:.3g})"
BYTES_PER_GRID_PARTICLE = 3000
"""Peak host memory the builder needs per cloth particle (its lists, constraints and finalize), measured."""

_POSITIVE = ("> 0", lambda x: x > 0.0)
_NONNEGATIVE = (">= 0", lambda x: x >= 0.0)
_RULES = {name: _POSITIVE for name in ("radius", "particle_radius", "half_height", "hx", "hy", "hz",
                                       "half_extents", "rx", "ry", "rz", "cell_x", "cell_y", "scale", "density",
                                       "stretch_stiffness", "bend_stiffness", "thickness")}
_RULES.update({name: _NONNEGATIVE for name in ("mass", "mu", "restitution", "rest_length", "target_ke",
                                               "target_kd", "cone_limit", "compliance", "stretch_compliance",
                                               "shear_compliance", "bend_compliance", "area_compliance", "damping",
                                               "area_damping", "stretch_damping", "bend_damping")})
_STRICT = {name for name, rule in _RULES.items() if rule is _POSITIVE} | {"mass"}
_NONZERO_VECTORS = {"rot": "quaternion", "axis": "axis"}


class BadValue(ValueError):
    """A builder argument that cannot be used: the method, the argument, what it must be, what it was."""

    def __init__(self, where: str, name: str, expected: str, found: str):
        self.where, self.name, self.expected, self.found = where, name, expected, found
        super().__init__(f"{where}: {name} must be {expected}, got {found}")


def representable(x: float, tiny_ok: bool = False) -> bool:
    """Whether ``x`` is finite and stays itself as a float32: not inf, and (unless ``tiny_ok``)
    not rounded to 0 or a denormal."""
    try:
        x = float(x)
    except OverflowError:  # an integer beyond float64
        return False
    return math.isfinite(x) and (x == 0.0 or (tiny_ok or F32_TINY <= abs(x)) and abs(x) <= F32_MAX)


def numbers(where: str, name: str, value: Any, tiny_ok: bool = False) -> tuple | np.ndarray:
    """``value`` (a number or a nested sequence of numbers) flattened, every entry
    :func:`representable` (``tiny_ok``: magnitudes below float32's normal range allowed)."""
    if _plain(value, tiny_ok):
        return (value,)
    if isinstance(value, (tuple, list)) and all(_plain(c, tiny_ok) for c in value):
        return tuple(value)
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise BadValue(where, name, "a number or an array of numbers", repr(value)) from None
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(a) & ((a == 0.0) | (((np.abs(a) >= F32_TINY) | tiny_ok) & (np.abs(a) <= F32_MAX))))
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        at = name + "".join(f"[{i}]" for i in index)
        raise BadValue(where, at, f"a finite number {FLOAT32_FINITE if tiny_ok else FLOAT32_RANGE}",
                       repr(float(a[index])))
    return a.ravel()


def _plain(x: Any, tiny_ok: bool) -> bool:
    """A Python number that is representable (the fast path: builders call this per particle)."""
    return type(x) in (float, int) and representable(x, tiny_ok)


def args(where: str, **values: Any) -> None:
    """Check the arguments of builder method ``where`` by their names: every number finite and
    representable (sizes and masses not rounded to 0 either); sizes > 0, masses, compliances and friction >= 0; rotations and axes non-zero;
    ``*xform`` a (position, quaternion) pair or 7 numbers; ``vertices``/``mesh`` finite; ``dim_x``
    with ``dim_y`` a grid that fits in memory. ``None`` values are skipped. Raises :class:`BadValue`."""
    for name, value in values.items():
        if value is None:
            continue
        if name.endswith("xform"):
            _xform(where, name, value)
            continue
        if name in ("dim_x", "dim_y"):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise BadValue(where, name, "an integer >= 1", repr(value))
            continue
        if name in ("vertices", "mesh"):
            value = _mesh_vertices(value)
        a = numbers(where, name, value, tiny_ok=name not in _STRICT)
        rule = _RULES.get(name)
        if rule is not None and not all(rule[1](x) for x in a):
            raise BadValue(where, name, rule[0], repr(value))
        if name in _NONZERO_VECTORS:
            nonzero(where, name, a, _NONZERO_VECTORS[name])
    if "dim_x" in values and "dim_y" in values:
        problem = grid_problem(values["dim_x"], values["dim_y"])
        if problem:
            raise BadValue(where, "dim_x, dim_y", problem, f"{values['dim_x']} x {values['dim_y']} cells")


def nonzero(where: str, name: str, a, what: str) -> None:
    """Refuse a zero ``a`` (a quaternion or an axis, which would be normalised to NaN)."""
    if not any(a):
        raise BadValue(where, name, f"a non-zero {what}", repr(tuple(float(x) for x in a)))


def _xform(where: str, name: str, value: Any) -> None:
    parts = (value[:3], value[3:]) if len(value) == 7 else tuple(value)
    if len(parts) != 2:
        raise BadValue(where, name, "a (position, quaternion) pair or 7 numbers", repr(value))
    numbers(where, f"{name} position", parts[0])
    nonzero(where, f"{name} rotation", numbers(where, f"{name} rotation", parts[1]), "quaternion")


def _mesh_vertices(mesh: Any) -> Any:
    if isinstance(mesh, tuple):
        mesh = mesh[0]
    return getattr(mesh, "vertices", mesh)


def memory_bytes() -> int:
    """This machine's physical memory, bytes."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def grid_problem(dim_x: int, dim_y: int) -> str | None:
    """What is wrong with a cloth grid of ``dim_x`` x ``dim_y`` cells (too large to build in this
    machine's memory), or None."""
    need = (dim_x + 1) * (dim_y + 1) * BYTES_PER_GRID_PARTICLE
    most = memory_bytes() // BYTES_PER_GRID_PARTICLE
    if need > memory_bytes():
        return (f"a grid whose (dim_x + 1) (dim_y + 1) particles fit in memory (about {BYTES_PER_GRID_PARTICLE} "
                f"bytes each: at most {most:,} particles here; this one needs {need / 2**30:,.0f} GiB)")
    return None


def time_step_problem(dt: float, substeps: int, dtype=np.float32) -> str | None:
    """What is wrong with stepping ``dt`` seconds in ``substeps`` substeps of a model of ``dtype``
    (the solver uses h = dt / substeps, h^2 and 1/h^2, which must all be finite and non-zero), or None."""
    info = np.finfo(dtype)
    lo, hi = math.sqrt(float(info.tiny)) * 1.01, math.sqrt(float(info.max)) / 1.01
    if isinstance(dt, bool) or not isinstance(dt, Real) or not (math.isfinite(dt) and dt > 0.0):
        return "a finite number > 0 (seconds)"
    h = dt / substeps
    if not lo <= h <= hi:
        return (f"a time step whose substep h = dt / substeps ({substeps}) has h^2 and 1/h^2 finite and "
                f"non-zero in {np.dtype(dtype).name} ({lo * substeps:.3g} s <= dt <= {hi * substeps:.3g} s)")
    return None


def time_step(where: str, dt: float, substeps: int, dtype=np.float32) -> None:
    """Refuse a ``dt`` that :func:`time_step_problem` finds wrong, naming ``where``."""
    problem = time_step_problem(dt, substeps, dtype)
    if problem:
        raise BadValue(where, "dt", problem, repr(dt))
