// xsim native runtime, core: value types, component access, array views, atomics, error reporting.
// Shared by the CPU (g++/clang++) and CUDA (NVRTC) targets; only XS_FUNC and the atomics differ.
#pragma once

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
#define XS_CUDA 1
#define XS_FUNC __device__ __forceinline__
#define XS_GLOBAL_VAR __device__
#else
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#define XS_FUNC inline __attribute__((always_inline))
// inline: a big module compiles as several translation units linked into one library (cpu.py), each
// including this header; the linker keeps one copy (used: emitted even where no code reads it)
#define XS_GLOBAL_VAR inline __attribute__((visibility("default"), used))
#endif

namespace xs {

// ------------------------------------------------------------------------------------------
// half precision: stored as IEEE binary16 bits, computed in float

XS_FUNC float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do { e++; man <<= 1; } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
#if defined(XS_CUDA)
    f = __uint_as_float(bits);
#else
    std::memcpy(&f, &bits, 4);
#endif
    return f;
}

XS_FUNC uint16_t float_to_half(float f) {
    uint32_t x;
#if defined(XS_CUDA)
    x = __float_as_uint(f);
#else
    std::memcpy(&x, &f, 4);
#endif
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}

// bfloat16: the upper 16 bits of a float, rounded to nearest even (NaN kept NaN); computed in float
XS_FUNC float bfloat16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
#if defined(XS_CUDA)
    f = __uint_as_float(bits);
#else
    std::memcpy(&f, &bits, 4);
#endif
    return f;
}

XS_FUNC uint16_t float_to_bfloat16(float f) {
    uint32_t x;
#if defined(XS_CUDA)
    x = __float_as_uint(f);
#else
    std::memcpy(&x, &f, 4);
#endif
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// half and bfloat16 alike: 16 bits stored, arithmetic in float; a format gives the two conversions
struct half_format {
    XS_FUNC static float decode(uint16_t b) { return half_to_float(b); }
    XS_FUNC static uint16_t encode(float f) { return float_to_half(f); }
};
struct bfloat16_format {
    XS_FUNC static float decode(uint16_t b) { return bfloat16_to_float(b); }
    XS_FUNC static uint16_t encode(float f) { return float_to_bfloat16(f); }
};
template <typename Format> struct float16_t {
    uint16_t bits;
    XS_FUNC float16_t() : bits(0) {}
    XS_FUNC float16_t(float f) : bits(Format::encode(f)) {}
    XS_FUNC float16_t(double f) : bits(Format::encode((float)f)) {}
    XS_FUNC float16_t(int f) : bits(Format::encode((float)f)) {}
    XS_FUNC operator float() const { return Format::decode(bits); }
};
typedef float16_t<half_format> half;
typedef float16_t<bfloat16_format> bfloat16;
// the right side of a compound assignment converts (h += 1.0f), as it did for a plain overload
template <typename T> struct non_deduced { typedef T type; };
#define XS_FLOAT16_OP(OP)                                                                               \
    template <typename F> XS_FUNC float16_t<F> operator OP(float16_t<F> a, float16_t<F> b) {          \
        return float16_t<F>(float(a) OP float(b));                                                    \
    }                                                                                                 \
    template <typename F>                                                                             \
    XS_FUNC float16_t<F>& operator OP##=(float16_t<F>& a, typename non_deduced<float16_t<F>>::type b) { \
        a = a OP b;                                                                                   \
        return a;                                                                                     \
    }
XS_FLOAT16_OP(+) XS_FLOAT16_OP(-) XS_FLOAT16_OP(*) XS_FLOAT16_OP(/)
#undef XS_FLOAT16_OP
template <typename F> XS_FUNC float16_t<F> operator-(float16_t<F> a) { return float16_t<F>(-float(a)); }

// ------------------------------------------------------------------------------------------
// composite value types; all are aggregates (brace-initialised, zeroed with {})

template <int N, typename T>
struct vec_t {
    T c[N];
    XS_FUNC T& operator[](int i) { return c[i]; }
    XS_FUNC const T& operator[](int i) const { return c[i]; }
};

template <int R, int C, typename T>
struct mat_t {
    T c[R][C];
};

