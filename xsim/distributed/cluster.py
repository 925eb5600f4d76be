"""Finding Ray and joining (or starting) a Ray cluster."""

from __future__ import annotations

import logging
import os


def require_ray():
    """The ``ray`` module, or an ImportError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError("xsim.distributed needs Ray, an optional dependency: pip install 'xsim[distributed]' "
                          "(or pip install 'ray>=2.40')") from None
    return ray


def connect(address: str | None = None, workers: int | None = None):
    """Join the Ray cluster at ``address`` (``"auto"``, ``"HOST:PORT"``, ``"ray://HOST:10001"``), or with
    no address start a local Ray in this process with ``workers`` CPUs (default: all cores). A Ray
    already initialized in this process is used as it is. Returns the ``ray`` module."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if workers is not None and workers < 1:
        raise ValueError(f"connect: workers must be at least 1, got {workers}")
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        ray.init(num_cpus=workers or os.cpu_count() or 1, **options)
    else:
        ray.init(address=address, **options)
    return ray


def cluster_cpus(ray) -> int:
    """How many CPUs the connected cluster has (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
