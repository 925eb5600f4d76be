"""bfloat16 as Warp 1.19 has it: arrays hold the 16-bit patterns (``numpy()`` gives uint16), kernels
compute in float and round once, atomics add/min/max, gradients; references are float64 numpy."""

import math

import numpy as np
import pytest

import xsim
from xsim.kernels.generated import load_source
from xsim.kernels.module import build_ir

pytestmark = pytest.mark.cpu_only
BF = xsim.bfloat16
VEC3BF = xsim.types.vector(3, BF)
BF_EPS = 2.0 ** -8  # half a unit in the last place of bfloat16's 8-bit significand, relative


def nearest_bfloat16(x: float) -> float:
    """The bfloat16 nearest ``x`` (ties to the even significand), by exact arithmetic on the exponent."""
    if math.isnan(x) or math.isinf(x) or x == 0.0:
        return x
    _, e = math.frexp(x)  # |x| = m 2^e, 0.5 <= m < 1: bfloat16 keeps 8 significant bits, down to 2^-133 steps
    step = 2.0 ** max(e - 8, -133)
    return round(x / step) * step  # Python's round() takes ties to even


@xsim.kernel
def bf16_arithmetic(x: xsim.array(dtype=BF), s: BF, out: xsim.array(dtype=BF, ndim=2), wide: xsim.array(dtype=float)):
    i = xsim.tid()
    out[i, 0] = x[i] * s + BF(1.0)
    out[i, 1] = xsim.sin(x[i]) + xsim.sqrt(xsim.abs(x[i]))
    out[i, 2] = xsim.max(x[i], s) - xsim.clamp(x[i], BF(-0.5), BF(0.5))
    out[i, 3] = BF(xsim.float16(x[i]) * xsim.float16(2.0))
    wide[i] = float(x[i])


@xsim.kernel
def bf16_atomics(ones: xsim.array(dtype=BF), lo: xsim.array(dtype=BF), hi: xsim.array(dtype=BF),
            v: xsim.array(dtype=VEC3BF)):
    i = xsim.tid()
    xsim.atomic_add(ones, 0, BF(1.0))
    xsim.atomic_min(lo, 0, BF(float(i) - 10.0))
    xsim.atomic_max(hi, 0, BF(float(i) - 10.0))
    xsim.atomic_add(v, 0, VEC3BF(BF(1.0), BF(2.0), BF(0.5)))


@xsim.kernel
def bf16_loss(x: xsim.array(dtype=BF), loss: xsim.array(dtype=BF)):
    i = xsim.tid()
    xsim.atomic_add(loss, 0, xsim.sin(x[i]) * x[i])


def test_conversion_rounds_to_the_nearest_bfloat16_ties_to_even():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-30, 30, 200),
                        [1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, -2.5, 0.0, 1e-40]]).astype(np.float32)
    got = xsim.array(x, dtype=BF)
    want = np.array([nearest_bfloat16(float(v)) for v in x])
    np.testing.assert_array_equal(BF._load(got.numpy()), want)
    assert got.numpy().dtype == np.uint16  # the bit patterns, as Warp gives them without ml_dtypes
    assert float(BF(1.0 + 2.0 ** -8)) == 1.0 and float(BF(1.0 + 3 * 2.0 ** -8)) == 1.0 + 2.0 ** -6
    assert np.isnan(BF(float("nan"))) and BF(float("inf")) == np.inf


def test_arrays_take_floats_or_bit_patterns_and_read_back_numbers():
    a = xsim.array([1.5, -2.0, 3.140625], dtype=BF)
    np.testing.assert_array_equal(a.numpy(), [0x3FC0, 0xC000, 0x4049])
    assert a[2] == 3.140625  # one element reads as a number
    np.testing.assert_array_equal(xsim.array(np.array([0x3F80], np.uint16), dtype=BF).numpy(), [0x3F80])
    np.testing.assert_array_equal(xsim.ones(2, dtype=BF).numpy(), [0x3F80, 0x3F80])
    np.testing.assert_array_equal(xsim.full(2, -2.0, dtype=BF).numpy(), [0xC000, 0xC000])
    a[0] = 0.5
    a.fill_(2.0)
    np.testing.assert_array_equal(a.numpy(), [0x4000] * 3)
    assert xsim.dtype_from_numpy(np.uint16) is xsim.uint16  # uint16 data stay integers
    assert xsim.dtype_to_numpy(BF) == np.uint16 and xsim.types.type_repr(VEC3BF) == "vec3bf"


