"""Mapping a Python function over argument tuples as Ray tasks, results yielded as they complete."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .cluster import cluster_cpus, connect

DEFAULT_RETRIES = 3
"""How many times a task whose worker process died (killed, out of memory, lost node) is run again."""


def _run_task(fn: Callable, args: tuple) -> Any:
    # Ray sets OMP_NUM_THREADS to the CPUs the task holds; xsim's OpenMP loops read XSIM_NUM_THREADS,
    # and without it every task would run one thread per core of the node.
    os.environ.setdefault("XSIM_NUM_THREADS", os.environ.get("OMP_NUM_THREADS") or "1")
    return fn(*args)


def map_tasks(fn: Callable, arg_tuples: Iterable[tuple], *, address: str | None = None, workers: int | None = None,
              max_retries: int = DEFAULT_RETRIES) -> Iterator[tuple[int, Any]]:
    """Run ``fn(*args)`` for each tuple of ``arg_tuples`` as a Ray task (one CPU each) and yield
    ``(index, result)`` in the order they finish. At most ``workers`` tasks run at once (default: the
    cluster's CPUs). A task whose worker dies is retried ``max_retries`` times; an exception raised by
    ``fn`` is raised here as itself. Closing the iterator early cancels the tasks not finished."""
    ray = connect(address, workers)
    remote = ray.remote(num_cpus=1, max_retries=max_retries)(_run_task)
    limit = workers or cluster_cpus(ray)
    fn_ref = ray.put(fn)
    todo = iter(enumerate(arg_tuples))
    running: dict = {}
    try:
        while True:
            for index, args in todo:
                running[remote.remote(fn_ref, tuple(args))] = index
                if len(running) >= limit:
                    break
            if not running:
                return
            done, _ = ray.wait(list(running), num_returns=1)
            index = running.pop(done[0])
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayTaskError as e:
                # the task's own exception (a SceneError, a ValueError), not Ray's wrapper around it
                raise (e.cause if e.cause is not None else e) from None
            yield index, result
    finally:
        for ref in running:
            ray.cancel(ref)
