"""Reverse-mode autodiff: the Tape, tape-aware array ops, gradient checking, interop."""

from .checkpoint import RolloutResult, checkpointed_rollout  # noqa: F401
from .gradcheck import GradcheckReport, InputCheck, gradcheck, jacobian, jacobian_fd  # noqa: F401
from .tape import Tape  # noqa: F401
