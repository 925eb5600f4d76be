"""``map_rollouts`` on a local Ray of 2 CPUs: a scene with key-path overrides or a Python builder
function gives the same results as running it here; bad keys fail before any task; every worker
reads the node's kernel cache, so only the first task to need a kernel compiles it."""

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import xsim
from xsim import SceneError
from xsim.distributed import map_rollouts, map_tasks, run_rollout
from xsim.sim import ModelBuilder

SCENE = Path(__file__).parents[2] / "scenes" / "fit_drape.toml"


def test_scene_rollouts_with_overrides_match_running_them_here(local_ray):
    sets = [{"cloth[0].mass": m, "sim.substeps": s} for m in (0.005, 0.02) for s in (2, 4)]
    here = [run_rollout(SCENE, p) for p in sets]
    there = sorted(map_rollouts(SCENE, sets, keep_frames=True), key=lambda r: r.index)
    assert [r.index for r in there] == [0, 1, 2, 3]
    for a, b in zip(here, there):
        assert b.params == a.params
        assert b.compiled == 0   # the kernels this process compiled are in the node's cache
        for name, value in a.metrics.items():   # float32 sums in another thread order: 1e-5
            assert b.metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
        assert b.frames.shape == (21, 35, 3) and b.parts[0].name == "sheet"
    assert there[0].metrics["energy"] != there[2].metrics["energy"]


def thrown(v0: float, z0: float = 1.0):
    """One particle thrown up at v0 m/s from z0 m, in float64."""
    b = ModelBuilder(gravity=(0.0, 0.0, -9.81))
    b.add_particle((0.0, 0.0, z0), vel=(0.0, 0.0, v0), mass=0.5)
    return b.finalize(device="cpu", dtype=xsim.float64)


def test_builder_function_rollouts_match_running_them_here(local_ray):
    sim = {"dt": 0.01, "substeps": 2, "frames": 30}
    sets = [{"v0": 1.0}, {"v0": 2.0, "z0": 0.5}, {"v0": -1.0}]
    there = {r.index: r for r in map_rollouts(thrown, sets, sim=sim)}
    for i, p in enumerate(sets):
        assert there[i].params == p
        assert there[i].metrics == run_rollout(thrown, p, sim=sim).metrics
    np.testing.assert_allclose(there[1].metrics["com_z"], 0.5 + 2.0 * 0.3 - 9.81 * 0.3**2 / 2, atol=1e-12)


def test_bad_keys_and_settings_fail_before_any_task(monkeypatch):
    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was reached")

    monkeypatch.setattr("xsim.distributed.tasks.connect", no_ray)
    with pytest.raises(SceneError, match=r"cloth\[0\]\.mas: expected one of the keys .* \(did you mean 'mass'\?\)"):
        list(map_rollouts(SCENE, [{"cloth[0].mass": 0.01}, {"cloth[0].mas": 0.01}]))
    with pytest.raises(SceneError, match=r"sim\.substeps: expected an integer >= 1, found 0"):
        list(map_rollouts(thrown, [{"v0": 1.0}], sim={"substeps": 0}))


PROBE = '''
import xsim


@xsim.kernel
def triple(a: xsim.array(dtype=float)):
    i = xsim.tid()
    a[i] = 3.0 * a[i]
'''


def launch_probe(folder: str, cache: str, hold: float):
    """Launch the probe kernel with ``cache`` as the kernel cache; (pid, whether it had to compile, result)."""
    import importlib.util

    from xsim.device import get_device
    from xsim.kernels.module import pending_modules

    before = os.environ.get("XSIM_CACHE_DIR")
    os.environ["XSIM_CACHE_DIR"] = cache
    try:
        if "xsim_cache_probe" not in sys.modules:
            spec = importlib.util.spec_from_file_location("xsim_cache_probe", Path(folder) / "xsim_cache_probe.py")
            sys.modules["xsim_cache_probe"] = module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        module = sys.modules["xsim_cache_probe"]
        compiles = len(pending_modules("xsim_cache_probe", get_device("cpu"), False))
        a = xsim.array([1.0, 2.0], dtype=float)
        xsim.launch(module.triple, 2, inputs=[a])
        time.sleep(hold)
        return os.getpid(), compiles, a.numpy().tolist()
    finally:
        if before is None:
            del os.environ["XSIM_CACHE_DIR"]
        else:
            os.environ["XSIM_CACHE_DIR"] = before


def test_only_the_first_task_compiles_the_others_read_the_node_cache(local_ray, tmp_path):
    (tmp_path / "xsim_cache_probe.py").write_text(PROBE)
    cache = tmp_path / "cache"
    [(_, (_, compiled, values))] = map_tasks(launch_probe, [(str(tmp_path), str(cache), 0.0)])
    assert compiled == 1 and values == [3.0, 6.0]
    # three more, two at a time for a second each: both worker processes run one
    later = [r for _, r in map_tasks(launch_probe, [(str(tmp_path), str(cache), 1.0)] * 3)]
    assert len({pid for pid, _, _ in later}) == 2
    assert [(c, v) for _, c, v in later] == [(0, [3.0, 6.0])] * 3
    assert len(list(cache.glob("*xsim_cache_probe*.so"))) == 1
