"""Reliability, the Python API: a ``ModelBuilder`` method given a value a float32 model cannot hold
(NaN, inf, beyond float32, a denormal), a negative size, a zero quaternion or axis, or a grid too
large for memory raises ``ValueError`` naming the method and the argument, before it changes
anything; ``SolverXPBD.step`` refuses a time step it cannot divide by."""

import math

import numpy as np
import pytest

from xsim.sim import ModelBuilder

NAN, INF = math.nan, math.inf
RANGE = "within float32's normal range"
FINITE = "within float32's range (a magnitude at most 3.4e+38)"
TRI = (np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), np.array([[0, 1, 2]]))


def _with_nan_vertex():
    v, f = TRI
    v = v.copy()
    v[1, 0] = NAN
    return v, f


def grid(**kw):
    args = dict(pos=(0.0, 0.0, 0.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=2, dim_y=2,
                cell_x=0.1, cell_y=0.1, mass=0.1)
    args.update(kw)
    return lambda b: b.add_cloth_grid(**args)


def joint(**kw):
    return lambda b: b.add_joint_revolute(-1, b.add_body(), **kw)


# (call on a builder with two particles, argument named in the message, fragment of what it must be)
REFUSED = {
    "particle position nan": (lambda b: b.add_particle((NAN, 0.0, 0.0)), "add_particle: pos[0]", FINITE),
    "particle velocity inf": (lambda b: b.add_particle((0.0, 0.0, 0.0), vel=(0.0, INF, 0.0)),
                              "add_particle: vel[1]", FINITE),
    "particle position from numpy nan": (lambda b: b.add_particle(np.array([0.0, 0.0, np.nan])),
                                         "add_particle: pos[2]", FINITE),
    "particle mass nan": (lambda b: b.add_particle((0.0, 0.0, 0.0), mass=NAN), "add_particle: mass", RANGE),
    "particle mass negative": (lambda b: b.add_particle((0.0, 0.0, 0.0), mass=-1.0), "add_particle: mass", ">= 0"),
    "particle mass 1e300": (lambda b: b.add_particle((0.0, 0.0, 0.0), mass=1e300), "add_particle: mass", RANGE),
    "particle mass denormal": (lambda b: b.add_particle((0.0, 0.0, 0.0), mass=1e-40), "add_particle: mass",
                               RANGE),
    "particle radius zero": (lambda b: b.add_particle((0.0, 0.0, 0.0), radius=0.0), "add_particle: radius", "> 0"),
    "particle radius nan": (lambda b: b.add_particle((0.0, 0.0, 0.0), radius=NAN), "add_particle: radius", RANGE),
    "particle position not numbers": (lambda b: b.add_particle(("a", 0.0, 0.0)), "add_particle: pos",
                                      "a number or an array of numbers"),
    "distance compliance nan": (lambda b: b.add_distance_constraint(0, 1, compliance=NAN),
                                "add_distance_constraint: compliance", FINITE),
    "distance compliance negative": (lambda b: b.add_distance_constraint(0, 1, compliance=-1.0),
                                     "add_distance_constraint: compliance", ">= 0"),
    "distance rest length inf": (lambda b: b.add_distance_constraint(0, 1, rest_length=INF),
                                 "add_distance_constraint: rest_length", FINITE),
    "bending compliance inf": (lambda b: b.add_bending_constraint(0, 1, 0, 1, compliance=INF),
                               "add_bending_constraint: compliance", FINITE),
    "area compliance nan": (lambda b: b.add_triangle(0, 1, 0, area_compliance=NAN),
                            "add_triangle: area_compliance", FINITE),
    "gravity nan": (lambda b: ModelBuilder(gravity=(0.0, 0.0, NAN)), "ModelBuilder: gravity[2]", FINITE),
    "gravity 1e39": (lambda b: ModelBuilder(gravity=(1e39, 0.0, 0.0)), "ModelBuilder: gravity[0]", FINITE),
    "grid dim zero": (grid(dim_x=0), "add_cloth_grid: dim_x", "an integer >= 1"),
    "grid dim fractional": (grid(dim_y=2.5), "add_cloth_grid: dim_y", "an integer >= 1"),
    "grid of 10**12 cells": (grid(dim_x=10**6, dim_y=10**6), "add_cloth_grid: dim_x, dim_y", "fit in memory"),
    "grid cell nan": (grid(cell_x=NAN), "add_cloth_grid: cell_x", RANGE),
    "grid cell zero": (grid(cell_y=0.0), "add_cloth_grid: cell_y", "> 0"),
    "grid mass inf": (grid(mass=INF), "add_cloth_grid: mass", RANGE),
    "grid zero quaternion": (grid(rot=(0.0, 0.0, 0.0, 0.0)), "add_cloth_grid: rot", "a non-zero quaternion"),
    "grid nan quaternion": (grid(rot=(NAN, 0.0, 0.0, 1.0)), "add_cloth_grid: rot[0]", FINITE),
    "grid position inf": (grid(pos=(0.0, 0.0, -INF)), "add_cloth_grid: pos[2]", FINITE),
    "grid stretch compliance negative": (grid(stretch_compliance=-1e-6), "add_cloth_grid: stretch_compliance",
                                         ">= 0"),
    "grid bend compliance nan": (grid(bend_compliance=NAN), "add_cloth_grid: bend_compliance", FINITE),
    "grid particle radius zero": (grid(particle_radius=0.0), "add_cloth_grid: particle_radius", "> 0"),
    "cloth mesh nan vertex": (lambda b: b.add_cloth_mesh(*_with_nan_vertex()), "add_cloth_mesh: vertices[1][0]",
                              FINITE),
    "cloth mesh scale zero": (lambda b: b.add_cloth_mesh(*TRI, scale=0.0), "add_cloth_mesh: scale", "> 0"),
    "cloth mesh scale nan": (lambda b: b.add_cloth_mesh(*TRI, scale=NAN), "add_cloth_mesh: scale", RANGE),
    "cloth mesh zero quaternion": (lambda b: b.add_cloth_mesh(*TRI, rot=(0, 0, 0, 0)), "add_cloth_mesh: rot",
                                   "non-zero"),
    "ground friction nan": (lambda b: b.add_ground_plane(mu=NAN), "add_ground_plane: mu", FINITE),
    "ground restitution inf": (lambda b: b.add_ground_plane(restitution=INF), "add_ground_plane: restitution",
                               FINITE),
    "ground height nan": (lambda b: b.add_ground_plane(height=NAN), "add_ground_plane: height", FINITE),
    "sphere radius nan": (lambda b: b.add_collider_sphere((0, 0, 0), NAN), "add_collider_sphere: radius", RANGE),
    "sphere radius negative": (lambda b: b.add_collider_sphere((0, 0, 0), -1.0), "add_collider_sphere: radius",
                               "> 0"),
    "sphere center inf": (lambda b: b.add_collider_sphere((0, INF, 0), 1.0), "add_collider_sphere: center[1]",
                          FINITE),
    "box half extents zero": (lambda b: b.add_collider_box((0, 0, 0), (1.0, 0.0, 1.0)),
                              "add_collider_box: half_extents", "> 0"),
    "box zero quaternion": (lambda b: b.add_collider_box((0, 0, 0), (1, 1, 1), rot=(0, 0, 0, 0)),
                            "add_collider_box: rot", "non-zero"),
    "capsule half height nan": (lambda b: b.add_collider_capsule((0, 0, 0), 0.1, NAN),
                                "add_collider_capsule: half_height", RANGE),
    "mesh collider nan vertex": (lambda b: b.add_collider_mesh(_with_nan_vertex()),
                                 "add_collider_mesh: mesh[1][0]", FINITE),
    "mesh collider zero quaternion": (lambda b: b.add_collider_mesh(TRI, rot=(0, 0, 0, 0)),
                                      "add_collider_mesh: rot", "non-zero"),
    "body zero quaternion": (lambda b: b.add_body(((0, 0, 0), (0, 0, 0, 0))), "add_body: xform rotation",
                             "non-zero"),
    "body 7-number xform nan": (lambda b: b.add_body((0, 0, NAN, 0, 0, 0, 1)), "add_body: xform position[2]",
                                RANGE),
    "body xform of the wrong shape": (lambda b: b.add_body(((0, 0, 0), (0, 0, 0, 1), 3)), "add_body: xform",
                                      "a (position, quaternion) pair"),
    "body mass nan": (lambda b: b.add_body(mass=NAN), "add_body: mass", RANGE),
    "body mass negative": (lambda b: b.add_body(mass=-1.0), "add_body: mass", ">= 0"),
    "body density zero": (lambda b: b.add_body(density=0.0), "add_body: density", "> 0"),
    "body velocity inf": (lambda b: b.add_body(lin_vel=(INF, 0, 0)), "add_body: lin_vel[0]", FINITE),
    "body com nan": (lambda b: b.add_body(com=(0, 0, NAN)), "add_body: com[2]", FINITE),
    "body inertia nan": (lambda b: b.add_body(inertia=np.diag([1.0, NAN, 1.0])), "add_body: inertia[1][1]", FINITE),
    "sphere shape radius nan": (lambda b: b.add_shape_sphere(-1, radius=NAN), "add_shape_sphere: radius", RANGE),
    "sphere shape friction negative": (lambda b: b.add_shape_sphere(-1, mu=-0.1), "add_shape_sphere: mu", ">= 0"),
    "sphere shape restitution nan": (lambda b: b.add_shape_sphere(-1, restitution=NAN),
                                     "add_shape_sphere: restitution", FINITE),
    "sphere shape zero quaternion": (lambda b: b.add_shape_sphere(-1, xform=(0, 0, 0, 0, 0, 0, 0)),
                                     "add_shape_sphere: xform rotation", "non-zero"),
    "box shape half extent inf": (lambda b: b.add_shape_box(-1, hx=INF), "add_shape_box: hx", RANGE),
    "box shape half extent zero": (lambda b: b.add_shape_box(-1, hz=0.0), "add_shape_box: hz", "> 0"),
    "capsule shape half height nan": (lambda b: b.add_shape_capsule(-1, half_height=NAN),
                                      "add_shape_capsule: half_height", RANGE),
    "mesh shape inf vertex": (lambda b: b.add_shape_mesh(-1, (TRI[0] + [[0, 0, 0], [0, 0, INF], [0, 0, 0]], TRI[1])),
                              "add_shape_mesh: mesh[1][2]", FINITE),
    "mesh shape scale nan": (lambda b: b.add_shape_mesh(-1, TRI, scale=NAN), "add_shape_mesh: scale", RANGE),
    "joint axis zero": (joint(axis=(0.0, 0.0, 0.0)), "add_joint: axis", "a non-zero axis"),
    "joint axis nan": (joint(axis=(0.0, NAN, 1.0)), "add_joint: axis[1]", FINITE),
    "joint limit nan": (joint(limit_lower=NAN), "add_joint: limit_lower", FINITE),
    "joint drive stiffness negative": (joint(target_ke=-1.0), "add_joint: target_ke", ">= 0"),
    "joint target inf": (joint(target_q=INF), "add_joint: target_q", FINITE),
    "joint frame zero quaternion": (joint(child_xform=((0, 0, 0), (0, 0, 0, 0))),
                                    "add_joint: child_xform rotation", "non-zero"),
    "ball cone limit negative": (lambda b: b.add_joint_ball(-1, b.add_body(), cone_limit=-0.1),
                                 "add_joint: cone_limit", ">= 0"),
}


def _counts(b: ModelBuilder) -> tuple:
    return (b.particle_count, len(b.spring_indices), len(b.bending_indices), len(b.tri_indices), len(b.colliders),
            b.ground, len(b.shapes), len(b.joints))


@pytest.mark.parametrize("call,where,expected", REFUSED.values(), ids=REFUSED.keys())
def test_bad_builder_argument_is_a_value_error_naming_method_and_argument(call, where, expected):
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 0.0))
    b.add_particle((1.0, 0.0, 0.0))
    before = _counts(b)
    with pytest.raises(ValueError) as info:
        call(b)
    message = str(info.value)
    assert message.startswith(f"{where} must be "), message
    assert expected in message
    assert _counts(b)[:7] == before[:7]   # nothing half-added (a joint's body may have been added first)
    assert len(b.joints) == 0


