"""Rollouts and sweeps mapped over Ray tasks: a local Ray started in-process by default, a cluster by
``address``. Ray is an optional dependency (``pip install xsim[distributed]``), imported only when a
function here first needs it, never at ``import xsim``."""

from .cluster import connect, require_ray
from .gradients import scene_loss_and_grad, summed_loss_and_grad
from .metrics import METRICS, RolloutMetrics
from .rollouts import RolloutResult, map_rollouts, run_rollout
from .tasks import map_tasks

__all__ = ["METRICS", "RolloutMetrics", "RolloutResult", "connect", "map_rollouts", "map_tasks", "require_ray",
           "run_rollout", "scene_loss_and_grad", "summed_loss_and_grad"]
