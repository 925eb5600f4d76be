"""A random-kernel gradient fuzzer: hypothesis draws kernel *source* from a small grammar, the
kernels are written to a module file, imported and differentiated, and the tape's gradients are
compared with float64 central finite differences. Each kernel's forward outputs are also compared with
the host reference (tests/reference.py): a finite difference of a wrong forward function agrees with
the adjoint of that same wrong function, so only the reference sees a forward bug.

The grammar covers float64 scalars, vec3d, mat33d, quatd and a struct (Frame) as locals, builtins
(smooth and kinked, quaternion and transform ops), component writes and in-place component ops on
local vectors, matrices and struct fields, aliases, if/else and ternaries,
static (unrolled) and dynamic loops (runtime bounds, while, break, continue), calls to funcs that
alias, loop and return early, reads of neighbouring elements (threads colliding on gradients),
component writes and atomic adds into outputs.

Each hypothesis example generates KERNELS_PER_MODULE kernels into one module (one compiler call).
CI runs a bounded number of examples; ``pytest -m fuzz`` runs the long version
(``XSIM_FUZZ_EXAMPLES`` sets how many; ``XSIM_FUZZ_STATS=path`` appends counts per example).
"""

import hashlib
import json
import os
import random

import numpy as np
import pytest
from fuzz_common import COMMON, Generator, load_module
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import reference_differences

import xsim
from xsim.autodiff import gradcheck

N = 4                   # threads per launch (and elements per array)
KERNELS_PER_MODULE = 4
MAX_DEPTH = 3

PRELUDE = '''import xsim

A = xsim.array(dtype=xsim.float64)
AV = xsim.array(dtype=xsim.vec3d)


@xsim.func
def f_alias(v: xsim.vec3d, s: xsim.float64) -> xsim.vec3d:
    w = v
    w[1] = w[1] * s
    if w[0] > s:
        w[2] = s
    else:
        w = w * 2.0
    return w + v


@xsim.func
def f_loop(s: xsim.float64, n: int) -> xsim.float64:
    r = s
    for _k in range(n):
        r = xsim.sin(r) * s + 0.5 * r
        if r > 1.5:
            break
    return r


@xsim.struct
class Frame:
    p: xsim.vec3d
    s: xsim.float64


@xsim.func
def f_early(s: xsim.float64, t: xsim.float64) -> xsim.float64:
    if s > t:
        return s * t
    return s - t * t

'''

SIGNATURE = "(a: A, b: A, u: AV, w: AV, n: int, ys: A, yv: AV, tot: A)"


