"""Every overload in the builtins registry, run in a kernel and compared with numpy, in float32
and float64.

``CASES`` lists one kernel expression per overload with its argument kinds and a numpy
reference. The kernels are generated as Python source (one file and one module per float type,
so one compiler call each) and imported. ``test_every_registry_overload_has_a_case`` walks the
registry, so a new builtin row without a case here fails. Every launch is also run by the host
reference (tests/reference.py, through tests/kernels/conftest.py), which computes each builtin from its
own definition; ``test_builtin_forward_at_edge_inputs_matches_the_reference`` adds inputs where the
definitions have their corner cases (zero, halfway, singular matrices, the unit bounds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from builtin_cases_math import math_cases
from reference import ReferenceUnsupported, assert_matches_reference, excused
from reference_values import _intersect_tri_tri

import xsim
from xsim import types as T
from xsim.kernels.builtins import BUILTINS, resolve_overload
from xsim.kernels.builtins_random import NAMES as RANDOM_NAMES
from xsim.kernels.generated import load_source

N = 16

# ------------------------------------------------------------------------------------------------
# numpy references for quaternions (x, y, z, w) and transforms (p, q), batched along axis 0


def q_mul(a, b):
    u, aw, v, bw = a[:, :3], a[:, 3:], b[:, :3], b[:, 3:]
    return np.concatenate([aw * v + bw * u + np.cross(u, v), aw * bw - (u * v).sum(1, keepdims=True)], axis=1)


def q_conj(q):
    return q * np.array([-1, -1, -1, 1])


def q_rotate(q, v):
    qv = np.concatenate([v, np.zeros((len(v), 1))], axis=1)
    return q_mul(q_mul(q, qv), q_conj(q))[:, :3]


def q_matrix(q):
    return np.stack([q_rotate(q, np.tile(e, (len(q), 1))) for e in np.eye(3)], axis=2)


def x_multiply(a, b):
    return np.concatenate([a[:, :3] + q_rotate(a[:, 3:], b[:, :3]), q_mul(a[:, 3:], b[:, 3:])], axis=1)


def x_inverse(t):
    qi = q_conj(t[:, 3:])
    return np.concatenate([-q_rotate(qi, t[:, :3]), qi], axis=1)


def skew(v):
    z = np.zeros(len(v))
    return np.stack([np.stack([z, -v[:, 2], v[:, 1]], 1), np.stack([v[:, 2], z, -v[:, 0]], 1),
                     np.stack([-v[:, 1], v[:, 0], z], 1)], axis=1)


def dot(a, b):
    return (a * b).sum(axis=1)


# ------------------------------------------------------------------------------------------------
# the cases

KIND_TYPES: dict[str, Callable] = {
    "F": lambda F: F, "I": lambda F: T.int32, "U": lambda F: T.uint32, "B": lambda F: T.bool_,
    "V2": lambda F: T.vector(2, F), "V3": lambda F: T.vector(3, F), "V4": lambda F: T.vector(4, F),
    "M22": lambda F: T.matrix((2, 2), F), "M33": lambda F: T.matrix((3, 3), F),
    "M44": lambda F: T.matrix((4, 4), F), "M23": lambda F: T.matrix((2, 3), F),
    "M32": lambda F: T.matrix((3, 2), F), "Q": lambda F: T.quaternion(F), "X": lambda F: T.transformation(F),
    "IV3": lambda F: T.vector(3, T.int32), "UM22": lambda F: T.matrix((2, 2), T.uint32),
}


@dataclass
class Case:
    """One kernel expression over arguments ``a0, a1, ...`` of the given kinds, with its reference."""

    name: str                 # the registry builtin it exercises ("" for the special forms)
    expr: str
    kinds: list[str]
    ref: Callable
    out: str
    domain: dict = field(default_factory=dict)  # arg index -> input domain name

    @property
    def id(self) -> str:
        return f"{self.name or 'special'}:{self.expr}:{','.join(self.kinds)}"


def _warp_sign(x):
    """Warp's sign: -1 below zero, 1 otherwise (0, -0.0 and NaN give 1)."""
    return np.where(x < 0, -1, 1).astype(x.dtype)


