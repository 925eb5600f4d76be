"""Simulation model: ``ModelBuilder`` -> ``Model`` (static data) -> ``State`` / ``Control``."""

from .builder import ModelBuilder  # noqa: F401
from .collide import Collider  # noqa: F401
from .kinematics import eval_fk, eval_ik  # noqa: F401
from .model import Control, Model, State  # noqa: F401
