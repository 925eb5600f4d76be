// xsim native runtime, geometry queries: triangle meshes with a BVH (closest point with four sign
// methods, ray cast, AABB overlap) and hash grids of points (neighbour candidates), read through the
// uint64 id of a host object (xsim/geometry.py), which is the address of a descriptor below.
//
// Query results are the kernel language's structs (MeshQueryPoint, MeshQueryRay, MeshQueryAABB,
// HashGridQuery, defined in builtins_geometry.py and emitted after this header), so the functions
// that make them are templates on the struct type: fields are reached by name at instantiation.
// Arithmetic is in double: a closest point or a ray hit on a shared edge must not fall through.
#pragma once
#include "xsim_core.h"
#include "xsim_math.h"

namespace xs {

// "xsimMESH" and "xsimGRID": a descriptor starts with its kind's magic number
constexpr uint64_t MESH_MAGIC = 0x4853454d6d697378ull;
constexpr uint64_t GRID_MAGIC = 0x444952476d697378ull;
constexpr int BVH_STACK = 64;  // the builder splits at the median count, so depth <= log2(tris) + 1

// A BVH node in depth-first order: the left child of an inner node is the next node, `right` the
// other one; `escape` is the node after this subtree (stackless traversal of AABB queries). A leaf
// (count > 0) holds prims[first .. first + count).
struct bvh_node {
    float lo[3];
    int32_t first;
    float hi[3];
    int32_t count;
    int32_t right;
    int32_t escape;
};

struct mesh_desc {
    uint64_t magic;
    const vec_t<3, float>* points;
    const vec_t<3, float>* velocities;  // null without velocities
    const int32_t* indices;
    const bvh_node* nodes;
    const int32_t* prims;
    const vec_t<3, float>* edge_normals;    // 3 per face, edge k joins corners k and k+1
    const vec_t<3, float>* vertex_normals;  // angle-weighted pseudo-normals
    vec_t<3, float>* points_grad;           // the gradients of points and velocities, null where the
    vec_t<3, float>* velocities_grad;       // array has none (read through mesh_get(id) in a kernel)
    int32_t num_points, num_tris, num_nodes, unused;
};

struct grid_desc {
    uint64_t magic;
    const int32_t* point_ids;    // sorted order -> original point index (null before build)
    const int32_t* cell_starts;  // per hashed cell, a range of point_ids
    const int32_t* cell_ends;
    int32_t dim[3];
    int32_t num_points;
    float inv_cell_width;
    int32_t unused;
};

XS_FUNC const mesh_desc* mesh_get(uint64_t id) {
    const mesh_desc* m = (const mesh_desc*)(uintptr_t)id;
    return m && m->magic == MESH_MAGIC ? m : nullptr;
}

// mesh_get(id) in a kernel: Warp's Mesh value, a struct S of the mesh's arrays (points, velocities,
// indices) as 1-d views; with GRAD the same struct of their gradient views (indices: none).
// An id naming no mesh, or a mesh without velocities, gives empty arrays.
template <typename E> XS_FUNC array_desc mesh_array(const E* p, int64_t n) {
    return p ? array_from_ptr<E, 1>((uint64_t)(uintptr_t)p, n) : array_desc{};
}

template <typename S, bool GRAD = false> XS_FUNC S mesh_get_arrays(uint64_t id) {
    const mesh_desc* m = mesh_get(id);
    S r{};
    if (!m) return r;
    r.points = mesh_array(GRAD ? m->points_grad : m->points, m->num_points);
    r.velocities = mesh_array(GRAD ? m->velocities_grad : m->velocities, m->num_points);
    if (!GRAD) r.indices = mesh_array(m->indices, 3 * (int64_t)m->num_tris);
    return r;
}

XS_FUNC const grid_desc* grid_get(uint64_t id) {
    const grid_desc* g = (const grid_desc*)(uintptr_t)id;
    return g && g->magic == GRID_MAGIC ? g : nullptr;
}

// ------------------------------------------------------------------------------------------
// small double-precision vector helpers

struct d3 {
    double x, y, z;
};
XS_FUNC d3 to_d3(const vec_t<3, float>& v) { return {v.c[0], v.c[1], v.c[2]}; }
XS_FUNC vec_t<3, float> to_f3(const d3& v) { return {{(float)v.x, (float)v.y, (float)v.z}}; }
XS_FUNC d3 operator-(const d3& a, const d3& b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
XS_FUNC d3 operator+(const d3& a, const d3& b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
XS_FUNC d3 operator*(double s, const d3& a) { return {s * a.x, s * a.y, s * a.z}; }
XS_FUNC double dot(const d3& a, const d3& b) { return a.x * b.x + a.y * b.y + a.z * b.z; }
XS_FUNC d3 cross(const d3& a, const d3& b) {
    return {a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x};
}
XS_FUNC double comp(const d3& a, int i) { return i == 0 ? a.x : (i == 1 ? a.y : a.z); }

XS_FUNC void tri_points(const mesh_desc* m, int f, d3& a, d3& b, d3& c) {
    a = to_d3(m->points[m->indices[3 * f]]);
    b = to_d3(m->points[m->indices[3 * f + 1]]);
    c = to_d3(m->points[m->indices[3 * f + 2]]);
}

// squared distance from p to a node's box (0 inside)
XS_FUNC double box_dist_sq(const bvh_node& n, const d3& p) {
    double s = 0.0;
    for (int i = 0; i < 3; ++i) {
        double x = comp(p, i), d = 0.0;
        if (x < n.lo[i]) d = n.lo[i] - x;
        else if (x > n.hi[i]) d = x - n.hi[i];
        s += d * d;
    }
    return s;
}

// ------------------------------------------------------------------------------------------
// closest point on a triangle (Ericson's Voronoi regions), as weights (wa, wb, wc) of its corners.
// Region: 0 interior, 1..3 corner a, b, c, 4 edge ab, 5 edge bc, 6 edge ca.

struct closest_t {
    double wa, wb, wc;
    int region;
};

XS_FUNC closest_t closest_on_triangle(const d3& a, const d3& b, const d3& c, const d3& p) {
    const d3 ab = b - a, ac = c - a, ap = p - a;
    const double d1 = dot(ab, ap), d2 = dot(ac, ap);
    if (d1 <= 0.0 && d2 <= 0.0) return {1.0, 0.0, 0.0, 1};
    const d3 bp = p - b;
    const double d3_ = dot(ab, bp), d4 = dot(ac, bp);
    if (d3_ >= 0.0 && d4 <= d3_) return {0.0, 1.0, 0.0, 2};
    const double vc = d1 * d4 - d3_ * d2;
    if (vc <= 0.0 && d1 >= 0.0 && d3_ <= 0.0) {
        const double t = d1 / (d1 - d3_);
        return {1.0 - t, t, 0.0, 4};
    }
    const d3 cp = p - c;
    const double d5 = dot(ab, cp), d6 = dot(ac, cp);
    if (d6 >= 0.0 && d5 <= d6) return {0.0, 0.0, 1.0, 3};
    const double vb = d5 * d2 - d1 * d6;
    if (vb <= 0.0 && d2 >= 0.0 && d6 <= 0.0) {
        const double t = d2 / (d2 - d6);
        return {1.0 - t, 0.0, t, 6};
    }
    const double va = d3_ * d6 - d5 * d4;
    if (va <= 0.0 && (d4 - d3_) >= 0.0 && (d5 - d6) >= 0.0) {
        const double t = (d4 - d3_) / ((d4 - d3_) + (d5 - d6));
        return {0.0, 1.0 - t, t, 5};
    }
    const double inv = 1.0 / (va + vb + vc);
    const double wb = vb * inv, wc = vc * inv;
    return {1.0 - wb - wc, wb, wc, 0};
}

// A triangle whose area is negligible against its edges has no usable closest point or normal.
XS_FUNC bool degenerate(const d3& a, const d3& b, const d3& c) {
    const d3 n = cross(b - a, c - a);
    const double e = dot(b - a, b - a) + dot(c - b, c - b) + dot(a - c, a - c);
    return dot(n, n) <= 1e-14 * e * e;
}

struct nearest_t {
    int face;
    closest_t w;
    double dist_sq;
};

// The closest face strictly within max_dist (face -1 if none), nearer children first.
XS_FUNC nearest_t mesh_nearest(const mesh_desc* m, const d3& p, double max_dist) {
    nearest_t best{-1, {0.0, 0.0, 0.0, 0}, max_dist * max_dist};
    int stack[BVH_STACK];
    int top = 0;
    stack[top++] = 0;
    while (top > 0) {
        const int ni = stack[--top];
        const bvh_node& n = m->nodes[ni];
        if (box_dist_sq(n, p) >= best.dist_sq) continue;
        if (n.count > 0) {
            for (int k = n.first; k < n.first + n.count; ++k) {
                const int f = m->prims[k];
                d3 a, b, c;
                tri_points(m, f, a, b, c);
                if (degenerate(a, b, c)) continue;
                const closest_t w = closest_on_triangle(a, b, c, p);
                const d3 q = w.wa * a + w.wb * b + w.wc * c;
                const double d2 = dot(q - p, q - p);
                if (d2 < best.dist_sq) best = {f, w, d2};
            }
        } else if (top + 2 <= BVH_STACK) {
            const int l = ni + 1, r = n.right;
            const bool left_first = box_dist_sq(m->nodes[l], p) <= box_dist_sq(m->nodes[r], p);
            stack[top++] = left_first ? r : l;
            stack[top++] = left_first ? l : r;
        }
    }
    return best;
}

// ------------------------------------------------------------------------------------------
// rays: Moller-Trumbore against each leaf triangle, slab test against each box

struct ray_hit_t {
    int face;
    double t, wb, wc;  // hit = start + t dir = (1 - wb - wc) a + wb b + wc c
};

XS_FUNC bool ray_box(const bvh_node& n, const d3& s, const d3& d, double max_t) {
    double t0 = 0.0, t1 = max_t;
    for (int i = 0; i < 3; ++i) {
        const double o = comp(s, i), v = comp(d, i);
        if (v == 0.0) {
            if (o < n.lo[i] || o > n.hi[i]) return false;
            continue;
        }
        double ta = (n.lo[i] - o) / v, tb = (n.hi[i] - o) / v;
        if (ta > tb) { const double x = ta; ta = tb; tb = x; }
        t0 = ta > t0 ? ta : t0;
        t1 = tb < t1 ? tb : t1;
        if (t0 > t1) return false;
    }
    return true;
}

// Inclusive barycentric bounds with a tolerance far below float resolution: a ray through an edge
// shared by two triangles hits at least one of them.
XS_FUNC bool ray_triangle(const d3& s, const d3& d, const d3& a, const d3& b, const d3& c, double& t, double& wb,
                          double& wc) {
    const double tol = 1e-12;
    const d3 e1 = b - a, e2 = c - a;
    const d3 pv = cross(d, e2);
    const double det = dot(e1, pv);
    if (det == 0.0) return false;
    const double inv = 1.0 / det;
    const d3 tv = s - a;
    wb = dot(tv, pv) * inv;
    if (wb < -tol || wb > 1.0 + tol) return false;
    const d3 qv = cross(tv, e1);
    wc = dot(d, qv) * inv;
    if (wc < -tol || wb + wc > 1.0 + tol) return false;
    t = dot(e2, qv) * inv;
    return t >= 0.0;
}

XS_FUNC ray_hit_t mesh_ray(const mesh_desc* m, const d3& s, const d3& d, double max_t, int root) {
    ray_hit_t best{-1, max_t, 0.0, 0.0};
    int stack[BVH_STACK];
    int top = 0;
    stack[top++] = root >= 0 && root < m->num_nodes ? root : 0;
    while (top > 0) {
        const int ni = stack[--top];
        const bvh_node& n = m->nodes[ni];
        if (!ray_box(n, s, d, best.t)) continue;
        if (n.count > 0) {
            for (int k = n.first; k < n.first + n.count; ++k) {
                const int f = m->prims[k];
                d3 a, b, c;
                tri_points(m, f, a, b, c);
                double t, wb, wc;
                if (ray_triangle(s, d, a, b, c, t, wb, wc) && t < best.t) best = {f, t, wb, wc};
            }
        } else if (top + 2 <= BVH_STACK) {
            stack[top++] = n.right;
            stack[top++] = ni + 1;
        }
    }
    return best;
}

XS_FUNC d3 face_normal(const mesh_desc* m, int f) {
    d3 a, b, c;
    tri_points(m, f, a, b, c);
    const d3 n = cross(b - a, c - a);
    const double l = libm::sqrt(dot(n, n));
    return l > 0.0 ? (1.0 / l) * n : d3{0.0, 0.0, 0.0};
}

// ------------------------------------------------------------------------------------------
// inside/outside

// Majority vote of three axis-aligned rays: a ray whose closest hit is on a face's back is inside.
XS_FUNC double sign_rays(const mesh_desc* m, const d3& p) {
    int inside = 0;
    for (int axis = 0; axis < 3; ++axis) {
        const d3 dir{axis == 0 ? 1.0 : 0.0, axis == 1 ? 1.0 : 0.0, axis == 2 ? 1.0 : 0.0};
        const ray_hit_t h = mesh_ray(m, p, dir, 1e300, -1);
        if (h.face >= 0 && dot(dir, face_normal(m, h.face)) > 0.0) ++inside;
    }
    return inside >= 2 ? -1.0 : 1.0;
}

// The angle-weighted pseudo-normal of the closest feature (Baerentzen and Aanaes): a weight below
// eps puts the closest point on that edge or corner.
XS_FUNC double sign_normal(const mesh_desc* m, const d3& p, const nearest_t& n, double eps) {
    const closest_t& w = n.w;
    const bool za = w.wa <= eps, zb = w.wb <= eps, zc = w.wc <= eps;
    d3 normal;
    if ((za && zb) || (zb && zc) || (za && zc)) {
        const int corner = !za ? 0 : (!zb ? 1 : 2);
        normal = to_d3(m->vertex_normals[m->indices[3 * n.face + corner]]);
    } else if (za || zb || zc) {
        const int edge = zc ? 0 : (za ? 1 : 2);  // ab, bc, ca
        normal = to_d3(m->edge_normals[3 * n.face + edge]);
    } else {
        normal = face_normal(m, n.face);
    }
    d3 a, b, c;
    tri_points(m, n.face, a, b, c);
    const d3 q = w.wa * a + w.wb * b + w.wc * c;
    return dot(p - q, normal) >= 0.0 ? 1.0 : -1.0;
}

// The exact generalized winding number: the solid angles of all faces over 4 pi.
XS_FUNC double winding_number(const mesh_desc* m, const d3& p) {
    double total = 0.0;
    for (int f = 0; f < m->num_tris; ++f) {
        d3 a, b, c;
        tri_points(m, f, a, b, c);
        a = a - p;
        b = b - p;
        c = c - p;
        const double la = libm::sqrt(dot(a, a)), lb = libm::sqrt(dot(b, b)), lc = libm::sqrt(dot(c, c));
        const double det = dot(a, cross(b, c));
        const double den = la * lb * lc + dot(a, b) * lc + dot(b, c) * la + dot(c, a) * lb;
        total += 2.0 * libm::atan2(det, den);
    }
    return total / (4.0 * 3.14159265358979323846);
}

// ------------------------------------------------------------------------------------------
// builtins: mesh_query_point (Mode 0 rays, 1 none, 2 pseudo-normal, 3 winding number)

template <typename R, int Mode>
XS_FUNC R mesh_query_point(uint64_t id, const vec_t<3, float>& point, float max_dist, float param_a,
                           float param_b) {
    R r{};
    const mesh_desc* m = mesh_get(id);
    if (!m) return r;
    const d3 p = to_d3(point);
    const nearest_t n = mesh_nearest(m, p, max_dist);
    if (n.face < 0) return r;
    r.result = true;
    r.face = n.face;
    r.u = (float)n.w.wa;
    r.v = (float)n.w.wb;
    if (Mode == 0) r.sign = (float)sign_rays(m, p);
    if (Mode == 2) r.sign = (float)sign_normal(m, p, n, param_a);
    if (Mode == 3) r.sign = winding_number(m, p) > param_b ? -1.0f : 1.0f;
    return r;
}

// u, v move with the point inside the closest feature: on a face they are its projection's
// barycentrics, on an edge the projection's parameter, at a corner constants.
template <typename R, int Mode>
XS_FUNC void adj_mesh_query_point(uint64_t id, const vec_t<3, float>& point, float, float, float, const R& ret,
                                  uint64_t, vec_t<3, float>& adj_point, float&, float&, float&, const R& adj_ret) {
    const mesh_desc* m = mesh_get(id);
    if (!m || !ret.result) return;
    d3 a, b, c;
    tri_points(m, ret.face, a, b, c);
    const d3 p = to_d3(point);
    const closest_t w = closest_on_triangle(a, b, c, p);
    // the adjoint of (wb, wc) from that of u = wa = 1 - wb - wc and v = wb
    const double g_wb = (double)adj_ret.v - (double)adj_ret.u, g_wc = -(double)adj_ret.u;
    d3 g{0.0, 0.0, 0.0};
    if (w.region == 0) {
        // (wb, wc) = G^-1 [e1.(p-a), e2.(p-a)] with the Gram matrix G of the edges e1, e2
        const d3 e1 = b - a, e2 = c - a;
        const double g11 = dot(e1, e1), g12 = dot(e1, e2), g22 = dot(e2, e2);
        const double inv = 1.0 / (g11 * g22 - g12 * g12);
        const double x1 = (g22 * g_wb - g12 * g_wc) * inv, x2 = (g11 * g_wc - g12 * g_wb) * inv;
        g = x1 * e1 + x2 * e2;
    } else if (w.region >= 4) {
        // on the edge from -> to, t = (p - from).e / e.e is the weight of `to` and 1 - t that of `from`
        const int from = w.region - 4, to = (from + 1) % 3;
        const d3 corners[3] = {a, b, c};
        const double g_w[3] = {(double)adj_ret.u, (double)adj_ret.v, 0.0};  // u, v are the weights of a, b
        const d3 e = corners[to] - corners[from];
        g = ((g_w[to] - g_w[from]) / dot(e, e)) * e;
    }
    adj_point.c[0] += (float)g.x;
    adj_point.c[1] += (float)g.y;
    adj_point.c[2] += (float)g.z;
}

// a * b - c * d with the rounding error of c * d added back by FMAs (Kahan's method), in float32
XS_FUNC float diff_of_products(float a, float b, float c, float d) {
    const float cd = c * d;
    return ::fmaf(a, b, -cd) + ::fmaf(-c, d, cd);
}

// The sign Warp gives a ray hit on the triangle (a, b, c): not +-1 but the determinant U + V + W of the
// watertight ray/triangle test of Woop, Benthin and Wald (2013), in float32: the doubled area of the
// triangle projected along the ray onto the plane across its largest direction component (up to
// rounding -dot(cross(b - a, c - a), dir) / |dir_max|: positive where the ray meets the front face).
XS_FUNC float ray_hit_sign(const vec_t<3, float>& start, const vec_t<3, float>& dir, const vec_t<3, float>& a,
                           const vec_t<3, float>& b, const vec_t<3, float>& c) {
    int kz = 0;
    for (int i = 1; i < 3; ++i)
        if (libm::fabs(dir.c[i]) > libm::fabs(dir.c[kz])) kz = i;
    int kx = (kz + 1) % 3, ky = (kz + 2) % 3;
    if (dir.c[kz] < 0.0f) {  // keeps the winding of the projected triangle
        const int k = kx;
        kx = ky;
        ky = k;
    }
    const float sx = dir.c[kx] / dir.c[kz], sy = dir.c[ky] / dir.c[kz];
    float px[3], py[3];  // the corners relative to the start, sheared so that the ray runs along kz
    const vec_t<3, float>* corners[3] = {&a, &b, &c};
    for (int i = 0; i < 3; ++i) {
        const float rx = corners[i]->c[kx] - start.c[kx], ry = corners[i]->c[ky] - start.c[ky];
        const float rz = corners[i]->c[kz] - start.c[kz];
        px[i] = rx - sx * rz;
        py[i] = ry - sy * rz;
    }
    float u = diff_of_products(px[2], py[1], py[2], px[1]);
    float v = diff_of_products(px[0], py[2], py[0], px[2]);
    float w = diff_of_products(px[1], py[0], py[1], px[0]);
    if (u == 0.0f || v == 0.0f || w == 0.0f) {  // on an edge: the exact products, as the test does there
        u = (float)((double)px[2] * py[1] - (double)py[2] * px[1]);
        v = (float)((double)px[0] * py[2] - (double)py[0] * px[2]);
        w = (float)((double)px[1] * py[0] - (double)py[1] * px[0]);
    }
    return u + v + w;
}

template <typename R>
XS_FUNC R mesh_query_ray(uint64_t id, const vec_t<3, float>& start, const vec_t<3, float>& dir, float max_t,
                         int32_t root) {
    R r{};
    const mesh_desc* m = mesh_get(id);
    if (!m) return r;
    const d3 s = to_d3(start), d = to_d3(dir);
    const ray_hit_t h = mesh_ray(m, s, d, max_t, root);
    if (h.face < 0) return r;
    const d3 n = face_normal(m, h.face);
    r.result = true;
    r.face = h.face;
    r.t = (float)h.t;
    r.u = (float)(1.0 - h.wb - h.wc);
    r.v = (float)h.wb;
    r.sign = ray_hit_sign(start, dir, m->points[m->indices[3 * h.face]], m->points[m->indices[3 * h.face + 1]],
                          m->points[m->indices[3 * h.face + 2]]);
    r.normal = to_f3(n);
    return r;
}

// With the face fixed, [-d e1 e2] (t, wb, wc) = s - a, so d(t, wb, wc) = M^-1 (ds + t dd).
template <typename R>
XS_FUNC void adj_mesh_query_ray(uint64_t id, const vec_t<3, float>& start, const vec_t<3, float>& dir, float,
                                int32_t, const R& ret, uint64_t, vec_t<3, float>& adj_start,
                                vec_t<3, float>& adj_dir, float&, int32_t, const R& adj_ret) {
    const mesh_desc* m = mesh_get(id);
    if (!m || !ret.result) return;
    (void)start;
    d3 a, b, c;
    tri_points(m, ret.face, a, b, c);
    const d3 d = to_d3(dir), e1 = b - a, e2 = c - a;
    const d3 cols[3] = {-1.0 * d, e1, e2};
    // the adjoint of (t, wb, wc) from that of t, u = 1 - wb - wc and v = wb
    const double gx[3] = {(double)adj_ret.t, (double)adj_ret.v - (double)adj_ret.u, -(double)adj_ret.u};
    // w = M^-T gx: the rows of M^-1 are the cross products of M's columns over det(M)
    const d3 r0 = cross(cols[1], cols[2]), r1 = cross(cols[2], cols[0]), r2 = cross(cols[0], cols[1]);
    const double det = dot(cols[0], r0);
    if (det == 0.0) return;
    const d3 w = (1.0 / det) * (gx[0] * r0 + gx[1] * r1 + gx[2] * r2);
    const double t = ret.t;
    for (int i = 0; i < 3; ++i) {
        adj_start.c[i] += (float)comp(w, i);
        adj_dir.c[i] += (float)(t * comp(w, i));
    }
}

// ------------------------------------------------------------------------------------------
// mesh_eval_position / mesh_eval_velocity: u a + v b + (1 - u - v) c of the face's corner values

XS_FUNC vec_t<3, float> eval_corners(const mesh_desc* m, const vec_t<3, float>* values, int32_t face, float u,
                                     float v) {
    vec_t<3, float> out{};
    if (!m || !values || face < 0 || face >= m->num_tris) return out;
    const float w = 1.0f - u - v;
    for (int i = 0; i < 3; ++i)
        out.c[i] = u * values[m->indices[3 * face]].c[i] + v * values[m->indices[3 * face + 1]].c[i] +
                   w * values[m->indices[3 * face + 2]].c[i];
    return out;
}

XS_FUNC void adj_eval_corners(const mesh_desc* m, const vec_t<3, float>* values, int32_t face, float& adj_u,
                              float& adj_v, const vec_t<3, float>& adj_ret) {
    if (!m || !values || face < 0 || face >= m->num_tris) return;
    const vec_t<3, float>& a = values[m->indices[3 * face]];
    const vec_t<3, float>& b = values[m->indices[3 * face + 1]];
    const vec_t<3, float>& c = values[m->indices[3 * face + 2]];
    for (int i = 0; i < 3; ++i) {
        adj_u += (a.c[i] - c.c[i]) * adj_ret.c[i];
        adj_v += (b.c[i] - c.c[i]) * adj_ret.c[i];
    }
}

XS_FUNC vec_t<3, float> mesh_eval_position(uint64_t id, int32_t face, float u, float v) {
    const mesh_desc* m = mesh_get(id);
    return eval_corners(m, m ? m->points : nullptr, face, u, v);
}

XS_FUNC void adj_mesh_eval_position(uint64_t id, int32_t face, float, float, const vec_t<3, float>&, uint64_t,
                                    int32_t, float& adj_u, float& adj_v, const vec_t<3, float>& adj_ret) {
    const mesh_desc* m = mesh_get(id);
    adj_eval_corners(m, m ? m->points : nullptr, face, adj_u, adj_v, adj_ret);
}

XS_FUNC vec_t<3, float> mesh_eval_velocity(uint64_t id, int32_t face, float u, float v) {
    const mesh_desc* m = mesh_get(id);
    return eval_corners(m, m ? m->velocities : nullptr, face, u, v);
}

XS_FUNC void adj_mesh_eval_velocity(uint64_t id, int32_t face, float, float, const vec_t<3, float>&, uint64_t,
                                    int32_t, float& adj_u, float& adj_v, const vec_t<3, float>& adj_ret) {
    const mesh_desc* m = mesh_get(id);
    adj_eval_corners(m, m ? m->velocities : nullptr, face, adj_u, adj_v, adj_ret);
}

// ------------------------------------------------------------------------------------------
// mesh_query_aabb: faces whose own bounds overlap the box, found by a stackless walk (escape links)

template <typename Q>
XS_FUNC Q mesh_query_aabb(uint64_t id, const vec_t<3, float>& lower, const vec_t<3, float>& upper) {
    Q q{};
    q.id = id;
    q.lower = lower;
    q.upper = upper;
    return q;
}

XS_FUNC bool overlaps(const float* lo, const float* hi, const vec_t<3, float>& qlo, const vec_t<3, float>& qhi) {
    for (int i = 0; i < 3; ++i)
        if (lo[i] > qhi.c[i] || hi[i] < qlo.c[i]) return false;
    return true;
}

template <typename Q>
XS_FUNC Q mesh_query_aabb_advance(const Q& query) {
    Q q = query;
    q.found = false;
    const mesh_desc* m = mesh_get(q.id);
    if (!m) return q;
    for (;;) {
        while (q.item < q.end) {
            const int f = m->prims[q.item++];
            float lo[3], hi[3];
            for (int i = 0; i < 3; ++i) {
                const float x = m->points[m->indices[3 * f]].c[i], y = m->points[m->indices[3 * f + 1]].c[i],
                            z = m->points[m->indices[3 * f + 2]].c[i];
                lo[i] = x < y ? (x < z ? x : z) : (y < z ? y : z);
                hi[i] = x > y ? (x > z ? x : z) : (y > z ? y : z);
            }
            if (overlaps(lo, hi, q.lower, q.upper)) {
                q.face = f;
                q.found = true;
                return q;
            }
        }
        if (q.node < 0 || q.node >= m->num_nodes) return q;
        const bvh_node& n = m->nodes[q.node];
        if (!overlaps(n.lo, n.hi, q.lower, q.upper)) {
            q.node = n.escape;
        } else if (n.count > 0) {
            q.item = n.first;
            q.end = n.first + n.count;
            q.node = n.escape;
        } else {
            q.node = q.node + 1;
        }
    }
}

// ------------------------------------------------------------------------------------------
// hash grids: the points of every hashed cell the box [p - r, p + r] touches, each cell once

XS_FUNC int32_t grid_cell(const grid_desc* g, int x, int y, int z) {
    const int hx = ((x % g->dim[0]) + g->dim[0]) % g->dim[0];
    const int hy = ((y % g->dim[1]) + g->dim[1]) % g->dim[1];
    const int hz = ((z % g->dim[2]) + g->dim[2]) % g->dim[2];
    return (hz * g->dim[1] + hy) * g->dim[0] + hx;
}

// The cell coordinate of a coordinate x, in float32 as Warp computes it (floor(x * inv_width)), so that a
// point near a cell boundary gets the same candidates: beyond the int range it saturates to INT_MIN or
// INT_MAX - 1 (a query can step one cell past its end), and NaN is cell 0.
XS_FUNC int grid_coord(float x, float inv_width) {
    const float c = libm::floor(x * inv_width);
    if (c >= 2147483648.0f) return 2147483646;
    if (c >= -2147483648.0f) return (int)c;
    if (c < -2147483648.0f) return -2147483647 - 1;
    return 0;
}

template <typename Q>
XS_FUNC void grid_enter_cell(const grid_desc* g, Q& q) {
    const int32_t cell = grid_cell(g, q.cell.c[0], q.cell.c[1], q.cell.c[2]);
    q.item = g->cell_starts[cell];
    q.end = g->cell_ends[cell];
}

template <typename Q>
XS_FUNC Q hash_grid_query(uint64_t id, const vec_t<3, float>& point, float max_dist) {
    Q q{};
    q.id = id;
    q.end = 0;
    const grid_desc* g = grid_get(id);
    if (!g || !g->point_ids) return q;  // advancing it finds nothing
    for (int i = 0; i < 3; ++i) {
        const int lo = grid_coord(point.c[i] - max_dist, g->inv_cell_width);
        int hi = grid_coord(point.c[i] + max_dist, g->inv_cell_width);
        if ((int64_t)hi - lo >= g->dim[i]) hi = lo + g->dim[i] - 1;  // beyond that, hashed cells repeat
        q.lower.c[i] = lo;
        q.upper.c[i] = hi;
    }
    q.cell = q.lower;
    grid_enter_cell(g, q);
    return q;
}

template <typename Q>
XS_FUNC Q hash_grid_query_advance(const Q& query) {
    Q q = query;
    q.found = false;
    const grid_desc* g = grid_get(q.id);
    if (!g || !g->point_ids) return q;
    for (;;) {
        if (q.item < q.end) {
            q.index = g->point_ids[q.item++];
            q.found = true;
            return q;
        }
        if (q.cell.c[2] > q.upper.c[2]) return q;
        if (++q.cell.c[0] > q.upper.c[0]) {
            q.cell.c[0] = q.lower.c[0];
            if (++q.cell.c[1] > q.upper.c[1]) {
                q.cell.c[1] = q.lower.c[1];
                ++q.cell.c[2];
            }
        }
        if (q.cell.c[2] > q.upper.c[2]) return q;
        grid_enter_cell(g, q);
    }
}

XS_FUNC int32_t hash_grid_point_id(uint64_t id, int32_t index) {
    const grid_desc* g = grid_get(id);
    if (!g || !g->point_ids || index < 0 || index >= g->num_points) return -1;
    return g->point_ids[index];
}

// ------------------------------------------------------------------------------------------
// intersect_tri_tri: Moller's interval test (1997, "A Fast Triangle-Triangle Intersection Test", the
// division-free form), in the triangles' precision as Warp's: 1 where (v0, v1, v2) and (u0, u1, u2) meet.
// Each triangle's corners are put on the other's plane by signed distances (|d| < 1e-6 counts as on it);
// both triangles then cut the planes' common line in an interval, and they meet where the intervals do.

template <typename T> struct tri_pts {
    T p[3][3];
};

template <typename T> XS_FUNC void tri_plane(const tri_pts<T>& t, T n[3], T& d) {
    T e1[3], e2[3];
    for (int k = 0; k < 3; ++k) {
        e1[k] = t.p[1][k] - t.p[0][k];
        e2[k] = t.p[2][k] - t.p[0][k];
    }
    n[0] = e1[1] * e2[2] - e1[2] * e2[1];
    n[1] = e1[2] * e2[0] - e1[0] * e2[2];
    n[2] = e1[0] * e2[1] - e1[1] * e2[0];
    d = -(n[0] * t.p[0][0] + n[1] * t.p[0][1] + n[2] * t.p[0][2]);
}

// signed distances (scaled by |n|) of t's corners to the plane (n, d); those within 1e-6 are 0
template <typename T> XS_FUNC void plane_dists(const tri_pts<T>& t, const T n[3], T d, T out[3]) {
    for (int i = 0; i < 3; ++i) {
        const T s = n[0] * t.p[i][0] + n[1] * t.p[i][1] + n[2] * t.p[i][2] + d;
        out[i] = libm::fabs(s) < T(1e-6) ? T(0) : s;
    }
}

// the interval a triangle cuts on the line, as (a, b, c, x0, x1): endpoints a + b / x0 and a + c / x1 along
// the line's axis, from the corner alone on its side of the plane; false when the triangle lies in the plane
template <typename T> XS_FUNC bool line_interval(const T p[3], const T dist[3], T& a, T& b, T& c, T& x0, T& x1) {
    int lone;
    if (dist[0] * dist[1] > T(0)) lone = 2;
    else if (dist[0] * dist[2] > T(0)) lone = 1;
    else if (dist[1] * dist[2] > T(0) || dist[0] != T(0)) lone = 0;
    else if (dist[1] != T(0)) lone = 1;
    else if (dist[2] != T(0)) lone = 2;
    else return false;
    const int i = lone == 0 ? 1 : 0, j = lone == 2 ? 1 : 2;  // the other two corners, in order
    a = p[lone];
    b = (p[i] - p[lone]) * dist[lone];
    c = (p[j] - p[lone]) * dist[lone];
    x0 = dist[lone] - dist[i];
    x1 = dist[lone] - dist[j];
    return true;
}

// 2D: whether segments (p, q) and (r, s) cross or touch, on the axes (i0, i1)
template <typename T> XS_FUNC bool segments_meet(const T* p, const T* q, const T* r, const T* s, int i0, int i1) {
    auto orient = [&](const T* a, const T* b, const T* c) {
        return (b[i0] - a[i0]) * (c[i1] - a[i1]) - (b[i1] - a[i1]) * (c[i0] - a[i0]);
    };
    const T d1 = orient(r, s, p), d2 = orient(r, s, q), d3 = orient(p, q, r), d4 = orient(p, q, s);
    if (((d1 > T(0) && d2 < T(0)) || (d1 < T(0) && d2 > T(0))) && ((d3 > T(0) && d4 < T(0)) || (d3 < T(0) && d4 > T(0))))
        return true;
    auto on = [&](const T* a, const T* b, const T* c, T o) {  // c on segment (a, b), given collinear
        return o == T(0) && min(a[i0], b[i0]) <= c[i0] && c[i0] <= max(a[i0], b[i0]) &&
               min(a[i1], b[i1]) <= c[i1] && c[i1] <= max(a[i1], b[i1]);
    };
    return on(r, s, p, d1) || on(r, s, q, d2) || on(p, q, r, d3) || on(p, q, s, d4);
}

// 2D: whether point x lies in (or on) triangle t, on the axes (i0, i1)
template <typename T> XS_FUNC bool point_in_tri_2d(const T* x, const tri_pts<T>& t, int i0, int i1) {
    T side[3];
    for (int e = 0; e < 3; ++e) {
        const T* a = t.p[e];
        const T* b = t.p[(e + 1) % 3];
        side[e] = (b[i0] - a[i0]) * (x[i1] - a[i1]) - (b[i1] - a[i1]) * (x[i0] - a[i0]);
    }
    return (side[0] >= T(0) && side[1] >= T(0) && side[2] >= T(0)) ||
           (side[0] <= T(0) && side[1] <= T(0) && side[2] <= T(0));
}

// both in one plane (normal n): in the axis-aligned plane where they look largest, an edge of one crosses an
// edge of the other, or one holds a corner of the other
template <typename T> XS_FUNC int coplanar_tris_meet(const T n[3], const tri_pts<T>& v, const tri_pts<T>& u) {
    const T ax = libm::fabs(n[0]), ay = libm::fabs(n[1]), az = libm::fabs(n[2]);
    int i0, i1;  // drop the axis of the largest normal component
    if (ax > ay) {
        if (ax > az) { i0 = 1; i1 = 2; } else { i0 = 0; i1 = 1; }
    } else {
        if (az > ay) { i0 = 0; i1 = 1; } else { i0 = 0; i1 = 2; }
    }
    for (int e = 0; e < 3; ++e)
        for (int f = 0; f < 3; ++f)
            if (segments_meet(v.p[e], v.p[(e + 1) % 3], u.p[f], u.p[(f + 1) % 3], i0, i1)) return 1;
    return point_in_tri_2d(v.p[0], u, i0, i1) || point_in_tri_2d(u.p[0], v, i0, i1) ? 1 : 0;
}

template <typename T>
XS_FUNC int intersect_tri_tri(const vec_t<3, T>& v0, const vec_t<3, T>& v1, const vec_t<3, T>& v2,
                              const vec_t<3, T>& u0, const vec_t<3, T>& u1, const vec_t<3, T>& u2) {
    tri_pts<T> v, u;
    const vec_t<3, T>* vs[3] = {&v0, &v1, &v2};
    const vec_t<3, T>* us[3] = {&u0, &u1, &u2};
    for (int i = 0; i < 3; ++i)
        for (int k = 0; k < 3; ++k) {
            v.p[i][k] = vs[i]->c[k];
            u.p[i][k] = us[i]->c[k];
        }
    T n1[3], n2[3], d1, d2, du[3], dv[3];
    tri_plane(v, n1, d1);
    plane_dists(u, n1, d1, du);
    if (du[0] * du[1] > T(0) && du[0] * du[2] > T(0)) return 0;  // u on one side of v's plane
    tri_plane(u, n2, d2);
    plane_dists(v, n2, d2, dv);
    if (dv[0] * dv[1] > T(0) && dv[0] * dv[2] > T(0)) return 0;
    const T line[3] = {n1[1] * n2[2] - n1[2] * n2[1], n1[2] * n2[0] - n1[0] * n2[2], n1[0] * n2[1] - n1[1] * n2[0]};
    int axis = 0;  // project onto the line's largest axis
    for (int k = 1; k < 3; ++k)
        if (libm::fabs(line[k]) > libm::fabs(line[axis])) axis = k;
    const T vp[3] = {v.p[0][axis], v.p[1][axis], v.p[2][axis]};
    const T up[3] = {u.p[0][axis], u.p[1][axis], u.p[2][axis]};
    T a, b, c, x0, x1, d, e, f, y0, y1;
    if (!line_interval(vp, dv, a, b, c, x0, x1)) return coplanar_tris_meet(n1, v, u);
    if (!line_interval(up, du, d, e, f, y0, y1)) return coplanar_tris_meet(n1, v, u);
    // the endpoints times x0 x1 y0 y1 (no division): [a + b / x0, a + c / x1] against [d + e / y0, d + f / y1]
    const T xx = x0 * x1, yy = y0 * y1, xxyy = xx * yy;
    T s0 = a * xxyy + b * x1 * yy, s1 = a * xxyy + c * x0 * yy;
    T t0 = d * xxyy + e * xx * y1, t1 = d * xxyy + f * xx * y0;
    if (s0 > s1) { const T w = s0; s0 = s1; s1 = w; }
    if (t0 > t1) { const T w = t0; t0 = t1; t1 = w; }
    return (s1 < t0 || t1 < s0) ? 0 : 1;
}

}  // namespace xs
