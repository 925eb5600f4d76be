"""Forward cases of the math library rows (``xsim/kernels/builtins_math.py``) for
``test_builtins_forward.py``: one kernel expression per overload with its numpy/scipy reference."""

from __future__ import annotations

import numpy as np
from scipy import special


def _lerp(a, b, t):
    t = t.reshape((-1,) + (1,) * (a.ndim - 1))
    return a * (1 - t) + b * t


def _smoothstep(a, b, x):
    u = np.clip((x - a) / (b - a), 0.0, 1.0)
    return u * u * (3 - 2 * u)


def _any(f, axes):
    return lambda v: f(v).any(axis=axes)


def math_cases(C) -> list:
    """The cases, built with the forward test's case constructor ``C(name, expr, kinds, ref, out, **domains)``."""
    cs = [
        C("lerp", "xsim.lerp(a0, a1, a2)", "F F F", _lerp, "F"),
        C("lerp", "xsim.lerp(a0, a1, a2)", "V3 V3 F", _lerp, "V3"),
        C("lerp", "xsim.lerp(a0, a1, a2)", "M22 M22 F", _lerp, "M22"),
        C("lerp", "xsim.lerp(a0, a1, a2)", "Q Q F", _lerp, "Q"),
        C("lerp", "xsim.lerp(a0, a1, a2)", "X X F", _lerp, "X"),
        C("smoothstep", "xsim.smoothstep(a0, a1, a2)", "F F F", _smoothstep, "F", a0="neg", a1="pos"),
        C("step", "xsim.step(a0)", "F", lambda x: (x < 0).astype(float), "F"),
        C("step", "xsim.step(a0)", "I", lambda x: (x < 0).astype(int), "I"),
        C("nonzero", "xsim.nonzero(xsim.floor(a0))", "F", lambda x: (np.floor(x) != 0).astype(float), "F"),
        C("nonzero", "xsim.nonzero(a0 % 3)", "I", lambda x: (np.fmod(x, 3) != 0).astype(int), "I"),
        # multiples of 0.5: the halves go to the even neighbour
        C("rint", "xsim.rint(xsim.floor(a0 * 4.0) * 0.5)", "F", lambda x: np.rint(np.floor(x * 4) * 0.5), "F"),
        C("", "xsim.round(xsim.floor(a0 * 4.0) * 0.5)", "F",
          lambda x: np.sign(x) * np.floor(np.abs(np.floor(x * 4) * 0.5) + 0.5), "F"),
        C("frac", "xsim.frac(a0)", "F", lambda x: np.modf(x)[0], "F"),
        C("erf", "xsim.erf(a0)", "F", special.erf, "F"),
        C("erfc", "xsim.erfc(a0)", "F", special.erfc, "F"),
        C("erfinv", "xsim.erfinv(a0)", "F", special.erfinv, "F", a0="unit"),
        C("erfcinv", "xsim.erfcinv(a0 + 1.0)", "F", lambda x: special.erfcinv(x + 1), "F", a0="unit"),
        C("isinf", "int(xsim.isinf(a0))", "F", np.isinf, "I", a0="special"),
        C("mod", "xsim.mod(a0, a1)", "V3 V3", np.fmod, "V3", a1="nonzero"),
        C("argmin", "xsim.argmin(a0)", "V4", lambda v: v.argmin(axis=1), "U"),
        C("argmax", "xsim.argmax(a0)", "V4", lambda v: v.argmax(axis=1), "U"),
        C("min", "xsim.min(a0)", "V3", lambda v: v.min(axis=1), "F"),
        C("max", "xsim.max(a0)", "V4", lambda v: v.max(axis=1), "F"),
        C("cw_mul", "xsim.cw_mul(a0, a1)", "M23 M23", np.multiply, "M23"),
        C("cw_div", "xsim.cw_div(a0, a1)", "M22 M22", np.divide, "M22", a1="nonzero"),
    ]
    for kind, axes in (("V3", 1), ("M22", (1, 2)), ("Q", 1)):
        cs += [
            C("isfinite", "int(xsim.isfinite(a0))", kind, lambda v, a=axes: np.isfinite(v).all(axis=a), "I",
              a0="special"),
            C("isnan", "int(xsim.isnan(a0))", kind, _any(np.isnan, axes), "I", a0="special"),
            C("isinf", "int(xsim.isinf(a0))", kind, _any(np.isinf, axes), "I", a0="special"),
        ]
    return cs
