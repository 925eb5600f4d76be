"""Soft bodies: tetrahedral meshes with a physical material (``SoftBuilderMixin``), and their topology on
the host (numpy): grid tetrahedra, rest shape matrices and volumes, boundary surfaces, Lame parameters.

The material is Young's modulus E [Pa] and Poisson's ratio nu per tet (or NVIDIA Newton's Lame
parameters ``k_mu``, ``k_lambda`` [Pa], converted), and ``k_damp`` [Pa s], a viscous stress; the solver
turns them into each tet's compliances from its rest volume (``xsim.solvers.xpbd.tetrahedra``). Mass comes
from ``density`` [kg/m^3]: each vertex gets a quarter of the mass of the tets around it.
"""

from __future__ import annotations

import numpy as np

from .. import types as T
from ..array import array
from . import validate

VOLUME_TOLERANCE = 1e-9
"""A tet whose volume is below this fraction of its longest edge cubed counts as degenerate (zero volume)."""


def lame_parameters(youngs_modulus, poisson_ratio):
    """(mu, lambda) [Pa] of Young's modulus [Pa] and Poisson's ratio (numbers or arrays)."""
    E, nu = np.asarray(youngs_modulus, np.float64), np.asarray(poisson_ratio, np.float64)
    return E / (2.0 * (1.0 + nu)), E * nu / ((1.0 + nu) * (1.0 - 2.0 * nu))


def youngs_poisson(k_mu, k_lambda):
    """(Young's modulus [Pa], Poisson's ratio) of the Lame parameters mu, lambda [Pa]."""
    mu, la = np.asarray(k_mu, np.float64), np.asarray(k_lambda, np.float64)
    return mu * (3.0 * la + 2.0 * mu) / (la + mu), la / (2.0 * (la + mu))


def check_material(where: str, youngs_modulus: float, poisson_ratio: float, k_damp: float = 0.0) -> None:
    """ValueError naming ``where`` and the key unless E > 0, -1 < nu < 1/2 and k_damp >= 0."""
    E, nu = float(youngs_modulus), float(poisson_ratio)
    if not (np.isfinite(E) and E > 0.0):
        raise ValueError(f"{where}: youngs_modulus must be > 0 Pa, got {youngs_modulus}")
    if not -1.0 < nu < 0.5:
        raise ValueError(f"{where}: poisson_ratio must be in (-1, 0.5), got {poisson_ratio}")
    if not (np.isfinite(k_damp) and k_damp >= 0.0):
        raise ValueError(f"{where}: k_damp must be >= 0 Pa s, got {k_damp}")


def material(where: str, k_mu, k_lambda, youngs_modulus, poisson_ratio) -> tuple[float, float]:
    """(E, nu) from either the Lame pair or the (E, nu) pair (not both, not half of one), checked."""
    lame = k_mu is not None or k_lambda is not None
    engineering = youngs_modulus is not None or poisson_ratio is not None
    if lame and engineering:
        raise ValueError(f"{where}: give k_mu and k_lambda (Lame parameters, Pa) or youngs_modulus and "
                         "poisson_ratio, not both")
    if lame:
        if k_mu is None or k_lambda is None:
            raise ValueError(f"{where}: k_mu and k_lambda go together, got k_mu={k_mu}, k_lambda={k_lambda}")
        if not float(k_mu) > 0.0:
            raise ValueError(f"{where}: k_mu must be > 0 Pa, got {k_mu}")
        if not float(k_lambda) + 2.0 * float(k_mu) / 3.0 > 0.0:
            raise ValueError(f"{where}: k_lambda must be > -2/3 k_mu (a positive bulk modulus), got {k_lambda}")
        E, nu = (float(v) for v in youngs_poisson(k_mu, k_lambda))
    elif engineering:
        if youngs_modulus is None or poisson_ratio is None:
            raise ValueError(f"{where}: youngs_modulus and poisson_ratio go together, got youngs_modulus="
                             f"{youngs_modulus}, poisson_ratio={poisson_ratio}")
        E, nu = float(youngs_modulus), float(poisson_ratio)
    else:
        raise ValueError(f"{where}: needs a material: k_mu and k_lambda, or youngs_modulus and poisson_ratio")
    check_material(where, E, nu)
    return E, nu


