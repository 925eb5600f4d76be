"""Every differentiable builtin overload in the registry, differentiated through a real kernel and
checked against float64 central finite differences.

The cases are derived from ``xsim.kernels.builtins.BUILTINS``: each differentiable overload gets
concrete float64 argument types (the first candidates that resolve to exactly that overload) and
one generated kernel ``out[i] = xsim.<name>(a0[i], a1[i], ...)``. All generated kernels live in one
module, so they compile in one compiler call. A new differentiable row that cannot be instantiated
or that has no input domain here fails ``test_every_differentiable_overload_has_a_case``.
"""

import hashlib
import itertools

import numpy as np
import pytest

import xsim
from xsim import types as T
from xsim.autodiff import gradcheck
from xsim.kernels.builtins import BUILTINS, resolve_overload
from xsim.kernels.builtins_random import NAMES as RANDOM_NAMES
from xsim.kernels.generated import load_source

F64 = T.float64
M23, M32 = T.matrix((2, 3), F64), T.matrix((3, 2), F64)

# candidate concrete types for each pattern of the registry's pattern language
CANDIDATES = {
    "Float": [F64], "Scalar": [F64], "Int": [T.int32], "Bool": [T.bool_],
    "Vec": [T.vec3d, T.vec2d, T.vec4d], "Vec'": [T.vec2d, T.vec3d, T.vec4d],
    "Vec2": [T.vec2d], "Vec3": [T.vec3d], "Vec4": [T.vec4d],
    "Mat": [M23, T.mat33d], "Mat'": [M32, T.mat33d], "SqMat": [T.mat33d, T.mat22d], "Mat33": [T.mat33d], "Mat44": [T.mat44d],
    "Quat": [T.quatd], "Transform": [T.transformd],
}

# input domains away from singularities and kinks: name -> one sampler per argument position
# (None: the default, components uniform in +-[0.2, 1.5])
POSITIVE = ("positive",)
DOMAINS = {
    "asin": [("uniform", -0.8, 0.8)], "acos": [("uniform", -0.8, 0.8)], "tan": [("uniform", -1.0, 1.0)],
    "sqrt": [POSITIVE], "cbrt": [POSITIVE], "log": [POSITIVE], "log2": [POSITIVE], "log10": [POSITIVE],
    "pow": [POSITIVE, None],
    "clamp": [None, ("const", -0.5), ("const", 0.5)],
    "floor": [("wide",)], "ceil": [("wide",)], "round": [("wide",)], "trunc": [("wide",)],
    "inverse": [("well_conditioned",)], "determinant": [("well_conditioned",)],
    "erfinv": [("uniform", -0.8, 0.8)], "erfcinv": [("uniform", 0.2, 1.8)],
    "smoothstep": [("const", -1.0), ("const", 1.0), ("uniform", -0.8, 0.8)],
    "step": [("wide",)], "nonzero": [("wide",)], "rint": [("wide",)], "frac": [("wide",)],
}


def _pattern_key(p: str) -> str:
    return p[1:] if p.startswith("F") and p != "Float" else p


def instantiate(overload):
    """Concrete argument types resolving to exactly ``overload``, and its return type; None if none."""
    choices = [CANDIDATES[_pattern_key(p)] for p in overload.params]
    for types in itertools.product(*choices):
        found = resolve_overload(overload.name, list(types))
        if found is not None and found[0] is overload:
            return list(types), found[1]
    return None


def type_src(t) -> str:
    """The Python spelling of a type in the generated module."""
    if t is M23:
        return "M23"
    if t is M32:
        return "M32"
    name = T.type_name(t)
    return f"xsim.{name}" if hasattr(xsim, name) and getattr(xsim, name) is t else f"xsim.{t.__name__}"


