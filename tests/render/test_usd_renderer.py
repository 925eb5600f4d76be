"""xsim.render.UsdRenderer, Warp's USD exporter: a stage of several frames reopened with pxr (time
codes, poses against numpy's rotation matrices, sizes, topology, colors, visibility), the same calls
through warp.render.UsdRenderer giving the same prims and values, bad input refused by name, and
save() never losing the file already at its path."""

import numpy as np
import pytest
from pxr import Gf, Sdf, Usd, UsdGeom

import xsim
from xsim.render import UsdRenderer

FPS, FRAMES = 30, 4
BASE = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 1.0]], np.float32)
STEP = np.array([0.1, -0.2, 0.3], np.float32)
RADII = np.array([0.05, 0.1, 0.15, 0.2, 0.25])
POINT_COLORS = np.linspace(0.0, 1.0, 15).reshape(5, 3)
TRIS = np.array([0, 1, 2, 0, 2, 3])
EXTENTS = (0.1, 0.2, 0.3)
SCALING = 2.0


def points_at(k):
    return BASE + k * STEP


def box_rotation(k):
    """Quaternion (x, y, z, w) of a turn of 0.3 k rad about (1, 2, 2) / 3."""
    axis, angle = np.array([1.0, 2.0, 2.0]) / 3.0, 0.3 * (k + 1)
    return (*(np.sin(angle / 2) * axis), np.cos(angle / 2))


def rotation_matrix(q):
    """The rotation matrix of the unit quaternion (x, y, z, w)."""
    x, y, z, w = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def asset(tmp_path):
    """A small USD file to reference: an Xform holding a Cube."""
    path = tmp_path / "asset.usda"
    stage = Usd.Stage.CreateNew(str(path))
    stage.SetDefaultPrim(UsdGeom.Xform.Define(stage, "/asset").GetPrim())
    UsdGeom.Cube.Define(stage, "/asset/cube")
    stage.Save()
    return str(path)


def render_frames(renderer, ref_path, as_xsim=False):
    """Four frames of points, a mesh, a box, a sphere, a capsule, a ref and a line strip; with
    ``as_xsim`` the positions go in as xsim arrays and vector values, as a ported Warp program has them."""
    renderer.render_ground(size=10.0)
    for k in range(FRAMES):
        renderer.begin_frame(k / FPS)
        pts = xsim.array(points_at(k), dtype=xsim.vec3) if as_xsim else points_at(k)
        renderer.render_points("particles", pts, RADII, colors=POINT_COLORS)
        renderer.render_points("dots", points_at(k), 0.02, colors=(0.8, 0.3, 0.2), as_spheres=False)
        renderer.render_mesh("cloth", points_at(k)[:4].tolist(), TRIS, colors=(0.35, 0.55, 0.9), pos=(1.0, 2.0, 3.0))
        pos = xsim.vec3(1.0, 0.0, 0.2 * k) if as_xsim else (1.0, 0.0, 0.2 * k)
        renderer.render_box("crate", pos, box_rotation(k), EXTENTS, color=(1.0, 0.0, 0.0))
        renderer.render_sphere("ball", (0.0, 0.0, 0.1 * k), (0.0, 0.0, 0.0, 1.0), 0.25, color=(0.0, 1.0, 0.0),
                               visible=k != 2)
        renderer.render_capsule("pole", (-1.0, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0), 0.05, 0.75, up_axis=2)
        renderer.render_ref("prop", ref_path, (0.0, 3.0, 0.0), (0.0, 0.0, 0.0, 1.0), (1.0, 2.0, 3.0),
                            color=(0.0, 0.0, 1.0))
        renderer.render_line_strip("rope", points_at(k), color=(1.0, 1.0, 0.0), radius=0.01)
        renderer.end_frame()
    return renderer


def reopen(path):
    """The stage in the file at ``path``, read from disk (not the renderer's layer still in memory)."""
    return Usd.Stage.Open(Sdf.Layer.OpenAsAnonymous(str(path)))


@pytest.fixture
def written(tmp_path):
    path = tmp_path / "out" / "scene.usda"
    renderer = render_frames(UsdRenderer(str(path), up_axis="Z", fps=FPS, scaling=SCALING), asset(tmp_path),
                             as_xsim=True)
    assert renderer.save() is True
    return reopen(path)


