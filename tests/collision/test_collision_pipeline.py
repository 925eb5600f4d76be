"""The collision layer as Newton users call it: ``CollisionPipeline(model).collide(state, contacts)`` fills a
``Contacts`` with Newton's field names, ``solver.step(state_in, state_out, control, contacts, dt)`` solves
them and gives the same rollout as the older ``step(state_in, state_out, control, dt)`` (which finds its
own through the same pipeline), and the layer imports no solver."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import xsim
from xsim.collision import CollisionPipeline, Contacts
from xsim.sim import ModelBuilder
from xsim.solvers import SolverXPBD

sys.path.insert(0, str(Path(__file__).parents[1]))
from test_import_graph import import_graph  # tests/, beside this folder

FRAME = 1.0 / 60.0
SIDE = (math.sin(math.pi / 4), 0.0, 0.0, math.cos(math.pi / 4))  # a cylinder's axis along y


def scene():
    """A cylinder on its side and a box on the ground, a cone dropped onto the box, an ellipsoid onto a sphere."""
    b = ModelBuilder()
    b.add_ground_plane(mu=0.7)
    cyl = b.add_body(((0.0, 0.0, 0.1), SIDE))
    b.add_shape_cylinder(cyl, radius=0.1, half_height=0.15)
    box = b.add_body(((1.0, 0.0, 0.2), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(box, hx=0.2, hy=0.2, hz=0.2)
    cone = b.add_body(((1.02, 0.01, 0.56), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_cone(cone, radius=0.1, half_height=0.15)
    b.add_shape_sphere(-1, xform=((-1.0, 0.0, 0.3), (0.0, 0.0, 0.0, 1.0)), radius=0.3)
    ell = b.add_body(((-1.0, 0.0, 0.71), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_ellipsoid(ell, rx=0.2, ry=0.18, rz=0.1)  # flat enough to rest on the sphere's top
    return b.finalize(dtype=xsim.float32)


def test_collide_then_step_with_contacts_is_the_step_that_finds_its_own():
    model = scene()
    pipeline = CollisionPipeline(model)
    contacts = pipeline.contacts()
    a, b = model.state(), model.state()
    solver = SolverXPBD(model, substeps=10)
    for _ in range(40):
        pipeline.collide(a, contacts, dt=FRAME)
        solver.step(a, b, None, contacts, FRAME)
        a, b = b, a
    c, d = model.state(), model.state()
    own = SolverXPBD(model, substeps=10)
    for _ in range(40):
        own.step(c, d, None, FRAME)
        c, d = d, c
    np.testing.assert_array_equal(a.body_q.numpy(), c.body_q.numpy())
    np.testing.assert_array_equal(a.body_qd.numpy(), c.body_qd.numpy())
    assert own.rigid.contact_count == contacts.count > 0
    # all of it resting where it landed: nothing fell through anything
    np.testing.assert_allclose(a.body_q.numpy()[:, 2], [0.1, 0.2, 0.55, 0.7], atol=2e-3)
    assert np.abs(a.body_qd.numpy()).max() < 0.05


def test_contacts_carry_newtons_fields_at_the_states_poses():
    b = ModelBuilder()
    b.add_ground_plane()
    body = b.add_body(((0.3, -0.2, 0.1 - 0.002), SIDE))  # 2 mm into the ground
    b.add_shape_cylinder(body, radius=0.1, half_height=0.15)
    model = b.finalize(dtype=xsim.float64)
    pipeline = CollisionPipeline(model)
    contacts = pipeline.collide(model.state(), pipeline.contacts())
    assert isinstance(contacts, Contacts)
    n = int(contacts.rigid_contact_count.numpy()[0])
    assert n == contacts.count >= 2
    depth = contacts.rigid_contact_depth.numpy()[:n]
    deepest = np.flatnonzero(depth > 0.0)
    # the two rims' lowest points, each 2 mm deep, in the cylinder's frame (its local -y is the world's -z)
    assert len(deepest) == 2
    np.testing.assert_allclose(depth[deepest], 0.002, atol=1e-12)
    np.testing.assert_array_equal(contacts.rigid_contact_shape0.numpy()[deepest], [0, 0])
    np.testing.assert_array_equal(contacts.rigid_contact_shape1.numpy()[deepest], [1, 1])  # the ground
    np.testing.assert_allclose(contacts.rigid_contact_point0.numpy()[deepest],
                               [[0.0, -0.1, -0.15], [0.0, -0.1, 0.15]], atol=1e-12)
    np.testing.assert_allclose(contacts.rigid_contact_point1.numpy()[deepest][:, 2], [0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(contacts.rigid_contact_normal.numpy()[deepest], [[0, 0, -1.0]] * 2, atol=1e-12)


def test_step_refuses_a_missing_dt_and_contacts_of_another_kind():
    model = scene()
    solver = SolverXPBD(model)
    with pytest.raises(TypeError, match="dt"):
        solver.step(model.state(), model.state(), None, None)
    with pytest.raises(TypeError, match="contacts must be xsim.collision.Contacts"):
        solver.step(model.state(), model.state(), None, "contacts", FRAME)


def test_the_collision_layer_imports_no_solver():
    graph = import_graph()
    for module, deps in graph.items():
        if module.startswith("xsim.collision"):
            assert not [d for d in deps if d.startswith("xsim.solvers")], module
