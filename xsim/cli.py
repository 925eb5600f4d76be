"""The ``xsim`` command: ``xsim run [SCENE]``, ``xsim check SCENE``, ``xsim optimize SCENE``, ``xsim sweep SCENE``,
``xsim info``."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from .errors import SceneError

DEFAULT_SCENE = "drape.toml"


def default_scene() -> Path:
    """The scene ``xsim run`` uses when none is named: ``scenes/drape.toml`` in the working
    directory, else the one shipped beside the xsim package (a source checkout)."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        candidate = root / "scenes" / DEFAULT_SCENE
        if candidate.is_file():
            return candidate
    raise SceneError(f"no scene named and no default scene found (looked for scenes/{DEFAULT_SCENE} in "
                     f"{Path.cwd()} and beside the xsim package): run `xsim run path/to/scene.toml`")


class Progress:
    """The run's progress on a terminal stream: a tqdm bar of frames (rate, time left) that stays
    silent for runs shorter than ``delay`` seconds. Compiling kernels is its own phase, announced
    by :meth:`compiling`; the bar starts at the first frame (or the first :meth:`substep` report), so no
    estimate includes a compile. Frames of many substeps move the bar in fractions of a frame
    (:meth:`substep`, at most every ``refresh_seconds``), so a run whose first frame takes minutes shows its
    rate and time left within a second."""

    refresh_seconds = 0.5  # s between substep reports that move the bar

    def __init__(self, total: int, substeps: int, stream: TextIO | None = None, delay: float = 1.0,
                 disable: bool = False, desc: str = "frames", unit: str = "frame"):
        self.total, self.substeps, self.delay, self.disable, self.desc = total, substeps, delay, disable, desc
        self.unit = unit
        self.stream = stream or sys.stderr
        self.bar = None
        self.compile_started = None
        self.compile_seconds = 0.0  # from the compile announcement to the first frame
        self._last_substep = 0.0  # perf_counter of the last substep report that moved the bar

    def compiling(self, modules: int):
        """Say that ``modules`` kernel modules are being compiled (not in the kernel cache yet)."""
        self.compile_started = time.perf_counter()
        if not self.disable:
            print(f"xsim: compiling solver kernels (first run only, {modules} modules)...", file=self.stream,
                  flush=True)

    def substep(self, frame: int, done: int, substeps: int):
        """Substep ``done`` of ``substeps`` of frame ``frame`` (1-based) is done: the bar shows
        ``frame - 1 + done / substeps`` frames, at most every ``refresh_seconds``."""
        now = time.perf_counter()
        if now - self._last_substep < self.refresh_seconds or done >= substeps:
            return  # the frame's end is __call__'s
        self._last_substep = now
        self._open(self.total)
        self.bar.update(frame - 1 + done / substeps - self.bar.n)
        self.bar.refresh()  # already throttled here; tqdm's own interval would hide a first report

    def _open(self, total: int):
        from tqdm import tqdm

        if self.bar is None:
            if self.compile_started is not None:
                self.compile_seconds = time.perf_counter() - self.compile_started
            self.bar = tqdm(total=total, desc=self.desc, unit=self.unit, file=self.stream, delay=self.delay,
                            disable=self.disable, dynamic_ncols=True, leave=True)

    def __call__(self, done: int, total: int, **postfix):
        self._open(total)
        self.bar.update(done - self.bar.n)
        self.bar.n = done  # a whole count again after fractional substep reports: "3/3", not "3.0/3"
        if postfix:
            self.bar.set_postfix(postfix, refresh=False)
        if done >= total:
            self.close()

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def check_outputs(args, scene, default_usd: Path, default_preview: Path | None) -> tuple[Path, Path | None]:
    """The USD and preview paths of a run (``--out``/``--preview``, else the defaults), both checked
    before anything is simulated or written, so a bad path costs no run and destroys no file."""
    from .io.files import PREVIEW_SUFFIXES, USD_SUFFIXES, check_output

    given = args.out is not None
    out = check_output(args.out if given else default_usd, "--out" if given else f"{scene.path}: output.usd",
                       USD_SUFFIXES, inputs=[scene.path])
    given = args.preview is not None
    if args.no_preview or not (given or default_preview):
        return out, None
    preview = check_output(args.preview if given else default_preview,
                           "--preview" if given else f"{scene.path}: output.preview", PREVIEW_SUFFIXES,
                           inputs=[scene.path, out])
    return out, preview