def world(stage, path, k):
    return np.array(UsdGeom.Xformable(stage.GetPrimAtPath(path)).ComputeLocalToWorldTransform(Usd.TimeCode(k)))


def test_stage_metadata_root_scaling_and_time_range(written):
    assert UsdGeom.GetStageUpAxis(written) == UsdGeom.Tokens.z
    assert written.GetFramesPerSecond() == FPS and written.GetTimeCodesPerSecond() == FPS
    assert (written.GetStartTimeCode(), written.GetEndTimeCode()) == (0.0, FRAMES - 1)
    assert written.GetDefaultPrim().GetPath() == "/root"
    np.testing.assert_allclose(world(written, "/root", 0)[:3, :3], SCALING * np.eye(3))
    assert written.GetPrimAtPath("/dome_light").GetTypeName() == "DomeLight"


def test_time_code_is_time_times_fps_rounded_and_the_range_only_grows(tmp_path):
    renderer = UsdRenderer(str(tmp_path / "t.usda"), fps=24)
    for time in (0.3, 1.02, 0.5):   # frames 7.2 -> 7, 24.48 -> 24, 12
        renderer.begin_frame(time)
        renderer.render_sphere("s", (time, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), 1.0)
    sphere = UsdGeom.Sphere(renderer.stage.GetPrimAtPath("/root/s"))
    translate = sphere.GetOrderedXformOps()[0]
    assert translate.GetTimeSamples() == [7.0, 12.0, 24.0]
    assert translate.Get(12) == Gf.Vec3d(0.5, 0.0, 0.0)
    assert renderer.stage.GetEndTimeCode() == 24.0


