"""[[soft]] blocks in scene files: grids and mesh files (meshio tet meshes, surfaces tetrahedralized with
TetGen), the errors that name the key or the file, and scenes/soft_drop.toml run end to end into USD."""

import textwrap
from pathlib import Path

import meshio
import numpy as np
import pytest
import trimesh
from pxr import Usd, UsdGeom

import xsim
from xsim.io import load_scene, simulate
from xsim.io.usd import write_usd

REPO = Path(__file__).parents[2]
TET_POINTS = np.array([[0.0, 0.0, 0.0], [0.1, 0.0, 0.0], [0.0, 0.1, 0.0], [0.0, 0.0, 0.1], [0.1, 0.1, 0.1]])
TETS = np.array([[0, 1, 2, 3], [1, 2, 3, 4]])


def scene(tmp_path: Path, soft: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent("[sim]\nframes = 2\n\n[[soft]]\n") + textwrap.dedent(soft))
    return path


def test_a_grid_soft_block_reaches_the_builder_with_its_material_and_pins(tmp_path):
    s = load_scene(scene(tmp_path, """
        grid = { dim = [2, 1, 3], cell = [0.1, 0.1, 0.1] }
        youngs_modulus = 3.0e4
        poisson_ratio = 0.45
        density = 800.0
        damping = 2.0
        pin = ["left"]
    """))
    b = s.builder()
    m = b.finalize(dtype=xsim.float64)
    assert m.tet_count == 30 and m.particle_count == 3 * 2 * 4
    np.testing.assert_allclose(m.tet_youngs_modulus.numpy(), 3.0e4)
    np.testing.assert_allclose(m.tet_poisson_ratio.numpy(), 0.45)
    np.testing.assert_allclose(m.tet_damping.numpy(), 2.0)
    assert (m.particle_mass.numpy() == 0.0).sum() == 8
    assert s.parts[0].name == "soft0" and s.parts[0].count == 24 and len(s.parts[0].triangles) == 2 * 2 * 11


@pytest.mark.parametrize("suffix", [".vtu", ".msh", ".mesh"])
def test_a_tet_mesh_file_is_read_with_meshio(tmp_path, suffix):
    file = tmp_path / f"two{suffix}"
    mesh = meshio.Mesh(TET_POINTS, [("triangle", np.array([[0, 1, 2]])), ("tetra", TETS)])
    meshio.write(file, mesh, **({"file_format": "gmsh22", "binary": False} if suffix == ".msh" else {}))
    s = load_scene(scene(tmp_path, f'mesh = "{file.name}"\nscale = 2.0\n'))
    m = s.builder().finalize(dtype=xsim.float64)
    assert m.tet_count == 2
    np.testing.assert_allclose(m.tet_rest_volume.numpy().sum(), 8 * (1e-3 / 6 + abs(
        np.linalg.det(TET_POINTS[[2, 3, 4]] - TET_POINTS[1]) / 6)), rtol=1e-9)


def test_a_closed_surface_is_tetrahedralized(tmp_path):
    trimesh.creation.box(extents=(0.2, 0.1, 0.1)).export(tmp_path / "box.obj")
    s = load_scene(scene(tmp_path, 'mesh = "box.obj"\nmax_volume = 1.0e-5\n'))
    m = s.builder().finalize(dtype=xsim.float64)
    assert m.tet_count >= 200  # 2e-3 m^3 in tets of at most 1e-5
    assert m.tet_rest_volume.numpy().sum() == pytest.approx(2e-3, rel=1e-9)


@pytest.mark.parametrize("soft, words", [
    ("grid = { dim = [1, 1, 1], cell = [0.1, 0.1, 0.1] }\npoisson_ratio = 0.5\n",
     r"soft\[0\]\.poisson_ratio: expected a number in \(-1, 0.5\)"),
    ("grid = { dim = [1, 1, 1], cell = [0.1, 0.1, 0.1] }\nyoungs_modulus = 0.0\n",
     r"soft\[0\]\.youngs_modulus: expected a number > 0"),
    ("grid = { dim = [1, 1, 1], cell = [0.1, 0.1, 0.1] }\nmesh = \"x.vtu\"\n", r"soft\[0\]: expected exactly one of"),
    ('mesh = "missing.vtu"\n', r"soft\[0\]\.mesh: expected an existing mesh file"),
    ('mesh = "junk.vtu"\n', r"soft\[0\]\.mesh: .*junk\.vtu: meshio cannot read it"),
    ('mesh = "tris.vtu"\n', r"soft\[0\]\.mesh: .*tris\.vtu: holds no tetrahedra \(its cells: triangle\)"),
    ('mesh = "flat.vtu"\n', r"soft\[0\]\.mesh: .*flat\.vtu: 1 tetrahedra have zero volume .*tet 1"),
    ('mesh = "open.obj"\n', r"soft\[0\]\.mesh: .*open\.obj: the surface is not closed"),
])
def test_bad_soft_blocks_name_the_key_and_the_file(tmp_path, soft, words):
    (tmp_path / "junk.vtu").write_text("not a mesh")
    meshio.write(tmp_path / "tris.vtu", meshio.Mesh(TET_POINTS, [("triangle", np.array([[0, 1, 2]]))]))
    flat = np.vstack([TET_POINTS, [[0.05, 0.05, 0.0]]])
    meshio.write(tmp_path / "flat.vtu", meshio.Mesh(flat, [("tetra", np.array([[0, 1, 2, 3], [0, 1, 2, 5]]))]))
    box = trimesh.creation.box()
    trimesh.Trimesh(box.vertices, box.faces[:-2]).export(tmp_path / "open.obj")
    with pytest.raises(xsim.SceneError, match=words):
        load_scene(scene(tmp_path, soft))