def C(name, expr, kinds, ref, out, **domain):
    return Case(name, expr, kinds.split(), ref, out, {int(k[1:]): v for k, v in domain.items()})


def _cases() -> list[Case]:
    cs = []
    for op, sym, f in (("add", "+", np.add), ("sub", "-", np.subtract)):
        for k in ("F", "V3", "M23", "Q", "X"):
            cs.append(C(op, f"a0 {sym} a1", f"{k} {k}", f, k))
    cs += [
        C("mul", "a0 * a1", "F F", np.multiply, "F"),
        C("mul", "a0 * a1", "V4 F", lambda v, s: v * s[:, None], "V4"),
        C("mul", "a0 * a1", "F V2", lambda s, v: v * s[:, None], "V2"),
        C("mul", "a0 * a1", "M33 F", lambda m, s: m * s[:, None, None], "M33"),
        C("mul", "a0 * a1", "F M22", lambda s, m: m * s[:, None, None], "M22"),
        C("mul", "a0 * a1", "X F", lambda x, s: x * s[:, None], "X"),
        C("mul", "a0 * a1", "F X", lambda s, x: x * s[:, None], "X"),
        C("mul", "a0 * a1", "Q F", lambda q, s: q * s[:, None], "Q"),
        C("mul", "a0 * a1", "F Q", lambda s, q: q * s[:, None], "Q"),
        C("mul", "a0 * a1", "M23 V3", lambda m, v: np.einsum("nij,nj->ni", m, v), "V2"),
        C("mul", "a0 * a1", "V2 M23", lambda v, m: np.einsum("ni,nij->nj", v, m), "V3"),
        C("mul", "a0 * a1", "Q Q", q_mul, "Q"),
        C("mul", "a0 * a1", "X X", x_multiply, "X"),
        C("mul", "a0 * a1", "M23 M32", np.matmul, "M22"),
        C("div", "a0 / a1", "F F", np.divide, "F", a1="nonzero"),
        C("div", "a0 / a1", "V3 F", lambda v, s: v / s[:, None], "V3", a1="nonzero"),
        C("div", "a0 / a1", "F V3", lambda s, v: s[:, None] / v, "V3", a1="nonzero"),
        C("div", "a0 / a1", "M33 F", lambda m, s: m / s[:, None, None], "M33", a1="nonzero"),
        C("div", "a0 / a1", "Q F", lambda q, s: q / s[:, None], "Q", a1="nonzero"),
        C("div", "a0 / a1", "F Q", lambda s, q: s[:, None] / q, "Q", a1="nonzero"),
        C("div", "a0 / a1", "F M22", lambda s, m: s[:, None, None] / m, "M22", a1="nonzero"),
        C("floordiv", "a0 // a1", "F F", np.floor_divide, "F", a1="nonzero"),
        C("mod", "a0 % a1", "F F", np.fmod, "F", a1="nonzero"),
        C("", "a0 // a1", "I I", np.floor_divide, "I", a1="nonzero"),
        C("", "a0 % a1", "I I", np.fmod, "I", a1="nonzero"),
    ]
    for k in ("F", "V3", "M33", "Q"):
        cs.append(C("neg", "-a0", k, np.negative, k))
    for op, sym, f in (("lt", "<", np.less), ("le", "<=", np.less_equal), ("gt", ">", np.greater),
                       ("ge", ">=", np.greater_equal)):
        for k in ("F", "B"):
            cs.append(C(op, f"int(a0 {sym} a1)", f"{k} {k}", f, "I", a1="same_as_0"))
    for op, sym, f in (("eq", "==", np.equal), ("ne", "!=", np.not_equal)):
        for k in ("F", "B", "V3", "M22", "Q"):
            axes = tuple(range(1, 1 + len(KIND_TYPES[k](T.float32)._shape))) if k not in ("F", "B") else ()
            cs.append(C(op, f"int(a0 {sym} a1)", f"{k} {k}",
                        lambda a, b, f=f, axes=axes: (np.all(a == b, axis=axes) if f is np.equal
                                                      else np.any(a != b, axis=axes)), "I", a1="same_as_0"))
    for op, sym, f in (("bit_and", "&", np.bitwise_and), ("bit_or", "|", np.bitwise_or),
                       ("bit_xor", "^", np.bitwise_xor), ("lshift", "<<", np.left_shift),
                       ("rshift", ">>", np.right_shift)):
        for k in ("I", "IV3", "UM22"):
            cs.append(C(op, f"a0 {sym} a1", f"{k} {k}", f, k, a1="shift"))
    for k in ("I", "IV3", "UM22"):
        cs.append(C("invert", "~a0", k, np.invert, k))
    unary = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
             "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "sqrt": np.sqrt,
             "cbrt": np.cbrt, "exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10,
             "degrees": np.degrees, "radians": np.radians, "floor": np.floor, "ceil": np.ceil,
             "round": np.round, "trunc": np.trunc}
    domains = {"asin": "unit", "acos": "unit", "sqrt": "pos", "log": "pos", "log2": "pos", "log10": "pos"}
    for name, f in unary.items():
        cs.append(C(name, f"xsim.{name}(a0)", "F", f, "F", **({"a0": domains[name]} if name in domains else {})))
    cs += [
        C("atan2", "xsim.atan2(a0, a1)", "F F", np.arctan2, "F"),
        C("pow", "xsim.pow(a0, a1)", "F F", np.power, "F", a0="pos"),
        C("pow", "a0 ** a1", "F F", np.power, "F", a0="pos"),
        C("abs", "xsim.abs(a0)", "F", np.abs, "F"),
        C("abs", "abs(a0)", "I", np.abs, "I"),
        C("abs", "xsim.abs(a0)", "V3", np.abs, "V3"),
        C("sign", "xsim.sign(a0)", "F", _warp_sign, "F", a0="special"),
        C("sign", "xsim.sign(a0)", "I", _warp_sign, "I"),
        C("sign", "xsim.sign(a0)", "V4", _warp_sign, "V4"),
        C("min", "xsim.min(a0, a1)", "F F", np.minimum, "F"),
        C("min", "min(a0, a1)", "V3 V3", np.minimum, "V3"),
        C("max", "xsim.max(a0, a1)", "F F", np.maximum, "F"),
        C("max", "max(a0, a1)", "V2 V2", np.maximum, "V2"),
        C("clamp", "xsim.clamp(a0, a1, a2)", "F F F", lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), "F",
          a1="neg", a2="pos"),
        C("isfinite", "int(xsim.isfinite(a0))", "F", np.isfinite, "I", a0="special"),
        C("isnan", "int(xsim.isnan(a0))", "F", np.isnan, "I", a0="special"),
        C("intersect_tri_tri", "xsim.intersect_tri_tri(a0, a1, a2, a3, a4, a5)", "V3 V3 V3 V3 V3 V3",
          lambda *corners: np.array([_intersect_tri_tri(*(c[i] for c in corners)) for i in range(len(corners[0]))]),
          "I"),
        C("dot", "xsim.dot(a0, a1)", "V3 V3", dot, "F"),
        C("dot", "xsim.dot(a0, a1)", "Q Q", dot, "F"),
        C("cross", "xsim.cross(a0, a1)", "V3 V3", np.cross, "V3"),
        C("length", "xsim.length(a0)", "V4", lambda v: np.linalg.norm(v, axis=1), "F"),
        C("length", "xsim.length(a0)", "Q", lambda v: np.linalg.norm(v, axis=1), "F", a0="raw"),
        C("length_sq", "xsim.length_sq(a0)", "V2", lambda v: dot(v, v), "F"),
        C("length_sq", "xsim.length_sq(a0)", "Q", lambda v: dot(v, v), "F", a0="raw"),
        C("normalize", "xsim.normalize(a0)", "V3", lambda v: v / np.linalg.norm(v, axis=1)[:, None], "V3"),
        C("normalize", "xsim.normalize(a0)", "Q", lambda v: v / np.linalg.norm(v, axis=1)[:, None], "Q",
          a0="raw"),
        C("outer", "xsim.outer(a0, a1)", "V3 V2", lambda a, b: np.einsum("ni,nj->nij", a, b), "M32"),
        C("outer", "xsim.outer(a0, a1)", "V3 V3", lambda a, b: np.einsum("ni,nj->nij", a, b), "M33"),
        C("cw_mul", "xsim.cw_mul(a0, a1)", "V3 V3", np.multiply, "V3"),
        C("cw_div", "xsim.cw_div(a0, a1)", "V4 V4", np.divide, "V4", a1="nonzero"),
        C("transpose", "xsim.transpose(a0)", "M23", lambda m: m.transpose(0, 2, 1), "M32"),
        C("inverse", "xsim.inverse(a0)", "M22", np.linalg.inv, "M22", a0="invertible"),
        C("inverse", "xsim.inverse(a0)", "M33", np.linalg.inv, "M33", a0="invertible"),
        C("inverse", "xsim.inverse(a0)", "M44", np.linalg.inv, "M44", a0="invertible"),
        C("determinant", "xsim.determinant(a0)", "M22", np.linalg.det, "F"),
        C("determinant", "xsim.determinant(a0)", "M33", np.linalg.det, "F"),
        C("determinant", "xsim.determinant(a0)", "M44", np.linalg.det, "F"),
        C("trace", "xsim.trace(a0)", "M33", lambda m: np.trace(m, axis1=1, axis2=2), "F"),
        C("diag", "xsim.diag(a0)", "V3", lambda v: v[:, :, None] * np.eye(3), "M33"),
        C("skew", "xsim.skew(a0)", "V3", skew, "M33"),
        C("ddot", "xsim.ddot(a0, a1)", "M23 M23", lambda a, b: (a * b).sum(axis=(1, 2)), "F"),
        C("quat_from_axis_angle", "xsim.quat_from_axis_angle(a0, a1)", "V3 F",
          lambda ax, t: np.concatenate([ax * np.sin(t / 2)[:, None], np.cos(t / 2)[:, None]], 1), "Q", a0="unitvec"),
        C("quat_rotate", "xsim.quat_rotate(a0, a1)", "Q V3", q_rotate, "V3"),
        C("quat_rotate_inv", "xsim.quat_rotate_inv(a0, a1)", "Q V3", lambda q, v: q_rotate(q_conj(q), v), "V3"),
        C("quat_inverse", "xsim.quat_inverse(a0)", "Q", q_conj, "Q"),
        C("quat_to_matrix", "xsim.quat_to_matrix(a0)", "Q", q_matrix, "M33"),
        C("transform_point", "xsim.transform_point(a0, a1)", "X V3", lambda t, v: t[:, :3] + q_rotate(t[:, 3:], v),
          "V3"),
        C("transform_vector", "xsim.transform_vector(a0, a1)", "X V3", lambda t, v: q_rotate(t[:, 3:], v), "V3"),
        C("transform_point", "xsim.transform_point(a0, a1)", "M44 V3",
          lambda m, v: np.einsum("nij,nj->ni", m[:, :3, :3], v) + m[:, :3, 3], "V3"),
        C("transform_vector", "xsim.transform_vector(a0, a1)", "M44 V3",
          lambda m, v: np.einsum("nij,nj->ni", m[:, :3, :3], v), "V3"),
        C("transform_multiply", "xsim.transform_multiply(a0, a1)", "X X", x_multiply, "X"),
        C("transform_inverse", "xsim.transform_inverse(a0)", "X", x_inverse, "X"),
        C("transform_get_translation", "xsim.transform_get_translation(a0)", "X", lambda t: t[:, :3], "V3"),
        C("transform_get_rotation", "xsim.transform_get_rotation(a0)", "X", lambda t: t[:, 3:], "Q"),
        # the special forms the frontend handles itself (not registry rows)
        C("", "xsim.where(a0 > 0.0, a0, a1)", "F F", lambda a, b: np.where(a > 0, a, b), "F"),
        C("", "xsim.select(a0 > 0.0, a0, a1)", "F F", lambda a, b: np.where(a > 0, b, a), "F"),
        C("", "xsim.identity(n=3, dtype=F) * a0[0]", "V3",
          lambda v: np.eye(3) * v[:, :1, None], "M33"),
        C("", "xsim.matrix_from_rows(a0, a1)", "V3 V3", lambda a, b: np.stack([a, b], axis=1), "M23"),
        C("", "xsim.matrix_from_cols(a0, a1)", "V3 V3", lambda a, b: np.stack([a, b], axis=2), "M32"),
        C("", "xsim.quat_identity(dtype=F) * a0", "F", lambda s: np.outer(s, [0, 0, 0, 1]), "Q"),
        C("", "F(len(a0)) * 1.5 + a1", "V4 F", lambda v, s: 6.0 + s, "F"),
    ]
    return cs


