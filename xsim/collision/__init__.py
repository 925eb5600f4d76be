"""The collision layer: shape geometry (``surfaces``, ``pairs``), the broad phase (``broad_phase``) and
the contacts the solvers consume. It sits below ``xsim.solvers`` (which import it) and above
``xsim.sim`` (whose Model it reads); nothing here imports a solver."""

from .contacts import Contacts
from .pipeline import CollisionPipeline

__all__ = ["CollisionPipeline", "Contacts"]
