"""Scene values set from outside the file, by key path (``cloth[0].mass``, ``sim.substeps``,
``cloth[1].compliance.stretch``): the same paths ``xsim.SceneError`` names. An override is written
into the raw TOML tables before the scene is checked, so a bad key or value gets the checker's own
message (``cloth[0].mas: expected one of the keys ... (did you mean 'mass'?)``).
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from .schema import Invalid, describe, join

_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")
_INDEX = re.compile(r"\[(\d+)\]")
_EXPECTED_PATH = "a key path such as sim.substeps or cloth[0].compliance.stretch"


def parse_key_path(key: str) -> list[str | int]:
    """``"cloth[0].compliance.stretch"`` -> ``["cloth", 0, "compliance", "stretch"]``."""
    steps: list[str | int] = []
    for part in key.split(".") if isinstance(key, str) else [None]:
        m = _STEP.fullmatch(part) if part is not None else None
        if m is None:
            raise Invalid(str(key), _EXPECTED_PATH, describe(key))
        steps.append(m.group(1))
        steps.extend(int(i) for i in _INDEX.findall(m.group(2)))
    return steps


def apply_overrides(raw: dict, overrides: Mapping[str, Any]) -> dict:
    """A copy of the raw TOML tables with each ``key path -> value`` of ``overrides`` set; missing
    tables on the way are made. Raises ``Invalid`` naming the path for an index past an array's end
    or a step into a value that is not a table."""
    out = copy.deepcopy(raw)
    for key, value in overrides.items():
        steps = parse_key_path(key)
        node: Any = out
        where = ""
        for step, after in zip(steps, steps[1:] + [None]):
            here = join(where, step)
            if isinstance(step, int):
                if not isinstance(node, list) or step >= len(node):
                    count = len(node) if isinstance(node, list) else 0
                    raise Invalid(here, f"an existing [[{where}]] (the scene has {count})", f"no {here}")
            elif not isinstance(node, dict):
                raise Invalid(where, f"a table (to set {key})", describe(node))
            if after is None:
                node[step] = value
            elif isinstance(step, str) and step not in node:
                if isinstance(after, int):
                    raise Invalid(join(here, after), f"an existing [[{here}]] (the scene has none)",
                                  f"no {join(here, after)}")
                node[step] = {}
            node = node[step] if after is not None else None
            where = here
    return out


def parse_values(text: str, option: str) -> list:
    """The comma-separated TOML values of ``--param KEY=V1,V2``: ``0.001,0.002`` -> [0.001, 0.002],
    ``[0,0,1],[0,0,2]`` -> two vectors, ``"cpu"`` a string. Raises ``Invalid`` naming ``option``."""
    try:
        values = tomllib.loads(f"v = [{text}]")["v"]
    except tomllib.TOMLDecodeError as e:
        raise Invalid(option, "comma-separated TOML values (numbers, true/false, [x, y, z], \"text\")",
                      f"{text!r} ({e})") from None
    if not values:
        raise Invalid(option, "at least one value", "none")
    return values
