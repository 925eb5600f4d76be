// xsim native runtime, vectors and matrices: each forward next to its adjoint.
// Elementwise operators are written once for every composite (vectors, matrices, quaternions,
// transforms) through the flat component access comp(x, i) of xsim_core.h.
#pragma once
#include "xsim_math.h"

namespace xs {

template <typename V> using scalar_of = typename composite_traits<V>::scalar;

// ------------------------------------------------------------------------------------------
// elementwise operators on any composite

template <typename V> XS_FUNC composite_ret<V> add(const V& a, const V& b) {
    V r{};
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = comp(a, i) + comp(b, i);
    return r;
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_add(const V&, const V&, const V&, V& adj_a, V& adj_b, const V& adj_ret) {
    accum(adj_a, adj_ret);
    accum(adj_b, adj_ret);
}

template <typename V> XS_FUNC composite_ret<V> sub(const V& a, const V& b) {
    V r{};
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = comp(a, i) - comp(b, i);
    return r;
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_sub(const V&, const V&, const V&, V& adj_a, V& adj_b, const V& adj_ret) {
    accum(adj_a, adj_ret);
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(adj_b, i) -= comp(adj_ret, i);
}

template <typename V> XS_FUNC composite_ret<V> neg(const V& a) {
    V r{};
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = -comp(a, i);
    return r;
}
template <typename V> XS_FUNC composite_ret<V, void> adj_neg(const V&, const V&, V& adj_a, const V& adj_ret) {
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(adj_a, i) -= comp(adj_ret, i);
}

// The scalar parameter is not deduced: the composite alone fixes T.
template <typename V> XS_FUNC composite_ret<V> mul(const V& a, scalar_of<V> s) {
    V r{};
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = comp(a, i) * s;
    return r;
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_mul(const V& a, scalar_of<V> s, const V&, V& adj_a, scalar_of<V>& adj_s,
                                       const V& adj_ret) {
    for (int i = 0; i < composite_traits<V>::size; ++i) {
        comp(adj_a, i) += s * comp(adj_ret, i);
        adj_s += comp(a, i) * comp(adj_ret, i);
    }
}

template <typename V> XS_FUNC composite_ret<V> mul(scalar_of<V> s, const V& a) { return mul(a, s); }
template <typename V>
XS_FUNC composite_ret<V, void> adj_mul(scalar_of<V> s, const V& a, const V& ret, scalar_of<V>& adj_s, V& adj_a,
                                       const V& adj_ret) {
    adj_mul(a, s, ret, adj_a, adj_s, adj_ret);
}

template <typename V> XS_FUNC composite_ret<V> div(const V& a, scalar_of<V> s) {
    V r{};
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = div(comp(a, i), s);
    return r;
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_div(const V&, scalar_of<V> s, const V& ret, V& adj_a, scalar_of<V>& adj_s,
                                       const V& adj_ret) {
    if constexpr (is_float<scalar_of<V>>::value) {
        // one division, off the reverse pass's latency chain (six divisions cost the cloth's
        // distance-constraint adjoint a third of its time)
        const scalar_of<V> inv_s = scalar_of<V>(1) / s;
        scalar_of<V> d{};
        for (int i = 0; i < composite_traits<V>::size; ++i) {
            comp(adj_a, i) += comp(adj_ret, i) * inv_s;
            d += comp(adj_ret, i) * comp(ret, i);
        }
        adj_s -= d * inv_s;
    }
}

// scalar / vector or quaternion, componentwise
template <typename V> XS_FUNC composite_ret<V> div(scalar_of<V> s, const V& v) {
    V r{};
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = div(s, comp(v, i));
    return r;
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_div(scalar_of<V>, const V& v, const V& ret, scalar_of<V>& adj_s, V& adj_v,
                                       const V& adj_ret) {
    if constexpr (is_float<scalar_of<V>>::value) {
        for (int i = 0; i < composite_traits<V>::size; ++i) {
            adj_s += comp(adj_ret, i) / comp(v, i);
            comp(adj_v, i) -= comp(adj_ret, i) * comp(ret, i) / comp(v, i);
        }
    }
}

template <typename V> XS_FUNC composite_ret<V, bool> eq(const V& a, const V& b) {
    for (int i = 0; i < composite_traits<V>::size; ++i)
        if (!(comp(a, i) == comp(b, i))) return false;
    return true;
}
template <typename V> XS_FUNC composite_ret<V, bool> ne(const V& a, const V& b) { return !eq(a, b); }

// dot, length, length_sq and normalize serve quaternions too (qdot... forward here).
template <typename V> XS_FUNC scalar_of<V> dot(const V& a, const V& b) {
    scalar_of<V> r = scalar_of<V>(0);
    for (int i = 0; i < composite_traits<V>::size; ++i) r += comp(a, i) * comp(b, i);
    return r;
}
template <typename V>
XS_FUNC void adj_dot(const V& a, const V& b, scalar_of<V>, V& adj_a, V& adj_b, scalar_of<V> adj_ret) {
    for (int i = 0; i < composite_traits<V>::size; ++i) {
        comp(adj_a, i) += comp(b, i) * adj_ret;
        comp(adj_b, i) += comp(a, i) * adj_ret;
    }
}

template <typename V> XS_FUNC scalar_of<V> length_sq(const V& a) { return dot(a, a); }
template <typename V> XS_FUNC void adj_length_sq(const V& a, scalar_of<V>, V& adj_a, scalar_of<V> adj_ret) {
    for (int i = 0; i < composite_traits<V>::size; ++i) comp(adj_a, i) += scalar_of<V>(2) * comp(a, i) * adj_ret;
}

// The zero vector has length 0 and, by convention, a zero gradient (the true one is undefined).
template <typename V> XS_FUNC scalar_of<V> length(const V& a) { return sqrt(dot(a, a)); }
template <typename V> XS_FUNC void adj_length(const V& a, scalar_of<V> ret, V& adj_a, scalar_of<V> adj_ret) {
    if (ret > scalar_of<V>(0)) {
        // One division, of forward values only: it can run before adj_ret is known, instead of
        // sitting (once per component) on the latency chain of the reverse pass.
        const scalar_of<V> inv_ret = scalar_of<V>(1) / ret;
        for (int i = 0; i < composite_traits<V>::size; ++i) comp(adj_a, i) += comp(a, i) * inv_ret * adj_ret;
    }
}

// normalize(0) = 0 with a zero gradient.
template <typename V> XS_FUNC composite_ret<V> normalize(const V& a) {
    scalar_of<V> l = length(a);
    return l > scalar_of<V>(0) ? div(a, l) : V{};
}
template <typename V>
XS_FUNC composite_ret<V, void> adj_normalize(const V& a, const V& ret, V& adj_a, const V& adj_ret) {
    scalar_of<V> l = length(a);
    if (l > scalar_of<V>(0)) {
        // the Jacobian (I - n n^T) / l is symmetric
        scalar_of<V> d = dot(ret, adj_ret), inv_l = scalar_of<V>(1) / l;
        for (int i = 0; i < composite_traits<V>::size; ++i)
            comp(adj_a, i) += (comp(adj_ret, i) - comp(ret, i) * d) * inv_l;
    }
}

// ------------------------------------------------------------------------------------------
// vectors


template <typename T> XS_FUNC vec_t<3, T> cross(const vec_t<3, T>& a, const vec_t<3, T>& b) {
    return {{a.c[1] * b.c[2] - a.c[2] * b.c[1], a.c[2] * b.c[0] - a.c[0] * b.c[2], a.c[0] * b.c[1] - a.c[1] * b.c[0]}};
}
template <typename T>
XS_FUNC void adj_cross(const vec_t<3, T>& a, const vec_t<3, T>& b, const vec_t<3, T>&, vec_t<3, T>& adj_a,
                       vec_t<3, T>& adj_b, const vec_t<3, T>& adj_ret) {
    accum(adj_a, cross(b, adj_ret));
    accum(adj_b, cross(adj_ret, a));
}

// Componentwise builtins of vectors and matrices: NAME applies the scalar SCALAR to each component
// (each pair of components), and adj_NAME applies the scalar's adjoint adj_SCALAR the same way
// (the _FORWARD forms: builtins without an adjoint).
#define XS_COMPONENTWISE1_FORWARD(NAME, SCALAR)                                                              \
    template <typename V> XS_FUNC composite_ret<V> NAME(const V& a) {                                       \
        V r{};                                                                                               \
        for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = SCALAR(comp(a, i));                 \
        return r;                                                                                            \
    }
#define XS_COMPONENTWISE2_FORWARD(NAME, SCALAR)                                                              \
    template <typename V> XS_FUNC composite_ret<V> NAME(const V& a, const V& b) {                           \
        V r{};                                                                                               \
        for (int i = 0; i < composite_traits<V>::size; ++i) comp(r, i) = SCALAR(comp(a, i), comp(b, i));     \
        return r;                                                                                            \
    }
#define XS_COMPONENTWISE1(NAME, SCALAR)                                                                      \
    XS_COMPONENTWISE1_FORWARD(NAME, SCALAR)                                                                  \
    template <typename V> XS_FUNC composite_ret<V, void> adj_##NAME(const V& a, const V& ret, V& adj_a,      \
                                                                    const V& adj_ret) {                      \
        for (int i = 0; i < composite_traits<V>::size; ++i)                                                  \
            adj_##SCALAR(comp(a, i), comp(ret, i), comp(adj_a, i), comp(adj_ret, i));                        \
    }
#define XS_COMPONENTWISE2(NAME, SCALAR)                                                                      \
    XS_COMPONENTWISE2_FORWARD(NAME, SCALAR)                                                                  \
    template <typename V>                                                                                    \
    XS_FUNC composite_ret<V, void> adj_##NAME(const V& a, const V& b, const V& ret, V& adj_a, V& adj_b,      \
                                              const V& adj_ret) {                                            \
        for (int i = 0; i < composite_traits<V>::size; ++i)                                                  \
            adj_##SCALAR(comp(a, i), comp(b, i), comp(ret, i), comp(adj_a, i), comp(adj_b, i), comp(adj_ret, i)); \
    }
XS_COMPONENTWISE1(vabs, abs)
XS_COMPONENTWISE1(vsign, sign)
XS_COMPONENTWISE2(cw_mul, mul)
XS_COMPONENTWISE2(cw_div, div)
XS_COMPONENTWISE2(vmin, min)
XS_COMPONENTWISE2(vmax, max)
XS_COMPONENTWISE2(vmod, mod)
XS_COMPONENTWISE2_FORWARD(cw_bit_and, bit_and)
XS_COMPONENTWISE2_FORWARD(cw_bit_or, bit_or)
XS_COMPONENTWISE2_FORWARD(cw_bit_xor, bit_xor)
XS_COMPONENTWISE2_FORWARD(cw_lshift, lshift)
XS_COMPONENTWISE2_FORWARD(cw_rshift, rshift)
XS_COMPONENTWISE1_FORWARD(cw_invert, invert)
#undef XS_COMPONENTWISE1
#undef XS_COMPONENTWISE2

// atomic_min/max adjoint: the gradient reaches the value (each component of it) that ended up stored.
template <typename V> XS_FUNC void adj_atomic_minmax(const V& value, const V& stored, V& adj_value, const V& g) {
    if constexpr (composite_traits<V>::is) {
        for (int i = 0; i < composite_traits<V>::size; ++i)
            if (comp(value, i) == comp(stored, i)) comp(adj_value, i) += comp(g, i);
    } else if (value == stored) {
        adj_value += g;
    }
}
#undef XS_COMPONENTWISE1_FORWARD
#undef XS_COMPONENTWISE2_FORWARD

// ------------------------------------------------------------------------------------------
// matrix products

template <int R, int K, int C, typename T>
XS_FUNC mat_t<R, C, T> mat_mat(const mat_t<R, K, T>& a, const mat_t<K, C, T>& b) {
    mat_t<R, C, T> r{};
    for (int i = 0; i < R; ++i)
        for (int k = 0; k < K; ++k)
            for (int j = 0; j < C; ++j) r.c[i][j] += a.c[i][k] * b.c[k][j];
    return r;
}
template <int R, int K, int C, typename T>
XS_FUNC void adj_mat_mat(const mat_t<R, K, T>& a, const mat_t<K, C, T>& b, const mat_t<R, C, T>&,
                         mat_t<R, K, T>& adj_a, mat_t<K, C, T>& adj_b, const mat_t<R, C, T>& adj_ret) {
    for (int i = 0; i < R; ++i)
        for (int k = 0; k < K; ++k)
            for (int j = 0; j < C; ++j) {
                adj_a.c[i][k] += adj_ret.c[i][j] * b.c[k][j];
                adj_b.c[k][j] += a.c[i][k] * adj_ret.c[i][j];
            }
}

template <int R, int C, typename T> XS_FUNC vec_t<R, T> mat_vec(const mat_t<R, C, T>& m, const vec_t<C, T>& v) {
    vec_t<R, T> r{};
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) r.c[i] += m.c[i][j] * v.c[j];
    return r;
}
template <int R, int C, typename T>
XS_FUNC void adj_mat_vec(const mat_t<R, C, T>& m, const vec_t<C, T>& v, const vec_t<R, T>&, mat_t<R, C, T>& adj_m,
                         vec_t<C, T>& adj_v, const vec_t<R, T>& adj_ret) {
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
            adj_m.c[i][j] += adj_ret.c[i] * v.c[j];
            adj_v.c[j] += m.c[i][j] * adj_ret.c[i];
        }
}

template <int R, int C, typename T> XS_FUNC vec_t<C, T> vec_mat(const vec_t<R, T>& v, const mat_t<R, C, T>& m) {
    vec_t<C, T> r{};
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) r.c[j] += v.c[i] * m.c[i][j];
    return r;
}
template <int R, int C, typename T>
XS_FUNC void adj_vec_mat(const vec_t<R, T>& v, const mat_t<R, C, T>& m, const vec_t<C, T>&, vec_t<R, T>& adj_v,
                         mat_t<R, C, T>& adj_m, const vec_t<C, T>& adj_ret) {
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
            adj_v.c[i] += m.c[i][j] * adj_ret.c[j];
            adj_m.c[i][j] += v.c[i] * adj_ret.c[j];
        }
}

