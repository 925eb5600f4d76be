// xsim native runtime, quaternions (x, y, z, w storage) and rigid transforms (p, q): each forward
// next to its adjoint. Elementwise operators (add, sub, neg, mul/div by a scalar, eq, ne) are the
// composite ones of xsim_vector.h; dot, length, length_sq and normalize are shared the same way.
#pragma once
#include "xsim_vector.h"

namespace xs {

template <typename T> XS_FUNC vec_t<3, T> vec_part(const quat_t<T>& q) { return {{q.c[0], q.c[1], q.c[2]}}; }
template <typename T> XS_FUNC quat_t<T> make_quat(const vec_t<3, T>& v, T w) { return {{v.c[0], v.c[1], v.c[2], w}}; }
template <typename T> XS_FUNC quat_t<T> conjugate(const quat_t<T>& q) { return {{-q.c[0], -q.c[1], -q.c[2], q.c[3]}}; }

// ------------------------------------------------------------------------------------------
// quaternion algebra

template <typename T> XS_FUNC T qdot(const quat_t<T>& a, const quat_t<T>& b) { return dot(a, b); }
template <typename T>
XS_FUNC void adj_qdot(const quat_t<T>& a, const quat_t<T>& b, T ret, quat_t<T>& adj_a, quat_t<T>& adj_b, T adj_ret) {
    adj_dot(a, b, ret, adj_a, adj_b, adj_ret);
}

template <typename T> XS_FUNC T qlength(const quat_t<T>& q) { return length(q); }
template <typename T> XS_FUNC void adj_qlength(const quat_t<T>& q, T ret, quat_t<T>& adj_q, T adj_ret) {
    adj_length(q, ret, adj_q, adj_ret);
}

template <typename T> XS_FUNC T qlength_sq(const quat_t<T>& q) { return length_sq(q); }
template <typename T> XS_FUNC void adj_qlength_sq(const quat_t<T>& q, T ret, quat_t<T>& adj_q, T adj_ret) {
    adj_length_sq(q, ret, adj_q, adj_ret);
}

template <typename T> XS_FUNC quat_t<T> qnormalize(const quat_t<T>& q) { return normalize(q); }
template <typename T>
XS_FUNC void adj_qnormalize(const quat_t<T>& q, const quat_t<T>& ret, quat_t<T>& adj_q, const quat_t<T>& adj_ret) {
    adj_normalize(q, ret, adj_q, adj_ret);
}

// Hamilton product: (a*b).xyz = a.w b.xyz + b.w a.xyz + a.xyz x b.xyz, (a*b).w = a.w b.w - a.xyz . b.xyz
template <typename T> XS_FUNC quat_t<T> quat_mul(const quat_t<T>& a, const quat_t<T>& b) {
    vec_t<3, T> u = vec_part(a), v = vec_part(b);
    T aw = a.c[3], bw = b.c[3];
    return make_quat(add(add(mul(v, aw), mul(u, bw)), cross(u, v)), aw * bw - dot(u, v));
}
// Left and right multiplication by a quaternion are transposed by conjugating it.
template <typename T>
XS_FUNC void adj_quat_mul(const quat_t<T>& a, const quat_t<T>& b, const quat_t<T>&, quat_t<T>& adj_a,
                          quat_t<T>& adj_b, const quat_t<T>& adj_ret) {
    accum(adj_a, quat_mul(adj_ret, conjugate(b)));
    accum(adj_b, quat_mul(conjugate(a), adj_ret));
}

// (axis sin(angle/2), cos(angle/2)); the axis is used as given, not normalised.
template <typename T> XS_FUNC quat_t<T> quat_from_axis_angle(const vec_t<3, T>& axis, T angle) {
    T h = angle * T(0.5);
    return make_quat(mul(axis, sin(h)), cos(h));
}
template <typename T>
XS_FUNC void adj_quat_from_axis_angle(const vec_t<3, T>& axis, T angle, const quat_t<T>&, vec_t<3, T>& adj_axis,
                                      T& adj_angle, const quat_t<T>& adj_ret) {
    T h = angle * T(0.5), s = sin(h), c = cos(h);
    vec_t<3, T> g = vec_part(adj_ret);
    accum(adj_axis, mul(g, s));
    adj_angle += T(0.5) * (dot(g, axis) * c - adj_ret.c[3] * s);
}

// Assumes a unit quaternion, like Warp: the inverse is the conjugate.
template <typename T> XS_FUNC quat_t<T> quat_inverse(const quat_t<T>& q) { return conjugate(q); }
template <typename T>
XS_FUNC void adj_quat_inverse(const quat_t<T>&, const quat_t<T>&, quat_t<T>& adj_q, const quat_t<T>& adj_ret) {
    accum(adj_q, conjugate(adj_ret));
}

// ------------------------------------------------------------------------------------------
// rotation of vectors

// r = (2w^2 - 1) v + 2 u (u.v) + 2 s w (u x v), u = q.xyz: the rotation by q for s = 1 and by
// its conjugate for s = -1. quat_rotate, quat_rotate_inv, quat_to_matrix and the transforms
// all use this one formula, so they agree exactly even for quaternions that are not unit.
template <typename T> XS_FUNC vec_t<3, T> rotate_signed(const quat_t<T>& q, const vec_t<3, T>& v, T s) {
    vec_t<3, T> u = vec_part(q);
    T w = q.c[3];
    vec_t<3, T> r = add(mul(v, T(2) * w * w - T(1)), mul(u, T(2) * dot(u, v)));
    return add(r, mul(cross(u, v), T(2) * s * w));
}
template <typename T>
XS_FUNC void adj_rotate_signed(const quat_t<T>& q, const vec_t<3, T>& v, T s, quat_t<T>& adj_q, vec_t<3, T>& adj_v,
                               const vec_t<3, T>& g) {
    vec_t<3, T> u = vec_part(q);
    T w = q.c[3], ug = dot(u, g);
    // the rotation matrix transposed is the same formula with -s
    accum(adj_v, rotate_signed(q, g, -s));
    vec_t<3, T> du = add(add(mul(g, T(2) * dot(u, v)), mul(v, T(2) * ug)), mul(cross(v, g), T(2) * s * w));
    for (int i = 0; i < 3; ++i) adj_q.c[i] += du.c[i];
    adj_q.c[3] += T(4) * w * dot(v, g) + T(2) * s * dot(cross(u, v), g);
}

template <typename T> XS_FUNC vec_t<3, T> quat_rotate(const quat_t<T>& q, const vec_t<3, T>& v) {
    return rotate_signed(q, v, T(1));
}
template <typename T>
XS_FUNC void adj_quat_rotate(const quat_t<T>& q, const vec_t<3, T>& v, const vec_t<3, T>&, quat_t<T>& adj_q,
                             vec_t<3, T>& adj_v, const vec_t<3, T>& adj_ret) {
    adj_rotate_signed(q, v, T(1), adj_q, adj_v, adj_ret);
}

template <typename T> XS_FUNC vec_t<3, T> quat_rotate_inv(const quat_t<T>& q, const vec_t<3, T>& v) {
    return rotate_signed(q, v, T(-1));
}
template <typename T>
XS_FUNC void adj_quat_rotate_inv(const quat_t<T>& q, const vec_t<3, T>& v, const vec_t<3, T>&, quat_t<T>& adj_q,
                                 vec_t<3, T>& adj_v, const vec_t<3, T>& adj_ret) {
    adj_rotate_signed(q, v, T(-1), adj_q, adj_v, adj_ret);
}

// Column j is the rotated basis vector e_j.
template <typename T> XS_FUNC mat_t<3, 3, T> quat_to_matrix(const quat_t<T>& q) {
    mat_t<3, 3, T> m{};
    for (int j = 0; j < 3; ++j) {
        vec_t<3, T> e{};
        e.c[j] = T(1);
        vec_t<3, T> col = quat_rotate(q, e);
        for (int i = 0; i < 3; ++i) m.c[i][j] = col.c[i];
    }
    return m;
}
template <typename T>
XS_FUNC void adj_quat_to_matrix(const quat_t<T>& q, const mat_t<3, 3, T>&, quat_t<T>& adj_q,
                                const mat_t<3, 3, T>& adj_ret) {
    for (int j = 0; j < 3; ++j) {
        vec_t<3, T> e{}, adj_e{};
        e.c[j] = T(1);
        vec_t<3, T> g = {{adj_ret.c[0][j], adj_ret.c[1][j], adj_ret.c[2][j]}};
        adj_rotate_signed(q, e, T(1), adj_q, adj_e, g);
    }
}

// ------------------------------------------------------------------------------------------
// rigid transforms: x -> p + rotate(q, x)

template <typename T> XS_FUNC vec_t<3, T> transform_point(const transform_t<T>& t, const vec_t<3, T>& x) {
    return add(t.p, quat_rotate(t.q, x));
}
template <typename T>
XS_FUNC void adj_transform_point(const transform_t<T>& t, const vec_t<3, T>& x, const vec_t<3, T>&,
                                 transform_t<T>& adj_t, vec_t<3, T>& adj_x, const vec_t<3, T>& adj_ret) {
    accum(adj_t.p, adj_ret);
    adj_rotate_signed(t.q, x, T(1), adj_t.q, adj_x, adj_ret);
}

template <typename T> XS_FUNC vec_t<3, T> transform_vector(const transform_t<T>& t, const vec_t<3, T>& v) {
    return quat_rotate(t.q, v);
}
template <typename T>
XS_FUNC void adj_transform_vector(const transform_t<T>& t, const vec_t<3, T>& v, const vec_t<3, T>&,
                                  transform_t<T>& adj_t, vec_t<3, T>& adj_v, const vec_t<3, T>& adj_ret) {
    adj_rotate_signed(t.q, v, T(1), adj_t.q, adj_v, adj_ret);
}

// A 4x4 matrix on a point (w = 1) or a direction (w = 0): the first three rows of m (x, w), column vectors,
// no perspective divide (Warp's transform_point/transform_vector on a mat44).
template <typename T> XS_FUNC vec_t<3, T> mat44_apply(const mat_t<4, 4, T>& m, const vec_t<3, T>& x, T w) {
    vec_t<3, T> r{};
    for (int i = 0; i < 3; ++i) r.c[i] = m.c[i][0] * x.c[0] + m.c[i][1] * x.c[1] + m.c[i][2] * x.c[2] + m.c[i][3] * w;
    return r;
}
template <typename T>
XS_FUNC void adj_mat44_apply(const mat_t<4, 4, T>& m, const vec_t<3, T>& x, T w, mat_t<4, 4, T>& adj_m,
                             vec_t<3, T>& adj_x, const vec_t<3, T>& adj_ret) {
    for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
            adj_m.c[i][j] += adj_ret.c[i] * x.c[j];
            adj_x.c[j] += m.c[i][j] * adj_ret.c[i];
        }
        adj_m.c[i][3] += adj_ret.c[i] * w;
    }
}

