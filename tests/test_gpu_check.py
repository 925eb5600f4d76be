"""bench/gpu_check.sh's dry run: everything the GPU check does before its first GPU call (issue 38, item 6).

The syntax, the benchmarks' flags, the collection of the device's test selection and the report writer
need no network and run always; the wheel set's
checks need .whl/ (bench/gpu_prepare.sh, which downloads) and skip without it. No GPU is used: the
device-mode test below runs the ``env`` step alone, which must fail here and be recorded as failed.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
sys.path.insert(0, str(ROOT / "bench"))
import gpu_wheels

pytestmark = [pytest.mark.cpu_only,
              pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                 reason="needs bash and coreutils' timeout")]


def run_check(tmp_path, *args, env=None, cwd=ROOT):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this run's xdist worker
    environ.update({"OUT": str(tmp_path / "out"), "PY": sys.executable, **(env or {})})
    proc = subprocess.run(["bash", str(cwd / "bench" / "gpu_check.sh"), *args], cwd=cwd, env=environ, check=False,
                          capture_output=True, text=True, timeout=120)
    report = tmp_path / "out" / "gpu_report.md"
    return proc, report.read_text() if report.exists() else None


def rows(report):
    """The report's table: step -> status."""
    return {cells[1].strip(): cells[2].strip() for line in report.splitlines()
            if line.startswith("| ") and not line.startswith("| step") and (cells := line.split("|"))}


