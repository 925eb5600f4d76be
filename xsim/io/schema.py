"""A small declarative checker for the tables read from a TOML file.

Each key of a table is described by a :class:`Key` (a converter plus a default); a converter
takes the raw TOML value and its key path (``cloth[1].compliance.stretch``) and either returns
the clean Python value or raises :class:`Invalid` saying what was expected and what was found.
The scene loader turns :class:`Invalid` into ``xsim.SceneError`` with the file name in front, so
this module knows nothing about files.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..sim.validate import FLOAT32_FINITE, FLOAT32_RANGE, representable

REQUIRED = object()
"""Default of a key the file must give."""

Converter = Callable[[Any, str], Any]


class Invalid(Exception):
    """A value that does not fit its schema: key path, what was expected, what was found."""

    def __init__(self, key: str, expected: str, found: str, hint: str = ""):
        self.key, self.expected, self.found, self.hint = key, expected, found, hint
        super().__init__(f"{key}: expected {expected}, found {found}{hint}")


@dataclass(frozen=True)
class Key:
    """One key of a table: how to convert its value, its default, and a line for the docs."""

    convert: Converter
    default: Any = REQUIRED
    doc: str = ""


def describe(value: Any) -> str:
    """A value as a user wrote it in TOML, with its TOML type (``"abc" (a string)``)."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int):
        return f"{value} (an integer)"
    if isinstance(value, float):
        return f"{value!r} (a float)"
    if isinstance(value, str):
        return f'"{value}" (a string)'
    if isinstance(value, list):
        shown = ", ".join(_short(v) for v in value[:6]) + (", ..." if len(value) > 6 else "")
        return f"[{shown}] (an array of {len(value)})"
    if isinstance(value, dict):
        return "a table" if value else "an empty table"
    return f"{value!r} (a {type(value).__name__})"


def _short(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (dict, list)):
        return "{...}" if isinstance(value, dict) else "[...]"
    return repr(value)


def join(path: str, key: str | int) -> str:
    """The key path of a child: ``join("cloth[1]", "mass")`` -> ``cloth[1].mass``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def suggestion(key: str, known) -> str:
    """`` (did you mean 'stretch'?)`` when ``key`` is close to one of ``known``, else ``""``."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def check_table(raw: Any, path: str, keys: dict[str, Key], what: str = "a table") -> dict[str, Any]:
    """Convert every key of ``raw`` by ``keys``; unknown keys and missing required keys are errors.
    Returns a dict with every key of ``keys`` (defaults filled in)."""
    if not isinstance(raw, dict):
        raise Invalid(path, what, describe(raw))
    for name in raw:
        if name not in keys:
            allowed = ", ".join(keys)
            raise Invalid(join(path, name), f"one of the keys {allowed}", "an unknown key",
                          suggestion(name, keys))
    out = {}
    for name, key in keys.items():
        where = join(path, name)
        if name in raw:
            out[name] = key.convert(raw[name], where)
        elif key.default is REQUIRED:
            raise Invalid(where, f"a value ({key.doc})" if key.doc else "a value", "nothing (the key is missing)")
        else:
            out[name] = key.default
    return out


def written_fraction(value: float) -> Fraction:
    """The rational a user meant by a decimal: ``0.016666667`` -> 1/60 (a rounded repeating
    decimal), ``0.01`` -> 1/100, ``0.0125`` -> 1/80 (exact decimals stay exact).

    The written digits (the shortest repr) set the tolerance, half a unit of the last digit; the
    simplest fraction within it is taken when its denominator q is far below the decimal's own
    (10 q^2 <= that denominator): by Dirichlet's theorem any number has fractions within 1/q^2, so
    only a denominator that small is a match that is not a coincidence of rounding."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"written_fraction: expected a positive finite number, got {value!r}")
    decimal = Fraction(repr(float(value)))
    mantissa, _, exponent = repr(float(value)).lower().partition("e")
    digits = len(mantissa.partition(".")[2]) - int(exponent or 0)
    half_unit = Fraction(1, 2 * 10**digits) if digits >= 0 else Fraction(10**-digits, 2)
    simplest = _simplest_between(max(decimal - half_unit, Fraction(0)), decimal + half_unit)
    return simplest if 10 * simplest.denominator**2 <= decimal.denominator else decimal


def _simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in [lo, hi] (0 <= lo <= hi), by continued fractions."""
    whole = math.floor(lo)
    if whole == lo:
        return Fraction(whole)
    if whole + 1 <= hi:
        return Fraction(whole + 1)
    return whole + 1 / _simplest_between(1 / (hi - whole), 1 / (lo - whole))


