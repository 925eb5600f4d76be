// xsim native runtime, the rest of Warp's scalar and vector math library: interpolation, steps,
// rounding, the error function and its inverses, NaN/inf tests of composites, vector reductions,
// bit casts. Each forward function sits next to its adjoint adj_<f>(args..., ret, adj_args&..., adj_ret).
#pragma once
#include "xsim_vector.h"

namespace xs {

namespace libm {
XS_FUNC float rint(float x) { return ::rintf(x); }
XS_FUNC double rint(double x) { return ::rint(x); }
XS_FUNC float erf(float x) { return ::erff(x); }
XS_FUNC double erf(double x) { return ::erf(x); }
XS_FUNC float erfc(float x) { return ::erfcf(x); }
XS_FUNC double erfc(double x) { return ::erfc(x); }
}  // namespace libm

// ------------------------------------------------------------------------------------------
// interpolation: a (1 - t) + b t, for scalars and every composite

template <typename T> XS_FUNC scalar_ret<T> lerp(T a, T b, T t) { return a * (T(1) - t) + b * t; }
template <typename T> XS_FUNC scalar_ret<T, void> adj_lerp(T a, T b, T t, T, T& adj_a, T& adj_b, T& adj_t, T adj_ret) {
    adj_a += (T(1) - t) * adj_ret;
    adj_b += t * adj_ret;
    adj_t += (b - a) * adj_ret;
}

template <typename V> XS_FUNC composite_ret<V> lerp(const V& a, const V& b, scalar_of<V> t) {
    return add(mul(a, scalar_of<V>(1) - t), mul(b, t));
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_lerp(const V& a, const V& b, scalar_of<V> t, const V&, V& adj_a, V& adj_b,
                                        scalar_of<V>& adj_t, const V& adj_ret) {
    for (int i = 0; i < composite_traits<V>::size; ++i) {
        comp(adj_a, i) += (scalar_of<V>(1) - t) * comp(adj_ret, i);
        comp(adj_b, i) += t * comp(adj_ret, i);
        adj_t += (comp(b, i) - comp(a, i)) * comp(adj_ret, i);
    }
}

// The cubic Hermite step 3u^2 - 2u^3 of u = clamp((x - a) / (b - a), 0, 1); flat (zero gradient) outside.
template <typename T> XS_FUNC T smoothstep(T a, T b, T x) {
    T u = clamp((x - a) / (b - a), T(0), T(1));
    return u * u * (T(3) - T(2) * u);
}
template <typename T> XS_FUNC void adj_smoothstep(T a, T b, T x, T, T& adj_a, T& adj_b, T& adj_x, T adj_ret) {
    T d = b - a, u = (x - a) / d;
    if (!(u > T(0) && u < T(1))) return;
    T g = T(6) * u * (T(1) - u) * adj_ret / d;  // d result / d x
    adj_x += g;
    adj_a += g * (u - T(1));
    adj_b -= g * u;
}

// ------------------------------------------------------------------------------------------
// steps and rounding (piecewise constant: zero gradient), frac (slope 1)

template <typename T> XS_FUNC T step(T x) { return x < T(0) ? T(1) : T(0); }
template <typename T> XS_FUNC void adj_step(T, T, T&, T) {}

template <typename T> XS_FUNC T nonzero(T x) { return x == T(0) ? T(0) : T(1); }
template <typename T> XS_FUNC void adj_nonzero(T, T, T&, T) {}

// Halves go to the even neighbour (the default rounding mode), as numpy.rint.
template <typename T> XS_FUNC T rint(T x) { return libm::rint(x); }
template <typename T> XS_FUNC void adj_rint(T, T, T&, T) {}

template <typename T> XS_FUNC T frac(T x) { return x - libm::trunc(x); }
template <typename T> XS_FUNC void adj_frac(T, T, T& adj_x, T adj_ret) { adj_x += adj_ret; }

// ------------------------------------------------------------------------------------------
// the error function and its inverses

template <typename T> XS_FUNC T two_over_sqrt_pi() { return T(1.1283791670955125739); }

template <typename T> XS_FUNC T erf(T x) { return libm::erf(x); }
template <typename T> XS_FUNC void adj_erf(T x, T, T& adj_x, T adj_ret) {
    adj_x += two_over_sqrt_pi<T>() * libm::exp(-x * x) * adj_ret;
}

template <typename T> XS_FUNC T erfc(T x) { return libm::erfc(x); }
template <typename T> XS_FUNC void adj_erfc(T x, T, T& adj_x, T adj_ret) {
    adj_x -= two_over_sqrt_pi<T>() * libm::exp(-x * x) * adj_ret;
}

// First guess of erfinv(y) from w = -log((1 - y)(1 + y)), the single-precision rational fit of
// M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011); Newton steps on erf
// (or erfc) then refine it to the working precision. Taking w from the caller lets erfcinv form
// (1 - y)(1 + y) = c (2 - c) from c = 1 - y without cancellation.
XS_FUNC double erfinv_guess(double y, double w) {
    double p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = libm::sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    return p * y;
}

// erfinv(y) for y in [-1, 1]: +-inf at +-1, NaN outside.
template <typename T> XS_FUNC T erfinv(T y) {
    if (!(y > T(-1) && y < T(1))) return y == T(1) ? special_float<T>(1) : (y == T(-1) ? special_float<T>(-1) : special_float<T>(0));
    double yd = (double)y, x = erfinv_guess(yd, -libm::log((1.0 - yd) * (1.0 + yd)));
    for (int k = 0; k < 3; ++k) {
        double slope = two_over_sqrt_pi<double>() * libm::exp(-x * x);
        if (slope == 0.0) break;
        x -= (libm::erf(x) - yd) / slope;
    }
    return T(x);
}
template <typename T> XS_FUNC void adj_erfinv(T, T ret, T& adj_x, T adj_ret) {
    adj_x += adj_ret / (two_over_sqrt_pi<T>() * libm::exp(-ret * ret));
}

// erfcinv(c) = erfinv(1 - c) for c in [0, 2], accurate for tiny c (the tail), where 1 - c rounds to 1.
template <typename T> XS_FUNC T erfcinv(T c) {
    if (!(c > T(0) && c < T(2))) return c == T(0) ? special_float<T>(1) : (c == T(2) ? special_float<T>(-1) : special_float<T>(0));
    double cd = (double)c, x = erfinv_guess(1.0 - cd, -libm::log(cd * (2.0 - cd)));
    for (int k = 0; k < 3; ++k) {
        double slope = two_over_sqrt_pi<double>() * libm::exp(-x * x);
        if (slope == 0.0) break;
        x += (libm::erfc(x) - cd) / slope;
    }
    return T(x);
}
template <typename T> XS_FUNC void adj_erfcinv(T, T ret, T& adj_x, T adj_ret) {
    adj_x -= adj_ret / (two_over_sqrt_pi<T>() * libm::exp(-ret * ret));
}

// ------------------------------------------------------------------------------------------
// NaN and infinity tests: isinf of a scalar; isfinite (all components), isnan and isinf (any
// component) of composites

template <typename T> XS_FUNC bool isinf(T x) {
    if constexpr (sizeof(T) == 4) return (float_bits(x) & 0x7fffffffu) == 0x7f800000u;
    else return (float_bits(x) & 0x7fffffffffffffffull) == 0x7ff0000000000000ull;
}
XS_FUNC bool isinf(half x) { return isinf(float(x)); }
XS_FUNC bool isinf(bfloat16 x) { return isinf(float(x)); }

template <typename V> XS_FUNC bool visfinite(const V& v) {
    for (int i = 0; i < composite_traits<V>::size; ++i)
        if (!isfinite(comp(v, i))) return false;
    return true;
}
template <typename V> XS_FUNC bool visnan(const V& v) {
    for (int i = 0; i < composite_traits<V>::size; ++i)
        if (isnan(comp(v, i))) return true;
    return false;
}
template <typename V> XS_FUNC bool visinf(const V& v) {
    for (int i = 0; i < composite_traits<V>::size; ++i)
        if (isinf(comp(v, i))) return true;
    return false;
}

// ------------------------------------------------------------------------------------------
// reductions over a vector: argmin/argmax skip NaN components (all NaN gives 0), first index on
// ties; min/max of one vector are its argmin/argmax component, which alone receives the gradient

template <int N, typename T, bool Max> XS_FUNC uint32_t arg_extreme(const vec_t<N, T>& v) {
    int best = 0;
    while (best < N && is_nan_any(v.c[best])) ++best;
    if (best == N) return 0u;
    for (int i = best + 1; i < N; ++i) {
        if (is_nan_any(v.c[i])) continue;
        if (Max ? v.c[best] < v.c[i] : v.c[i] < v.c[best]) best = i;
    }
    return (uint32_t)best;
}
template <int N, typename T> XS_FUNC uint32_t argmin(const vec_t<N, T>& v) { return arg_extreme<N, T, false>(v); }
template <int N, typename T> XS_FUNC uint32_t argmax(const vec_t<N, T>& v) { return arg_extreme<N, T, true>(v); }

template <int N, typename T> XS_FUNC T vmin_elem(const vec_t<N, T>& v) { return v.c[argmin(v)]; }
template <int N, typename T> XS_FUNC void adj_vmin_elem(const vec_t<N, T>& v, T, vec_t<N, T>& adj_v, T adj_ret) {
    adj_v.c[argmin(v)] += adj_ret;
}
template <int N, typename T> XS_FUNC T vmax_elem(const vec_t<N, T>& v) { return v.c[argmax(v)]; }
template <int N, typename T> XS_FUNC void adj_vmax_elem(const vec_t<N, T>& v, T, vec_t<N, T>& adj_v, T adj_ret) {
    adj_v.c[argmax(v)] += adj_ret;
}

// ------------------------------------------------------------------------------------------
// cast(x, dtype): the same bytes read as another type of the same size (Warp's bit cast)

template <typename To, typename From> XS_FUNC To bitcast(const From& x) {
    static_assert(sizeof(To) == sizeof(From), "cast() needs types of the same size");
    To r;
    const char* s = (const char*)&x;
    char* d = (char*)&r;
    for (unsigned i = 0; i < sizeof(To); ++i) d[i] = s[i];
    return r;
}

// ------------------------------------------------------------------------------------------
// float16: computed in float, rounded once

#define XS_HALF_UNARY(F) XS_SMALL_UNARY(half, F) XS_SMALL_UNARY(bfloat16, F)
XS_HALF_UNARY(rint) XS_HALF_UNARY(frac) XS_HALF_UNARY(erf) XS_HALF_UNARY(erfc) XS_HALF_UNARY(erfinv)
XS_HALF_UNARY(erfcinv)
#undef XS_HALF_UNARY
#undef XS_SMALL_UNARY
#undef XS_SMALL_BINARY

}  // namespace xs