def collect_cases():
    cases, missing = [], []
    for name, b in BUILTINS.items():
        for k, o in enumerate(b.overloads):
            if not o.differentiable or name in RANDOM_NAMES:  # noise: tests/kernels/test_random.py
                continue
            inst = instantiate(o)
            ident = f"{name}_{k}"
            if inst is None:
                missing.append(f"{name}({', '.join(o.params)}): no candidate argument types")
                continue
            args, ret = inst
            if not any(T.is_float(getattr(t, "_scalar", t)) for t in args):
                missing.append(f"{name}({', '.join(o.params)}): no float argument to differentiate")
                continue
            cases.append((ident, name, o, args, ret))
    return cases, missing


CASES, MISSING = collect_cases()


def kernel_source(cases) -> str:
    lines = ["import xsim", "from xsim import types as T", "",
             "M23 = T.matrix((2, 3), xsim.float64)", "M32 = T.matrix((3, 2), xsim.float64)", ""]
    for ident, name, _, args, ret in cases:
        params = ", ".join(f"a{j}: xsim.array(dtype={type_src(t)})" for j, t in enumerate(args))
        call = ", ".join(f"a{j}[i]" for j in range(len(args)))
        lines += ["", "@xsim.kernel",
                  f"def k_{ident}({params}, out: xsim.array(dtype={type_src(ret)})):",
                  "    i = xsim.tid()",
                  f"    out[i] = xsim.{name}({call})", ""]
    return "\n".join(lines)


# a file named by its content in a per-user folder: the kernels' cache entries (keyed by their files) are
# found again by the next run, and by the NVRTC sweep's process (a fresh temporary folder per import
# rebuilt the 120 kernels with g++ and NVRTC on every run)
GENERATED = load_source(kernel_source(CASES), "builtin_grads")
N = 5  # elements per launch: several random points per overload


def sample(t, how, rng, n):
    """``n`` random float64 values of type ``t`` (flat components) from domain ``how``."""
    shape = (n,) + tuple(t._shape)
    if how is None:
        return rng.uniform(0.2, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    if how[0] == "uniform":
        return rng.uniform(how[1], how[2], shape)
    if how[0] == "positive":
        return rng.uniform(0.3, 2.0, shape)
    if how[0] == "wide":  # step functions: values past +-1, so the output is not all zeros
        return rng.uniform(1.2, 3.8, shape) * rng.choice([-1.0, 1.0], shape)
    if how[0] == "const":
        return np.full(shape, how[1])
    if how[0] == "well_conditioned":
        r = t._shape[0]
        return rng.uniform(-0.5, 0.5, shape) + 2.0 * np.eye(r)
    raise AssertionError(how)


def test_every_differentiable_overload_has_a_case():
    assert not MISSING, "\n".join(MISSING)
    n_diff = sum(o.differentiable for b in BUILTINS.values() for o in b.overloads if b.name not in RANDOM_NAMES)
    assert len(CASES) == n_diff


@pytest.mark.parametrize("ident, name, overload, args, ret", CASES, ids=[c[0] for c in CASES])
def test_builtin_gradient_matches_finite_differences(ident, name, overload, args, ret):
    rng = np.random.default_rng(int(hashlib.sha1(ident.encode()).hexdigest()[:8], 16))
    domain = DOMAINS.get(name, [None] * len(args))
    if name == "clamp":
        # x below, inside and above [-0.5, 0.5], away from the kinks
        x = np.array([-1.2, -0.3, 0.1, 0.4, 0.9])
        values = [x] + [sample(t, how, rng, N) for t, how in zip(args[1:], domain[1:])]
    else:
        values = [sample(t, how, rng, N) for t, how in zip(args, domain)]
    inputs = [xsim.array(v, dtype=t, requires_grad=True) for v, t in zip(values, args)]
    out = xsim.zeros(N, dtype=ret, requires_grad=True)
    kernel = getattr(GENERATED, f"k_{ident}")
    report = gradcheck(kernel, [*inputs, out], atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)
    # the forward ran: the output is not left at zero everywhere
    xsim.launch(kernel, N, inputs=inputs, outputs=[out])
    assert np.any(out.numpy() != 0.0)
