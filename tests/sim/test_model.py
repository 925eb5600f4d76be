"""The typed Model, State, Control and ModelBuilder (xsim/sim/model.py, xsim/sim/declared.py): every
field is declared with its type and a docstring, the declared array dtypes are the ones finalize
builds, and setting an attribute a class does not declare is refused, naming it and the class."""

import ast
import inspect

import numpy as np
import pytest

import xsim
from xsim.sim import builder as builder_module
from xsim.sim import model as model_module
from xsim.sim import rigid as rigid_module
from xsim.sim import worlds as worlds_module
from xsim.sim.model import Control, Model, State
from xsim.types import ArrayType


def _scene(dtype=xsim.float32):
    b = xsim.sim.ModelBuilder()
    b.add_cloth_grid(pos=(0.0, 0.0, 1.0), rot=(0.0, 0.0, 0.0, 1.0), vel=(0.0, 0.0, 0.0), dim_x=2, dim_y=2,
                     cell_x=0.1, cell_y=0.1, mass=0.1, area_compliance=1e-6)
    b.add_collider_mesh(([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0, 1, 2]]))
    b.add_collider_sphere((0.0, 0.0, -1.0), 0.2)
    b.add_ground_plane()
    body = b.add_body(((0.0, 0.0, 2.0), (0.0, 0.0, 0.0, 1.0)))
    b.add_shape_box(body, hx=0.1, hy=0.1, hz=0.1)
    b.add_joint_revolute(-1, body, parent_xform=((0.0, 0.0, 2.5), (0.0, 0.0, 0.0, 1.0)))
    return b, b.finalize(dtype=dtype)


def _declared(cls) -> list[tuple[str, ast.expr, ast.stmt | None]]:
    """(name, annotation, the statement after it) of each annotated attribute in ``cls``'s own body."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(cls)))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__).body
    return [(s.target.id, s.annotation, body[i + 1] if i + 1 < len(body) else None)
            for i, s in enumerate(body) if isinstance(s, ast.AnnAssign)]


DECLARING = [Model, State, Control, builder_module.ModelBuilder, rigid_module.RigidBuilderMixin,
             worlds_module.WorldBuilderMixin]


@pytest.mark.parametrize("cls", DECLARING, ids=lambda c: c.__name__)
def test_every_field_has_a_type_and_a_docstring(cls):
    fields = _declared(cls)
    assert len(fields) >= 2
    for name, annotation, after in fields:
        text = ast.unparse(annotation)
        assert text not in ("object", "Any") and "object" not in text.split(" | "), f"{cls.__name__}.{name}: {text}"
        assert isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and \
            isinstance(after.value.value, str) and after.value.value.strip(), f"{cls.__name__}.{name} has no docstring"


def test_model_array_fields_hold_the_declared_dtype_and_ndim():
    _, model = _scene()
    checked = 0
    for name, annotation, _ in _declared(Model):
        declared = eval(ast.unparse(annotation).split(" | ")[0], vars(model_module))
        if isinstance(declared, ArrayType):
            value = getattr(model, name)
            assert isinstance(value, xsim.array), name
            assert value.dtype is declared.dtype and value.ndim == declared.ndim, \
                f"{name}: declared {declared}, holds {xsim.types.type_name(value.dtype)} ndim {value.ndim}"
            checked += 1
    assert checked >= 50


def test_state_and_control_fields_hold_the_declared_dtypes():
    _, model = _scene()
    state = model.state()
    checked = 0
    for name, annotation, _ in _declared(State):
        declared = eval(ast.unparse(annotation).split(" | ")[0], vars(model_module))
        value = getattr(state, name)
        if isinstance(declared, ArrayType):
            assert value.dtype is declared.dtype and value.ndim == declared.ndim, name
            checked += 1
    assert checked == 7
    assert state.body_contacts is None  # what a solver step leaves for the next one: nothing yet
    control = Control(joint_target_q=xsim.zeros(1, dtype=xsim.float32))
    assert control.particle_target is None and control.joint_target_q.shape == (1,)


def test_float64_models_hold_float64_arrays():
    _, model = _scene(xsim.float64)
    for name in ("particle_q", "body_q", "body_qd", "body_inertia", "joint_limit", "shape_xform"):
        dtype = getattr(model, name).dtype
        assert xsim.types.type_name(dtype).endswith("d") or dtype is xsim.float64, name


def test_rigid_counts_are_real_fields_and_unknown_names_are_errors():
    b = xsim.sim.ModelBuilder()
    b.add_particle((0.0, 0.0, 1.0))
    b.add_ground_plane()
    model = b.finalize()
    assert (model.body_count, model.shape_count, model.joint_count) == (0, 1, 0)  # the ground is a shape
    assert not model.has_rigid and model.body_q.shape == (0,) and model.joint_type.shape == (0,)
    for unknown in ("foo_count", "soft_contact_mu", "rigid"):
        with pytest.raises(AttributeError, match=unknown):
            getattr(model, unknown)
    _, model = _scene()
    assert (model.body_count, model.shape_count, model.joint_count) == (1, 4, 1)  # two colliders, the box, the ground
    assert model.has_rigid
    np.testing.assert_allclose(model.body_q.numpy()[0], [0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0])


@pytest.mark.parametrize("target, name, hint", [
    ("builder", "default_particle_radius", "particle_radius"),
    ("builder", "particle_count", None),
    ("model", "soft_contact_mu", None),
    ("model", "particle_masses", "particle_mass"),
    ("state", "particle_x", "particle_q"),
    ("control", "joint_targets_q", "joint_target_q"),
])
def test_setting_an_undeclared_attribute_names_it_and_the_class(target, name, hint):
    b, model = _scene()
    obj = {"builder": b, "model": model, "state": model.state(), "control": model.control()}[target]
    cls = type(obj).__name__
    with pytest.raises(AttributeError, match=f"{cls} has no attribute '{name}' to set") as err:
        setattr(obj, name, 0.05)
    assert err.value.name == name
    if hint is not None:
        assert f"did you mean '{hint}'" in str(err.value)
    assert name not in vars(obj)


def test_declared_attributes_still_set():
    b, model = _scene()
    b.particle_damping = 2.0
    b.rigid_contact_margin = 0.02
    assert (b.particle_damping, b.rigid_contact_margin) == (2.0, 0.02)
    state = model.state()
    v = xsim.zeros(state.particle_count, dtype=xsim.vec3)
    state.particle_qd = v
    assert state.particle_qd is v
    model.particle_damping = 1.5
    assert model.particle_damping == 1.5
