"""Call forms Warp's kernels use: a func or builtin bound to a local and called through it,
builtins called with keyword arguments (Warp's parameter names), ``transformation(p=, q=)``, ``transform(p=, q=)``,
``transform(s)`` and ``quaternion(..., dtype=)`` in a kernel, Warp's math constants, ``launch(block_dim=, max_blocks=)``, ``xsim.float(x)``, ``grad(f)``
(a func's derivative in the forward code), and operators overloaded by funcs named ``add``/``mul``. Forward against numpy, gradients against
float64 finite differences. One module."""

import importlib.util
import math
import types

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck

F = xsim.float64
A = xsim.array(dtype=F)
RNG = np.random.default_rng(5)


@xsim.func
def cube(a: F):
    return a * a * a


HANDLERS = {"cube": cube, "cos": xsim.cos}


@xsim.kernel(module="xsim_tests_call_forms")
def through_locals(x: A, y: A):
    i = xsim.tid()
    f = cube                                    # a func bound to a local
    g = xsim.static(HANDLERS["cos"])            # a builtin chosen at compile time, bound to a local
    h = f                                       # an alias of the alias
    y[i] = f(x[i]) + g(x[i]) * h(F(2.0))


@xsim.kernel(module="xsim_tests_call_forms")
def by_keyword(x: A, y: A):
    i = xsim.tid()
    a = xsim.abs(x[i]) + F(0.5)
    y[i] = (xsim.pow(y=F(1.5), x=a) + xsim.atan2(x=a, y=x[i]) + xsim.clamp(high=F(0.3), x=x[i], low=F(-0.2))
            + xsim.dot(b=xsim.vec2d(a, F(1.0)), a=xsim.vec2d(F(2.0), x[i])))


