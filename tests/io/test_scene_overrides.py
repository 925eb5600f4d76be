"""Scene values set by key path (``load_scene(path, overrides)``, ``xsim sweep --param``): the value
lands where the path says, and a bad path is a SceneError naming it."""

from pathlib import Path

import pytest

from xsim import SceneError
from xsim.io import load_scene
from xsim.io.overrides import apply_overrides, parse_key_path, parse_values
from xsim.io.schema import Invalid

DRAPE = Path(__file__).parents[2] / "scenes" / "drape.toml"


def test_key_paths_split_into_names_and_indices():
    assert parse_key_path("cloth[0].compliance.stretch") == ["cloth", 0, "compliance", "stretch"]
    assert parse_key_path("sim.substeps") == ["sim", "substeps"]
    assert parse_key_path("body[2].shape[1].radius") == ["body", 2, "shape", 1, "radius"]


@pytest.mark.parametrize("key", ["", "cloth[0]..mass", "cloth[x].mass", "cloth[0]mass", "bad key", "1sim.dt"])
def test_malformed_key_paths_are_refused_naming_them(key):
    with pytest.raises(Invalid, match="expected a key path such as"):
        parse_key_path(key)


def test_overrides_set_values_and_make_missing_tables_without_touching_the_input():
    raw = {"sim": {"dt": 0.01}, "cloth": [{"mass": 1.0}]}
    out = apply_overrides(raw, {"sim.substeps": 3, "cloth[0].compliance.bend": 2.5, "output.fps": 30})
    assert out == {"sim": {"dt": 0.01, "substeps": 3}, "cloth": [{"mass": 1.0, "compliance": {"bend": 2.5}}],
                   "output": {"fps": 30}}
    assert raw == {"sim": {"dt": 0.01}, "cloth": [{"mass": 1.0}]}


def test_a_loaded_scene_carries_its_overrides():
    scene = load_scene(DRAPE, {"cloth[0].mass": 0.005, "sim.substeps": 3, "cloth[0].compliance.stretch": 2e-6,
                               "collider[0].radius": 0.25})
    assert scene.sim.substeps == 3 and scene.cloths[0]["mass"] == 0.005
    assert scene.cloths[0]["compliance"] == {"stretch": 2e-6, "shear": 1e-5, "bend": 10.0}
    assert scene.colliders[0]["radius"] == 0.25


@pytest.mark.parametrize("overrides,message", [
    ({"cloth[0].mas": 1.0}, "cloth[0].mas: expected one of the keys name, grid, mesh"),
    ({"cloth[0].mas": 1.0}, "(did you mean 'mass'?)"),
    ({"cloth[2].mass": 1.0}, "cloth[2]: expected an existing [[cloth]] (the scene has 1), found no cloth[2]"),
    ({"body[0].mass": 1.0}, "body[0]: expected an existing [[body]] (the scene has none)"),
    ({"sim.substeps": 0}, "sim.substeps: expected an integer >= 1, found 0"),
    ({"sim.substeps.x": 1}, "sim.substeps: expected a table (to set sim.substeps.x), found 10 (an integer)"),
    ({"cloth.mass": 1.0}, "cloth: expected a table (to set cloth.mass), found [{...}] (an array of 1)"),
    ({"simm.dt": 0.1}, "simm: expected one of the tables [sim]"),
])
def test_bad_overrides_are_scene_errors_naming_the_key(overrides, message):
    with pytest.raises(SceneError) as e:
        load_scene(DRAPE, overrides)
    assert str(e.value).startswith(f"{DRAPE}: ")
    assert message in str(e.value)


def test_param_values_are_toml_values():
    assert parse_values("0.001,0.002", "--param m") == [0.001, 0.002]
    assert parse_values("5, 10", "--param s") == [5, 10]
    assert parse_values('[0, 0, 1], [0.0, 0.0, 2.0], "cpu", true', "--param v") == [[0, 0, 1], [0.0, 0.0, 2.0],
                                                                                  "cpu", True]
    with pytest.raises(Invalid, match="--param v: expected comma-separated TOML values"):
        parse_values("cpu", "--param v")
    with pytest.raises(Invalid, match="--param v: expected at least one value, found none"):
        parse_values("", "--param v")
