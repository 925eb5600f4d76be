"""What the random-kernel fuzzers share: the generator machinery (choices, scopes, loops), generated
module sources written to files and imported (one module = one compiler call for all its kernels), and
hypothesis settings without shrinking."""

import hashlib
import importlib.util
import random
import sys
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, Phase

_GENERATED_DIR = Path(tempfile.mkdtemp(prefix="xsim_fuzz_"))  # one folder per session

# No shrinking: every shrink step is a compiler call (minutes in all), and the failure message
# already names the failing kernel and shows the module's source.
COMMON = {"deadline": None, "phases": [Phase.explicit, Phase.reuse, Phase.generate],
          "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]}


def load_module(source: str):
    """Write ``source`` into a file and import it; its kernels compile as one module."""
    digest = hashlib.blake2b(source.encode(), digest_size=10).hexdigest()
    name = f"xsim_fuzz_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    path = _GENERATED_DIR / f"{name}.py"
    path.write_text(f"MODULE = {name!r}\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Generator:
    """What the kernel-source generators share: random choices from a seeded ``random.Random``
    (hypothesis draws the seed: drawing every choice of a module's kernels would overrun its buffer),
    fresh names, blocks that scope their names, loops and their exits. A subclass writes ``stmt``."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.count = 0

    def pick(self, options):
        return self.rng.choice(options)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def ints(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    @staticmethod
    def names(env: dict, kind: str) -> list[str]:
        """The names in scope of one kind, sorted (``env``: name -> kind letter)."""
        return sorted(n for n, k in env.items() if k == kind)

    def stmt(self, env: dict, active: frozenset, depth: int, ind: str, loop: bool) -> list[str]:
        raise NotImplementedError

    def block(self, env: dict, active: frozenset, depth: int, ind: str, loop: bool, n_stmts: int) -> list[str]:
        """``n_stmts`` statements at indent ``ind``; names they define stay local (``env`` is copied).
        ``active``: loop variables of the enclosing loops; ``loop``: inside a loop (break/continue)."""
        env = dict(env)
        out = []
        for _ in range(n_stmts):
            out += self.stmt(env, active, depth, ind, loop)
        return out or [f"{ind}pass"]

    @staticmethod
    def loop_exit(kind: str, cond: str, ind: str) -> list[str]:
        """``break`` or ``continue`` under ``cond``."""
        return [f"{ind}if {cond}:", f"{ind}    {kind}"]

    def for_loop(self, env, active, depth, ind, var: str, bounds: str, n_inner: int) -> list[str]:
        """``for var in range(bounds)`` over a block that sees ``var`` as an int."""
        body_env = dict(env)
        body_env[var] = "i"
        return [f"{ind}for {var} in range({bounds}):"] + self.block(body_env, active | {var}, depth - 1,
                                                                   ind + "    ", True, n_inner)

    def while_loop(self, env, active, depth, ind, counter: str, bound: str, n_inner: int) -> list[str]:
        """A ``while`` counting ``counter`` (a new int in ``env``) up to ``bound``; the counter is bumped
        first, so that ``continue`` cannot skip it."""
        env[counter] = "i"
        lines = [f"{ind}{counter} = int(0)", f"{ind}while {counter} < {bound}:", f"{ind}    {counter} += 1"]
        return lines + self.block(env, active | {counter}, depth - 1, ind + "    ", True, n_inner)

    @staticmethod
    def top_level_names(body: list[str]) -> list[str]:
        """The names a kernel body (4-space indented lines) assigns at its top level, in order."""
        out = []
        for line in body:
            stripped = line[4:]
            if not stripped.startswith(" ") and " = " in stripped:
                lhs = stripped.split(" = ")[0]
                if lhs.isidentifier() and lhs not in out:
                    out.append(lhs)
        return out
