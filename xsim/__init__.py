"""xsim: a differentiable XPBD physics engine with its own Python-embedded kernel compiler.

The public namespace follows NVIDIA Warp's names (``xsim.kernel``, ``xsim.launch``, ``xsim.vec3``,
``xsim.sin``...) so that a Warp kernel ports by changing its import.
"""

import importlib
import math as _math
from types import SimpleNamespace as _SimpleNamespace

from . import config
from .array import (
    array,
    array1d,
    array2d,
    array3d,
    array4d,
    empty,
    empty_like,
    fixedarray,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .capture import Graph, ScopedCapture, capture_begin, capture_end, capture_launch, is_capture_active
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
    AssetError,
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

# the builtin library by area: each file adds its rows to the registry (kernels/builtins.py)
from .kernels import (
    builtins_expect,
    builtins_geometry,
    builtins_linalg,
    builtins_math,
    builtins_random,
    builtins_tile,
    builtins_transform,
)
from .kernels.builtins import BUILTINS as _BUILTINS
from .kernels.builtins import SPECIAL_FORMS as _SPECIAL_FORMS
from .kernels.builtins_geometry import HashGridQuery, MeshQuery, MeshQueryAABB, MeshQueryPoint, MeshQueryRay
from .kernels.cache import clear_kernel_cache
from .kernels.kernel import (
    DeterministicMode,
    Kernel,
    func,
    func_grad,
    func_native,
    func_replay,
    get_module_options,
    kernel,
    overload,
    set_module_options,
)
from .kernels.launch import launch, launch_tiled
from .kernels.module import get_module
from .kernels.scope import _ADJOINT as adjoint
from .kernels.scope import ATOMICS as _ATOMICS
from .kernels.scope import BuiltinRef as _BuiltinRef
from .kernels.static import static
from .timing import ScopedTimer
from .torch_view import device_from_torch, device_to_torch, from_torch, stream_from_torch, to_torch
from .types import *
from .types import dtype_from_numpy, dtype_to_numpy, matrix, quaternion, struct, transformation, vector
from .version import __version__

# the builtins as names a kernel can reach (xsim.sin, xsim.tid, ...): resolved by the frontend
for _name in list(_BUILTINS) + list(_SPECIAL_FORMS) + [*_ATOMICS, "tid", "where", "select",
                                "identity", "quat_identity", "transform_identity", "matrix_from_rows",
                                "matrix_from_cols", "grad"]:
    if _name not in globals() or _name in ("abs", "min", "max", "round", "pow"):
        globals()[_name] = _BuiltinRef(_name)
del _name, builtins_expect, builtins_geometry, builtins_linalg, builtins_math, builtins_random, builtins_tile
del builtins_transform

bool = bool_  # Warp's xsim.bool


# Warp's math constants, under both of Warp's names (Python floats: a kernel reads them as float literals)
E = e = _math.e
LOG2E = log2e = 1.0 / _math.log(2.0)
LOG10E = log10e = 1.0 / _math.log(10.0)
LN2 = ln2 = _math.log(2.0)
LN10 = ln10 = _math.log(10.0)
PHI = phi = (1.0 + _math.sqrt(5.0)) / 2.0
PI = pi = _math.pi
HALF_PI = half_pi = _math.pi / 2.0
TAU = tau = _math.tau
INF = inf = _math.inf
NAN = nan = _math.nan


def constant(x):
    """A module-level constant a kernel may read (any number, vector or matrix value)."""
    return x


from .autodiff import Tape
from .autodiff.interop import from_dlpack, to_torch_function
from .autodiff.ops import clone, copy
from .geometry import HashGrid, Mesh, is_cubql_available

# Modules that import this package (for the names above) are imported on first use, so that no
# import cycle runs through it: the library funcs written in the kernel language (norms, rotations,
# transforms, spatial algebra) and the layers above the kernel compiler.
_FUNC_MODULES = (".kernels.funcs_math", ".kernels.funcs_transform")
_LAYERS = ("sim", "solvers")


def __getattr__(name: str):
    if name in _LAYERS:
        return importlib.import_module(f".{name}", __name__)
    if name == "_src":  # Warp's tests reach its type lists as warp._src.types (xsim.types here) and its
        # registries as warp._src.context: user_modules (xsim's modules by name, the same dict) and
        # builtin_functions (each builtin by name, as xsim.<name> is)
        from . import warp_src_types
        from .kernels.builtins import BUILTINS
        from .kernels.module import _MODULES
        builtins = {n: globals()[n] for n in BUILTINS if isinstance(globals().get(n), _BuiltinRef)}
        return _SimpleNamespace(types=warp_src_types, context=_SimpleNamespace(user_modules=_MODULES,
                                                                     builtin_functions=builtins))
    for path in _FUNC_MODULES:
        module = importlib.import_module(path, __name__)
        if name in module.__all__:
            return getattr(module, name)
    raise AttributeError(f"module 'xsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    funcs = [n for path in _FUNC_MODULES for n in importlib.import_module(path, __name__).__all__]
    return sorted(set(globals()) | set(_LAYERS) | set(funcs))
