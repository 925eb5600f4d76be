"""Reverse-mode autodiff: the Tape, tape-aware array ops, gradient checking, interop."""

from .tape import Tape  # noqa: F401