template <int N, int M, typename T> XS_FUNC mat_t<N, M, T> outer(const vec_t<N, T>& a, const vec_t<M, T>& b) {
    mat_t<N, M, T> r{};
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < M; ++j) r.c[i][j] = a.c[i] * b.c[j];
    return r;
}
template <int N, int M, typename T>
XS_FUNC void adj_outer(const vec_t<N, T>& a, const vec_t<M, T>& b, const mat_t<N, M, T>&, vec_t<N, T>& adj_a,
                       vec_t<M, T>& adj_b, const mat_t<N, M, T>& adj_ret) {
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < M; ++j) {
            adj_a.c[i] += adj_ret.c[i][j] * b.c[j];
            adj_b.c[j] += a.c[i] * adj_ret.c[i][j];
        }
}

template <int R, int C, typename T> XS_FUNC T ddot(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b) {
    return dot(a, b);
}
template <int R, int C, typename T>
XS_FUNC void adj_ddot(const mat_t<R, C, T>& a, const mat_t<R, C, T>& b, T ret, mat_t<R, C, T>& adj_a,
                      mat_t<R, C, T>& adj_b, T adj_ret) {
    adj_dot(a, b, ret, adj_a, adj_b, adj_ret);
}

// ------------------------------------------------------------------------------------------
// matrix structure

