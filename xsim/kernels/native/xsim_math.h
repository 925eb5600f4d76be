// xsim native runtime, scalars: operators and the math library, each forward next to its adjoint.
// Every adjoint has the signature adj_<f>(args..., ret, adj_args&..., adj_ret) and adds into adj_args.
#pragma once
#include "xsim_core.h"

namespace xs {

// ------------------------------------------------------------------------------------------
// type traits (no standard library under NVRTC)

// Composites share operator names (add, mul, eq...) with scalars; scalar_ret/composite_ret
// remove an overload from the set when the argument is of the other kind, which keeps the
// generic scalar templates from being ambiguous with the composite ones.
template <typename X> struct composite_traits { static constexpr bool is = false; };
template <int N, typename T> struct composite_traits<vec_t<N, T>> {
    static constexpr bool is = true;
    static constexpr int size = N;
    using scalar = T;
};
template <int R, int C, typename T> struct composite_traits<mat_t<R, C, T>> {
    static constexpr bool is = true;
    static constexpr int size = R * C;
    using scalar = T;
};
template <typename T> struct composite_traits<quat_t<T>> {
    static constexpr bool is = true;
    static constexpr int size = 4;
    using scalar = T;
};
template <typename T> struct composite_traits<transform_t<T>> {
    static constexpr bool is = true;
    static constexpr int size = 7;
    using scalar = T;
};

template <bool B, typename R> struct only_if {};
template <typename R> struct only_if<true, R> { using type = R; };
template <typename X, typename R = X> using scalar_ret = typename only_if<!composite_traits<X>::is, R>::type;
template <typename X, typename R = X> using composite_ret = typename only_if<composite_traits<X>::is, R>::type;

template <typename T> struct is_float { static constexpr bool value = false; };
template <> struct is_float<float> { static constexpr bool value = true; };
template <> struct is_float<double> { static constexpr bool value = true; };
template <> struct is_float<half> { static constexpr bool value = true; };
template <> struct is_float<bfloat16> { static constexpr bool value = true; };

// ------------------------------------------------------------------------------------------
// libm: float and double spellings of the C math library (CUDA device functions under NVRTC)

namespace libm {
#define XS_LIBM1(F)                                     \
    XS_FUNC float F(float x) { return ::F##f(x); }      \
    XS_FUNC double F(double x) { return ::F(x); }
#define XS_LIBM2(F)                                               \
    XS_FUNC float F(float x, float y) { return ::F##f(x, y); }    \
    XS_FUNC double F(double x, double y) { return ::F(x, y); }
XS_LIBM1(sin) XS_LIBM1(cos) XS_LIBM1(tan) XS_LIBM1(asin) XS_LIBM1(acos) XS_LIBM1(atan)
XS_LIBM1(sinh) XS_LIBM1(cosh) XS_LIBM1(tanh) XS_LIBM1(sqrt) XS_LIBM1(cbrt) XS_LIBM1(exp)
XS_LIBM1(log) XS_LIBM1(log2) XS_LIBM1(log10) XS_LIBM1(floor) XS_LIBM1(ceil) XS_LIBM1(round)
XS_LIBM1(trunc) XS_LIBM1(fabs)
XS_LIBM2(atan2) XS_LIBM2(pow) XS_LIBM2(fmod)
#undef XS_LIBM1
#undef XS_LIBM2
}  // namespace libm

// NaN/inf tests read the bits: x != x is folded away under fast-math flags.
XS_FUNC uint32_t float_bits(float x) {
#if defined(XS_CUDA)
    return __float_as_uint(x);
#else
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
#endif
}
XS_FUNC uint64_t float_bits(double x) {
#if defined(XS_CUDA)
    return (uint64_t)__double_as_longlong(x);
#else
    uint64_t b;
    std::memcpy(&b, &x, 8);
    return b;
#endif
}

// ------------------------------------------------------------------------------------------
// arithmetic operators

template <typename T> XS_FUNC scalar_ret<T> add(T a, T b) { return a + b; }
template <typename T> XS_FUNC scalar_ret<T, void> adj_add(T, T, T, T& adj_a, T& adj_b, T adj_ret) {
    adj_a += adj_ret;
    adj_b += adj_ret;
}

template <typename T> XS_FUNC scalar_ret<T> sub(T a, T b) { return a - b; }
template <typename T> XS_FUNC scalar_ret<T, void> adj_sub(T, T, T, T& adj_a, T& adj_b, T adj_ret) {
    adj_a += adj_ret;
    adj_b -= adj_ret;
}

template <typename T> XS_FUNC scalar_ret<T> mul(T a, T b) { return a * b; }
template <typename T> XS_FUNC scalar_ret<T, void> adj_mul(T a, T b, T, T& adj_a, T& adj_b, T adj_ret) {
    adj_a += b * adj_ret;
    adj_b += a * adj_ret;
}

// Integer division never traps (Warp leaves these cases undefined): x / 0 == x // 0 == 0 and
// x % 0 == x (so a == b * (a // b) + a % b still holds), and INT_MIN / -1 == INT_MIN // -1 == INT_MIN
// (the quotient wraps, as all integer arithmetic does) with INT_MIN % -1 == 0. Debug mode also
// reports a zero divisor (check_divisor in xsim_core.h). / and % truncate toward zero (C), // floors.
template <int Bytes> struct uint_of;
template <> struct uint_of<1> { typedef uint8_t type; };
template <> struct uint_of<2> { typedef uint16_t type; };
template <> struct uint_of<4> { typedef uint32_t type; };
template <> struct uint_of<8> { typedef uint64_t type; };
template <typename T> XS_FUNC T int_quot(T a, T b) {
    typedef typename uint_of<sizeof(T)>::type U;
    if (b == T(0)) return T(0);
    if (T(-1) < T(0) && b == T(-1)) return T(U(0) - U(a));  // -a, wrapping for INT_MIN
    return T(a / b);
}
template <typename T> XS_FUNC T int_rem(T a, T b) {
    if (b == T(0)) return a;
    if (T(-1) < T(0) && b == T(-1)) return T(0);
    return T(a % b);
}

// Integer adjoints that would divide are skipped: integers carry no gradient, and a zero
// divisor must not trap in the backward pass.
template <typename T> XS_FUNC scalar_ret<T> div(T a, T b) {
    if constexpr (is_float<T>::value) {
        return a / b;
    } else {
        return int_quot(a, b);
    }
}
template <typename T> XS_FUNC scalar_ret<T, void> adj_div(T, T b, T ret, T& adj_a, T& adj_b, T adj_ret) {
    if constexpr (is_float<T>::value) {
        const T q = adj_ret / b;  // one division
        adj_a += q;
        adj_b -= q * ret;
    }
}

// Floor division as in Python (and Warp): rounds towards negative infinity for ints and floats alike.
template <typename T> XS_FUNC T floordiv(T a, T b) {
    if constexpr (is_float<T>::value) {
        return libm::floor(a / b);
    } else {
        if (b == T(0)) return T(0);
        T q = int_quot(a, b), r = int_rem(a, b);
        return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? T(q - T(1)) : q;
    }
}
template <typename T> XS_FUNC void adj_floordiv(T, T, T, T&, T&, T) {}

// C semantics (fmod / %): the result has the sign of the dividend.
template <typename T> XS_FUNC T mod(T a, T b) {
    if constexpr (is_float<T>::value) {
        return libm::fmod(a, b);
    } else {
        return int_rem(a, b);
    }
}
template <typename T> XS_FUNC void adj_mod(T a, T b, T, T& adj_a, T& adj_b, T adj_ret) {
    if constexpr (is_float<T>::value) {
        adj_a += adj_ret;
        adj_b -= libm::trunc(a / b) * adj_ret;
    }
}

template <typename T> XS_FUNC scalar_ret<T> neg(T a) { return -a; }
template <typename T> XS_FUNC scalar_ret<T, void> adj_neg(T, T, T& adj_a, T adj_ret) { adj_a -= adj_ret; }

// ------------------------------------------------------------------------------------------
// comparisons and bitwise operators (not differentiable)

template <typename T> XS_FUNC bool lt(T a, T b) { return a < b; }
template <typename T> XS_FUNC bool le(T a, T b) { return a <= b; }
template <typename T> XS_FUNC bool gt(T a, T b) { return a > b; }
template <typename T> XS_FUNC bool ge(T a, T b) { return a >= b; }
template <typename T> XS_FUNC scalar_ret<T, bool> eq(T a, T b) { return a == b; }
template <typename T> XS_FUNC scalar_ret<T, bool> ne(T a, T b) { return a != b; }

template <typename T> XS_FUNC T bit_and(T a, T b) { return a & b; }
template <typename T> XS_FUNC T bit_or(T a, T b) { return a | b; }
template <typename T> XS_FUNC T bit_xor(T a, T b) { return a ^ b; }
// A shift by a negative count or by the width or more is undefined in C++ (x86 masks the count, its vector
// units give 0, so the answer would follow inlining); it gives numpy's answer: 0, or -1 for >> of a negative.
template <typename T> XS_FUNC bool shift_in_range(T b) { return !(b < T(0)) && b < T(sizeof(T) * 8); }
template <typename T> XS_FUNC T lshift(T a, T b) { return shift_in_range(b) ? T(a << b) : T(0); }
template <typename T> XS_FUNC T rshift(T a, T b) { return shift_in_range(b) ? T(a >> b) : a < T(0) ? T(-1) : T(0); }
template <typename T> XS_FUNC T invert(T a) { return ~a; }

// ------------------------------------------------------------------------------------------
// float math: templates for float and double; half is bridged through float at the end

template <typename T> XS_FUNC T sin(T x) { return libm::sin(x); }
template <typename T> XS_FUNC void adj_sin(T x, T, T& adj_x, T adj_ret) { adj_x += libm::cos(x) * adj_ret; }

template <typename T> XS_FUNC T cos(T x) { return libm::cos(x); }
template <typename T> XS_FUNC void adj_cos(T x, T, T& adj_x, T adj_ret) { adj_x -= libm::sin(x) * adj_ret; }

template <typename T> XS_FUNC T tan(T x) { return libm::tan(x); }
template <typename T> XS_FUNC void adj_tan(T, T ret, T& adj_x, T adj_ret) { adj_x += (T(1) + ret * ret) * adj_ret; }

// asin/acos clamp their argument to [-1, 1]; outside it the result is constant, so no gradient.
template <typename T> XS_FUNC T clamp_unit(T x) { return x < T(-1) ? T(-1) : (x > T(1) ? T(1) : x); }

template <typename T> XS_FUNC T asin(T x) { return libm::asin(clamp_unit(x)); }
template <typename T> XS_FUNC void adj_asin(T x, T, T& adj_x, T adj_ret) {
    if (x > T(-1) && x < T(1)) adj_x += adj_ret / libm::sqrt(T(1) - x * x);
}

template <typename T> XS_FUNC T acos(T x) { return libm::acos(clamp_unit(x)); }
template <typename T> XS_FUNC void adj_acos(T x, T, T& adj_x, T adj_ret) {
    if (x > T(-1) && x < T(1)) adj_x -= adj_ret / libm::sqrt(T(1) - x * x);
}

template <typename T> XS_FUNC T atan(T x) { return libm::atan(x); }
template <typename T> XS_FUNC void adj_atan(T x, T, T& adj_x, T adj_ret) { adj_x += adj_ret / (T(1) + x * x); }

template <typename T> XS_FUNC T sinh(T x) { return libm::sinh(x); }
template <typename T> XS_FUNC void adj_sinh(T x, T, T& adj_x, T adj_ret) { adj_x += libm::cosh(x) * adj_ret; }

template <typename T> XS_FUNC T cosh(T x) { return libm::cosh(x); }
template <typename T> XS_FUNC void adj_cosh(T x, T, T& adj_x, T adj_ret) { adj_x += libm::sinh(x) * adj_ret; }

template <typename T> XS_FUNC T tanh(T x) { return libm::tanh(x); }
template <typename T> XS_FUNC void adj_tanh(T, T ret, T& adj_x, T adj_ret) { adj_x += (T(1) - ret * ret) * adj_ret; }

template <typename T> XS_FUNC T sqrt(T x) { return libm::sqrt(x); }
template <typename T> XS_FUNC void adj_sqrt(T, T ret, T& adj_x, T adj_ret) { adj_x += T(0.5) / ret * adj_ret; }

template <typename T> XS_FUNC T cbrt(T x) { return libm::cbrt(x); }
template <typename T> XS_FUNC void adj_cbrt(T, T ret, T& adj_x, T adj_ret) { adj_x += adj_ret / (T(3) * ret * ret); }

template <typename T> XS_FUNC T exp(T x) { return libm::exp(x); }
template <typename T> XS_FUNC void adj_exp(T, T ret, T& adj_x, T adj_ret) { adj_x += ret * adj_ret; }

template <typename T> XS_FUNC T log(T x) { return libm::log(x); }
template <typename T> XS_FUNC void adj_log(T x, T, T& adj_x, T adj_ret) { adj_x += adj_ret / x; }

template <typename T> XS_FUNC T log2(T x) { return libm::log2(x); }
template <typename T> XS_FUNC void adj_log2(T x, T, T& adj_x, T adj_ret) {
    adj_x += adj_ret / (x * T(0.69314718055994530942));
}

template <typename T> XS_FUNC T log10(T x) { return libm::log10(x); }
template <typename T> XS_FUNC void adj_log10(T x, T, T& adj_x, T adj_ret) {
    adj_x += adj_ret / (x * T(2.30258509299404568402));
}

template <typename T> XS_FUNC T degrees(T x) { return x * T(57.295779513082320877); }
template <typename T> XS_FUNC void adj_degrees(T, T, T& adj_x, T adj_ret) { adj_x += T(57.295779513082320877) * adj_ret; }

template <typename T> XS_FUNC T radians(T x) { return x * T(0.017453292519943295769); }
template <typename T> XS_FUNC void adj_radians(T, T, T& adj_x, T adj_ret) { adj_x += T(0.017453292519943295769) * adj_ret; }

template <typename T> XS_FUNC T atan2(T y, T x) { return libm::atan2(y, x); }
template <typename T> XS_FUNC void adj_atan2(T y, T x, T, T& adj_y, T& adj_x, T adj_ret) {
    T s = adj_ret / (x * x + y * y);
    adj_y += x * s;
    adj_x -= y * s;
}

// d/dy x^y = log(x) x^y exists only for x > 0.
template <typename T> XS_FUNC T pow(T x, T y) { return libm::pow(x, y); }
template <typename T> XS_FUNC void adj_pow(T x, T y, T ret, T& adj_x, T& adj_y, T adj_ret) {
    adj_x += y * libm::pow(x, y - T(1)) * adj_ret;
    if (x > T(0)) adj_y += libm::log(x) * ret * adj_ret;
}

// Rounding functions are piecewise constant: zero gradient.
template <typename T> XS_FUNC T floor(T x) { return libm::floor(x); }
template <typename T> XS_FUNC void adj_floor(T, T, T&, T) {}

template <typename T> XS_FUNC T ceil(T x) { return libm::ceil(x); }
template <typename T> XS_FUNC void adj_ceil(T, T, T&, T) {}

// C round(): halves go away from zero.
template <typename T> XS_FUNC T round(T x) { return libm::round(x); }
template <typename T> XS_FUNC void adj_round(T, T, T&, T) {}

template <typename T> XS_FUNC T trunc(T x) { return libm::trunc(x); }
template <typename T> XS_FUNC void adj_trunc(T, T, T&, T) {}

template <typename T> XS_FUNC bool isfinite(T x) {
    if constexpr (sizeof(T) == 4) return (float_bits(x) & 0x7f800000u) != 0x7f800000u;
    else return (float_bits(x) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}
template <typename T> XS_FUNC bool isnan(T x) {
    if constexpr (sizeof(T) == 4) return (float_bits(x) & 0x7fffffffu) > 0x7f800000u;
    else return (float_bits(x) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}

// ------------------------------------------------------------------------------------------
// functions of any scalar (ints too)

// Warp's sign: -1 below zero, 1 otherwise (sign(0) == sign(-0.0) == 1; an unsigned value is always 1).
template <typename T> XS_FUNC T sign(T x) { return x < T(0) ? T(-1) : T(1); }
template <typename T> XS_FUNC void adj_sign(T, T, T&, T) {}

template <typename T> XS_FUNC T abs(T x) {
    if constexpr (is_float<T>::value) return libm::fabs(x);
    else return x < T(0) ? T(-x) : x;
}
// |x|' at 0 is taken as 0 (the smallest subgradient), not sign(0) == 1.
template <typename T> XS_FUNC void adj_abs(T x, T, T& adj_x, T adj_ret) {
    if (x > T(0)) adj_x += adj_ret;
    else if (x < T(0)) adj_x -= adj_ret;
}

template <typename T> XS_FUNC bool is_nan_any(T x) {
    if constexpr (is_float<T>::value) return isnan(x);
    else return false;
}

// min/max of floats treat a NaN as missing, as C's fmin/fmax and Warp 1.19 do: the other operand when one
// is NaN, NaN only when both are. They pick the first argument on ties, and the adjoint follows the pick.
template <typename T> XS_FUNC bool picks_second_for_min(T a, T b) { return b < a || is_nan_any(a); }
template <typename T> XS_FUNC bool picks_second_for_max(T a, T b) { return b > a || is_nan_any(a); }

template <typename T> XS_FUNC T min(T a, T b) { return picks_second_for_min(a, b) ? b : a; }
template <typename T> XS_FUNC void adj_min(T a, T b, T, T& adj_a, T& adj_b, T adj_ret) {
    if (picks_second_for_min(a, b)) adj_b += adj_ret;
    else adj_a += adj_ret;
}

template <typename T> XS_FUNC T max(T a, T b) { return picks_second_for_max(a, b) ? b : a; }
template <typename T> XS_FUNC void adj_max(T a, T b, T, T& adj_a, T& adj_b, T adj_ret) {
    if (picks_second_for_max(a, b)) adj_b += adj_ret;
    else adj_a += adj_ret;
}

// clamp is min(max(x, lo), hi), as Warp's: a NaN x gives lo (hi when lo is NaN too), a NaN bound is no
// bound, and lo > hi gives hi. The gradient goes to the operand the two picks chose.
template <typename T> XS_FUNC T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <typename T> XS_FUNC void adj_clamp(T x, T lo, T hi, T, T& adj_x, T& adj_lo, T& adj_hi, T adj_ret) {
    T m = max(x, lo);
    if (picks_second_for_min(m, hi)) adj_hi += adj_ret;
    else if (picks_second_for_max(x, lo)) adj_lo += adj_ret;
    else adj_x += adj_ret;
}

// ------------------------------------------------------------------------------------------
// float16: each float function and its adjoint computed in float, rounded once at the end

#define XS_SMALL_UNARY(H, F)                                                               \
    XS_FUNC H F(H x) { return H(F(float(x))); }                                            \
    XS_FUNC void adj_##F(H x, H ret, H& adj_x, H adj_ret) {                                \
        float ax = 0.0f;                                                                   \
        adj_##F(float(x), float(ret), ax, float(adj_ret));                                 \
        adj_x += H(ax);                                                                    \
    }
#define XS_SMALL_BINARY(H, F)                                                              \
    XS_FUNC H F(H a, H b) { return H(F(float(a), float(b))); }                             \
    XS_FUNC void adj_##F(H a, H b, H ret, H& adj_a, H& adj_b, H adj_ret) {                 \
        float aa = 0.0f, ab = 0.0f;                                                        \
        adj_##F(float(a), float(b), float(ret), aa, ab, float(adj_ret));                   \
        adj_a += H(aa);                                                                    \
        adj_b += H(ab);                                                                    \
    }
// float16 and bfloat16 alike
#define XS_HALF_UNARY(F) XS_SMALL_UNARY(half, F) XS_SMALL_UNARY(bfloat16, F)
#define XS_HALF_BINARY(F) XS_SMALL_BINARY(half, F) XS_SMALL_BINARY(bfloat16, F)
XS_HALF_UNARY(sin) XS_HALF_UNARY(cos) XS_HALF_UNARY(tan) XS_HALF_UNARY(asin) XS_HALF_UNARY(acos)
XS_HALF_UNARY(atan) XS_HALF_UNARY(sinh) XS_HALF_UNARY(cosh) XS_HALF_UNARY(tanh) XS_HALF_UNARY(sqrt)
XS_HALF_UNARY(cbrt) XS_HALF_UNARY(exp) XS_HALF_UNARY(log) XS_HALF_UNARY(log2) XS_HALF_UNARY(log10)
XS_HALF_UNARY(degrees) XS_HALF_UNARY(radians) XS_HALF_UNARY(floor) XS_HALF_UNARY(ceil)
XS_HALF_UNARY(round) XS_HALF_UNARY(trunc) XS_HALF_UNARY(abs)
XS_HALF_BINARY(atan2) XS_HALF_BINARY(pow) XS_HALF_BINARY(floordiv) XS_HALF_BINARY(mod)
#undef XS_HALF_UNARY
#undef XS_HALF_BINARY

XS_FUNC bool isfinite(half x) { return isfinite(float(x)); }
XS_FUNC bool isnan(half x) { return isnan(float(x)); }
XS_FUNC bool isfinite(bfloat16 x) { return isfinite(float(x)); }
XS_FUNC bool isnan(bfloat16 x) { return isnan(float(x)); }

}  // namespace xs