def cmd_run(args) -> int:
    """Simulate a scene, write its USD file and preview image."""
    from .io import load_scene, simulate, write_rollout

    scene = load_scene(args.scene or default_scene())
    frames = args.frames if args.frames is not None else scene.sim.frames
    device = args.device or scene.sim.device
    out, preview = check_outputs(args, scene, scene.output.usd, scene.output.preview)
    print(f"xsim: {scene.path}: {frames} frames of {scene.sim.dt:g} s, {scene.sim.substeps} substeps, "
          f"{scene.sim.iterations} iterations, on {device}")
    progress = Progress(frames, scene.sim.substeps, delay=0.0 if args.progress else 1.0, disable=args.quiet)
    t0 = time.perf_counter()
    try:
        rollout = simulate(scene, frames=frames, device=device, on_frame=progress,
                           on_compile=progress.compiling, on_substep=progress.substep)
    except KeyboardInterrupt:
        progress.close()
        # The USD file is only written after the run, so nothing half-written is left behind.
        print("\nxsim: interrupted; no file written", file=sys.stderr)
        return 130
    seconds = time.perf_counter() - t0 - progress.compile_seconds
    write_rollout(out, preview, scene, rollout.frames, rollout.body_q)
    bodies = f"{rollout.model.body_count} bodies, " if rollout.model.body_count else ""
    print(f"xsim: wrote {out} ({frames + 1} frames, {rollout.model.particle_count} particles, {bodies}"
          f"{seconds:.2f} s, {frames * scene.sim.substeps / seconds:,.0f} steps/s)")
    if preview is not None:
        print(f"xsim: wrote {preview}")
    return 0


def cmd_optimize(args) -> int:
    """Fit a scene's [optimize] parameters; write the fitted scene, its loss curve and USD file."""
    from .io import load_scene
    from .optim.scene import run_optimize

    scene = load_scene(args.scene)
    if scene.optimize is None:
        raise SceneError(f"{scene.path}: no [optimize] table: nothing to fit (see docs/scenes.md, [optimize])")
    opt = scene.optimize
    # the fitted rollout's files; [optimize].output/<scene>_fitted.usda unless --out, no preview unless --preview
    args.no_preview = args.preview is None
    out, preview = check_outputs(args, scene, opt.output / f"{scene.name}_fitted.usda", None)
    names = ", ".join(p["key"] for p in opt.parameters)
    print(f"xsim: {scene.path}: fitting {names} with {opt.optimizer}, {opt.iterations} iterations")
    progress = Progress(opt.iterations, 1, delay=0.0, disable=args.quiet, desc="optimize", unit="it")
    t0 = time.perf_counter()
    try:
        result = run_optimize(scene, on_iteration=lambda done, total, loss: progress(done, total, loss=f"{loss:.3e}"),
                              on_compile=progress.compiling, usd=out, preview=preview)
    except KeyboardInterrupt:
        progress.close()
        print("\nxsim: interrupted; no file written", file=sys.stderr)
        return 130
    progress.close()
    for key, value in result.values.items():
        print(f"xsim: {key} = {value}")
    first, final = result.losses[0], result.losses[-1]
    print(f"xsim: loss {first:.3e} -> {final:.3e} ({first / final if final > 0 else float('inf'):.3g}x) in "
          f"{len(result.losses) - 1} iterations, {time.perf_counter() - t0:.1f} s")
    wrote = ", ".join(str(p) for p in (result.scene_file, result.loss_curve, result.usd, preview) if p is not None)
    print(f"xsim: wrote {wrote}")
    return 0


