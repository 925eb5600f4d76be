"""Soft bodies in ModelBuilder (xsim/sim/soft.py): Newton's add_soft_grid/add_soft_mesh inputs, the two
ways of giving the material, the surface, worlds, and the errors for bad input."""

import numpy as np
import pytest

import xsim
from xsim.sim import ModelBuilder, soft

Q0 = (0.0, 0.0, 0.0, 1.0)
TET = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])


def grid(b=None, **kw):
    b = b or ModelBuilder()
    args = {"pos": (0.0, 0.0, 0.0), "rot": Q0, "vel": (0.0, 0.0, 0.0), "dim_x": 2, "dim_y": 3, "dim_z": 4, "cell_x": 0.1, "cell_y": 0.2,
                "cell_z": 0.3, "density": 1000.0, "k_mu": 1e4, "k_lambda": 2e4, "k_damp": 0.0}
    args.update(kw)
    b.add_soft_grid(**args)
    return b


def test_soft_grid_has_newtons_layout_and_five_positive_tets_per_cell():
    b = grid(fix_left=True)
    m = b.finalize(dtype=xsim.float64)
    assert m.particle_count == 3 * 4 * 5 and m.tet_count == 5 * 2 * 3 * 4
    x = m.particle_q.numpy()
    # Newton's order: x fastest, then y, then z
    np.testing.assert_allclose(x[1], [0.1, 0.0, 0.0])
    np.testing.assert_allclose(x[3], [0.0, 0.2, 0.0])
    np.testing.assert_allclose(x[12], [0.0, 0.0, 0.3])
    assert (soft.signed_volumes(x, m.tet_indices.numpy().astype(np.int64)) > 0).all()
    np.testing.assert_allclose(m.tet_rest_volume.numpy().sum(), 0.2 * 0.6 * 1.2, rtol=1e-12)
    pinned = m.particle_mass.numpy() == 0.0
    assert (pinned == (np.abs(x[:, 0]) < 1e-12)).all()


def test_lame_parameters_and_youngs_modulus_give_the_same_model():
    E, nu = soft.youngs_poisson(1e4, 2e4)
    a = grid().finalize(dtype=xsim.float64)
    b = grid(k_mu=None, k_lambda=None, youngs_modulus=float(E), poisson_ratio=float(nu)).finalize(dtype=xsim.float64)
    np.testing.assert_allclose(a.tet_youngs_modulus.numpy(), b.tet_youngs_modulus.numpy(), rtol=1e-14)
    np.testing.assert_allclose(a.tet_poisson_ratio.numpy(), b.tet_poisson_ratio.numpy(), rtol=1e-14)
    mu, la = soft.lame_parameters(E, nu)
    assert (mu, la) == pytest.approx((1e4, 2e4), rel=1e-12)
    assert nu == pytest.approx(2e4 / (2 * 3e4))


def test_the_surface_is_the_boundary_wound_outwards():
    b = grid()
    body = b.soft_bodies[0]
    tris = body["triangles"]
    assert len(tris) == 2 * 2 * (2 * 3 + 3 * 4 + 2 * 4)  # two triangles per boundary cell face
    x = np.asarray(b.particle_q)
    centre = x.mean(axis=0)
    n = np.cross(x[tris[:, 1]] - x[tris[:, 0]], x[tris[:, 2]] - x[tris[:, 0]])
    assert (np.einsum("ij,ij->i", n, x[tris].mean(axis=1) - centre) > 0).all()


def test_soft_mesh_takes_flat_or_paired_indices_and_flips_a_negatively_oriented_mesh():
    for indices in ([0, 1, 2, 3], [[0, 2, 1, 3]]):
        b = ModelBuilder()
        b.add_soft_mesh(pos=(1.0, 0.0, 0.0), rot=Q0, scale=2.0, vel=(0.0, 0.0, 0.0), vertices=TET, indices=indices,
                        density=600.0, youngs_modulus=1e5, poisson_ratio=0.25)
        m = b.finalize(dtype=xsim.float64)
        assert m.tet_rest_volume.numpy()[0] == pytest.approx(8.0 / 6.0)
        assert m.particle_mass.numpy().sum() == pytest.approx(600.0 * 8.0 / 6.0)
        np.testing.assert_allclose(m.particle_q.numpy()[1], [3.0, 0.0, 0.0])


def test_add_builder_replicates_soft_bodies():
    one = grid(dim_x=1, dim_y=1, dim_z=1)
    b = ModelBuilder()
    b.add_builder(one)
    b.add_builder(one, xform=((1.0, 0.0, 0.0), Q0))
    m = b.finalize(dtype=xsim.float64)
    assert m.tet_count == 10 and len(m.soft_bodies) == 2
    assert m.soft_bodies[1]["first"] == 8 and m.soft_bodies[1]["first_tet"] == 5
    assert m.tet_indices.numpy()[5:].min() == 8