class KernelGen(Generator):
    """Draws one kernel body. ``env`` maps names in scope to 's' (float64), 'v' (vec3d), 'm' (mat33d),
    'q' (quatd), 'f' (a Frame struct) or 'i' (an int: loop variables and counters)."""

    # -- expressions ------------------------------------------------------------------------------

    def scalar(self, env, d) -> str:
        leaves = ["var", "lit", "read", "read_near", "comp"] + (["int"] if self.names(env, "i") else [])
        if d <= 0 or self.chance(0.3):
            kind = self.pick(leaves)
            if kind == "var" and self.names(env, "s"):
                return self.pick(self.names(env, "s"))
            if kind == "lit":
                # typed: an untyped literal alone in a builtin call would make it float32
                return self.pick(["xsim.float64(0.5)", "xsim.float64(2.0)", "xsim.float64(-1.5)"])
            if kind == "read_near":
                return f"{self.pick(['a', 'b'])}[(i + 1) % len(a)]"
            if kind == "comp" and self.names(env, "v"):
                v = self.pick(self.names(env, "v"))
                return self.pick([f"{v}.x", f"{v}.y", f"{v}[2]", f"{v}[1]"])
            if kind == "int":
                return f"xsim.float64({self.pick(self.names(env, 'i'))})"
            return f"{self.pick(['a', 'b'])}[i]"
        x = lambda: self.scalar(env, d - 1)
        v = lambda: self.vector(env, d - 1)
        form = self.pick(["add", "sub", "mul", "neg", "safe_div", "sin", "cos", "tanh", "atan", "sqrt", "log",
                          "abs", "min", "max", "clamp", "dot", "length", "ternary", "where", "trace", "det",
                          "f_loop", "f_early", "pow", "atan2", "quat", "frame"])
        if form == "add":
            return f"({x()} + {x()})"
        if form == "sub":
            return f"({x()} - {x()})"
        if form == "mul":
            return f"({x()} * {x()})"
        if form == "neg":
            return f"(-{x()})"
        if form == "safe_div":
            y = x()
            return f"({x()} / ({y} * {y} + 1.0))"
        if form in ("sin", "cos", "tanh", "atan", "abs"):
            return f"xsim.{form}({x()})"
        if form == "sqrt":
            y = x()
            return f"xsim.sqrt({y} * {y} + 0.5)"
        if form == "log":
            y = x()
            return f"xsim.log({y} * {y} + 1.0)"
        if form == "pow":
            y = x()
            return f"xsim.pow({y} * {y} + 0.5, {self.pick(['1.5', '0.5', '-1.0'])})"
        if form == "atan2":
            return f"xsim.atan2({x()}, {x()} + 3.0)"
        if form in ("min", "max"):
            return f"xsim.{form}({x()}, {x()})"
        if form == "clamp":
            return f"xsim.clamp({x()}, -1.0, 1.0)"
        if form == "dot":
            return f"xsim.dot({v()}, {v()})"
        if form == "length":
            return f"xsim.sqrt(xsim.length_sq({v()}) + 0.25)"
        if form == "ternary":
            return f"({x()} if {x()} > {x()} else {x()})"
        if form == "where":
            return f"xsim.where({x()} < {x()}, {x()}, {x()})"
        if form in ("trace", "det"):
            m = self.matrix(env, d - 1)
            return f"xsim.trace({m})" if form == "trace" else f"xsim.determinant({m})"
        if form == "f_loop":
            return f"f_loop({x()}, n)"
        if form == "quat":
            q = self.quat(env, d - 1)
            return self.pick([f"xsim.dot({q}, xsim.quatd(0.1, 0.2, 0.3, 0.4))", f"{q}[3]", f"{q}[0]"])
        if form == "frame" and self.names(env, "f"):
            f = self.pick(self.names(env, "f"))
            return self.pick([f"{f}.s", f"{f}.p[1]", f"{f}.p.z"])
        return f"f_early({x()}, {x()})"

    def vector(self, env, d) -> str:
        if d <= 0 or self.chance(0.3):
            kind = self.pick(["var", "read", "read_near", "build"])
            if kind == "var" and self.names(env, "v"):
                return self.pick(self.names(env, "v"))
            if kind == "read_near":
                return f"{self.pick(['u', 'w'])}[(i + 1) % len(u)]"
            if kind == "build" and d > 0:
                return f"xsim.vec3d({self.scalar(env, d - 1)}, {self.scalar(env, 0)}, {self.scalar(env, 0)})"
            return f"{self.pick(['u', 'w'])}[i]"
        x = lambda: self.scalar(env, d - 1)
        v = lambda: self.vector(env, d - 1)
        form = self.pick(["add", "sub", "scale", "scale_r", "neg", "cross", "cw_mul", "matvec", "normalize",
                          "f_alias", "ternary", "rotate", "rotate_q", "transform", "frame"])
        if form == "add":
            return f"({v()} + {v()})"
        if form == "sub":
            return f"({v()} - {v()})"
        if form == "scale":
            return f"({x()} * {v()})"
        if form == "scale_r":
            return f"({v()} * {x()})"
        if form == "neg":
            return f"(-{v()})"
        if form == "cross":
            return f"xsim.cross({v()}, {v()})"
        if form == "cw_mul":
            return f"xsim.cw_mul({v()}, {v()})"
        if form == "matvec":
            return f"({self.matrix(env, d - 1)} * {v()})"
        if form == "normalize":
            return f"xsim.normalize({v()} + xsim.vec3d(3.0, 0.0, 0.0))"
        if form == "f_alias":
            return f"f_alias({v()}, {x()})"
        if form == "ternary":
            return f"({v()} if {x()} > {x()} else {v()})"
        if form == "rotate_q":
            return f"xsim.{self.pick(['quat_rotate', 'quat_rotate_inv'])}({self.quat(env, d - 1)}, {v()})"
        if form == "transform":
            return f"xsim.transform_point(xsim.transformd({v()}, {self.quat(env, d - 1)}), {v()})"
        if form == "frame" and self.names(env, "f"):
            return f"{self.pick(self.names(env, 'f'))}.p"
        return f"xsim.quat_rotate(xsim.quat_from_axis_angle(xsim.vec3d(0.0, 0.6, 0.8), {x()}), {v()})"

    def quat(self, env, d) -> str:
        if d <= 0 or self.chance(0.4):
            if self.names(env, "q") and self.chance(0.6):
                return self.pick(self.names(env, "q"))
            axis = f"xsim.normalize({self.vector(env, max(d - 1, 0))} + xsim.vec3d(0.0, 0.0, 3.0))"
            return f"xsim.quat_from_axis_angle({axis}, {self.scalar(env, max(d - 1, 0))})"
        q = lambda: self.quat(env, d - 1)
        form = self.pick(["mul", "inverse", "normalize", "scale"])
        if form == "mul":
            return f"({q()} * {q()})"
        if form == "scale":
            return f"({q()} * {self.scalar(env, d - 1)})"
        return f"xsim.{'quat_inverse' if form == 'inverse' else 'normalize'}({q()})"

    def matrix(self, env, d) -> str:
        if d <= 0 or self.chance(0.4):
            if self.names(env, "m") and self.chance(0.6):
                return self.pick(self.names(env, "m"))
            v = self.vector(env, max(d - 1, 0))
            return self.pick([f"xsim.outer({v}, {self.vector(env, 0)})", f"xsim.skew({v})", f"xsim.diag({v})"])
        m = lambda: self.matrix(env, d - 1)
        form = self.pick(["add", "scale", "transpose", "matmul"])
        if form == "add":
            return f"({m()} + {m()})"
        if form == "scale":
            return f"({m()} * {self.scalar(env, d - 1)})"
        if form == "transpose":
            return f"xsim.transpose({m()})"
        return f"({m()} * {m()})"

    # -- statements ---------------------------------------------------------------------------------

    def stmt(self, env, active, depth, ind, loop) -> list[str]:
        kinds = ["new_s", "new_v", "new_m", "new_q", "new_f", "reassign", "alias", "comp_write", "comp_inplace",
                 "mat_write", "field_write", "out_comp", "out_atomic", "atomic_tot"]
        if depth > 0:
            kinds += ["if", "static_for", "dynamic_for", "while"]
        if loop:
            kinds += ["break", "continue", "reassign", "reassign", "comp_inplace"]  # loop-carried values
        kind = self.pick(kinds)
        d = self.ints(1, MAX_DEPTH)
        makers = {"new_s": self.scalar, "new_v": self.vector, "new_m": self.matrix, "new_q": self.quat}
        if kind in makers:  # a new local of one value kind ("s", "v", "m", "q")
            t = kind[-1]
            name = self.fresh(t)
            line = f"{ind}{name} = {makers[kind](env, d)}"
            env[name] = t
            return [line]
        if kind == "new_f":
            name = self.fresh("f")
            if self.chance(0.5):
                line = [f"{ind}{name} = Frame(p={self.vector(env, d - 1)}, s={self.scalar(env, d - 1)})"]
            else:
                line = [f"{ind}{name} = Frame()", f"{ind}{name}.p = {self.vector(env, d - 1)}"]
            env[name] = "f"
            return line
        if kind == "field_write":
            fs = self.names(env, "f")
            if not fs:
                return []
            f = self.pick(fs)
            target = self.pick([f"{f}.s", f"{f}.p[0]", f"{f}.p.y", f"{f}.p"])
            rhs = self.vector(env, d - 1) if target.endswith(".p") else self.scalar(env, d - 1)
            return [f"{ind}{target} {self.pick(['=', '+='])} {rhs}"]
        if kind == "reassign":
            options = [n for n, k in env.items() if k in "svmq"]
            if not options:
                return []
            name = self.pick(sorted(options))
            expr = {"s": self.scalar, "v": self.vector, "m": self.matrix, "q": self.quat}[env[name]](env, d)
            op = self.pick(["=", "= " + name + " * 0.5 +"]) if env[name] in "sv" else "="
            return [f"{ind}{name} {op} {expr}"]
        if kind == "alias":
            options = [n for n, k in env.items() if k in "vmqf"]
            if not options:
                return []
            src = self.pick(sorted(options))
            name = self.fresh(env[src])
            env[name] = env[src]
            return [f"{ind}{name} = {src}"]
        if kind in ("comp_write", "comp_inplace"):
            vs = self.names(env, "v")
            if not vs:
                return []
            v = self.pick(vs)
            target = self.pick([f"{v}[0]", f"{v}[1]", f"{v}[2]", f"{v}.x", f"{v}.y", f"{v}.z"])
            op = "=" if kind == "comp_write" else self.pick(["+=", "-=", "*="])
            return [f"{ind}{target} {op} {self.scalar(env, d - 1)}"]
        if kind == "mat_write":
            ms = self.names(env, "m")
            if not ms:
                return []
            m = self.pick(ms)
            r, c = self.ints(0, 2), self.ints(0, 2)
            rhs = self.scalar(env, d - 1)
            return [self.pick([f"{ind}{m}[{r}, {c}] = {m}[{r}, {c}] + {rhs}", f"{ind}{m}[{r}, {c}] = {rhs}"])]
        if kind == "out_comp":
            target = self.pick(["yv[i][0]", "yv[i].y", "yv[i][2]"])
            return [f"{ind}{target} {self.pick(['=', '+='])} {self.scalar(env, d - 1)}"]
        if kind == "out_atomic":
            return [f"{ind}ys[i] += {self.scalar(env, d - 1)}"]
        if kind == "atomic_tot":
            return [f"{ind}xsim.atomic_add(tot, 0, {self.scalar(env, d - 1)})"]
        if kind == "break" or kind == "continue":
            return self.loop_exit(kind, f"{self.scalar(env, 1)} > {self.scalar(env, 0)}", ind)
        inner = ind + "    "
        n_inner = self.ints(1, 3)
        if kind == "if":
            lines = [f"{ind}if {self.scalar(env, d - 1)} > {self.scalar(env, 0)}:"]
            lines += self.block(env, active, depth - 1, inner, loop, n_inner)
            if self.chance(0.6):
                lines += [f"{ind}else:"] + self.block(env, active, depth - 1, inner, loop, self.ints(1, 3))
            return lines
        k = self.fresh("k")
        if kind == "static_for":
            return self.for_loop(env, active, depth, ind, k, str(self.ints(1, 3)), n_inner)
        if kind == "dynamic_for":
            return self.for_loop(env, active, depth, ind, k, self.pick(['n', '1, n + 1', 'n, 0, -1']), n_inner)
        return self.while_loop(env, active, depth, ind, k, "n", n_inner)

    def kernel(self, name: str) -> str:
        body = ["    i = xsim.tid()"]
        body += self.block({}, frozenset(), 2, "    ", False, self.ints(1, 6))
        # the final stores see only the kernel's top-level names
        top = {n: n[0] for n in self.top_level_names(body) if n[0] in "svmqf" and n[1:].isdigit()}
        # every top-level value reaches an output, so that no computation is dead code
        terms = [self.scalar(top, MAX_DEPTH)]
        vterms = [self.vector(top, MAX_DEPTH)]
        for var, kind in sorted(top.items()):
            if kind == "s":
                terms.append(var)
            elif kind == "v":
                terms.append(f"xsim.dot({var}, xsim.vec3d(0.3, -0.7, 1.1))")
                vterms.append(var)
            elif kind == "m":
                terms.append(f"xsim.trace({var})")
                vterms.append(f"({var} * xsim.vec3d(0.5, 0.25, -1.0))")
            elif kind == "q":
                terms.append(f"xsim.dot({var}, xsim.quatd(0.1, 0.2, 0.3, 0.4))")
            else:
                terms.append(f"{var}.s")
                vterms.append(f"{var}.p")
        body.append(f"    ys[i] = {' + '.join(terms)}")
        if self.chance(0.7):
            body.append(f"    yv[i] = {' + '.join(vterms)}")
        return "\n".join(["@xsim.kernel(module=MODULE)", f"def {name}{SIGNATURE}:"] + body)


