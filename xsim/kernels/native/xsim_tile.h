// xsim native runtime, tiles: Warp's tile API with one thread per block (kernels/builtins_tile.py).
// A tile_t<T, M, N> is an M x N block of values held by one thread, row-major; a 1-d tile of N values
// is a 1 x N one. Loads read zero outside the array and stores skip those elements (Warp's bounds check).
#pragma once

namespace xs {

#if defined(XS_CUDA)
#define XS_TILE_FUNC __device__ inline
#else
#define XS_TILE_FUNC inline
#endif

template <typename T, int M, int N>
struct tile_t {
    T c[M * N];
};

template <typename T, int M, int N> XS_TILE_FUNC void accum(tile_t<T, M, N>& d, const tile_t<T, M, N>& s) {
    for (int k = 0; k < M * N; ++k) accum(d.c[k], s.c[k]);
}

// Calls f(k, element) for each tile element k that lies inside array a (ND = 1: a 1-d array, the tile's
// row 0 at offset o1; ND = 2: rows at o0, columns at o1).
template <int ND, int M, int N, typename T, typename F>
XS_TILE_FUNC void tile_elements(const array_desc& a, int64_t o0, int64_t o1, F&& f) {
    for (int i = 0; i < M; ++i) {
        const int64_t r = o0 + i;
        if (ND == 2 && (r < 0 || r >= a.shape[0])) continue;
        for (int j = 0; j < N; ++j) {
            const int64_t col = o1 + j;
            if (col < 0 || col >= a.shape[ND - 1]) continue;
            f(i * N + j, ND == 1 ? at<T>(a, col) : at<T>(a, r, col));
        }
    }
}

template <typename T, int M, int N, int ND>
XS_TILE_FUNC tile_t<T, M, N> tile_load(const array_desc& a, int64_t o0, int64_t o1) {
    tile_t<T, M, N> t{};
    tile_elements<ND, M, N, T>(a, o0, o1, [&](int k, T& e) { t.c[k] = e; });
    return t;
}
template <typename T, int M, int N, int ND>
XS_TILE_FUNC void adj_tile_load(const array_desc& g, int64_t o0, int64_t o1, const tile_t<T, M, N>& adj) {
    if (!g.data) return;
    tile_elements<ND, M, N, T>(g, o0, o1, [&](int k, T& e) { grad_add(&e, adj.c[k]); });
}

template <typename T, int M, int N, int ND>
XS_TILE_FUNC void tile_store(const array_desc& a, int64_t o0, int64_t o1, const tile_t<T, M, N>& t) {
    tile_elements<ND, M, N, T>(a, o0, o1, [&](int k, T& e) { e = t.c[k]; });
}
// the adjoint of a store takes the gradient of each element written (grad_take: zeroed unless retained)
template <typename T, int M, int N, int ND>
XS_TILE_FUNC void adj_tile_store(const array_desc& g, int64_t o0, int64_t o1, tile_t<T, M, N>& adj, int64_t flags) {
    if (!g.data) return;
    tile_elements<ND, M, N, T>(g, o0, o1, [&](int k, T& e) { grad_take(adj.c[k], &e, flags); });
}

template <typename T, int M, int N, int ND>
XS_TILE_FUNC tile_t<T, M, N> tile_atomic_add(const array_desc& a, int64_t o0, int64_t o1, const tile_t<T, M, N>& t) {
    tile_t<T, M, N> old{};
    tile_elements<ND, M, N, T>(a, o0, o1, [&](int k, T& e) { old.c[k] = atomic_add(&e, t.c[k]); });
    return old;
}
template <typename T, int M, int N, int ND>
XS_TILE_FUNC void adj_tile_atomic_add(const array_desc& g, int64_t o0, int64_t o1, tile_t<T, M, N>& adj) {
    if (!g.data) return;
    tile_elements<ND, M, N, T>(g, o0, o1, [&](int k, T& e) { accum(adj.c[k], e); });
}

// tile(x): the block's values of x, one per thread, so one here
template <typename T> XS_TILE_FUNC tile_t<T, 1, 1> tile_of_value(T x) { return tile_t<T, 1, 1>{{x}}; }
template <typename T> XS_TILE_FUNC void adj_tile_of_value(T, const tile_t<T, 1, 1>&, T& adj_x, const tile_t<T, 1, 1>& adj_ret) {
    accum(adj_x, adj_ret.c[0]);
}
template <int L, typename T> XS_TILE_FUNC tile_t<T, L, 1> tile_of_components(vec_t<L, T> x) {
    tile_t<T, L, 1> t;
    for (int k = 0; k < L; ++k) t.c[k] = x.c[k];
    return t;
}
template <int L, typename T>
XS_TILE_FUNC void adj_tile_of_components(vec_t<L, T>, const tile_t<T, L, 1>&, vec_t<L, T>& adj_x, const tile_t<T, L, 1>& adj_ret) {
    for (int k = 0; k < L; ++k) accum(adj_x.c[k], adj_ret.c[k]);
}

template <typename T, int M, int N> XS_TILE_FUNC tile_t<T, 1, 1> tile_sum(const tile_t<T, M, N>& t) {
    T s = t.c[0];
    for (int k = 1; k < M * N; ++k) s = s + t.c[k];
    return tile_t<T, 1, 1>{{s}};
}
template <typename T, int M, int N>
XS_TILE_FUNC void adj_tile_sum(const tile_t<T, M, N>&, const tile_t<T, 1, 1>&, tile_t<T, M, N>& adj_t, const tile_t<T, 1, 1>& adj_ret) {
    for (int k = 0; k < M * N; ++k) accum(adj_t.c[k], adj_ret.c[0]);
}

template <typename T, int M, int N> XS_TILE_FUNC tile_t<T, N, M> tile_transpose(const tile_t<T, M, N>& t) {
    tile_t<T, N, M> o;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) o.c[j * M + i] = t.c[i * N + j];
    return o;
}
template <typename T, int M, int N>
XS_TILE_FUNC void adj_tile_transpose(const tile_t<T, M, N>&, const tile_t<T, N, M>&, tile_t<T, M, N>& adj_t, const tile_t<T, N, M>& adj_ret) {
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) accum(adj_t.c[i * N + j], adj_ret.c[j * M + i]);
}

