"""Fit one cloth material (stretch and bend compliance) to several recorded scenes at once, each
scene's loss and gradient computed in its own Ray task and summed (data-parallel gradients).

Three small scenes of the same cloth material move differently: swinging down from its left edge,
sagging between its left and right edges, and tossed upward from its top edge. Each is recorded
with the hidden compliances (a float64 rollout saved as NPZ), then written again with wrong guesses
and an ``[optimize]`` table naming the two compliances and its recording. The summed loss over the
three scenes is minimized with L-BFGS-B (``xsim.optim.minimize``) in log space; every evaluation
sends the three scenes to Ray (``xsim.distributed.summed_loss_and_grad``), which starts a local Ray
with the machine's cores unless ``--address`` names a cluster (see docs/distributed.md).

    python examples/fit_many.py [--address ADDR] [--workers N] [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import tomli_w

import xsim
from xsim.distributed import summed_loss_and_grad
from xsim.io import load_scene, save_loss_curve, simulate
from xsim.optim import minimize
from xsim.optim.scene import scene_objective

HIDDEN = {"stretch": 1.0e-3, "bend": 30.0}   # m/N, 1/(N m)
GUESS = {"stretch": 3.0e-3, "bend": 10.0}
KEYS = ("cloth[0].compliance.stretch", "cloth[0].compliance.bend")
RECORDED_FRAMES = [10, 20]

SIM = {"dt": 0.016666667, "substeps": 4, "iterations": 4, "frames": 20}
CLOTH = {"name": "sheet", "position": [0.0, 0.0, 1.0], "mass": 0.005}
SCENES = {   # name -> what differs in each scene's cloth
    "swing": {"grid": {"dim": [6, 4], "cell": [0.05, 0.05]}, "pin": ["left"]},
    "sag": {"grid": {"dim": [6, 4], "cell": [0.05, 0.05]}, "pin": ["left", "right"]},
    "toss": {"grid": {"dim": [4, 4], "cell": [0.06, 0.06]}, "pin": ["top"], "velocity": [0.0, 0.0, 2.0]},
}


def _scene(name: str, compliance: dict) -> dict:
    cloth = {**CLOTH, **SCENES[name], "compliance": {**compliance, "shear": 1.0e-3}}
    return {"sim": SIM, "output": {"usd": f"out/{name}.usda", "preview": False}, "cloth": [cloth]}


def write_scenes(folder: str | Path) -> list[Path]:
    """Record every scene with HIDDEN (``NAME_target.npz``, positions (frames + 1, n, 3) m, float64) and
    write ``NAME.toml``: the scene with GUESS and an ``[optimize]`` table fitting KEYS to it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name in SCENES:
        recording = folder / f"{name}_hidden.toml"
        recording.write_text(tomli_w.dumps(_scene(name, HIDDEN)), encoding="utf-8")
        scene = load_scene(recording)
        run = simulate(scene, model=scene.builder().finalize(device="cpu", dtype=xsim.float64))
        np.savez(folder / f"{name}_target.npz", positions=run.frames)
        raw = _scene(name, GUESS)
        raw["optimize"] = {"parameter": [{"key": k, "log": True} for k in KEYS],
                           "target": [{"type": "recorded", "file": f"{name}_target.npz", "frames": RECORDED_FRAMES}]}
        files.append(folder / f"{name}.toml")
        files[-1].write_text(tomli_w.dumps(raw), encoding="utf-8")
    return files


def fit(files: list[Path], iterations: int = 20, address: str | None = None, workers: int | None = None,
        verbose: bool = True):
    """Minimize the summed loss of ``files`` over KEYS; returns ({key: value}, loss per iteration)."""
    objective = scene_objective(load_scene(files[0]))   # the free coordinates and bounds all scenes share
    x0, bounds = objective.x0(), objective.bounds()

    def report(it, x, loss):
        if verbose:
            values = "  ".join(f"{k} {v:.5g}" for k, v in zip(KEYS, np.exp(x)))
            print(f"iteration {it:2d}  loss {loss:.3e} m^2  {values}")

    result = minimize(lambda x: summed_loss_and_grad(files, x, address=address, workers=workers), x0=x0,
                      bounds=bounds, maxiter=iterations, callback=report)
    return dict(zip(KEYS, np.exp(result.x).tolist())), result.losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="Ray cluster to join (default: start a local Ray)")
    parser.add_argument("--workers", type=int, help="tasks at once (default: the cluster's CPUs)")
    parser.add_argument("--out", default="out/fit_many", help="folder for the scenes, recordings and loss curve")
    args = parser.parse_args()
    t0 = time.perf_counter()
    files = write_scenes(args.out)
    found, losses = fit(files, address=args.address, workers=args.workers)
    for key, name in zip(KEYS, ("stretch", "bend")):
        print(f"{key}: recovered {found[key]:.5g}, hidden {HIDDEN[name]:.5g} "
              f"({100 * abs(found[key] / HIDDEN[name] - 1):.3f}% off)")
    print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e} ({losses[0] / losses[-1]:.1e}x), {time.perf_counter() - t0:.1f} s")
    print("wrote", save_loss_curve(losses, Path(args.out) / "loss.png", "fit_many: three scenes, one material"))


if __name__ == "__main__":
    main()
