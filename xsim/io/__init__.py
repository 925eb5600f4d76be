"""Input and output: scene files (TOML) -> ``ModelBuilder``, rollouts, USD export, preview images."""

from .bodies import BodyPart
from .preview import save_loss_curve, save_preview
from .rollout import Rollout, simulate, write_rollout
from .scene import ClothPart, Scene, load_scene
from .usd import UsdWriter, check_usd, colliders_of, write_usd

__all__ = ["BodyPart", "ClothPart", "Rollout", "Scene", "UsdWriter", "check_usd", "colliders_of", "load_scene", "save_loss_curve", "save_preview", "simulate", "write_rollout", "write_usd"]
