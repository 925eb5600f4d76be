"""A differential forward fuzzer: hypothesis draws kernel *source* from a grammar of control flow and
values, the kernels run on xsim and on the host reference (reference.py, the same source run by
Python with Warp's rules), and every output must agree: exactly for integers, to 1e-12 (relative to
the outputs' size) in float64, to a float32 tolerance in float32.

The grammar: static and dynamic ``for`` loops and ``while`` nested up to 3 deep, ``break`` and
``continue`` at every depth, loop variables reused across loops and read after them, if/elif/else
chains and ternaries, funcs that return early (from branches and from inside loops), generated funcs
returning a scalar, a vector or a tuple (unpacked by the caller) with early returns at any depth of
their loops, some of them ending in ``while True:``, calling the funcs drawn before them, int32
arithmetic with negative operands (``/ // %`` including zero divisors and ``INT_MIN // -1``, with
wrap-around), bool logic with short-circuit, vec3/mat33/quat locals with component writes, in-place
component ops and aliases, a struct with a vector and a scalar field, component writes into output
arrays and atomics into each thread's own elements. Float inputs are multiples of 1/8, so most float
arithmetic is exact and branch conditions agree between the two sides.

Each hypothesis example generates KERNELS_PER_MODULE kernels into one module (one compiler call,
no adjoints). CI runs a bounded number of examples; ``pytest -m fuzz`` runs the long version
(``XSIM_FORWARD_FUZZ_EXAMPLES`` modules, 100 by default, so 6,000 kernels; ``XSIM_FUZZ_STATS=path``
appends counts per module).
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
from reference import Reference

import xsim

N = 4                    # threads per launch
KERNELS_PER_MODULE = 60
FUNCS_PER_MODULE = 6     # generated funcs (tuple returns, early returns in loops, while True), called by kernels
MAX_DEPTH = 3            # nesting of loops and ifs
LOOP_VARS = ("k0", "k1", "k2", "k3")

PRELUDE = '''import xsim

F = xsim.{F}
V3 = xsim.types.vector(3, F)
M33 = xsim.types.matrix((3, 3), F)
Q = xsim.types.quaternion(F)
AI = xsim.array(dtype=xsim.int32)
AF = xsim.array(dtype=F)
AV = xsim.array(dtype=V3)


@xsim.struct
class Pair:
    a: V3
    b: F


@xsim.func
def f_pick(a: int, b: int) -> int:
    if a > b:
        return a - b
    elif a < -b:
        return b % 7 - a
    else:
        if a == 0:
            return 11
    return a * 3


@xsim.func
def f_scan(x: F, k: int) -> F:
    s = x
    for j in range(k):
        if s > F(3.0):
            return s - F(j)
        s = s * F(0.5) + F(1.25)
    return s


@xsim.func
def f_count(a: int, n: int) -> int:
    c = int(0)
    w = int(a)
    while w < n:
        w += 1
        if w % 3 == 0:
            continue
        c += w
        if c > 9:
            break
    return c


@xsim.func
def f_swap(v: V3, s: F) -> V3:
    w = v
    w[0] = v[2]
    w.z = v[0] + s
    return w
'''

SIGNATURE = "(xi: AI, xf: AF, xv: AV, n: int, m: int, yi: AI, yf: AF, yv: AV, acc: AI)"

# generated funcs see what the kernel sees (its thread index and arrays), so that any statement the
# kernel grammar draws can stand in a func too; they return one of these kinds
FUNC_PARAMS = "(i: int, n: int, m: int, xi: AI, xf: AF, xv: AV, yi: AI, yf: AF, yv: AV, acc: AI)"
FUNC_ARGS = "(i, n, m, xi, xf, xv, yi, yf, yv, acc)"
RETURN_KINDS = [("i",), ("f",), ("v",), ("i", "f"), ("i", "f", "v"), ("f", "v", "i"), ("i", "i")]
ANNOTATIONS = {"i": "int", "f": "F", "v": "V3"}

INT_LITS = ["0", "1", "-1", "2", "-3", "7", "-8", "100", "2147483647", "-2147483647 - 1"]
FLOAT_LITS = ["F(0.5)", "F(-1.25)", "F(2.0)", "F(0.0)", "F(-3.5)"]


class ForwardGen(Generator):
    """Draws funcs and kernels. ``env`` maps a name to its kind: 'i' int32, 'f' float, 'v' vec3, 'm' mat33,
    'q' quat, 'p' a Pair struct; ``active`` holds the loop variables of the enclosing loops. ``funcs``: the
    generated funcs drawn so far, which later code may call (name, returned kinds); ``returns``: the kinds
    the func being drawn returns (None in a kernel)."""

    def __init__(self, rng: random.Random):
        super().__init__(rng)
        self.funcs: list[tuple[str, tuple]] = []
        self.returns: tuple | None = None

    def call(self, kinds: tuple) -> str | None:
        """A call of a generated func returning exactly ``kinds``, or None when there is none."""
        found = [name for name, k in self.funcs if k == kinds]
        return f"{self.pick(found)}{FUNC_ARGS}" if found else None

    # -- expressions ------------------------------------------------------------------------------

    def integer(self, env, d) -> str:
        if d <= 0 or self.chance(0.3):
            kind = self.pick(["var", "var", "lit", "read", "tid", "param", "cast"])
            if kind == "var" and self.names(env, "i"):
                return self.pick(self.names(env, "i"))
            if kind == "lit":
                return f"int({self.pick(INT_LITS)})"
            if kind == "tid":
                return "i"
            if kind == "param":
                return self.pick(["n", "m", "(n - m)"])
            if kind == "cast":
                return f"int({self.floating(env, 0)})"
            return f"xi[{self.pick(['i', '(i + 1) % N', '(i + 3) % N'])}]"
        x = lambda: self.integer(env, d - 1)
        form = self.pick(["add", "sub", "mul", "div", "floordiv", "mod", "neg", "bits", "min", "max", "abs",
                          "ternary", "f_pick", "f_count", "where", "comp_round", "call"])
        if form == "call" and self.call(("i",)):
            return self.call(("i",))
        if form in ("add", "sub", "mul"):
            return f"({x()} { {'add': '+', 'sub': '-', 'mul': '*'}[form]} {x()})"
        if form in ("div", "floordiv", "mod"):
            return f"({x()} { {'div': '/', 'floordiv': '//', 'mod': '%'}[form]} {self.divisor(env, d - 1)})"
        if form == "neg":
            return f"(-{x()})"
        if form == "bits":
            return f"({x()} {self.pick(['&', '|', '^'])} {x()})"
        if form in ("min", "max"):
            return f"xsim.{form}({x()}, {x()})"
        if form == "abs":
            return f"xsim.abs({x()} % 1000)"
        if form == "ternary":
            return f"({x()} if {self.condition(env, d - 1)} else {x()})"
        if form == "where":
            return f"xsim.where({self.condition(env, d - 1)}, {x()}, {x()})"
        if form == "f_pick":
            return f"f_pick({x()}, {x()})"
        if form == "f_count":
            return f"f_count({x()} % 5, n)"
        return f"int({self.floating(env, d - 1)} * F(4.0))"

    def divisor(self, env, d) -> str:
        """An int that is zero now and then, and always read at runtime (a constant zero divisor is a
        compile-time error, which would fail the whole generated module)."""
        idx = self.pick(["i", "(i + 1) % N"])
        return self.pick([f"xi[{idx}]", f"({self.integer(env, d)} * (xi[{idx}] % 3))",
                          f"({self.integer(env, d)} - xi[{idx}])"])

    def floating(self, env, d) -> str:
        if d <= 0 or self.chance(0.3):
            kind = self.pick(["var", "var", "lit", "read", "comp", "int", "field"])
            if kind == "var" and self.names(env, "f"):
                return self.pick(self.names(env, "f"))
            if kind == "lit":
                return self.pick(FLOAT_LITS)
            if kind == "comp" and self.names(env, "v"):
                v = self.pick(self.names(env, "v"))
                return self.pick([f"{v}.x", f"{v}.y", f"{v}[2]", f"{v}[1]"])
            if kind == "comp" and self.names(env, "m"):
                m = self.pick(self.names(env, "m"))
                return f"{m}[{self.ints(0, 2)}, {self.ints(0, 2)}]"
            if kind == "int":
                return f"F({self.integer(env, 0)} % 16)"
            if kind == "field" and self.names(env, "p"):
                p = self.pick(self.names(env, "p"))
                return self.pick([f"{p}.b", f"{p}.a.y", f"{p}.a[0]"])
            return f"xf[{self.pick(['i', '(i + 2) % N'])}]"
        x = lambda: self.floating(env, d - 1)
        form = self.pick(["add", "sub", "mul", "half", "neg", "min", "max", "abs", "clamp", "ternary", "where",
                          "dot", "f_scan", "quat", "floor", "floordiv", "mod", "call"])
        if form == "call" and self.call(("f",)):
            return self.call(("f",))
        if form in ("add", "sub"):
            return f"({x()} {'+' if form == 'add' else '-'} {x()})"
        if form == "mul":
            return f"({self.floating(env, 0)} * {self.floating(env, 0)})"
        if form == "half":
            return f"({x()} * F({self.pick(['0.5', '-2.0', '0.25'])}))"
        if form == "neg":
            return f"(-{x()})"
        if form in ("min", "max"):
            return f"xsim.{form}({x()}, {x()})"
        if form == "abs":
            return f"xsim.abs({x()})"
        if form == "clamp":
            return f"xsim.clamp({x()}, F(-2.0), F(2.0))"
        if form == "ternary":
            return f"({x()} if {self.condition(env, d - 1)} else {x()})"
        if form == "where":
            return f"xsim.where({self.condition(env, d - 1)}, {x()}, {x()})"
        if form == "dot":
            return f"xsim.dot({self.vector(env, 0)}, {self.vector(env, 0)})"
        if form == "f_scan":
            return f"f_scan({x()}, m)"
        if form == "quat":
            q = self.quat(env, d - 1)
            return self.pick([f"{q}[3]", f"{q}.x", f"xsim.dot({q}, Q(F(0.5), F(0.25), F(-1.0), F(2.0)))"])
        if form == "floor":
            return f"xsim.floor({x()} * F(0.5))"
        if form == "floordiv":
            return f"({x()} // F({self.pick(['2.0', '-0.5', '4.0'])}))"
        return f"({x()} % F({self.pick(['2.0', '-0.75', '1.5'])}))"

    def condition(self, env, d) -> str:
        if d <= 0 or self.chance(0.5):
            if self.chance(0.5):
                return f"{self.integer(env, max(d - 1, 0))} {self.pick(['<', '<=', '==', '!=', '>'])} " \
                       f"{self.integer(env, 0)}"
            return f"{self.floating(env, max(d - 1, 0))} {self.pick(['<', '>=', '=='])} {self.floating(env, 0)}"
        form = self.pick(["and", "or", "not", "chain"])
        c = lambda: self.condition(env, d - 1)
        if form == "and":
            # short-circuit: the right side would read out of range if it were evaluated
            return self.pick([f"({c()} and {c()})", f"(n > 0 and xi[(n - 1) % N] > {self.integer(env, 0)})"])
        if form == "or":
            return f"({c()} or {c()})"
        if form == "not":
            return f"(not {c()})"
        return f"({self.integer(env, 0)} < {self.integer(env, 0)} <= {self.integer(env, 0)})"

    def vector(self, env, d) -> str:
        if d <= 0 or self.chance(0.35):
            kind = self.pick(["var", "var", "read", "build", "field"])
            if kind == "var" and self.names(env, "v"):
                return self.pick(self.names(env, "v"))
            if kind == "build":
                return f"V3({self.floating(env, 0)}, {self.floating(env, 0)}, {self.floating(env, 0)})"
            if kind == "field" and self.names(env, "p"):
                return f"{self.pick(self.names(env, 'p'))}.a"
            return f"xv[{self.pick(['i', '(i + 1) % N'])}]"
        v = lambda: self.vector(env, d - 1)
        form = self.pick(["add", "sub", "scale", "neg", "matvec", "ternary", "f_swap", "row", "call"])
        if form == "call" and self.call(("v",)):
            return self.call(("v",))
        if form in ("add", "sub"):
            return f"({v()} {'+' if form == 'add' else '-'} {v()})"
        if form == "scale":
            return f"({v()} * F({self.pick(['0.5', '-2.0', '3.0'])}))"
        if form == "neg":
            return f"(-{v()})"
        if form == "matvec":
            return f"({self.matrix(env, 0)} * {self.vector(env, 0)})"
        if form == "ternary":
            return f"({v()} if {self.condition(env, 0)} else {v()})"
        if form == "row" and self.names(env, "m"):
            return f"{self.pick(self.names(env, 'm'))}[{self.ints(0, 2)}]"
        return f"f_swap({v()}, {self.floating(env, 0)})"

    def matrix(self, env, d) -> str:
        if self.names(env, "m") and self.chance(0.7):
            return self.pick(self.names(env, "m"))
        return f"M33({', '.join(self.floating(env, 0) for _ in range(9))})"

    def quat(self, env, d) -> str:
        if self.names(env, "q") and self.chance(0.6):
            return self.pick(self.names(env, "q"))
        return f"Q({', '.join(self.floating(env, 0) for _ in range(4))})"

    # -- statements ---------------------------------------------------------------------------------

    def stmt(self, env, active, depth, ind, loop) -> list[str]:
        kinds = ["new_i", "new_f", "new_v", "new_m", "new_q", "new_p", "reassign", "reassign", "alias",
                 "comp_write", "comp_write", "mat_write", "quat_write", "field_write", "out_write", "atomic"]
        if depth > 0:
            kinds += ["if", "if", "static_for", "dynamic_for", "dynamic_for", "while"]
        if loop:
            kinds += ["break", "continue", "reassign", "comp_write"]
        if self.funcs:
            kinds += ["unpack", "unpack"]
        if self.returns is not None:
            kinds += ["return"] * (3 if loop else 1)
        kind = self.pick(kinds)
        d = self.ints(1, 3)
        makers = {"i": self.integer, "f": self.floating, "v": self.vector, "m": self.matrix, "q": self.quat}
        if kind.startswith("new_") and kind[-1] in makers:
            t = kind[-1]
            name = self.fresh(t)
            line = f"{ind}{name} = {makers[t](env, d)}"
            env[name] = t
            return [line]
        if kind == "new_p":
            name = self.fresh("p")
            if self.chance(0.5):
                lines = [f"{ind}{name} = Pair()", f"{ind}{name}.a = {self.vector(env, d - 1)}"]
            else:
                lines = [f"{ind}{name} = Pair(a={self.vector(env, d - 1)}, b={self.floating(env, d - 1)})"]
            env[name] = "p"
            return lines
        if kind == "reassign":
            options = sorted(n for n, k in env.items() if k in "ifvmq" and n not in active)
            if not options:
                return []
            name = self.pick(options)
            expr = makers[env[name]](env, d)
            if env[name] in "if" and self.chance(0.5):
                op = self.pick(["+=", "-="] if env[name] == "f" else ["+=", "-=", "*=", "//=", "%="])
                return [f"{ind}{name} {op} {self.divisor(env, d - 1) if op in ('//=', '%=') else expr}"]
            return [f"{ind}{name} = {expr}"]
        if kind == "alias":
            options = sorted(n for n, k in env.items() if k in "vmqp")
            if not options:
                return []
            src = self.pick(options)
            name = self.fresh(env[src])
            env[name] = env[src]
            return [f"{ind}{name} = {src}"]
        if kind == "comp_write":
            vs = self.names(env, "v")
            if not vs:
                return []
            v = self.pick(vs)
            target = self.pick([f"{v}[0]", f"{v}[1]", f"{v}[2]", f"{v}.x", f"{v}.y", f"{v}.z"])
            return [f"{ind}{target} {self.pick(['=', '+=', '-=', '*='])} {self.floating(env, d - 1)}"]
        if kind == "mat_write":
            ms = self.names(env, "m")
            if not ms:
                return []
            m = self.pick(ms)
            r = self.ints(0, 2)
            if self.chance(0.3):
                return [f"{ind}{m}[{r}] = {self.vector(env, d - 1)}"]
            return [(f"{ind}{m}[{r}, {self.ints(0, 2)}] {self.pick(['=', '+='])} "
                     f"{self.floating(env, d - 1)}")]
        if kind == "quat_write":
            qs = self.names(env, "q")
            if not qs:
                return []
            q = self.pick(qs)
            return [f"{ind}{q}{self.pick(['.w', '.x', '[1]', '[2]'])} = {self.floating(env, d - 1)}"]
        if kind == "field_write":
            ps = self.names(env, "p")
            if not ps:
                return []
            p = self.pick(ps)
            target = self.pick([f"{p}.b", f"{p}.a[0]", f"{p}.a.y", f"{p}.a"])
            rhs = self.vector(env, d - 1) if target.endswith(".a") else self.floating(env, d - 1)
            return [f"{ind}{target} {self.pick(['=', '+='])} {rhs}"]
        if kind == "out_write":
            target, rhs = self.pick([("yi[i]", "i"), ("yf[i]", "f"), ("yv[i][1]", "f"), ("yv[i].z", "f"),
                                     ("yv[i]", "v")])
            return [f"{ind}{target} {self.pick(['=', '+='])} {makers[rhs](env, d - 1)}"]
        if kind == "atomic":
            op = self.pick(["atomic_add", "atomic_sub", "atomic_min", "atomic_max"])
            if self.chance(0.5):
                name = self.fresh("i")
                line = f"{ind}{name} = xsim.{op}(acc, i, {self.integer(env, d - 1)})"
                env[name] = "i"
                return [line]
            return [f"{ind}xsim.{op}(acc, i, {self.integer(env, d - 1)})"]
        if kind in ("break", "continue"):
            return self.loop_exit(kind, self.condition(env, 1), ind)
        if kind == "return":  # mostly under a condition; an unconditional one makes the rest dead code
            if self.chance(0.8):
                return [f"{ind}if {self.condition(env, 1)}:", f"{ind}    return {self.returned(env, d - 1)}"]
            return [f"{ind}return {self.returned(env, d - 1)}"]
        if kind == "unpack":  # the values of a func's return, a tuple unpacked into new names
            name, kinds = self.pick(self.funcs)
            targets = [self.fresh(k) for k in kinds]
            env.update(zip(targets, kinds))
            return [f"{ind}{', '.join(targets)} = {name}{FUNC_ARGS}"]
        inner = ind + "    "
        n_inner = self.ints(1, 2)
        if kind == "if":
            lines = [f"{ind}if {self.condition(env, d - 1)}:"]
            lines += self.block(env, active, depth - 1, inner, loop, n_inner)
            for _ in range(self.ints(0, 2)):
                lines += [f"{ind}elif {self.condition(env, d - 1)}:"]
                lines += self.block(env, active, depth - 1, inner, loop, self.ints(1, 2))
            if self.chance(0.5):
                lines += [f"{ind}else:"] + self.block(env, active, depth - 1, inner, loop, self.ints(1, 2))
            return lines
        if kind == "while":
            return self.while_loop(env, active, depth, ind, self.fresh("w"), self.pick(['n', 'm + 1', '3']), n_inner)
        k = self.pick([k for k in LOOP_VARS if k not in active])
        bounds = self.pick(['3', '1, 4', '5, -1, -2', '0'] if kind == "static_for" else
                           ['n', 'm, n', 'n, -2, -1', '1, m + 2, 2'])
        return self.for_loop(env, active, depth, ind, k, bounds, n_inner)

    def returned(self, env, d) -> str:
        """The values of a ``return`` of the func being drawn."""
        makers = {"i": self.integer, "f": self.floating, "v": self.vector}
        return ", ".join(makers[k](env, max(d, 0)) for k in self.returns)

    def func(self, name: str) -> str:
        """A func whose statements (the kernel grammar's) return early at any depth, from ifs and from
        inside every kind of loop; it ends in a fallback ``return`` or in a ``while True:`` that only a
        ``return`` leaves (its counter is bumped first and no ``break`` or ``continue`` stands in it)."""
        self.returns = self.pick(RETURN_KINDS)
        annotation = ANNOTATIONS[self.returns[0]] if len(self.returns) == 1 else \
            f"tuple[{', '.join(ANNOTATIONS[k] for k in self.returns)}]"
        body = [f"    {k} = int({j - 1})" for j, k in enumerate(LOOP_VARS)]
        env = {k: "i" for k in LOOP_VARS}
        for _ in range(self.ints(1, 4)):
            body += self.stmt(env, frozenset(), MAX_DEPTH, "    ", False)
        if self.chance(0.3):
            counter = self.fresh("w")
            env[counter] = "i"
            body += [f"    {counter} = int(0)", "    while True:", f"        {counter} += 1"]
            for _ in range(self.ints(1, 3)):
                body += self.stmt(env, frozenset({counter}), MAX_DEPTH - 1, "        ", False)
            body += [f"        if {counter} > {self.pick(['n', 'm + 2', '3'])}:",
                     f"            return {self.returned(env, 1)}"]
        else:
            body.append(f"    return {self.returned(env, 1)}")
        self.funcs.append((name, self.returns))
        self.returns = None
        return "\n".join(["@xsim.func", f"def {name}{FUNC_PARAMS} -> {annotation}:"] + body)

    def kernel(self, name: str) -> str:
        # the loop variables exist before any loop (so that reading one after its loop is defined)
        body = ["    i = xsim.tid()"] + [f"    {k} = int({j - 1})" for j, k in enumerate(LOOP_VARS)]
        env = {k: "i" for k in LOOP_VARS}
        body += self.block(env, frozenset(), MAX_DEPTH, "    ", False, self.ints(2, 6))
        top = {n: "i" if n in LOOP_VARS else n[0] for n in self.top_level_names(body) if n != "i"}
        iterms = ["yi[i]"] + [v for v, k in sorted(top.items()) if k == "i"]
        fterms = ["yf[i]"]
        vterms = ["yv[i]"]
        for var, kind in sorted(top.items()):
            if kind == "f":
                fterms.append(var)
            elif kind == "v":
                vterms.append(var)
            elif kind == "m":
                vterms.append(f"({var} * V3(F(0.5), F(0.25), F(-1.0)))")
            elif kind == "q":
                fterms.append(f"xsim.dot({var}, Q(F(0.5), F(1.0), F(-0.25), F(2.0)))")
            elif kind == "p":
                fterms.append(f"{var}.b")
                vterms.append(f"{var}.a")
        body.append(f"    yi[i] = {' + '.join(iterms)}")
        body.append(f"    yf[i] = {' + '.join(fterms)}")
        body.append(f"    yv[i] = {' + '.join(vterms)}")
        return "\n".join(["@xsim.kernel(module=MODULE, enable_backward=False)", f"def {name}{SIGNATURE}:"] + body)


@st.composite
def forward_modules(draw, kernels=KERNELS_PER_MODULE, funcs=FUNCS_PER_MODULE):
    """Source of one module of generated funcs and kernels (float64 or float32). Hypothesis draws a seed
    per module: drawing every choice of 60 kernels would overrun its buffer."""
    gen = ForwardGen(random.Random(draw(st.integers(0, 2**63))))
    ftype = draw(st.sampled_from(["float64", "float32"]))
    bodies = [gen.func(f"g_{j}") for j in range(funcs)] + [gen.kernel(f"fw_{j}") for j in range(kernels)]
    return PRELUDE.format(F=ftype) + f"\nN = {N}\n\n\n" + "\n\n\n".join(bodies) + "\n", kernels


def _inputs(rng, ftype):
    xi = rng.integers(-20, 20, N).astype(np.int32)
    xi[rng.integers(0, N)] = rng.choice([0, -2**31, 2**31 - 1, -1])
    return [xi, (rng.integers(-16, 17, N) / 8.0).astype(ftype), (rng.integers(-16, 17, (N, 3)) / 8.0).astype(ftype),
            int(rng.integers(0, 5)), int(rng.integers(0, 4)),
            rng.integers(-5, 5, N).astype(np.int32), (rng.integers(-8, 8, N) / 4.0).astype(ftype),
            (rng.integers(-8, 8, (N, 3)) / 4.0).astype(ftype), rng.integers(-5, 5, N).astype(np.int32)]


def _close(got, want, ftype) -> bool:
    """Integers equal; floats within the tolerance relative to the outputs' (finite) size, NaN where the
    reference has NaN and the same infinities (a loop that squares a value overflows)."""
    if got.dtype.kind in "iub":
        return np.array_equal(got, want)
    rtol = 1e-12 if ftype == np.float64 else 2e-5
    finite = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    with np.errstate(invalid="ignore"):
        near = (got == want) | (np.abs(got - want) <= rtol * scale)
    return bool(np.all(near | np.isnan(want)) and np.array_equal(np.isnan(got), np.isnan(want)))


def check_kernel(kernel, ftype, seed) -> str | None:
    """Launch ``kernel`` and run it on the reference at two input draws; a description of the first
    output that differs, or None."""
    rng = np.random.default_rng(seed)
    ref = Reference()
    for _ in range(2):
        args = _inputs(rng, ftype)
        host = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        ref.run(kernel, N, host)
        dev = [xsim.array(a, dtype=xsim.vec3d if a.ndim == 2 and ftype == np.float64 else
                          xsim.vec3 if a.ndim == 2 else None) if isinstance(a, np.ndarray) else a for a in args]
        xsim.launch(kernel, N, inputs=dev)
        for j in (5, 6, 7, 8):
            got = dev[j].numpy()
            if not _close(got, host[j], ftype):
                return f"output {j} with n={args[3]}, m={args[4]}, xi={args[0].tolist()}: xsim {got.tolist()}, " \
                       f"reference {host[j].tolist()}"
    return None


def run_module(source: str, count: int) -> list[str]:
    module = load_module(source)
    ftype = np.float64 if "F = xsim.float64" in source else np.float32
    seed = int(hashlib.blake2b(source.encode(), digest_size=4).hexdigest(), 16)
    failures = []
    for j in range(count):
        kernel = getattr(module, f"fw_{j}")
        msg = check_kernel(kernel, ftype, seed + j)
        if msg is not None:
            failures.append(f"kernel fw_{j} in {module.__file__}: {msg}")
    stats = os.environ.get("XSIM_FUZZ_STATS")
    if stats:
        with open(stats, "a") as f:
            f.write(json.dumps({"forward_kernels": count, "mismatches": len(failures)}) + "\n")
    return failures


def check_module(source, count):
    failures = run_module(source, count)
    assert not failures, "xsim disagrees with the host reference:\n" + "\n".join(failures) + \
        "\n\nsource:\n" + source


@pytest.mark.cpu_only
@settings(max_examples=2, derandomize=True, **COMMON)
@given(forward_modules(kernels=40, funcs=3))
def test_generated_kernels_compute_what_python_computes(module):
    check_module(*module)


@pytest.mark.fuzz
@pytest.mark.cpu_only
@settings(max_examples=int(os.environ.get("XSIM_FORWARD_FUZZ_EXAMPLES", "100")), **COMMON)
@given(forward_modules())
def test_generated_kernels_compute_what_python_computes_long(module):
    check_module(*module)
