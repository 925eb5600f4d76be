"""Preview images: a few frames of a rollout drawn with matplotlib (Agg, no display needed), so a
user without a USD viewer can see what happened."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .files import ANIMATION_SUFFIXES, write_atomically


def pick_frames(frame_count: int, shown: int) -> list[int]:
    """``shown`` frame indices spread evenly from the first to the last of ``frame_count``."""
    shown = max(1, min(shown, frame_count))
    return sorted({round(k) for k in np.linspace(0, frame_count - 1, shown)})


def _rotation_matrix(q) -> np.ndarray:
    x, y, z, w = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def collider_triangles(spec: dict) -> np.ndarray:
    """A collider (scene-file description) as world-space triangles (m, 3, 3) for drawing; the
    ground is left out (drawn as a patch under the scene)."""
    kind = spec["type"]
    if kind == "ground":
        return np.zeros((0, 3, 3))
    if kind in ("mesh", "convex_hull"):
        verts = np.asarray(spec["vertices"], np.float64)
        tris = np.asarray(spec["indices"]).reshape(-1, 3)
        pos, rot = spec.get("position", (0, 0, 0)), spec.get("rotation", (0, 0, 0, 1))
        return (verts @ _rotation_matrix(rot).T + np.asarray(pos))[tris]
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 17), np.linspace(0, np.pi, 9))
    sphere = np.stack([np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v)], axis=-1)
    if kind == "sphere":
        grid, rot = sphere * spec["radius"], (0, 0, 0, 1)
    elif kind == "capsule":
        grid = sphere * spec["radius"]
        grid[..., 2] += np.where(grid[..., 2] >= 0, spec["half_height"], -spec["half_height"])
        rot = spec.get("rotation", (0, 0, 0, 1))
    elif kind == "box":
        # A sphere of radius 2 clipped to the unit cube is the cube's surface: one mesh recipe for all.
        grid = np.clip(sphere * 2.0, -1.0, 1.0) * np.asarray(spec["half_extents"])
        rot = spec.get("rotation", (0, 0, 0, 1))
    elif kind in ("cylinder", "cone"):
        # the same sphere clipped to the unit cylinder (radially and along z); a cone narrows it to the apex
        grid = sphere * 2.0
        radial = np.hypot(grid[..., 0], grid[..., 1])
        grid[..., :2] *= np.minimum(1.0, 1.0 / np.maximum(radial, 1e-12))[..., None]
        grid[..., 2] = np.clip(grid[..., 2], -1.0, 1.0)
        if kind == "cone":
            grid[..., :2] *= (1.0 - grid[..., 2:]) / 2.0
        grid = grid * np.array([spec["radius"], spec["radius"], spec["half_height"]])
        rot = spec.get("rotation", (0, 0, 0, 1))
    elif kind == "ellipsoid":
        grid, rot = sphere * np.array([spec["rx"], spec["ry"], spec["rz"]]), spec.get("rotation", (0, 0, 0, 1))
    else:
        raise ValueError(f"unknown collider type {kind!r}")
    grid = grid @ _rotation_matrix(rot).T + np.asarray(spec["center"])
    a, b, c, d = grid[:-1, :-1], grid[:-1, 1:], grid[1:, 1:], grid[1:, :-1]
    return np.concatenate([np.stack([a, b, c], -2).reshape(-1, 3, 3), np.stack([a, c, d], -2).reshape(-1, 3, 3)])


def save_preview(path: str | Path, frames: np.ndarray, parts, colliders: Sequence[dict] = (),
                 shown: int = 4, fps: float = 60.0, title: str = "", bodies=(), body_q=None) -> Path:
    """Draw ``shown`` frames of a rollout side by side into a PNG at ``path``.

    ``frames``: particle positions (F, n, 3), metres; ``parts``: cloths (``ClothPart``);
    ``colliders``: scene-file collider descriptions; ``bodies``: rigid bodies (``BodyPart``) posed
    by ``body_q`` (F, bodies, 7). Axes are equal and shared by all panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frames = np.asarray(frames, dtype=np.float64)
    picks = pick_frames(len(frames), shown)
    drawing = _Drawing(frames, picks, parts, colliders, bodies, body_q)
    fig = plt.figure(figsize=(4 * len(picks), 4.4))
    for panel, k in enumerate(picks):
        drawing.draw(fig.add_subplot(1, len(picks), panel + 1, projection="3d"), k, fps)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return _save(plt, fig, path, dpi=90)