CASES = _cases() + math_cases(C)

# ------------------------------------------------------------------------------------------------
# inputs


def make_input(kind: str, F, domain: str | None, rng, previous: list) -> np.ndarray:
    """Random inputs of one argument (as the numpy array the xsim array is made from)."""
    t = KIND_TYPES[kind](F)
    shape = (N,) + tuple(t._shape)
    np_t = t._np if T.is_scalar(t) else t._scalar._np
    if domain == "same_as_0":  # every other element equal to the first argument's
        x = make_input(kind, F, None, rng, previous)
        x[::2] = previous[0][::2]
        return x
    if kind == "B":
        return rng.integers(0, 2, N).astype(bool)
    if kind in ("I", "IV3", "UM22"):
        if domain == "shift":
            return rng.integers(0, 8, shape).astype(np_t)
        x = rng.integers(0 if kind == "UM22" else -100, 100, shape)
        if domain == "nonzero":
            x = np.where(x == 0, 7, x)
        return x.astype(np_t)
    if domain == "special":
        return np.resize(np.array([np.nan, np.inf, -np.inf, 0.0, 1.5, -2.0, 1e30, -np.nan]), shape).astype(np_t)
    if kind == "Q" and domain != "raw":
        q = rng.normal(size=shape)
        return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np_t)
    if kind == "X":
        q = rng.normal(size=(N, 4))
        return np.concatenate([rng.uniform(-2, 2, (N, 3)), q / np.linalg.norm(q, axis=1, keepdims=True)],
                              axis=1).astype(np_t)
    if domain == "unitvec":
        v = rng.normal(size=shape)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np_t)
    if domain == "invertible":
        return (rng.uniform(-1, 1, shape) + 3 * np.eye(shape[1])).astype(np_t)
    lo, hi = {"pos": (0.2, 3.0), "neg": (-3.0, -0.2), "unit": (-0.9, 0.9)}.get(domain, (-2.0, 2.0))
    x = rng.uniform(lo, hi, shape)
    if domain == "nonzero":
        x = np.sign(x) * (np.abs(x) + 0.5)
    return x.astype(np_t)


