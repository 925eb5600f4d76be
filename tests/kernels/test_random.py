"""Random numbers: the same kernel source run in xsim and in Warp 1.19 (CPU) gives the same numbers
for the same seeds; samplers advance the state through branches and dynamic loops as Warp's
``uint32&`` does; they carry no gradient."""

from __future__ import annotations

import numpy as np
import pytest

import xsim
from xsim.autodiff.gradcheck import gradcheck
from xsim.kernels.generated import load_source

try:
    import warp as wp
except ImportError:  # the comparisons with Warp need warp-lang (the test extra); the others run without it
    wp = None
else:
    wp.config.quiet = True
    wp.init()

N = 64
DRAWS = 3
# (sampler call, output components): each draws DRAWS times per thread from rand_init(seed, tid)
SAMPLES = {
    "randi": ("m.randi(s)", 1), "randi_range": ("m.randi(s, -7, 100)", 1),
    "randu": ("m.randu(s)", 1), "randu_range": ("m.randu(s, m.uint32(3), m.uint32(1000))", 1),
    "randf": ("m.randf(s)", 1), "randf_range": ("m.randf(s, -2.5, 4.0)", 1), "randn": ("m.randn(s)", 1),
    "ring": ("m.sample_unit_ring(s)", 2), "disk": ("m.sample_unit_disk(s)", 2),
    "square": ("m.sample_unit_square(s)", 2), "cube": ("m.sample_unit_cube(s)", 3),
    "triangle": ("m.sample_triangle(s)", 2),
    "sphere": ("m.sample_unit_sphere(s)", 3), "sphere_surface": ("m.sample_unit_sphere_surface(s)", 3),
    "hemisphere": ("m.sample_unit_hemisphere(s)", 3),
    "hemisphere_surface": ("m.sample_unit_hemisphere_surface(s)", 3),
    "poisson_small": ("m.poisson(s, 3.5)", 1), "poisson_large": ("m.poisson(s, 40.0)", 1),
}
# (noise call on the position p = pos[i] (a vec4), output type): read the state, never advance it
P1, P2, P3 = "p[0]", "m.vec2(p[0], p[1])", "m.vec3(p[0], p[1], p[2])"
NOISES = {
    "noise1": (f"m.noise(s, {P1})", "float32"), "noise2": (f"m.noise(s, {P2})", "float32"),
    "noise3": (f"m.noise(s, {P3})", "float32"), "noise4": ("m.noise(s, p)", "float32"),
    "pnoise1": (f"m.pnoise(s, {P1}, 3)", "float32"), "pnoise2": (f"m.pnoise(s, {P2}, 3, 4)", "float32"),
    "pnoise3": (f"m.pnoise(s, {P3}, 3, 4, 5)", "float32"),
    "pnoise4": ("m.pnoise(s, p, 3, 4, 5, 2)", "float32"),
    "curl2": (f"m.curlnoise(s, {P2})", "vec2"),
    "curl3": (f"m.curlnoise(s, {P3}, m.uint32(3), 2.0, 0.5)", "vec3"),
    "curl4": ("m.curlnoise(s, p, m.uint32(2), 1.5, 0.7)", "vec3"),
}
TYPES = {"randi": "int32", "randi_range": "int32", "randu": "uint32", "randu_range": "uint32",
         "poisson_small": "uint32", "poisson_large": "uint32"}


def kernel_source(name: str, call: str, comps: int) -> str:
    dtype = TYPES.get(name, "float32" if comps == 1 else f"vec{comps}")
    lines = ["@m.kernel", f"def k_{name}(seed: int, out: m.array(dtype=m.{dtype}, ndim=2)):",
             "    i = m.tid()",
             "    s = m.rand_init(seed, i)"]
    lines += [f"    out[i, {d}] = {call}" for d in range(DRAWS)]
    return "\n".join(lines) + "\n"


