"""XPBD for particles and cloth: the solver and, beside it, its kernels."""

from .solver import SolverXPBD  # noqa: F401
