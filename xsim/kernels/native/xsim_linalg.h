// xsim native runtime, small matrix decompositions: svd2, svd3, qr3, eig3, each with its adjoint.
// A decomposition returns its factors packed side by side in one matrix (svd: [U | sigma | V],
// qr3: [Q | R], eig3: [Q | d]); the frontend's special forms unpack them. One packed value keeps
// the adjoint of all factors in one call, which the singular-value rule below needs.
//
// Repeated singular values (eigenvalues): the adjoint's off-diagonal terms are
//   (a_ij + b_ij) / (2 (s_j - s_i)) + (a_ij - b_ij) / (2 (s_j + s_i))
// with a = J - J^T, J = U^T adj_U and b = K - K^T, K = V^T adj_V. Where a denominator vanishes the
// gradient exists only if its numerator vanishes too (the loss does not see the rotation inside the
// repeated subspace, e.g. sigma alone or the polar factor U V^T): then the term is 0, which is the
// exact gradient. Otherwise the gradient is undefined and the term is NaN, never a finite wrong number.
#pragma once
#include "xsim_vector.h"

namespace xs {

template <typename T> XS_FUNC T linalg_eps() {
    return sizeof(T) == 2 ? T(9.765625e-04) : (sizeof(T) == 4 ? T(1.1920929e-07) : T(2.220446049250313e-16));
}

// NaN of any float type, half included (converted from float's).
template <typename T> XS_FUNC T nan_value() { return T(special_float<float>(0)); }

// The contribution num / den of a term whose denominator may vanish at a repeated value (see above).
template <typename T> XS_FUNC T repeated_safe_ratio(T num, T den, T num_scale, T den_scale) {
    const T eps = linalg_eps<T>();
    if (abs(den) > T(8) * eps * den_scale) return num / den;
    return abs(num) <= sqrt(eps) * num_scale ? T(0) : nan_value<T>();
}

template <int N, typename T> XS_FUNC vec_t<N, T> col(const mat_t<N, N, T>& m, int j) {
    vec_t<N, T> r;
    for (int i = 0; i < N; ++i) r.c[i] = m.c[i][j];
    return r;
}
template <int N, typename T> XS_FUNC void set_col(mat_t<N, N, T>& m, int j, const vec_t<N, T>& v) {
    for (int i = 0; i < N; ++i) m.c[i][j] = v.c[i];
}
template <int N, typename T> XS_FUNC void swap_cols(mat_t<N, N, T>& m, int a, int b) {
    for (int i = 0; i < N; ++i) {
        T t = m.c[i][a];
        m.c[i][a] = m.c[i][b];
        m.c[i][b] = t;
    }
}
template <int N, typename T> XS_FUNC mat_t<N, N, T> eye() {
    mat_t<N, N, T> m{};
    for (int i = 0; i < N; ++i) m.c[i][i] = T(1);
    return m;
}

// A unit vector perpendicular to the unit vector u (3d): u crossed with the axis least aligned with it.
template <typename T> XS_FUNC vec_t<3, T> any_perpendicular(const vec_t<3, T>& u) {
    int k = 0;
    for (int i = 1; i < 3; ++i)
        if (abs(u.c[i]) < abs(u.c[k])) k = i;
    vec_t<3, T> e{};
    e.c[k] = T(1);
    return normalize(cross(u, e));
}

// ------------------------------------------------------------------------------------------
// SVD by one-sided Jacobi (Hestenes): rotate pairs of columns of B = A V until they are orthogonal;
// then sigma_i = |B e_i| and U e_i = B e_i / sigma_i, sorted by decreasing sigma. svd3 makes U and V
// rotations (det +1) with sigma[2] carrying the sign of det(A); svd2 keeps sigma >= 0.

template <int N, typename T> struct svd_factors {
    mat_t<N, N, T> U, V;
    vec_t<N, T> s;
};

template <int N, typename T> XS_FUNC svd_factors<N, T> svd_jacobi(const mat_t<N, N, T>& A, bool signed_last) {
    mat_t<N, N, T> B = A, V = eye<N, T>();
    const T eps = linalg_eps<T>();
    for (int sweep = 0; sweep < 32; ++sweep) {
        bool rotated = false;
        for (int p = 0; p < N - 1; ++p)
            for (int q = p + 1; q < N; ++q) {
                T alpha = T(0), beta = T(0), gamma = T(0);
                for (int k = 0; k < N; ++k) {
                    alpha += B.c[k][p] * B.c[k][p];
                    beta += B.c[k][q] * B.c[k][q];
                    gamma += B.c[k][p] * B.c[k][q];
                }
                if (abs(gamma) <= eps * sqrt(alpha * beta) || gamma == T(0)) continue;
                rotated = true;
                T zeta = (beta - alpha) / (T(2) * gamma);
                T t = (zeta >= T(0) ? T(1) : T(-1)) / (abs(zeta) + sqrt(T(1) + zeta * zeta));
                T c = T(1) / sqrt(T(1) + t * t), s = c * t;
                for (int k = 0; k < N; ++k) {
                    T bp = B.c[k][p], bq = B.c[k][q];
                    B.c[k][p] = c * bp - s * bq;
                    B.c[k][q] = s * bp + c * bq;
                    T vp = V.c[k][p], vq = V.c[k][q];
                    V.c[k][p] = c * vp - s * vq;
                    V.c[k][q] = s * vp + c * vq;
                }
            }
        if (!rotated) break;
    }
    vec_t<N, T> norms;
    for (int j = 0; j < N; ++j) norms.c[j] = length(col(B, j));
    for (int i = 1; i < N; ++i)  // insertion sort, decreasing
        for (int j = i; j > 0 && norms.c[j] > norms.c[j - 1]; --j) {
            T t = norms.c[j];
            norms.c[j] = norms.c[j - 1];
            norms.c[j - 1] = t;
            swap_cols(B, j, j - 1);
            swap_cols(V, j, j - 1);
        }
    svd_factors<N, T> f;
    if (signed_last && determinant(V) < T(0)) {
        for (int k = 0; k < N; ++k) {
            V.c[k][N - 1] = -V.c[k][N - 1];
            B.c[k][N - 1] = -B.c[k][N - 1];
        }
    }
    f.V = V;
    if (norms.c[0] == T(0)) {  // A = 0
        f.U = eye<N, T>();
        f.s = vec_t<N, T>{};
        return f;
    }
    vec_t<N, T> u0 = mul(col(B, 0), T(1) / norms.c[0]);
    set_col(f.U, 0, u0);
    f.s.c[0] = norms.c[0];
    vec_t<N, T> u1;
    if (norms.c[1] > eps * norms.c[0]) {
        u1 = col(B, 1);
        u1 = normalize(sub(u1, mul(u0, dot(u0, u1))));  // re-orthogonalised against u0
    } else if constexpr (N == 2) {
        u1 = vec_t<N, T>{{-u0.c[1], u0.c[0]}};
    } else {
        u1 = any_perpendicular(u0);
    }
    set_col(f.U, 1, u1);
    f.s.c[1] = norms.c[1];
    if constexpr (N == 3) {
        vec_t<3, T> u2 = cross(u0, u1);
        set_col(f.U, 2, u2);
        f.s.c[2] = dot(u2, col(B, 2));  // signed
    } else if (signed_last) {
        f.s.c[1] = dot(u1, col(B, 1));
    }
    return f;
}

// Narrower floats are decomposed in double and the factors rounded once: the rotations' rounding would
// otherwise leave sigma and the vectors a few ulps from the float nearest the exact ones.
template <int N, typename T> XS_FUNC svd_factors<N, T> svd_compute(const mat_t<N, N, T>& A, bool signed_last) {
    if constexpr (sizeof(T) >= sizeof(double)) {
        return svd_jacobi(A, signed_last);
    } else {
        svd_factors<N, double> d = svd_jacobi(cast_to<mat_t<N, N, double>>(A), signed_last);
        svd_factors<N, T> f;
        f.U = cast_to<mat_t<N, N, T>>(d.U);
        f.V = cast_to<mat_t<N, N, T>>(d.V);
        f.s = cast_to<vec_t<N, T>>(d.s);
        return f;
    }
}

// dA = U [diag(adj_s) + X] V^T with X_ij from J = U^T adj_U, K = V^T adj_V (see the file comment).
template <int N, typename T>
XS_FUNC mat_t<N, N, T> adj_svd_compute(const svd_factors<N, T>& f, const mat_t<N, N, T>& adj_U,
                                       const vec_t<N, T>& adj_s, const mat_t<N, N, T>& adj_V) {
    mat_t<N, N, T> J = mat_mat(transpose(f.U), adj_U), K = mat_mat(transpose(f.V), adj_V), M{};
    T scale = T(0);
    for (int i = 0; i < N; ++i) scale = max(scale, abs(f.s.c[i]));
    for (int i = 0; i < N; ++i) {
        M.c[i][i] = adj_s.c[i];
        for (int j = 0; j < N; ++j) {
            if (i == j) continue;
            T a = J.c[i][j] - J.c[j][i], b = K.c[i][j] - K.c[j][i], si = f.s.c[i], sj = f.s.c[j];
            T nscale = abs(a) + abs(b);
            M.c[i][j] = repeated_safe_ratio(T(0.5) * (a + b), sj - si, nscale, scale) +
                        repeated_safe_ratio(T(0.5) * (a - b), sj + si, nscale, scale);
        }
    }
    return mat_mat(mat_mat(f.U, M), transpose(f.V));
}

template <int N, typename T> XS_FUNC mat_t<N, 2 * N + 1, T> svd_pack(const svd_factors<N, T>& f) {
    mat_t<N, 2 * N + 1, T> P{};
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            P.c[i][j] = f.U.c[i][j];
            P.c[i][N + 1 + j] = f.V.c[i][j];
        }
        P.c[i][N] = f.s.c[i];
    }
    return P;
}

