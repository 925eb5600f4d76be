"""Tet meshes from files, for soft bodies: volume meshes through meshio (.msh, .vtk, .vtu, .mesh, and the
other formats meshio reads), surface meshes (.obj, .stl, .ply, .off, .glb through trimesh) tetrahedralized
with TetGen (the ``tetgen`` package; note that TetGen itself is AGPL-licensed).

Both need the ``soft`` extra (``pip install xsim[soft]``); the error says so when they are missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SURFACE_SUFFIXES = (".obj", ".stl", ".ply", ".off", ".glb", ".gltf")


class TetMeshError(ValueError):
    """A tet mesh file that cannot be used: names the file and what is wrong."""


def load_tet_mesh(path: str | Path, max_volume: float | None = None, quality: float = 1.5) -> tuple[np.ndarray,
                                                                                                       np.ndarray]:
    """(vertices (n, 3) float64, tets (m, 4) int64) of the file at ``path``: its tetrahedra for a volume mesh
    (other cells ignored), or the tetrahedralization of a closed surface mesh (``SURFACE_SUFFIXES``) with tets
    of at most ``max_volume`` m^3 (None: TetGen's choice) and radius-edge ratio ``quality``. Raises
    ``TetMeshError`` naming the file when it cannot be read or holds no tetrahedra."""
    path = Path(path)
    if not path.is_file():
        raise TetMeshError(f"{path}: no such file")
    if path.suffix.lower() in SURFACE_SUFFIXES:
        return _tetrahedralize(path, max_volume, quality)
    try:
        import meshio
    except ImportError:
        raise TetMeshError(f"{path}: reading tet meshes needs meshio (pip install 'xsim[soft]')") from None
    try:
        mesh = meshio.read(path)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - ReadError, KeyError...; on some files it calls sys.exit
        raise TetMeshError(f"{path}: meshio cannot read it ({type(e).__name__}: {e})") from None
    blocks = [c.data for c in mesh.cells if c.type == "tetra"]
    if not blocks:
        kinds = sorted({c.type for c in mesh.cells}) or ["none"]
        raise TetMeshError(f"{path}: holds no tetrahedra (its cells: {', '.join(kinds)})")
    tets = np.concatenate(blocks).astype(np.int64)
    return _used(np.asarray(mesh.points, dtype=np.float64)[:, :3], tets)


def _tetrahedralize(path: Path, max_volume: float | None, quality: float) -> tuple[np.ndarray, np.ndarray]:
    import trimesh

    try:
        surface = trimesh.load(path, force="mesh", process=True)
    except Exception as e:  # noqa: BLE001 - trimesh and TetGen raise many kinds of errors
        raise TetMeshError(f"{path}: trimesh cannot read it ({type(e).__name__}: {e})") from None
    if len(surface.faces) == 0:
        raise TetMeshError(f"{path}: holds no triangles")
    if not surface.is_watertight:
        raise TetMeshError(f"{path}: the surface is not closed (watertight), so it bounds no volume to fill with tets")
    try:
        import tetgen
    except ImportError:
        raise TetMeshError(f"{path}: tetrahedralizing a surface needs tetgen (pip install 'xsim[soft]')") from None
    gen = tetgen.TetGen(np.asarray(surface.vertices, dtype=np.float64), np.asarray(surface.faces, dtype=np.int32))
    kwargs = {"quality": True, "minratio": float(quality)}
    if max_volume is not None:
        kwargs.update(fixedvolume=True, maxvolume=float(max_volume))
    try:
        nodes, elements = gen.tetrahedralize(**kwargs)[:2]
    except Exception as e:  # noqa: BLE001 - trimesh and TetGen raise many kinds of errors
        raise TetMeshError(f"{path}: TetGen could not tetrahedralize it ({type(e).__name__}: {e})") from None
    if len(elements) == 0:
        raise TetMeshError(f"{path}: TetGen made no tetrahedra")
    return _used(np.asarray(nodes, dtype=np.float64), np.asarray(elements, dtype=np.int64)[:, :4])


def _used(points: np.ndarray, tets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Only the points some tet uses, renumbered (files often carry other cells' points)."""
    keep = np.unique(tets)
    renumber = np.full(len(points), -1, dtype=np.int64)
    renumber[keep] = np.arange(len(keep))
    return points[keep], renumber[tets]
