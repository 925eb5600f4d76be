"""The vec3 math kernel of the autodiff benchmark, written once: ``bench/common.load_kernels``
imports this file for xsim and for Warp."""

from common import backend

wp = backend(__name__)


@wp.kernel
def vec3_math(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    u = a[i]
    v = b[i]
    c = wp.cross(u, v)
    d = wp.dot(u, v)
    n = wp.normalize(c + u)
    out[i] = n * wp.sin(d) + v * wp.exp(-wp.length(c))
