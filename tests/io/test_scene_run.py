"""Scenes end to end: scene file -> ModelBuilder -> Model -> solver -> USD file and preview."""

import textwrap
from pathlib import Path

import numpy as np
import pytest
from pxr import Usd, UsdGeom

from xsim.cli import main
from xsim.io import check_usd, load_scene, simulate
from xsim.sim import ModelBuilder

REPO = Path(__file__).parents[2]

SMALL = """
[sim]
dt = 0.0166666667
substeps = 10
iterations = 2
frames = 10

[[cloth]]
name = "sheet"
grid = { dim = [4, 3], cell = [0.1, 0.1] }
position = [-0.2, -0.15, 1.0]
mass = 0.01

[[cloth]]
name = "hanging"
grid = { dim = [3, 3], cell = [0.1, 0.1] }
position = [2.0, 0.0, 1.0]
rotation = { axis = [1.0, 0.0, 0.0], degrees = 90.0 }
pin = ["top"]
velocity = [0.0, 1.0, 0.0]
mass = 0.01

[[collider]]
type = "sphere"
center = [0.0, 0.0, 0.5]
radius = 0.3
restitution = 0.4

[[collider]]
type = "ground"
"""


@pytest.fixture
def small_scene(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def test_scene_becomes_a_builder_holding_its_cloths_and_colliders(small_scene):
    scene = load_scene(small_scene)
    model = scene.builder().finalize(device="cpu")
    assert model.particle_count == 5 * 4 + 4 * 4
    assert [(p.name, p.first, p.count, len(p.triangles)) for p in scene.parts] == [
        ("sheet", 0, 20, 24), ("hanging", 20, 16, 18)]
    q = model.particle_q.numpy()
    np.testing.assert_allclose(q[0], [-0.2, -0.15, 1.0])
    # rotated 90 degrees about x: the grid's local y runs along world z, its top row is highest
    np.testing.assert_allclose(q[20 + 15], [2.3, 0.0, 1.3], atol=1e-6)
    mass = model.particle_mass.numpy()
    np.testing.assert_allclose(mass[:20], 0.01)
    assert mass[20 + 12:].tolist() == [0.0] * 4 and np.all(mass[20:32] > 0)   # pinned top row
    assert [c.type for c in model.colliders] == ["sphere"] and model.ground
    np.testing.assert_allclose(model.shape_restitution.numpy()[0], 0.4)  # the sphere: a static shape, first


def test_a_scene_builder_can_be_edited_further_and_simulated(small_scene):
    builder = load_scene(small_scene).builder()
    builder.add_particle(pos=(0.0, 0.0, 3.0), vel=(1.0, 0.0, 0.0), mass=0.5, radius=0.02)
    model = builder.finalize(device="cpu")
    assert model.particle_count == 37
    rollout = simulate(load_scene(small_scene), frames=6, model=model)
    np.testing.assert_allclose(rollout.frames[6, 36, :2], [0.1, 0.0], atol=1e-6)   # 1 m/s for 0.1 s along x


def test_mesh_collider_scene_loads_the_mesh_relative_to_the_scene_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    scene = load_scene(REPO / "scenes" / "mesh_drop.toml")
    rock = scene.colliders[0]
    assert rock["vertices"].shape == (42, 3) and rock["indices"].shape == (80, 3)
    model = scene.builder().finalize(device="cpu")
    assert model.colliders[0].type == "mesh" and model.mesh_indices.shape[0] == 80
    np.testing.assert_allclose(model.colliders[0].rot, (0.0, 0.0, np.sin(np.pi / 12), np.cos(np.pi / 12)))


def test_cloth_clear_of_colliders_falls_rigidly_under_gravity(small_scene):
    scene = load_scene(small_scene)
    rollout = simulate(scene)
    assert rollout.frames.shape == (11, 36, 3)
    drop = rollout.frames[0, :20] - rollout.frames[10, :20]    # "sheet": 1/6 s, still above the sphere
    np.testing.assert_allclose(drop[:, :2], 0.0, atol=1e-6)
    np.testing.assert_allclose(drop[:, 2], drop[0, 2], atol=1e-6)   # a translation: no constraint moved
    assert drop[0, 2] == pytest.approx(9.81 * (10 / 60) ** 2 / 2, rel=5e-3)


def test_pinned_edge_stays_put_while_the_rest_of_the_cloth_moves(small_scene):
    rollout = simulate(load_scene(small_scene), frames=5)
    hanging = rollout.frames[:, 20:]
    np.testing.assert_array_equal(hanging[5, 12:], hanging[0, 12:])          # pinned top row
    assert np.all(hanging[5, :12, 1] - hanging[0, :12, 1] > 0.02)            # the rest moves along +y


def test_xsim_run_writes_usd_matching_the_simulation_and_a_preview(small_scene, tmp_path, capsys):
    out, png = tmp_path / "o" / "small.usda", tmp_path / "o" / "small.png"
    assert main(["run", str(small_scene), "--out", str(out), "--preview", str(png), "--frames", "8"]) == 0
    assert f"wrote {out} (9 frames, 36 particles" in capsys.readouterr().out
    rollout = simulate(load_scene(small_scene), frames=8)
    stage = Usd.Stage.Open(str(out))
    assert (stage.GetStartTimeCode(), stage.GetEndTimeCode()) == (0.0, 8.0)
    assert stage.GetTimeCodesPerSecond() == pytest.approx(60.0)
    sheet = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Cloth/sheet"))
    hanging = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Cloth/hanging"))
    for frame in (0, 4, 8):
        np.testing.assert_array_equal(np.array(sheet.GetPointsAttr().Get(frame)), rollout.frames[frame, :20])
        np.testing.assert_array_equal(np.array(hanging.GetPointsAttr().Get(frame)), rollout.frames[frame, 20:])
    assert stage.GetPrimAtPath("/World/Colliders/sphere0").GetTypeName() == "Sphere"
    assert stage.GetPrimAtPath("/World/Colliders/ground1").GetTypeName() == "Mesh"
    assert check_usd(out) == []
    assert png.stat().st_size > 10_000


def test_a_replicated_scene_runs_its_copies_as_separate_worlds_side_by_side(tmp_path, capsys):
    """``replicate = 3`` with ``spacing``: three worlds of the scene 3 m apart, each copy's cloth
    falling onto its own sphere exactly as the first does (copies never touch; the ground is shared);
    ``xsim run`` writes one prim per copy."""
    path = tmp_path / "three.toml"
    path.write_text("replicate = 3\nspacing = [3.0, 0.0, 0.0]\n" + SMALL)
    scene = load_scene(path)
    model = scene.builder().finalize(device="cpu")
    assert model.world_count == 3 and model.particle_count == 3 * 36 and len(model.colliders) == 3
    assert [(p.name, p.first) for p in scene.parts][:3] == [("sheet_0", 0), ("hanging_0", 20), ("sheet_1", 36)]
    assert [c["name"] for c in scene.placed_colliders()] == ["ground1", "sphere0_0", "sphere0_1", "sphere0_2"]
    np.testing.assert_allclose([c["center"][0] for c in scene.placed_colliders()[1:]], [-3.0, 0.0, 3.0])
    x = simulate(scene, frames=10, model=model).frames[-1].reshape(3, 36, 3)
    for k in (1, 2):
        np.testing.assert_allclose(x[k] - x[0], np.tile([3.0 * k, 0.0, 0.0], (36, 1)), atol=1e-4)
    out = tmp_path / "three.usda"
    assert main(["run", str(path), "--out", str(out), "--no-preview", "--frames", "2"]) == 0
    stage = Usd.Stage.Open(str(out))
    assert stage.GetPrimAtPath("/World/Cloth/hanging_2").GetTypeName() == "Mesh"
    assert stage.GetPrimAtPath("/World/Colliders/sphere0_2").GetTypeName() == "Sphere"


def test_xsim_run_without_a_scene_runs_the_default_into_out(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--frames", "2"]) == 0
    assert (tmp_path / "out" / "drape.usda").is_file() and (tmp_path / "out" / "drape.png").is_file()
    stage = Usd.Stage.Open(str(tmp_path / "out" / "drape.usda"))
    assert stage.GetEndTimeCode() == 2.0
    assert len(UsdGeom.Mesh(stage.GetPrimAtPath("/World/Cloth/sheet")).GetPointsAttr().Get(2)) == 625


def test_cloth_material_keys_reach_the_builder(tmp_path):
    scene = tmp_path / "material.toml"
    scene.write_text(textwrap.dedent("""
        [[cloth]]
        grid = { dim = [4, 2], cell = [0.1, 0.1] }
        density = 0.3
        stiffness = { stretch = 40.0, bend = 0.02 }
        damping = { stretch = 0.5, bend = 0.001 }
        """))
    b = load_scene(scene).builder()
    ref = ModelBuilder()
    ref.add_cloth_grid(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=4, dim_y=2,
                       cell_x=0.1, cell_y=0.1, mass=0.0, density=0.3, stretch_stiffness=40.0, bend_stiffness=0.02,
                       stretch_damping=0.5, bend_damping=0.001)
    for name in ("particle_mass", "spring_compliance", "spring_damping", "bending_compliance", "bending_damping"):
        np.testing.assert_allclose(getattr(b, name), getattr(ref, name), rtol=1e-12, err_msg=name)
