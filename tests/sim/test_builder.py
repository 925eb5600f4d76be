"""ModelBuilder -> Model: particles, constraints, cloth topology, bending weights, colliders."""

import numpy as np
import pytest
import trimesh

import xsim
from xsim.sim import Collider, ModelBuilder
from xsim.sim.cloth import edges_and_stencils, grid_triangles, isometric_bending_weights
from xsim.sim.shapes import SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH, SHAPE_PLANE, SHAPE_SPHERE


def test_add_particle_returns_indices_and_zero_mass_pins():
    b = ModelBuilder(gravity=(0.0, 0.0, -3.0))
    assert b.add_particle((1.0, 2.0, 3.0), vel=(0.1, 0.0, 0.0), mass=2.0, radius=0.05) == 0
    assert b.add_particle((0.0, 0.0, 0.0), mass=0.0) == 1
    m = b.finalize()
    assert m.particle_count == 2 and m.gravity == (0.0, 0.0, -3.0)
    np.testing.assert_array_equal(m.particle_inv_mass.numpy(), [0.5, 0.0])
    np.testing.assert_array_equal(m.particle_radius.numpy(), np.float32([0.05, 0.01]))
    assert m.particle_q.dtype is xsim.vec3


def test_distance_constraint_rest_length_defaults_to_the_current_distance():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 0.0))
    b.add_particle((3.0, 4.0, 0.0))
    assert b.add_distance_constraint(0, 1, compliance=1e-4) == 0
    assert b.add_spring(0, 1, rest_length=2.0) == 1
    m = b.finalize(dtype=xsim.float64)
    np.testing.assert_array_equal(m.spring_rest_length.numpy(), [5.0, 2.0])
    np.testing.assert_array_equal(m.spring_compliance.numpy(), [1e-4, 0.0])
    np.testing.assert_array_equal(m.spring_indices.numpy(), [[0, 1], [0, 1]])


def test_bad_indices_and_masses_are_refused():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 0.0))
    with pytest.raises(IndexError, match="particle index 3 out of range"):
        b.add_distance_constraint(0, 3)
    with pytest.raises(ValueError, match="mass must be >= 0"):
        b.add_particle((0.0, 0.0, 0.0), mass=-1.0)
    with pytest.raises(TypeError, match="dtype must be"):
        b.finalize(dtype=xsim.int32)