@pytest.mark.parametrize("k", range(FRAMES))
def test_points_are_a_sphere_instancer_with_per_point_radii_and_colors(written, k):
    instancer = UsdGeom.PointInstancer(written.GetPrimAtPath("/root/particles"))
    np.testing.assert_array_equal(np.array(instancer.GetPositionsAttr().Get(k)), points_at(k))
    np.testing.assert_allclose(np.array(instancer.GetScalesAttr().Get(k)), np.repeat(RADII[:, None], 3, 1), rtol=1e-7)
    assert list(instancer.GetProtoIndicesAttr().Get(k)) == [0] * 5
    assert instancer.GetPrototypesRel().GetTargets() == [Sdf.Path("/root/particles/sphere")]
    assert written.GetPrimAtPath("/root/particles/sphere").GetTypeName() == "Sphere"
    color = UsdGeom.PrimvarsAPI(instancer).GetPrimvar("displayColor")
    assert color.GetInterpolation() == UsdGeom.Tokens.vertex
    np.testing.assert_allclose(np.array(color.Get(k)), POINT_COLORS, rtol=1e-6)
    lo, hi = np.array(instancer.GetExtentAttr().Get(k))
    np.testing.assert_allclose(lo, (points_at(k) - RADII[:, None]).min(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(hi, (points_at(k) + RADII[:, None]).max(0), rtol=1e-6, atol=1e-7)


def test_points_as_usd_points_have_widths_of_twice_the_radius(written):
    points = UsdGeom.Points(written.GetPrimAtPath("/root/dots"))
    np.testing.assert_array_equal(np.array(points.GetPointsAttr().Get(3)), points_at(3))
    assert list(points.GetWidthsAttr().Get(3)) == pytest.approx([0.04])
    assert points.GetWidthsInterpolation() == UsdGeom.Tokens.constant
    assert np.array(points.GetDisplayColorAttr().Get(3)) == pytest.approx(np.array([[0.8, 0.3, 0.2]]))


@pytest.mark.parametrize("k", [0, 3])
def test_mesh_topology_points_color_and_placement(written, k):
    mesh = UsdGeom.Mesh(written.GetPrimAtPath("/root/cloth"))
    assert list(mesh.GetFaceVertexCountsAttr().Get(k)) == [3, 3]
    assert list(mesh.GetFaceVertexIndicesAttr().Get(k)) == TRIS.tolist()
    assert mesh.GetFaceVertexIndicesAttr().GetTimeSamples() == [0.0]   # topology written once
    np.testing.assert_array_equal(np.array(mesh.GetPointsAttr().Get(k)), points_at(k)[:4])
    assert UsdGeom.Primvar(mesh.GetDisplayColorAttr()).GetInterpolation() == UsdGeom.Tokens.constant
    assert np.array(mesh.GetDisplayColorAttr().Get(k)) == pytest.approx(np.array([[0.35, 0.55, 0.9]]))
    # a vertex's place in the world: root scale times (mesh position + vertex)
    vertex = np.append(points_at(k)[2], 1.0) @ world(written, "/root/cloth", k)
    np.testing.assert_allclose(vertex[:3], SCALING * (np.array([1.0, 2.0, 3.0]) + points_at(k)[2]), rtol=1e-6)


@pytest.mark.parametrize("k", range(FRAMES))
def test_rotated_box_corner_lands_where_the_quaternion_turns_it(written, k):
    cube = written.GetPrimAtPath("/root/crate")
    assert cube.GetTypeName() == "Cube" and UsdGeom.Cube(cube).GetSizeAttr().Get() == 2.0
    m = world(written, "/root/crate", k)   # row vectors: p_world = p @ m
    expected = SCALING * (np.array([1.0, 0.0, 0.2 * k]) + rotation_matrix(box_rotation(k)) @ EXTENTS)
    np.testing.assert_allclose((np.array([1.0, 1.0, 1.0, 1.0]) @ m)[:3], expected, atol=1e-6)
    assert UsdGeom.Cube(cube).GetDisplayColorAttr().Get(k)[0] == Gf.Vec3f(1.0, 0.0, 0.0)


def test_sphere_radius_position_color_and_visibility_per_frame(written):
    sphere = UsdGeom.Sphere(written.GetPrimAtPath("/root/ball"))
    assert [sphere.GetRadiusAttr().Get(k) for k in range(FRAMES)] == [0.25] * FRAMES
    np.testing.assert_allclose(world(written, "/root/ball", 3)[3, :3], SCALING * np.array([0.0, 0.0, 0.3]))
    assert sphere.GetDisplayColorAttr().Get(1)[0] == Gf.Vec3f(0.0, 1.0, 0.0)
    assert [sphere.GetVisibilityAttr().Get(k) for k in range(FRAMES)] == ["inherited", "inherited", "invisible",
                                                                          "inherited"]
    assert np.array(sphere.GetExtentAttr().Get(0)) == pytest.approx(np.array([[-0.25] * 3, [0.25] * 3]))


def test_capsule_radius_height_and_axis(written):
    capsule = UsdGeom.Capsule(written.GetPrimAtPath("/root/pole"))
    assert (capsule.GetRadiusAttr().Get(2), capsule.GetHeightAttr().Get(2), capsule.GetAxisAttr().Get()) == (
        0.05, 1.5, "Z")
    assert np.array(capsule.GetExtentAttr().Get(2)) == pytest.approx(np.array([[-0.05, -0.05, -0.8],
                                                                               [0.05, 0.05, 0.8]]))
    np.testing.assert_allclose(world(written, "/root/pole", 2)[3, :3], SCALING * np.array([-1.0, 0.0, 1.0]))


def test_ref_brings_in_the_file_posed_scaled_and_colored(written):
    prop = written.GetPrimAtPath("/root/prop")
    assert prop.GetTypeName() == "Xform" and prop.HasAuthoredReferences()
    cube = UsdGeom.Cube(written.GetPrimAtPath("/root/prop/cube"))
    assert cube.GetDisplayColorAttr().Get(1)[0] == Gf.Vec3f(0.0, 0.0, 1.0)
    m = world(written, "/root/prop/cube", 1)
    np.testing.assert_allclose(np.diag(m)[:3], SCALING * np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(m[3, :3], SCALING * np.array([0.0, 3.0, 0.0]))


def test_line_strip_is_one_capsule_per_segment_from_end_to_end(written):
    rope = UsdGeom.PointInstancer(written.GetPrimAtPath("/root/rope"))
    p = points_at(1)
    np.testing.assert_allclose(np.array(rope.GetPositionsAttr().Get(1)), (p[:-1] + p[1:]) / 2, rtol=1e-6)
    lengths = np.linalg.norm(p[1:] - p[:-1], axis=1)
    np.testing.assert_allclose(np.array(rope.GetScalesAttr().Get(1)), np.c_[np.ones((4, 2)), lengths], rtol=1e-6)
    for q, a, b in zip(rope.GetOrientationsAttr().Get(1), p[:-1], p[1:]):   # quath: 3 digits
        turned = rotation_matrix((*q.GetImaginary(), q.GetReal())) @ [0.0, 0.0, 1.0]
        np.testing.assert_allclose(turned, (b - a) / np.linalg.norm(b - a), atol=2e-3)
    capsule = UsdGeom.Capsule(written.GetPrimAtPath("/root/rope/capsule"))
    assert capsule.GetRadiusAttr().Get(1) == 0.01 and capsule.GetDisplayColorAttr().Get(1)[0] == Gf.Vec3f(1, 1, 0)


def test_ground_is_a_square_normal_to_the_up_axis_or_to_a_given_plane(tmp_path):
    renderer = UsdRenderer(str(tmp_path / "g.usda"), up_axis="Y")
    renderer.render_ground(size=5.0)
    ground = UsdGeom.Mesh(renderer.stage.GetPrimAtPath("/root/ground"))
    points = np.array(ground.GetPointsAttr().Get())
    assert sorted(map(tuple, points.tolist())) == [(-5, 0, -5), (-5, 0, 5), (5, 0, -5), (5, 0, 5)]
    order = points[list(ground.GetFaceVertexIndicesAttr().Get())]
    np.testing.assert_allclose(np.cross(order[1] - order[0], order[2] - order[0]) / 100.0, [0.0, 1.0, 0.0])

    normal = np.array([0.0, 0.6, -0.8])
    renderer.render_ground(size=5.0, plane=(*normal, 2.0))
    points = np.array(ground.GetPointsAttr().Get())
    np.testing.assert_allclose(points @ normal, [2.0] * 4, atol=1e-6)   # every corner on the plane
    np.testing.assert_allclose(np.array(ground.GetNormalsAttr().Get()), [normal] * 4, atol=1e-6)
    order = points[list(ground.GetFaceVertexIndicesAttr().Get())]
    np.testing.assert_allclose(np.cross(order[1] - order[0], order[2] - order[0]) / 100.0, normal, atol=1e-6)


def test_shapes_under_a_body_and_instances_of_a_template(tmp_path):
    renderer = UsdRenderer(str(tmp_path / "b.usda"))
    renderer.register_body("arm")
    renderer.render_cylinder("link", (0.0, 0.5, 0.0), (0.0, 0.0, 0.0, 1.0), 0.1, 0.5, parent_body="arm")
    assert renderer.stage.GetPrimAtPath("/root/arm/link").GetTypeName() == "Cylinder"
    template = renderer.render_box("brick", None, None, (0.5, 0.25, 0.1), is_template=True)
    assert template == Sdf.Path("/root/_template_shapes/brick")
    assert renderer.stage.GetPrimAtPath(template).IsInstanceable()
    renderer.add_shape_instance("brick_1", template, None, (3.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), (2.0, 2.0, 2.0))
    m = world(renderer.stage, "/root/brick_1", 0)
    np.testing.assert_allclose(np.diag(m)[:3], [1.0, 0.5, 0.2])   # instance scale times the box's extents
    cube, = renderer.stage.GetPrimAtPath("/root/brick_1").GetFilteredChildren(Usd.TraverseInstanceProxies())
    assert cube.GetTypeName() == "Cube" and cube.IsInstanceProxy()


def test_mesh_without_smooth_shading_gets_one_normal_per_triangle(tmp_path):
    renderer = UsdRenderer(str(tmp_path / "f.usda"))
    renderer.render_mesh("tent", [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)], [0, 1, 2, 0, 3, 1],
                         smooth_shading=False)
    mesh = UsdGeom.Mesh(renderer.stage.GetPrimAtPath("/root/tent"))
    assert mesh.GetNormalsInterpolation() == UsdGeom.Tokens.faceVarying
    np.testing.assert_allclose(np.array(mesh.GetNormalsAttr().Get(0)), [[0, 0, 1]] * 3 + [[0, 1, 0]] * 3)


def test_a_given_stage_is_written_into_and_saved(tmp_path):
    stage = Usd.Stage.CreateNew(str(tmp_path / "mine.usda"))
    renderer = UsdRenderer(stage, up_axis="z")
    renderer.render_sphere("s", (1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0), 0.5)
    assert renderer.stage is stage and UsdGeom.GetStageUpAxis(stage) == UsdGeom.Tokens.z
    assert renderer.save() is True
    assert reopen(tmp_path / "mine.usda").GetPrimAtPath("/root/s").GetTypeName() == "Sphere"


# what Warp's renderer writes: xsim's writes the same prims and, for every attribute Warp authors,
# the same values at every frame (xsim adds extents, subdivisionScheme none, and a color Warp drops)


def _numbers(value):
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, (Gf.Quatf, Gf.Quatd, Gf.Quath)):
        return np.array([value.GetReal(), *value.GetImaginary()])
    if hasattr(value, "__len__") and len(value) and isinstance(value[0], (Gf.Quatf, Gf.Quatd, Gf.Quath)):
        return np.array([[q.GetReal(), *q.GetImaginary()] for q in value])
    try:
        return np.array(value, dtype=float)
    except ValueError:   # tokens
        return list(value)


def _prims(stage):
    return {str(p.GetPath()): p for p in stage.Traverse()}


def test_same_prims_and_values_as_warps_renderer(tmp_path):
    warp_render = pytest.importorskip("warp.render")
    ref = asset(tmp_path)
    ours = render_frames(UsdRenderer(str(tmp_path / "xsim.usda"), up_axis="Z", fps=FPS, scaling=SCALING), ref)
    theirs = render_frames(warp_render.UsdRenderer(str(tmp_path / "warp.usda"), up_axis="Z", fps=FPS,
                                                   scaling=SCALING), ref)
    ours.save()
    theirs.save()
    a, b = reopen(tmp_path / "xsim.usda"), reopen(tmp_path / "warp.usda")
    assert (a.GetStartTimeCode(), a.GetEndTimeCode(), a.GetFramesPerSecond()) == (
        b.GetStartTimeCode(), b.GetEndTimeCode(), b.GetFramesPerSecond())
    ours_prims, warp_prims = _prims(a), _prims(b)
    assert {p: q.GetTypeName() for p, q in ours_prims.items()} == {p: q.GetTypeName() for p, q in warp_prims.items()}
    compared = 0
    for path, warp_prim in warp_prims.items():
        for attr in warp_prim.GetAuthoredAttributes():
            if path == "/root/ground" and attr.GetName() in ("points", "faceVertexIndices"):
                continue   # the same square, corners listed from another one (test_ground_is_a_square...)
            mine = ours_prims[path].GetAttribute(attr.GetName())
            assert mine.HasAuthoredValue(), f"{path}.{attr.GetName()}"
            for k in range(FRAMES):
                want, got = _numbers(attr.Get(k)), _numbers(mine.Get(k))
                if isinstance(want, np.ndarray):
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"{path}.{attr.GetName()}")
                else:
                    assert got == want, f"{path}.{attr.GetName()} at {k}"
                compared += 1
    assert compared > 200


