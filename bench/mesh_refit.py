"""``Mesh.refit()`` on xsim and on Warp, the same mesh in one run: Warp's example_mesh refits its bunny
(12,200 triangles, ``warp/examples/assets/bunny.usd``) every frame; the second mesh is a wavy grid of
100,000 triangles. Each sample moves the points (untimed) and times one refit; the table gives the median
in us per refit and warp/xsim (> 1: xsim is faster).

    .venv/bin/python bench/mesh_refit.py [--repeat 51] [--device cpu]

xsim refits on the mesh's device (boxes and pseudo-normals, ``xsim/geometry_refit.py``); Warp's CPU refit is
one thread of C++ (boxes only: its sign tests need no pseudo-normals).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from common import fmt_time, have_warp, init_backend, print_table, ratio, warp_note


def bunny() -> tuple[np.ndarray, np.ndarray]:
    """The points (scaled by 10, as example_mesh does) and triangles of Warp's bunny asset."""
    import warp.examples
    from pxr import Usd, UsdGeom
    stage = Usd.Stage.Open(os.path.join(warp.examples.get_asset_directory(), "bunny.usd"))
    geom = UsdGeom.Mesh(stage.GetPrimAtPath("/root/bunny"))
    points = np.asarray(geom.GetPointsAttr().Get(), np.float32) * np.float32(10.0)
    return points, np.asarray(geom.GetFaceVertexIndicesAttr().Get(), np.int32).reshape(-1, 3)


def wavy_grid(nx: int = 250, ny: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """A height field of nx * ny quads, two triangles each (nx = 250, ny = 200: 100,000 triangles)."""
    x, y = np.meshgrid(np.linspace(0, 1, nx + 1), np.linspace(0, 0.8, ny + 1), indexing="ij")
    points = np.stack([x, y, 0.05 * np.sin(20 * x) * np.cos(15 * y)], -1).reshape(-1, 3).astype(np.float32)
    v = (np.arange(nx)[:, None] * (ny + 1) + np.arange(ny)[None, :]).ravel()
    quads = np.stack([v, v + ny + 1, v + ny + 2, v + 1], 1)
    tris = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return points, tris.astype(np.int32)


def refit_time(wp, points: np.ndarray, tris: np.ndarray, device: str, repeat: int) -> float:
    """The median seconds of one ``mesh.refit()`` after its points moved (the move untimed)."""
    moved = [wp.array(points * np.float32(s), dtype=wp.vec3, device=device) for s in (1.0, 1.01)]
    mesh = wp.Mesh(points=wp.array(points, dtype=wp.vec3, device=device),
                   indices=wp.array(tris.ravel(), dtype=wp.int32, device=device))
    samples = []
    for i in range(repeat + 3):
        mesh.points.assign(moved[i % 2])
        wp.synchronize_device(device)
        t0 = time.perf_counter()
        mesh.refit()
        wp.synchronize_device(device)
        if i >= 3:  # the first refits compile (xsim) and size the threads' cut-off (xsim/kernels/threads.py)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=51)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    xs = init_backend("xsim")
    wp = init_backend("warp") if have_warp() else None
    rows = []
    for name, (points, tris) in (("bunny (example_mesh)", bunny()), ("wavy grid", wavy_grid())):
        t_xsim = refit_time(xs, points, tris, args.device, args.repeat)
        t_warp = refit_time(wp, points, tris, args.device, args.repeat) if wp else None
        rows.append([name, f"{len(tris):,}", f"{len(points):,}", fmt_time(t_xsim), fmt_time(t_warp),
                     ratio(t_warp, t_xsim)])
    threads = os.environ.get("XSIM_NUM_THREADS", "all cores")
    notes = [(f"device {args.device}, median of {args.repeat} refits (wall clock, synchronized); "
              f"XSIM_NUM_THREADS={threads}; warp/xsim > 1 means xsim is faster.")]
    if wp is None:
        notes.append(warp_note())
    print_table("Mesh.refit()", ["mesh", "triangles", "points", "xsim", "warp", "warp/xsim"], rows, notes)


if __name__ == "__main__":
    main()