def test_cloth_grid_has_newtons_layout_counts_and_pins():
    b = ModelBuilder()
    start = b.add_cloth_grid(pos=(1.0, 0.0, 2.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=3, dim_y=2,
                             cell_x=0.1, cell_y=0.2, mass=0.5, fix_left=True, stretch_compliance=1e-3,
                             shear_compliance=2e-3)
    m = b.finalize(dtype=xsim.float64)
    assert start == 0 and m.particle_count == 4 * 3
    x = m.particle_q.numpy()
    np.testing.assert_allclose(x[1], [1.1, 0.0, 2.0])   # index y * (dim_x + 1) + x
    np.testing.assert_allclose(x[4], [1.0, 0.2, 2.0])
    np.testing.assert_array_equal(m.particle_mass.numpy().reshape(3, 4)[:, 0], 0.0)
    np.testing.assert_array_equal(m.particle_mass.numpy().reshape(3, 4)[:, 1:], 0.5)
    # 3*3 horizontal + 4*2 vertical edges, one diagonal per cell
    assert m.spring_count == 9 + 8 + 6
    assert m.tri_indices.shape == (12, 3)
    ij = m.spring_indices.numpy()
    diagonal = (ij[:, 0] % 4 != ij[:, 1] % 4) & (ij[:, 0] // 4 != ij[:, 1] // 4)
    np.testing.assert_array_equal(m.spring_compliance.numpy()[diagonal], 2e-3)
    np.testing.assert_array_equal(m.spring_compliance.numpy()[~diagonal], 1e-3)
    assert m.bending_count == m.spring_count - 2 * (3 + 2)  # every edge but the boundary


def test_cloth_grid_rotation_turns_the_plane():
    b = ModelBuilder()
    s = np.sqrt(0.5)
    b.add_cloth_grid(pos=(0.0, 0.0, 0.0), rot=(s, 0.0, 0.0, s), vel=(0.0, 1.0, 0.0), dim_x=1, dim_y=1, cell_x=1.0,
                     cell_y=1.0, mass=1.0)
    m = b.finalize(dtype=xsim.float64)
    # 90 degrees about x: local y becomes z
    np.testing.assert_allclose(m.particle_q.numpy()[2], [0.0, 0.0, 1.0], atol=1e-15)
    np.testing.assert_array_equal(m.particle_qd.numpy()[:, 1], 1.0)


def test_isometric_bending_weights_vanish_on_flat_and_rigidly_moved_shapes():
    tris = grid_triangles(3, 3)
    _, stencils = edges_and_stencils(tris)
    rng = np.random.default_rng(0)
    x = np.c_[rng.random((16, 2)) * 0.02 + np.stack(np.meshgrid(np.arange(4), np.arange(4)), -1).reshape(-1, 2) * 0.1,
              np.zeros(16)]
    k, area = isometric_bending_weights(x, stencils)
    assert len(stencils) == 3 * 4 * 2 + 9 - 2 * 6  # interior edges
    np.testing.assert_allclose(k.sum(axis=1), 0.0, atol=1e-12)
    curvature = np.einsum("bk,bkd->bd", k, x[stencils])
    np.testing.assert_allclose(curvature, 0.0, atol=1e-12)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    moved = x @ q.T + [1.0, 2.0, 3.0]
    np.testing.assert_allclose(np.einsum("bk,bkd->bd", k, moved[stencils]), 0.0, atol=1e-12)
    folded = x.copy()
    folded[x[:, 0] > 0.15, 2] = 0.05
    assert np.abs(np.einsum("bk,bkd->bd", k, folded[stencils])).max() > 0.01
    assert np.all(area > 0.0)


def test_cloth_mesh_from_trimesh_bends_across_every_edge_of_a_closed_surface():
    mesh = trimesh.creation.icosphere(subdivisions=1, radius=0.5)
    b = ModelBuilder()
    b.add_cloth_mesh(mesh, pos=(0.0, 0.0, 1.0), mass=0.01, area_compliance=1e-4)
    m = b.finalize()
    assert m.particle_count == len(mesh.vertices)
    assert m.spring_count == len(mesh.edges_unique) == m.bending_count
    assert m.area_count == len(mesh.faces) == len(m.tri_indices)
    np.testing.assert_allclose(m.area_rest.numpy().sum(), mesh.area, rtol=1e-5)
    np.testing.assert_allclose(m.particle_q.numpy().mean(axis=0), [0.0, 0.0, 1.0], atol=1e-6)


def test_colliders_are_described_and_packed_with_normalized_rotations():
    b = ModelBuilder()
    b.add_ground_plane(mu=0.3, restitution=0.2)
    assert b.add_collider_sphere((0.0, 0.0, 1.0), 0.5, mu=0.1) == 0
    b.add_collider_box((1.0, 0.0, 0.0), (0.1, 0.2, 0.3), rot=(0.0, 0.0, 2.0, 0.0))
    b.add_collider_capsule((0.0, 1.0, 0.0), 0.05, 0.4)
    b.add_collider_mesh((np.eye(3), [[0, 1, 2]]), pos=(0.0, 0.0, -1.0))
    m = b.finalize(requires_grad=True)
    assert [c.type for c in m.colliders] == ["sphere", "box", "capsule", "mesh"]
    assert isinstance(m.colliders[0], Collider) and m.colliders[1].rot == (0.0, 0.0, 1.0, 0.0)
    # each collider is a shape on body -1, the ground a plane shape after them
    np.testing.assert_array_equal(m.shape_type.numpy(), [SHAPE_SPHERE, SHAPE_BOX, SHAPE_CAPSULE, SHAPE_MESH,
                                                         SHAPE_PLANE])
    np.testing.assert_array_equal(m.shape_body.numpy(), [-1] * 5)
    np.testing.assert_allclose(m.shape_size.numpy(), [[0.5, 0, 0], [0.1, 0.2, 0.3], [0.05, 0.4, 0], [0, 0, 0],
                                                      [0, 0, 0]])
    np.testing.assert_allclose(m.shape_xform.numpy()[1, 3:], [0.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(m.mesh_shape.numpy(), [3])
    assert m.ground and m.shape_mu.numpy()[4] == pytest.approx(0.3) and m.shape_restitution.numpy()[4] == pytest.approx(0.2)
    assert m.shape_xform.requires_grad and not m.shape_type.requires_grad


def test_state_copies_the_initial_values_and_takes_requires_grad():
    b = ModelBuilder()
    b.add_particle((1.0, 2.0, 3.0), vel=(4.0, 5.0, 6.0))
    m = b.finalize(requires_grad=True, dtype=xsim.float64)
    s = m.state()
    assert s.particle_q.requires_grad and s.particle_qd.requires_grad
    assert s.particle_q.dtype is xsim.vec3d
    s.particle_q.numpy()[0, 0] = 9.0
    assert m.particle_q.numpy()[0, 0] == 1.0
    assert not m.state(requires_grad=False).particle_q.requires_grad
    assert m.control().particle_target is None


def _grid(**kw):
    b = ModelBuilder()
    args = dict(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=3, dim_y=2, cell_x=0.2,
                cell_y=0.1, mass=0.5)
    args.update(kw)
    b.add_cloth_grid(**args)
    return b


def test_stretch_stiffness_stores_k_e2_over_2_per_square_metre_under_a_uniform_stretch():
    k, strain = 40.0, 0.01
    m = _grid(stretch_stiffness=k, stretch_damping=0.3).finalize(dtype=xsim.float64)
    rest, alpha = m.spring_rest_length.numpy(), m.spring_compliance.numpy()
    energy = np.sum((strain * rest) ** 2 / (2.0 * alpha))
    assert energy == pytest.approx(0.5 * k * strain ** 2 * (0.6 * 0.2), rel=1e-12)
    # damping follows the stiffness: beta_e / k_e = stretch_damping / k
    np.testing.assert_allclose(m.spring_damping.numpy() * alpha, 0.3 / k, rtol=1e-12)


def test_bend_stiffness_is_the_inverse_bend_compliance_and_density_lumps_areas():
    m = _grid(bend_stiffness=0.02, bend_damping=0.001, density=0.3).finalize(dtype=xsim.float64)
    ref = _grid(bend_compliance=50.0, bend_damping=0.001).finalize(dtype=xsim.float64)
    np.testing.assert_allclose(m.bending_compliance.numpy(), ref.bending_compliance.numpy(), rtol=1e-12)
    # gamma = alpha beta / h does not depend on the stencil's area
    np.testing.assert_allclose(m.bending_compliance.numpy() * m.bending_damping.numpy(), 0.001 / 0.02, rtol=1e-12)
    mass = m.particle_mass.numpy()
    assert mass.sum() == pytest.approx(0.3 * 0.6 * 0.2, rel=1e-12)
    assert mass[0] < mass[1] < mass[5]  # a corner, an edge, an interior vertex


@pytest.mark.parametrize("kw, message", [
    (dict(stretch_stiffness=10.0, stretch_compliance=1e-3), "add_cloth_grid: give stretch_stiffness"),
    (dict(stretch_stiffness=10.0, shear_compliance=1e-3), "add_cloth_grid: give stretch_stiffness"),
    (dict(stretch_stiffness=0.0), "add_cloth_grid: stretch_stiffness must be > 0"),
    (dict(bend_stiffness=1.0, bend_compliance=None), "add_cloth_grid: give bend_stiffness"),
    (dict(bend_stiffness=-1.0), "add_cloth_grid: bend_stiffness must be > 0"),
    (dict(density=0.0), "add_cloth_grid: density must be > 0"),
    (dict(stretch_damping=-1.0), "add_cloth_grid: stretch_damping must be >= 0"),
])
def test_bad_cloth_materials_are_refused_naming_the_keyword(kw, message):
    with pytest.raises(ValueError, match=message):
        _grid(**kw)


def test_negative_constraint_damping_is_refused():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 0.0))
    b.add_particle((1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="add_distance_constraint: damping must be >= 0"):
        b.add_spring(0, 1, damping=-0.1)


def _edges_and_stencils_one_by_one(tris):
    """The definition, side by side: each triangle's sides (a, b), (b, c), (c, a) in order, keyed by the
    sorted pair; a stencil per edge with exactly two opposite vertices."""
    opposite = {}
    for a, b, c in np.asarray(tris).tolist():
        for u, v, w in ((a, b, c), (b, c, a), (c, a, b)):
            opposite.setdefault((min(u, v), max(u, v)), []).append(w)
    stencils = [(u, v, o[0], o[1]) for (u, v), o in opposite.items() if len(o) == 2]
    return np.array(list(opposite), dtype=np.int64).reshape(-1, 2), np.array(stencils, dtype=np.int64).reshape(-1, 4)


@pytest.mark.parametrize("tris", [grid_triangles(7, 5), grid_triangles(30, 1),
                                  trimesh.creation.icosphere(2).faces,
                                  np.random.default_rng(1).integers(0, 12, size=(40, 3)),  # non-manifold soup
                                  np.zeros((0, 3), dtype=np.int64)], ids=["grid", "strip", "sphere", "soup", "none"])
def test_edges_and_stencils_in_bulk_are_the_one_by_one_definition_in_its_order(tris):
    edges, stencils = edges_and_stencils(tris)
    want_edges, want_stencils = _edges_and_stencils_one_by_one(tris)
    np.testing.assert_array_equal(edges, want_edges)
    np.testing.assert_array_equal(stencils, want_stencils)


@pytest.mark.parametrize("material", [{"stretch_compliance": 1e-4, "shear_compliance": 1e-3, "area_compliance": 1e-5},
                                      {"stretch_stiffness": 50.0, "bend_stiffness": 1e-3, "density": 0.2,
                                       "stretch_damping": 0.1, "bend_damping": 1e-4}], ids=["raw", "physical"])
def test_a_cloth_grid_added_in_bulk_is_the_cloth_added_element_by_element(material):
    """add_cloth_grid appends its rows in bulk; the same particles, triangles and constraints added one call
    at a time (add_particle, add_triangle, add_distance_constraint, add_bending_constraint) give the same
    model, bit for bit."""
    b = ModelBuilder()
    b.add_particle((5.0, 5.0, 5.0))  # the cloth's indices start after another particle
    b.add_cloth_grid(pos=(0.1, 0.2, 1.0), rot=(0.0, 0.0, 0.3826834, 0.9238795), vel=(0.1, 0.0, -0.2), dim_x=4,
                     dim_y=3, cell_x=0.1, cell_y=0.15, mass=0.05, fix_left=True, **material)
    bulk = b.finalize()
    one = ModelBuilder()
    one.add_particle((5.0, 5.0, 5.0))
    for i in range(1, len(b.particle_q)):
        one.add_particle(b.particle_q[i], b.particle_qd[i], b.particle_mass[i], b.particle_radius[i])
    areas = dict(zip(b.area_indices, zip(b.area_compliance, b.area_damping)))
    for t in b.tri_indices:
        one.add_triangle(*t, *areas.get(t, (None, 0.0)))
    for (i, j), c, d in zip(b.spring_indices, b.spring_compliance, b.spring_damping):
        one.add_distance_constraint(i, j, compliance=c, damping=d)  # rest length from the positions
    for s, c, d in zip(b.bending_indices, b.bending_compliance, b.bending_damping):
        one.add_bending_constraint(*s, compliance=c, damping=d)
    single = one.finalize()
    for name in ("particle_q", "particle_qd", "particle_mass", "particle_inv_mass", "particle_radius", "tri_indices",
                 "spring_indices", "spring_rest_length", "spring_compliance", "spring_damping", "bending_indices",
                 "bending_compliance", "bending_damping", "area_indices", "area_compliance"):
        got, want = (np.asarray(a.numpy() if hasattr(a, "numpy") else a) for a in (getattr(bulk, name),
                                                                                   getattr(single, name)))
        assert got.size > 0 or (name.startswith("area") and "area_compliance" not in material), name
        np.testing.assert_array_equal(got, want, err_msg=name)