# bad input


@pytest.mark.parametrize("stage, error, words", [
    (42, TypeError, "stage: expected a file path or a Usd.Stage, got int"),
    ("scene.txt", ValueError, "stage: expected a path ending in .usda, .usdc, .usd"),
])
def test_a_stage_that_is_neither_a_usd_path_nor_a_stage_is_refused(tmp_path, monkeypatch, stage, error, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=words):
        UsdRenderer(stage)


@pytest.mark.parametrize("kwargs, words", [
    ({"up_axis": "W"}, "up_axis: expected 'Y' or 'Z' .the up axes USD stages can have., got 'W'"),
    ({"up_axis": "X"}, "up_axis: expected 'Y' or 'Z'"),   # Warp takes "X", then USD refuses it
    ({"fps": 0}, "fps: expected a number of frames per second > 0, got 0"),
    ({"scaling": -1.0}, "scaling: expected a length >= 0"),
])
def test_bad_renderer_settings_are_refused_by_name(tmp_path, kwargs, words):
    with pytest.raises(ValueError, match=words):
        UsdRenderer(str(tmp_path / "s.usda"), **kwargs)


@pytest.mark.parametrize("call, error, words", [
    (lambda r: r.render_points("p", np.zeros((4, 2)), 0.1), ValueError, r"points: expected an \(n, 3\) array"),
    (lambda r: r.render_points("p", np.zeros((4, 3)), [0.1, 0.2]), ValueError,
     r"radius: expected one radius or one per point \(4,\)"),
    (lambda r: r.render_points("p", np.zeros((4, 3)), 0.1, colors=[(1, 0, 0)] * 3), ValueError,
     r"colors: expected one RGB color \(3 numbers\) or one per point \(4, 3\)"),
    (lambda r: r.render_sphere("s", (0, 0, 0), (0, 0, 1), 1.0), ValueError, "rot: expected 4 numbers"),
    (lambda r: r.render_sphere("s", (0, 0), (0, 0, 0, 1), 1.0), ValueError, "pos: expected 3 numbers"),
    (lambda r: r.render_sphere("s", (0, 0, 0), (0, 0, 0, 1), "big"), TypeError, "radius: expected numbers"),
    (lambda r: r.render_sphere("my sphere", (0, 0, 0), (0, 0, 0, 1), 1.0), ValueError,
     "name: expected a USD prim name"),
    (lambda r: r.render_box("b", (0, 0, 0), (0, 0, 0, 1), (1, 1)), ValueError, "extents: expected 3 numbers"),
    (lambda r: r.render_capsule("c", (0, 0, 0), (0, 0, 0, 1), 0.1, 0.5, up_axis=3), ValueError,
     r"up_axis: expected 0 \(X\), 1 \(Y\) or 2 \(Z\), got 3"),
    (lambda r: r.render_mesh("m", np.zeros((3, 3)), [0, 1, 3]), ValueError,
     "indices: expected indices into the 3 points, got values from 0 to 3"),
    (lambda r: r.render_mesh("m", np.zeros((3, 3)), [0, 1]), ValueError,
     "indices: expected integers, 3 per triangle"),
    (lambda r: r.render_line_list("l", np.zeros((3, 3)), [0, 1, 2]), ValueError,
     "indices: expected integers, 2 per segment"),
    (lambda r: r.render_ref("r", 7, (0, 0, 0), (0, 0, 0, 1), (1, 1, 1)), TypeError, "path: expected the path"),
])
def test_bad_render_arguments_are_refused_by_name(tmp_path, call, error, words):
    with pytest.raises(error, match=words):
        call(UsdRenderer(str(tmp_path / "s.usda")))


