// Checks every differentiable native builtin's adjoint against central finite differences of its
// forward, in double precision, plus a few forward identities. Prints one line per function and
// exits non-zero on any mismatch. Built and run by test_native_builtins.py.
#include "xsim.h"

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>

using vec2 = xs::vec_t<2, double>;
using vec3 = xs::vec_t<3, double>;
using vec4 = xs::vec_t<4, double>;
using vec5 = xs::vec_t<5, double>;
using mat22 = xs::mat_t<2, 2, double>;
using mat33 = xs::mat_t<3, 3, double>;
using mat44 = xs::mat_t<4, 4, double>;
using mat23 = xs::mat_t<2, 3, double>;
using mat34 = xs::mat_t<3, 4, double>;
using quat = xs::quat_t<double>;
using xform = xs::transform_t<double>;

static std::mt19937_64 rng(12345);

// ------------------------------------------------------------------------------------------
// flat access to the scalar components of any argument or result

template <typename X> constexpr int ncomp() {
    if constexpr (xs::composite_traits<X>::is) return xs::composite_traits<X>::size;
    else return 1;
}
template <typename X> double& at(X& x, int i) {
    if constexpr (xs::composite_traits<X>::is) return xs::comp(x, i);
    else return x;
}

double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

// Every component uniform in [lo, hi].
template <typename X> X rnd(double lo, double hi) {
    X x{};
    for (int i = 0; i < ncomp<X>(); ++i) at(x, i) = uniform(lo, hi);
    return x;
}
// Every component of magnitude in [lo, hi] with a random sign: away from zero.
template <typename X> X away(double lo, double hi) {
    X x = rnd<X>(lo, hi);
    for (int i = 0; i < ncomp<X>(); ++i)
        if (uniform(0, 1) < 0.5) at(x, i) = -at(x, i);
    return x;
}
// A well-conditioned square matrix.
template <typename M> M conditioned() {
    M m = rnd<M>(-1, 1);
    constexpr int n = ncomp<M>() == 4 ? 2 : (ncomp<M>() == 9 ? 3 : 4);
    for (int i = 0; i < n; ++i) m.c[i][i] += 3.0;
    return m;
}

// ------------------------------------------------------------------------------------------
// the generic finite-difference checker

struct result {
    int checks = 0;
    double max_err = 0;
    std::string failure;
};
static std::map<std::string, result> results;

constexpr double kStep = 1e-6;
constexpr double kTol = 1e-6;

// adj_arg (minus its random seed, so '=' instead of '+=' is caught) must equal
// sum_j adj_ret_j * d ret_j / d arg, for every scalar component of every argument.
template <typename Fwd, typename Adj, typename... Args>
void check(const std::string& name, Fwd f, Adj adj, Args... args) {
    using Tuple = std::tuple<Args...>;
    Tuple x{args...};
    auto ret = std::apply(f, x);
    using R = decltype(ret);
    R adj_ret = rnd<R>(-1, 1);
    Tuple seed{rnd<Args>(-1, 1)...};
    Tuple adjs = seed;
    std::apply([&](auto&... a) { std::apply([&](auto&... da) { adj(a..., ret, da..., adj_ret); }, adjs); }, x);

    result& res = results[name];
    auto check_arg = [&](auto k) {
        constexpr int K = decltype(k)::value;
        using A = std::tuple_element_t<K, Tuple>;
        for (int i = 0; i < ncomp<A>(); ++i) {
            Tuple xp = x, xm = x;
            at(std::get<K>(xp), i) += kStep;
            at(std::get<K>(xm), i) -= kStep;
            R rp = std::apply(f, xp), rm = std::apply(f, xm);
            double fd = 0;
            for (int j = 0; j < ncomp<R>(); ++j) fd += at(adj_ret, j) * (at(rp, j) - at(rm, j)) / (2 * kStep);
            double an = at(std::get<K>(adjs), i) - at(std::get<K>(seed), i);
            double scale = std::fmax(1.0, std::fmax(std::fabs(fd), std::fabs(an)));
            double err = std::fabs(fd - an) / scale;
            res.checks++;
            if (err > res.max_err) res.max_err = err;
            if (err > kTol && res.failure.empty()) {
                char buf[160];
                std::snprintf(buf, sizeof buf, "arg %d comp %d: adjoint %.12g, finite difference %.12g", K, i, an, fd);
                res.failure = buf;
            }
        }
    };
    [&]<std::size_t... K>(std::index_sequence<K...>) {
        (check_arg(std::integral_constant<int, (int)K>{}), ...);
    }(std::index_sequence_for<Args...>{});
}

