"""Every construct of the kernel language, run on the CPU and compared with numpy, in float32
and float64.

The kernels are built by ``make_kernels(F)`` once per float type, each set in its own module
(one compiler call per float type); funcs are generic (unannotated), so one definition serves
both types, and the overloaded func ``scale`` is chosen by its argument types.
"""

import numpy as np
import pytest

import xsim
from xsim import types as T

N = 64
RNG = np.random.default_rng(7)
A = RNG.uniform(-3.0, 3.0, N)
B = RNG.uniform(0.5, 2.5, N) * RNG.choice([-1.0, 1.0], N)
IA = RNG.integers(-50, 50, N)
IB = RNG.integers(1, 9, N) * RNG.choice([-1, 1], N)


# ------------------------------------------------------------------------------------------------
# funcs shared by both float types


@xsim.func
def first_index_above(a: xsim.array(dtype=float), b: xsim.array(dtype=float), limit: float, n: int):
    # early return from inside a dynamic loop
    for k in range(n):
        if a[k] > limit:
            return k
    return -1


@xsim.func
def first_index_above(a: xsim.array(dtype=xsim.float64), b: xsim.array(dtype=xsim.float64),  # noqa: F811
                      limit: xsim.float64, n: int):
    for k in range(n):
        if a[k] > limit:
            return k
    return -1


@xsim.func
def clamp_sign(x):
    # early returns in if/elif/else
    if x > 1.0:
        return xsim.sign(x)
    elif x < -1.0:
        return -xsim.abs(xsim.sign(x))
    return x


@xsim.func
def scale(x: float, s: float):
    return x * s


@xsim.func
def scale(x: xsim.float64, s: xsim.float64):  # noqa: F811
    return x * s * xsim.float64(1.0)


@xsim.func
def scale(v: xsim.vec3, s: float):  # noqa: F811
    return v * (2.0 * s)


@xsim.func
def scale(v: xsim.vec3d, s: xsim.float64):  # noqa: F811
    return v * (2.0 * s)


@xsim.func
def scale(i: int, s: int):  # noqa: F811
    return i * s + 1000


@xsim.func
def poly(x):
    # a func calling a func: nested inlining
    return clamp_sign(x) * x + x


@xsim.func
def sum_until_negative(a, n: int):
    # while loop with break; returns after the loop
    total = a[0] * 0.0
    k = 0
    while k < n:
        if a[k] < 0.0:
            break
        total += a[k]
        k += 1
    return total