def cmd_sweep(args) -> int:
    """Run a scene once per combination of --param values on Ray; write results.csv, USD files, a plot."""
    from .distributed.sweep import RESULTS, combinations, parse_params, plot_metric, run_sweep

    if not args.param:
        raise SceneError(f"{args.scene}: nothing to sweep: give at least one --param KEY=V1,V2")
    params = parse_params(args.param, args.scene)
    total = len(combinations(params))
    where = f"the Ray cluster at {args.address}" if args.address else "a local Ray"
    print(f"xsim: {args.scene}: {total} runs over {', '.join(params)} on {where}")
    written = []
    try:
        path = run_sweep(args.scene, params, args.out, address=args.address, workers=args.workers,
                         resume=args.resume, usd=not args.no_usd, progress=not args.quiet,
                         on_result=written.append)
    except KeyboardInterrupt:
        print(f"\nxsim: interrupted; {len(written)} new runs kept in {Path(args.out) / RESULTS}: "
              "finish with --resume", file=sys.stderr)
        return 130
    print(f"xsim: wrote {path} ({total} runs{'' if args.no_usd else ', USD files in ' + str(Path(args.out) / 'usd')})")
    if args.plot:
        print(f"xsim: wrote {plot_metric(path, args.plot)}")
    return 0


def cmd_check(args) -> int:
    """Check a scene file (syntax, keys, types, values, mesh files) without running it."""
    from .io import load_scene

    scene = load_scene(args.scene)
    rigid = f"{len(scene.bodies)} bodies, {len(scene.joints)} joints, " if scene.bodies else ""
    print(f"xsim: {scene.path}: ok ({len(scene.cloths)} cloth, {len(scene.colliders)} colliders, {rigid}"
          f"{scene.sim.frames} frames of {scene.sim.dt:g} s)")
    return 0


