// xsim native runtime, random numbers: the PCG hash generator of Warp 1.19 (Jarzynski and Olano,
// "Hash Functions for GPU Rendering", JCGT 2020), so that a seed gives Warp's numbers.
// A sampler advances a uint32 state held by the caller. Kernels stay in SSA form, so each sampler
// F is called through two pure wrappers: rv_F(state, ...) gives its value, rs_F(state, ...) the
// advanced state (the frontend rebinds the state variable to it). None is differentiable.
#pragma once

namespace xs {

// Warp's CPU build rounds every product before adding it (no FMA contraction) and g++ contracts
// across inlined calls, so on the CPU the samplers are out-of-line functions compiled without it.
// NVRTC keeps its default contraction, as Warp's CUDA build does.
#if defined(XS_CUDA)
#define XS_RAND_FN XS_FUNC
#else
#define XS_RAND_FN __attribute__((noinline, optimize("fp-contract=off"))) inline
#endif

constexpr float RAND_PI = 3.14159265358979323846f;
// randf gives [0, 1 - 2^-24]; randn adds this so that log() sees a value in (0, 1)
constexpr float RANDN_EPSILON = 5.96e-8f;

XS_FUNC uint32_t rand_pcg(uint32_t state) {
    uint32_t b = state * 747796405u + 2891336453u;
    uint32_t c = ((b >> ((b >> 28u) + 4u)) ^ b) * 277803737u;
    return (c >> 22u) ^ c;
}

template <typename I> XS_FUNC uint32_t rand_init(I seed) { return rand_pcg((uint32_t)seed); }
template <typename I> XS_FUNC uint32_t rand_init(I seed, I offset) {
    return rand_pcg((uint32_t)seed + rand_pcg((uint32_t)offset));
}

XS_RAND_FN int32_t randi(uint32_t& s) { s = rand_pcg(s); return (int32_t)s; }
// the modulo is taken on the unsigned state, as Warp does (a range wider than 2^31 wraps)
XS_RAND_FN int32_t randi(uint32_t& s, int32_t lo, int32_t hi) {
    s = rand_pcg(s);
    return (int32_t)(s % (uint32_t)(hi - lo) + (uint32_t)lo);
}
XS_RAND_FN uint32_t randu(uint32_t& s) { s = rand_pcg(s); return s; }
XS_RAND_FN uint32_t randu(uint32_t& s, uint32_t lo, uint32_t hi) { s = rand_pcg(s); return s % (hi - lo) + lo; }
// the top 24 bits as a multiple of 2^-24: uniform on [0, 1 - 2^-24]
XS_RAND_FN float randf(uint32_t& s) { s = rand_pcg(s); return (float)(s >> 8) * (1.0f / 16777216.0f); }
XS_RAND_FN float randf(uint32_t& s, float lo, float hi) {
    float u = randf(s);
    return (hi - lo) * u + lo;
}
// Box-Muller: the radius draws first, then the angle
XS_RAND_FN float randn(uint32_t& s) {
    float u1 = randf(s);
    float u2 = randf(s);
    return libm::sqrt(-2.f * libm::log(u1 + RANDN_EPSILON)) * libm::cos(2.f * RAND_PI * u2);
}

XS_RAND_FN vec_t<2, float> sample_unit_ring(uint32_t& s) {
    float theta = randf(s, 0.f, 2.f * RAND_PI);
    return {{libm::cos(theta), libm::sin(theta)}};
}
XS_RAND_FN vec_t<2, float> sample_unit_disk(uint32_t& s) {
    float r = libm::sqrt(randf(s));
    float theta = randf(s, 0.f, 2.f * RAND_PI);
    return {{r * libm::cos(theta), r * libm::sin(theta)}};
}
XS_RAND_FN vec_t<2, float> sample_unit_square(uint32_t& s) {
    float x = randf(s) - 0.5f;
    float y = randf(s) - 0.5f;
    return {{x, y}};
}
XS_RAND_FN vec_t<3, float> sample_unit_cube(uint32_t& s) {
    float x = randf(s) - 0.5f;
    float y = randf(s) - 0.5f;
    float z = randf(s) - 0.5f;
    return {{x, y, z}};
}
// a point on the unit sphere (cos(phi) uniform on [1 - 2 zmax, 1]) at radius r
XS_RAND_FN vec_t<3, float> rand_sphere_point(uint32_t& s, float zspan, bool ball) {
    float phi = libm::acos(1.f - zspan * randf(s));
    float theta = randf(s, 0.f, 2.f * RAND_PI);
    float r = ball ? libm::pow(randf(s), 1.f / 3.f) : 1.f;
    float sp = libm::sin(phi);
    return {{r * libm::cos(theta) * sp, r * libm::sin(theta) * sp, r * libm::cos(phi)}};
}
XS_RAND_FN vec_t<3, float> sample_unit_sphere_surface(uint32_t& s) { return rand_sphere_point(s, 2.f, false); }
XS_RAND_FN vec_t<3, float> sample_unit_sphere(uint32_t& s) { return rand_sphere_point(s, 2.f, true); }
XS_RAND_FN vec_t<3, float> sample_unit_hemisphere_surface(uint32_t& s) { return rand_sphere_point(s, 1.f, false); }
XS_RAND_FN vec_t<3, float> sample_unit_hemisphere(uint32_t& s) { return rand_sphere_point(s, 1.f, true); }

// log(Gamma(x)) by the SPECFUN series (Zhang and Jin, 1996), in float as Warp computes it
XS_RAND_FN float rand_loggam(float x) {
    const float a[10] = {8.333333333333333e-02f, -2.777777777777778e-03f, 7.936507936507937e-04f,
                         -5.952380952380952e-04f, 8.417508417508418e-04f, -1.917526917526918e-03f,
                         6.410256410256410e-03f, -2.955065359477124e-02f, 1.796443723688307e-01f,
                         -1.39243221690590e+00f};
    if (x == 1.f || x == 2.f) return 0.f;
    uint32_t n = x < 7.f ? (uint32_t)(7 - x) : 0u;
    float x0 = x + (float)n;
    float x2 = (1.f / x0) * (1.f / x0);
    float gl0 = a[9];
    for (int i = 8; i >= 0; i--) gl0 = gl0 * x2 + a[i];
    float gl = gl0 / x0 + 0.5f * 1.8378770664093453f + (x0 - 0.5f) * libm::log(x0) - x0;
    for (uint32_t k = 1; k <= n; k++) {
        gl -= libm::log(x0 - 1.f);
        x0 -= 1.f;
    }
    return gl;
}

// Poisson by multiplying uniforms (small lam) or Hoermann's transformed rejection (lam >= 10:
// "The transformed rejection method for generating Poisson random variables", 1993)
XS_RAND_FN uint32_t poisson(uint32_t& s, float lam) {
    if (!(lam >= 10.f)) {
        if (lam == 0.f) return 0u;
        float enlam = libm::exp(-lam);
        uint32_t x = 0;
        float prod = 1.f;
        while (true) {
            prod *= randf(s);
            if (!(prod > enlam)) return x;
            x += 1;
        }
    }
    float slam = libm::sqrt(lam), loglam = libm::log(lam);
    float b = 0.931f + 2.53f * slam;
    float a = -0.059f + 0.02483f * b;
    float invalpha = 1.1239f + 1.1328f / (b - 3.4f);
    float vr = 0.9277f - 3.6224f / (b - 2.f);
    while (true) {
        float u = randf(s) - 0.5f;
        float v = randf(s);
        float us = 0.5f - libm::fabs(u);
        float k = libm::floor((2.f * a / us + b) * u + lam + 0.43f);
        if (us >= 0.07f && v <= vr) return (uint32_t)k;
        if (k < 0.f || (us < 0.013f && v > us)) continue;
        if (libm::log(v) + libm::log(invalpha) - libm::log(a / (us * us) + b) <=
            -lam + k * loglam - rand_loggam(k + 1.f))
            return (uint32_t)k;
    }
}

#define XS_RANDOM_PURE(F)                                                                            \
    template <typename... A> XS_FUNC auto rv_##F(uint32_t s, A... a) { return F(s, a...); }         \
    template <typename... A> XS_FUNC uint32_t rs_##F(uint32_t s, A... a) { F(s, a...); return s; }
XS_RANDOM_PURE(randi) XS_RANDOM_PURE(randu) XS_RANDOM_PURE(randf) XS_RANDOM_PURE(randn)
XS_RANDOM_PURE(sample_unit_ring) XS_RANDOM_PURE(sample_unit_disk) XS_RANDOM_PURE(sample_unit_square)
XS_RANDOM_PURE(sample_unit_cube) XS_RANDOM_PURE(sample_unit_sphere_surface) XS_RANDOM_PURE(sample_unit_sphere)
XS_RANDOM_PURE(sample_unit_hemisphere_surface) XS_RANDOM_PURE(sample_unit_hemisphere) XS_RANDOM_PURE(poisson)
#undef XS_RANDOM_PURE
#undef XS_RAND_FN

}  // namespace xs