template <int N, typename T>
XS_FUNC void adj_svd_packed(const mat_t<N, N, T>& A, bool signed_last, mat_t<N, N, T>& adj_A,
                            const mat_t<N, 2 * N + 1, T>& adj_P) {
    svd_factors<N, T> f = svd_compute(A, signed_last);
    mat_t<N, N, T> aU, aV;
    vec_t<N, T> as;
    for (int i = 0; i < N; ++i) {
        for (int j = 0; j < N; ++j) {
            aU.c[i][j] = adj_P.c[i][j];
            aV.c[i][j] = adj_P.c[i][N + 1 + j];
        }
        as.c[i] = adj_P.c[i][N];
    }
    accum(adj_A, adj_svd_compute(f, aU, as, aV));
}

template <typename T> XS_FUNC mat_t<3, 7, T> svd3_packed(const mat_t<3, 3, T>& A) { return svd_pack(svd_compute(A, true)); }
template <typename T>
XS_FUNC void adj_svd3_packed(const mat_t<3, 3, T>& A, const mat_t<3, 7, T>&, mat_t<3, 3, T>& adj_A,
                             const mat_t<3, 7, T>& adj_P) {
    adj_svd_packed(A, true, adj_A, adj_P);
}

template <typename T> XS_FUNC mat_t<2, 5, T> svd2_packed(const mat_t<2, 2, T>& A) { return svd_pack(svd_compute(A, false)); }
template <typename T>
XS_FUNC void adj_svd2_packed(const mat_t<2, 2, T>& A, const mat_t<2, 5, T>&, mat_t<2, 2, T>& adj_A,
                             const mat_t<2, 5, T>& adj_P) {
    adj_svd_packed(A, false, adj_A, adj_P);
}

