"""Warp's own example programs, run on Warp and on xsim with only the imports changed, side by side.

Copies each of the 19 CPU-capable programs of the installed warp-lang's ``warp/examples/core`` and
``warp/examples/optim`` to a temporary folder, points the imports at the engine (``import warp as wp``
-> ``import xsim as wp``, ``warp.render`` / ``warp.optim`` -> ``xsim.render`` / ``xsim.optim``; ``warp.examples``
stays, it only names the asset folder; ``warp.tests.unittest_utils``, which two examples star-import for
numpy, becomes the shim of ``bench/warp_tests.py``), and runs each in its own process on the CPU, headless,
with fewer frames than their defaults (the same arguments for both engines). Then it compares what the two
printed (timings left out) and the arrays each example object holds at the end, and prints a table: exit
status, seconds, and the agreement (bitwise, or the largest difference relative to the array's largest value).

    .venv/bin/python bench/warp_examples.py [--timeout 600] [--logs DIR] [name ...]

Needs warp-lang (the ``bench`` extra). Not part of the test suite: a cold run compiles every example's kernels
for both engines (minutes each on two cores).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# name -> (folder, how to run it, arguments): "main" runs the file as __main__ with the arguments; "call:f" imports
# it and calls f(device="cpu") (the two examples whose __main__ names device="cuda")
EXAMPLES = {
    "dem": ("core", "main", ["--num-frames", "10", "--stage-path", "None"]),
    "fdtd_3d": ("core", "main", ["--num-steps", "20", "--headless"]),
    "fft_poisson_navier_stokes_2d": ("core", "main", ["--num-steps", "20", "--headless"]),
    "fluid": ("core", "main", ["--num-frames", "10", "--headless"]),
    "mesh": ("core", "main", ["--num-frames", "10", "--stage-path", "None"]),
    "mesh_intersect": ("core", "main", ["--stage-path", "None"]),
    "raycast": ("core", "main", ["--width", "128", "--height", "128", "--headless"]),
    "raymarch": ("core", "main", ["--width", "128", "--height", "64", "--headless"]),
    "sample_mesh": ("core", "main", ["--num-frames", "4", "--stage-path", "None"]),
    "sph": ("core", "main", ["--num-frames", "5", "--stage-path", "None"]),
    "spin_lock": ("core", "call:test_spinlock", []),
    "torch": ("core", "main", ["--num-frames", "3", "--train-iters", "5", "--headless"]),
    "wave": ("core", "main", ["--num-frames", "10", "--stage-path", "None"]),
    "work_queue": ("core", "call:test_work_queue", []),
    "diffray": ("optim", "main", ["--train-iters", "3", "--height", "64", "--headless"]),
    "fluid_checkpoint": ("optim", "main", ["--num-frames", "20", "--train-iters", "2", "--headless"]),
    "fluid_checkpoint_custom_backward": ("optim", "main", ["--num-frames", "20", "--train-iters", "2", "--headless"]),
    "navier_stokes_perturbation": ("optim", "main", ["--spin-up-steps", "20", "--lead-steps", "10",
                                                     "--train-iters", "2", "--headless"]),
    "particle_repulsion": ("optim", "main", ["--num-frames", "20", "--headless"]),
}

# printed lines that differ between runs of one engine: timings, Warp's banner and module loads
_NOISE = re.compile(r"took \d|\bms\b|\d\.\d+ ?s\b|/s\b|elapsed|Warp \d+\.\d+|Module .* (load|compile)|CUDA|Devices:|"
                    r"Kernel cache|\.cache/|\"cpu\"|'cpu'|^\s*$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)


def warp_examples_dir() -> Path:
    from warp_tests import warp_tests_dir  # the installed warp-lang's folders (exits when it is missing)
    return warp_tests_dir().parent / "examples"


def port(text: str, engine: str) -> str:
    """An example's text with its imports pointed at ``engine`` (unchanged for Warp but for the test shim)."""
    text = text.replace("from warp.tests.unittest_utils import", "from unittest_utils import")
    if engine != "xsim":
        return text
    text = re.sub(r"^(\s*)import warp as wp\b", r"\1import xsim as wp", text, flags=re.MULTILINE)
    for sub in ("render", "optim"):  # warp.examples stays: it names the asset folder
        text = re.sub(rf"^(\s*)import warp\.{sub}\b", rf"\1import xsim.{sub}", text, flags=re.MULTILINE)
        text = re.sub(rf"^(\s*)from warp\.{sub} import", rf"\1from xsim.{sub} import", text, flags=re.MULTILINE)
        text = re.sub(rf"(?<![\w.])warp\.{sub}\.", f"xsim.{sub}.", text)
    return text