template <typename T>
struct quat_t {
    T c[4];  // x, y, z, w
    XS_FUNC T& operator[](int i) { return c[i]; }
    XS_FUNC const T& operator[](int i) const { return c[i]; }
};

template <typename T>
struct transform_t {
    vec_t<3, T> p;
    quat_t<T> q;
};

// Flat component access shared by every composite (matrices row-major, transforms p then q).
template <int N, typename T> XS_FUNC T& comp(vec_t<N, T>& v, int i) { return v.c[i]; }
template <int N, typename T> XS_FUNC const T& comp(const vec_t<N, T>& v, int i) { return v.c[i]; }
template <typename T> XS_FUNC T& comp(quat_t<T>& v, int i) { return v.c[i]; }
template <typename T> XS_FUNC const T& comp(const quat_t<T>& v, int i) { return v.c[i]; }
template <int R, int C, typename T> XS_FUNC T& comp(mat_t<R, C, T>& m, int i) { return m.c[i / C][i % C]; }
template <int R, int C, typename T> XS_FUNC const T& comp(const mat_t<R, C, T>& m, int i) { return m.c[i / C][i % C]; }
// Pick the array before indexing: with t.p.c[i] in the untaken branch, g++ -O3 sees p.c[3] in a
// loop over i and treats that iteration as undefined behaviour.
template <typename T> XS_FUNC T& comp(transform_t<T>& t, int i) { return (i < 3 ? t.p.c : t.q.c)[i < 3 ? i : i - 3]; }
template <typename T> XS_FUNC const T& comp(const transform_t<T>& t, int i) { return (i < 3 ? t.p.c : t.q.c)[i < 3 ? i : i - 3]; }

// A matrix row as a vector value, and writing one back.
template <int R, int C, typename T>
XS_FUNC vec_t<C, T> row(const mat_t<R, C, T>& m, int i) {
    vec_t<C, T> r;
    for (int j = 0; j < C; ++j) r.c[j] = m.c[i][j];
    return r;
}
template <int R, int C, typename T>
XS_FUNC void set_row(mat_t<R, C, T>& m, int i, const vec_t<C, T>& r) {
    for (int j = 0; j < C; ++j) m.c[i][j] = r.c[j];
}

// Elementwise accumulation used by every adjoint: dst += src, for scalars and composites.
template <typename T> XS_FUNC void accum(T& dst, const T& src) { dst += src; }
template <int N, typename T> XS_FUNC void accum(vec_t<N, T>& d, const vec_t<N, T>& s) {
    for (int i = 0; i < N; ++i) d.c[i] += s.c[i];
}
template <typename T> XS_FUNC void accum(quat_t<T>& d, const quat_t<T>& s) {
    for (int i = 0; i < 4; ++i) d.c[i] += s.c[i];
}
template <int R, int C, typename T> XS_FUNC void accum(mat_t<R, C, T>& d, const mat_t<R, C, T>& s) {
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) d.c[i][j] += s.c[i][j];
}
template <typename T> XS_FUNC void accum(transform_t<T>& d, const transform_t<T>& s) {
    accum(d.p, s.p);
    accum(d.q, s.q);
}
XS_FUNC void accum(bool&, const bool&) {}

// ------------------------------------------------------------------------------------------
// arrays: an untyped view (data, shape, byte strides, flags); the generated code names the element type

constexpr int64_t ARRAY_RETAIN_GRAD = 1;  // flags bit: a store's adjoint reads the gradient without zeroing it

struct array_desc {
    void* data;
    int64_t shape[4];
    int64_t strides[4];
    int64_t flags;
};

template <typename T> XS_FUNC T& at(const array_desc& a, int64_t i) {
    return *(T*)((char*)a.data + i * a.strides[0]);
}
template <typename T> XS_FUNC T& at(const array_desc& a, int64_t i, int64_t j) {
    return *(T*)((char*)a.data + i * a.strides[0] + j * a.strides[1]);
}
template <typename T> XS_FUNC T& at(const array_desc& a, int64_t i, int64_t j, int64_t k) {
    return *(T*)((char*)a.data + i * a.strides[0] + j * a.strides[1] + k * a.strides[2]);
}
template <typename T> XS_FUNC T& at(const array_desc& a, int64_t i, int64_t j, int64_t k, int64_t l) {
    return *(T*)((char*)a.data + i * a.strides[0] + j * a.strides[1] + k * a.strides[2] + l * a.strides[3]);
}

