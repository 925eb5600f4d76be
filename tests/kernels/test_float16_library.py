"""The math and rotation library in float16 (computed in float, stored in half):
values within half precision of float64 numpy/scipy references."""

import numpy as np
import pytest
from scipy import special

import xsim

pytestmark = pytest.mark.cpu_only
H = xsim.float16
N = 8
RNG = np.random.default_rng(9)


@xsim.kernel
def scalars(x: xsim.array(dtype=H), out: xsim.array(dtype=H, ndim=2)):
    i = xsim.tid()
    out[i, 0] = xsim.lerp(x[i], H(2.0), H(0.25))
    out[i, 1] = xsim.smoothstep(H(-0.5), H(0.5), x[i])
    out[i, 2] = xsim.step(x[i]) + xsim.nonzero(x[i])
    out[i, 3] = xsim.rint(x[i] * H(3.0)) + xsim.frac(x[i] * H(3.0))
    out[i, 4] = xsim.erf(x[i]) + xsim.erfc(x[i])
    out[i, 5] = xsim.erfinv(x[i] * H(0.9))
    out[i, 6] = H(float(xsim.isinf(x[i] / H(0.0))))


@xsim.kernel
def composites(v: xsim.array(dtype=xsim.vec3h), out: xsim.array(dtype=H, ndim=2), rot: xsim.array(dtype=xsim.vec3h)):
    i = xsim.tid()
    out[i, 0] = xsim.norm_l1(v[i])
    out[i, 1] = xsim.norm_huber(v[i])
    out[i, 2] = xsim.min(v[i]) + H(float(xsim.argmax(v[i])))
    rot[i] = xsim.quat_to_rpy(xsim.quat_rpy(v[i][0], v[i][1], v[i][2]))


def test_scalar_library_in_float16():
    x = np.linspace(-0.9, 0.9, N).astype(np.float16)
    out = xsim.zeros((N, 7), dtype=H)
    xsim.launch(scalars, N, inputs=[xsim.array(x, dtype=H), out])
    xd = x.astype(np.float64)
    u = np.clip(xd + 0.5, 0, 1)
    x3 = (x * np.float16(3.0)).astype(np.float64)
    want = np.stack([xd * 0.75 + 0.5, u * u * (3 - 2 * u), (xd < 0).astype(float) + (xd != 0), np.rint(x3) + np.modf(x3)[0],
                     np.ones(N), special.erfinv((x * np.float16(0.9)).astype(np.float64)), np.ones(N)], axis=1)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_vector_and_rotation_library_in_float16():
    v = RNG.uniform(-1.0, 1.0, (N, 3)).astype(np.float16)
    out, rot = xsim.zeros((N, 3), dtype=H), xsim.zeros(N, dtype=xsim.vec3h)
    xsim.launch(composites, N, inputs=[xsim.array(v, dtype=xsim.vec3h), out, rot])
    vd = v.astype(np.float64)
    n2 = np.linalg.norm(vd, axis=1)
    want = np.stack([np.abs(vd).sum(1), np.where(n2 <= 1, 0.5 * n2 ** 2, n2 - 0.5), vd.min(1) + vd.argmax(1)], 1)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=3e-3, atol=3e-3)
    np.testing.assert_allclose(rot.numpy().astype(np.float64), vd, atol=1e-2)