def _arrays(obj, prefix: str, out: dict, depth: int = 0) -> None:
    """The engine arrays reachable from ``obj``'s attributes (lists and tuples of them too), as numpy."""
    fields = getattr(type(obj), "_fields", None)  # an xsim struct keeps its fields out of __dict__
    if isinstance(fields, dict):
        items = [(f, getattr(obj, f)) for f in fields]
    else:
        items = vars(obj).items() if hasattr(obj, "__dict__") else ()
    for name, v in items:
        if name.startswith("_"):  # an engine's own bookkeeping on the object (xsim's struct values keep some)
            continue
        key = f"{prefix}{name}"
        if type(v).__name__ in ("array", "Array") and hasattr(v, "numpy"):
            _host_copy(v, key, out)
        elif isinstance(v, (list, tuple)) and v and all(type(x).__name__ in ("array", "Array") for x in v):
            for i, x in enumerate(v):
                _host_copy(x, f"{key}[{i}]", out)
        elif depth == 0 and type(v).__module__ in ("__main__", "example") and not isinstance(v, type):
            _arrays(v, key + ".", out, depth + 1)  # an object of the example's own classes


def _host_copy(a, key: str, out: dict) -> None:
    """``out[key]``: engine array ``a`` as numpy; left out where the engine cannot copy it (a view it cannot
    read back, an array of structs holding arrays)."""
    with contextlib.suppress(Exception):
        out[key] = np.array(a.numpy())


def _nan_filled_empty(wp) -> None:
    """Make the engine's ``empty``/``empty_like`` fill float arrays with NaN: an array an example allocates
    and never writes (fdtd_3d's plane buffer without a renderer) then compares equal on both engines instead
    of showing two heaps' garbage. Only the comparison sees this; an example that reads such an array before
    writing it reads NaN on both engines alike."""
    def filled(make):
        def empty(*args, **kwargs):
            a = make(*args, **kwargs)
            with contextlib.suppress(Exception):  # a dtype fill_ cannot take (a struct): left as allocated
                if a.size and np.asarray(a.numpy()).dtype.kind == "f":
                    a.fill_(float("nan"))
            return a
        return empty
    wp.empty, wp.empty_like = filled(wp.empty), filled(wp.empty_like)


def child(engine: str, src: Path, out: Path, entry: str, args: list[str]) -> int:
    """Run one ported example in this process; write its arrays to ``out`` (.npz) and a status .json."""
    status = {"ok": False, "error": ""}
    arrays: dict = {}
    try:
        import importlib
        wp = importlib.import_module(engine)
        if engine == "warp":
            wp.config.quiet = True
        _nan_filled_empty(wp)
        if entry == "main":
            sys.argv = [str(src), *args]
            if "--device" not in args and '"--device"' in src.read_text():
                sys.argv += ["--device", "cpu"]
            g = runpy.run_path(str(src), run_name="__main__")
        else:
            g = runpy.run_path(str(src), run_name="example")
            g[entry.split(":", 1)[1]](device="cpu")
        if "example" in g:
            _arrays(g["example"], "", arrays)
        status["ok"] = True
    except BaseException as e:  # noqa: BLE001 - the row reports it
        tb = traceback.format_exc()
        status["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        status["where"] = [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File ")][-1:]
        print(tb, file=sys.stderr)
    sys.stdout.flush()
    np.savez(out, **arrays)
    out.with_suffix(".json").write_text(json.dumps(status))
    return 0 if status["ok"] else 1


def run(name: str, engine: str, timeout: float, work: Path) -> dict:
    folder, entry, args = EXAMPLES[name]
    src_file = warp_examples_dir() / folder / f"example_{name}.py"
    d = work / engine
    d.mkdir(parents=True, exist_ok=True)
    if engine == "xsim" or not (d / "unittest_utils.py").exists():
        from warp_tests import SHIM
        (d / "unittest_utils.py").write_text(SHIM.format(engine=engine))
    src = d / src_file.name
    src.write_text(port(src_file.read_text(), engine))
    out = d / f"{name}.npz"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine, str(src), str(out), entry, "--", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(d), str(HERE), str(HERE.parent)]), MPLBACKEND="Agg")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        rc, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, stdout, stderr = "timeout", _text(e.stdout), _text(e.stderr)
    seconds = time.perf_counter() - t0
    status = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    arrays = dict(np.load(out)) if out.exists() and status.get("ok") else {}
    return {"rc": rc, "seconds": seconds, "stdout": stdout, "stderr": stderr, "arrays": arrays,
            "error": status.get("error", "" if rc == 0 else (stderr.strip().splitlines() or ["?"])[-1][:200]),
            "where": status.get("where", [])}