// ------------------------------------------------------------------------------------------
// QR of a 3x3 matrix by Gram-Schmidt (each column orthogonalised twice): Q a rotation (q2 = q0 x q1),
// R upper triangular with r00, r11 >= 0 and r22 of the sign of det(A). Packed [Q | R].

template <typename T> XS_FUNC mat_t<3, 6, T> qr3_packed(const mat_t<3, 3, T>& A) {
    const T eps = linalg_eps<T>();
    vec_t<3, T> a0 = col(A, 0), a1 = col(A, 1), a2 = col(A, 2);
    T n0 = length(a0);
    vec_t<3, T> q0 = n0 > T(0) ? mul(a0, T(1) / n0) : vec_t<3, T>{{T(1), T(0), T(0)}};
    vec_t<3, T> v = sub(a1, mul(q0, dot(q0, a1)));
    v = sub(v, mul(q0, dot(q0, v)));
    T n1 = length(v);
    vec_t<3, T> q1 = n1 > eps * max(n0, length(a1)) ? mul(v, T(1) / n1) : any_perpendicular(q0);
    vec_t<3, T> q2 = cross(q0, q1);
    mat_t<3, 6, T> P{};
    for (int i = 0; i < 3; ++i) {
        P.c[i][0] = q0.c[i];
        P.c[i][1] = q1.c[i];
        P.c[i][2] = q2.c[i];
    }
    P.c[0][3] = dot(q0, a0);
    P.c[0][4] = dot(q0, a1);
    P.c[0][5] = dot(q0, a2);
    P.c[1][4] = dot(q1, a1);
    P.c[1][5] = dot(q1, a2);
    P.c[2][5] = dot(q2, a2);
    return P;
}
// adj_A = (adj_Q + Q copyltu(M)) R^-T, M = R adj_R^T - adj_Q^T Q; copyltu mirrors the lower triangle
// up. Needs a full-rank A (R invertible); a singular R yields NaN, not a finite wrong gradient.
template <typename T>
XS_FUNC void adj_qr3_packed(const mat_t<3, 3, T>&, const mat_t<3, 6, T>& P, mat_t<3, 3, T>& adj_A,
                            const mat_t<3, 6, T>& adj_P) {
    mat_t<3, 3, T> Q, R, aQ, aR;
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
            Q.c[i][j] = P.c[i][j];
            R.c[i][j] = P.c[i][3 + j];
            aQ.c[i][j] = adj_P.c[i][j];
            aR.c[i][j] = j >= i ? adj_P.c[i][3 + j] : T(0);
        }
    mat_t<3, 3, T> M = sub(mat_mat(R, transpose(aR)), mat_mat(transpose(aQ), Q));
    for (int i = 0; i < 3; ++i)
        for (int j = i + 1; j < 3; ++j) M.c[i][j] = M.c[j][i];
    T det = R.c[0][0] * R.c[1][1] * R.c[2][2];
    mat_t<3, 3, T> Rinv = det != T(0) ? inverse(R) : mul(eye<3, T>(), nan_value<T>());
    accum(adj_A, mat_mat(add(aQ, mat_mat(Q, M)), transpose(Rinv)));
}

