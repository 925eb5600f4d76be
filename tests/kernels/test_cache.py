"""The on-disk kernel cache, seen from fresh processes: a cached module loads without calling the
C++ compiler, editing a func a kernel calls rebuilds, a truncated entry is rebuilt, concurrent
builds of one module compile it once, and the cache folder is private (0700).

Each run is a subprocess with ``XSIM_CACHE_DIR`` set to a temporary folder and ``CXX`` set to a
wrapper script that logs every compiler call before running the real compiler.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from xsim.kernels import cache

# the child processes build and run on the CPU: the parent's default device does not reach them
pytestmark = pytest.mark.cpu_only("subprocesses with a logging CXX build for the CPU")

KERNEL_FILE = """
import xsim
from cache_helper import scale


@xsim.kernel
def fill(x: xsim.array(dtype=float)):
    i = xsim.tid()
    x[i] = scale(float(i))
"""

HELPER_FILE = """
import xsim


@xsim.func
def scale(s: float):
    return s * {factor}
"""

RUNNER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import xsim
import cache_kernels
x = xsim.zeros(4, dtype=float)
xsim.launch(cache_kernels.fill, 4, outputs=[x])
print(json.dumps(x.numpy().tolist()))
"""


@pytest.fixture
def project(tmp_path):
    """A folder with a kernel module, the func module it imports, a logging CXX wrapper and a cache dir."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "cache_kernels.py").write_text(KERNEL_FILE)
    (src / "cache_helper.py").write_text(HELPER_FILE.format(factor="2.0"))
    (src / "runner.py").write_text(RUNNER)
    log = tmp_path / "cxx.log"
    cxx = tmp_path / "logging-cxx"
    real = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++") or shutil.which("clang++")
    cxx.write_text(f'#!/bin/sh\necho "$$ $*" >> "{log}"\nexec "{real}" "$@"\n')
    cxx.chmod(0o755)
    return tmp_path


def run(project: Path, cache_dir: Path | None = None, background: bool = False):
    env = dict(os.environ, XSIM_CACHE_DIR=str(cache_dir or project / "cache"), CXX=str(project / "logging-cxx"),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, str(project / "src" / "runner.py"), str(project / "src")]
    if background:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compiler_calls(project: Path, of: str = ".cpp") -> int:
    """How many compiler runs the log holds of the module's source (``of`` ".cpp"), or of the precompiled
    native headers ("c++-header")."""
    log = project / "cxx.log"
    return sum(of in line for line in log.read_text().splitlines()) if log.exists() else 0


def test_a_second_process_loads_the_module_without_compiling_from_a_private_folder(project):
    cache_dir = project / "made" / "by" / "xsim"  # created by the first run
    assert run(project, cache_dir) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 1
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert run(project, cache_dir) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 1


def test_editing_a_func_in_another_file_that_the_kernel_calls_recompiles(project):
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    (project / "src" / "cache_helper.py").write_text(HELPER_FILE.format(factor="3.0"))
    assert run(project) == [0.0, 3.0, 6.0, 9.0]
    assert compiler_calls(project) == 2
    (project / "src" / "cache_helper.py").write_text(HELPER_FILE.format(factor="2.0"))
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 2  # the first build is still in the cache


def test_a_truncated_binary_is_rebuilt_not_loaded(project):
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    (binary,) = (project / "cache").glob("cache_kernels-*.so")
    data = binary.read_bytes()
    binary.write_bytes(data[: len(data) // 2])
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 2
    assert binary.stat().st_size > len(data) // 2  # replaced by a whole binary


def test_corrupt_metadata_is_rebuilt_not_crashed_on(project):
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    (meta,) = (project / "cache").glob("cache_kernels-*.json")
    meta.write_text("{ not json")
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 2
    # rebuilt: the metadata describes the module's one kernel again (keyed by its content-named symbol)
    assert [k["name"] for k in json.loads(meta.read_text())["kernels"].values()] == ["fill"]


def test_two_processes_building_the_same_module_at_once_compile_it_once(project):
    """The second process waits on the entry's build lock (``cache.build_lock``) and loads the first one's
    build: the compiler is made to take two seconds, so both miss the cache at once, and without the lock
    each would compile (two calls in the log)."""
    cxx = project / "logging-cxx"
    cxx.write_text(cxx.read_text().replace("\nexec ", "\nsleep 2\nexec ", 1))
    procs = [run(project, background=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 1
    assert compiler_calls(project, "c++-header") == 1  # the precompiled headers too: one build, under its lock
    leftovers = [p.name for p in (project / "cache").iterdir() if p.suffix not in (".so", ".gch", ".json", ".lock")]
    assert leftovers == []  # no temporary files or build folders left behind
    assert run(project) == [0.0, 2.0, 4.0, 6.0]
    assert compiler_calls(project) == 1


def test_cache_dir_honours_xsim_cache_dir_and_is_0700(tmp_path, monkeypatch):
    target = tmp_path / "c"
    monkeypatch.setenv("XSIM_CACHE_DIR", str(target))
    old = os.umask(0)  # even a permissive umask gives 0700
    try:
        assert cache.cache_dir() == target
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_default_cache_dir_is_per_user_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("XSIM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "xsim"
    assert stat.S_IMODE((tmp_path / "xsim").stat().st_mode) == 0o700



@pytest.mark.cpu_only
def test_clear_kernel_cache_deletes_entries_and_the_next_launch_compiles_again(tmp_path, monkeypatch):
    import numpy as np

    import xsim
    monkeypatch.setenv("XSIM_CACHE_DIR", str(tmp_path / "cache"))

    @xsim.kernel(module=f"xsim_tests_clear_cache_{os.getpid()}")
    def triple(x: xsim.array(dtype=float)):
        i = xsim.tid()
        x[i] = x[i] * 3.0

    def entries():
        return sorted(p.name for p in (tmp_path / "cache").iterdir() if p.suffix in (".so", ".json", ".gch"))

    x = xsim.array(np.arange(4, dtype=np.float32))
    xsim.launch(triple, 4, inputs=[x])
    first = entries()
    own = [n for n in first if n.startswith("xsim_tests_clear_cache")]
    assert len(own) == 2 and {Path(n).suffix for n in own} == {".so", ".json"}
    in_progress = tmp_path / "cache" / "build-in-progress"
    in_progress.mkdir()
    removed = xsim.clear_kernel_cache()
    assert sorted(p.name for p in removed) == first
    assert entries() == [] and in_progress.is_dir()
    assert triple.module.builds == {}
    xsim.launch(triple, 4, inputs=[x])  # compiles again, into the cache
    assert entries() == first
    np.testing.assert_array_equal(x.numpy(), np.arange(4) * 9.0)