@xsim.kernel(module="xsim_tests_call_forms")
def transforms(p: xsim.array(dtype=xsim.vec3d), q: xsim.array(dtype=xsim.quatd), out: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    t = xsim.transformation(q=q[i], p=p[i])     # keywords in any order, dtype from the arguments
    u = xsim.transformation(p[i], q[i], dtype=F)
    n = xsim.int(xsim.float(2.7))               # Warp's builtins float() and int() through the module
    out[i] = (xsim.transform_point(t, xsim.vec3d(1.0, 2.0, 3.0)) + u.p * F(xsim.pi)
              + xsim.vec3d(F(xsim.tau) + F(n)))


@xsim.kernel(module="xsim_tests_call_forms")
def quaternions(x: A, out: xsim.array(dtype=xsim.quatd, ndim=2), out_f: xsim.array(dtype=xsim.quatf)):
    i = xsim.tid()
    out[i, 0] = xsim.quaternion(x[i], F(2.0), x[i] * x[i], F(4.0))           # dtype from the components
    out[i, 1] = xsim.quaternion(xsim.vector(x[i], F(1.0), F(0.5)), F(3.0) * x[i])  # (imaginary, real)
    h = xsim.quaternion(xsim.quaternion(1.5, -2.25, 3.0, 0.5, dtype=F), dtype=xsim.float16)  # a cast
    out[i, 2] = xsim.quaternion(h, dtype=F) + xsim.quaternion(dtype=F) * x[i]
    out_f[i] = xsim.quaternion(1.0, 2.0, 3.0, 4.0)                          # literals: float32


def test_funcs_and_builtins_bound_to_locals_run_as_direct_calls():
    x = RNG.uniform(-1.0, 1.0, 8)
    y = xsim.zeros(8, dtype=F)
    xsim.launch(through_locals, 8, inputs=[xsim.array(x, dtype=F), y])
    np.testing.assert_allclose(y.numpy(), x ** 3 + np.cos(x) * 8.0, rtol=1e-12)


def test_builtin_keyword_arguments_follow_warps_parameter_names():
    x = RNG.uniform(-1.0, 1.0, 8)
    y = xsim.zeros(8, dtype=F)
    xsim.launch(by_keyword, 8, inputs=[xsim.array(x, dtype=F), y])
    a = np.abs(x) + 0.5
    np.testing.assert_allclose(y.numpy(), a ** 1.5 + np.arctan2(x, a) + np.clip(x, -0.2, 0.3) + 2.0 * a + x,
                               rtol=1e-12)


@pytest.mark.parametrize("kernel", [through_locals, by_keyword])
def test_gradients_through_locals_and_keywords_match_finite_differences(kernel):
    x = RNG.uniform(-0.9, 0.9, 6)
    x[np.abs(x) < 0.05] = 0.5       # away from abs' kink
    x[np.abs(x - 0.3) < 0.02] = 0.6  # and the clamp's corners
    x[np.abs(x + 0.2) < 0.02] = 0.6
    args = [xsim.array(x, dtype=F, requires_grad=True), xsim.zeros(6, dtype=F, requires_grad=True)]
    report = gradcheck(kernel, args, dim=6, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def _rotate(q, v):
    """``v`` rotated by the unit quaternion ``q = (x, y, z, w)``."""
    u, w = q[:3], q[3]
    return v + 2.0 * np.cross(u, np.cross(u, v) + w * v)


def test_transformation_builds_a_transform_from_keywords_and_constants_are_warps():
    p = RNG.uniform(-1.0, 1.0, (3, 3))
    q = RNG.normal(size=(3, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    out = xsim.zeros(3, dtype=xsim.vec3d)
    xsim.launch(transforms, 3, inputs=[xsim.array(p, dtype=xsim.vec3d), xsim.array(q, dtype=xsim.quatd), out])
    want = np.array([_rotate(q[i], np.array([1.0, 2.0, 3.0])) + p[i] + p[i] * math.pi + 2 * math.pi + 2
                     for i in range(3)])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    assert (xsim.half_pi, xsim.e, xsim.ln2, xsim.log10e) == (math.pi / 2, math.e, math.log(2), 1 / math.log(10))
    assert math.isinf(xsim.inf) and math.isnan(xsim.nan)


@xsim.kernel(module="xsim_tests_call_forms")
def transform_forms(x: A, out: xsim.array(dtype=xsim.transformd, ndim=2)):
    i = xsim.tid()
    out[i, 0] = xsim.transformd(p=xsim.vec3d(x[i], F(2.0), F(3.0)), q=xsim.quatd(F(0.0), x[i], F(0.0), F(1.0)))
    out[i, 1] = xsim.transformd(p=xsim.vec3d(F(1.0), x[i], F(0.0)))  # q: the identity
    out[i, 2] = xsim.transformd(q=xsim.quatd(x[i], F(0.0), F(0.0), F(1.0)))  # p: zero
    out[i, 3] = xsim.transformd(x[i])  # every component
    out[i, 4] = xsim.transformd(xsim.vec3d(x[i], F(0.0), F(0.0)), q=xsim.quat_identity(dtype=F))


def test_transform_types_take_warps_keyword_and_fill_forms():
    x = RNG.uniform(-1.0, 1.0, 3)
    out = xsim.zeros((3, 5), dtype=xsim.transformd)
    xsim.launch(transform_forms, 3, inputs=[xsim.array(x, dtype=F), out])
    z, o = np.zeros_like(x), np.ones_like(x)
    want = np.stack([np.stack([x, 2 * o, 3 * o, z, x, z, o], 1), np.stack([o, x, z, z, z, z, o], 1),
                     np.stack([z, z, z, x, z, z, o], 1), np.tile(x[:, None], 7), np.stack([x, z, z, z, z, z, o], 1)], 1)
    np.testing.assert_array_equal(out.numpy(), want)
    args = [xsim.array(x, dtype=F, requires_grad=True), xsim.zeros((3, 5), dtype=xsim.transformd, requires_grad=True)]
    report = gradcheck(transform_forms, args, dim=3, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def _quaternion_args(requires_grad=False):
    x = RNG.uniform(-1.0, 1.0, 4)
    return [xsim.array(x, dtype=F, requires_grad=requires_grad),
            xsim.zeros((4, 3), dtype=xsim.quatd, requires_grad=requires_grad),
            xsim.zeros(4, dtype=xsim.quatf)]


def test_quaternion_builds_a_quat_from_components_parts_and_casts_as_warps():
    args = _quaternion_args()
    xsim.launch(quaternions, 4, inputs=args)
    x, out, out_f = (a.numpy() for a in args)
    one = np.ones_like(x)
    np.testing.assert_array_equal(out[:, 0], np.stack([x, 2 * one, x * x, 4 * one], 1))
    np.testing.assert_array_equal(out[:, 1], np.stack([x, one, 0.5 * one, 3 * x], 1))
    np.testing.assert_array_equal(out[:, 2], np.tile([1.5, -2.25, 3.0, 0.5], (4, 1)))
    assert args[2].dtype is xsim.quatf and (out_f == [1.0, 2.0, 3.0, 4.0]).all()


def test_quaternion_constructor_gradients_match_finite_differences():
    report = gradcheck(quaternions, _quaternion_args(requires_grad=True), dim=4, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


def test_launch_accepts_warps_block_dim_and_max_blocks_and_refuses_bad_ones():
    x = xsim.array(np.ones(4), dtype=F)
    y = xsim.zeros(4, dtype=F)
    xsim.launch(through_locals, 4, inputs=[x, y], block_dim=64, max_blocks=1)
    np.testing.assert_allclose(y.numpy(), 1.0 + np.cos(1.0) * 8.0)
    with pytest.raises(ValueError, match="block_dim must be a positive int, got 0"):
        xsim.launch(through_locals, 4, inputs=[x, y], block_dim=0)
    with pytest.raises(TypeError, match=r"max_blocks must be an int \(0 or less: no limit\), got 1.5"):
        xsim.launch(through_locals, 4, inputs=[x, y], max_blocks=1.5)


@xsim.func
def bumpy(a: F, v: xsim.vec3d):
    if a > F(0.0):
        return xsim.sin(a) * xsim.dot(v, v) + xsim.exp(a * v[2])
    return a * v[0] - v[1] * v[1]


@xsim.kernel(module="xsim_tests_call_forms", enable_backward=False)
def derivatives(x: A, out: A, out_v: xsim.array(dtype=xsim.vec3d)):
    i = xsim.tid()
    g = xsim.grad(cube)                         # bound to a local, called like the func
    out[i] = g(x[i])
    da, dv = xsim.grad(bumpy)(x[i], xsim.vec3d(F(1.0), x[i] * F(2.0), F(0.5)))
    out[i + 6] = da
    out_v[i] = dv
    gy, gx = xsim.grad(xsim.atan2)(x[i], F(1.5))  # a math builtin: the adjoints of both arguments
    out[i + 12] = gy
    out[i + 18] = gx
    out[i + 24] = xsim.grad(xsim.sqrt)(x[i] * x[i])


def _bumpy(a, v):
    return np.sin(a) * v @ v + np.exp(a * v[2]) if a > 0.0 else a * v[0] - v[1] ** 2


def test_grad_of_a_func_matches_float64_finite_differences():
    x = np.array([0.7, -1.3, 0.2, 1.9, -0.4, 2.5])
    out, out_v = xsim.zeros(30, dtype=F), xsim.zeros(6, dtype=xsim.vec3d)
    xsim.launch(derivatives, 6, inputs=[xsim.array(x, dtype=F), out, out_v])
    h = 1e-6
    np.testing.assert_allclose(out.numpy()[:6], ((x + h) ** 3 - (x - h) ** 3) / (2 * h), rtol=1e-7)
    for i, a in enumerate(x):
        v = np.array([1.0, 2.0 * a, 0.5])
        da = (_bumpy(a + h, v) - _bumpy(a - h, v)) / (2 * h)
        dv = [(_bumpy(a, v + h * e) - _bumpy(a, v - h * e)) / (2 * h) for e in np.eye(3)]
        np.testing.assert_allclose(out.numpy()[6 + i], da, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(out_v.numpy()[i], dv, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(out.numpy()[12:18], (np.arctan2(x + h, 1.5) - np.arctan2(x - h, 1.5)) / (2 * h),
                               rtol=1e-7)
    np.testing.assert_allclose(out.numpy()[18:24], (np.arctan2(x, 1.5 + h) - np.arctan2(x, 1.5 - h)) / (2 * h),
                               rtol=1e-7)
    np.testing.assert_allclose(out.numpy()[24:], (np.sqrt(x * x + h) - np.sqrt(x * x - h)) / (2 * h), rtol=1e-6)


@xsim.kernel
def cpp_named(signed: xsim.array(dtype=F), int8_t: F, auto: xsim.array(dtype=F), template: int):
    # parameter names that are C++ keywords or the runtime's type names (g++ rejected them before)
    i = xsim.tid()
    auto[i] = signed[i] * signed[i] * int8_t + F(template)


def test_parameters_may_take_names_that_are_cpp_keywords():
    x = RNG.uniform(-1.0, 1.0, 5)
    out = xsim.zeros(5, dtype=F)
    xsim.launch(cpp_named, 5, inputs=[xsim.array(x, dtype=F), 1.5, out, 3])
    np.testing.assert_allclose(out.numpy(), x * x * 1.5 + 3.0, rtol=1e-12)
    report = gradcheck(cpp_named, [xsim.array(x, dtype=F, requires_grad=True), 1.5,
                                   xsim.zeros(5, dtype=F, requires_grad=True), 3], dim=5, atol=1e-7, rtol=1e-6)
    assert report.passed, str(report)


@xsim.struct
class Dual:
    """A dual number v + d eps (eps^2 = 0): its operators are the funcs below."""
    v: F
    d: F


@xsim.func
def add(a: Dual, b: Dual):
    return Dual(a.v + b.v, a.d + b.d)


@xsim.func
def mul(a: Dual, b: Dual):
    return Dual(a.v * b.v, a.v * b.d + a.d * b.v)


@xsim.kernel(module="xsim_tests_call_forms")
def dual_polynomial(x: A, acc: xsim.array(dtype=Dual), y: A, dy: A):
    # (x + 1) * x * x with dx = 1: the value and the derivative, through + and * on Dual values, and += on
    # an array element (a func operator makes it read, combine and write back); float + stays the builtin
    i = xsim.tid()
    u = Dual(x[i], F(1.0))
    p = (u + Dual(F(1.0), F(0.0))) * u * u
    acc[i] += p
    y[i] = p.v + F(0.5)
    dy[i] = p.d


def test_funcs_named_like_operators_overload_them_for_their_types():
    x = np.array([0.5, -1.5, 2.0])
    acc = xsim.array([Dual(v=10.0, d=0.0)] * 3, dtype=Dual)
    y, dy = xsim.zeros(3, dtype=F), xsim.zeros(3, dtype=F)
    xsim.launch(dual_polynomial, 3, inputs=[xsim.array(x, dtype=F), acc, y, dy])
    np.testing.assert_allclose(y.numpy(), (x + 1) * x * x + 0.5, rtol=1e-15)
    np.testing.assert_allclose(dy.numpy(), 3 * x * x + 2 * x, rtol=1e-15)
    np.testing.assert_allclose(acc.numpy()["v"], 10.0 + (x + 1) * x * x, rtol=1e-15)
    np.testing.assert_allclose(acc.numpy()["d"], 3 * x * x + 2 * x, rtol=1e-15)
    xg = xsim.array(x, dtype=F, requires_grad=True)
    acc = xsim.zeros(3, dtype=Dual, requires_grad=True)
    outs = [xsim.zeros(3, dtype=F, requires_grad=True) for _ in range(2)]
    report = gradcheck(dual_polynomial, [xg, acc, *outs], outputs=[2, 3], wrt=[0])
    assert report.passed, report


def test_a_kernel_using_an_operator_func_is_rebuilt_when_that_func_changes():
    # the kernel's code does not name `add`: its cache key must still cover it
    def make(body):
        ns = {"xsim": xsim, "F": F}
        exec(compile("@xsim.func\ndef add(a: F, b: F):\n    return " + body + "\n\n"  # noqa: S102
                     "@xsim.kernel(module='unique')\ndef k(x: xsim.array(dtype=F)):\n    x[0] = x[1] + x[2]\n",
                     "operator_funcs.py", "exec"), ns)
        return ns["k"]
    assert make("xsim.mul(a, b)").content_hash() != make("xsim.sub(a, b)").content_hash()
    assert make("xsim.mul(a, b)").content_hash() == make("xsim.mul(a, b)").content_hash()


def test_an_array_element_update_through_an_operator_func_matches_finite_differences(tmp_path):
    # a module whose add(float64, float64) is not addition: `+=` on an array element must use it and be
    # differentiated through it (read, combine, write back)
    path = tmp_path / "slot_operator.py"
    path.write_text("import xsim\nF = xsim.float64\n\n\n@xsim.func\ndef add(a: F, b: F):\n"
                    "    return xsim.add(xsim.mul(a, b), xsim.sin(a))\n\n\n@xsim.kernel(module='unique')\n"
                    "def slot_operator_update(v: xsim.array(dtype=xsim.vec3d), r: xsim.array(dtype=F)):\n"
                    "    i = xsim.tid()\n    v[i].x += r[i]\n")
    spec = importlib.util.spec_from_file_location("slot_operator", path)
    ns = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ns)
    x0, r0 = np.array([[0.3, 1.0, 2.0], [1.2, -0.5, 0.7]]), np.array([0.4, -1.1])
    v = xsim.array(x0, dtype=xsim.vec3d, requires_grad=True)
    r = xsim.array(r0, dtype=F, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(ns.slot_operator_update, 2, inputs=[v, r])
    np.testing.assert_allclose(v.numpy()[:, 0], x0[:, 0] * r0 + np.sin(x0[:, 0]), rtol=1e-15)
    seed = RNG.uniform(0.5, 2.0, (2, 3))
    tape.backward(grads={v: xsim.array(seed, dtype=xsim.vec3d)})

    def out_x(x, rr):
        return x * rr + np.sin(x)
    h = 1e-6
    fd_x = (out_x(x0[:, 0] + h, r0) - out_x(x0[:, 0] - h, r0)) / (2 * h)
    fd_r = (out_x(x0[:, 0], r0 + h) - out_x(x0[:, 0], r0 - h)) / (2 * h)
    np.testing.assert_allclose(v.grad.numpy()[:, 0], seed[:, 0] * fd_x, rtol=1e-8)
    np.testing.assert_allclose(v.grad.numpy()[:, 1:], seed[:, 1:], rtol=1e-15)  # untouched components
    np.testing.assert_allclose(r.grad.numpy(), seed[:, 0] * fd_r, rtol=1e-8)


def test_an_operator_func_takes_literals_as_warp_types_them(tmp_path):
    # with add(float32, float32) in scope, `k = 0 ... k + 1` stays int addition (Warp's literals are int32
    # and float32, so the func does not take two ints) while `1.5 + 2.0` and float32 + literal use the func
    path = tmp_path / "literal_operator.py"
    path.write_text("import xsim\n\n\n@xsim.func\ndef add(a: xsim.float32, b: xsim.float32):\n    return a - b\n\n\n"
                    "@xsim.kernel(module='unique')\ndef literal_operands(n: int, out: xsim.array(dtype=float)):\n"
                    "    k = 0\n    while k < n:\n        k = k + 1\n    out[0] = float(k)\n"
                    "    out[1] = 1.5 + 2.0\n    out[2] = out[0] + 2.0\n")
    spec = importlib.util.spec_from_file_location("literal_operator", path)
    ns = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ns)
    out = xsim.zeros(3, dtype=float)
    xsim.launch(ns.literal_operands, 1, inputs=[3, out])
    np.testing.assert_array_equal(out.numpy(), [3.0, 1.5 - 2.0, 3.0 - 2.0])


NAMESPACE = types.SimpleNamespace(sim=xsim)


@xsim.kernel
def tid_through_a_namespace(values: xsim.array(dtype=xsim.int32, ndim=2)):
    i, j = NAMESPACE.sim.tid()  # xsim reached through an attribute chain: still the 2-d thread index
    values[i, j] = i * 10 + j


def test_tid_called_through_a_namespace_gives_the_launchs_indices():
    values = xsim.zeros((3, 4), dtype=xsim.int32)
    xsim.launch(tid_through_a_namespace, (3, 4), inputs=[values])
    np.testing.assert_array_equal(values.numpy(), np.arange(3)[:, None] * 10 + np.arange(4)[None, :])


NOT_XSIM = types.SimpleNamespace(tid=lambda: 0)


def test_a_tid_attribute_of_something_else_is_not_the_thread_index():
    @xsim.kernel(module="unique")
    def reads_other_tid(values: xsim.array(dtype=xsim.int32)):
        values[0] = NOT_XSIM.tid()

    with pytest.raises(xsim.CompileError, match="cannot call the Python function '<lambda>' in a kernel"):
        xsim.launch(reads_other_tid, 1, inputs=[xsim.zeros(1, dtype=xsim.int32)])