# the file at the path


def test_nothing_is_written_before_save_and_a_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "scene.usda"
    target.write_text("previous run\n")
    renderer = UsdRenderer(str(target))
    renderer.render_sphere("s", (0, 0, 0), (0, 0, 0, 1), 1.0)
    assert target.read_text() == "previous run\n"

    def export_half_then_fail(path, *args):
        with open(path, "w") as f:
            f.write("#usda 1.0\n(\n")   # a truncated file, then USD gives up
        return False

    layer = renderer.stage.GetRootLayer()
    monkeypatch.setattr(renderer.stage, "GetRootLayer", lambda: type("L", (), {"Export": staticmethod(
        export_half_then_fail)})())
    assert renderer.save() is False
    assert target.read_text() == "previous run\n"
    assert [p.name for p in tmp_path.iterdir()] == ["scene.usda"]
    monkeypatch.setattr(renderer.stage, "GetRootLayer", lambda: layer)
    assert renderer.save() is True
    assert reopen(target).GetPrimAtPath("/root/s").GetTypeName() == "Sphere"


def test_a_binary_usd_path_writes_a_crate_file_and_relative_refs_resolve_beside_it(tmp_path, monkeypatch):
    asset(tmp_path)
    monkeypatch.chdir(tmp_path.parent)   # the reference is relative to the stage's folder, not the working one
    renderer = UsdRenderer(str(tmp_path / "scene.usd"))
    renderer.render_ref("prop", "asset.usda", (0, 0, 0), (0, 0, 0, 1), (1, 1, 1), color=(1.0, 0.0, 0.0))
    assert renderer.save()
    assert (tmp_path / "scene.usd").read_bytes()[:8] == b"PXR-USDC"
    del renderer
    stage = Usd.Stage.Open(str(tmp_path / "scene.usd"))
    assert stage.GetPrimAtPath("/root/prop/cube").GetTypeName() == "Cube"
