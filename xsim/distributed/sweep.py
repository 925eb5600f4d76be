"""``xsim sweep``: one rollout per combination of parameter values, run on Ray, each result written
to ``DIR/results.csv`` (and its USD file) as it arrives, so an interrupted sweep resumes losing nothing.

The CSV holds a ``run`` number (the combination's place in the cartesian product, first parameter
slowest), one column per parameter (its TOML value), :data:`~xsim.distributed.METRICS`, the run's
``wall_time`` (s) and its ``usd`` file (relative to DIR, empty with ``usd=False``). When every run is
in, the file is rewritten in run order, so a resumed sweep's file equals an uninterrupted one's.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import tomli_w

from ..errors import SceneError
from ..io.files import write_atomically
from .metrics import METRICS
from .rollouts import RolloutResult, map_jobs, rollout_jobs

RESULTS = "results.csv"
PLOTTABLE = (*METRICS, "wall_time")
"""Columns ``--plot`` can draw."""


def parse_params(texts: Sequence[str], scene_path: str | Path) -> dict[str, list]:
    """``["cloth[0].mass=0.001,0.002", ...]`` -> ``{"cloth[0].mass": [0.001, 0.002], ...}``; a
    malformed option raises ``xsim.SceneError`` naming it."""
    from ..io.overrides import parse_key_path, parse_values
    from ..io.scene import scene_error
    from ..io.schema import Invalid

    out: dict[str, list] = {}
    for text in texts:
        key, eq, values = text.partition("=")
        key = key.strip()
        try:
            if not eq:
                raise Invalid(f"--param {text}", "KEY=VALUE[,VALUE...] (e.g. cloth[0].mass=0.001,0.002)",
                              "no '='")
            parse_key_path(key)
            if key in out:
                raise Invalid(key, "each key in one --param", "a second --param with it")
            out[key] = parse_values(values, f"--param {key}")
        except Invalid as e:
            raise scene_error(Path(scene_path), e) from None
    return out


def combinations(params: Mapping[str, Sequence]) -> list[dict]:
    """The cartesian product of the values, first key slowest: a list of ``{key: value}``."""
    keys = list(params)
    return [dict(zip(keys, values)) for values in itertools.product(*(params[k] for k in keys))]


def cell(value) -> str:
    """A parameter value as a CSV cell: its TOML text (``0.001``, ``[0.0, 0.0, 1.0]``, ``true``)."""
    return tomli_w.dumps({"v": value}).strip()[len("v = "):]


def columns(keys: Sequence[str]) -> list[str]:
    """The header of ``results.csv`` for parameters ``keys``."""
    return ["run", *keys, *METRICS, "wall_time", "usd"]


def _row(result: RolloutResult, keys: Sequence[str], usd: str) -> list[str]:
    return [str(result.index), *(cell(result.params[k]) for k in keys),
            *(repr(result.metrics[m]) for m in METRICS), repr(result.wall_time), usd]


def _read_done(path: Path, header: list[str], runs: list[dict]) -> dict[int, list[str]]:
    """Rows already in a sweep's CSV, by run: each checked to belong to this sweep; a row cut short
    by an interruption is dropped (it is run again)."""
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):  # the last row's writing was cut off
        text = text[:text.rfind("\n") + 1]
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return {}
    if rows[0] != header:
        raise SceneError(f"{path}: written by a different sweep (columns {', '.join(rows[0])}); this one has "
                         f"{', '.join(header)}: choose another --out")
    keys = header[1:1 + len(runs[0])]
    done = {}
    for line, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            continue
        run = int(row[0]) if row[0].isdigit() else -1
        if not 0 <= run < len(runs) or row[1:1 + len(keys)] != [cell(runs[run][k]) for k in keys]:
            raise SceneError(f"{path}:{line}: run {row[0]} with values {', '.join(row[1:1 + len(keys)])} is not "
                             "a run of this sweep: choose another --out")
        done[run] = row
    return done


def _write_rows(path: Path, header: list[str], rows: Sequence[list[str]]):
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_atomically(path, lambda tmp: tmp.write_text(text.getvalue(), encoding="utf-8"))


def run_sweep(scene_path: str | Path, params: Mapping[str, Sequence], out_dir: str | Path, *,
              address: str | None = None, workers: int | None = None, resume: bool = False, usd: bool = True,
              frames: int | None = None, progress: bool = True,
              on_result: Callable[[RolloutResult], None] | None = None) -> Path:
    """Run the sweep of ``scene_path`` over the cartesian product of ``params`` (key path -> values)
    into ``out_dir``; returns the path of ``results.csv``. Every combination is checked before any
    run starts. ``resume``: keep the runs already in ``results.csv`` and run the rest (without it an
    existing, non-empty file is refused). ``on_result(result)`` after each row is written."""
    from tqdm import tqdm

    from ..io.usd import write_usd

    runs = combinations(params)
    keys = list(params)
    header = columns(keys)
    out_dir = Path(out_dir)
    path = out_dir / RESULTS
    done: dict[int, list[str]] = {}
    if path.exists() and path.stat().st_size > 0:
        if not resume:
            raise FileExistsError(f"{path} holds an earlier sweep's results: pass --resume to finish it, or "
                                  "choose another --out")
        done = _read_done(path, header, runs)
    todo = [i for i in range(len(runs)) if i not in done]
    jobs = rollout_jobs(scene_path, [runs[i] for i in todo])  # every bad key or value fails here, before Ray
    _write_rows(path, header, [done[i] for i in sorted(done)])
    bar = tqdm(total=len(runs), initial=len(done), desc="sweep", unit="run", disable=not progress,
               dynamic_ncols=True)
    try:
        with open(path, "a", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, lineterminator="\n")
            results = map_jobs(jobs, frames=frames, keep_frames=usd, address=address, workers=workers) if jobs else []
            for result in results:
                scene = jobs[result.index][0]
                result.index = todo[result.index]
                usd_name = ""
                if usd:
                    usd_name = f"usd/{scene.name}_{result.index:04d}.usda"
                    write_usd(out_dir / usd_name, result.frames, result.parts, scene.placed_colliders(),
                              fps=scene.output.fps, bodies=result.body_parts, body_q=result.body_q)
                row = _row(result, keys, usd_name)
                writer.writerow(row)
                f.flush()
                os.fsync(f.fileno())  # a row on disk is a run never run again
                done[result.index] = row
                bar.update(1)
                if on_result is not None:
                    on_result(result)
    finally:
        bar.close()
    _write_rows(path, header, [done[i] for i in sorted(done)])
    return path


def plot_metric(csv_path: str | Path, metric: str, out: str | Path | None = None) -> Path:
    """Plot ``metric`` against the first parameter of a sweep's CSV, one line per combination of the
    others; writes ``DIR/METRIC.png`` (or ``out``) atomically and returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    csv_path = Path(csv_path)
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = list(reader)
    if metric not in header:
        raise ValueError(f"plot_metric: {csv_path} has no column {metric!r} (it has {', '.join(header[1:])})")
    keys = header[1:header.index(METRICS[0])]
    col = header.index(metric)
    xs = sorted({r[1] for r in rows}, key=_order)
    numeric = all(_is_number(v) for v in xs)
    fig, ax = plt.subplots(figsize=(6, 4))
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault(tuple(r[2:1 + len(keys)]), []).append(r)
    for rest, members in groups.items():
        members.sort(key=lambda r: xs.index(r[1]))
        x = [float(r[1]) if numeric else xs.index(r[1]) for r in members]
        label = ", ".join(f"{k} = {v}" for k, v in zip(keys[1:], rest)) or None
        ax.plot(x, [float(r[col]) for r in members], marker="o", label=label)
    if not numeric:
        ax.set_xticks(range(len(xs)), xs)
    ax.set_xlabel(keys[0])
    ax.set_ylabel(metric)
    ax.grid(True, alpha=0.3)
    if len(groups) > 1:
        ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        return write_atomically(out or csv_path.parent / f"{metric}.png", lambda tmp: fig.savefig(tmp, dpi=100))
    finally:
        plt.close(fig)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _order(text: str) -> tuple:
    """Numbers first, by value, then other values by their text."""
    return (0, float(text), "") if _is_number(text) else (1, 0.0, text)
