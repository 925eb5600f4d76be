"""``Tape.visualize``: the recorded launches and array ops as a GraphViz graph (dot source).

Arrays are ellipses (labelled by ``array_labels``, else by the parameter that first names them, with
dtype and shape as tooltip), records are boxes, edges go from what a record reads to it and from it to
what it writes. Named scopes (``record_scope_begin/end``) are clusters; with ``simplify_graph`` a run
of the same kernel on the same arrays is one box saying how often it repeated.
"""

from __future__ import annotations

from .. import types as T
from ..kernels import launch as _launch
from .tape import LaunchRecord


def _accesses(rec) -> tuple[list, list]:
    """([(label, array) read], [(label, array) written]) of one record."""
    if isinstance(rec, LaunchRecord):
        reads = _launch.labelled_arrays(rec.prep.read_slots, rec.values)
        writes = _launch.labelled_arrays(rec.prep.write_slots, rec.values)
        return list(reads), list(writes)
    return [("source", a) for a in rec.reads], [("destination", a) for a in rec.writes]


def _quote(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_source(tape, simplify_graph: bool = True, hide_readonly_arrays: bool = False, array_labels=None,
               graph_direction: str = "LR") -> str:
    """The dot source of ``tape``'s records (see the module docstring)."""
    labels = {id(a): name for a, name in (array_labels or {}).items()}
    steps = []  # [record, reads, writes, repeats]
    for rec in tape.records:
        reads, writes = _accesses(rec)
        key = (rec.what(), [id(a) for _, a in reads], [id(a) for _, a in writes])
        if simplify_graph and steps and steps[-1][4] == key:
            steps[-1][3] += 1
            continue
        steps.append([rec, reads, writes, 1, key])
    written = {id(a) for s in steps for _, a in s[2]}
    arrays = {}
    for s in steps:
        for label, a in s[1] + s[2]:
            if id(a) not in arrays and (not hide_readonly_arrays or id(a) in written):
                arrays[id(a)] = (labels.get(id(a), label), a)
    lines = ['digraph "tape" {', f"  rankdir={graph_direction};"]
    for i, (label, a) in arrays.items():
        tip = f"array: dtype={T.type_name(a.dtype)}, shape={a.shape}"
        lines.append(f"  a{i} [shape=ellipse, label={_quote(label)}, tooltip={_quote(tip)}];")
    events, depth, first = list(tape.scopes), 0, 0

    def scope_events(upto: int | None):
        nonlocal depth
        while events and (upto is None or events[0][0] <= upto):
            _, name, _ = events.pop(0)
            if name is not None:
                lines.append(f"  subgraph cluster_{len(lines)} {{ label={_quote(name)};")
                depth += 1
            elif depth:
                lines.append("  }")
                depth -= 1
    for n, (rec, reads, writes, repeats, _) in enumerate(steps):
        scope_events(first)
        what = rec.kernel.key if isinstance(rec, LaunchRecord) else rec.name
        text = what + (f" (repeated {repeats}x)" if repeats > 1 else "")
        lines.append(f"  r{n} [shape=box, label={_quote(text)}];")
        lines += [f"  a{id(a)} -> r{n};" for _, a in reads if id(a) in arrays]
        lines += [f"  r{n} -> a{id(a)};" for _, a in writes if id(a) in arrays]
        first += repeats
    scope_events(None)
    lines += ["  }"] * depth + ["}"]
    return "\n".join(lines) + "\n"
