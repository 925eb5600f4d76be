"""``xsim sweep`` on a local Ray of 2 CPUs: one row and one USD file per combination, a plot of a
metric; an interrupted sweep resumed with --resume ends with the same results.csv as an
uninterrupted one, running only what was missing; bad --param keys are SceneErrors naming them."""

import csv
from pathlib import Path

import pytest
from pxr import Usd, UsdGeom

from xsim.cli import main
from xsim.distributed import METRICS, run_rollout
from xsim.distributed.sweep import run_sweep

SCENE = Path(__file__).parents[2] / "scenes" / "fit_drape.toml"
PARAMS = {"cloth[0].mass": [0.005, 0.01, 0.02], "sim.substeps": [2, 4]}


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_writes_a_row_and_a_usd_file_per_combination_and_a_plot(local_ray, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", str(SCENE), "--param", "cloth[0].mass=0.005,0.01", "--param", "sim.substeps=2,4",
                 "--out", str(out), "--workers", "2", "--plot", "energy"]) == 0
    captured = capsys.readouterr()
    assert "4 runs over cloth[0].mass, sim.substeps" in captured.out and "4/4" in captured.err
    rows = read(out / "results.csv")
    assert list(rows[0]) == ["run", "cloth[0].mass", "sim.substeps", *METRICS, "wall_time", "usd"]
    assert [(r["run"], r["cloth[0].mass"], r["sim.substeps"]) for r in rows] == [
        ("0", "0.005", "2"), ("1", "0.005", "4"), ("2", "0.01", "2"), ("3", "0.01", "4")]
    for r in rows:
        here = run_rollout(SCENE, {"cloth[0].mass": float(r["cloth[0].mass"]), "sim.substeps": int(r["sim.substeps"])})
        for name in METRICS:
            assert float(r[name]) == pytest.approx(here.metrics[name], rel=1e-5, abs=1e-6), name
        assert float(r["wall_time"]) > 0
        stage = Usd.Stage.Open(str(out / r["usd"]))
        assert r["usd"] == f"usd/fit_drape_{int(r['run']):04d}.usda"
        assert stage.GetEndTimeCode() == 20
        points = UsdGeom.Mesh(stage.GetPrimAtPath("/World/Cloth/sheet")).GetPointsAttr().Get(20)
        assert len(points) == 35
    assert (out / "energy.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(out.rglob(".*.tmp*"))


class Stop(Exception):
    pass


def test_an_interrupted_sweep_resumes_to_the_same_results(local_ray, tmp_path):
    whole = run_sweep(SCENE, PARAMS, tmp_path / "whole", usd=False, progress=False)

    def stop_after(k):
        seen = []

        def on_result(result):
            seen.append(result.index)
            if len(seen) == k:
                raise Stop
        return on_result

    part = tmp_path / "part"
    with pytest.raises(Stop):
        run_sweep(SCENE, PARAMS, part, usd=False, progress=False, on_result=stop_after(2))
    kept = read(part / "results.csv")
    assert len(kept) == 2
    with open(part / "results.csv", "a") as f:   # a row cut off by a kill mid-write
        f.write("5,0.02,4,0.1,0.2")
    ran = []
    resumed = run_sweep(SCENE, PARAMS, part, usd=False, progress=False, resume=True, on_result=lambda r: ran.append(r.index))
    assert sorted(ran) == sorted(set(range(6)) - {int(r["run"]) for r in kept})
    a, b = read(whole), read(resumed)
    assert [r["run"] for r in b] == [str(i) for i in range(6)]
    for row_a, row_b in zip(a, b):
        row_a.pop("wall_time"), row_b.pop("wall_time")
        assert row_a == row_b
    for r in kept:   # the runs done before the interruption were kept as they were, wall time too
        assert r in read(resumed)


def test_a_finished_sweep_is_not_overwritten_and_resuming_it_runs_nothing(local_ray, tmp_path, capsys):
    out = tmp_path / "s"
    args = ["sweep", str(SCENE), "--param", "sim.substeps=2,3", "--out", str(out), "--no-usd", "--quiet"]
    assert main(args) == 0
    before = (out / "results.csv").read_text()
    assert not (out / "usd").exists()
    assert main(args) == 1
    assert "holds an earlier sweep's results: pass --resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert (out / "results.csv").read_text() == before
    other = ["sweep", str(SCENE), "--param", "sim.iterations=2,3", "--out", str(out), "--resume", "--quiet"]
    assert main(other) == 2
    assert "written by a different sweep" in capsys.readouterr().err


@pytest.mark.parametrize("param,message", [
    ("cloth[0].mas=0.1", "cloth[0].mas: expected one of the keys"),
    ("cloth[1].mass=0.1", "cloth[1]: expected an existing [[cloth]] (the scene has 1), found no cloth[1]"),
    ("sim.substeps=4,0", "sim.substeps: expected an integer >= 1, found 0"),
    ("sim.substeps", "--param sim.substeps: expected KEY=VALUE[,VALUE...]"),
    ("sim substeps=1", 'sim substeps: expected a key path such as'),
    ("sim.substeps=fast", "--param sim.substeps: expected comma-separated TOML values"),
])
def test_bad_params_are_scene_errors_naming_the_key_before_anything_runs(tmp_path, capsys, param, message):
    assert main(["sweep", str(SCENE), "--param", param, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert f"xsim: error: {SCENE}: " in err and message in err
    assert not (tmp_path / "s").exists()