// Contiguous (row-major, packed) arrays: plain pointer arithmetic the compiler can vectorise.
template <typename T> XS_FUNC T& at_c(const array_desc& a, int64_t i) { return ((T*)a.data)[i]; }
template <typename T> XS_FUNC T& at_c(const array_desc& a, int64_t i, int64_t j) {
    return ((T*)a.data)[i * a.shape[1] + j];
}
template <typename T> XS_FUNC T& at_c(const array_desc& a, int64_t i, int64_t j, int64_t k) {
    return ((T*)a.data)[(i * a.shape[1] + j) * a.shape[2] + k];
}
template <typename T> XS_FUNC T& at_c(const array_desc& a, int64_t i, int64_t j, int64_t k, int64_t l) {
    return ((T*)a.data)[((i * a.shape[1] + j) * a.shape[2] + k) * a.shape[3] + l];
}

// Select the strided or the packed accessor at compile time (the launch knows which applies).
template <bool C, typename T, typename... I> XS_FUNC T& at_sel(const array_desc& a, I... i) {
    if constexpr (C) return at_c<T>(a, i...);
    else return at<T>(a, i...);
}

// Whether the bytes that the elements of two arrays cover (ndim dimensions, elem bytes each) do not
// overlap; a null or empty array overlaps nothing. The CPU's two-thread adjoint runs only then (codegen.py).
#if !defined(XS_CUDA)
XS_FUNC void byte_span(const array_desc& a, int ndim, int64_t elem, int64_t& lo, int64_t& hi) {
    lo = hi = (int64_t)a.data;
    if (!a.data) return;
    for (int d = 0; d < ndim; ++d) {
        if (a.shape[d] <= 0) {
            hi = lo;
            return;
        }
        const int64_t ext = (a.shape[d] - 1) * a.strides[d];
        (ext < 0 ? lo : hi) += ext;
    }
    hi += elem;
}
XS_FUNC bool disjoint(const array_desc& a, int na, int64_t ea, const array_desc& b, int nb, int64_t eb) {
    int64_t alo, ahi, blo, bhi;
    byte_span(a, na, ea, alo, ahi);
    byte_span(b, nb, eb, blo, bhi);
    return alo == ahi || blo == bhi || ahi <= blo || bhi <= alo;
}
#endif

// A[i] of an array with more dimensions: the view of the remaining ones (a null array stays null,
// so a gradient view of an array without a grad buffer still reads as absent). A view in a kernel
// has no flags: retain_grad belongs to the array the launch was given, as in Warp.
XS_FUNC array_desc subarray(const array_desc& a, int64_t i) {
    array_desc r{};
    r.data = a.data ? (void*)((char*)a.data + i * a.strides[0]) : nullptr;
    for (int d = 0; d < 3; ++d) {
        r.shape[d] = a.shape[d + 1];
        r.strides[d] = a.strides[d + 1];
    }
    return r;
}
template <typename... I> XS_FUNC array_desc subarray(const array_desc& a, int64_t i, int64_t j, I... rest) {
    return subarray(subarray(a, i), j, rest...);
}

// A[..., start:stop:step, ...] at dimension d: the view of those entries, the bounds clamped as
// Python's slice.indices clamps them (a bound not given is the end the step walks from or to); step 0
// gives an empty view (the frontend refuses a constant 0).
XS_FUNC array_desc slice_dim(const array_desc& a, int d, int64_t start, int64_t stop, int64_t step, bool has_start,
                             bool has_stop) {
    const int64_t n = a.shape[d];
    int64_t len = 0;
    if (step > 0) {
        start = !has_start ? 0 : start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
        stop = !has_stop ? n : stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop);
        len = stop > start ? (stop - start + step - 1) / step : 0;
    } else if (step < 0) {
        start = !has_start ? n - 1 : start < 0 ? (start + n < -1 ? -1 : start + n) : (start > n - 1 ? n - 1 : start);
        stop = !has_stop ? -1 : stop < 0 ? (stop + n < -1 ? -1 : stop + n) : (stop > n - 1 ? n - 1 : stop);
        len = start > stop ? (start - stop - step - 1) / -step : 0;
    }
    array_desc r = a;
    r.flags = 0;  // a view made in a kernel does not retain its gradient (Warp's rule)
    r.data = a.data && len > 0 ? (void*)((char*)a.data + start * a.strides[d]) : nullptr;
    r.shape[d] = len;
    r.strides[d] = a.strides[d] * step;
    return r;
}

