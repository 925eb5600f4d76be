"""Renderers with Warp's interface (``warp.render``): ``import xsim.render`` replaces ``import warp.render``.

``UsdRenderer`` writes what a simulation draws, frame by frame, to a USD stage."""

from .usd import UsdRenderer

__all__ = ["UsdRenderer"]