@st.composite
def kernel_modules(draw):
    """Source of one module with KERNELS_PER_MODULE generated kernels, and a loop count per kernel."""
    gen = KernelGen(random.Random(draw(st.integers(0, 2**63))))
    kernels = [gen.kernel(f"fz_{j}") for j in range(KERNELS_PER_MODULE)]
    counts = [draw(st.integers(0, 3)) for _ in kernels]
    return PRELUDE + "\n\n" + "\n\n\n".join(kernels) + "\n", counts


def random_args(n: int, seed: int) -> list:
    """Launch arguments of a generated kernel: components in +-[0.2, 1.2], loop count ``n``."""
    rng = np.random.default_rng(seed)

    def rand(shape):
        return rng.uniform(0.2, 1.2, shape) * rng.choice([-1.0, 1.0], shape)
    return [xsim.array(rand(N), dtype=xsim.float64), xsim.array(rand(N), dtype=xsim.float64),
            xsim.array(rand((N, 3)), dtype=xsim.vec3d), xsim.array(rand((N, 3)), dtype=xsim.vec3d), n,
            xsim.array(rand(N), dtype=xsim.float64), xsim.array(rand((N, 3)), dtype=xsim.vec3d),
            xsim.zeros(1, dtype=xsim.float64)]


def check_kernel(kernel, n: int, seed: int):
    """Gradcheck ``kernel`` at random inputs; returns the failing report or None."""
    report = gradcheck(kernel, random_args(n, seed), dim=N, atol=1e-6, rtol=1e-5)
    if report.passed:
        return None
    # tolerance relative to the size of the gradients: long products reach large values
    for c in report.checks:
        scale = max(1.0, float(np.max(np.abs(c.numeric), initial=0.0)))
        if not np.all(np.abs(c.analytic - c.numeric) <= 1e-6 * scale + 1e-5 * np.abs(c.numeric)):
            return report
    return None


