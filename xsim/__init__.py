"""xsim: a differentiable XPBD physics engine with its own Python-embedded kernel compiler."""

__version__ = "0.1.0"

from . import config  # noqa: E402
from .types import *  # noqa: E402,F403
from .types import struct, vector, matrix, quaternion, transformation  # noqa: E402
from .errors import CompileError, SceneError  # noqa: E402
from .device import Device, get_device, set_device, is_cuda_available, synchronize  # noqa: E402
from .array import (array, array1d, array2d, array3d, array4d, zeros, ones, empty, full,  # noqa: E402
                    zeros_like, ones_like, empty_like, full_like, from_numpy)
from .kernels.kernel import kernel, func, func_grad  # noqa: E402
from .kernels.launch import launch  # noqa: E402
from .kernels.frontend import BuiltinRef as _BuiltinRef, _ADJOINT as adjoint  # noqa: E402
from .kernels.builtins import BUILTINS as _BUILTINS  # noqa: E402

for _name in list(_BUILTINS) + ["tid", "where", "select", "atomic_add", "atomic_sub", "atomic_min", "atomic_max",
                                "identity", "quat_identity", "transform_identity", "matrix_from_rows",
                                "matrix_from_cols"]:
    if _name not in globals() or _name in ("abs", "min", "max", "round", "pow"):
        globals()[_name] = _BuiltinRef(_name)
bool = bool_  # noqa: A001,F405
del _name


def constant(x):
    """A module-level constant a kernel may read (any number, vector or matrix value)."""
    return x


from .autodiff import Tape  # noqa: E402,F401
from .autodiff.interop import from_dlpack, from_torch, to_torch, to_torch_function  # noqa: E402,F401
from .autodiff.ops import clone, copy  # noqa: E402,F401
from .device import Stream, ScopedStream, get_stream, set_stream  # noqa: E402,F401
from . import sim, solvers  # noqa: E402,F401
