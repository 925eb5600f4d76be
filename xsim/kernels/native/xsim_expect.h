// xsim native runtime, device-side output: expect_eq, expect_neq, expect_near print a failed
// expectation as Warp does, headed by the kernel source location, and printf prints as C's, to the
// process's stdout (flushed on the CPU, so it interleaves with Python's output and fd-level captures
// see it at once). The location and printf's format arrive as template arguments (characters): C++17
// and NVRTC take no string literal there.
#pragma once
#include "xsim_mathlib.h"
#if !defined(XS_CUDA)
#include <cstdio>
#endif

namespace xs {

XS_FUNC void print_scalar(float x) { printf("%g", (double)x); }
XS_FUNC void print_scalar(double x) { printf("%g", x); }
XS_FUNC void print_scalar(half x) { printf("%g", (double)float(x)); }
XS_FUNC void print_scalar(bfloat16 x) { printf("%g", (double)float(x)); }
XS_FUNC void print_scalar(bool x) { printf("%s", x ? "True" : "False"); }
template <typename T> XS_FUNC void print_scalar(T x) {
    if (T(-1) < T(0)) printf("%lld", (long long)x);
    else printf("%llu", (unsigned long long)x);
}

template <typename T> XS_FUNC scalar_ret<T, void> print_value(const T& x) { print_scalar(x); }
template <typename V> XS_FUNC composite_ret<V, void> print_value(const V& v) {
    printf("[");
    for (int i = 0; i < composite_traits<V>::size; ++i) {
        if (i) printf(", ");
        print_scalar(comp(v, i));
    }
    printf("]");
}

template <int Line, char... File> XS_FUNC void expect_header(const char* what) {
    const char file[] = {File..., '\0'};
    printf("Error, %s failed at %s:%d:\n", what, file, Line);
}

XS_FUNC void expect_flush() {
#if !defined(XS_CUDA)
    fflush(stdout);
#endif
}

// expect_eq (Equal) and expect_neq (!Equal): fails when eq(actual, expected) is not Equal.
template <bool Equal, int Line, char... File, typename T>
XS_FUNC bool expect_equality(const T& actual, const T& expected) {
    if (eq(actual, expected) == Equal) return true;
    expect_header<Line, File...>(Equal ? "expect_eq()" : "expect_neq()");
    printf(Equal ? "\t Expected: " : "\t Expected anything but: ");
    print_value(expected);
    printf("\n\t Actual: ");
    print_value(actual);
    printf("\n");
    expect_flush();
    return false;
}
template <int Line, char... File, typename T> XS_FUNC bool expect_eq(const T& actual, const T& expected) {
    return expect_equality<true, Line, File...>(actual, expected);
}
template <int Line, char... File, typename T> XS_FUNC bool expect_neq(const T& actual, const T& expected) {
    return expect_equality<false, Line, File...>(actual, expected);
}

// Fails when a component differs by more than the tolerance (or is NaN in one value only).
template <int Line, char... File, typename V, typename S>
XS_FUNC bool expect_near(const V& actual, const V& expected, S tolerance) {
    S diff = S(0);
    bool nan = false;
    if constexpr (composite_traits<V>::is) {
        for (int i = 0; i < composite_traits<V>::size; ++i) {
            S d = abs(S(comp(actual, i) - comp(expected, i)));
            nan = nan || isnan(d);
            diff = d > diff ? d : diff;
        }
    } else {
        diff = abs(S(actual - expected));
        nan = isnan(diff);
    }
    if (!nan && !(diff > tolerance)) return true;
    expect_header<Line, File...>("expect_near()");
    printf("\t Tolerance: ");
    print_scalar(tolerance);
    printf("\n\t Expected: ");
    print_value(expected);
    printf("\n\t Actual: ");
    print_value(actual);
    printf("\n\t Max absolute difference: ");
    print_scalar(diff);
    printf("\n");
    expect_flush();
    return false;
}

// printf(format, args...): C's printf, each argument passed as C's variadic call promotes it (floats and
// halves as double, small integers as int or unsigned, 64-bit ones as long long or unsigned long long).
XS_FUNC double printf_arg(float x) { return x; }
XS_FUNC double printf_arg(double x) { return x; }
XS_FUNC double printf_arg(half x) { return float(x); }
XS_FUNC double printf_arg(bfloat16 x) { return float(x); }
XS_FUNC int printf_arg(bool x) { return x ? 1 : 0; }
template <typename T> XS_FUNC auto printf_arg(T x) {
    if constexpr (sizeof(T) == 8) {
        if constexpr (T(-1) < T(0)) return (long long)x;
        else return (unsigned long long)x;
    } else {
        if constexpr (T(-1) < T(0)) return (int)x;
        else return (unsigned)x;
    }
}

template <int... Format, typename... A> XS_FUNC bool printf_format(A... args) {
    const char format[] = {(char)Format..., '\0'};
    printf(format, printf_arg(args)...);
    expect_flush();
    return true;
}

}  // namespace xs