def run_module(source: str, counts: list[int]) -> list[str]:
    """Check every kernel of a generated module; a mismatch must reproduce at a second random point
    (a branch or kink within the finite-difference step of the first point is not a bug)."""
    module = load_module(source)
    failures = []
    seed = int(hashlib.blake2b(source.encode(), digest_size=4).hexdigest(), 16)
    for j, n in enumerate(counts):
        kernel = getattr(module, f"fz_{j}")
        forward = reference_differences(kernel, N, random_args(n, seed + j))
        if forward:
            failures.append(f"kernel fz_{j} (n={n}) in {module.__file__}: forward differs from the host "
                            "reference:\n" + "\n".join(forward))
        first = check_kernel(kernel, n, seed + j)
        if first is not None and check_kernel(kernel, n, seed + j + 1000) is not None:
            failures.append(f"kernel fz_{j} (n={n}) in {module.__file__}:\n{first}")
    stats = os.environ.get("XSIM_FUZZ_STATS")
    if stats:
        with open(stats, "a") as f:
            f.write(json.dumps({"kernels": len(counts), "mismatches": len(failures)}) + "\n")
    return failures


def check_module(source, counts):
    failures = run_module(source, counts)
    assert not failures, "forward results or tape gradients are wrong:\n" + "\n\n".join(failures) + \
        "\n\nsource:\n" + source