# -- converters ------------------------------------------------------------------------------------


def number(minimum: float | None = None, above: float | None = None, maximum: float | None = None,
           strict: bool = False) -> Converter:
    """A float (integers accepted) that a float32 model can hold (``xsim.sim.validate``);
    ``minimum``: allowed lower bound, ``above``: exclusive lower bound, ``maximum``: allowed upper
    bound. Positive numbers (``above``) and ``strict`` ones (a mass, whose 0 means kinematic) may not
    be so small that they round to 0."""
    tiny_ok = above is None and not strict
    in_range = FLOAT32_FINITE if tiny_ok else FLOAT32_RANGE
    if above is not None:
        expected = f"a number > {above:g}"
    elif minimum is not None:
        expected = f"a number >= {minimum:g}"
    else:
        expected = "a number"
    if maximum is not None:
        expected = f"{expected} and <= {maximum:g}"

    def convert(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Invalid(path, expected, describe(value))
        if not representable(value, tiny_ok):
            raise Invalid(path, f"{expected} {in_range}", describe(value))
        if (above is not None and value <= above) or (minimum is not None and value < minimum) or (
                maximum is not None and value > maximum):
            raise Invalid(path, expected, describe(value))
        return float(value)

    return convert


def integer(minimum: int | None = None) -> Converter:
    """An integer, at least ``minimum``."""
    expected = "an integer" if minimum is None else f"an integer >= {minimum}"

    def convert(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            raise Invalid(path, expected, describe(value))
        return value

    return convert


def boolean(value: Any, path: str) -> bool:
    """``true`` or ``false``."""
    if not isinstance(value, bool):
        raise Invalid(path, "true or false", describe(value))
    return value


def check_typed_table(raw: Any, path: str, schemas: dict[str, dict[str, Key]], what: str) -> tuple[str, dict]:
    """A table whose ``type`` key picks its schema among ``schemas``: returns (type, checked table)."""
    if not isinstance(raw, dict):
        raise Invalid(path, what, describe(raw))
    if "type" not in raw:
        raise Invalid(join(path, "type"), "one of " + ", ".join(f'"{t}"' for t in schemas),
                      "nothing (the key is missing)")
    kind = string(tuple(schemas))(raw["type"], join(path, "type"))
    return kind, check_table(raw, path, schemas[kind], what)


def string(choices: tuple[str, ...] | None = None, pattern=None, expected: str = "a string") -> Converter:
    """A string, optionally one of ``choices`` or matching the compiled regex ``pattern``."""
    if choices:
        expected = "one of " + ", ".join(f'"{c}"' for c in choices)

    def convert(value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise Invalid(path, expected, describe(value))
        if choices and value not in choices:
            raise Invalid(path, expected, describe(value), suggestion(value, choices))
        if pattern is not None and not pattern.fullmatch(value):
            raise Invalid(path, expected, describe(value))
        return value

    return convert


def vector(length: int, element: Converter | None = None, expected: str = "") -> Converter:
    """An array of exactly ``length`` elements, each checked by ``element`` (default: any number);
    returns a tuple."""
    expected = expected or f"an array of {length} numbers"
    element = element or number()

    def convert(value: Any, path: str) -> tuple:
        if not isinstance(value, list) or len(value) != length:
            raise Invalid(path, expected, describe(value))
        return tuple(element(v, join(path, i)) for i, v in enumerate(value))

    return convert


def list_of(element: Converter, expected: str = "an array") -> Converter:
    """An array of any length, each element checked by ``element``; returns a list."""

    def convert(value: Any, path: str) -> list:
        if not isinstance(value, list):
            raise Invalid(path, expected, describe(value))
        return [element(v, join(path, i)) for i, v in enumerate(value)]

    return convert


def table(keys: dict[str, Key], what: str = "a table") -> Converter:
    """A nested table checked by ``keys``."""
    return lambda value, path: check_table(value, path, keys, what)


def either(*options: tuple[Callable[[Any], bool], Converter], expected: str) -> Converter:
    """The first converter whose test accepts the raw value; none -> ``expected``."""

    def convert(value: Any, path: str) -> Any:
        for test, conv in options:
            if test(value):
                return conv(value, path)
        raise Invalid(path, expected, describe(value))

    return convert