# ------------------------------------------------------------------------------------------------
# the generated kernel module (one per float type)


def _kernel_source(F) -> str:
    fname = T.type_name(F)
    lines = ["import xsim", "from xsim import types as T", f"F = xsim.{fname}"]
    for kind, make in KIND_TYPES.items():
        lines.append(f"{kind}_t = {_type_expr(make(T.float32), 'F')}")
    for n, case in enumerate(CASES):
        params = [f"a{k}_arr: xsim.array(dtype={kind}_t)" for k, kind in enumerate(case.kinds)]
        params.append(f"out: xsim.array(dtype={case.out}_t)")
        expr = case.expr
        for k in range(len(case.kinds)):
            expr = expr.replace(f"a{k}", f"a{k}_arr[i]")
        lines += ["", "", f"@xsim.kernel(module='xsim_tests_builtins_{fname}', enable_backward=False)",
                  f"def case_{n}({', '.join(params)}):", "    i = xsim.tid()", f"    out[i] = {expr}"]
    return "\n".join(lines) + "\n"


def _type_expr(t, f) -> str:
    if T.is_int(t) or t is T.bool_:
        return f"xsim.{T.type_name(t)}"
    if T.is_scalar(t):
        return f
    if T.is_int(t._scalar):
        f = _type_expr(t._scalar, f)
    kind = t._kind
    if kind == "vector":
        return f"T.vector({t._length}, {f})"
    if kind == "matrix":
        return f"T.matrix({t._shape}, {f})"
    return f"T.quaternion({f})" if kind == "quat" else f"T.transformation({f})"