def grid_tetrahedra(dim_x: int, dim_y: int, dim_z: int) -> np.ndarray:
    """Tets (5 per cell, 5 dim_x dim_y dim_z, 4) of a grid of (dim_x + 1)(dim_y + 1)(dim_z + 1) vertices
    indexed ``(z (dim_y + 1) + y)(dim_x + 1) + x``. Each cell is a central tet and four corner tets; the
    split alternates with the cell's parity so that neighbouring cells' face diagonals match. Positively
    oriented."""
    def index(x, y, z):
        return (z * (dim_y + 1) + y) * (dim_x + 1) + x

    tets = []
    for z in range(dim_z):
        for y in range(dim_y):
            for x in range(dim_x):
                c = [index(x + (k & 1), y + (k >> 1 & 1), z + (k >> 2)) for k in range(8)]  # corner k: bits x y z
                if (x + y + z) % 2 == 0:
                    centre, corners = (1, 2, 4, 7), (0, 3, 5, 6)
                else:
                    centre, corners = (0, 3, 5, 6), (1, 2, 4, 7)
                tets.append([c[k] for k in centre])
                for k in corners:
                    # the three corners next to k (one bit flipped) with k itself
                    tets.append([c[k], c[k ^ 1], c[k ^ 2], c[k ^ 4]])
    tets = np.asarray(tets, dtype=np.int64).reshape(-1, 4)
    gz, gy, gx = np.meshgrid(np.arange(dim_z + 1), np.arange(dim_y + 1), np.arange(dim_x + 1), indexing="ij")
    lattice = np.stack([gx.ravel(), gy.ravel(), gz.ravel()], axis=1).astype(np.float64)
    flip = signed_volumes(lattice, tets) < 0.0
    tets[flip] = tets[flip][:, [0, 2, 1, 3]]
    return tets