// A[..., i, ...] at dimension d (i < 0 counts from the end, as in Python): the view of the other
// dimensions; a null array stays null.
XS_FUNC array_desc take_dim(const array_desc& a, int d, int64_t i) {
    if (i < 0) i += a.shape[d];
    array_desc r{};
    r.data = a.data ? (void*)((char*)a.data + i * a.strides[d]) : nullptr;
    for (int k = 0, o = 0; k < 4; ++k) {
        if (k == d) continue;
        r.shape[o] = a.shape[k];
        r.strides[o] = a.strides[k];
        ++o;
    }
    r.shape[3] = 0;
    r.strides[3] = 0;
    return r;
}

// Warp's array(ptr=p, shape=(...), dtype=T) in a kernel: N dims of packed row-major elements of T at p.
template <typename T, int N> XS_FUNC array_desc array_from_ptr(uint64_t p, int64_t s0, int64_t s1 = 0,
                                                                int64_t s2 = 0, int64_t s3 = 0) {
    array_desc r{};
    r.data = (void*)p;
    const int64_t s[4] = {s0, s1, s2, s3};
    int64_t step = (int64_t)sizeof(T);
    for (int k = N - 1; k >= 0; --k) {
        r.shape[k] = s[k];
        r.strides[k] = step;
        step *= s[k];
    }
    return r;
}

// An indexed array (xsim.indexedarray): the data's pointer and byte strides, the indexed shape, and
// per dimension an int32 index array (null: that dimension is taken as it is). Element (i, j) is
// data[idx0[i], idx1[j]]; its gradient is the same indexed view of the data's grad buffer.
struct indexed_desc {
    void* data;
    int64_t shape[4];
    int64_t strides[4];
    const int32_t* indices[4];
};

XS_FUNC int64_t indexed_offset(const indexed_desc& a, int d, int64_t i) {
    return (a.indices[d] ? (int64_t)a.indices[d][i] : i) * a.strides[d];
}
template <typename T> XS_FUNC T& at(const indexed_desc& a, int64_t i) {
    return *(T*)((char*)a.data + indexed_offset(a, 0, i));
}
template <typename T> XS_FUNC T& at(const indexed_desc& a, int64_t i, int64_t j) {
    return *(T*)((char*)a.data + indexed_offset(a, 0, i) + indexed_offset(a, 1, j));
}
template <typename T> XS_FUNC T& at(const indexed_desc& a, int64_t i, int64_t j, int64_t k) {
    return *(T*)((char*)a.data + indexed_offset(a, 0, i) + indexed_offset(a, 1, j) + indexed_offset(a, 2, k));
}
template <typename T> XS_FUNC T& at(const indexed_desc& a, int64_t i, int64_t j, int64_t k, int64_t l) {
    return *(T*)((char*)a.data + indexed_offset(a, 0, i) + indexed_offset(a, 1, j) + indexed_offset(a, 2, k) +
                 indexed_offset(a, 3, l));
}
// an indexed array is never packed: the contiguous fast path does not apply to it
template <bool C, typename T, typename... I> XS_FUNC T& at_sel(const indexed_desc& a, I... i) {
    return at<T>(a, i...);
}
XS_FUNC indexed_desc subarray(const indexed_desc& a, int64_t i) {
    indexed_desc r{};
    r.data = a.data ? (void*)((char*)a.data + indexed_offset(a, 0, i)) : nullptr;
    for (int d = 0; d < 3; ++d) {
        r.shape[d] = a.shape[d + 1];
        r.strides[d] = a.strides[d + 1];
        r.indices[d] = a.indices[d + 1];
    }
    return r;
}
template <typename... I> XS_FUNC indexed_desc subarray(const indexed_desc& a, int64_t i, int64_t j, I... rest) {
    return subarray(subarray(a, i), j, rest...);
}