FLOATS = [pytest.param(xsim.float32, id="float32"), pytest.param(xsim.float64, id="float64")]
_MODULES: dict = {}


def kernels_for(F):
    if F not in _MODULES:
        _MODULES[F] = load_source(_kernel_source(F), f"builtin_cases_{T.type_name(F)}")
    return _MODULES[F]


# ------------------------------------------------------------------------------------------------
# tests


def test_every_registry_overload_has_a_case():
    covered = set()
    for F in (xsim.float32, xsim.float64):
        for case in CASES:
            if not case.name:
                continue
            found = resolve_overload(case.name, [KIND_TYPES[k](F) for k in case.kinds])
            assert found is not None, f"{case.id} does not resolve"
            covered.add(id(found[0]))
    missing = [f"{b.name}({', '.join(o.params)})" for b in BUILTINS.values() for o in b.overloads
               if id(o) not in covered and b.name not in RANDOM_NAMES]  # those: test_random.py, against Warp
    assert not missing, f"builtin overloads without a forward test case: {missing}"


@pytest.mark.parametrize("F", FLOATS)
@pytest.mark.parametrize("n", range(len(CASES)), ids=[c.id for c in CASES])
def test_builtin_forward_matches_numpy(F, n):
    case = CASES[n]
    rng = np.random.default_rng(1000 + n)
    inputs: list[np.ndarray] = []
    for k, kind in enumerate(case.kinds):
        inputs.append(make_input(kind, F, case.domain.get(k), rng, inputs))
    args = [xsim.array(x, dtype=KIND_TYPES[kind](F)) for x, kind in zip(inputs, case.kinds)]
    out = xsim.zeros(N, dtype=KIND_TYPES[case.out](F))
    xsim.launch(getattr(kernels_for(F), f"case_{n}"), N, inputs=args, outputs=[out])
    expected = case.ref(*[x.astype(np.float64) if x.dtype.kind == "f" else x for x in inputs])
    got = out.numpy()
    if case.out in ("I", "U", "B"):
        np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype))
    else:
        rtol = 2e-5 if F is xsim.float32 else 1e-12
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)


