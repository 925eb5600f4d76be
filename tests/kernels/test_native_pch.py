"""The native headers precompiled once per kernel cache (GCC's ``xsim.h.gch``): GCC takes the file for the
flags every module compiles with (else it would parse the headers again, silently, and the saving would be
gone), a tampered file is rebuilt rather than handed to the compiler, and a module built with it runs."""

import subprocess

import numpy as np
import pytest

import xsim
from xsim.kernels import cache, cpu

pytestmark = [pytest.mark.cpu_only("the precompiled headers are the CPU backend's"),
              pytest.mark.skipif(not cpu._is_gcc(), reason="precompiled headers are used with GCC only")]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XSIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpu, "_PCH", {})
    return tmp_path / "cache"


@pytest.mark.parametrize("fuse_fp", [False, True])
def test_gcc_takes_the_precompiled_headers_for_a_modules_flags(fresh_cache, tmp_path, fuse_fp):
    pch = cpu.native_pch(fuse_fp)
    assert pch is not None and pch.parent == fresh_cache
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "part0.cpp").write_text('#include "xsim.h"\nint xs_probe() { return 0; }\n')
    (unit / "xsim.h.gch").symlink_to(pch)
    # -H lists each header read, "!" marking a precompiled one taken and "x" one refused
    proc = subprocess.run([cpu.compiler(), *cpu.flags(fuse_fp), "-H", "-c", f"-I{cpu.NATIVE}",
                           str(unit / "part0.cpp"), "-o", str(unit / "part0.o")],
                          capture_output=True, text=True, check=True)
    used = [line for line in proc.stderr.splitlines() if "xsim.h" in line]
    assert used and used[0].startswith("! "), proc.stderr[:2000]


def test_a_tampered_precompiled_header_is_rebuilt_not_used(fresh_cache, monkeypatch):
    pch = cpu.native_pch()
    whole = pch.read_bytes()
    pch.write_bytes(b"gpch" + b"\0" * 64)  # its digest no longer matches its metadata
    monkeypatch.setattr(cpu, "_PCH", {})
    again = cpu.native_pch()
    assert again == pch and len(again.read_bytes()) > len(whole) // 2  # built again, whole
    assert cache.lookup(pch.stem, ".gch") is not None  # and stored with its digest


def test_a_module_compiled_with_the_precompiled_headers_runs(fresh_cache):
    @xsim.kernel(module="xsim_tests_native_pch")
    def cube(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
        i = xsim.tid()
        y[i] = x[i] * x[i] * x[i]

    x = np.linspace(-2.0, 2.0, 11)
    y = xsim.zeros(len(x), dtype=float)
    xsim.launch(cube, len(x), inputs=[xsim.array(x, dtype=float)], outputs=[y])
    np.testing.assert_allclose(y.numpy(), x ** 3, rtol=1e-6)
    assert list(fresh_cache.glob("xsim_native_headers-*.gch"))