def _text(b) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")


def printed(text: str) -> list[str]:
    return [ln.rstrip() for ln in text.splitlines() if not _NOISE.search(ln)]


def compare(ref: dict, got: dict) -> tuple[str, float]:
    """How ``got``'s run agrees with ``ref``'s: a word and the largest relative difference seen."""
    worst, words = 0.0, []
    a, b = printed(ref["stdout"]), printed(got["stdout"])
    skeleton = [_NUMBER.sub("#", x) for x in a] == [_NUMBER.sub("#", x) for x in b]
    if a != b:
        if not skeleton:
            words.append(f"prints differ ({len(a)} vs {len(b)} lines)")
        else:
            for x, y in zip(a, b):
                for p, q in zip(_NUMBER.findall(x), _NUMBER.findall(y)):
                    p, q = float(p), float(q)
                    if p != q and not (np.isnan(p) and np.isnan(q)):
                        worst = max(worst, abs(p - q) / max(abs(p), abs(q), 1e-30))
    keys = sorted(set(ref["arrays"]) & set(got["arrays"]))
    missing = sorted(set(ref["arrays"]) ^ set(got["arrays"]))
    if missing:
        words.append(f"{len(missing)} arrays on one side only ({missing[0]})")
    for k in keys:
        x, y = ref["arrays"][k], got["arrays"][k]
        if x.shape != y.shape:
            words.append(f"{k}: shape {x.shape} vs {y.shape}")
            continue
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            x, y = x.astype(np.float64), y.astype(np.float64)
            same_nan = np.isnan(x) == np.isnan(y)
            if not same_nan.all():
                words.append(f"{k}: NaN in other places")
                worst = max(worst, 1.0)
            ok = ~np.isnan(x) & ~np.isnan(y)
            scale = np.abs(x[ok]).max(initial=0.0)
            diff = np.abs(x[ok] - y[ok]).max(initial=0.0)
            worst = max(worst, diff / scale if scale > 0 else diff)
        elif not np.array_equal(x, y):
            worst = max(worst, float(np.mean(x != y)))
            words.append(f"{k}: {int(np.sum(x != y))} of {x.size} differ")
    if not keys and not (a or b):
        words.append("nothing to compare")
    bitwise = worst == 0.0 and not words
    verdict = "bitwise" if bitwise else f"max rel {worst:.1e}" + (f"; {'; '.join(words)}" if words else "")
    return verdict, worst


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        engine, src, out, entry = sys.argv[2:6]
        return child(engine, Path(src), Path(out), entry, sys.argv[7:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"examples to run (default all {len(EXAMPLES)})")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per example and engine")
    ap.add_argument("--logs", type=Path, help="keep each run's output in this folder")
    opts = ap.parse_args()
    names = opts.names or list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        ap.error(f"unknown examples {unknown}; known: {', '.join(EXAMPLES)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="xsim_warp_examples_") as tmp:
        for name in names:
            res = {e: run(name, e, opts.timeout, Path(tmp)) for e in ("warp", "xsim")}
            if opts.logs:
                opts.logs.mkdir(parents=True, exist_ok=True)
                for e, r in res.items():
                    (opts.logs / f"{name}.{e}.log").write_text(r["stdout"] + "\n--- stderr ---\n" + r["stderr"])
            w, x = res["warp"], res["xsim"]
            if w["rc"] != 0:
                verdict = f"Warp failed: {w['error']}"
            elif x["rc"] != 0:
                verdict = f"xsim failed: {x['error']} {' '.join(x['where'])}"
            else:
                verdict = compare(w, x)[0]
            rows.append((name, w["rc"], w["seconds"], x["rc"], x["seconds"], verdict))
            print(f"{name:34s} warp rc={w['rc']!s:7s} {w['seconds']:6.1f}s  xsim rc={x['rc']!s:7s} "
                  f"{x['seconds']:6.1f}s  {verdict}", flush=True)
    ran = sum(r[3] == 0 for r in rows)
    agree = sum(r[5] == "bitwise" or r[5].startswith("max rel") and "; " not in r[5]
                and float(r[5].split()[2]) <= 1e-4 for r in rows)
    print(f"\nxsim finished {ran} of {len(rows)}; agree with Warp within 1e-4 relative (or bitwise): {agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