# per element, every component of every argument takes one of these: zero (sign, normalize, singular
# inverse and determinant, 0/0, atan2(0, 0)), halfway cases of round, the ends of asin/acos's domain
EDGES = np.array([0.0, 0.5, -0.5, 2.5, -1.5, 1.0, -1.0, 0.0, 3.0, -0.0, 1.5, -2.5, 0.25, 0.0, -1.0, 2.0])


@pytest.mark.parametrize("F", FLOATS)
@pytest.mark.parametrize("n", range(len(CASES)), ids=[c.id for c in CASES])
def test_builtin_forward_at_edge_inputs_matches_the_reference(F, n):
    case = CASES[n]
    args = []
    for k, kind in enumerate(case.kinds):
        t = KIND_TYPES[kind](F)
        shape = (N,) + tuple(t._shape)
        edges = np.roll(EDGES, 3 * k)  # the arguments of one element differ
        if T.is_scalar(t) and T.is_int(t):
            unsigned = np.iinfo(t._np).min == 0
            x = (np.abs(edges) * 2 if case.domain.get(k) == "shift" or unsigned else edges * 4).astype(t._np)
        elif kind == "B":
            x = edges > 0
        else:
            x = np.broadcast_to(edges.reshape((N,) + (1,) * len(t._shape)), shape).astype(t._scalar._np)
        args.append(xsim.array(np.ascontiguousarray(x), dtype=t))
    out = xsim.zeros(N, dtype=KIND_TYPES[case.out](F))
    try:
        assert_matches_reference(getattr(kernels_for(F), f"case_{n}"), N, args, [out])
    except ReferenceUnsupported as e:
        if not excused(str(e), {}):
            raise
        pytest.skip(str(e))  # a builtin listed in reference.NOT_IMPLEMENTED, named here