NORMALISED = {
    "collider quaternion": (lambda b: b.add_collider_box((0, 0, 0), (1, 1, 1), rot=(0, 0, 0, 2.0)),
                            lambda b: b.colliders[0].rot, (0.0, 0.0, 0.0, 1.0)),
    "body quaternion": (lambda b: b.add_body(((0, 0, 0), (0, 0, 3.0, 4.0))),
                        lambda b: tuple(b.bodies[0]["q"]), (0.0, 0.0, 0.6, 0.8)),
    "large body quaternion": (lambda b: b.add_body(((0, 0, 0), (0, 0, 3e30, 4e30))),
                              lambda b: tuple(b.bodies[0]["q"]), (0.0, 0.0, 0.6, 0.8)),
    "joint axis": (lambda b: b.add_joint_revolute(-1, b.add_body(), axis=(0.0, 0.0, 5.0)),
                   lambda b: tuple(b.joints[0]["axis"]), (0.0, 0.0, 1.0)),
}


@pytest.mark.parametrize("call,get,unit", NORMALISED.values(), ids=NORMALISED.keys())
def test_nonzero_rotation_or_axis_is_normalised(call, get, unit):
    b = ModelBuilder()
    call(b)
    assert get(b) == pytest.approx(unit, abs=1e-12)


