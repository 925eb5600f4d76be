"""Cylinders, cones, ellipsoids and convex hulls in scene files: ``xsim check`` and ``xsim run`` of
scenes/shape_kinds.toml, the bodies resting where they were put, their USD prims of the right kind and
size, a preview, and the scene errors for bad sizes and a flat hull."""

import textwrap
from pathlib import Path

import numpy as np
import pytest
from pxr import Usd, UsdGeom

import xsim
from xsim.cli import main
from xsim.io import check_usd, load_scene, simulate
from xsim.sim.shapes import GeoType

REPO = Path(__file__).parents[2]
SCENE = REPO / "scenes" / "shape_kinds.toml"


def test_shape_kinds_scene_checks_runs_rests_and_exports_usd_prims_of_each_kind(tmp_path, capsys):
    assert main(["check", str(SCENE)]) == 0
    out, png = tmp_path / "kinds.usda", tmp_path / "kinds.png"
    assert main(["run", str(SCENE), "--frames", "20", "--out", str(out), "--preview", str(png)]) == 0
    scene = load_scene(SCENE)
    assert [GeoType(t).name for t in scene.builder().finalize().shape_type.numpy()[:4]] == [
        "CYLINDER", "CONE", "ELLIPSOID", "CONVEX_MESH"]
    stage = Usd.Stage.Open(str(out))
    cyl = UsdGeom.Cylinder(stage.GetPrimAtPath("/World/Bodies/drum/cylinder0"))
    assert cyl.GetRadiusAttr().Get() == pytest.approx(0.1) and cyl.GetHeightAttr().Get() == pytest.approx(0.3)
    assert cyl.GetAxisAttr().Get() == "Z"
    cone = UsdGeom.Cone(stage.GetPrimAtPath("/World/Bodies/cone/cone0"))
    assert cone.GetRadiusAttr().Get() == pytest.approx(0.1) and cone.GetHeightAttr().Get() == pytest.approx(0.3)
    assert cone.GetAxisAttr().Get() == "Z"
    egg = UsdGeom.Sphere(stage.GetPrimAtPath("/World/Bodies/egg/ellipsoid0"))
    assert egg.GetRadiusAttr().Get() == pytest.approx(1.0)
    scale = [op for op in UsdGeom.Xformable(egg).GetOrderedXformOps() if op.GetOpType() == UsdGeom.XformOp.TypeScale]
    np.testing.assert_allclose(np.array(scale[0].Get()), [0.2, 0.15, 0.1], rtol=1e-6)
    hull = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Bodies/rock/convex_hull0"))
    np.testing.assert_allclose(np.array(hull.GetPointsAttr().Get()), scene.bodies[3]["shape"][0]["vertices"],
                               rtol=1e-6)
    assert check_usd(out) == []
    assert png.stat().st_size > 10_000


def test_shape_kinds_scene_bodies_rest_where_they_were_put():
    scene = load_scene(SCENE)
    rollout = simulate(scene, frames=120)
    start, end = rollout.body_q[0], rollout.body_q[-1]
    # the drum, the cone and the egg were set down touching: they stay within a millimetre
    np.testing.assert_allclose(end[:3, :3], start[:3, :3], atol=1e-3)
    # the rock falls from 0.5 m and lands on its hull
    assert end[3, 2] < 0.4 and abs(rollout.body_q[-1, 3, 2] - rollout.body_q[-10, 3, 2]) < 1e-3


@pytest.mark.parametrize("shape, words", [
    ('type = "cylinder"\nradius = 0.0\nhalf_height = 0.1', "radius"),
    ('type = "ellipsoid"\nrx = 0.1\nry = -0.2\nrz = 0.1', "ry"),
    ('type = "convex_hull"\nmesh = "flat.obj"', "points that span a volume"),
])
def test_bad_new_shapes_in_a_scene_name_the_key(tmp_path, shape, words):
    (tmp_path / "flat.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 1 1 0\nf 1 2 3\nf 2 4 3\n")
    path = tmp_path / "bad.toml"
    path.write_text(textwrap.dedent("""
        [[body]]
        position = [0.0, 0.0, 1.0]
        [[body.shape]]
        """) + shape + "\n")
    with pytest.raises(xsim.SceneError) as err:
        load_scene(path)
    assert "body[0].shape[0]" in str(err.value) and words in str(err.value)