def make_kernels(F):
    """The construct kernels for float type ``F``, compiled together in one module."""
    V3 = T.vector(3, F)
    M33 = T.matrix((3, 3), F)
    module = f"xsim_tests_constructs_{T.type_name(F)}"

    @xsim.struct
    class Particle:
        pos: V3
        mass: F

    @xsim.kernel(module=module)
    def arithmetic(a: xsim.array(dtype=F), b: xsim.array(dtype=F), out: xsim.array(dtype=F, ndim=2)):
        i = xsim.tid()
        x = a[i]
        y = b[i]
        out[i, 0] = x + y
        out[i, 1] = x - y
        out[i, 2] = x * y
        out[i, 3] = x / y
        out[i, 4] = x // y
        out[i, 5] = x % y
        out[i, 6] = xsim.abs(x) ** y
        out[i, 7] = -x
        out[i, 8] = +x
        out[i, 9] = x * 2.0 + 1.0 - y / 4.0
        out[i, 10] = x ** 2.0

    @xsim.kernel(module=module)
    def comparisons(a: xsim.array(dtype=F), b: xsim.array(dtype=F), out: xsim.array(dtype=int, ndim=2)):
        i = xsim.tid()
        x = a[i]
        y = b[i]
        out[i, 0] = int(x < y)
        out[i, 1] = int(x <= y)
        out[i, 2] = int(x > y)
        out[i, 3] = int(x >= y)
        out[i, 4] = int(x == y)
        out[i, 5] = int(x != y)
        out[i, 6] = int(x < y and y > 0.0)
        out[i, 7] = int(x < y or y > 0.0)
        out[i, 8] = int(not x < y)
        out[i, 9] = int(-1.0 < x < 1.0)
        out[i, 10] = int(x == x)  # noqa: PLR0124

    @xsim.kernel(module=module)
    def int_ops(a: xsim.array(dtype=int), b: xsim.array(dtype=int), out: xsim.array(dtype=int, ndim=2)):
        i = xsim.tid()
        x = a[i]
        y = b[i]
        out[i, 0] = x + y
        out[i, 1] = x - y
        out[i, 2] = x * y
        out[i, 3] = x // y
        out[i, 4] = x % y
        out[i, 5] = x & y
        out[i, 6] = x | y
        out[i, 7] = x ^ y
        out[i, 8] = ~x
        out[i, 9] = (x & 15) << 2
        out[i, 10] = -x >> 1
        out[i, 11] = scale(x, y)

    @xsim.kernel(module=module)
    def vector_matrix_ops(a: xsim.array(dtype=V3), b: xsim.array(dtype=V3), m: xsim.array(dtype=M33),
                          s: xsim.array(dtype=F), vout: xsim.array(dtype=V3, ndim=2),
                          mout: xsim.array(dtype=M33, ndim=2), flags: xsim.array(dtype=int, ndim=2)):
        i = xsim.tid()
        u = a[i]
        w = b[i]
        k = s[i]
        vout[i, 0] = u + w
        vout[i, 1] = u - w
        vout[i, 2] = u * k
        vout[i, 3] = k * u
        vout[i, 4] = u / k
        vout[i, 5] = -u
        vout[i, 6] = m[i] * u
        vout[i, 7] = u * m[i]
        vout[i, 8] = m[i] @ w
        mout[i, 0] = m[i] + m[i]
        mout[i, 1] = m[i] - M33(1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
        mout[i, 2] = m[i] * m[i]
        mout[i, 3] = m[i] * k
        mout[i, 4] = -m[i] / k
        flags[i, 0] = int(u == u)  # noqa: PLR0124
        flags[i, 1] = int(u != w)
        flags[i, 2] = int(m[i] == m[i])

    @xsim.kernel(module=module)
    def control_flow(a: xsim.array(dtype=F), b: xsim.array(dtype=F), n: int, out: xsim.array(dtype=F, ndim=2)):
        i = xsim.tid()
        x = a[i]
        # ternary
        out[i, 0] = x if x > 0.0 else -2.0 * x
        # if / elif / else
        r = F(0.0)
        if x < -1.0:
            r = x * 3.0
        elif x < 1.0:
            r = x + 10.0
        else:
            r = x - 10.0
        out[i, 1] = r
        # static range (unrolled), with continue and break
        acc = F(0.0)
        for k in range(6):
            if k == 1:
                continue
            if k == 4:
                break
            acc += x * F(k)
        out[i, 2] = acc
        # static range with start, stop, negative step
        acc2 = F(0.0)
        for k in range(10, 0, -3):
            acc2 = acc2 * 0.5 + F(k)
        out[i, 3] = acc2
        # dynamic range with continue and break: sums b[k] for k < n, skipping odd k, stopping
        # at the first k past i
        acc3 = F(0.0)
        for k in range(n):
            if k % 2 == 1:
                continue
            if k > i:
                break
            acc3 += b[k]
        out[i, 4] = acc3
        # dynamic range with start/stop/step
        acc4 = F(0.0)
        for k in range(i, n, 5):
            acc4 += a[k]
        out[i, 5] = acc4
        # while with a loop-carried product
        p = F(1.0)
        j = 0
        while j < i % 5:
            p = p * (x + 0.5)
            j += 1
        out[i, 6] = p
        # early return inside a loop, funcs calling funcs, while + break inside a func
        out[i, 7] = F(first_index_above(a, b, x, n))
        out[i, 8] = poly(x)
        out[i, 9] = sum_until_negative(b, n)
        # overloads by argument type (float and vector versions of one func name)
        out[i, 10] = scale(x, F(3.0))
        out[i, 11] = scale(V3(x, 1.0, 2.0), F(3.0))[0]

    @xsim.kernel(module=module)
    def local_components(a: xsim.array(dtype=V3), s: xsim.array(dtype=F), m: xsim.array(dtype=M33),
                         vout: xsim.array(dtype=V3), mout: xsim.array(dtype=M33), sout: xsim.array(dtype=F, ndim=2)):
        i = xsim.tid()
        v = a[i]
        k = s[i]
        w = v  # a value copy: writes into v leave w alone
        v.x = k
        v[1] += k
        v[2] *= 2.0
        v.z -= 1.0
        vout[i] = v
        sout[i, 0] = w.x + w[1] + w.z
        mm = m[i]
        mm[0, 1] = k
        mm[2, 2] += k
        mm[i % 3, 0] = F(7.0)  # a dynamic component index
        mm[1] = V3(1.0, 2.0, 3.0)  # a whole row
        mout[i] = mm
        sout[i, 1] = mm[1, 2] + mm[0][1]
        p = Particle()
        p.pos = v
        p.pos.y = k * 4.0
        p.mass = k
        p.mass += 1.0
        q = Particle(pos=w, mass=F(2.0))
        sout[i, 2] = p.pos.y + p.mass + q.mass * q.pos.x
        sout[i, 3] = F(len(v)) + F(len(a))

    @xsim.kernel(module=module)
    def element_components(s: xsim.array(dtype=F), y: xsim.array(dtype=V3), m: xsim.array(dtype=M33),
                           ps: xsim.array(dtype=Particle)):
        i = xsim.tid()
        k = s[i]
        y[i].x = k
        y[i][2] -= k
        y[i].y += 2.0 * k
        m[i][0, 1] = k
        m[i][2, 2] += k
        ps[i].mass = k * 3.0
        ps[i].pos.z = k

    @xsim.kernel(module=module)
    def early_exit(a: xsim.array(dtype=F), n: int, out: xsim.array(dtype=F, ndim=2)):
        i = xsim.tid()
        # continue inside a while loop: sums a[k] > 0 for k < n
        k = 0
        pos = F(0.0)
        while k < n:
            k += 1
            if a[k - 1] <= 0.0:
                continue
            pos += a[k - 1]
        out[i, 0] = pos
        # a bare return ends the thread: nothing after it runs
        if a[i] < 0.0:
            return
        out[i, 1] = a[i] * 2.0

    @xsim.kernel(module=module)
    def generic_constructors(a: xsim.array(dtype=F), vout: xsim.array(dtype=T.vector(4, F), ndim=2),
                             mout: xsim.array(dtype=T.matrix((2, 3), F), ndim=2)):
        i = xsim.tid()
        x = a[i]
        vout[i, 0] = xsim.vector(x, 1.0, 2.0, x)  # the type follows the components
        vout[i, 1] = xsim.vector(length=4, dtype=F)
        vout[i, 2] = xsim.vector(x, length=4)
        vout[i, 3] = xsim.vector(1.0, 2.0, 3.0, 4.0, dtype=F)
        mout[i, 0] = xsim.matrix(x, 1.0, 2.0, 3.0, 4.0, x, shape=(2, 3))
        mout[i, 1] = xsim.matrix(shape=(2, 3), dtype=F)

    @xsim.kernel(module=module)
    def tid_2d(out: xsim.array(dtype=F, ndim=2)):
        i, j = xsim.tid()
        out[i, j] = F(10 * i + j)

    @xsim.kernel(module=module)
    def tid_3d(out: xsim.array(dtype=F, ndim=3)):
        i, j, k = xsim.tid()
        out[i, j, k] = F(100 * i + 10 * j + k)

    @xsim.kernel(module=module)
    def tid_4d(out: xsim.array(dtype=F, ndim=4)):
        i, j, k, l = xsim.tid()
        out[i, j, k, l] = F(1000 * i + 100 * j + 10 * k + l)

    @xsim.kernel(module=module)
    def atomics(a: xsim.array(dtype=F), ia: xsim.array(dtype=int), out: xsim.array(dtype=F),
                iout: xsim.array(dtype=int), vout: xsim.array(dtype=V3)):
        i = xsim.tid()
        x = a[i]
        xsim.atomic_add(out, 0, x)
        xsim.atomic_sub(out, 1, x)
        xsim.atomic_min(out, 2, x)
        xsim.atomic_max(out, 3, x)
        xsim.atomic_add(iout, 0, ia[i])
        xsim.atomic_sub(iout, 1, ia[i])
        xsim.atomic_min(iout, 2, ia[i])
        xsim.atomic_max(iout, 3, ia[i])
        xsim.atomic_add(vout, i % 2, V3(x, 1.0, -x))
        out[4 + i % 2] += x  # += on an array element is an atomic add
        out[6] -= x

    return {k: v for k, v in locals().items() if isinstance(v, xsim.kernels.kernel.Kernel)} | {
        "Particle": Particle}


KERNELS = {F: make_kernels(F) for F in (xsim.float32, xsim.float64)}
FLOATS = [pytest.param(xsim.float32, id="float32"), pytest.param(xsim.float64, id="float64")]


def tol(F):
    return {"rtol": 2e-6, "atol": 2e-6} if F is xsim.float32 else {"rtol": 1e-13, "atol": 1e-13}


def arr(x, F):
    return xsim.array(np.asarray(x, dtype=F._np), dtype=F)


@pytest.mark.parametrize("F", FLOATS)
def test_arithmetic_operators_match_numpy(F):
    a, b = A.astype(F._np), B.astype(F._np)
    out = xsim.zeros((N, 11), dtype=F)
    xsim.launch(KERNELS[F]["arithmetic"], N, inputs=[arr(a, F), arr(b, F)], outputs=[out])
    expected = np.stack([a + b, a - b, a * b, a / b, np.floor(a / b), np.fmod(a, b), np.abs(a) ** b, -a, a,
                         a * 2 + 1 - b / 4, a * a], axis=1)
    np.testing.assert_allclose(out.numpy(), expected, **tol(F))


@pytest.mark.parametrize("F", FLOATS)
def test_comparison_and_boolean_operators_match_numpy(F):
    a = A.astype(F._np)
    b = np.where(np.arange(N) % 4 == 0, a, B).astype(F._np)  # some equal pairs
    out = xsim.zeros((N, 11), dtype=int)
    xsim.launch(KERNELS[F]["comparisons"], N, inputs=[arr(a, F), arr(b, F)], outputs=[out])
    expected = np.stack([a < b, a <= b, a > b, a >= b, a == b, a != b, (a < b) & (b > 0), (a < b) | (b > 0),
                         ~(a < b), (-1 < a) & (a < 1), ~np.isnan(a)], axis=1).astype(np.int32)
    np.testing.assert_array_equal(out.numpy(), expected)
    assert expected[:, 4].sum() >= N // 4


@pytest.mark.parametrize("F", FLOATS)
def test_integer_operators_follow_python_floor_division_and_c_remainder(F):
    a, b = IA.astype(np.int32), IB.astype(np.int32)
    out = xsim.zeros((N, 12), dtype=int)
    xsim.launch(KERNELS[F]["int_ops"], N, inputs=[xsim.array(a), xsim.array(b)], outputs=[out])
    expected = np.stack([a + b, a - b, a * b, a // b, np.fmod(a, b), a & b, a | b, a ^ b, ~a, (a & 15) << 2,
                         (-a) >> 1, a * b + 1000], axis=1)
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("F", FLOATS)
def test_vector_and_matrix_operators_match_numpy(F):
    V3, M33 = T.vector(3, F), T.matrix((3, 3), F)
    u = RNG.uniform(-1, 1, (N, 3)).astype(F._np)
    w = RNG.uniform(-1, 1, (N, 3)).astype(F._np)
    w[0] = u[0]
    m = RNG.uniform(-1, 1, (N, 3, 3)).astype(F._np)
    s = RNG.uniform(0.5, 2.0, N).astype(F._np)
    vout, mout, flags = xsim.zeros((N, 9), dtype=V3), xsim.zeros((N, 5), dtype=M33), xsim.zeros((N, 3), dtype=int)
    xsim.launch(KERNELS[F]["vector_matrix_ops"], N,
                inputs=[xsim.array(u, dtype=V3), xsim.array(w, dtype=V3), xsim.array(m, dtype=M33), arr(s, F)],
                outputs=[vout, mout, flags])
    sc = s[:, None]
    ev = np.stack([u + w, u - w, u * sc, sc * u, u / sc, -u, np.einsum("nij,nj->ni", m, u),
                   np.einsum("ni,nij->nj", u, m), np.einsum("nij,nj->ni", m, w)], axis=1)
    em = np.stack([m + m, m - np.eye(3), m @ m, m * sc[:, :, None], -m / sc[:, :, None]], axis=1)
    np.testing.assert_allclose(vout.numpy(), ev, **tol(F))
    np.testing.assert_allclose(mout.numpy(), em, **tol(F))
    np.testing.assert_array_equal(flags.numpy()[:, 0], 1)
    np.testing.assert_array_equal(flags.numpy()[:, 1], [0] + [1] * (N - 1))
    np.testing.assert_array_equal(flags.numpy()[:, 2], 1)


def control_flow_reference(a, b, n):
    """The control_flow kernel, written in plain Python."""
    out = np.zeros((len(a), 12))
    for i, x in enumerate(a):
        out[i, 0] = x if x > 0 else -2 * x
        out[i, 1] = x * 3 if x < -1 else (x + 10 if x < 1 else x - 10)
        out[i, 2] = x * (0 + 2 + 3)
        acc2 = 0.0
        for k in range(10, 0, -3):
            acc2 = acc2 * 0.5 + k
        out[i, 3] = acc2
        acc3 = 0.0
        for k in range(n):
            if k % 2 == 1:
                continue
            if k > i:
                break
            acc3 += b[k]
        out[i, 4] = acc3
        out[i, 5] = sum(a[k] for k in range(i, n, 5))
        out[i, 6] = (x + 0.5) ** (i % 5)
        out[i, 7] = next((k for k in range(n) if a[k] > x), -1)
        out[i, 8] = min(max(x, -1.0), 1.0) * x + x
        total = 0.0
        for k in range(n):
            if b[k] < 0:
                break
            total += b[k]
        out[i, 9] = total
        out[i, 10] = 3 * x
        out[i, 11] = 6 * x
    return out


@pytest.mark.parametrize("F", FLOATS)
def test_control_flow_ternary_if_loops_break_continue_and_func_returns_match_python(F):
    a = A.astype(F._np)
    b = np.abs(B).astype(F._np)
    b[N // 2] = -1.0  # sum_until_negative stops here
    out = xsim.zeros((N, 12), dtype=F)
    xsim.launch(KERNELS[F]["control_flow"], N, inputs=[arr(a, F), arr(b, F), N], outputs=[out])
    expected = control_flow_reference(a.astype(np.float64), b.astype(np.float64), N)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5 if F is xsim.float32 else 1e-12, atol=1e-5)
    assert (expected[:, 7] == -1).any() and (expected[:, 7] >= 0).any()  # both return paths taken


@pytest.mark.parametrize("F", FLOATS)
def test_local_vector_matrix_struct_component_writes_are_value_copies(F):
    V3, M33 = T.vector(3, F), T.matrix((3, 3), F)
    a = RNG.uniform(-1, 1, (N, 3)).astype(F._np)
    s = RNG.uniform(-1, 1, N).astype(F._np)
    m = RNG.uniform(-1, 1, (N, 3, 3)).astype(F._np)
    vout, mout, sout = xsim.zeros(N, dtype=V3), xsim.zeros(N, dtype=M33), xsim.zeros((N, 4), dtype=F)
    xsim.launch(KERNELS[F]["local_components"], N,
                inputs=[xsim.array(a, dtype=V3), arr(s, F), xsim.array(m, dtype=M33)], outputs=[vout, mout, sout])
    v = a.copy()
    v[:, 0] = s
    v[:, 1] += s
    v[:, 2] = v[:, 2] * 2 - 1
    np.testing.assert_allclose(vout.numpy(), v, **tol(F))
    mm = m.copy()
    mm[:, 0, 1] = s
    mm[:, 2, 2] += s
    mm[np.arange(N), np.arange(N) % 3, 0] = 7
    mm[:, 1] = [1, 2, 3]
    np.testing.assert_allclose(mout.numpy(), mm, **tol(F))
    np.testing.assert_allclose(sout.numpy()[:, 0], a.sum(axis=1), **tol(F))
    np.testing.assert_allclose(sout.numpy()[:, 1], mm[:, 1, 2] + mm[:, 0, 1], **tol(F))
    np.testing.assert_allclose(sout.numpy()[:, 2], s * 4 + (s + 1) + 2 * a[:, 0], **tol(F))
    np.testing.assert_array_equal(sout.numpy()[:, 3], 3 + N)


@pytest.mark.parametrize("F", FLOATS)
def test_component_writes_into_array_elements(F):
    V3, M33 = T.vector(3, F), T.matrix((3, 3), F)
    P = KERNELS[F]["Particle"]
    s = RNG.uniform(-1, 1, N).astype(F._np)
    y0 = RNG.uniform(-1, 1, (N, 3)).astype(F._np)
    m0 = RNG.uniform(-1, 1, (N, 3, 3)).astype(F._np)
    y, m = xsim.array(y0, dtype=V3), xsim.array(m0, dtype=M33)
    ps = xsim.zeros(N, dtype=P)
    xsim.launch(KERNELS[F]["element_components"], N, inputs=[arr(s, F)], outputs=[y, m, ps])
    ey = y0.copy()
    ey[:, 0] = s
    ey[:, 2] -= s
    ey[:, 1] += 2 * s
    em = m0.copy()
    em[:, 0, 1] = s
    em[:, 2, 2] += s
    np.testing.assert_allclose(y.numpy(), ey, **tol(F))
    np.testing.assert_allclose(m.numpy(), em, **tol(F))
    rec = ps.numpy()
    np.testing.assert_allclose(rec["mass"], 3 * s, **tol(F))
    np.testing.assert_allclose(rec["pos"][:, 2], s, **tol(F))
    np.testing.assert_array_equal(rec["pos"][:, :2], 0)


@pytest.mark.parametrize("F", FLOATS)
def test_tid_unpacks_two_three_and_four_launch_indices(F):
    k = KERNELS[F]
    o2 = xsim.zeros((3, 4), dtype=F)
    xsim.launch(k["tid_2d"], (3, 4), outputs=[o2])
    np.testing.assert_array_equal(o2.numpy(), 10 * np.arange(3)[:, None] + np.arange(4))
    o3 = xsim.zeros((2, 3, 4), dtype=F)
    xsim.launch(k["tid_3d"], (2, 3, 4), outputs=[o3])
    i, j, kk = np.indices((2, 3, 4))
    np.testing.assert_array_equal(o3.numpy(), 100 * i + 10 * j + kk)
    o4 = xsim.zeros((2, 3, 2, 5), dtype=F)
    xsim.launch(k["tid_4d"], (2, 3, 2, 5), outputs=[o4])
    i, j, kk, ll = np.indices((2, 3, 2, 5))
    np.testing.assert_array_equal(o4.numpy(), 1000 * i + 100 * j + 10 * kk + ll)


@pytest.mark.parametrize("F", FLOATS)
def test_atomics_are_exact_under_many_colliding_threads(F):
    V3 = T.vector(3, F)
    n = 20000
    # dyadic values: every partial sum is exact, whatever order the threads add in
    a = (RNG.integers(-512, 512, n) / 64.0).astype(F._np)
    ia = RNG.integers(-1000, 1000, n).astype(np.int32)
    out = xsim.array(np.array([0, 0, 1e9, -1e9, 0, 0, 0], dtype=F._np), dtype=F)
    iout = xsim.array(np.array([0, 0, 10**9, -10**9], dtype=np.int32))
    vout = xsim.zeros(2, dtype=V3)
    xsim.launch(KERNELS[F]["atomics"], n, inputs=[arr(a, F), xsim.array(ia)], outputs=[out, iout, vout])
    np.testing.assert_array_equal(out.numpy(), [a.sum(), -a.sum(), a.min(), a.max(), a[0::2].sum(), a[1::2].sum(),
                                                -a.sum()])
    np.testing.assert_array_equal(iout.numpy(), [ia.sum(), -ia.sum(), ia.min(), ia.max()])
    np.testing.assert_array_equal(vout.numpy(), [[a[0::2].sum(), n / 2, -a[0::2].sum()],
                                                 [a[1::2].sum(), n / 2, -a[1::2].sum()]])


@pytest.mark.parametrize("F", FLOATS)
def test_generic_vector_and_matrix_constructors(F):
    a = A.astype(F._np)
    vout = xsim.zeros((N, 4), dtype=T.vector(4, F))
    mout = xsim.full((N, 2), 9.0, dtype=T.matrix((2, 3), F))
    xsim.launch(KERNELS[F]["generic_constructors"], N, inputs=[arr(a, F)], outputs=[vout, mout])
    v, m = vout.numpy(), mout.numpy()
    np.testing.assert_array_equal(v[:, 0], np.stack([a, a * 0 + 1, a * 0 + 2, a], axis=1))
    np.testing.assert_array_equal(v[:, 1], 0)
    np.testing.assert_array_equal(v[:, 2], np.repeat(a[:, None], 4, axis=1))
    np.testing.assert_array_equal(v[:, 3], np.tile([1, 2, 3, 4], (N, 1)))
    np.testing.assert_array_equal(m[:, 0].reshape(N, 6), np.stack([a, a * 0 + 1, a * 0 + 2, a * 0 + 3,
                                                                   a * 0 + 4, a], axis=1))
    np.testing.assert_array_equal(m[:, 1], 0)


@pytest.mark.parametrize("F", FLOATS)
def test_while_continue_and_a_bare_return_that_ends_the_thread(F):
    a = A.astype(F._np)
    out = xsim.full((N, 2), -7.0, dtype=F)
    xsim.launch(KERNELS[F]["early_exit"], N, inputs=[arr(a, F), N], outputs=[out])
    np.testing.assert_allclose(out.numpy()[:, 0], a[a > 0].astype(np.float64).sum(), **tol(F))
    np.testing.assert_array_equal(out.numpy()[:, 1], np.where(a < 0, -7.0, 2 * a))


# ------------------------------------------------------------------------------------------------
# the other scalar types: float16 and every integer width, signed and unsigned

OTHER_SCALARS = [xsim.float16, xsim.int8, xsim.int16, xsim.int64, xsim.uint8, xsim.uint16, xsim.uint32, xsim.uint64]


def make_scalar_kernel(S):
    """Operators on scalar type ``S`` (all of them in one module; each kernel named after ``S``)."""
    def scalar_ops(a: xsim.array(dtype=S), b: xsim.array(dtype=S), out: xsim.array(dtype=S, ndim=2),
                   flags: xsim.array(dtype=int, ndim=2)):
        i = xsim.tid()
        x = a[i]
        y = b[i]
        out[i, 0] = x + y
        out[i, 1] = x - y
        out[i, 2] = x * y
        out[i, 3] = x // y
        out[i, 4] = xsim.max(x, y) + S(1)
        out[i, 5] = xsim.min(x, y)
        out[i, 6] = x if x > y else y * 2
        flags[i, 0] = int(x < y)
        flags[i, 1] = int(x >= y)
        flags[i, 2] = int(x == y)
        flags[i, 3] = int(x != y and not x < y)
    scalar_ops.__name__ = scalar_ops.__qualname__ = f"scalar_ops_{T.type_name(S)}"
    return xsim.kernel(module="xsim_tests_constructs_scalar_types")(scalar_ops)


SCALAR_KERNELS = {S: make_scalar_kernel(S) for S in OTHER_SCALARS}


@pytest.mark.parametrize("S", OTHER_SCALARS, ids=T.type_name)
def test_operators_on_every_other_scalar_type_match_numpy(S):
    rng = np.random.default_rng(3)
    b = rng.integers(1, 11, N).astype(S._np)
    a = (b + rng.integers(0, 5, N)).astype(S._np)  # a >= b keeps unsigned subtraction in range
    a[::5] = b[::5]
    if S is xsim.float16:
        a = (a + 0.25).astype(S._np)
    out = xsim.zeros((N, 7), dtype=S)
    flags = xsim.zeros((N, 4), dtype=int)
    xsim.launch(SCALAR_KERNELS[S], N, inputs=[xsim.array(a, dtype=S), xsim.array(b, dtype=S)], outputs=[out, flags])
    one = np.array(1, dtype=S._np)
    expected = np.stack([a + b, a - b, a * b, a // b, np.maximum(a, b) + one, np.minimum(a, b),
                         np.where(a > b, a, b * np.array(2, dtype=S._np))], axis=1)
    np.testing.assert_array_equal(out.numpy(), expected)
    np.testing.assert_array_equal(flags.numpy(), np.stack([a < b, a >= b, a == b, (a != b) & ~(a < b)], axis=1))