template <typename T> XS_FUNC vec_t<3, T> transform_point(const mat_t<4, 4, T>& m, const vec_t<3, T>& x) {
    return mat44_apply(m, x, T(1));
}
template <typename T>
XS_FUNC void adj_transform_point(const mat_t<4, 4, T>& m, const vec_t<3, T>& x, const vec_t<3, T>&,
                                 mat_t<4, 4, T>& adj_m, vec_t<3, T>& adj_x, const vec_t<3, T>& adj_ret) {
    adj_mat44_apply(m, x, T(1), adj_m, adj_x, adj_ret);
}

template <typename T> XS_FUNC vec_t<3, T> transform_vector(const mat_t<4, 4, T>& m, const vec_t<3, T>& v) {
    return mat44_apply(m, v, T(0));
}
template <typename T>
XS_FUNC void adj_transform_vector(const mat_t<4, 4, T>& m, const vec_t<3, T>& v, const vec_t<3, T>&,
                                  mat_t<4, 4, T>& adj_m, vec_t<3, T>& adj_v, const vec_t<3, T>& adj_ret) {
    adj_mat44_apply(m, v, T(0), adj_m, adj_v, adj_ret);
}

// a * b: apply b, then a
template <typename T> XS_FUNC transform_t<T> transform_multiply(const transform_t<T>& a, const transform_t<T>& b) {
    return {transform_point(a, b.p), quat_mul(a.q, b.q)};
}
template <typename T>
XS_FUNC void adj_transform_multiply(const transform_t<T>& a, const transform_t<T>& b, const transform_t<T>& ret,
                                    transform_t<T>& adj_a, transform_t<T>& adj_b, const transform_t<T>& adj_ret) {
    adj_transform_point(a, b.p, ret.p, adj_a, adj_b.p, adj_ret.p);
    adj_quat_mul(a.q, b.q, ret.q, adj_a.q, adj_b.q, adj_ret.q);
}

