"""Warp's own unit tests for the kernel language, run on xsim with only the import changed.

Copies the chosen test files of the installed warp-lang (``warp/tests``) to a temporary folder,
points ``import warp as wp`` (and a bare ``import warp``) at xsim, replaces Warp's
``warp.tests.unittest_utils`` with a small shim written here (CPU devices only), runs each file
with pytest in its own process and prints a table of pass counts. ``--engine warp`` runs the
unchanged files on Warp itself (CPU only), for the denominators. Not part of the test suite.

    .venv/bin/python bench/warp_tests.py [--set language|library] [--engine xsim|warp] [--timeout 900] [file ...]

``--set language`` (the default) is issue 14's kernel-language list, ``--set library`` issue 15's builtin
library and host API list; files named on the command line replace the set.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LANGUAGE = ["test_codegen", "test_func", "test_generics", "test_struct", "test_static", "test_lvalue", "test_grad",
         "test_grad_customs", "test_tape", "test_overwrite", "test_conditional", "test_unpack",
         "test_vec_constructors", "test_composite_component_adjoint"]

# a name with a folder (matrix/test_mat) is staged flat; its folder's utils.py goes beside it as
# matrix_utils.py
LIBRARY = ["test_math", "test_quat", "test_spatial", "test_vec", "matrix/test_mat", "test_scalar_ops",
           "test_vec_scalar_ops", "test_atomic", "test_atomic_bitwise", "test_array", "test_copy", "test_lerp",
           "test_smoothstep", "test_rounding", "test_operators", "test_arithmetic", "test_bool",
           "test_vec_assign_copy", "matrix/test_mat_assign_copy", "test_quat_assign_copy",
           "test_spatial_assign_copy"]

SETS = {"language": LANGUAGE, "library": LIBRARY}

# the helpers Warp's tests take from warp.tests.unittest_utils, written for xsim (CPU only); the
# star import also hands the tests the modules they use without importing them (os, np, wp...)
SHIM = '''
import contextlib, io, os, sys, unittest
import numpy as np
import {engine} as wp

USD_AVAILABLE = False


def get_cpu_test_devices():
    return [wp.get_device("cpu")]


def get_test_devices(mode=None):
    return get_cpu_test_devices()


def get_cuda_test_devices(mode=None):
    return []


get_selected_cuda_test_devices = get_cuda_test_devices


def sanitize_identifier(s):
    s = str(s)
    return s if s.isidentifier() else __import__("re").sub(r"\\W|^(?=\\d)", "_", s)


def assert_np_equal(result, expect, tol=0.0):
    if tol != 0.0:
        np.testing.assert_allclose(np.asarray(result).flatten(), np.asarray(expect).flatten(), atol=tol,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(result, expect)


def assert_array_equal(result, expect):
    np.testing.assert_equal(result.numpy(), expect.numpy())


def make_isolated_kernel(func, **kwargs):
    key = f"{{func.__module__}}.{{func.__qualname__}}:{{func.__code__.co_firstlineno}}"
    return wp.Kernel(func=func, module=wp.get_module(key), **kwargs)


class CheckOutput:
    """Warp's fails a test that prints; here a no-op."""

    def __init__(self, test=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Capture:
    def __init__(self, name):
        self.name, self.buf, self.saved = name, None, None

    def begin(self):
        self.saved, self.buf = getattr(sys, self.name), io.StringIO()
        setattr(sys, self.name, self.buf)

    def end(self):
        setattr(sys, self.name, self.saved)
        return self.buf.getvalue()


class StdOutCapture(_Capture):
    def __init__(self):
        super().__init__("stdout")


class StdErrCapture(_Capture):
    def __init__(self):
        super().__init__("stderr")


def _device_test(func, device, **kwargs):
    def test(self):
        func(self, device, **kwargs)
    test.__name__ = func.__name__
    return test


def add_function_test(cls, name, func, devices=None, check_output=True, device_check=None, **kwargs):
    if devices is None:
        setattr(cls, name, _device_test(func, None, **kwargs))
        return
    for d in devices if isinstance(devices, list) else [devices]:
        setattr(cls, name + "_" + sanitize_identifier(d), _device_test(func, d, **kwargs))


def add_function_test_register_kernel(cls, name, func, devices=None, **kwargs):
    func(None, None, **kwargs, register_kernels=True)
    add_function_test(cls, name, func, devices=devices, **kwargs)


def add_kernel_test(cls, kernel, dim, name=None, expect=None, inputs=None, devices=None, inputs_factory=None):
    def test(self, device):
        args = list((inputs_factory(device) if inputs_factory is not None else inputs) or [])
        if expect:
            result = wp.array(expect, dtype=int, device=device)
            output = wp.zeros_like(result)
            args.append(output)
        wp.launch(kernel, dim=dim, inputs=args, device=device)
        if expect:
            assert_array_equal(output, result)
    for d in devices if devices is not None else get_test_devices():
        setattr(cls, (name or kernel.key) + "_" + sanitize_identifier(d), lambda self, d=d: test(self, d))
'''


def warp_tests_dir() -> Path:
    import importlib.util
    spec = importlib.util.find_spec("warp")
    if spec is None or spec.origin is None:
        sys.exit("warp-lang is not installed (pip install -e '.[bench]')")
    return Path(spec.origin).parent / "tests"


def port(text: str, engine: str) -> str:
    """A Warp test file's text with its imports pointed at ``engine`` and the shim."""
    if engine == "xsim":
        text = re.sub(r"^import warp as wp\b", "import xsim as wp", text, flags=re.MULTILINE)
        text = re.sub(r"^import warp$", "import xsim as warp", text, flags=re.MULTILINE)
    text = text.replace("from warp.tests.unittest_utils import", "from unittest_utils import")
    text = re.sub(r"^from warp\.tests\.(aux_\w+) import", r"from \1 import", text, flags=re.MULTILINE)
    text = re.sub(r"^from warp\.tests\.(\w+)\.utils import", r"from \1_utils import", text, flags=re.MULTILINE)
    text = re.sub(r"^from warp\.tests import (aux_\w+) as", r"import \1 as", text, flags=re.MULTILINE)
    # the aux modules are staged beside the test: importlib.import_module("warp.tests.aux_x") and the module
    # name as a key (user_modules, sys.modules) become "aux_x"
    return re.sub(r"([\"'])warp\.tests\.(aux_\w+)\1", r"\1\2\1", text)


def stage(names: list[str], engine: str, out: Path) -> None:
    src = warp_tests_dir()
    for f in [*(src / f"{n}.py" for n in names), *src.glob("aux_*.py")]:
        (out / f.name).write_text(port(f.read_text(), engine))
    for folder in {Path(n).parent for n in names} - {Path(".")}:
        if (src / folder / "utils.py").exists():
            (out / f"{folder.name}_utils.py").write_text(port((src / folder / "utils.py").read_text(), engine))
    (out / "unittest_utils.py").write_text(SHIM.format(engine=engine))


def run_file(name: str, folder: Path, timeout: float, cwd: Path) -> dict:
    """Run one file with pytest; the counts from its summary line (a crash or timeout counts as such)."""
    name = Path(name).name
    # Warp runs these files with unittest: its module-level test_*(test, device) functions are not tests
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o", "addopts=", "-o",
           "python_functions=__none__", "--rootdir",
           str(folder), str(folder / f"{name}.py")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(cwd)]))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        text, status = proc.stdout + proc.stderr, ""
    except subprocess.TimeoutExpired as e:
        text, status = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (
            e.stdout or ""), "timeout"
    counts = {k: 0 for k in ("passed", "failed", "error", "skipped")}
    tail = text.strip().splitlines()[-1] if text.strip() else ""
    for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped)", tail):
        counts["error" if what.startswith("error") else what] += int(n)
    # pytest counts each failed subtest as a failure and the test holding it as passed: count test functions,
    # one failing whenever it or any of its subtests failed
    outcomes = {}
    for what, test_id in re.findall(r"^(PASSED|FAILED|ERROR|SUBFAILED)\S* (\S+\.py::\S+)", text, flags=re.MULTILINE):
        if what != "PASSED" or test_id not in outcomes:
            outcomes[test_id] = "error" if what == "ERROR" else "passed" if what == "PASSED" else "failed"
    if outcomes:
        for k in ("passed", "failed", "error"):
            counts[k] = sum(v == k for v in outcomes.values())
    if not status and not any(counts.values()):
        status = "crashed"
    return {"name": name, **counts, "status": status, "seconds": time.perf_counter() - t0, "log": text}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--set", choices=sorted(SETS), default="language", help="which list of Warp test files")
    ap.add_argument("--engine", choices=("xsim", "warp"), default="xsim")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per file")
    ap.add_argument("--logs", type=Path, help="keep each file's pytest output in this folder")
    args = ap.parse_args()
    args.files = args.files or SETS[args.set]
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="warp_tests_") as tmp:
        folder = Path(tmp)
        stage(args.files, args.engine, folder)
        rows = []
        for name in args.files:
            r = run_file(name, folder, args.timeout, repo)
            rows.append(r)
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                (args.logs / f"{r['name']}.{args.engine}.log").write_text(r["log"])
            print(f"{r['name']}: {r['passed']} passed, {r['failed']} failed, {r['error']} errors {r['status']}",
                  file=sys.stderr, flush=True)
    print(f"\n| file ({args.engine}) | passed | failed | errors | skipped | note | s |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for r in rows:
        print(f"| {r['name']} | {r['passed']} | {r['failed']} | {r['error']} | {r['skipped']} | {r['status']} | "
              f"{r['seconds']:.0f} |")
    tot = {k: sum(r[k] for r in rows) for k in ("passed", "failed", "error", "skipped")}
    print(f"| **total** | {tot['passed']} | {tot['failed']} | {tot['error']} | {tot['skipped']} | | |")


if __name__ == "__main__":
    main()