@pytest.mark.parametrize("kw, words", [
    ({"k_mu": None, "k_lambda": None, "youngs_modulus": 1e5, "poisson_ratio": 0.5}, "poisson_ratio must be in (-1, 0.5)"),
    ({"k_mu": None, "k_lambda": None, "youngs_modulus": 1e5, "poisson_ratio": -1.0}, "poisson_ratio must be in (-1, 0.5)"),
    ({"k_mu": None, "k_lambda": None, "youngs_modulus": 0.0, "poisson_ratio": 0.3}, "youngs_modulus must be > 0"),
    ({"k_mu": None, "k_lambda": None, "youngs_modulus": -5.0, "poisson_ratio": 0.3}, "youngs_modulus must be > 0"),
    ({"k_mu": None, "k_lambda": None, "youngs_modulus": 1e5}, "youngs_modulus and poisson_ratio go together"),
    ({"youngs_modulus": 1e5, "poisson_ratio": 0.3}, "not both"),
    ({"k_mu": None, "k_lambda": None}, "needs a material"),
    ({"k_mu": -1.0}, "k_mu must be > 0"),
    ({"k_damp": -1.0}, "k_damp must be >= 0"),
    ({"dim_z": 0}, "dim_z must be an integer >= 1"),
    ({"cell_z": 0.0}, "cell_z must be > 0"),
])
def test_bad_materials_and_sizes_are_refused_naming_the_key(kw, words):
    with pytest.raises(ValueError, match="add_soft_grid") as e:
        grid(**kw)
    assert words in str(e.value)


def test_degenerate_and_inverted_tets_are_refused_naming_them():
    x = np.vstack([TET, [[1.0, 1.0, 1.0]], [[0.5, 0.5, 0.0]]])
    flat = [[0, 1, 2, 3], [0, 1, 2, 5]]  # tet 1 lies in the plane z = 0
    with pytest.raises(ValueError, match=r"add_soft_mesh: 1 tetrahedra have zero volume .*tet 1 \(vertices \[0, 1, 2, 5\]\)"):
        ModelBuilder().add_soft_mesh((0, 0, 0), Q0, 1.0, (0, 0, 0), x, flat, 1000.0, youngs_modulus=1e5,
                                     poisson_ratio=0.3)
    mixed = [[0, 1, 2, 3], [0, 2, 1, 3], [0, 1, 2, 3]]  # tet 1 is the others' mirror image
    with pytest.raises(ValueError, match=r"1 tetrahedra are inverted .*tet 1 \(vertices \[0, 2, 1, 3\]\)"):
        ModelBuilder().add_soft_mesh((0, 0, 0), Q0, 1.0, (0, 0, 0), x, mixed, 1000.0, youngs_modulus=1e5,
                                     poisson_ratio=0.3)
    with pytest.raises(IndexError, match=r"tet 0 has vertex indices \[0, 1, 2, 9\] out of range"):
        ModelBuilder().add_soft_mesh((0, 0, 0), Q0, 1.0, (0, 0, 0), x, [0, 1, 2, 9], 1000.0, youngs_modulus=1e5,
                                     poisson_ratio=0.3)
    with pytest.raises(ValueError, match="add_soft_mesh: no tetrahedra"):
        ModelBuilder().add_soft_mesh((0, 0, 0), Q0, 1.0, (0, 0, 0), x, np.zeros((0, 4), int), 1000.0,
                                     youngs_modulus=1e5, poisson_ratio=0.3)
    with pytest.raises(ValueError, match="multiple of 4"):
        ModelBuilder().add_soft_mesh((0, 0, 0), Q0, 1.0, (0, 0, 0), x, [0, 1, 2], 1000.0, youngs_modulus=1e5,
                                     poisson_ratio=0.3)


def test_add_tetrahedron_takes_newtons_arguments():
    b = ModelBuilder()
    for p in TET:
        b.add_particle(p, mass=1.0)
    assert b.add_tetrahedron(0, 1, 2, 3, 1e4, 2e4, 3.0) == 0
    m = b.finalize(dtype=xsim.float64)
    E, _nu = soft.youngs_poisson(1e4, 2e4)
    assert m.tet_youngs_modulus.numpy()[0] == pytest.approx(E) and m.tet_damping.numpy()[0] == 3.0
    with pytest.raises(IndexError, match="add_tetrahedron"):
        b.add_tetrahedron(0, 1, 2, 7, 1e4, 2e4)