// The unnormalized DFT of n complex values x (re, im), in place: y_k = sum_j x_j e^(sign 2 pi i j k / n).
// A power of two takes the iterative radix-2 Cooley-Tukey transform, each twiddle factor computed from its own
// angle in double (no recurrence, whose rounding grows along a stage); other sizes the direct sum, with the
// angle's index j k reduced mod n first.
template <int n, typename S> XS_TILE_FUNC void dft_in_place(vec_t<2, S>* x, int sign) {
    const double two_pi = 6.283185307179586476925286766559;
    if ((n & (n - 1)) == 0) {
        for (int i = 1, j = 0; i < n; ++i) {  // bit-reversal permutation
            int bit = n >> 1;
            for (; j & bit; bit >>= 1) j ^= bit;
            j ^= bit;
            if (i < j) {
                vec_t<2, S> t = x[i];
                x[i] = x[j];
                x[j] = t;
            }
        }
        for (int len = 2; len <= n; len <<= 1) {
            const int half = len >> 1;
            for (int j = 0; j < half; ++j) {
                const double angle = sign * two_pi * j / len;
                const S wr = (S)libm::cos(angle), wi = (S)libm::sin(angle);
                for (int k = j; k < n; k += len) {
                    const S ar = x[k + half].c[0], ai = x[k + half].c[1];
                    const S tr = wr * ar - wi * ai, ti = wr * ai + wi * ar;
                    const S ur = x[k].c[0], ui = x[k].c[1];
                    x[k].c[0] = ur + tr;
                    x[k].c[1] = ui + ti;
                    x[k + half].c[0] = ur - tr;
                    x[k + half].c[1] = ui - ti;
                }
            }
        }
        return;
    }
    vec_t<2, S> in[n];  // the direct sum reads a copy of the input
    for (int j = 0; j < n; ++j) in[j] = x[j];
    for (int k = 0; k < n; ++k) {
        S re = 0, im = 0;
        for (int j = 0; j < n; ++j) {
            const double angle = sign * two_pi * (double)(((int64_t)j * k) % n) / n;
            const S wr = (S)libm::cos(angle), wi = (S)libm::sin(angle);
            re += wr * in[j].c[0] - wi * in[j].c[1];
            im += wr * in[j].c[1] + wi * in[j].c[0];
        }
        x[k].c[0] = re;
        x[k].c[1] = im;
    }
}

template <typename S, int M, int N> XS_TILE_FUNC tile_t<vec_t<2, S>, M, N> tile_rows_dft(tile_t<vec_t<2, S>, M, N> t, int sign) {
    for (int i = 0; i < M; ++i) dft_in_place<N>(t.c + i * N, sign);
    return t;
}

// forward e^-i, inverse e^+i; each is linear, and the adjoint of the one is the other (the transform's
// conjugate transpose), so a gradient needs no forward value
template <typename S, int M, int N> XS_TILE_FUNC tile_t<vec_t<2, S>, M, N> tile_fft(const tile_t<vec_t<2, S>, M, N>& t) {
    return tile_rows_dft(t, -1);
}
template <typename S, int M, int N> XS_TILE_FUNC tile_t<vec_t<2, S>, M, N> tile_ifft(const tile_t<vec_t<2, S>, M, N>& t) {
    return tile_rows_dft(t, 1);
}
template <typename S, int M, int N>
XS_TILE_FUNC void adj_tile_fft(const tile_t<vec_t<2, S>, M, N>&, const tile_t<vec_t<2, S>, M, N>&, tile_t<vec_t<2, S>, M, N>& adj_t,
                               const tile_t<vec_t<2, S>, M, N>& adj_ret) {
    accum(adj_t, tile_rows_dft(adj_ret, 1));
}
template <typename S, int M, int N>
XS_TILE_FUNC void adj_tile_ifft(const tile_t<vec_t<2, S>, M, N>&, const tile_t<vec_t<2, S>, M, N>&, tile_t<vec_t<2, S>, M, N>& adj_t,
                                const tile_t<vec_t<2, S>, M, N>& adj_ret) {
    accum(adj_t, tile_rows_dft(adj_ret, -1));
}

#undef XS_TILE_FUNC

}  // namespace xs