def test_values_below_float32_normal_range_are_accepted_where_rounding_to_zero_is_harmless():
    b = ModelBuilder(gravity=(0.0, 1e-45, -9.81))
    b.add_particle((1e-300, 0.0, 0.0), vel=(0.0, -1e-40, 0.0))
    b.add_particle((1.0, 0.0, 0.0))
    b.add_distance_constraint(0, 1, compliance=1e-45)
    b.add_ground_plane(mu=1e-40)
    model = b.finalize()
    assert model.particle_q.numpy()[0].tolist() == [0.0, 0.0, 0.0]
    assert model.spring_compliance.numpy()[0] == pytest.approx(1e-45, abs=2e-45)


def test_representable_extremes_build_a_finite_float32_model():
    b = ModelBuilder(gravity=(0.0, 0.0, -1e30))
    b.add_particle((1e30, -1e30, 0.0), mass=1e-30, radius=1e-30)
    b.add_particle((0.0, 0.0, 0.0), mass=0.0)
    model = b.finalize()
    inv = model.particle_inv_mass.numpy()
    assert np.isfinite(inv).all() and inv[0] == pytest.approx(1e30, rel=1e-6) and inv[1] == 0.0
    assert np.isfinite(model.particle_q.numpy()).all()


@pytest.fixture(scope="module")
def particle_model():
    b = ModelBuilder()
    b.add_particle((0.0, 0.0, 1.0))
    return b.finalize()