def build(module_name: str):
    """The kernels of this file in ``module_name`` (xsim or warp), from one generated source file
    (Warp reads kernel source from a file), written once per content."""
    src = f"import {module_name} as m\n\n" + "".join(kernel_source(n, c, k) for n, (c, k) in SAMPLES.items())
    for name, (call, dtype) in NOISES.items():
        src += (f"@m.kernel\ndef k_{name}(seed: int, pos: m.array(dtype=m.vec4), out: m.array(dtype=m.{dtype})):\n"
                f"    i = m.tid()\n    s = m.rand_init(seed)\n    p = pos[i]\n    out[i] = {call}\n")
    src += """
@m.kernel
def k_flow(seed: int, n: int, out: m.array(dtype=m.float32, ndim=2)):
    i = m.tid()
    s = m.rand_init(seed)
    if i % 2 == 0:
        out[i, 0] = m.randf(s)
    acc = float(0.0)
    for j in range(n + i % 3):
        acc += m.randf(s)
    out[i, 1] = acc
    out[i, 2] = float(m.randi(s, 0, 1000))
"""
    mod = load_source(src, f"random_kernels_{module_name}")
    return {n.removeprefix("k_"): getattr(mod, n) for n in dir(mod) if n.startswith("k_")}


XSIM_KERNELS = build("xsim")  # at import, so the NVRTC walk (tests/cuda) compiles them too


@pytest.fixture(scope="module")
def kernels():
    return XSIM_KERNELS, None if wp is None else build("warp")


def need_warp(warp_kernels):
    if warp_kernels is None:
        pytest.skip("Warp is not installed (pip install -e '.[test]'): no numbers to compare with")


def run_both(kernels, name, inputs, dtype_name, shape):
    xk, wk = kernels
    need_warp(wk)
    xo = xsim.zeros(shape, dtype=getattr(xsim, dtype_name))
    xsim.launch(xk[name], shape[0], inputs=[*inputs, xo])
    wo = wp.zeros(shape, dtype=getattr(wp, dtype_name), device="cpu")
    wp.launch(wk[name], shape[0], inputs=[*inputs, wo], device="cpu")
    return xo.numpy(), wo.numpy()


@pytest.mark.parametrize("name", list(SAMPLES))
@pytest.mark.parametrize("seed", [0, 12345, -7])
def test_sampler_gives_warps_numbers_for_a_seed(kernels, name, seed):
    comps = SAMPLES[name][1]
    dtype = TYPES.get(name, "float32" if comps == 1 else f"vec{comps}")
    got, want = run_both(kernels, name, [seed], dtype, (N, DRAWS))
    np.testing.assert_array_equal(got, want)  # bit-equal: the same generator and arithmetic


POSITIONS = np.random.default_rng(3).uniform(-6.0, 6.0, (N, 4)).astype(np.float32)


@pytest.mark.parametrize("name", list(NOISES))
@pytest.mark.parametrize("seed", [0, 4242])
def test_noise_gives_warps_numbers_for_a_seed(kernels, name, seed):
    xk, wk = kernels
    need_warp(wk)
    dtype = NOISES[name][1]
    xo = xsim.zeros(N, dtype=getattr(xsim, dtype))
    xsim.launch(xk[name], N, inputs=[seed, xsim.array(POSITIONS, dtype=xsim.vec4), xo])
    wo = wp.zeros(N, dtype=getattr(wp, dtype), device="cpu")
    wp.launch(wk[name], N, inputs=[seed, wp.array(POSITIONS, dtype=wp.vec4, device="cpu"), wo], device="cpu")
    np.testing.assert_array_equal(xo.numpy(), wo.numpy())
    assert np.abs(xo.numpy()).max() > 0.01  # not all zero


def test_pnoise_repeats_with_its_period_on_positive_coordinates(kernels):
    # the lattice wraps with C's %, as in Warp: across zero (negative cells) it does not repeat
    xk, _ = kernels
    base = np.abs(POSITIONS)
    shifted = base + np.array([3.0, 4.0, 5.0, 2.0], np.float32) * np.array([2.0, 1.0, 1.0, 3.0], np.float32)
    outs = []
    for pos in (base, shifted):
        out = xsim.zeros(N, dtype=xsim.float32)
        xsim.launch(xk["pnoise4"], N, inputs=[7, xsim.array(pos, dtype=xsim.vec4), out])
        outs.append(out.numpy())
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)  # the shift is whole periods (up to rounding)