template <int R, int C, typename T> XS_FUNC mat_t<C, R, T> transpose(const mat_t<R, C, T>& m) {
    mat_t<C, R, T> r{};
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) r.c[j][i] = m.c[i][j];
    return r;
}
template <int R, int C, typename T>
XS_FUNC void adj_transpose(const mat_t<R, C, T>&, const mat_t<C, R, T>&, mat_t<R, C, T>& adj_m,
                           const mat_t<C, R, T>& adj_ret) {
    accum(adj_m, transpose(adj_ret));
}

template <int N, typename T> XS_FUNC T trace(const mat_t<N, N, T>& m) {
    T r = T(0);
    for (int i = 0; i < N; ++i) r += m.c[i][i];
    return r;
}
template <int N, typename T> XS_FUNC void adj_trace(const mat_t<N, N, T>&, T, mat_t<N, N, T>& adj_m, T adj_ret) {
    for (int i = 0; i < N; ++i) adj_m.c[i][i] += adj_ret;
}

template <int N, typename T> XS_FUNC mat_t<N, N, T> diag(const vec_t<N, T>& v) {
    mat_t<N, N, T> r{};
    for (int i = 0; i < N; ++i) r.c[i][i] = v.c[i];
    return r;
}
template <int N, typename T>
XS_FUNC void adj_diag(const vec_t<N, T>&, const mat_t<N, N, T>&, vec_t<N, T>& adj_v, const mat_t<N, N, T>& adj_ret) {
    for (int i = 0; i < N; ++i) adj_v.c[i] += adj_ret.c[i][i];
}

