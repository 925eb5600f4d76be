"""Newton's shape kinds beyond sphere, box, capsule and mesh: cylinder, cone, ellipsoid and convex hull
from the builder with Newton's keywords, their mass, centre of mass and inertia against trimesh's mass
properties of a fine tessellation, and the errors that bad sizes and degenerate inputs get."""

import numpy as np
import pytest
import trimesh

import xsim
from xsim.sim import ModelBuilder
from xsim.sim.shapes import GeoType

DENSITY = 700.0


def body_properties(add, **kwargs):
    """(mass, com in the body frame, inertia about it) of a body with the one shape ``add(body, ...)``."""
    b = ModelBuilder()
    body = b.add_body(((1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0)))
    getattr(b, add)(body, density=DENSITY, **kwargs)
    model = b.finalize(dtype=xsim.float64)
    return model.body_mass.numpy()[0], model.body_com.numpy()[0], model.body_inertia.numpy()[0]


def tessellated(mesh: trimesh.Trimesh):
    mesh.density = DENSITY
    return mesh.mass, mesh.center_mass, mesh.moment_inertia


def turned_and_moved(mesh: trimesh.Trimesh, q, p):
    m = np.eye(4)
    m[:3, :3] = trimesh.transformations.quaternion_matrix([q[3], q[0], q[1], q[2]])[:3, :3]
    m[:3, 3] = p
    return mesh.copy().apply_transform(m)


Q = (0.2, -0.4, 0.3, 0.8)  # some rotation (normalized by the builder)
QN = tuple(np.asarray(Q) / np.linalg.norm(Q))
P = (0.1, -0.05, 0.2)


@pytest.mark.parametrize("kind", ["cylinder", "cone", "ellipsoid", "convex_hull"])
def test_mass_com_and_inertia_match_a_fine_tessellation(kind):
    if kind == "cylinder":
        reference = trimesh.creation.cylinder(radius=0.3, height=0.8, sections=512)
        ours = body_properties("add_shape_cylinder", xform=(P, Q), radius=0.3, half_height=0.4)
    elif kind == "cone":
        # trimesh's cone has its base at z = 0; Newton's (and xsim's) at -half_height
        reference = trimesh.creation.cone(radius=0.3, height=0.8, sections=512)
        reference.apply_translation((0.0, 0.0, -0.4))
        ours = body_properties("add_shape_cone", xform=(P, Q), radius=0.3, half_height=0.4)
    elif kind == "ellipsoid":
        reference = trimesh.creation.icosphere(subdivisions=6)
        reference.apply_scale((0.3, 0.2, 0.5))
        ours = body_properties("add_shape_ellipsoid", xform=(P, Q), rx=0.3, ry=0.2, rz=0.5)
    else:
        points = np.random.default_rng(4).normal(size=(40, 3)) * (0.3, 0.2, 0.1)
        reference = trimesh.convex.convex_hull(points * (1.5, 1.0, 2.0))
        ours = body_properties("add_shape_convex_hull", xform=(P, Q), mesh=points, scale=(1.5, 1.0, 2.0))
    m, c, inertia = tessellated(turned_and_moved(reference, QN, P))
    # a polygon of 512 sides and a sphere of 6 subdivisions hold 2.5e-5 and 1e-4 less volume than the solid
    rtol = 0.0 if kind == "convex_hull" else (3e-4 if kind == "ellipsoid" else 1e-4)
    np.testing.assert_allclose(ours[0], m, rtol=rtol + 1e-10)
    np.testing.assert_allclose(ours[1], c, atol=1e-9 + rtol * 0.5)
    np.testing.assert_allclose(ours[2], inertia, rtol=0, atol=(2 * rtol + 1e-10) * np.abs(inertia).max())


def test_shape_types_carry_newtons_names():
    b = ModelBuilder()
    body = b.add_body()
    b.add_shape_cylinder(body, radius=0.1, half_height=0.2)
    b.add_shape_cone(body, radius=0.1, half_height=0.2)
    b.add_shape_ellipsoid(body, rx=0.1, ry=0.2, rz=0.3)
    b.add_shape_convex_hull(body, mesh=trimesh.creation.box((0.1, 0.2, 0.3)))
    b.add_shape_sphere(body, radius=0.1)
    b.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1)
    b.add_shape_capsule(body, radius=0.1, half_height=0.1)
    model = b.finalize()
    assert [GeoType(t).name for t in model.shape_type.numpy()] == [
        "CYLINDER", "CONE", "ELLIPSOID", "CONVEX_MESH", "SPHERE", "BOX", "CAPSULE"]
    np.testing.assert_allclose(model.shape_size.numpy()[:3], [[0.1, 0.2, 0.0], [0.1, 0.2, 0.0], [0.1, 0.2, 0.3]],
                               rtol=1e-7)


@pytest.mark.parametrize("call, kwargs, words", [
    ("add_shape_cylinder", {"radius": 0.0, "half_height": 0.2}, "add_shape_cylinder: radius must be > 0, got 0.0"),
    ("add_shape_cylinder", {"radius": 0.1, "half_height": -1.0}, "add_shape_cylinder: half_height must be > 0, got -1.0"),
    ("add_shape_cone", {"radius": -0.1, "half_height": 0.2}, "add_shape_cone: radius must be > 0, got -0.1"),
    ("add_shape_cone", {"radius": 0.1, "half_height": float("nan")}, "add_shape_cone: half_height must be a finite"),
    ("add_shape_ellipsoid", {"rx": 0.1, "ry": 0.0, "rz": 0.3}, "add_shape_ellipsoid: ry must be > 0, got 0.0"),
    ("add_shape_ellipsoid", {"rx": -2.0, "ry": 0.1, "rz": 0.3}, "add_shape_ellipsoid: rx must be > 0, got -2.0"),
    ("add_shape_convex_hull", {"mesh": [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0.5, 0.2, 0.0]]},
     "add_shape_convex_hull: the points span no volume (coplanar or collinear)"),
    ("add_shape_convex_hull", {"mesh": [[0, 0, 0], [1, 0, 0], [0, 1, 0]]},
     "add_shape_convex_hull: a convex hull needs at least 4 points that span a volume, got 3"),
    ("add_shape_convex_hull", {"mesh": trimesh.creation.box((0.1, 0.2, 0.3)), "scale": 0.0},
     "add_shape_convex_hull: scale must be > 0, got 0.0"),
    ("add_shape_mesh", {"mesh": (np.zeros((3, 3)), np.zeros((0, 3), dtype=int))},
     "add_shape_mesh: mesh must have at least one triangle, got 3 vertices and 0 triangles"),
])
def test_bad_sizes_and_degenerate_shapes_are_refused_naming_the_call_and_the_value(call, kwargs, words):
    b = ModelBuilder()
    body = b.add_body()
    with pytest.raises(ValueError) as err:
        getattr(b, call)(body, **kwargs)
    assert words in str(err.value)
    assert not b.shapes  # refused before anything was added
