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