// The launch shape, for decomposing a linear thread index into tid() indices.
struct launch_dims {
    int64_t shape[4];
};

// ------------------------------------------------------------------------------------------
// conversions

template <typename To, typename From> struct caster {
    XS_FUNC static To run(const From& x) { return (To)x; }
};
// 16-bit floats convert through float; to their own format they are copied as they are
template <typename F, typename From> struct caster<float16_t<F>, From> {
    XS_FUNC static float16_t<F> run(const From& x) { return float16_t<F>((float)x); }
};
template <typename To, typename F> struct caster<To, float16_t<F>> {
    XS_FUNC static To run(const float16_t<F>& x) { return (To)(float)x; }
};
template <typename F, typename G> struct caster<float16_t<F>, float16_t<G>> {
    XS_FUNC static float16_t<F> run(const float16_t<G>& x) { return float16_t<F>((float)x); }
};
template <typename F> struct caster<float16_t<F>, float16_t<F>> {
    XS_FUNC static float16_t<F> run(const float16_t<F>& x) { return x; }
};
template <int N, typename To, typename From> struct caster<vec_t<N, To>, vec_t<N, From>> {
    XS_FUNC static vec_t<N, To> run(const vec_t<N, From>& x) {
        vec_t<N, To> r;
        for (int i = 0; i < N; ++i) r.c[i] = caster<To, From>::run(x.c[i]);
        return r;
    }
};
template <int R, int C, typename To, typename From> struct caster<mat_t<R, C, To>, mat_t<R, C, From>> {
    XS_FUNC static mat_t<R, C, To> run(const mat_t<R, C, From>& x) {
        mat_t<R, C, To> r;
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < C; ++j) r.c[i][j] = caster<To, From>::run(x.c[i][j]);
        return r;
    }
};
template <typename To, typename From> struct caster<quat_t<To>, quat_t<From>> {
    XS_FUNC static quat_t<To> run(const quat_t<From>& x) {
        quat_t<To> r;
        for (int i = 0; i < 4; ++i) r.c[i] = caster<To, From>::run(x.c[i]);
        return r;
    }
};
template <typename To, typename From> struct caster<transform_t<To>, transform_t<From>> {
    XS_FUNC static transform_t<To> run(const transform_t<From>& x) {
        return transform_t<To>{caster<vec_t<3, To>, vec_t<3, From>>::run(x.p), caster<quat_t<To>, quat_t<From>>::run(x.q)};
    }
};
template <typename To, typename From> XS_FUNC To cast_to(const From& x) { return caster<To, From>::run(x); }

// inf (sign > 0), -inf (sign < 0) and nan (sign == 0) without <limits>, for both targets
template <typename T> XS_FUNC T special_float(int sign) {
    volatile T zero = 0;
    return sign == 0 ? zero / zero : (sign > 0 ? T(1) / zero : T(-1) / zero);
}

// ------------------------------------------------------------------------------------------
// error reporting (debug mode bounds checks): the first error wins, Python reads and clears it

struct error_info {
    int32_t code;  // 0 none, 1 out of bounds, 2 integer division by zero
    int32_t param;
    int32_t line;
    int32_t ndim;
    int64_t index[4];
    int64_t shape[4];
};

}  // namespace xs

extern "C" {
XS_GLOBAL_VAR xs::error_info xs_error;
}

