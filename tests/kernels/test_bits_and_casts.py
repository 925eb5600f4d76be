"""Bitwise operators on every integer type and ``cast`` (Warp's bit reinterpretation) against numpy's
own integer arithmetic and ``ndarray.view``."""

from typing import Any

import numpy as np
import pytest

import xsim

pytestmark = pytest.mark.cpu_only
INT_TYPES = [xsim.int8, xsim.int16, xsim.int32, xsim.int64, xsim.uint8, xsim.uint16, xsim.uint32, xsim.uint64]


@xsim.kernel
def bit_ops(a: xsim.array(dtype=Any), b: xsim.array(dtype=Any), s: xsim.array(dtype=Any),
            out: xsim.array(dtype=Any, ndim=2)):
    i = xsim.tid()
    out[i, 0] = a[i] & b[i]
    out[i, 1] = a[i] | b[i]
    out[i, 2] = a[i] ^ b[i]
    out[i, 3] = ~a[i]
    out[i, 4] = a[i] << s[i]
    out[i, 5] = a[i] >> s[i]
    c = a[i]
    c &= b[i]
    c |= s[i]
    c ^= a[i]
    out[i, 6] = c


@pytest.mark.parametrize("t", INT_TYPES, ids=lambda t: t.__name__)
def test_bitwise_operators_match_numpy_on_every_integer_type(t):
    dt = t._np
    info = np.iinfo(dt)
    rng = np.random.default_rng(dt.itemsize)
    a = rng.integers(info.min, info.max, 32, endpoint=True, dtype=dt)
    b = rng.integers(info.min, info.max, 32, endpoint=True, dtype=dt)
    s = rng.integers(0, dt.itemsize * 8, 32, dtype=dt)
    out = xsim.zeros((32, 7), dtype=t)
    xsim.launch(bit_ops, 32, inputs=[xsim.array(a, dtype=t), xsim.array(b, dtype=t), xsim.array(s, dtype=t), out])
    c = ((a & b) | s) ^ a
    want = np.stack([a & b, a | b, a ^ b, ~a, np.left_shift(a, s), np.right_shift(a, s), c], axis=1)
    np.testing.assert_array_equal(out.numpy(), want)


@xsim.kernel
def casts(f: xsim.array(dtype=float), i: xsim.array(dtype=xsim.int32), d: xsim.array(dtype=xsim.float64),
          h: xsim.array(dtype=xsim.float16), v: xsim.array(dtype=xsim.vec2), m: xsim.array(dtype=xsim.mat22),
          out_i: xsim.array(dtype=xsim.int32), out_f: xsim.array(dtype=float), out_l: xsim.array(dtype=xsim.uint64),
          out_s: xsim.array(dtype=xsim.int16), out_d: xsim.array(dtype=xsim.float64),
          out_v: xsim.array(dtype=xsim.vec4)):
    k = xsim.tid()
    out_i[k] = xsim.cast(f[k], xsim.int32)
    out_f[k] = xsim.cast(i[k], float)
    out_l[k] = xsim.cast(d[k], xsim.uint64)
    out_s[k] = xsim.cast(h[k], xsim.int16)
    out_d[k] = xsim.cast(v[k], xsim.float64)
    out_v[k] = xsim.cast(m[k], xsim.vec4)


def test_cast_reinterprets_the_bits_like_numpy_view():
    n = 6
    rng = np.random.default_rng(2)
    f = np.array([2.0, -0.0, 1.5, np.inf, -3.25, 1e-30], dtype=np.float32)
    i = np.array([0x40000000, 0, -1, 0x7F800000, 12345, -(2 ** 31)], dtype=np.int32)
    d = rng.normal(size=n)
    h = rng.normal(size=n).astype(np.float16)
    v = rng.normal(size=(n, 2)).astype(np.float32)
    m = rng.normal(size=(n, 2, 2)).astype(np.float32)
    outs = [xsim.zeros(n, dtype=t) for t in (xsim.int32, float, xsim.uint64, xsim.int16, xsim.float64, xsim.vec4)]
    xsim.launch(casts, n, inputs=[xsim.array(f), xsim.array(i, dtype=xsim.int32), xsim.array(d, dtype=xsim.float64),
                                  xsim.array(h, dtype=xsim.float16), xsim.array(v, dtype=xsim.vec2),
                                  xsim.array(m, dtype=xsim.mat22), *outs])
    got = [o.numpy() for o in outs]
    np.testing.assert_array_equal(got[0], f.view(np.int32))
    assert got[0][0] == 0x40000000
    np.testing.assert_array_equal(got[1].view(np.int32), i)  # bit-exact, NaN payloads and all
    np.testing.assert_array_equal(got[2], d.view(np.uint64))
    np.testing.assert_array_equal(got[3], h.view(np.int16))
    np.testing.assert_array_equal(got[4].view(np.float32).reshape(n, 2), v)
    np.testing.assert_array_equal(got[5], m.reshape(n, 4))


@xsim.struct
class Pair16:
    h: xsim.float16
    k: xsim.int16


@xsim.kernel
def struct_casts(h: xsim.array(dtype=xsim.float16), k: xsim.array(dtype=xsim.int16), bits: xsim.array(dtype=xsim.int32),
                 out_bits: xsim.array(dtype=xsim.int32), out_k: xsim.array(dtype=xsim.int16)):
    i = xsim.tid()
    p = Pair16()
    p.h = h[i]
    p.k = k[i]
    out_bits[i] = xsim.cast(p, xsim.int32)     # a struct's bytes as laid out in arrays
    out_k[i] = xsim.cast(bits[i], Pair16).k    # and the other way


def test_cast_reinterprets_a_struct_like_numpy_view_of_its_record():
    h = np.array([2.0, -0.5, 65504.0], dtype=np.float16)
    k = np.array([123, -1, 32767], dtype=np.int16)
    rec = np.zeros(3, dtype=np.dtype(Pair16._np))
    rec["h"], rec["k"] = h, k
    bits = rec.view(np.int32)
    out_bits, out_k = xsim.zeros(3, dtype=xsim.int32), xsim.zeros(3, dtype=xsim.int16)
    xsim.launch(struct_casts, 3, inputs=[xsim.array(h, dtype=xsim.float16), xsim.array(k, dtype=xsim.int16),
                                         xsim.array(bits, dtype=xsim.int32), out_bits, out_k])
    np.testing.assert_array_equal(out_bits.numpy(), bits)
    assert out_bits.numpy()[0] == 0x007B4000
    np.testing.assert_array_equal(out_k.numpy(), k)


@pytest.mark.parametrize("expr, message", [
    ("xsim.cast(x[0], xsim.int64)", "cast() needs types of the same size: float32 has 4 bytes, int64 has 8"),
    ("xsim.cast(x[0], 3)", ("cast() reinterprets scalar, vector, matrix, quaternion, transform or struct (without "
                            "arrays) values")),
])
def test_cast_refuses_other_sizes_and_non_types_naming_the_line(expr, message, tmp_path):
    import importlib.util
    src = ("import xsim\n\n\n@xsim.kernel(module='lib15_bad_cast')\n"
           f"def bad(x: xsim.array(dtype=float), y: xsim.array(dtype=xsim.int64)):\n    y[0] = {expr}\n")
    path = tmp_path / "bad_cast.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("lib15_bad_cast", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(xsim.CompileError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        xsim.launch(mod.bad, 1, inputs=[xsim.zeros(1, dtype=float), xsim.zeros(1, dtype=xsim.int64)])
    assert f"{path}:6" in str(info.value)