def signed_volumes(x: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """Signed volume (m^3, (m,)) of each tet: det(x1 - x0, x2 - x0, x3 - x0) / 6."""
    d = x[tets[:, 1:]] - x[tets[:, :1]]
    return np.linalg.det(d.transpose(0, 2, 1)) / 6.0


def oriented(where: str, x: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """``tets`` positively oriented: a mesh whose tets are all negative (another convention) is flipped;
    ValueError naming ``where`` and the tets when some are degenerate (zero volume) or oriented against the
    rest (inverted)."""
    if len(tets) == 0:
        raise ValueError(f"{where}: no tetrahedra")
    vol = signed_volumes(x, tets)
    d = x[tets[:, [1, 2, 3, 2, 3, 3]]] - x[tets[:, [0, 0, 0, 1, 1, 2]]]
    scale = np.max(np.linalg.norm(d, axis=2), axis=1) ** 3
    flat = np.flatnonzero(~(np.abs(vol) > VOLUME_TOLERANCE * scale))
    if len(flat):
        raise ValueError(f"{where}: {len(flat)} tetrahedra have zero volume (degenerate), first "
                         f"{_listed(flat, tets)}")
    negative = vol < 0.0
    if negative.all():
        return tets[:, [0, 2, 1, 3]].copy()
    if negative.any():
        bad = np.flatnonzero(negative if negative.sum() <= len(tets) / 2 else ~negative)
        raise ValueError(f"{where}: {len(bad)} tetrahedra are inverted (oriented against the rest of the mesh), "
                         f"first {_listed(bad, tets)}")
    return tets


def _listed(bad: np.ndarray, tets: np.ndarray, most: int = 5) -> str:
    return ", ".join(f"tet {int(t)} (vertices {tets[t].tolist()})" for t in bad[:most])


def rest_data(x: np.ndarray, tets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inverse rest shape matrices Dm^-1 (m, 3, 3), rest volumes (m,) m^3) of positively oriented tets."""
    dm = (x[tets[:, 1:]] - x[tets[:, :1]]).transpose(0, 2, 1)  # columns x1 - x0, x2 - x0, x3 - x0
    return np.linalg.inv(dm), np.linalg.det(dm) / 6.0


def boundary_triangles(tets: np.ndarray) -> np.ndarray:
    """The faces (f, 3) that belong to one tet only, wound counter-clockwise seen from outside (for
    positively oriented tets)."""
    faces = np.concatenate([tets[:, [1, 2, 3]], tets[:, [0, 3, 2]], tets[:, [0, 1, 3]], tets[:, [0, 2, 1]]])
    key = np.sort(faces, axis=1)
    _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    return faces[counts[inverse.ravel()] == 1]


def vertex_masses(x: np.ndarray, tets: np.ndarray, density: float) -> np.ndarray:
    """A quarter of the mass (kg) of the tets around each vertex, at ``density`` kg/m^3."""
    share = np.repeat(np.abs(signed_volumes(x, tets)) * (density / 4.0), 4)
    return np.bincount(tets.ravel(), weights=share, minlength=len(x))


class SoftBuilderMixin:
    """``ModelBuilder``'s tetrahedra and soft bodies."""

    tet_indices: list[tuple[int, int, int, int]]
    """Particles of each tet"""
    tet_youngs_modulus: list[float]
    """Young's modulus of each tet [Pa]"""
    tet_poisson_ratio: list[float]
    """Poisson's ratio of each tet"""
    tet_damping: list[float]
    """Viscous damping of each tet [Pa s]"""
    soft_bodies: list[dict]
    """Each soft body's first particle, particle count, first tet, tet count and boundary triangles (local
    particle indices), for export"""

    def _init_soft(self) -> None:
        self.tet_indices = []
        self.tet_youngs_modulus = []
        self.tet_poisson_ratio = []
        self.tet_damping = []
        self.soft_bodies = []

    @property
    def tet_count(self) -> int:
        return len(self.tet_indices)

    def add_tetrahedron(self, i: int, j: int, k: int, l: int, k_mu: float | None = None,
                        k_lambda: float | None = None, k_damp: float = 0.0, *, youngs_modulus: float | None = None,
                        poisson_ratio: float | None = None) -> int:
        """A stable Neo-Hookean tet on particles i, j, k, l with Lame parameters ``k_mu``, ``k_lambda`` [Pa]
        (or ``youngs_modulus`` [Pa] and ``poisson_ratio``) and viscous damping ``k_damp`` [Pa s]. Its rest
        shape is the particles' positions at ``finalize``. Returns its index."""
        E, nu = material("add_tetrahedron", k_mu, k_lambda, youngs_modulus, poisson_ratio)
        check_material("add_tetrahedron", E, nu, k_damp)
        self._check_particles((i, j, k, l), "add_tetrahedron")
        self.tet_indices.append((int(i), int(j), int(k), int(l)))
        self.tet_youngs_modulus.append(E)
        self.tet_poisson_ratio.append(nu)
        self.tet_damping.append(float(k_damp))
        return len(self.tet_indices) - 1

    def add_soft_grid(self, pos, rot, vel, dim_x: int, dim_y: int, dim_z: int, cell_x: float, cell_y: float,
                      cell_z: float, density: float, k_mu: float | None = None, k_lambda: float | None = None,
                      k_damp: float = 0.0, fix_left: bool = False, fix_right: bool = False, fix_top: bool = False,
                      fix_bottom: bool = False, particle_radius: float | None = None, *,
                      youngs_modulus: float | None = None, poisson_ratio: float | None = None) -> int:
        """A box of dim_x x dim_y x dim_z cells of cell_x x cell_y x cell_z m, 5 tets per cell, from the corner
        ``pos`` along the local axes rotated by ``rot`` (xyzw), moving at ``vel``; ``density`` kg/m^3; the
        material as in ``add_tetrahedron``. ``fix_left``/``fix_right`` pin the vertices at local x = 0 / the
        far x end, ``fix_bottom``/``fix_top`` those at y = 0 / the far y end (NVIDIA Newton's meanings).
        Returns the index of the first particle."""
        validate.args("add_soft_grid", pos=pos, rot=rot, vel=vel, cell_x=cell_x, cell_y=cell_y, density=density,
                      particle_radius=particle_radius)
        for name, value in (("dim_x", dim_x), ("dim_y", dim_y), ("dim_z", dim_z)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise validate.BadValue("add_soft_grid", name, "an integer >= 1", repr(value))
        if not float(cell_z) > 0.0:
            raise validate.BadValue("add_soft_grid", "cell_z", "> 0", repr(cell_z))
        gz, gy, gx = np.meshgrid(np.arange(dim_z + 1), np.arange(dim_y + 1), np.arange(dim_x + 1), indexing="ij")
        ix, iy = gx.ravel(), gy.ravel()
        local = np.stack([ix * cell_x, iy * cell_y, gz.ravel() * cell_z], axis=1).astype(np.float64)
        pinned = (fix_left & (ix == 0)) | (fix_right & (ix == dim_x)) | (fix_bottom & (iy == 0)) | (
            fix_top & (iy == dim_y))
        from .builder import _quat_rotate

        x = _quat_rotate(rot, local) + np.asarray(pos, dtype=np.float64)
        return self._add_soft(x, grid_tetrahedra(dim_x, dim_y, dim_z), vel, pinned, density, k_mu, k_lambda, k_damp,
                              youngs_modulus, poisson_ratio, particle_radius, "add_soft_grid")

    def add_soft_mesh(self, pos, rot, scale: float, vel, vertices, indices, density: float,
                      k_mu: float | None = None, k_lambda: float | None = None, k_damp: float = 0.0,
                      particle_radius: float | None = None, *, youngs_modulus: float | None = None,
                      poisson_ratio: float | None = None) -> int:
        """A soft body from a tet mesh: ``vertices`` (n, 3) m, ``indices`` (m, 4) or flat (4 m,), scaled by
        ``scale``, rotated by ``rot`` and moved to ``pos``, moving at ``vel``; ``density`` kg/m^3, the material
        as in ``add_tetrahedron``. Degenerate or inverted tets are refused with their indices (a mesh whose
        tets are all oriented the other way is flipped). Returns the index of the first particle."""
        validate.args("add_soft_mesh", pos=pos, rot=rot, vel=vel, scale=scale, vertices=vertices, density=density,
                      particle_radius=particle_radius)
        v = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
        tets = np.asarray(indices, dtype=np.int64)
        if tets.size % 4:
            raise ValueError(f"add_soft_mesh: indices must be (m, 4) or a multiple of 4 long, got {tets.shape}")
        tets = tets.reshape(-1, 4)
        if tets.size and (tets.min() < 0 or tets.max() >= len(v)):
            t = int(np.flatnonzero((tets < 0).any(axis=1) | (tets >= len(v)).any(axis=1))[0])
            raise IndexError(f"add_soft_mesh: tet {t} has vertex indices {tets[t].tolist()} out of range (there are "
                             f"{len(v)} vertices)")
        from .builder import _quat_rotate

        x = _quat_rotate(rot, v * scale) + np.asarray(pos, dtype=np.float64)
        return self._add_soft(x, tets, vel, np.zeros(len(v), dtype=bool), density, k_mu, k_lambda, k_damp,
                              youngs_modulus, poisson_ratio, particle_radius, "add_soft_mesh")

    def _add_soft(self, x, tets, vel, pinned, density, k_mu, k_lambda, k_damp, youngs_modulus, poisson_ratio,
                  radius, where: str) -> int:
        E, nu = material(where, k_mu, k_lambda, youngs_modulus, poisson_ratio)
        check_material(where, E, nu, k_damp)
        tets = oriented(where, x, tets)
        used = np.zeros(len(x), dtype=bool)
        used[tets.ravel()] = True
        if not used.all():  # vertices no tet uses would fall freely: leave them out
            keep = np.flatnonzero(used)
            renumber = np.full(len(x), -1, dtype=np.int64)
            renumber[keep] = np.arange(len(keep))
            x, pinned, tets = x[keep], pinned[keep], renumber[tets]
        from .builder import DEFAULT_PARTICLE_RADIUS

        radius = DEFAULT_PARTICLE_RADIUS if radius is None else float(radius)
        start, first_tet = len(self.particle_q), len(self.tet_indices)
        mass = vertex_masses(x, tets, density)
        for p, pin, m in zip(x, pinned, mass.tolist()):
            self.add_particle(p, vel, 0.0 if pin else m, radius)
        world = self.current_world
        self.tet_indices.extend(map(tuple, (tets + start).tolist()))
        self.tet_youngs_modulus.extend([E] * len(tets))
        self.tet_poisson_ratio.extend([nu] * len(tets))
        self.tet_damping.extend([float(k_damp)] * len(tets))
        self.soft_bodies.append({"first": start, "count": len(x), "first_tet": first_tet, "tet_count": len(tets),
                                 "triangles": boundary_triangles(tets), "world": world})
        return start

    def _finalize_soft(self, device, dtype, requires_grad: bool, x: np.ndarray) -> dict:
        """The Model's tet arrays: indices, rest data from the particles' positions ``x``, material."""
        tets = np.asarray(self.tet_indices, dtype=np.int64).reshape(-1, 4)
        count = len(tets)
        if count:
            tets = oriented("finalize", x, tets)
            inv, volume = rest_data(x, tets)
        else:
            inv, volume = np.zeros((0, 3, 3)), np.zeros(0)

        def floats(values, t=dtype, grad=True):
            return array(np.asarray(values, dtype=dtype._np), dtype=t, shape=count, device=device,
                         requires_grad=grad and requires_grad)

        return {
            "tet_count": count,
            "tet_indices": array(tets.astype(np.int32).reshape(-1, 4), dtype=T.int32, device=device),
            "tet_rest_inv": floats(inv, T.matrix((3, 3), dtype), grad=False),
            "tet_rest_volume": floats(volume, grad=False),
            "tet_youngs_modulus": floats(self.tet_youngs_modulus),
            "tet_poisson_ratio": floats(self.tet_poisson_ratio),
            "tet_damping": floats(self.tet_damping, grad=any(self.tet_damping)),
            "soft_bodies": [dict(b) for b in self.soft_bodies],
        }
