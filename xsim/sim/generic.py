"""The simulation kernels' generic types, and the kernels for one scalar type: each solver file (and
``kinematics.py``) defines its kernels once, at module level, generic over the scalar (``Float``,
``Vec3``, ``Floats``... below), and ``specialized`` binds every one of them to float32 or float64 up
front. It sits in ``xsim.sim`` so that the model layer's kernels use it without importing the solvers.

Why up front rather than at each launch: a launch of a generic kernel binds its arguments' types
first and takes the general launch path (binding solve_distance's 13 arguments took 0.6 ms on a busy
2-core machine, against a few us for a specialisation's whole launch), and a specialisation made at a
first launch joins its module after the others were compiled, which rebuilds the module. Bound together here, a file's kernels for one scalar type compile in one
compiler call, into a module of their own (``<file's module>_<scalar>``), as when each file had a
factory per scalar type; the generic kernels stay importable and launchable for any scalar type.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from types import SimpleNamespace
from typing import TypeVar

from .. import types as T
from ..array import array
from ..kernels.kernel import Kernel
from ..kernels.module import get_module
from ..types import Float

# the parameter types of the solver kernels, generic over the scalar type Float
Vec2 = T.vector(2, Float)
Vec3 = T.vector(3, Float)
Vec4 = T.vector(4, Float)
Vec6 = T.vector(6, Float)
Vec8 = T.vector(8, Float)
Mat33 = T.matrix((3, 3), Float)
Transform = T.transformation(Float)
Floats = array(dtype=Float)
Vec2s = array(dtype=Vec2)
Vec3s = array(dtype=Vec3)
Vec4s = array(dtype=Vec4)
Vec6s = array(dtype=Vec6)
Vec8s = array(dtype=Vec8)
Mat33s = array(dtype=Mat33)
Transforms = array(dtype=Transform)
Quats = array(dtype=T.quaternion(Float))
Ints = array(dtype=int)
Ints2 = array(dtype=int, ndim=2)
Vec3s2 = array(dtype=Vec3, ndim=2)


def bind_scalar(t, scalar):
    """The parameter type ``t`` with its scalar type variable (``Float``, ``Scalar``) set to ``scalar``."""
    if isinstance(t, T.ArrayType):
        return type(t)(bind_scalar(t.dtype, scalar), t.ndim)
    if isinstance(t, TypeVar):
        if not T.bind(t, scalar):
            raise TypeError(f"{T.type_name(scalar)} is not one of the types {T.type_name(t)} stands for")
        return scalar
    if isinstance(t, T.GenericComposite):
        return t.concrete(bind_scalar(t.dtype, scalar))
    if getattr(t, "_is_struct_template", False):
        return t.specialize({v: scalar for v in t.type_vars})
    if T.is_type_parameter(t):
        raise TypeError(f"a solver kernel parameter typed {T.type_name(t)} has no scalar type to bind; use Float")
    return t


_WATCHING: list[set] = []  # the sets of open ``modules_handed_out`` blocks


@contextlib.contextmanager
def modules_handed_out():
    """The kernel modules :func:`specialized` hands out inside the block, as a set filled in as it runs: a
    solver made inside it names the modules it will launch (``io.rollout.compile_kernels`` builds those,
    not every module an earlier solver of the process made)."""
    seen: set = set()
    _WATCHING.append(seen)
    try:
        yield seen
    finally:
        _WATCHING.remove(seen)


def specialized(module_name: str, scalar) -> SimpleNamespace:
    """Every generic kernel defined in the Python module ``module_name``, bound to ``scalar``
    (float32 or float64), under its own name; compiled together on first launch."""
    kernels = _specialized(module_name, T.resolve(scalar))
    for seen in _WATCHING:
        seen.add(get_module(f"{module_name}_{T.type_name(T.resolve(scalar))}"))
    return kernels


@functools.cache
def _specialized(module_name: str, scalar) -> SimpleNamespace:
    target = get_module(f"{module_name}_{T.type_name(scalar)}")
    kernels = {}
    for name, k in vars(sys.modules[module_name]).items():
        if isinstance(k, Kernel) and k.generic and k.pyfunc.__module__ == module_name:
            kernels[name] = Kernel(k.pyfunc, k.key, target, enable_backward=k.options.get("enable_backward"),
                                        param_types=[bind_scalar(t, scalar) for _, t in k.params])
    return SimpleNamespace(**kernels)
