"""Checkpointed backpropagation through long rollouts, in memory that grows with sqrt(steps).

A plain ``Tape`` over ``n`` steps keeps every step's state, temporaries and snapshots alive until
``backward``. ``checkpointed_rollout`` instead runs the forward pass without a tape and keeps only
a detached copy of every k-th state (a *checkpoint*). The backward pass walks the segments from
last to first: it recomputes a segment from its checkpoint under a fresh tape, seeds the
segment's final state with the gradient that the later segment left on its starting checkpoint,
and runs that tape's backward. At any time only the checkpoints plus one segment's tape are
alive: about ``n / k + k`` states, smallest at ``k = sqrt(n)``.

Arrays read by every step (model parameters, controls) are never zeroed between segments, so
their gradients accumulate over the whole rollout exactly as with one plain tape. What a step leaves
on its state for the next step in a non-array attribute (``State.body_contacts``: the slips that
static friction carries) is shared by the checkpoint (``copy.copy``), and its arrays' gradients are carried between
segments like the state's own.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..array import array as Array
from ..array import zeros_like
from ..kernels import recording
from .tape import Tape

StepFn = Callable[[Any, Any, int], None]


@dataclass
class RolloutResult:
    """What ``checkpointed_rollout`` did: the loss, the final state and the memory trade."""

    loss: float                 # the loss value (first element of loss_fn's array)
    loss_array: Array           # loss_fn's array, with its grad seeded to 1
    final_state: Any            # the state after num_steps steps (recomputed, with grads)
    segment: int                # steps per segment (k)
    num_segments: int
    checkpoint_bytes: int       # bytes of all detached checkpoints held during the forward pass
    peak_tape_bytes: int        # the largest Tape.memory() over the segments' tapes


def checkpointed_rollout(step_fn: StepFn, state0: Any, num_steps: int, loss_fn: Callable[[Any], Array],
                         segment: int | None = None, state_factory: Callable[[], Any] | None = None,
                         attributes: Sequence[str] | None = None) -> RolloutResult:
    """Run ``num_steps`` steps from ``state0``, evaluate ``loss_fn`` on the last state and
    backpropagate, keeping only every ``segment``-th state during the forward pass.

    - ``step_fn(state_in, state_out, step)`` launches kernels that compute step ``step`` (0-based)
      from ``state_in`` into the fresh ``state_out``, e.g.
      ``lambda a, b, i: solver.step(a, b, control, dt)``. It must not record on a tape itself
      and must give the same result when run twice from the same state (it is recomputed).
    - ``loss_fn(state)`` launches kernels that write a loss into a one-element array with
      ``requires_grad=True`` and returns that array.
    - ``segment``: steps per segment (k); default ``round(sqrt(num_steps))``. ``segment=num_steps``
      is one plain tape; ``segment=1`` checkpoints every state.
    - ``state_factory()`` returns a fresh state to step into (e.g. ``model.state``); by default a
      copy of ``state0`` whose checkpointed arrays are new zero arrays. The arrays with
      ``requires_grad`` in the factory's states carry gradients between steps and segments.
    - ``attributes``: names of the state's arrays to checkpoint; default every xsim array
      attribute of ``state0`` (other attributes are shared between states, not copied).

    Gradients accumulate, as ``Tape.backward`` does, into ``state0``'s arrays and into every
    array with a gradient that the steps or the loss read (parameters, controls): zero them
    yourself between optimisation iterations. Launches are not recorded on an enclosing tape.
    """
    if not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"checkpointed_rollout: num_steps must be a positive int, got {num_steps!r}")
    k = max(1, round(math.sqrt(num_steps))) if segment is None else segment
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"checkpointed_rollout: segment must be a positive int or None, got {segment!r}")
    k = min(k, num_steps)
    attrs = list(attributes) if attributes is not None else array_attributes(state0)
    if not attrs:
        raise ValueError("checkpointed_rollout: the state has no xsim array attributes to checkpoint")
    factory = state_factory or (lambda: _fresh_like(state0, attrs))
    probe = factory()
    grad_attrs = [a for a in attrs if getattr(probe, a) is not None and getattr(probe, a).requires_grad]
    del probe
    starts = list(range(0, num_steps, k))

    checkpoints = _forward(step_fn, state0, starts, factory, attrs)
    checkpoint_bytes = sum(_state_bytes(cp, attrs) for cp in checkpoints.values())

    carried: dict[str, Array] = {}
    peak_tape_bytes = 0
    loss = final_state = None
    for start in reversed(starts):
        stop = min(start + k, num_steps)
        if start == 0:
            # step 0 may have written into state0 (forces cleared, say): give it back its values,
            # and start from the user's own arrays so that their gradients land there.
            _copy_values(state0, checkpoints.pop(0), attrs)
            first = state0
        else:
            first = checkpoints.pop(start)
            for a in grad_attrs:
                getattr(first, a).requires_grad = True
        tape = Tape()
        with recording.suspended(), tape:  # tapes do not nest: an enclosing one is set aside, and records nothing
            last = _run_steps(step_fn, first, start, stop, factory)
            if stop == num_steps:
                loss, final_state = loss_fn(last), last
        peak_tape_bytes = max(peak_tape_bytes, tape.memory())
        if stop == num_steps:
            tape.backward(loss=loss)
        else:
            inner = _inner_arrays(last)
            tape.backward(grads={(inner[a] if isinstance(a, tuple) else getattr(last, a)): g
                                 for a, g in carried.items() if not isinstance(a, tuple) or a in inner})
        # Not tape.reset(): it would zero the gradients of parameters that later segments add to.
        carried = {a: getattr(first, a).grad for a in grad_attrs if getattr(first, a).grad is not None}
        carried.update({k: arr.grad for k, arr in _inner_arrays(first).items() if arr.grad is not None})
        del tape, last, first
    return RolloutResult(loss=float(loss.numpy().reshape(-1)[0]), loss_array=loss, final_state=final_state,
                         segment=k, num_segments=len(starts), checkpoint_bytes=checkpoint_bytes,
                         peak_tape_bytes=peak_tape_bytes)


def array_attributes(state: Any) -> list[str]:
    """The names of ``state``'s attributes that hold xsim arrays (what gets checkpointed by default)."""
    return [name for name, v in vars(state).items() if isinstance(v, Array)]