// skew(v) * x == cross(v, x)
template <typename T> XS_FUNC mat_t<3, 3, T> skew(const vec_t<3, T>& v) {
    const T z = T(0);
    return {{{z, -v.c[2], v.c[1]}, {v.c[2], z, -v.c[0]}, {-v.c[1], v.c[0], z}}};
}
template <typename T>
XS_FUNC void adj_skew(const vec_t<3, T>&, const mat_t<3, 3, T>&, vec_t<3, T>& adj_v, const mat_t<3, 3, T>& adj_ret) {
    adj_v.c[0] += adj_ret.c[2][1] - adj_ret.c[1][2];
    adj_v.c[1] += adj_ret.c[0][2] - adj_ret.c[2][0];
    adj_v.c[2] += adj_ret.c[1][0] - adj_ret.c[0][1];
}

// ------------------------------------------------------------------------------------------
// determinant and inverse, by cofactor expansion: one recursive template for every size

template <int N, typename T> XS_FUNC mat_t<N - 1, N - 1, T> minor_of(const mat_t<N, N, T>& m, int row, int col) {
    mat_t<N - 1, N - 1, T> r{};
    for (int i = 0; i < N - 1; ++i)
        for (int j = 0; j < N - 1; ++j) r.c[i][j] = m.c[i < row ? i : i + 1][j < col ? j : j + 1];
    return r;
}