// ------------------------------------------------------------------------------------------
// Symmetric eigendecomposition of (A + A^T) / 2 by cyclic Jacobi rotations: Q a rotation whose
// columns are eigenvectors, eigenvalues d ascending. Packed [Q | d].

template <typename T> struct eig_factors {
    mat_t<3, 3, T> Q;
    vec_t<3, T> d;
};

template <typename T> XS_FUNC eig_factors<T> eig3_compute(const mat_t<3, 3, T>& A0) {
    mat_t<3, 3, T> A = mul(add(A0, transpose(A0)), T(0.5)), Q = eye<3, T>();
    const T eps = linalg_eps<T>();
    for (int sweep = 0; sweep < 32; ++sweep) {
        T off = abs(A.c[0][1]) + abs(A.c[0][2]) + abs(A.c[1][2]);
        T diag = abs(A.c[0][0]) + abs(A.c[1][1]) + abs(A.c[2][2]);
        if (off <= eps * diag || off == T(0)) break;
        for (int p = 0; p < 2; ++p)
            for (int q = p + 1; q < 3; ++q) {
                T apq = A.c[p][q];
                if (apq == T(0)) continue;
                T theta = (A.c[q][q] - A.c[p][p]) / (T(2) * apq);
                T t = (theta >= T(0) ? T(1) : T(-1)) / (abs(theta) + sqrt(T(1) + theta * theta));
                T c = T(1) / sqrt(T(1) + t * t), s = t * c;
                // A <- G^T A G and Q <- Q G with G the rotation in the (p, q) plane
                for (int k = 0; k < 3; ++k) {
                    T akp = A.c[k][p], akq = A.c[k][q];
                    A.c[k][p] = c * akp - s * akq;
                    A.c[k][q] = s * akp + c * akq;
                }
                for (int k = 0; k < 3; ++k) {
                    T apk = A.c[p][k], aqk = A.c[q][k];
                    A.c[p][k] = c * apk - s * aqk;
                    A.c[q][k] = s * apk + c * aqk;
                }
                for (int k = 0; k < 3; ++k) {
                    T qkp = Q.c[k][p], qkq = Q.c[k][q];
                    Q.c[k][p] = c * qkp - s * qkq;
                    Q.c[k][q] = s * qkp + c * qkq;
                }
            }
    }
    eig_factors<T> f;
    for (int i = 0; i < 3; ++i) f.d.c[i] = A.c[i][i];
    for (int i = 1; i < 3; ++i)
        for (int j = i; j > 0 && f.d.c[j] < f.d.c[j - 1]; --j) {
            T t = f.d.c[j];
            f.d.c[j] = f.d.c[j - 1];
            f.d.c[j - 1] = t;
            swap_cols(Q, j, j - 1);
        }
    if (determinant(Q) < T(0))
        for (int k = 0; k < 3; ++k) Q.c[k][2] = -Q.c[k][2];
    f.Q = Q;
    return f;
}

