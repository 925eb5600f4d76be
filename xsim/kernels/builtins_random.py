"""Random-number builtins (Warp's PCG generator, ``native/xsim_random.h``): one row per overload.

``rand_init(seed[, offset])`` is an ordinary builtin returning a ``uint32`` state. Every sampler
takes that state as its first argument and advances it: a call ``randf(state)`` gives the value
and rebinds the name ``state`` to the advanced state (see ``Calls.call_sampler``), as Warp's
by-reference ``uint32&`` does. Parameter and return types are concrete; none is differentiable.
"""

from __future__ import annotations

from .. import types as T
from .builtins import BUILTINS, Builtin, Overload, builtin

builtin("rand_init", ["Int"], lambda seed: T.uint32 if seed is T.int32 else None, differentiable=False)
builtin("rand_init", ["Int", "Int"], lambda seed, off: T.uint32 if seed is T.int32 else None,
        differentiable=False)

SAMPLERS: dict[str, list[Overload]] = {}


def sampler(name: str, params: list, returns):
    """Declare one overload of a sampler; ``params`` follow the leading ``uint32`` state."""
    o = Overload(name, (T.uint32, *params), returns, name, differentiable=False)
    SAMPLERS.setdefault(name, []).append(o)
    BUILTINS.setdefault(name, Builtin(name)).overloads.append(
        Overload(name, tuple(T.type_name(p) for p in o.params), returns, name, differentiable=False))


def resolve_sampler(name: str, arg_types: list) -> Overload | None:
    """The overload of sampler ``name`` whose parameter types are exactly ``arg_types``, or None."""
    for o in SAMPLERS[name]:
        if len(o.params) == len(arg_types) and all(p is a for p, a in zip(o.params, arg_types)):
            return o
    return None


sampler("randi", [], T.int32)
sampler("randi", [T.int32, T.int32], T.int32)
sampler("randu", [], T.uint32)
sampler("randu", [T.uint32, T.uint32], T.uint32)
sampler("randf", [], T.float32)
sampler("randf", [T.float32, T.float32], T.float32)
sampler("randn", [], T.float32)
sampler("poisson", [T.float32], T.uint32)
for _shape in ("ring", "disk", "square"):
    sampler(f"sample_unit_{_shape}", [], T.vec2)
for _shape in ("cube", "sphere", "sphere_surface", "hemisphere", "hemisphere_surface"):
    sampler(f"sample_unit_{_shape}", [], T.vec3)
del _shape

NAMES = frozenset(SAMPLERS) | {"rand_init"}  # tested against Warp in tests/kernels/test_random.py
