"""The launch-overhead kernel, written once: ``bench/common.load_kernels`` imports this file for
xsim and for Warp. It reads one array and writes another (no in-place update, so a Tape records it
without copying anything)."""

from common import backend

wp = backend(__name__)


@wp.kernel
def scale(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = a * x[i]


@wp.kernel
def scale_computed_index(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float)):
    """``scale`` indexed by an expression of tid(), which the launch-shape check does not follow: the
    same launch without that check (bench/launch_overhead.py's A/B)."""
    i = wp.tid() * 1
    y[i] = a * x[i]