template <typename T> XS_FUNC mat_t<3, 4, T> eig3_packed(const mat_t<3, 3, T>& A) {
    eig_factors<T> f = eig3_compute(A);
    mat_t<3, 4, T> P{};
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) P.c[i][j] = f.Q.c[i][j];
        P.c[i][3] = f.d.c[i];
    }
    return P;
}
// adj_A = sym(Q (diag(adj_d) + X) Q^T), X_ij = (P_ij - P_ji) / (2 (d_j - d_i)), P = Q^T adj_Q: a repeated
// eigenvalue contributes 0 where P_ij = P_ji (the loss ignores the basis of its eigenspace), else NaN.
template <typename T>
XS_FUNC void adj_eig3_packed(const mat_t<3, 3, T>&, const mat_t<3, 4, T>& Pk, mat_t<3, 3, T>& adj_A,
                             const mat_t<3, 4, T>& adj_Pk) {
    mat_t<3, 3, T> Q, aQ, X{};
    T scale = T(0);
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
            Q.c[i][j] = Pk.c[i][j];
            aQ.c[i][j] = adj_Pk.c[i][j];
        }
        scale = max(scale, abs(Pk.c[i][3]));
    }
    mat_t<3, 3, T> P = mat_mat(transpose(Q), aQ);
    for (int i = 0; i < 3; ++i) {
        X.c[i][i] = adj_Pk.c[i][3];
        for (int j = 0; j < 3; ++j)
            if (i != j) {
                T num = T(0.5) * (P.c[i][j] - P.c[j][i]);
                X.c[i][j] = repeated_safe_ratio(num, Pk.c[j][3] - Pk.c[i][3], abs(P.c[i][j]) + abs(P.c[j][i]), scale);
            }
    }
    mat_t<3, 3, T> G = mat_mat(mat_mat(Q, X), transpose(Q));
    accum(adj_A, mul(add(G, transpose(G)), T(0.5)));
}

}  // namespace xs