def copy_tree(tmp_path):
    """The scripts and benchmarks in a scratch checkout, to plant a fault in without touching the real one."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "bench", tree / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "xsim", tree / "xsim", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def test_scripts_parse():
    for script in ("gpu_check.sh", "gpu_prepare.sh"):
        subprocess.run(["bash", "-n", str(ROOT / "bench" / script)], check=True)


def test_dry_run_checks_flags_and_writes_the_report(tmp_path):
    proc, report = run_check(tmp_path, "--dry-run", env={"WHEEL_PY": sys.executable})
    assert report is not None, proc.stdout + proc.stderr
    table = rows(report)
    assert table["syntax"] == "ok"
    assert table["collect"] == "ok", report  # the device's test selection collects here and is not empty
    # each benchmark either accepts every flag the device run passes, or lacks only --device (not covered)
    for bench in ("cloth", "pyramid", "vec3", "saxpy"):
        assert table[bench] in ("dry: flags ok", "NOT COVERED"), (bench, table[bench])
    assert "wheels" in table  # ok, or SKIPPED without .whl/; a failure is the wheel test's to explain
    assert "dry run (no GPU call made)" in report
    for step in ("install", "env", "tests"):  # the GPU steps never run in a dry run
        assert step not in table
    assert not (tmp_path / "out" / ".rows").exists()


def test_dry_run_fails_on_a_flag_a_bench_lost(tmp_path):
    """A benchmark that no longer takes a flag the script passes (here --repeat) fails the dry run."""
    tree = copy_tree(tmp_path)
    saxpy = tree / "bench" / "saxpy.py"
    text = saxpy.read_text()
    assert 'ap.add_argument("--repeat"' in text
    saxpy.write_text(text.replace('ap.add_argument("--repeat"', 'ap.add_argument("--repeats"'))
    proc, report = run_check(tmp_path, "--dry-run", cwd=tree, env={"GPU_CHECK_COLLECT": "0"})
    assert proc.returncode == 1
    table = rows(report)
    assert table["saxpy"] == "FAIL (flags)"
    assert "no --repeat" in report
    assert table["vec3"] in ("dry: flags ok", "NOT COVERED")


def planted_checkout(tmp_path, tests_source):
    """A scratch checkout whose tests/ is ``tests_source``, and a failing nvidia-smi first on PATH."""
    tree = copy_tree(tmp_path)
    (tree / "tests").mkdir()
    (tree / "pytest.ini").write_text("[pytest]\nmarkers =\n    cuda: needs a CUDA GPU\n")
    (tree / "tests" / "test_planted.py").write_text(tests_source)
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho planted failure >&2\nexit 3\n")
    fake.chmod(0o755)
    return tree, {"GPU_CHECK_TEST_WORKERS": "0", "PATH": f"{fake.parent}:{os.environ['PATH']}"}


def test_device_mode_records_a_failed_step_and_goes_on(tmp_path):
    """In device mode a failed step is recorded, the next one still runs, the report is still written with
    each test's result counted and the failures named, and the exit status says so. Planted: an nvidia-smi
    that fails (env), and a scratch checkout whose tests/ holds one passing and one failing cuda test."""
    tree, env = planted_checkout(tmp_path, (
        "import pytest\n\n\n@pytest.mark.cuda\ndef test_passes():\n    pass\n\n\n"
        "@pytest.mark.cuda\ndef test_fails():\n    assert 1 == 2\n\n\ndef test_not_cuda():\n    pass\n"))
    proc, report = run_check(tmp_path, cwd=tree, env={**env, "GPU_CHECK_STEPS": "env,tests"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = rows(report)
    assert table["env"] == "FAIL (rc 3)"
    assert table["tests"] == "FAIL (rc 1)", table  # reached after the failure, and failed by the planted test
    assert "Tests (tests.log): 1 passed, 1 failed." in report
    assert "- FAILED tests/test_planted.py::test_fails" in report
    assert "planted failure" in (tmp_path / "out" / "env.log").read_text()
    assert "## env.log" in report and "## tests.log" in report


def test_a_hung_step_is_cut_off_and_its_results_so_far_kept(tmp_path):
    """The tests step under a 3 s limit, its second test hanging: TIMEOUT is recorded, the first test's result
    counts, the report says the run was cut off, and the script still ends and writes the report."""
    tree, env = planted_checkout(tmp_path, (
        "import time\nimport pytest\n\n\n@pytest.mark.cuda\ndef test_a_passes():\n    pass\n\n\n"
        "@pytest.mark.cuda\ndef test_b_hangs():\n    time.sleep(600)\n"))
    proc, report = run_check(tmp_path, cwd=tree, env={**env, "GPU_CHECK_STEPS": "tests", "GPU_CHECK_TESTS_TIMEOUT": "3"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert rows(report)["tests"] == "TIMEOUT (3 s)"
    assert "Tests (tests.log): 1 passed, 0 failed (no final summary: the run was cut off)." in report


def test_wheel_check_finds_a_missing_requirement(tmp_path):
    """bench/gpu_wheels.py on a planted wheel that needs a package neither carried nor in the image."""
    wheel = tmp_path / "whl" / "xsim-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("xsim-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: xsim\nVersion: 0.1.0\n"
                   "Requires-Dist: numpy>=1.24\nRequires-Dist: no-such-package-xyz\n"
                   "Requires-Dist: ray; extra == \"distributed\"\n")
    findings = gpu_wheels.check(wheel.parent, ROOT / "bench" / "gpu_device_packages.txt")
    fails = [f for f in findings if f.startswith("FAIL")]
    assert fails == ["FAIL xsim needs no-such-package-xyz: neither carried nor in the device image"]
    assert not any("ray" in f for f in findings)  # an extra's requirement is not asked for


def test_wheel_check_refuses_a_wheel_for_another_python(tmp_path):
    folder = tmp_path / "whl"
    folder.mkdir()
    for name in ("xsim-0.1.0-py3-none-any.whl", "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"):
        with zipfile.ZipFile(folder / name, "w") as z:
            dist = name.split("-")[0] + "-" + name.split("-")[1]
            z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {dist.split('-')[0]}\n")
    fails = [f for f in gpu_wheels.check(folder, ROOT / "bench" / "gpu_device_packages.txt") if f.startswith("FAIL")]
    assert fails == [("FAIL numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl does not install on CPython 3.12 "
                      "manylinux x86_64")]


def python312():
    for candidate in ("python3.12", *sorted(map(str, Path("/root/.pyenv/versions").glob("3.12*/bin/python3.12")))):
        try:
            if subprocess.run([candidate, "-c", "import pip"], check=False, capture_output=True, timeout=30).returncode == 0:
                return candidate
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


@pytest.mark.skipif(not any((ROOT / ".whl").glob("*.whl")),
                    reason=".whl/ not prepared: run `bash bench/gpu_prepare.sh` (downloads the device's wheels)")
def test_prepared_wheels_install_on_python_312(tmp_path):
    """The prepared .whl/ passes bench/gpu_wheels.py and pip's own tag and version checks for CPython 3.12."""
    py = python312() or pytest.skip("no Python 3.12 with pip here for pip's resolver")
    proc, report = run_check(tmp_path, "--dry-run", env={"WHEEL_PY": py, "GPU_CHECK_COLLECT": "0"})
    table = rows(report)
    assert table["wheels"] == "ok", report
    assert table["pip-resolve"] == "ok", report
    assert proc.returncode == 0, report
