"""Global settings. ``mode`` (``XSIM_MODE`` sets the initial value):

- "release" (default): kernels run unchecked;
- "debug": every array access is bounds-checked (an out-of-bounds index raises ``IndexError``
  and stops the launch), and the tape raises at once when a launch overwrites an array it
  recorded, and at backward when a recorded input was changed behind its back (``numpy()`` writes);
- "check": every launch's written arrays (and gradients, in backward passes) and the solver's
  state after each step are scanned for NaN/inf, raising ``xsim.errors.NonFiniteError`` naming
  the kernel or step and the array. It runs the release build of the kernels (no bounds checks,
  the same binaries and numbers as release): it is for numerical faults, debug for indexing bugs.
  ``xsim.empty`` gives zeros in check mode, so that a partly written array scans clean.

Any other value is an error at the next launch, never silently release mode.

``verify_autograd_array_access`` (Warp's name, default False): while a Tape records, a launch or
array op that writes an array an earlier recorded launch or op read prints a warning naming the
array, the kernel parameter (or the op) and where; ``tape.backward()`` and ``tape.reset()`` forget
the reads of their records (``array.mark_read``/``mark_write``/``mark_init`` do it by hand).
"""

import os

MODES = ("release", "debug", "check")

mode: str = os.environ.get("XSIM_MODE", "release")

verify_autograd_array_access: bool = False

# Warp's: whether kernels that make no choice of their own (``kernel(grid_stride=...)``, the module option
# ``default_grid_stride``) loop over a CUDA launch in grid strides (True) or run one thread per index
default_grid_stride: bool = True


def current_mode() -> str:
    """``mode``, checked to be one of ``MODES``."""
    if mode not in MODES:
        source = "the XSIM_MODE environment variable" if mode == os.environ.get("XSIM_MODE") else "xsim.config.mode"
        raise ValueError(f"{source} is {mode!r}, which is not a mode; use one of {', '.join(map(repr, MODES))}")
    return mode