class _Drawing:
    """What every drawn frame of a rollout shares: static collider triangles, posed body shapes and
    one set of bounds (so all panels or animation frames have the same scale)."""

    def __init__(self, frames: np.ndarray, picks: list[int], parts, colliders, bodies, body_q):
        from .bodies import shape_world_spec

        self.frames, self.parts = frames, parts
        self.statics = [collider_triangles(c) for c in colliders]
        self.moving = {k: [collider_triangles(shape_world_spec(shape, body_q[k, b.index])) for b in bodies
                           for shape in b.shapes] for k in picks}
        grounds = [c.get("height", 0.0) for c in colliders if c["type"] == "ground"]
        self.ground = grounds[0] if grounds else None
        # Bounds from the cloth over the frames drawn (and the colliders), so all panels share a scale.
        pts = [frames[picks].reshape(-1, 3)] + [s.reshape(-1, 3) for s in self.statics if len(s)] + [
            t.reshape(-1, 3) for k in picks for t in self.moving[k]]
        pts = np.concatenate(pts) if pts else np.zeros((1, 3))
        lo, hi = pts.min(axis=0), pts.max(axis=0)
        if self.ground is not None:
            lo[2] = min(lo[2], self.ground)
        self.center, self.half = (lo + hi) / 2, max(float((hi - lo).max()) / 2, 1e-3) * 1.05

    def draw(self, ax, k: int, fps: float):
        """Draw frame ``k`` into the 3D axes ``ax``."""
        from mpl_toolkits.mplot3d.art3d import Poly3DCollection

        center, half = self.center, self.half
        # Draw in insertion order (ground, colliders, cloth): matplotlib's depth sort of whole
        # polygon collections often puts a large ground patch over the cloth.
        ax.computed_zorder = False
        if self.ground is not None:
            z = self.ground
            g = [[center[0] - half, center[1] - half, z], [center[0] + half, center[1] - half, z],
                 [center[0] + half, center[1] + half, z], [center[0] - half, center[1] + half, z]]
            ax.add_collection3d(Poly3DCollection([g], facecolor=(0.8, 0.8, 0.8, 0.5), edgecolor="none"))
        for tris in self.statics:
            if len(tris):
                ax.add_collection3d(Poly3DCollection(tris, facecolor=(0.55, 0.6, 0.65, 0.35),
                                                     edgecolor=(0.4, 0.45, 0.5, 0.3), linewidth=0.3))
        for tris in self.moving[k]:
            ax.add_collection3d(Poly3DCollection(tris, facecolor=(0.3, 0.5, 0.8, 0.9),
                                                 edgecolor=(0.15, 0.25, 0.45, 0.5), linewidth=0.3))
        for part in self.parts:
            p = self.frames[k, part.first:part.first + part.count]
            if len(part.triangles):
                ax.add_collection3d(Poly3DCollection(p[part.triangles], facecolor=(0.85, 0.4, 0.3, 1.0),
                                                     edgecolor=(0.4, 0.15, 0.1, 0.6), linewidth=0.2))
            else:
                ax.scatter(p[:, 0], p[:, 1], p[:, 2], s=6, color=(0.85, 0.4, 0.3))
        ax.set_xlim(center[0] - half, center[0] + half)
        ax.set_ylim(center[1] - half, center[1] + half)
        ax.set_zlim(center[2] - half, center[2] + half)
        ax.set_box_aspect((1, 1, 1))
        ax.set_title(f"frame {k}  (t = {k / fps:.2f} s)", fontsize=10)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_zlabel("z")


def save_animation(path: str | Path, frames: np.ndarray, parts, colliders: Sequence[dict] = (), fps: float = 60.0,
                   title: str = "", bodies=(), body_q=None, max_frames: int = 60) -> Path:
    """Write the rollout as an animation (``.gif``, or ``.mp4`` with imageio-ffmpeg) at ``path``:
    at most ``max_frames`` frames spread over the run, played back in real time. Arguments as
    :func:`save_preview`."""
    import imageio.v2 as imageio
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if path.suffix not in ANIMATION_SUFFIXES:
        raise ValueError(f"an animated preview is a .gif or .mp4 file, got {path.name!r}")
    if path.suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise RuntimeError(f"writing {path.name} needs imageio-ffmpeg (pip install imageio-ffmpeg); "
                               "a .gif preview needs nothing more") from None
    frames = np.asarray(frames, dtype=np.float64)
    picks = pick_frames(len(frames), max_frames)
    drawing = _Drawing(frames, picks, parts, colliders, bodies, body_q)
    images = []
    fig = plt.figure(figsize=(4.8, 4.8))
    for k in picks:
        fig.clf()
        drawing.draw(fig.add_subplot(1, 1, 1, projection="3d"), k, fps)
        if title:
            fig.suptitle(title)
        fig.canvas.draw()
        images.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
    plt.close(fig)
    # real time: the picked frames are (len - 1) / (picks - 1) simulation frames apart
    playback = fps * (len(picks) - 1) / max(len(frames) - 1, 1) if len(picks) > 1 else 1.0
    if path.suffix == ".gif":
        return write_atomically(path, lambda tmp: imageio.mimsave(tmp, images, duration=1000.0 / playback, loop=0))
    return write_atomically(path, lambda tmp: imageio.mimsave(tmp, images, fps=playback, macro_block_size=1))


def save_loss_curve(losses: Sequence[float], path: str | Path, title: str = "") -> Path:
    """Plot a loss per optimization iteration (log scale) into a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.semilogy(range(len(losses)), losses, marker="o", markersize=3)
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss")
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return _save(plt, fig, path, dpi=100)


def _save(plt, fig, path: str | Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` atomically (its folder made if missing), close it, return the path."""
    try:
        return write_atomically(path, lambda tmp: fig.savefig(tmp, dpi=dpi))
    finally:
        plt.close(fig)