def test_a_soft_block_dropped_on_a_rigid_box_stays_out_of_it_and_is_written_to_usd(tmp_path):
    """scenes/soft_drop.toml for 30 frames: the block lands on the box (which rests on the ground) and no
    particle gets inside the box by 10% of a tet's 5 cm edge; the USD file holds its surface per frame."""
    from scipy.spatial.transform import Rotation

    s = load_scene(REPO / "scenes" / "soft_drop.toml")
    r = simulate(s, frames=30)
    half = np.array([0.25, 0.25, 0.1])
    depth = 0.0
    for x, q in zip(r.frames, r.body_q[:, 0]):
        local = np.abs(Rotation.from_quat(q[3:]).inv().apply(x - q[:3]))
        inside = np.all(local < half, axis=1)
        depth = max(depth, float(np.where(inside, np.min(half - local, axis=1), 0.0).max()))
    assert depth < 0.1 * 0.05
    assert r.frames[-1][:, 2].min() > 0.19  # on the box top (z = 0.2), not past it
    assert r.frames[-1][:, 2].min() < r.frames[0][:, 2].min() - 0.1  # it fell onto it
    usd = write_usd(tmp_path / "drop.usda", r.frames, s.parts, s.placed_colliders(), fps=60.0,
                    bodies=s.body_parts, body_q=r.body_q)
    stage = Usd.Stage.Open(str(usd))
    mesh = next(UsdGeom.Mesh(p) for p in stage.Traverse() if p.GetName() == "block")
    points = mesh.GetPointsAttr()
    assert len(points.GetTimeSamples()) >= 30
    np.testing.assert_allclose(np.asarray(points.Get(30)), r.frames[30], atol=1e-6)
    assert len(mesh.GetFaceVertexCountsAttr().Get()) == len(s.parts[0].triangles)


FIT = """
[sim]
dt = 0.016666667
substeps = 10
iterations = 5
frames = 12

[output]
usd = "out/fit_soft.usda"
preview = false

[[soft]]
name = "column"
grid = { dim = [2, 4, 2], cell = [0.05, 0.05, 0.05] }
pin = ["top"]
density = 1000.0
youngs_modulus = {E}
poisson_ratio = {nu}

[optimize]
optimizer = "lbfgs"
iterations = 30
tolerance = 1.0e-14
output = "{out}"

[[optimize.parameter]]
key = "soft[0].youngs_modulus"
log = true
bounds = [1.0e3, 1.0e8]

[[optimize.parameter]]
key = "soft[0].poisson_ratio"
bounds = [0.0, 0.49]

[[optimize.target]]
type = "recorded"
file = "target.npz"
frames = [4, 8, 12]
"""


def test_xsim_optimize_fits_a_soft_bodys_youngs_modulus_and_poisson_ratio(tmp_path):
    """A column hanging from its top face, recorded at E = 2e5 Pa, nu = 0.35 on the same mesh, fitted from
    E = 1e5 Pa, nu = 0.2 (measured: E to 2e-5, nu to 1.4e-4, the loss down 5e9x in 26 L-BFGS iterations; the
    recording is a float32 run, the fit float64)."""
    from xsim.optim.scene import run_optimize

    truth = tmp_path / "truth.toml"
    truth.write_text(FIT.split("[optimize]")[0].replace("{E}", "2.0e5").replace("{nu}", "0.35"))
    run = simulate(load_scene(truth))
    np.savez(tmp_path / "target.npz", positions=run.frames)
    path = tmp_path / "fit.toml"
    path.write_text(FIT.replace("{E}", "1.0e5").replace("{nu}", "0.2").replace("{out}", str(tmp_path / "fit")))
    result = run_optimize(load_scene(path))
    assert result.values["soft[0].youngs_modulus"] == pytest.approx(2.0e5, rel=0.02)
    assert result.values["soft[0].poisson_ratio"] == pytest.approx(0.35, rel=0.02)
    assert result.losses[0] / result.losses[-1] > 1000.0
    assert result.scene_file.exists() and result.usd.exists()