def _inner_arrays(state: Any) -> dict[tuple[str, str], Array]:
    """The arrays with gradients that ``state``'s non-array attributes hold (one level down, e.g. the
    slips in ``State.body_contacts``), by (attribute, name)."""
    out = {}
    for name, v in vars(state).items():
        if v is not None and not isinstance(v, Array) and hasattr(v, "__dict__"):
            out.update({(name, k): a for k, a in vars(v).items() if isinstance(a, Array) and a.requires_grad})
    return out


def _forward(step_fn: StepFn, state0: Any, starts: list[int], factory, attrs) -> dict[int, Any]:
    """Step from ``state0`` up to the last segment's start without a tape; return a detached copy
    of the state at each segment start."""
    checkpoints = {}
    state = state0
    at = set(starts)
    with recording.suspended():
        for i in range(starts[-1] + 1):
            if i in at:
                checkpoints[i] = _detached_copy(state, attrs)
            if i < starts[-1]:
                out = factory()
                step_fn(state, out, i)
                state = out
    return checkpoints


def _run_steps(step_fn: StepFn, state: Any, start: int, stop: int, factory) -> Any:
    for i in range(start, stop):
        out = factory()
        step_fn(state, out, i)
        state = out
    return state


def _detached_copy(state: Any, attrs) -> Any:
    out = copy.copy(state)
    for a in attrs:
        arr = getattr(state, a)
        if arr is not None:
            setattr(out, a, arr.clone_untracked())
    return out


def _fresh_like(state: Any, attrs) -> Any:
    out = copy.copy(state)
    for a in attrs:
        arr = getattr(state, a)
        if arr is not None:
            setattr(out, a, zeros_like(arr))
    return out


def _copy_values(dst: Any, src: Any, attrs) -> None:
    for a in attrs:
        if getattr(dst, a) is not None:
            getattr(dst, a).copy_from_untracked(getattr(src, a))


def _state_bytes(state: Any, attrs) -> int:
    return sum(getattr(state, a).nbytes for a in attrs if getattr(state, a) is not None)
