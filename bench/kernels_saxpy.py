"""saxpy, written once: ``bench/common.load_kernels`` imports this file for xsim and for Warp."""

from common import backend

wp = backend(__name__)


@wp.kernel
def saxpy(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = a * x[i] + y[i]