# dt the solver cannot step with (a float32 model, 2 substeps)
BAD_DT = {"zero": 0.0, "negative": -0.01, "nan": NAN, "inf": INF, "1e-300 (h^2 is 0)": 1e-300,
          "1e-25 (1/h^2 overflows)": 1e-25, "1e30 (h^2 overflows)": 1e30, "a string": "0.01"}


@pytest.mark.parametrize("dt", BAD_DT.values(), ids=BAD_DT.keys())
def test_solver_refuses_a_time_step_it_cannot_divide_by(particle_model, dt):
    from xsim.solvers import SolverXPBD

    solver = SolverXPBD(particle_model, substeps=2)
    state, out = particle_model.state(), particle_model.state()
    before = state.particle_q.numpy().copy()
    with pytest.raises(ValueError, match=r"^SolverXPBD\.step: dt must be ") as info:
        solver.step(state, out, None, dt)
    assert "finite" in str(info.value)
    np.testing.assert_array_equal(state.particle_q.numpy(), before)


def test_time_step_limits_follow_the_model_dtype():
    from xsim.sim import validate

    assert validate.time_step_problem(1e-25, 2, np.float32) is not None
    assert validate.time_step_problem(1e-25, 2, np.float64) is None
    assert validate.time_step_problem(1e-300, 2, np.float64) is not None
    assert validate.time_step_problem(1.0 / 60.0, 10, np.float32) is None


def _two_bodies() -> ModelBuilder:
    b = ModelBuilder()
    for x in (0.0, 1.0):
        b.add_body(((x, 0.0, 1.0), (0.0, 0.0, 0.0, 1.0)))
    return b


@pytest.mark.parametrize(("parent", "child", "error", "fragment"), [
    (0, 0, ValueError, "parent and child are both body 0; a joint connects two bodies"),
    (-1, -1, IndexError, "parent -1 / child -1 invalid (there are 2 bodies"),
    (-1, 2, IndexError, "parent -1 / child 2 invalid (there are 2 bodies"),
    (-2, 1, IndexError, "parent -2 / child 1 invalid"),
])
def test_a_joint_between_bodies_that_are_not_two_is_refused_naming_them(parent, child, error, fragment):
    b = _two_bodies()
    with pytest.raises(error, match=fragment.replace("(", r"\(")):
        b.add_joint_revolute(parent, child, axis=(0.0, 1.0, 0.0))
    assert b.joints == []  # nothing added