def test_kernel_arithmetic_matches_float64_within_bfloat16_precision():
    x = np.linspace(-2.0, 2.0, 9)
    xb = BF._load(BF._store(x.astype(np.float32))).astype(np.float64)
    out, wide = xsim.zeros((9, 4), dtype=BF), xsim.zeros(9, dtype=float)
    xsim.launch(bf16_arithmetic, 9, inputs=[xsim.array(x, dtype=BF), 0.75, out, wide])
    want = np.stack([xb * 0.75 + 1.0, np.sin(xb) + np.sqrt(np.abs(xb)), np.maximum(xb, 0.75) - np.clip(xb, -0.5, 0.5),
                     2.0 * xb], axis=1)
    np.testing.assert_allclose(BF._load(out.numpy()), want, rtol=3 * BF_EPS, atol=3 * BF_EPS)
    np.testing.assert_array_equal(wide.numpy(), xb.astype(np.float32))  # widening is exact


def test_atomics_on_bfloat16_add_exactly_and_keep_the_extremes():
    ones, lo, hi = xsim.zeros(1, dtype=BF), xsim.full(1, 100.0, dtype=BF), xsim.full(1, -100.0, dtype=BF)
    v = xsim.zeros(1, dtype=VEC3BF)
    xsim.launch(bf16_atomics, 64, inputs=[ones, lo, hi, v])  # sums up to 64 are exact in bfloat16, as in Warp's test
    assert BF._load(ones.numpy())[0] == 64.0
    assert BF._load(lo.numpy())[0] == -10.0 and BF._load(hi.numpy())[0] == 53.0
    np.testing.assert_array_equal(BF._load(v.numpy()[0]), [64.0, 128.0, 32.0])


def test_gradient_through_bfloat16_matches_float64_finite_differences():
    x = np.array([0.25, -0.75, 1.5, 2.0])
    xa = xsim.array(x, dtype=BF, requires_grad=True)
    loss = xsim.zeros(1, dtype=BF, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(bf16_loss, 4, inputs=[xa, loss])
    tape.backward(loss)
    xb = BF._load(xa.numpy()).astype(np.float64)
    h = 1e-6
    fd = (np.sin(xb + h) * (xb + h) - np.sin(xb - h) * (xb - h)) / (2 * h)
    np.testing.assert_allclose(BF._load(xa.grad.numpy()), fd, rtol=4 * BF_EPS, atol=4 * BF_EPS)


def test_atomics_bfloat16_has_none_of_are_refused_in_warps_words():
    src = ("import xsim\n\n@xsim.kernel\ndef bad(a: xsim.array(dtype=xsim.bfloat16)):\n"
           "    xsim.atomic_cas(a, 0, xsim.bfloat16(1.0), xsim.bfloat16(2.0))\n")
    with pytest.raises(xsim.CompileError, match=r"bf16_bad_[0-9a-f]+\.py:5:5:\n +xsim\.atomic_cas\(.*\)\n +\^\natomic_cas"
                                                r"\(\) operations only work on arrays with \[u\]int32, \[u\]int64, "
                                                r"float32, or float64 as the underlying scalar types, but got "
                                                r"bfloat16 \(with scalar type bfloat16\)$"):
        build_ir(load_source(src, "bf16_bad").bad)


def test_check_mode_scans_bfloat16_arrays_as_numbers():
    from xsim.kernels.finite import first_non_finite
    assert first_non_finite(xsim.array([1.0, 2.0], dtype=BF)) is None
    suffix, at, value = first_non_finite(xsim.array([1.0, 2.0, float("inf")], dtype=BF))
    assert (suffix, at, value) == ("", (2,), float("inf"))