#define CHECK(label, fn, ...)                                                                         \
    check(                                                                                            \
        label, [](const auto&... a) { return xs::fn(a...); },                                         \
        [](auto&&... a) { xs::adj_##fn(std::forward<decltype(a)>(a)...); }, __VA_ARGS__)

void check_adjoints() {
    // scalar operators
    CHECK("add", add, rnd<double>(-2, 2), rnd<double>(-2, 2));
    CHECK("sub", sub, rnd<double>(-2, 2), rnd<double>(-2, 2));
    CHECK("mul", mul, rnd<double>(-2, 2), rnd<double>(-2, 2));
    CHECK("div", div, rnd<double>(-2, 2), away<double>(0.5, 2));
    CHECK("floordiv", floordiv, rnd<double>(-5, 5), away<double>(0.7, 1.3));
    CHECK("mod", mod, rnd<double>(-5, 5), away<double>(0.7, 1.3));
    CHECK("neg", neg, rnd<double>(-2, 2));
    // scalar math
    CHECK("sin", sin, rnd<double>(-3, 3));
    CHECK("cos", cos, rnd<double>(-3, 3));
    CHECK("tan", tan, rnd<double>(-1.2, 1.2));
    CHECK("asin", asin, rnd<double>(-0.9, 0.9));
    CHECK("asin (clamped)", asin, away<double>(1.1, 2));
    CHECK("acos", acos, rnd<double>(-0.9, 0.9));
    CHECK("acos (clamped)", acos, away<double>(1.1, 2));
    CHECK("atan", atan, rnd<double>(-3, 3));
    CHECK("sinh", sinh, rnd<double>(-2, 2));
    CHECK("cosh", cosh, rnd<double>(-2, 2));
    CHECK("tanh", tanh, rnd<double>(-2, 2));
    CHECK("sqrt", sqrt, rnd<double>(0.1, 4));
    CHECK("cbrt", cbrt, away<double>(0.1, 4));
    CHECK("exp", exp, rnd<double>(-2, 2));
    CHECK("log", log, rnd<double>(0.1, 4));
    CHECK("log2", log2, rnd<double>(0.1, 4));
    CHECK("log10", log10, rnd<double>(0.1, 4));
    CHECK("degrees", degrees, rnd<double>(-3, 3));
    CHECK("radians", radians, rnd<double>(-200, 200));
    CHECK("atan2", atan2, away<double>(0.2, 2), away<double>(0.2, 2));
    CHECK("pow", pow, rnd<double>(0.2, 3), rnd<double>(-2, 2));
    CHECK("floor", floor, rnd<double>(-5, 5));
    CHECK("ceil", ceil, rnd<double>(-5, 5));
    CHECK("round", round, rnd<double>(-5, 5));
    CHECK("trunc", trunc, rnd<double>(-5, 5));
    CHECK("abs", abs, away<double>(0.1, 2));
    CHECK("sign", sign, away<double>(0.1, 2));
    CHECK("min", min, rnd<double>(-2, 2), rnd<double>(-2, 2));
    CHECK("max", max, rnd<double>(-2, 2), rnd<double>(-2, 2));
    CHECK("clamp (inside)", clamp, rnd<double>(-0.9, 0.9), rnd<double>(-2, -1), rnd<double>(1, 2));
    CHECK("clamp (below)", clamp, rnd<double>(-4, -3), rnd<double>(-2, -1), rnd<double>(1, 2));
    CHECK("clamp (above)", clamp, rnd<double>(3, 4), rnd<double>(-2, -1), rnd<double>(1, 2));

    // elementwise composite operators
    CHECK("add(vec)", add, rnd<vec3>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("add(mat)", add, rnd<mat23>(-2, 2), rnd<mat23>(-2, 2));
    CHECK("add(quat)", add, rnd<quat>(-2, 2), rnd<quat>(-2, 2));
    CHECK("add(transform)", add, rnd<xform>(-2, 2), rnd<xform>(-2, 2));
    CHECK("sub(vec)", sub, rnd<vec5>(-2, 2), rnd<vec5>(-2, 2));
    CHECK("sub(mat)", sub, rnd<mat33>(-2, 2), rnd<mat33>(-2, 2));
    CHECK("sub(quat)", sub, rnd<quat>(-2, 2), rnd<quat>(-2, 2));
    CHECK("sub(transform)", sub, rnd<xform>(-2, 2), rnd<xform>(-2, 2));
    CHECK("neg(vec)", neg, rnd<vec4>(-2, 2));
    CHECK("neg(mat)", neg, rnd<mat34>(-2, 2));
    CHECK("neg(quat)", neg, rnd<quat>(-2, 2));
    CHECK("mul(vec,s)", mul, rnd<vec3>(-2, 2), rnd<double>(-2, 2));
    CHECK("mul(s,vec)", mul, rnd<double>(-2, 2), rnd<vec2>(-2, 2));
    CHECK("mul(mat,s)", mul, rnd<mat23>(-2, 2), rnd<double>(-2, 2));
    CHECK("mul(s,mat)", mul, rnd<double>(-2, 2), rnd<mat44>(-2, 2));
    CHECK("mul(quat,s)", mul, rnd<quat>(-2, 2), rnd<double>(-2, 2));
    CHECK("mul(s,quat)", mul, rnd<double>(-2, 2), rnd<quat>(-2, 2));
    CHECK("div(vec,s)", div, rnd<vec3>(-2, 2), away<double>(0.5, 2));
    CHECK("div(s,vec)", div, rnd<double>(-2, 2), away<vec4>(0.5, 2));
    CHECK("div(mat,s)", div, rnd<mat22>(-2, 2), away<double>(0.5, 2));
    CHECK("div(quat,s)", div, rnd<quat>(-2, 2), away<double>(0.5, 2));

    // vectors
    CHECK("dot", dot, rnd<vec5>(-2, 2), rnd<vec5>(-2, 2));
    CHECK("cross", cross, rnd<vec3>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("length", length, rnd<vec3>(-2, 2));
    CHECK("length_sq", length_sq, rnd<vec4>(-2, 2));
    CHECK("normalize", normalize, rnd<vec3>(-2, 2));
    CHECK("outer(vec3,vec2)", outer, rnd<vec3>(-2, 2), rnd<vec2>(-2, 2));
    CHECK("outer(vec4,vec4)", outer, rnd<vec4>(-2, 2), rnd<vec4>(-2, 2));
    CHECK("cw_mul", cw_mul, rnd<vec3>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("cw_div", cw_div, rnd<vec3>(-2, 2), away<vec3>(0.5, 2));
    CHECK("vabs", vabs, away<vec3>(0.1, 2));
    CHECK("vsign", vsign, away<vec3>(0.1, 2));
    CHECK("vmin", vmin, rnd<vec4>(-2, 2), rnd<vec4>(-2, 2));
    CHECK("vmax", vmax, rnd<vec4>(-2, 2), rnd<vec4>(-2, 2));

    // matrices
    CHECK("mat_vec(3x4)", mat_vec, rnd<mat34>(-2, 2), rnd<vec4>(-2, 2));
    CHECK("mat_vec(3x3)", mat_vec, rnd<mat33>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("vec_mat(3x4)", vec_mat, rnd<vec3>(-2, 2), rnd<mat34>(-2, 2));
    CHECK("mat_mat(2x3*3x4)", mat_mat, rnd<mat23>(-2, 2), rnd<mat34>(-2, 2));
    CHECK("mat_mat(4x4*4x4)", mat_mat, rnd<mat44>(-2, 2), rnd<mat44>(-2, 2));
    CHECK("transpose", transpose, rnd<mat23>(-2, 2));
    CHECK("trace", trace, rnd<mat33>(-2, 2));
    CHECK("diag", diag, rnd<vec4>(-2, 2));
    CHECK("skew", skew, rnd<vec3>(-2, 2));
    CHECK("ddot", ddot, rnd<mat34>(-2, 2), rnd<mat34>(-2, 2));
    CHECK("determinant(2x2)", determinant, rnd<mat22>(-2, 2));
    CHECK("determinant(3x3)", determinant, rnd<mat33>(-2, 2));
    CHECK("determinant(4x4)", determinant, rnd<mat44>(-2, 2));
    CHECK("inverse(2x2)", inverse, conditioned<mat22>());
    CHECK("inverse(3x3)", inverse, conditioned<mat33>());
    CHECK("inverse(4x4)", inverse, conditioned<mat44>());

    // quaternions (deliberately not unit: the adjoints must match the forward formula anywhere)
    CHECK("qdot", qdot, rnd<quat>(-2, 2), rnd<quat>(-2, 2));
    CHECK("qlength", qlength, rnd<quat>(-2, 2));
    CHECK("qlength_sq", qlength_sq, rnd<quat>(-2, 2));
    CHECK("qnormalize", qnormalize, rnd<quat>(-2, 2));
    CHECK("quat_mul", quat_mul, rnd<quat>(-2, 2), rnd<quat>(-2, 2));
    CHECK("quat_from_axis_angle", quat_from_axis_angle, rnd<vec3>(-2, 2), rnd<double>(-4, 4));
    CHECK("quat_rotate", quat_rotate, rnd<quat>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("quat_rotate_inv", quat_rotate_inv, rnd<quat>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("quat_inverse", quat_inverse, rnd<quat>(-2, 2));
    CHECK("quat_to_matrix", quat_to_matrix, rnd<quat>(-2, 2));

    // transforms
    CHECK("transform_point", transform_point, rnd<xform>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("transform_vector", transform_vector, rnd<xform>(-2, 2), rnd<vec3>(-2, 2));
    CHECK("transform_multiply", transform_multiply, rnd<xform>(-2, 2), rnd<xform>(-2, 2));
    CHECK("transform_inverse", transform_inverse, rnd<xform>(-2, 2));
    CHECK("transform_get_translation", transform_get_translation, rnd<xform>(-2, 2));
    CHECK("transform_get_rotation", transform_get_rotation, rnd<xform>(-2, 2));
}

// ------------------------------------------------------------------------------------------
// forward values and special cases

static int forward_failures = 0;

void expect(bool ok, const char* what) {
    std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) forward_failures++;
}
template <typename X> double max_diff(const X& a, const X& b) {
    double d = 0;
    for (int i = 0; i < ncomp<X>(); ++i) d = std::fmax(d, std::fabs(at(const_cast<X&>(a), i) - at(const_cast<X&>(b), i)));
    return d;
}
template <int N> xs::mat_t<N, N, double> identity() {
    xs::mat_t<N, N, double> m{};
    for (int i = 0; i < N; ++i) m.c[i][i] = 1;
    return m;
}
template <int N> bool inverse_is_inverse() {
    auto m = conditioned<xs::mat_t<N, N, double>>();
    return max_diff(xs::mat_mat(xs::inverse(m), m), identity<N>()) < 1e-12 &&
           max_diff(xs::mat_mat(m, xs::inverse(m)), identity<N>()) < 1e-12;
}

void check_forward() {
    expect(inverse_is_inverse<2>() && inverse_is_inverse<3>() && inverse_is_inverse<4>(), "inverse(M) * M == I");
    mat33 m3{{{2, -1, 0}, {1, 3, 2}, {0, 5, -4}}};
    expect(std::fabs(xs::determinant(m3) - (-48.0)) < 1e-12, "determinant of a known 3x3");
    expect(std::fabs(xs::determinant(xs::diag(vec4{{1, 2, 3, 4}})) - 24.0) < 1e-12, "determinant(diag) == product");
    expect(max_diff(xs::inverse(mat22{{{1, 2}, {2, 4}}}), mat22{}) == 0, "inverse of a singular matrix is zero");

    quat q = xs::qnormalize(rnd<quat>(-1, 1));
    vec3 v = rnd<vec3>(-2, 2);
    expect(max_diff(xs::quat_rotate(q, v), xs::mat_vec(xs::quat_to_matrix(q), v)) < 1e-12,
           "quat_rotate(q, v) == quat_to_matrix(q) * v");
    quat qv = xs::quat_mul(xs::quat_mul(q, quat{{v[0], v[1], v[2], 0}}), xs::quat_inverse(q));
    expect(max_diff(xs::quat_rotate(q, v), xs::vec_part(qv)) < 1e-12, "quat_rotate(q, v) == q v q^-1");
    expect(max_diff(xs::quat_rotate_inv(q, xs::quat_rotate(q, v)), v) < 1e-12, "quat_rotate_inv undoes quat_rotate");
    expect(std::fabs(xs::determinant(xs::quat_to_matrix(q)) - 1.0) < 1e-12, "quat_to_matrix is a rotation");
    quat qz = xs::quat_from_axis_angle(vec3{{0, 0, 1}}, 1.5707963267948966);
    expect(max_diff(xs::quat_rotate(qz, vec3{{1, 0, 0}}), vec3{{0, 1, 0}}) < 1e-12, "a quarter turn about z maps x to y");

    xform t{rnd<vec3>(-2, 2), q};
    xform ident{{{0, 0, 0}}, {{0, 0, 0, 1}}};
    expect(max_diff(xs::transform_multiply(t, xs::transform_inverse(t)), ident) < 1e-12, "t * inverse(t) == identity");
    expect(max_diff(xs::transform_point(xs::transform_inverse(t), xs::transform_point(t, v)), v) < 1e-12,
           "transform_inverse undoes transform_point");
    xform u{rnd<vec3>(-2, 2), xs::qnormalize(rnd<quat>(-1, 1))};
    expect(max_diff(xs::transform_point(xs::transform_multiply(t, u), v), xs::transform_point(t, xs::transform_point(u, v))) < 1e-12,
           "transform_multiply composes: (t*u)(v) == t(u(v))");
    expect(max_diff(xs::transform_vector(t, v), xs::quat_rotate(q, v)) < 1e-15, "transform_vector ignores translation");

    expect(xs::floordiv(-7, 2) == -4 && xs::floordiv(7, -2) == -4 && xs::floordiv(7, 2) == 3 &&
               xs::floordiv(-7, -2) == 3 && xs::floordiv(-8, 2) == -4 && xs::floordiv(7u, 2u) == 3u,
           "floordiv on ints rounds towards -inf");
    expect(xs::floordiv(-7.0, 2.0) == -4.0 && xs::floordiv(7.5, 2.0) == 3.0, "floordiv on floats rounds towards -inf");
    expect(xs::mod(-7, 2) == -1 && xs::mod(7, -2) == 1 && xs::mod(-7.5, 2.0) == -1.5, "mod has the dividend's sign");
    expect(xs::sign(0.0) == 1.0 && xs::sign(-0.0) == 1.0 && xs::sign(-3.0) == -1.0 && xs::sign(0) == 1 && xs::sign(-5) == -1
           && xs::sign(0u) == 1u, "sign(0) == 1 as in Warp");
    expect(xs::round(2.5) == 3.0 && xs::round(-2.5) == -3.0 && xs::round(0.5f) == 1.0f, "round: halves away from zero");
    expect(!std::signbit(xs::abs(-0.0)) && xs::abs(-3) == 3, "abs");
    expect(xs::asin(2.0) == xs::asin(1.0) && xs::acos(-3.0) == xs::acos(-1.0), "asin/acos clamp their argument");
    expect(xs::isnan(std::nan("")) && !xs::isnan(1.0f) && xs::isfinite(1.0) && !xs::isfinite(HUGE_VALF) &&
               !xs::isfinite(std::nan("")) && xs::isnan(xs::half(std::nanf(""))),
           "isnan / isfinite");

    vec3 zero{}, adj_zero{};
    xs::adj_normalize(zero, xs::normalize(zero), adj_zero, vec3{{1, 2, 3}});
    xs::adj_length(zero, 0.0, adj_zero, 1.0);
    expect(max_diff(xs::normalize(zero), zero) == 0 && max_diff(adj_zero, zero) == 0,
           "normalize/length of zero: zero value, zero gradient");
    quat qzero{}, adj_qzero{};
    xs::adj_qnormalize(qzero, xs::qnormalize(qzero), adj_qzero, quat{{1, 2, 3, 4}});
    expect(max_diff(xs::qnormalize(qzero), qzero) == 0 && max_diff(adj_qzero, qzero) == 0, "qnormalize of zero");

    double a1 = 0, a2 = 0;
    xs::adj_min(1.0, 1.0, 1.0, a1, a2, 1.0);
    double b1 = 0, b2 = 0;
    xs::adj_max(1.0, 1.0, 1.0, b1, b2, 1.0);
    expect(a1 == 1 && a2 == 0 && b1 == 1 && b2 == 0, "min/max ties send the gradient to the first argument");
    double g = 0;
    xs::adj_abs(0.0, 0.0, g, 1.0);
    expect(g == 0, "abs has zero gradient at 0");

    expect(xs::eq(v, v) && xs::ne(v, xs::add(v, vec3{{0, 0, 1e-3}})) && xs::eq(q, q) && xs::eq(m3, m3) && xs::eq(true, true),
           "eq / ne on composites and bools");
    expect(max_diff(xs::div(2.0, vec2{{4, -0.5}}), vec2{{0.5, -4}}) == 0, "scalar / vector is componentwise");
    expect(max_diff(xs::mat_vec(xs::skew(v), vec3{{1, 2, 3}}), xs::cross(v, vec3{{1, 2, 3}})) < 1e-15,
           "skew(v) * x == cross(v, x)");

    xs::half h(0.5f);
    expect(std::fabs(float(xs::sin(h)) - std::sin(0.5f)) < 1e-3 && float(xs::pow(xs::half(2.0f), xs::half(3.0f))) == 8.0f,
           "float16 math computed in float");
    xs::half ah(0.25f);
    xs::adj_exp(xs::half(0.0f), xs::exp(xs::half(0.0f)), ah, xs::half(2.0f));
    expect(float(ah) == 2.25f, "float16 adjoints accumulate");
}

// Integer, bool and float16 overloads only need to compile; instantiate a representative set.
[[maybe_unused]] void compile_other_scalar_types() {
    using vec3i = xs::vec_t<3, int32_t>;
    using mat23i = xs::mat_t<2, 3, int32_t>;
    vec3i a{{1, 2, 3}}, b{{4, 5, 6}}, adj_a{}, adj_b{};
    int32_t s = 0, adj_s = 0;
    xs::adj_dot(a, b, xs::dot(a, b), adj_a, adj_b, 1);
    xs::adj_cw_div(a, b, xs::cw_div(a, b), adj_a, adj_b, a);
    xs::adj_div(a, s, xs::div(a, 2), adj_a, adj_s, a);
    xs::adj_length_sq(a, xs::length_sq(a), adj_a, 1);
    xs::adj_vmin(a, b, xs::vmin(a, b), adj_a, adj_b, a);
    xs::adj_vabs(a, xs::vabs(a), adj_a, a);
    mat23i m{}, adj_m{};
    xs::mat_t<2, 2, int32_t> sq{}, adj_sq{};
    xs::adj_trace(sq, xs::trace(sq), adj_sq, 1);
    xs::adj_mat_vec(m, a, xs::mat_vec(m, a), adj_m, adj_a, xs::vec_t<2, int32_t>{});
    int8_t i8 = 3, adj_i8 = 0;
    xs::adj_add(i8, i8, xs::add(i8, i8), adj_i8, adj_i8, i8);
    xs::adj_div(i8, i8, xs::div(i8, i8), adj_i8, adj_i8, i8);
    xs::adj_mod(i8, i8, xs::mod(i8, i8), adj_i8, adj_i8, i8);
    xs::adj_floordiv(i8, i8, xs::floordiv(i8, i8), adj_i8, adj_i8, i8);
    xs::adj_clamp(i8, i8, i8, xs::clamp(i8, i8, i8), adj_i8, adj_i8, adj_i8, i8);
    xs::adj_abs(i8, xs::abs(i8), adj_i8, i8);
    xs::adj_sign(i8, xs::sign(i8), adj_i8, i8);
    uint64_t u = xs::bit_and(uint64_t(6), uint64_t(3)) + xs::lshift(uint64_t(1), uint64_t(4)) + xs::invert(uint64_t(0));
    (void)u;
    (void)xs::floordiv(uint32_t(7), uint32_t(2));
    (void)xs::abs(uint16_t(3));
    (void)xs::sign(uint8_t(3));

    using vec3h = xs::vec_t<3, xs::half>;
    xs::half h(1.0f), adj_h{};
    vec3h va{}, vb{}, adj_va{}, adj_vb{};
    xs::adj_add(va, vb, xs::add(va, vb), adj_va, adj_vb, va);
    xs::adj_sub(va, vb, xs::sub(va, vb), adj_va, adj_vb, va);
    xs::adj_mul(va, h, xs::mul(va, h), adj_va, adj_h, va);
    xs::adj_neg(va, xs::neg(va), adj_va, va);
    xs::adj_dot(va, vb, xs::dot(va, vb), adj_va, adj_vb, h);
    xs::adj_min(h, h, xs::min(h, h), adj_h, adj_h, h);
    xs::adj_clamp(h, h, h, xs::clamp(h, h, h), adj_h, adj_h, adj_h, h);
    xs::adj_sign(h, xs::sign(h), adj_h, h);
    xs::adj_atan2(h, h, xs::atan2(h, h), adj_h, adj_h, h);
    xs::adj_mod(h, h, xs::mod(h, h), adj_h, adj_h, h);
    (void)xs::isfinite(h);
}

int main() {
    for (int trial = 0; trial < 3; ++trial) check_adjoints();  // three random points per function
    int failures = 0;
    for (const auto& [name, r] : results) {
        bool ok = r.failure.empty();
        failures += !ok;
        std::printf("%s  %-28s %3d checks, max rel err %.2e%s%s\n", ok ? "ok  " : "FAIL", name.c_str(), r.checks,
                    r.max_err, ok ? "" : "  ", r.failure.c_str());
    }
    check_forward();
    failures += forward_failures;
    std::printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