@pytest.mark.parametrize("name", ["noise1", "noise2", "noise3", "noise4", "pnoise3", "curl2", "curl3", "curl4"])
def test_noise_gradient_matches_finite_differences(kernels, name):
    xk, _ = kernels
    pos = xsim.array(POSITIONS[:8], dtype=xsim.vec4)
    out = xsim.zeros(8, dtype=getattr(xsim, NOISES[name][1]))
    # float32 (the only precision Warp's noise has): a step of 1e-3 in a C2 field, tolerances to match
    report = gradcheck(xk[name], [5, pos, out], dim=8, outputs=["out"], wrt=["pos"], eps=1e-3, atol=2e-2, rtol=2e-2)
    report.assert_ok()


def test_sampler_state_flows_through_branches_and_dynamic_loops_as_in_warp(kernels):
    got, want = run_both(kernels, "flow", [99, 4], "float32", (N, 3))
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got[:, 1])) > 1  # the loop length varies per thread, so do the sums


def test_rand_init_offset_decorrelates_threads_and_randf_is_uniform(kernels):
    got, _ = run_both(kernels, "randf", [5], "float32", (N, DRAWS))
    assert len(np.unique(got)) == got.size
    assert np.all((got >= 0.0) & (got < 1.0))


@xsim.kernel
def draws_until(out: xsim.array(dtype=int), again: xsim.array(dtype=int)):
    i = xsim.tid()
    s = xsim.rand_init(11, i)
    n = int(0)
    while xsim.randf(s) < 0.9:  # the condition advances the state on every test
        n += 1
    out[i] = n
    t = xsim.rand_init(11, i)
    m = int(0)
    u = xsim.randf(t)
    while u < 0.9:
        m += 1
        u = xsim.randf(t)
    again[i] = m


def test_sampler_in_a_while_condition_advances_its_state_each_test():
    out, again = xsim.zeros(4000, dtype=int), xsim.zeros(4000, dtype=int)
    xsim.launch(draws_until, 4000, outputs=[out, again])
    np.testing.assert_array_equal(out.numpy(), again.numpy())
    assert 8.5 < out.numpy().mean() < 9.5  # geometric: 0.9 / 0.1 draws below 0.9 before the first above


@xsim.kernel
def scaled_draw(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    s = xsim.rand_init(7, i)
    y[i] = x[i] * xsim.randf(s, x[i], 2.0)


def test_samplers_carry_no_gradient_but_the_values_they_scale_do():
    x = xsim.array(np.linspace(0.1, 0.9, 8), dtype=float, requires_grad=True)
    y = xsim.zeros(8, dtype=float, requires_grad=True)
    tape = xsim.Tape()
    with tape:
        xsim.launch(scaled_draw, 8, inputs=[x], outputs=[y])
    tape.backward(grads={y: xsim.array(np.ones(8), dtype=float)})
    xs = x.numpy().astype(np.float64)
    u = (y.numpy() / xs - xs) / (2.0 - xs)  # the uniform draw behind each value
    # d/dx [x * ((2 - x) u + x)] with the draw u held fixed: the range's lower bound gets no gradient
    np.testing.assert_allclose(x.grad.numpy(), (2.0 - xs) * u + xs, rtol=1e-5)


def test_sampler_without_a_uint32_state_is_refused_with_the_line():
    @xsim.kernel
    def bad(out: xsim.array(dtype=float)):
        out[0] = xsim.randf(3.0)

    with pytest.raises(xsim.CompileError, match=r"xsim.randf\(3.0\)(?s:.*)randf\(\) takes a uint32 random state"):
        xsim.launch(bad, 1, outputs=[xsim.zeros(1, dtype=float)])


def test_sampler_with_wrong_argument_types_lists_its_overloads():
    @xsim.kernel
    def bad(out: xsim.array(dtype=float)):
        s = xsim.rand_init(1)
        out[0] = xsim.randf(s, 1.0)

    with pytest.raises(xsim.CompileError, match=r"no overload of 'randf' takes \(uint32, float32\)"):
        xsim.launch(bad, 1, outputs=[xsim.zeros(1, dtype=float)])
