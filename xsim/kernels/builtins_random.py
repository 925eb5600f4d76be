"""Random-number and noise builtins (Warp's PCG generator and Perlin noise, ``native/xsim_random.h``):
one row per overload, with concrete parameter types (the state is always ``uint32``).

``rand_init(seed[, offset])`` is an ordinary builtin returning a ``uint32`` state. Every sampler
takes that state as its first argument and advances it: a call ``randf(state)`` gives the value
and rebinds the name ``state`` to the advanced state (see ``Calls.call_stateful``), as Warp's
by-reference ``uint32&`` does; samplers carry no gradient. ``noise``/``pnoise``/``curlnoise`` read
the state without advancing it and are differentiable in their position.
"""

from __future__ import annotations

from .. import types as T
from .builtins import BUILTINS, Builtin, Overload, builtin

builtin("rand_init", ["Int"], lambda seed: T.uint32 if seed is T.int32 else None, differentiable=False)
builtin("rand_init", ["Int", "Int"], lambda seed, off: T.uint32 if seed is T.int32 else None,
        differentiable=False)

STATEFUL: dict[str, list[Overload]] = {}  # every builtin taking a uint32 state first
SAMPLERS: set[str] = set()                # those that advance it
DEFAULTS: dict[int, tuple] = {}           # id(overload) -> values of its trailing optional parameters


def stateful(name: str, params: list, returns, advances: bool, defaults: tuple = ()):
    """Declare one overload; ``params`` follow the leading ``uint32`` state."""
    o = Overload(name, (T.uint32, *params), returns, name, differentiable=not advances)
    STATEFUL.setdefault(name, []).append(o)
    DEFAULTS[id(o)] = defaults
    if advances:
        SAMPLERS.add(name)
    BUILTINS.setdefault(name, Builtin(name)).overloads.append(
        Overload(name, tuple(T.type_name(p) for p in o.params), returns, name, o.differentiable))


def sampler(name: str, params: list, returns):
    stateful(name, params, returns, advances=True)


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
sampler("sample_triangle", [], T.vec2)
for _shape in ("cube", "sphere", "sphere_surface", "hemisphere", "hemisphere_surface"):
    sampler(f"sample_unit_{_shape}", [], T.vec3)

for _n, _x in enumerate((T.float32, T.vec2, T.vec3, T.vec4), start=1):
    stateful("noise", [_x], T.float32, advances=False)
    stateful("pnoise", [_x] + [T.int32] * _n, T.float32, advances=False)
_CURL_DEFAULTS = (1, 2.0, 0.5)  # octaves, lacunarity, gain
for _x, _r in ((T.vec2, T.vec2), (T.vec3, T.vec3), (T.vec4, T.vec3)):
    stateful("curlnoise", [_x, T.uint32, T.float32, T.float32], _r, advances=False, defaults=_CURL_DEFAULTS)
del _shape, _n, _x, _r

NAMES = frozenset(STATEFUL) | {"rand_init"}  # tested against Warp in tests/kernels/test_random.py