def _compiler_version(cxx: str) -> str:
    try:
        text = subprocess.run([cxx, "--version"], check=False, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown version"
    return text.splitlines()[0] if text else "unknown version"


def cmd_info(args) -> int:
    """Print xsim's version, the devices, the C++ compiler and the kernel cache location."""
    import numpy

    from . import __version__, config, device
    from .kernels import cache, cpu

    rows = [("xsim", __version__), ("python", f"{platform.python_version()} ({sys.executable})"),
            ("numpy", numpy.__version__)]
    try:
        from pxr import Usd

        rows.append(("usd-core", ".".join(map(str, Usd.GetVersion()))))
    except ImportError:
        rows.append(("usd-core", "not installed (USD export unavailable): pip install usd-core"))
    threads = os.environ.get("XSIM_NUM_THREADS") or f"{os.cpu_count()} (all cores)"
    rows.append(("device cpu", f"{platform.processor() or platform.machine()}, threads: {threads}"))
    try:
        cuda = device._cuda_runtime()
        if cuda is None:
            cuda_text = f"none: {device.cuda_unavailable_reason()}"
        else:
            cuda_text = ", ".join(f"cuda:{i} (sm_{''.join(map(str, cuda.compute_capability(i)))})"
                                  for i in range(cuda.device_count()))
    except Exception as e:  # noqa: BLE001 - a broken driver should not stop `xsim info` reporting the rest
        cuda_text = f"unavailable: {e}"
    rows.append(("devices cuda", cuda_text))
    try:
        cxx = cpu.compiler()
        rows.append(("compiler", f"{cxx} ({_compiler_version(cxx)})"))
    except RuntimeError as e:
        rows.append(("compiler", str(e)))
    rows.append(("kernel cache", str(cache.cache_dir())))
    rows.append(("mode", config.mode))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser of the ``xsim`` command."""
    p = argparse.ArgumentParser(prog="xsim", description="xsim: a differentiable XPBD physics engine.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,check,optimize,sweep,info}")
    run = sub.add_parser("run", help="simulate a scene file, write USD and a preview PNG")
    run.add_argument("scene", nargs="?", help=f"scene file (default: scenes/{DEFAULT_SCENE})")
    run.add_argument("--out", metavar="PATH", help="USD file to write (default: [output].usd, out/<scene>.usda)")
    run.add_argument("--frames", type=_positive("frame"), metavar="N", help="frames to simulate (default: [sim].frames)")
    run.add_argument("--device", type=_device_name, metavar="DEVICE", help='"cpu" or "cuda:N" (default: [sim].device)')
    run.add_argument("--preview", metavar="PATH",
                     help="preview to write: a PNG strip of frames, or an animation (.gif, .mp4) "
                          "(default: out/<scene>.png)")
    run.add_argument("--no-preview", action="store_true", help="write no preview image")
    run.add_argument("--progress", action="store_true", help="show the progress bar even on short runs")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--check", action="store_true",
                     help="check mode: stop at the first NaN/inf, naming the step, kernel and array")
    run.set_defaults(func=cmd_run)
    check = sub.add_parser("check", help="check a scene file without running it")
    check.add_argument("scene", help="scene file")
    check.set_defaults(func=cmd_check)
    optimize = sub.add_parser("optimize", help="fit a scene's [optimize] parameters; write the fitted scene")
    optimize.add_argument("scene", help="scene file with an [optimize] table")
    optimize.add_argument("--out", metavar="PATH",
                          help="USD file of the fitted rollout (default: [optimize].output/<scene>_fitted.usda)")
    optimize.add_argument("--preview", metavar="PATH",
                          help="preview of the fitted rollout: a PNG strip of frames, or a .gif/.mp4 (default: none)")
    optimize.add_argument("--quiet", action="store_true", help="no progress bar")
    optimize.set_defaults(func=cmd_optimize)
    from .distributed.sweep import PLOTTABLE

    sweep = sub.add_parser("sweep", help="run a scene over a grid of parameter values on Ray; write results.csv")
    sweep.add_argument("scene", help="scene file")
    sweep.add_argument("--param", action="append", default=[], metavar="KEY=V1,V2",
                       help='a scene key path and its values, e.g. "cloth[0].mass=0.001,0.002" (repeat: the '
                            "runs are every combination)")
    sweep.add_argument("--out", required=True, metavar="DIR", help="folder for results.csv, USD files and the plot")
    sweep.add_argument("--address", metavar="ADDR",
                       help='Ray cluster to join ("auto", HOST:PORT, ray://HOST:10001); default: start a local Ray')
    sweep.add_argument("--workers", type=_positive("worker"), metavar="N",
                       help="runs at once (default: the cluster's CPUs; a local Ray gets N CPUs)")
    sweep.add_argument("--resume", action="store_true", help="keep the runs in DIR/results.csv and run the rest")
    sweep.add_argument("--no-usd", action="store_true", help="write no USD files, only results.csv")
    sweep.add_argument("--plot", choices=PLOTTABLE, metavar="METRIC",
                       help=f"write DIR/METRIC.png of a metric against the first parameter ({', '.join(PLOTTABLE)})")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.set_defaults(func=cmd_sweep)
    info = sub.add_parser("info", help="print devices, compiler and cache location")
    info.set_defaults(func=cmd_info)
    return p


def _positive(what: str):
    """An argparse type: a whole number >= 1 of ``what`` (frame, worker)."""
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number of {what}s, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected at least 1 {what}, got {value}")
        return value
    return convert


def _device_name(text: str) -> str:
    from .io.scene import DEVICE_NAME

    if not DEVICE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f'expected "cpu" or "cuda:N" (e.g. cuda:0), got {text!r}')
    return text


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``xsim`` console script and ``python -m xsim``; returns the exit code."""
    args = parser().parse_args(argv)
    if getattr(args, "check", False):
        from . import config
        config.mode = "check"
    try:
        return args.func(args)
    except SceneError as e:
        print(f"xsim: error: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as e:
        # Missing compiler, missing CUDA, unwritable output: one sentence, no traceback.
        print(f"xsim: error: {e}", file=sys.stderr)
        return 1
