"""A product and a sum in a kernel are two roundings, as written: the C++ compiler must not fuse them into
one FMA (``cpu.FLAGS``: -ffp-contract=off). With fusing left to g++'s optimizer, whether a product met its
sum as one instruction hung on how the generated C++ was arranged, and a refactor that only passed four
arrays as one struct argument moved the float32 box pyramid's bodies (issue 20). So the same arithmetic
read from plain arrays and from a struct's fields gives the same bits, and those of numpy's rounding of
each operation.

The inputs make the two roundings show: ``c`` is minus the rounded product ``a * b``, so the unfused sum
is exactly 0 while an FMA leaves the product's rounding error, which is nonzero for almost every pair."""

import functools
from fractions import Fraction

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only("the flags are the CPU backend's (NVRTC's --fmad is its own)")


@functools.cache
def mul_add_kernels(dtype):
    """``a * b + c`` of ``dtype`` arrays, from plain array arguments and from a struct's array fields."""
    arr = xsim.array(dtype=dtype)

    @xsim.struct
    class Operands:
        a: arr
        b: arr
        c: arr

    @xsim.kernel
    def mul_add_arrays(a: arr, b: arr, c: arr, out: arr):
        i = xsim.tid()
        out[i] = a[i] * b[i] + c[i]

    @xsim.kernel
    def mul_add_struct(ops: Operands, out: arr):
        i = xsim.tid()
        out[i] = ops.a[i] * ops.b[i] + ops.c[i]

    return Operands, mul_add_arrays, mul_add_struct


@xsim.kernel
def cross_z(u: xsim.array(dtype=xsim.vec3f), v: xsim.array(dtype=xsim.vec3f), out: xsim.array(dtype=xsim.float32)):
    """The z component of a cross product written out: x*y' - y*x', a product less a product."""
    i = xsim.tid()
    out[i] = u[i][0] * v[i][1] - u[i][1] * v[i][0]


def operands(dtype, n=256, seed=7):
    """``a``, ``b`` in [1, 2) and ``c = -(a * b)`` rounded to ``dtype``."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(1.0, 2.0, n).astype(dtype)
    b = rng.uniform(1.0, 2.0, n).astype(dtype)
    return a, b, -(a * b)


def fused(a, b, c):
    """a * b + c with one rounding (exact rationals, rounded once by float(); ``c`` cancels the product, so
    what is left is exactly representable in either dtype)."""
    return np.array([float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a, b, c)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_product_and_sum_round_separately_from_arrays_and_struct_fields(dtype):
    a, b, c = operands(dtype)
    unfused = a * b + c  # numpy rounds each operation: exactly 0 here
    assert np.all(unfused == 0.0)
    assert np.count_nonzero(fused(a, b, c)) > 0.9 * len(a)  # the inputs tell an FMA from two roundings
    scalar = xsim.float64 if dtype == np.float64 else xsim.float32
    operands_type, mul_add_arrays, mul_add_struct = mul_add_kernels(scalar)
    ops = operands_type(a=xsim.array(a), b=xsim.array(b), c=xsim.array(c))
    outs = {}
    for name, kernel, args in [("arrays", mul_add_arrays, [ops.a, ops.b, ops.c]), ("struct", mul_add_struct, [ops])]:
        out = xsim.zeros(len(a), dtype=scalar)
        xsim.launch(kernel, len(a), inputs=args, outputs=[out])
        outs[name] = out.numpy()
    np.testing.assert_array_equal(outs["arrays"], unfused)
    np.testing.assert_array_equal(outs["struct"], unfused)


def test_difference_of_products_rounds_each_product():
    """u = (a, 1, 0), v = (a * b rounded, b, 0): u.x * v.y - u.y * v.x is a*b less its rounding, exactly 0
    with both products rounded, the product's rounding error where one product was fused into the sum."""
    a, b, c = operands(np.float32)
    zero = np.zeros_like(a)
    u = np.stack([a, np.ones_like(a), zero], 1)
    v = np.stack([-c, b, zero], 1)
    out = xsim.zeros(len(a), dtype=xsim.float32)
    xsim.launch(cross_z, len(a), inputs=[xsim.array(u, dtype=xsim.vec3f), xsim.array(v, dtype=xsim.vec3f)],
                outputs=[out])
    assert np.count_nonzero(fused(a, b, c)) > 0.9 * len(a)
    np.testing.assert_array_equal(out.numpy(), zero)


def _host_has_fma() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " fma " in f" {line.split(':', 1)[1].strip()} " for line in f)
    except OSError:
        return False


@xsim.kernel(module="unique", module_options={"fuse_fp": True})
def mul_add_fused(a: xsim.array(dtype=xsim.float32), b: xsim.array(dtype=xsim.float32),
                  c: xsim.array(dtype=xsim.float32), out: xsim.array(dtype=xsim.float32)):
    i = xsim.tid()
    out[i] = a[i] * b[i] + c[i]


@pytest.mark.skipif(not _host_has_fma(), reason="the host CPU has no FMA instruction for g++ to fuse into")
def test_the_fuse_fp_module_option_lets_the_compiler_fuse_as_warps_does():
    """Warp's module option: ``fuse_fp=True`` builds the module with -ffp-contract=fast, and g++ fuses the
    product into the sum (one rounding); xsim's default stays two roundings (the tests above)."""
    a, b, c = operands(np.float32)
    out = xsim.zeros(len(a), dtype=xsim.float32)
    xsim.launch(mul_add_fused, len(a), inputs=[xsim.array(a), xsim.array(b), xsim.array(c)], outputs=[out])
    np.testing.assert_array_equal(out.numpy(), fused(a, b, c).astype(np.float32))


def test_fuse_fp_is_a_module_option_with_its_own_cache_key_and_nvrtc_flag():
    from xsim.kernels import cpu, cuda
    assert xsim.get_module_options()["fuse_fp"] is False
    assert "-ffp-contract=off" in cpu.flags() and "-ffp-contract=fast" in cpu.flags(fuse_fp=True)
    assert cpu.target_id(False) != cpu.target_id(False, fuse_fp=True)
    assert "--fmad=false" in cuda.options(80) and "--fmad=true" in cuda.options(80, fuse_fp=True)
    assert mul_add_fused.module.fuse_fp() is True
    with pytest.raises(ValueError, match="set_module_options: fuse_fp must be a bool, got 'yes'"):
        xsim.set_module_options({"fuse_fp": "yes"})
