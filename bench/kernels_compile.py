"""A 5-kernel module for the compile-time benchmark (a small particle/rigid solver's worth of
kernels: scalar, vector, matrix, quaternion and transform math, atomics), written once:
``bench/common.load_kernels`` imports this file for xsim and for Warp."""

from common import backend

wp = backend(__name__)


@wp.kernel
def integrate_particles(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3),
                        inv_mass: wp.array(dtype=float), gravity: wp.vec3, dt: float,
                        x_out: wp.array(dtype=wp.vec3), v_out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    w = inv_mass[i]
    v1 = v[i] + (f[i] * w + gravity * wp.where(w > 0.0, 1.0, 0.0)) * dt
    x_out[i] = x[i] + v1 * dt
    v_out[i] = v1


@wp.kernel
def spring_forces(x: wp.array(dtype=wp.vec3), springs: wp.array(dtype=int), rest: wp.array(dtype=float),
                  ke: float, f: wp.array(dtype=wp.vec3)):
    s = wp.tid()
    i = springs[2 * s]
    j = springs[2 * s + 1]
    d = x[j] - x[i]
    length = wp.length(d)
    fs = d / wp.max(length, 1.0e-6) * ke * (length - rest[s])
    wp.atomic_add(f, i, fs)
    wp.atomic_sub(f, j, fs)


@wp.kernel
def triangle_strain(x: wp.array(dtype=wp.vec3), tris: wp.array(dtype=int), rest_inv: wp.array(dtype=wp.mat33),
                    energy: wp.array(dtype=float)):
    t = wp.tid()
    p0 = x[tris[3 * t]]
    e1 = x[tris[3 * t + 1]] - p0
    e2 = x[tris[3 * t + 2]] - p0
    n = wp.cross(e1, e2)
    ds = wp.mat33(e1[0], e2[0], n[0], e1[1], e2[1], n[1], e1[2], e2[2], n[2])
    F = ds * rest_inv[t]
    C = wp.transpose(F) * F - wp.identity(n=3, dtype=float)
    energy[t] = 0.5 * (C[0, 0] * C[0, 0] + C[1, 1] * C[1, 1] + C[2, 2] * C[2, 2]) + wp.determinant(F) - 1.0


@wp.kernel
def body_points(body_q: wp.array(dtype=wp.transform), local: wp.array(dtype=wp.vec3), world: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    tf = body_q[i]
    q = wp.transform_get_rotation(tf)
    p = wp.transform_point(tf, local[i])
    world[i] = p + wp.quat_rotate(q, wp.vec3(0.0, 1.0, 0.0)) * wp.length(p)


@wp.kernel
def joint_drive(q: wp.array(dtype=wp.quat), axis: wp.vec3, target: wp.array(dtype=float), gain: float,
                q_out: wp.array(dtype=wp.quat)):
    i = wp.tid()
    qt = wp.quat_from_axis_angle(wp.normalize(axis), target[i])
    err = qt * wp.quat_inverse(q[i])
    q_out[i] = wp.normalize(q[i] + err * gain)
