// xsim native runtime, random numbers: the PCG hash generator of Warp 1.19 (Jarzynski and Olano,
// "Hash Functions for GPU Rendering", JCGT 2020), so that a seed gives Warp's numbers.
// A sampler advances a uint32 state held by the caller. Kernels stay in SSA form, so each sampler
// F is called through two pure wrappers: rv_F(state, ...) gives its value, rs_F(state, ...) the
// advanced state (the frontend rebinds the state variable to it). None is differentiable.
#pragma once

namespace xs {

// Warp's CPU build rounds every product before adding it (no FMA contraction) and g++ contracts
// across inlined calls, so on the CPU the samplers are out-of-line functions compiled without it
// (bit-equality with Warp is tested with g++; clang ignores the attribute). NVRTC keeps its default
// contraction; GPU numbers have not been compared with Warp's CUDA build.
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
// barycentric (u, v) of a uniform point in a triangle
XS_RAND_FN vec_t<2, float> sample_triangle(uint32_t& s) {
    float r = libm::sqrt(randf(s));
    float u = 1.f - r;
    float v = randf(s) * r;
    return {{u, v}};
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

// ------------------------------------------------------------------------------------------
// Perlin gradient noise on the integer lattice, in 1 to 4 dimensions (Warp's noise, pnoise,
// curlnoise): random unit gradients hashed from the lattice point and the state, blended with
// the smootherstep 6t^5 - 15t^4 + 10t^3 one axis at a time, x first. A jet carries the value,
// its gradient and (for curlnoise's adjoint) its Hessian with respect to the position.

template <int N> struct noise_jet {
    float v;
    float g[N];
    float h[N][N];
};

XS_RAND_FN float smootherstep(float t) { return t * t * t * (t * (t * 6.f - 15.f) + 10.f); }
XS_RAND_FN float smootherstep_d1(float t) { return 30.f * t * t * (t * (t - 2.f) + 1.f); }
XS_RAND_FN float smootherstep_d2(float t) { return 60.f * t * (t * (t * 2.f - 3.f) + 1.f); }

// the gradient at lattice point c: randf in [-1, 1) in 1-d, else a normalized uniform cube sample
template <int N> XS_RAND_FN void noise_lattice_gradient(uint32_t state, const int32_t* c, float* g) {
    const uint32_t P[4] = {73856093u, 19349663u, 53471161u, 10000019u};
    uint32_t idx = (uint32_t)c[N - 1] * P[N - 1] + state;
    for (int k = N - 2; k >= 0; --k) idx ^= (uint32_t)c[k] * P[k];
    if (N == 1) {
        g[0] = randf(idx, -1.f, 1.f);
        return;
    }
    for (int k = 0; k < N; ++k) g[k] = randf(idx) - 0.5f;
    float l2 = g[0] * g[0];
    for (int k = 1; k < N; ++k) l2 = l2 + g[k] * g[k];
    float l = libm::sqrt(l2);
    for (int k = 0; k < N; ++k) g[k] = l > 0.f ? g[k] / l : 0.f;
}

// the noise jet at fractional position f inside the cell whose corners are lo[k] / hi[k] per axis
template <int N>
XS_RAND_FN noise_jet<N> noise_cell(uint32_t state, const int32_t* lo, const int32_t* hi, const float* f, bool hessian) {
    noise_jet<N> j[1 << N];
    for (int corner = 0; corner < (1 << N); ++corner) {
        int32_t c[N];
        float d[N];
        for (int k = 0; k < N; ++k) {
            bool up = (corner >> k) & 1;
            c[k] = up ? hi[k] : lo[k];
            d[k] = up ? f[k] - 1.f : f[k];
        }
        noise_lattice_gradient<N>(state, c, j[corner].g);
        float v = d[0] * j[corner].g[0];
        for (int k = 1; k < N; ++k) v = v + d[k] * j[corner].g[k];
        j[corner].v = v;
        for (int a = 0; a < N; ++a)
            for (int b = 0; b < N; ++b) j[corner].h[a][b] = 0.f;
    }
    // blend along axis k: pairs (bit k clear, bit k set) of the remaining corners
    for (int k = 0, n = 1 << N; k < N; ++k, n >>= 1) {
        float t = f[k], s = smootherstep(t), s1 = smootherstep_d1(t), s2 = hessian ? smootherstep_d2(t) : 0.f;
        for (int i = 0; i < n / 2; ++i) {
            const noise_jet<N>& a = j[2 * i];
            const noise_jet<N>& b = j[2 * i + 1];
            noise_jet<N> r;
            float dv = b.v - a.v;
            r.v = dv * s + a.v;
            for (int m = 0; m < N; ++m) r.g[m] = (b.g[m] - a.g[m]) * s + dv * s1 * (m == k ? 1.f : 0.f) + a.g[m];
            if (hessian) {
                for (int p = 0; p < N; ++p)
                    for (int q = 0; q < N; ++q)
                        r.h[p][q] = (b.h[p][q] - a.h[p][q]) * s + a.h[p][q] +
                                    ((p == k ? b.g[q] - a.g[q] : 0.f) + (q == k ? b.g[p] - a.g[p] : 0.f)) * s1 +
                                    (p == k && q == k ? dv * s2 : 0.f);
            } else {
                for (int p = 0; p < N; ++p)
                    for (int q = 0; q < N; ++q) r.h[p][q] = 0.f;
            }
            j[i] = r;
        }
    }
    return j[0];
}

// the cell of position x (periods px > 0 wrap the lattice with C's %, as Warp does; 0: no period)
template <int N>
XS_RAND_FN noise_jet<N> noise_at(uint32_t state, const float* x, const int32_t* period, bool hessian) {
    int32_t lo[N], hi[N];
    float f[N];
    for (int k = 0; k < N; ++k) {
        float fl = libm::floor(x[k]);
        f[k] = x[k] - fl;
        lo[k] = (int32_t)fl;
        hi[k] = lo[k] + 1;
        if (period) {
            lo[k] = lo[k] % period[k];
            hi[k] = (lo[k] + 1) % period[k];
        }
    }
    return noise_cell<N>(state, lo, hi, f, hessian);
}

template <int N> XS_FUNC const float* noise_ptr(const vec_t<N, float>& x) { return x.c; }
XS_FUNC const float* noise_ptr(const float& x) { return &x; }
template <int N> XS_FUNC void noise_accum(vec_t<N, float>& adj, const float* g, float w) {
    for (int k = 0; k < N; ++k) adj.c[k] += g[k] * w;
}
XS_FUNC void noise_accum(float& adj, const float* g, float w) { adj += g[0] * w; }

template <typename X> struct noise_dim { static constexpr int value = 1; };
template <int N> struct noise_dim<vec_t<N, float>> { static constexpr int value = N; };

template <typename X> XS_FUNC float noise(uint32_t state, X x) {
    return noise_at<noise_dim<X>::value>(state, noise_ptr(x), nullptr, false).v;
}
template <typename X> XS_FUNC void adj_noise(uint32_t state, X x, float, uint32_t, X& adj_x, float adj_ret) {
    noise_accum(adj_x, noise_at<noise_dim<X>::value>(state, noise_ptr(x), nullptr, false).g, adj_ret);
}
// pnoise: the lattice wraps with integer periods, which take no adjoint (the codegen passes {} for them)
XS_FUNC float pnoise(uint32_t s, float x, int32_t px) {
    const int32_t p[] = {px};
    return noise_at<1>(s, &x, p, false).v;
}
XS_FUNC float pnoise(uint32_t s, vec_t<2, float> x, int32_t px, int32_t py) {
    const int32_t p[] = {px, py};
    return noise_at<2>(s, x.c, p, false).v;
}
XS_FUNC float pnoise(uint32_t s, vec_t<3, float> x, int32_t px, int32_t py, int32_t pz) {
    const int32_t p[] = {px, py, pz};
    return noise_at<3>(s, x.c, p, false).v;
}
XS_FUNC float pnoise(uint32_t s, vec_t<4, float> x, int32_t px, int32_t py, int32_t pz, int32_t pt) {
    const int32_t p[] = {px, py, pz, pt};
    return noise_at<4>(s, x.c, p, false).v;
}
XS_FUNC void adj_pnoise(uint32_t s, float x, int32_t px, float, uint32_t, float& adj_x, int32_t, float adj_ret) {
    const int32_t p[] = {px};
    adj_x += noise_at<1>(s, &x, p, false).g[0] * adj_ret;
}
XS_FUNC void adj_pnoise(uint32_t s, vec_t<2, float> x, int32_t px, int32_t py, float, uint32_t,
                        vec_t<2, float>& adj_x, int32_t, int32_t, float adj_ret) {
    const int32_t p[] = {px, py};
    noise_accum(adj_x, noise_at<2>(s, x.c, p, false).g, adj_ret);
}
XS_FUNC void adj_pnoise(uint32_t s, vec_t<3, float> x, int32_t px, int32_t py, int32_t pz, float, uint32_t,
                        vec_t<3, float>& adj_x, int32_t, int32_t, int32_t, float adj_ret) {
    const int32_t p[] = {px, py, pz};
    noise_accum(adj_x, noise_at<3>(s, x.c, p, false).g, adj_ret);
}
XS_FUNC void adj_pnoise(uint32_t s, vec_t<4, float> x, int32_t px, int32_t py, int32_t pz, int32_t pt, float,
                        uint32_t, vec_t<4, float>& adj_x, int32_t, int32_t, int32_t, int32_t, float adj_ret) {
    const int32_t p[] = {px, py, pz, pt};
    noise_accum(adj_x, noise_at<4>(s, x.c, p, false).g, adj_ret);
}

// curl of (1, 2 or 3) noise potentials summed over octaves; the 3- and 4-d forms re-seed their
// second and third potential with rand_init, carried from octave to octave as Warp does
template <int N, int M>
XS_RAND_FN void curlnoise_octaves(uint32_t state, const float* x, uint32_t octaves, float lacunarity, float gain,
                                  float (*sums)[N], float (*hess)[N][N]) {
    float freq = 1.f, amplitude = 1.f;
    for (uint32_t i = 0; i < octaves; ++i) {
        float pt[N];
        for (int k = 0; k < N; ++k) pt[k] = freq * x[k];
        for (int m = 0; m < M; ++m) {
            if (m > 0) state = rand_init(state, (uint32_t)(m == 1 ? 10019689 : 13112221));
            noise_jet<N> jet = noise_at<N>(state, pt, nullptr, hess != nullptr);
            if (sums)
                for (int k = 0; k < N; ++k) sums[m][k] = sums[m][k] + amplitude * jet.g[k];
            if (hess)
                for (int p = 0; p < N; ++p)
                    for (int q = 0; q < N; ++q) hess[m][p][q] += amplitude * freq * jet.h[p][q];
        }
        amplitude *= gain;
        freq *= lacunarity;
    }
}

XS_FUNC vec_t<2, float> curlnoise(uint32_t state, vec_t<2, float> x, uint32_t octaves, float lacunarity, float gain) {
    float s[1][2] = {{0.f, 0.f}};
    curlnoise_octaves<2, 1>(state, x.c, octaves, lacunarity, gain, s, nullptr);
    return {{-s[0][1], s[0][0]}};
}
template <int N>
XS_FUNC vec_t<3, float> curlnoise(uint32_t state, vec_t<N, float> x, uint32_t octaves, float lacunarity, float gain) {
    float s[3][N] = {};
    curlnoise_octaves<N, 3>(state, x.c, octaves, lacunarity, gain, s, nullptr);
    return {{s[2][1] - s[1][2], s[0][2] - s[2][0], s[1][0] - s[0][1]}};
}
// d curl / dx from the potentials' Hessians (amplitude and frequency weighted)
XS_FUNC void adj_curlnoise(uint32_t state, vec_t<2, float> x, uint32_t octaves, float lacunarity, float gain,
                           vec_t<2, float>, uint32_t, vec_t<2, float>& adj_x, uint32_t, float, float,
                           vec_t<2, float> adj_ret) {
    float h[1][2][2] = {};
    curlnoise_octaves<2, 1>(state, x.c, octaves, lacunarity, gain, nullptr, h);
    for (int c = 0; c < 2; ++c) adj_x.c[c] += -h[0][1][c] * adj_ret.c[0] + h[0][0][c] * adj_ret.c[1];
}
template <int N>
XS_FUNC void adj_curlnoise(uint32_t state, vec_t<N, float> x, uint32_t octaves, float lacunarity, float gain,
                           vec_t<3, float>, uint32_t, vec_t<N, float>& adj_x, uint32_t, float, float,
                           vec_t<3, float> adj_ret) {
    float h[3][N][N] = {};
    curlnoise_octaves<N, 3>(state, x.c, octaves, lacunarity, gain, nullptr, h);
    for (int c = 0; c < N; ++c)
        adj_x.c[c] += adj_ret.c[0] * (h[2][1][c] - h[1][2][c]) + adj_ret.c[1] * (h[0][2][c] - h[2][0][c]) +
                      adj_ret.c[2] * (h[1][0][c] - h[0][1][c]);
}

#define XS_RANDOM_PURE(F)                                                                            \
    template <typename... A> XS_FUNC auto rv_##F(uint32_t s, A... a) { return F(s, a...); }         \
    template <typename... A> XS_FUNC uint32_t rs_##F(uint32_t s, A... a) { F(s, a...); return s; }
XS_RANDOM_PURE(randi) XS_RANDOM_PURE(randu) XS_RANDOM_PURE(randf) XS_RANDOM_PURE(randn)
XS_RANDOM_PURE(sample_unit_ring) XS_RANDOM_PURE(sample_unit_disk) XS_RANDOM_PURE(sample_unit_square)
XS_RANDOM_PURE(sample_unit_cube) XS_RANDOM_PURE(sample_unit_sphere_surface) XS_RANDOM_PURE(sample_unit_sphere)
XS_RANDOM_PURE(sample_unit_hemisphere_surface) XS_RANDOM_PURE(sample_unit_hemisphere) XS_RANDOM_PURE(poisson)
XS_RANDOM_PURE(sample_triangle)
#undef XS_RANDOM_PURE
#undef XS_RAND_FN

}  // namespace xs
