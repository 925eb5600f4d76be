"""``map_tasks`` on a local Ray of 2 CPUs: every result comes back with its index, a worker killed
mid-task has its task run again while the finished results stand, a task's own error is raised as
itself, each task runs one xsim thread per CPU it holds, and Ray stays out of ``import xsim``."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xsim.distributed import map_tasks, require_ray


def square_when(x: float, mark: str, wait_for: list[str]) -> float:
    """x^2, once every file of ``wait_for`` exists (a minute at most); then makes ``mark``."""
    deadline = time.monotonic() + 60.0
    while not all(os.path.exists(f) for f in wait_for) and time.monotonic() < deadline:
        time.sleep(0.05)
    Path(mark).write_text("done")
    return x * x


def test_every_result_comes_back_with_its_index_as_it_finishes(local_ray, tmp_path):
    marks = [str(tmp_path / f"done{i}") for i in range(4)]
    # the first task waits for the three others: with 2 CPUs they run beside it, one after another;
    # the last one makes its mark just before it returns, so the first and the last may finish in
    # either order
    args = [(3.0, marks[0], marks[1:]), (4.0, marks[1], []), (5.0, marks[2], []), (6.0, marks[3], [])]
    results = list(map_tasks(square_when, args))
    assert sorted(results) == [(0, 9.0), (1, 16.0), (2, 25.0), (3, 36.0)]
    assert results[:2] == [(1, 16.0), (2, 25.0)]


def die_once(marker: str, value: int) -> tuple[int, int]:
    """Kill this worker process the first time (no marker yet), return (value, attempts) after."""
    path = Path(marker)
    attempts = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(attempts))
    if attempts == 1:
        os._exit(1)  # what a crash, an OOM kill or a lost node looks like to Ray
    return value, attempts


def test_a_killed_worker_has_its_task_retried_and_no_result_is_lost(local_ray, tmp_path):
    marker = tmp_path / "attempts"
    args = [(str(tmp_path / f"ok{i}"), i) for i in range(3)] + [(str(marker), 99)]
    for i in range(3):  # these succeed at once
        (tmp_path / f"ok{i}").write_text("1")
    results = dict(map_tasks(die_once, args))
    assert results == {0: (0, 2), 1: (1, 2), 2: (2, 2), 3: (99, 2)}
    assert marker.read_text() == "2"


def test_without_retries_a_killed_worker_is_an_error(local_ray, tmp_path):
    with pytest.raises(local_ray.exceptions.WorkerCrashedError):
        list(map_tasks(die_once, [(str(tmp_path / "attempts"), 1)], max_retries=0))


def refuse(x):
    raise ValueError(f"no good: {x}")


def test_a_task_error_is_raised_as_itself_and_not_retried(local_ray):
    with pytest.raises(ValueError, match="no good: 7") as e:
        list(map_tasks(refuse, [(7,)]))
    assert not isinstance(e.value, local_ray.exceptions.RayTaskError)


def xsim_threads() -> str:
    from xsim.kernels.threads import max_threads

    return f"{os.environ['XSIM_NUM_THREADS']} {max_threads()}"


def test_each_task_runs_one_xsim_thread_per_cpu_it_holds(local_ray):
    assert [r for _, r in map_tasks(xsim_threads, [(), ()])] == ["1 1", "1 1"]


def test_import_xsim_does_not_import_ray():
    code = "import sys, xsim, xsim.distributed, xsim.cli; xsim.cli.parser(); print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == "False", out.stderr


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'xsim\[distributed\]'"):
        require_ray()
