"""xsim: a differentiable XPBD physics engine with its own Python-embedded kernel compiler.

The public namespace follows NVIDIA Warp's names (``xsim.kernel``, ``xsim.launch``, ``xsim.vec3``,
``xsim.sin``...) so that a Warp kernel ports by changing its import.
"""

__version__ = "0.1.0"

from . import config
from .array import (
    array,
    array1d,
    array2d,
    array3d,
    array4d,
    empty,
    empty_like,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .device import (
    Device,
    ScopedDevice,
    ScopedStream,
    Stream,
    get_cuda_device,
    get_cuda_device_count,
    get_cuda_devices,
    get_device,
    get_devices,
    get_preferred_device,
    get_stream,
    init,
    is_cpu_available,
    is_cuda_available,
    set_device,
    set_stream,
    synchronize,
    synchronize_device,
)
from .errors import (
    CompileError,
    SceneError,
    WarpCodegenAttributeError,
    WarpCodegenError,
    WarpCodegenIndexError,
    WarpCodegenKeyError,
    WarpCodegenTypeError,
    WarpCodegenValueError,
)
from .indexedarray import indexedarray, indexedarray1d, indexedarray2d, indexedarray3d, indexedarray4d
from .kernels.builtins import BUILTINS as _BUILTINS
from .kernels.builtins import SPECIAL_FORMS as _SPECIAL_FORMS
from .kernels.kernel import (
    Kernel,
    func,
    func_grad,
    func_replay,
    get_module_options,
    kernel,
    overload,
    set_module_options,
)
from .kernels.launch import launch
from .kernels.module import get_module
from .kernels.scope import _ADJOINT as adjoint
from .kernels.scope import BuiltinRef as _BuiltinRef
from .kernels.static import static
from .types import *
from .types import dtype_from_numpy, dtype_to_numpy, matrix, quaternion, struct, transformation, vector

# the builtins as names a kernel can reach (xsim.sin, xsim.tid, ...): resolved by the frontend
for _name in list(_BUILTINS) + list(_SPECIAL_FORMS) + ["tid", "where", "select", "atomic_add", "atomic_sub", "atomic_min", "atomic_max",
                                "identity", "quat_identity", "transform_identity", "matrix_from_rows",
                                "matrix_from_cols"]:
    if _name not in globals() or _name in ("abs", "min", "max", "round", "pow"):
        globals()[_name] = _BuiltinRef(_name)
del _name
# the library funcs written in the kernel language (norms, rotations, transforms, spatial algebra)
from .kernels.funcs_math import *
from .kernels.funcs_transform import *

bool = bool_  # Warp's xsim.bool


# Warp's math constants (Python floats: a kernel reads them as float32 literals, like any float)
pi = PI = 3.141592653589793
HALF_PI = pi / 2.0
TAU = 2.0 * pi
e = E = 2.718281828459045
LOG2E = 1.4426950408889634
LOG10E = 0.4342944819032518
LN2 = 0.6931471805599453
LN10 = 2.302585092994046
phi = PHI = 1.618033988749895
inf = INF = float("inf")
nan = NAN = float("nan")


def constant(x):
    """A module-level constant a kernel may read (any number, vector or matrix value)."""
    return x


# the layers above the kernel compiler (they import the names above)
from . import sim, solvers
from .autodiff import Tape
from .autodiff.interop import from_dlpack, from_torch, to_torch, to_torch_function
from .autodiff.ops import clone, copy