A = xsim.array(dtype=xsim.float64)
AV = xsim.array(dtype=xsim.vec3d)


@xsim.kernel
def two_stores(a: A, b: A, u: AV, w: AV, n: int, ys: A, yv: AV, tot: A):
    i = xsim.tid()
    s1 = a[i]
    ys[i] = s1
    yv[i] = u[i]


def test_gradient_read_then_zeroed_in_unswitched_loop():
    """The fuzzer's first find: g++ 12.2 -O3 loop distribution dropped a.grad here (cpu.FLAGS)."""
    a = xsim.array(np.array([0.5, -0.7, 0.9, 1.1]), dtype=xsim.float64, requires_grad=True)
    u = xsim.array(np.ones((N, 3)), dtype=xsim.vec3d, requires_grad=True)
    ys = xsim.zeros(N, dtype=xsim.float64, requires_grad=True)
    yv = xsim.zeros(N, dtype=xsim.vec3d, requires_grad=True)
    other = [xsim.zeros(N, dtype=xsim.float64), xsim.zeros(N, dtype=xsim.vec3d)]
    with xsim.Tape() as tape:
        xsim.launch(two_stores, N, inputs=[a, other[0], u, other[1], 0, ys, yv, xsim.zeros(1, dtype=xsim.float64)])
    tape.backward(grads={ys: np.arange(1.0, 5.0), yv: np.ones((N, 3))})
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(u.grad.numpy(), np.ones((N, 3)))


@settings(max_examples=15, derandomize=True, **COMMON)
@given(kernel_modules())
def test_generated_kernels_have_correct_gradients(module):
    check_module(*module)


@pytest.mark.fuzz
@settings(max_examples=int(os.environ.get("XSIM_FUZZ_EXAMPLES", "300")), **COMMON)
@given(kernel_modules())
def test_generated_kernels_have_correct_gradients_long(module):
    check_module(*module)
