"""Solvers: ``solver.step(state_in, state_out, control, dt)`` advances a State."""

from .xpbd import SolverXPBD  # noqa: F401