template <typename T> XS_FUNC T determinant(const mat_t<1, 1, T>& m) { return m.c[0][0]; }
template <int N, typename T> XS_FUNC T determinant(const mat_t<N, N, T>& m) {
    T r = T(0);
    for (int j = 0; j < N; ++j) {
        T d = m.c[0][j] * determinant(minor_of(m, 0, j));
        r += (j % 2) ? T(-d) : d;
    }
    return r;
}

// cofactor(m)[i][j] = (-1)^(i+j) det(minor(m, i, j)) = d det(m) / d m[i][j]
template <typename T> XS_FUNC mat_t<1, 1, T> cofactor(const mat_t<1, 1, T>&) { return {{{T(1)}}}; }
template <int N, typename T> XS_FUNC mat_t<N, N, T> cofactor(const mat_t<N, N, T>& m) {
    mat_t<N, N, T> r{};
    for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j) {
            T d = determinant(minor_of(m, i, j));
            r.c[i][j] = ((i + j) % 2) ? T(-d) : d;
        }
    return r;
}

// The cofactor form of the gradient stays finite for singular matrices.
template <int N, typename T>
XS_FUNC void adj_determinant(const mat_t<N, N, T>& m, T, mat_t<N, N, T>& adj_m, T adj_ret) {
    accum(adj_m, mul(cofactor(m), adj_ret));
}

// A singular matrix has no inverse: it yields the zero matrix (and zero gradients) rather than inf/NaN.
template <int N, typename T> XS_FUNC mat_t<N, N, T> inverse(const mat_t<N, N, T>& m) {
    mat_t<N, N, T> c = cofactor(m);
    T det = T(0);
    for (int j = 0; j < N; ++j) det += m.c[0][j] * c.c[0][j];
    if (det == T(0)) return mat_t<N, N, T>{};
    return div(transpose(c), det);
}
template <int N, typename T>
XS_FUNC void adj_inverse(const mat_t<N, N, T>&, const mat_t<N, N, T>& ret, mat_t<N, N, T>& adj_m,
                         const mat_t<N, N, T>& adj_ret) {
    // d(M^-1) = -M^-1 dM M^-1, so adj_M = -M^-T adj_ret M^-T
    mat_t<N, N, T> rt = transpose(ret);
    accum(adj_m, neg(mat_mat(mat_mat(rt, adj_ret), rt)));
}

}  // namespace xs