namespace xs {

template <int D, typename A>
XS_FUNC bool in_bounds(const A& a, const int64_t (&idx)[D], int param, int line) {
    bool ok = true;
    for (int d = 0; d < D; ++d) ok = ok && idx[d] >= 0 && idx[d] < a.shape[d];
    if (!ok) {
#if defined(XS_CUDA)
        if (atomicCAS(&xs_error.code, 0, 1) == 0) {
#else
        int32_t expected = 0;
        if (__atomic_compare_exchange_n(&xs_error.code, &expected, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
#endif
            xs_error.param = param;
            xs_error.line = line;
            xs_error.ndim = D;
            for (int d = 0; d < D; ++d) {
                xs_error.index[d] = idx[d];
                xs_error.shape[d] = a.shape[d];
            }
        }
    }
    return ok;
}

// Debug mode: an integer division or modulo by zero is reported (its result is still the defined
// one of int_quot/int_rem), so Python raises ZeroDivisionError naming the line.
template <typename T> XS_FUNC void check_divisor(T b, int line) {
    if (b != T(0)) return;
#if defined(XS_CUDA)
    if (atomicCAS(&xs_error.code, 0, 2) == 0) {
#else
    int32_t expected = 0;
    if (__atomic_compare_exchange_n(&xs_error.code, &expected, 2, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
#endif
        xs_error.param = -1;
        xs_error.line = line;
        xs_error.ndim = 0;
    }
}

// Bounds-checked access: an out-of-bounds index is reported and redirected to a scratch slot,
// so the launch finishes without touching foreign memory and Python raises IndexError.
#if defined(XS_CUDA)
__device__ __align__(16) char scratch_buf[4096];
template <typename T> XS_FUNC T& scratch() { return *(T*)scratch_buf; }
#else
template <typename T> XS_FUNC T& scratch() {
    alignas(16) static thread_local char buf[sizeof(T) < 4096 ? 4096 : sizeof(T)];
    return *(T*)buf;
}
#endif
template <typename T, typename A> XS_FUNC T& at_chk(const A& a, int param, int line, int64_t i) {
    const int64_t idx[1] = {i};
    return in_bounds<1, A>(a, idx, param, line) ? at<T>(a, i) : scratch<T>();
}
template <typename T, typename A> XS_FUNC T& at_chk(const A& a, int param, int line, int64_t i, int64_t j) {
    const int64_t idx[2] = {i, j};
    return in_bounds<2, A>(a, idx, param, line) ? at<T>(a, i, j) : scratch<T>();
}
template <typename T, typename A>
XS_FUNC T& at_chk(const A& a, int param, int line, int64_t i, int64_t j, int64_t k) {
    const int64_t idx[3] = {i, j, k};
    return in_bounds<3, A>(a, idx, param, line) ? at<T>(a, i, j, k) : scratch<T>();
}
template <typename T, typename A>
XS_FUNC T& at_chk(const A& a, int param, int line, int64_t i, int64_t j, int64_t k, int64_t l) {
    const int64_t idx[4] = {i, j, k, l};
    return in_bounds<4, A>(a, idx, param, line) ? at<T>(a, i, j, k, l) : scratch<T>();
}

// Bounds-checked view: out of bounds it is reported and the view is empty, so every access through
// it is reported too and lands in the scratch slot.
template <typename A, typename... I> XS_FUNC A subarray_chk(const A& a, int param, int line, I... i) {
    const int64_t idx[sizeof...(I)] = {(int64_t)i...};
    if (!in_bounds<sizeof...(I), A>(a, idx, param, line)) return A{};
    return subarray(a, (int64_t)i...);
}

// ------------------------------------------------------------------------------------------
// atomics: each returns the old value; composites are updated component by component

#if defined(XS_CUDA)
XS_FUNC float atomic_add(float* p, float v) { return atomicAdd(p, v); }
XS_FUNC double atomic_add(double* p, double v) { return atomicAdd(p, v); }
XS_FUNC int32_t atomic_add(int32_t* p, int32_t v) { return atomicAdd(p, v); }
XS_FUNC uint32_t atomic_add(uint32_t* p, uint32_t v) { return atomicAdd(p, v); }
XS_FUNC uint64_t atomic_add(uint64_t* p, uint64_t v) { return atomicAdd((unsigned long long*)p, (unsigned long long)v); }
XS_FUNC int64_t atomic_add(int64_t* p, int64_t v) {
    return (int64_t)atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
// 16-bit floats (half, bfloat16): CAS on the enclosing aligned 32-bit word
template <typename T, typename F> XS_FUNC T atomic_update16(T* p, T v, F f) {
    uint32_t* base = (uint32_t*)((uintptr_t)p & ~(uintptr_t)3);
    uint32_t shift = ((uintptr_t)p & 2) ? 16 : 0;
    uint32_t old = *base, assumed;
    do {
        assumed = old;
        T h; h.bits = (uint16_t)(assumed >> shift);
        T n = f(h, v);
        uint32_t next = (assumed & ~(0xffffu << shift)) | ((uint32_t)n.bits << shift);
        old = atomicCAS(base, assumed, next);
    } while (old != assumed);
    T r; r.bits = (uint16_t)(old >> shift);
    return r;
}
template <typename F> XS_FUNC float16_t<F> atomic_add(float16_t<F>* p, float16_t<F> v) {
    return atomic_update16(p, v, [](float16_t<F> a, float16_t<F> b) { return a + b; });
}
template <typename T, typename F> XS_FUNC T atomic_update(T* p, T v, F f) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic min/max need 2, 4 or 8 bytes");
    if constexpr (sizeof(T) == 2) {
        return atomic_update16(p, v, f);
    } else if constexpr (sizeof(T) == 4) {
        unsigned int* a = (unsigned int*)p;
        unsigned int old = *a, assumed;
        do {
            assumed = old;
            T cur = *(T*)&assumed;
            T n = f(cur, v);
            old = atomicCAS(a, assumed, *(unsigned int*)&n);
        } while (old != assumed);
        return *(T*)&old;
    } else {
        unsigned long long* a = (unsigned long long*)p;
        unsigned long long old = *a, assumed;
        do {
            assumed = old;
            T cur = *(T*)&assumed;
            T n = f(cur, v);
            old = atomicCAS(a, assumed, *(unsigned long long*)&n);
        } while (old != assumed);
        return *(T*)&old;
    }
}
// CUDA's bitwise, exchange and compare-and-swap atomics take 32- and 64-bit words: other 4- and
// 8-byte types (signed ints, floats) go through their bits.
template <int Bytes> struct cuda_word;
template <> struct cuda_word<4> { typedef unsigned int type; };
template <> struct cuda_word<8> { typedef unsigned long long type; };
template <typename T> using word_t = typename cuda_word<sizeof(T)>::type;
template <typename T> XS_FUNC word_t<T> to_word(T v) { return *(word_t<T>*)&v; }
template <typename T> XS_FUNC T from_word(word_t<T> w) { return *(T*)&w; }
#define XS_CUDA_WORD_ATOMIC(NAME, CUDA_FN) \
    template <typename T> XS_FUNC T NAME(T* p, T v) { return from_word<T>(CUDA_FN((word_t<T>*)p, to_word(v))); }
XS_CUDA_WORD_ATOMIC(atomic_and, atomicAnd)
XS_CUDA_WORD_ATOMIC(atomic_or, atomicOr)
XS_CUDA_WORD_ATOMIC(atomic_xor, atomicXor)
XS_CUDA_WORD_ATOMIC(atomic_exch, atomicExch)
#undef XS_CUDA_WORD_ATOMIC
template <typename T> XS_FUNC T atomic_cas(T* p, T compare, T v) {
    return from_word<T>(atomicCAS((word_t<T>*)p, to_word(compare), to_word(v)));
}
#else
template <typename T> XS_FUNC T atomic_add(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed); }
XS_FUNC bool atomic_add(bool* p, bool v) { bool o = *p; *p = o || v; return o; }
template <typename T, typename F> XS_FUNC T atomic_update(T* p, T v, F f) {
    std::atomic_ref<T> r(*p);
    T old = r.load(std::memory_order_relaxed);
    while (!r.compare_exchange_weak(old, f(old, v), std::memory_order_relaxed)) {}
    return old;
}
// 16-bit floats (half, bfloat16): a CAS loop on their bit pattern
template <typename F> XS_FUNC float16_t<F> atomic_add(float16_t<F>* p, float16_t<F> v) {
    return atomic_update(p, v, [](float16_t<F> a, float16_t<F> b) { return a + b; });
}
template <typename T> XS_FUNC T atomic_and(T* p, T v) { return std::atomic_ref<T>(*p).fetch_and(v, std::memory_order_relaxed); }
template <typename T> XS_FUNC T atomic_or(T* p, T v) { return std::atomic_ref<T>(*p).fetch_or(v, std::memory_order_relaxed); }
template <typename T> XS_FUNC T atomic_xor(T* p, T v) { return std::atomic_ref<T>(*p).fetch_xor(v, std::memory_order_relaxed); }
// exchange and compare-and-swap order memory as well (sequentially consistent): kernels build locks
// from them, and the plain reads and writes of a critical section must stay inside it
template <typename T> XS_FUNC T atomic_exch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <typename T> XS_FUNC T atomic_cas(T* p, T compare, T v) {
    std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);
    return compare;  // the old value, whether or not it was swapped
}
#endif

template <typename T> XS_FUNC T atomic_sub(T* p, T v) { return atomic_add(p, T(-v)); }

template <typename T> XS_FUNC T atomic_min(T* p, T v) {
    return atomic_update(p, v, [](T a, T b) { return b < a ? b : a; });
}
template <typename T> XS_FUNC T atomic_max(T* p, T v) {
    return atomic_update(p, v, [](T a, T b) { return b > a ? b : a; });
}

#define XS_COMPOSITE_ATOMIC(NAME)                                                                        \
    template <int N, typename T> XS_FUNC vec_t<N, T> NAME(vec_t<N, T>* p, vec_t<N, T> v) {               \
        vec_t<N, T> o;                                                                                   \
        for (int i = 0; i < N; ++i) o.c[i] = NAME(&p->c[i], v.c[i]);                                     \
        return o;                                                                                        \
    }                                                                                                    \
    template <typename T> XS_FUNC quat_t<T> NAME(quat_t<T>* p, quat_t<T> v) {                            \
        quat_t<T> o;                                                                                     \
        for (int i = 0; i < 4; ++i) o.c[i] = NAME(&p->c[i], v.c[i]);                                     \
        return o;                                                                                        \
    }                                                                                                    \
    template <int R, int C, typename T> XS_FUNC mat_t<R, C, T> NAME(mat_t<R, C, T>* p, mat_t<R, C, T> v) { \
        mat_t<R, C, T> o;                                                                                \
        for (int i = 0; i < R; ++i)                                                                      \
            for (int j = 0; j < C; ++j) o.c[i][j] = NAME(&p->c[i][j], v.c[i][j]);                        \
        return o;                                                                                        \
    }                                                                                                    \
    template <typename T> XS_FUNC transform_t<T> NAME(transform_t<T>* p, transform_t<T> v) {             \
        transform_t<T> o;                                                                                \
        o.p = NAME(&p->p, v.p);                                                                          \
        o.q = NAME(&p->q, v.q);                                                                          \
        return o;                                                                                        \
    }
XS_COMPOSITE_ATOMIC(atomic_add)
XS_COMPOSITE_ATOMIC(atomic_sub)
XS_COMPOSITE_ATOMIC(atomic_min)
XS_COMPOSITE_ATOMIC(atomic_max)
XS_COMPOSITE_ATOMIC(atomic_and)
XS_COMPOSITE_ATOMIC(atomic_or)
XS_COMPOSITE_ATOMIC(atomic_xor)
#undef XS_COMPOSITE_ATOMIC

// Gradient accumulation into an array element: atomic where threads can collide.
template <typename T> XS_FUNC void grad_add(T* p, const T& v) { atomic_add(p, v); }

// The thread's own gradient element, or null where the array has no gradient buffer: adds to it
// (grad_add_exclusive), or moves it into an adjoint and zeroes it (grad_take, the adjoint of a store;
// an array with retain_grad keeps it). A branch, never mispredicted within a launch: a select of the
// element or a stack scratch value (one block for the scheduler) was 4-6% slower on the cloth's
// constraint adjoints (several such adds per thread, each a cmov and a store of the scratch zero)
// and no faster on bench/vec3_backward.py (medians of alternating runs, 1 thread, 2026-11-25).
template <typename T> XS_FUNC void grad_add_exclusive(T* p, const T& v) {
    if (p) accum(*p, v);
}
template <typename A, typename T> XS_FUNC void grad_take(A& adj, T* p, int64_t flags) {
    if (!p) return;
    accum(adj, *p);
    if (!(flags & ARRAY_RETAIN_GRAD)) *p = T{};
}

}  // namespace xs
