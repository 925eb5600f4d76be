"""USD export: time-sampled cloth meshes, static colliders, stage metadata, atomic writes."""

import numpy as np
import pytest
from pxr import Usd, UsdGeom

from xsim.io import ClothPart, UsdWriter, check_usd, save_preview, write_usd
from xsim.io.preview import pick_frames

TRIS = np.array([[0, 1, 2], [0, 2, 3]], dtype=np.int32)
COLLIDERS = [
    {"type": "ground", "name": "ground"},
    {"type": "sphere", "name": "ball", "center": (0.0, 0.5, 0.3), "radius": 0.25},
    {"type": "box", "name": "crate", "center": (1.0, 0.0, 0.2), "half_extents": (0.1, 0.2, 0.3),
     "rotation": (0.0, 0.0, 0.6, 0.8)},
    {"type": "capsule", "name": "pole", "center": (-1.0, 0.0, 1.0), "radius": 0.05, "half_height": 0.75,
     "rotation": (0.0, 0.0, 0.0, 1.0)},
    {"type": "mesh", "name": "rock", "vertices": np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float32),
     "indices": np.array([[0, 1, 2]]), "position": (0.0, 0.0, 0.1), "rotation": (0.0, 0.0, 0.0, 1.0)},
]


def made_up_rollout(frames=7):
    """Two cloths (4 + 4 particles) moving on known paths: frame k is the base shifted by k cm."""
    base = np.array([[0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], np.float32)
    both = np.concatenate([base, base + [2, 0, 0]])
    positions = np.stack([both + 0.01 * k * np.array([1, -2, -3]) for k in range(frames)]).astype(np.float32)
    parts = [ClothPart("sheet", 0, 4, TRIS), ClothPart("towel", 4, 4, TRIS)]
    return positions, parts


@pytest.fixture
def written(tmp_path):
    positions, parts = made_up_rollout()
    path = write_usd(tmp_path / "out" / "scene.usda", positions, parts, COLLIDERS, fps=24.0)
    return path, positions


def test_stage_metadata_is_z_up_metres_with_fps_and_frame_range(written):
    path, positions = written
    stage = Usd.Stage.Open(str(path))
    assert UsdGeom.GetStageUpAxis(stage) == UsdGeom.Tokens.z
    assert UsdGeom.GetStageMetersPerUnit(stage) == 1.0
    assert stage.GetTimeCodesPerSecond() == 24.0
    assert stage.GetFramesPerSecond() == 24.0
    assert (stage.GetStartTimeCode(), stage.GetEndTimeCode()) == (0.0, len(positions) - 1)
    assert stage.GetDefaultPrim().GetPath() == "/World"


@pytest.mark.parametrize("frame", [0, 3, 6])
def test_cloth_points_at_a_frame_are_the_rollout_positions(written, frame):
    path, positions = written
    stage = Usd.Stage.Open(str(path))
    for name, sl in (("sheet", slice(0, 4)), ("towel", slice(4, 8))):
        mesh = UsdGeom.Mesh(stage.GetPrimAtPath(f"/World/Cloth/{name}"))
        points = np.array(mesh.GetPointsAttr().Get(Usd.TimeCode(frame)))
        np.testing.assert_array_equal(points, positions[frame, sl])
        extent = np.array(mesh.GetExtentAttr().Get(Usd.TimeCode(frame)))
        np.testing.assert_array_equal(extent, [positions[frame, sl].min(0), positions[frame, sl].max(0)])


def test_cloth_topology_is_written_once_and_points_per_frame(written):
    path, positions = written
    stage = Usd.Stage.Open(str(path))
    mesh = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Cloth/sheet"))
    assert list(mesh.GetFaceVertexCountsAttr().Get()) == [3, 3]
    assert list(mesh.GetFaceVertexIndicesAttr().Get()) == [0, 1, 2, 0, 2, 3]
    assert mesh.GetFaceVertexIndicesAttr().GetNumTimeSamples() == 0
    assert mesh.GetPointsAttr().GetTimeSamples() == list(range(len(positions)))


def test_colliders_are_static_prims_sized_and_placed(written):
    path, _ = written
    stage = Usd.Stage.Open(str(path))
    ball = UsdGeom.Sphere(stage.GetPrimAtPath("/World/Colliders/ball"))
    assert ball.GetRadiusAttr().Get() == 0.25
    world = UsdGeom.Xformable(ball).ComputeLocalToWorldTransform(Usd.TimeCode.Default())
    assert tuple(world.ExtractTranslation()) == pytest.approx((0.0, 0.5, 0.3))
    crate = stage.GetPrimAtPath("/World/Colliders/crate")
    assert crate.GetTypeName() == "Cube"
    m = np.array(UsdGeom.Xformable(crate).ComputeLocalToWorldTransform(Usd.TimeCode.Default()))
    # The cube corner (1, 1, 1) lands at center + R @ half_extents (row-vector convention).
    corner = np.array([1.0, 1.0, 1.0, 1.0]) @ m
    rot = np.array([[0.28, -0.96, 0.0], [0.96, 0.28, 0.0], [0.0, 0.0, 1.0]])   # quat (0, 0, .6, .8)
    np.testing.assert_allclose(corner[:3], np.array([1.0, 0.0, 0.2]) + rot @ [0.1, 0.2, 0.3], atol=1e-6)
    pole = UsdGeom.Capsule(stage.GetPrimAtPath("/World/Colliders/pole"))
    assert (pole.GetRadiusAttr().Get(), pole.GetHeightAttr().Get(), pole.GetAxisAttr().Get()) == (0.05, 1.5, "Z")
    ground = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Colliders/ground"))
    assert np.array(ground.GetPointsAttr().Get())[:, 2].tolist() == [0.0] * 4
    rock = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Colliders/rock"))
    assert rock.GetPointsAttr().GetNumTimeSamples() == 0
    assert len(rock.GetPointsAttr().Get()) == 3


def test_written_file_passes_usd_validation(written):
    path, _ = written
    assert check_usd(path) == []


def test_usd_validation_reports_a_stage_without_metadata(tmp_path):
    stage = Usd.Stage.CreateNew(str(tmp_path / "bare.usda"))
    stage.DefinePrim("/World", "Xform")
    stage.GetRootLayer().Save()
    problems = " ".join(check_usd(tmp_path / "bare.usda"))
    assert "MissingDefaultPrim" in problems and "MissingUpAxisMetadata" in problems


def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "scene.usda"
    target.write_text("previous run\n")
    positions, _ = made_up_rollout()
    writer = UsdWriter(fps=30.0)
    writer.add_mesh("sheet", positions[0, :4], TRIS)

    def export_half_then_fail(layer_path, *args):
        with open(layer_path, "w") as f:
            f.write("#usda 1.0\n(\n")   # a truncated file...
        raise KeyboardInterrupt         # ...and the run is interrupted

    monkeypatch.setattr(writer.stage, "GetRootLayer", lambda: type("L", (), {"Export": staticmethod(
        export_half_then_fail)})())
    with pytest.raises(KeyboardInterrupt):
        writer.save(target)
    assert target.read_text() == "previous run\n"
    assert [p.name for p in tmp_path.iterdir()] == ["scene.usda"]


def test_binary_usdc_round_trips(tmp_path):
    positions, parts = made_up_rollout(frames=3)
    path = write_usd(tmp_path / "scene.usdc", positions, parts, fps=60.0)
    stage = Usd.Stage.Open(str(path))
    points = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Cloth/towel")).GetPointsAttr().Get(2)
    np.testing.assert_array_equal(np.array(points), positions[2, 4:])
    assert path.read_bytes()[:8] == b"PXR-USDC"


def test_preview_frames_are_spread_from_first_to_last():
    assert pick_frames(121, 4) == [0, 40, 80, 120]
    assert pick_frames(3, 5) == [0, 1, 2]
    assert pick_frames(10, 1) == [0]


def test_preview_png_shows_the_cloth(tmp_path):
    import matplotlib.image

    positions, parts = made_up_rollout()
    path = save_preview(tmp_path / "p" / "preview.png", positions, parts, COLLIDERS, shown=3, fps=24.0)
    image = matplotlib.image.imread(path)
    assert image.shape[1] > 2 * image.shape[0]          # three panels side by side
    rgb = image[..., :3]
    reddish = (rgb[..., 0] > 0.6) & (rgb[..., 1] < 0.55) & (rgb[..., 2] < 0.5)
    assert reddish.sum() > 100                          # cloth colour drawn


@pytest.mark.parametrize("written_dt, fps", [("0.016666667", 60.0), ("0.0166666667", 60.0), ("0.01", 100.0),
                                             ("0.0125", 80.0), ("0.003", 1000.0 / 3.0), ("1.6666667e-2", 60.0),
                                             ("0.04", 25.0)])
def test_time_codes_per_second_is_the_rational_the_user_meant(tmp_path, written_dt, fps):
    from xsim.io import load_scene

    scene_file = tmp_path / "s.toml"
    scene_file.write_text(f"[sim]\ndt = {written_dt}\n")
    scene = load_scene(scene_file)
    assert scene.output.fps == fps
    path = write_usd(tmp_path / "s.usda", np.zeros((2, 1, 3)), [], [], fps=scene.output.fps)
    assert Usd.Stage.Open(str(path)).GetTimeCodesPerSecond() == fps


def test_written_fraction_keeps_precise_values_exact():
    from fractions import Fraction

    from xsim.io.schema import written_fraction

    assert written_fraction(0.016666667) == Fraction(1, 60)
    assert written_fraction(0.0166) == Fraction(83, 5000)   # no simpler fraction rounds to 0.0166
    assert written_fraction(0.1) == Fraction(1, 10)
    assert written_fraction(2.5) == Fraction(5, 2)


def test_gif_preview_is_an_animation_of_the_rollout(tmp_path):
    import imageio.v3 as iio

    from xsim.io.preview import save_animation

    positions, parts = made_up_rollout(frames=7)
    path = save_animation(tmp_path / "a" / "run.gif", positions, parts, COLLIDERS, fps=24.0)
    images = iio.imread(path, index=None)
    assert images.shape[0] == 7 and images.ndim == 4
    assert not np.array_equal(images[0], images[-1])          # the cloth moved between frames
    # real-time playback at 24 frames per second; a GIF stores whole centiseconds
    assert iio.immeta(path, index=0)["duration"] == pytest.approx(1000.0 / 24.0, abs=5.0)


def test_mp4_preview_is_written_or_refused_with_a_clear_message(tmp_path, monkeypatch):
    import builtins

    from xsim.io.preview import save_animation

    positions, parts = made_up_rollout(frames=4)
    path = save_animation(tmp_path / "run.mp4", positions, parts, COLLIDERS, fps=24.0)
    assert path.stat().st_size > 0
    real_import = builtins.__import__

    def no_ffmpeg(name, *args, **kw):
        if name == "imageio_ffmpeg":
            raise ImportError(name)
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ffmpeg)
    with pytest.raises(RuntimeError, match=r"run2.mp4 needs imageio-ffmpeg \(pip install imageio-ffmpeg\)"):
        save_animation(tmp_path / "run2.mp4", positions, parts, COLLIDERS, fps=24.0)
    with pytest.raises(ValueError, match="a .gif or .mp4 file"):
        save_animation(tmp_path / "run.avi", positions, parts, COLLIDERS)
