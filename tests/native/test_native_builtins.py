"""The native builtins header: adjoints agree with finite differences, and it compiles for both targets.

The CPU check is a C++ program (builtins_fd.cpp) built with the system g++; the CUDA check compiles
the same header with NVRTC (no GPU needed).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
NATIVE = HERE.parents[1] / "xsim" / "kernels" / "native"


def test_every_adjoint_matches_finite_differences_in_double(tmp_path):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed")
    exe = tmp_path / "builtins_fd"
    flags = ["-std=c++20", "-O1", "-Wall", "-Wextra", f"-I{NATIVE}"]
    build = subprocess.run(
        [cxx, *flags, str(HERE / "builtins_fd.cpp"), "-o", str(exe)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    assert "warning" not in build.stderr, build.stderr
    run = subprocess.run([str(exe)], check=False, capture_output=True, text=True, timeout=120)
    print(run.stdout)
    failed = [line for line in run.stdout.splitlines() if line.startswith("FAIL")]
    assert run.returncode == 0 and not failed, "\n".join(failed) or run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "0 failure(s)"


# One kernel touching each family of builtins, instantiated for float and double.
NVRTC_KERNEL = r"""
#include "xsim.h"

template <typename T>
XS_FUNC void exercise(T* out) {
    using v3 = xs::vec_t<3, T>;
    using v4 = xs::vec_t<4, T>;
    using m33 = xs::mat_t<3, 3, T>;
    using m44 = xs::mat_t<4, 4, T>;
    using q = xs::quat_t<T>;
    using tf = xs::transform_t<T>;
    T x = out[0], y = out[1], adj_x = T(0), adj_y = T(0);
    T s = xs::add(xs::sin(x), xs::pow(x, y)) + xs::atan2(y, x) + xs::floordiv(x, y) + xs::mod(x, y);
    s += xs::clamp(xs::round(x), xs::min(x, y), xs::max(x, y)) + xs::sign(x) + xs::abs(y) + xs::cbrt(x);
    s += xs::isnan(x) ? T(1) : T(0);
    xs::adj_pow(x, y, xs::pow(x, y), adj_x, adj_y, T(1));
    xs::adj_asin(x, xs::asin(x), adj_x, T(1));
    v3 a = {{x, y, s}}, b = {{y, s, x}}, adj_a{}, adj_b{};
    v3 c = xs::normalize(xs::cross(a, b));
    xs::adj_normalize(a, xs::normalize(a), adj_a, b);
    m33 m = xs::add(xs::outer(a, b), xs::diag(c));
    m33 mi = xs::inverse(m), adj_m{};
    xs::adj_inverse(m, mi, adj_m, m);
    xs::adj_determinant(m, xs::determinant(m), adj_m, T(1));
    v4 w = xs::mat_vec(m44{}, v4{{x, y, s, x}});
    q r = xs::qnormalize(xs::quat_from_axis_angle(c, x)), adj_r{};
    xs::adj_quat_rotate(r, a, xs::quat_rotate(r, a), adj_r, adj_b, a);
    tf t = {a, r}, adj_t{};
    tf u = xs::transform_multiply(t, xs::transform_inverse(t));
    xs::adj_transform_point(t, b, xs::transform_point(t, b), adj_t, adj_a, c);
    m33 rm = xs::mat_mat(xs::quat_to_matrix(r), xs::transpose(mi));
    out[0] = xs::dot(adj_a, adj_b) + xs::trace(rm) + xs::ddot(adj_m, m) + xs::length(w) + u.p.c[0] + adj_t.q.c[3] +
             adj_x + adj_y + (xs::eq(a, b) ? T(1) : T(0));
}

extern "C" __global__ void exercise_f32(float* out) { exercise(out); }
extern "C" __global__ void exercise_f64(double* out) { exercise(out); }
extern "C" __global__ void exercise_f16(xs::half* out) {
    xs::half h = xs::exp(out[0]), adj_h(0.0f);
    xs::adj_sin(h, xs::sin(h), adj_h, h);
    xs::vec_t<3, xs::half> v = {{h, h, adj_h}};
    out[0] = xs::dot(xs::add(v, v), xs::mul(v, h));
}
"""


def test_header_compiles_with_nvrtc():
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc")
    err, prog = nvrtc.nvrtcCreateProgram(NVRTC_KERNEL.encode(), b"exercise.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    try:
        opts = [b"--gpu-architecture=sm_80", b"-std=c++17", f"-I{NATIVE}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _, log_size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * log_size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.decode(errors="replace").rstrip("\x00 ")
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, log_text
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS and size > 0
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
        assert cubin[:4] == b"\x7fELF"
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
