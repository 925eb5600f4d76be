"""Atomics (xsim/kernels/native/xsim_core.h, expressions.atomic): atomic_and/or/xor/exch/cas and
add/sub/min/max on scalars, vector and matrix elements and float16, each returning the old value as in
Warp; exact under many CPU threads; add/sub differentiated, cas/exch on floats refused on a tape."""

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck
from xsim.kernels import threads as threads_mod

N = 1 << 20  # >= threads.CALIBRATE_BELOW, so every thread runs; and long enough that the threads overlap
mat33ui = xsim.types.matrix(shape=(3, 3), dtype=xsim.uint32)


@pytest.fixture
def four_threads(monkeypatch):
    monkeypatch.setattr(threads_mod, "_max_threads", 4)
    assert threads_mod.Pacer().threads(N) == 4


# ------------------------------------------------------------------------------------------------
# kernels


@xsim.kernel
def bitwise_returning_old(a: xsim.array(dtype=xsim.int64), b: xsim.array(dtype=xsim.int64),
                          c: xsim.array(dtype=xsim.int64), v: xsim.array(dtype=xsim.int64),
                          old: xsim.array(dtype=xsim.int64, ndim=2)):
    i = xsim.tid()
    old[i, 0] = xsim.atomic_and(a, i, v[i])
    old[i, 1] = xsim.atomic_or(b, i, v[i])
    old[i, 2] = xsim.atomic_xor(c, i, v[i])


@xsim.kernel
def bits_under_contention(words: xsim.array(dtype=xsim.uint32), mask: xsim.array(dtype=xsim.uint32),
                          flips: xsim.array(dtype=xsim.uint64, ndim=2)):
    i = xsim.tid()
    w = i // 32
    bit = xsim.uint32(1) << xsim.uint32(i % 32)
    xsim.atomic_or(words, w % 64, bit)  # every bit of the 64 words gets set by 32 threads
    mask[w % 64] &= ~bit | xsim.uint32(0x80000000)  # clears all bits but the top one
    xsim.atomic_xor(flips, w % 8, 0, xsim.uint64(1) << xsim.uint64(i % 64))


@xsim.kernel
def counters_under_contention(total: xsim.array(dtype=xsim.int32), slots: xsim.array(dtype=xsim.int64),
                              cas_count: xsim.array(dtype=xsim.int32), lows: xsim.array(dtype=xsim.float32),
                              highs: xsim.array(dtype=xsim.float64), halves: xsim.array(dtype=xsim.float16),
                              tickets: xsim.array(dtype=xsim.int32), swapped: xsim.array(dtype=xsim.int32)):
    i = xsim.tid()
    xsim.atomic_add(total, 0, 1)
    slots[i % 7] -= xsim.int64(i)
    guess = 0  # increment through compare-and-swap: retry with what the last attempt saw
    while True:
        seen = xsim.atomic_cas(cas_count, 0, guess, guess + 1)
        if seen == guess:
            break
        guess = seen
    xsim.atomic_min(lows, 0, float(i % 1000) - 3.0)
    xsim.atomic_max(highs, i % 4, xsim.float64(i))
    xsim.atomic_add(halves, i % 1024, xsim.float16(1.0))
    swapped[i] = xsim.atomic_exch(tickets, 0, i + 1)


@xsim.kernel
def composite_elements(v: xsim.array(dtype=xsim.vec3), m: xsim.array(dtype=xsim.mat22, ndim=2),
                       h: xsim.array(dtype=xsim.vec3h), u: xsim.array(dtype=mat33ui),
                       x: xsim.array(dtype=float), old: xsim.array(dtype=xsim.vec3)):
    i = xsim.tid()
    v[i % 2][1] += x[i]
    v[i % 2].z -= 2.0 * x[i]
    old[i] = xsim.atomic_add(v, 2, xsim.vec3(x[i], 0.0, 1.0))
    m[0, i % 3][1, 0] += x[i]
    xsim.atomic_max(m, 1, i % 3, xsim.mat22(x[i], -x[i], 0.0, float(i)))
    h[i % 2][2] += xsim.float16(0.5)
    xsim.atomic_add(h, 1, xsim.vec3h(xsim.float16(1.0), xsim.float16(0.0), xsim.float16(0.25)))
    u[0][i % 3, 2] |= xsim.uint32(1) << xsim.uint32(i % 32)
    xsim.atomic_xor(u, 1, mat33ui(xsim.uint32(i)))


@xsim.kernel
def scatter_add_sub(x: xsim.array(dtype=xsim.float64), v: xsim.array(dtype=xsim.vec3d),
                    s: xsim.array(dtype=xsim.float64, ndim=2)):
    i = xsim.tid()
    v[i % 2][0] += x[i] * x[i]
    v[i % 2].y -= 3.0 * x[i]
    xsim.atomic_sub(v, 1, xsim.vec3d(x[i], 0.0, xsim.sin(x[i])))
    xsim.atomic_add(s, i % 2, 1, x[i] * 2.0)