// (p, q)^-1 = (-rotate_inv(q, p), conj(q)), exact for unit q.
template <typename T> XS_FUNC transform_t<T> transform_inverse(const transform_t<T>& t) {
    return {neg(quat_rotate_inv(t.q, t.p)), conjugate(t.q)};
}
template <typename T>
XS_FUNC void adj_transform_inverse(const transform_t<T>& t, const transform_t<T>&, transform_t<T>& adj_t,
                                   const transform_t<T>& adj_ret) {
    adj_rotate_signed(t.q, t.p, T(-1), adj_t.q, adj_t.p, neg(adj_ret.p));
    accum(adj_t.q, conjugate(adj_ret.q));
}

template <typename T> XS_FUNC vec_t<3, T> transform_get_translation(const transform_t<T>& t) { return t.p; }
template <typename T>
XS_FUNC void adj_transform_get_translation(const transform_t<T>&, const vec_t<3, T>&, transform_t<T>& adj_t,
                                           const vec_t<3, T>& adj_ret) {
    accum(adj_t.p, adj_ret);
}

template <typename T> XS_FUNC quat_t<T> transform_get_rotation(const transform_t<T>& t) { return t.q; }
template <typename T>
XS_FUNC void adj_transform_get_rotation(const transform_t<T>&, const quat_t<T>&, transform_t<T>& adj_t,
                                        const quat_t<T>& adj_ret) {
    accum(adj_t.q, adj_ret);
}

}  // namespace xs