@xsim.kernel
def exch_on_floats(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    xsim.atomic_exch(y, 0, x[i])


# ------------------------------------------------------------------------------------------------
# results against numpy


def test_atomic_and_or_xor_return_the_old_value_and_store_the_combination():
    rng = np.random.default_rng(3)
    n = 257
    a, b, c, v = (rng.integers(-2**62, 2**62, size=n, dtype=np.int64) for _ in range(4))
    arrs = [xsim.array(x.copy(), dtype=xsim.int64) for x in (a, b, c)]
    old = xsim.zeros((n, 3), dtype=xsim.int64)
    xsim.launch(bitwise_returning_old, n, inputs=[*arrs, xsim.array(v, dtype=xsim.int64), old])
    np.testing.assert_array_equal(old.numpy(), np.stack([a, b, c], axis=1))
    np.testing.assert_array_equal(arrs[0].numpy(), a & v)
    np.testing.assert_array_equal(arrs[1].numpy(), b | v)
    np.testing.assert_array_equal(arrs[2].numpy(), c ^ v)


def test_kernel_adj_args_say_which_arrays_a_built_kernel_reads_and_writes_atomics_included():
    xsim.get_module(bitwise_returning_old.module_name).load("cpu")
    args = {a.label: (a.is_read, a.is_write) for a in bitwise_returning_old.adj.args}
    assert args == {"a": (False, True), "b": (False, True), "c": (False, True), "v": (True, False),
                    "old": (False, True)}


def test_bitwise_atomics_and_in_place_operators_are_exact_under_threads(four_threads):
    words = xsim.zeros(64, dtype=xsim.uint32)
    mask = xsim.full(64, 0xFFFFFFFF, dtype=xsim.uint32)
    start = np.random.default_rng(5).integers(0, 2**63, size=(8, 1), dtype=np.uint64)
    flips = xsim.array(start, dtype=xsim.uint64)
    xsim.launch(bits_under_contention, N, inputs=[words, mask, flips])
    np.testing.assert_array_equal(words.numpy(), np.full(64, 0xFFFFFFFF, np.uint32))
    np.testing.assert_array_equal(mask.numpy(), np.full(64, 0x80000000, np.uint32))
    i = np.arange(N)
    flipped = np.zeros((8, 64), np.int64)  # how often each bit of each word is flipped
    np.add.at(flipped, ((i // 32) % 8, i % 64), 1)
    want = start ^ ((flipped % 2).astype(np.uint64) << np.arange(64, dtype=np.uint64)).sum(
        axis=1, dtype=np.uint64)[:, None]
    np.testing.assert_array_equal(flips.numpy(), want)


def test_add_sub_min_max_cas_exch_and_float16_are_exact_under_threads(four_threads):
    total, slots, cas_count = (xsim.zeros(k, dtype=d) for k, d in ((1, xsim.int32), (7, xsim.int64),
                                                                    (1, xsim.int32)))
    lows, highs = xsim.full(1, 1e9, dtype=xsim.float32), xsim.full(4, -1.0, dtype=xsim.float64)
    halves, tickets, swapped = xsim.zeros(1024, dtype=xsim.float16), xsim.zeros(1, dtype=xsim.int32), \
        xsim.zeros(N, dtype=xsim.int32)
    xsim.launch(counters_under_contention, N, inputs=[total, slots, cas_count, lows, highs, halves, tickets, swapped])
    i = np.arange(N)
    assert total.numpy()[0] == N and cas_count.numpy()[0] == N
    np.testing.assert_array_equal(slots.numpy(), [-i[i % 7 == k].sum() for k in range(7)])
    assert lows.numpy()[0] == -3.0
    np.testing.assert_array_equal(highs.numpy(), [i[i % 4 == k].max() for k in range(4)])
    np.testing.assert_array_equal(halves.numpy(), np.full(1024, N // 1024, np.float16))  # 1024: exact in float16
    # each exchange handed back what one other thread (or the initial 0) left: a permutation
    seen = np.sort(np.append(swapped.numpy(), tickets.numpy()))
    np.testing.assert_array_equal(seen, np.arange(N + 1))


def test_atomics_on_vector_and_matrix_elements_and_float16_vectors():
    n = 96
    x = np.random.default_rng(9).uniform(-1, 1, n).astype(np.float32)
    v = xsim.zeros(3, dtype=xsim.vec3)
    m = xsim.zeros((2, 3), dtype=xsim.mat22)
    h = xsim.zeros(2, dtype=xsim.vec3h)
    start_u = np.random.default_rng(2).integers(0, 2**32, size=(2, 3, 3), dtype=np.uint32)
    u = xsim.array(start_u, dtype=mat33ui)
    old = xsim.zeros(n, dtype=xsim.vec3)
    xsim.launch(composite_elements, n, inputs=[v, m, h, u, xsim.array(x, dtype=float), old])
    i = np.arange(n)
    want_v = np.zeros((3, 3), np.float64)
    for k in range(2):
        want_v[k, 1] = x[i % 2 == k].sum()
        want_v[k, 2] = -2.0 * x[i % 2 == k].sum()
    want_v[2] = [x.sum(), 0.0, n]
    np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-4, atol=1e-4)
    # the values atomic_add handed back are partial sums: sorted by the count, they are the prefix sums
    olds = old.numpy()
    order = np.argsort(olds[:, 2])
    np.testing.assert_array_equal(olds[order, 2], np.arange(n))
    np.testing.assert_allclose(olds[order, 0], np.concatenate([[0], np.cumsum(x[order])[:-1]]), atol=1e-4)
    want_m = np.zeros((2, 3, 2, 2))
    for k in range(3):
        sel = i % 3 == k
        want_m[0, k, 1, 0] = x[sel].sum()
        want_m[1, k] = [[max(0.0, x[sel].max()), max(0.0, (-x[sel]).max())], [0.0, i[sel].max()]]
    np.testing.assert_allclose(m.numpy(), want_m, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(h.numpy(), np.array([[0, 0, n / 4], [n, 0, n / 4 + n / 4]], np.float16))
    want_u = start_u.copy()
    for k in range(n):
        want_u[0, k % 3, 2] |= np.uint32(1 << (k % 32))
        want_u[1] ^= np.uint32(k)
    np.testing.assert_array_equal(u.numpy(), want_u)


@xsim.kernel
def cas_and_exch_by_type(f: xsim.array(dtype=xsim.float32), d: xsim.array(dtype=xsim.float64),
                         u: xsim.array(dtype=xsim.uint64), l: xsim.array(dtype=xsim.int64, ndim=2),
                         old: xsim.array(dtype=xsim.float64, ndim=2)):
    i = xsim.tid()
    old[i, 0] = xsim.float64(xsim.atomic_cas(f, i, 1.5, -2.0))  # swaps where the element is 1.5
    old[i, 1] = xsim.atomic_cas(d, i, xsim.float64(0.25), xsim.float64(i))
    old[i, 2] = xsim.float64(xsim.atomic_exch(u, i, xsim.uint64(i) << xsim.uint64(40)))
    old[i, 3] = xsim.float64(xsim.atomic_cas(l, i, 0, xsim.int64(-7), xsim.int64(i)))


def test_cas_swaps_only_an_equal_element_and_exch_always_swaps_both_returning_the_old_value():
    n = 6
    f0 = np.array([1.5, 2.0, 1.5, -0.0, 1.5, 3.0], np.float32)
    d0 = np.array([0.25, 0.5, 0.25, 0.25, 1.0, 0.0])
    u0 = np.arange(n, dtype=np.uint64) + np.uint64(2**63)
    l0 = np.array([[-7], [7], [-7], [0], [-7], [1]], np.int64)
    f, d = xsim.array(f0, dtype=xsim.float32), xsim.array(d0, dtype=xsim.float64)
    u, l = xsim.array(u0, dtype=xsim.uint64), xsim.array(l0, dtype=xsim.int64)
    old = xsim.zeros((n, 4), dtype=xsim.float64)
    xsim.launch(cas_and_exch_by_type, n, inputs=[f, d, u, l, old])
    i = np.arange(n)
    np.testing.assert_array_equal(old.numpy(), np.stack([f0, d0, u0.astype(np.float64), l0[:, 0]], axis=1))
    np.testing.assert_array_equal(f.numpy(), np.where(f0 == 1.5, -2.0, f0).astype(np.float32))
    np.testing.assert_array_equal(d.numpy(), np.where(d0 == 0.25, i, d0))
    np.testing.assert_array_equal(u.numpy(), i.astype(np.uint64) << np.uint64(40))
    np.testing.assert_array_equal(l.numpy()[:, 0], np.where(l0[:, 0] == -7, i, l0[:, 0]))


# ------------------------------------------------------------------------------------------------
# gradients and refusals


def test_atomic_add_and_sub_on_vector_elements_match_finite_differences():
    x = xsim.array(np.random.default_rng(4).uniform(-1, 1, 6), dtype=xsim.float64, requires_grad=True)
    v = xsim.zeros(2, dtype=xsim.vec3d, requires_grad=True)
    s = xsim.zeros((2, 2), dtype=xsim.float64, requires_grad=True)
    gradcheck(scatter_add_sub, [x, v, s], dim=6, outputs=["v", "s"], wrt=["x"], eps=1e-6, atol=1e-8,
              rtol=1e-6).assert_ok()


@xsim.kernel
def vector_extremes(x: xsim.array(dtype=xsim.vec3d), lo: xsim.array(dtype=xsim.vec3d),
                    hi: xsim.array(dtype=xsim.mat22d)):
    i = xsim.tid()
    xsim.atomic_min(lo, 0, x[i])
    xsim.atomic_max(hi, i % 2, xsim.mat22d(x[i][0], 2.0 * x[i][1], x[i][2] * x[i][2], -x[i][0]))


def test_atomic_min_and_max_of_vectors_and_matrices_pass_the_gradient_to_each_components_extreme():
    x = xsim.array(np.random.default_rng(6).uniform(-1, 1, (7, 3)), dtype=xsim.vec3d, requires_grad=True)
    lo = xsim.full(1, 10.0, dtype=xsim.vec3d, requires_grad=True)
    hi = xsim.full(2, -10.0, dtype=xsim.mat22d, requires_grad=True)
    gradcheck(vector_extremes, [x, lo, hi], dim=7, outputs=["lo", "hi"], wrt=["x"], eps=1e-6, atol=1e-8,
              rtol=1e-6).assert_ok()


def test_exchange_on_a_float_array_is_refused_on_a_tape():
    x = xsim.array([1.0, 2.0], dtype=float, requires_grad=True)
    y = xsim.zeros(1, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(exch_on_floats, 2, inputs=[x, y])
    assert y.numpy()[0] in (1.0, 2.0)
    with pytest.raises(xsim.CompileError, match=r"test_atomics\.py:\d+: atomic_exch\(\) on the float array 'y' "
                                                r"has no adjoint"):
        tape.backward(grads={y: np.ones(1)})


@pytest.mark.parametrize("call, message", [
    ("xsim.atomic_and(a, 0, 1.0)", (r"atomic_and\(\) operations only work on arrays with \[u\]int32 or \[u\]int64 as "
                                    r"the underlying scalar types, but got float32 \(with scalar type float32\)$")),
    ("xsim.atomic_min(h, 0, xsim.float16(1.0))", (r"atomic_min\(\) operations only work on arrays with \[u\]int32, "
     r"\[u\]int64, bfloat16, float32, or float64 as the underlying .* got float16 \(with scalar type float16\)$")),
    ("xsim.atomic_add(b, 0, xsim.int8(1))", (r"atomics_bad_[0-9a-f]+\.py:6:5:\n +xsim.atomic_add\(b, 0, xsim.int8\(1\)\)\n +\^\n"
     r"atomic_add\(\) operations only work on arrays with \[u\]int32, \[u\]int64, float16, bfloat16, float32, or "
     r"float64 as the underlying scalar types, but got int8 \(with scalar type int8\)$")),
    ("xsim.atomic_cas(v, 0, xsim.vec3(), xsim.vec3())", r"atomic_cas\(\) needs scalar elements, got vec3"),
    ("xsim.atomic_cas(a, 0, 1.0)", r"atomic_cas\(array, index\.\.\., compare, value\)"),
])
def test_atomics_refuse_element_types_without_an_atomic(call, message):
    src = ("import xsim\n\n@xsim.kernel\ndef bad(a: xsim.array(dtype=float), h: xsim.array(dtype=xsim.float16),\n"
           "        b: xsim.array(dtype=xsim.int8), v: xsim.array(dtype=xsim.vec3)):\n"
           f"    {call}\n")
    from xsim.kernels.generated import load_source
    from xsim.kernels.module import build_ir
    with pytest.raises(xsim.CompileError, match=message) as info:
        build_ir(load_source(src, "atomics_bad").bad)
    assert info.value.line == 6


@xsim.kernel
def small_ints_in_place(a: xsim.array(dtype=xsim.int8), b: xsim.array(dtype=xsim.uint16)):
    i = xsim.tid()
    a[i] += xsim.int8(3)
    b[i] |= xsim.uint16(0x100)


def test_in_place_operators_on_8_and_16_bit_ints_read_combine_and_write_back_as_in_warp():
    a = xsim.array(np.array([1, -128, 125], np.int8), dtype=xsim.int8)
    b = xsim.array(np.array([1, 0xFF00, 7], np.uint16), dtype=xsim.uint16)
    xsim.launch(small_ints_in_place, 3, inputs=[a, b])
    np.testing.assert_array_equal(a.numpy(), np.array([4, -125, -128], np.int8))  # wraps as int8
    np.testing.assert_array_equal(b.numpy(), np.array([0x101, 0xFF00, 0x107], np.uint16))
