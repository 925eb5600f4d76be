"""The live geometry objects a kernel may name by id (``xsim.Mesh.id``, ``xsim.HashGrid.id``): a
launch checks an id that comes straight from a kernel parameter here, so a stale, foreign or
wrong-kind id is a clear error instead of native code reading freed or unrelated memory."""

from __future__ import annotations

import weakref

import numpy as np

_LIVE: dict[int, tuple[str, str]] = {}  # id -> (kind, device name)
_OBJECTS: dict[int, weakref.ref] = {}  # id -> the object, for the arrays a kernel reads through mesh_get(id)

KIND_NAMES = {"mesh": "xsim.Mesh", "hash_grid": "xsim.HashGrid"}


def register(handle: int, kind: str, device: str, obj) -> None:
    _LIVE[handle] = (kind, device)
    _OBJECTS[handle] = weakref.ref(obj)


def unregister(handle: int) -> None:
    _LIVE.pop(handle, None)
    _OBJECTS.pop(handle, None)


def object_of(value):
    """The live object whose id is ``value`` (an int or numpy integer), else None."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        ref = _OBJECTS.get(int(value))
        return None if ref is None else ref()
    return None


def is_live(value, kind: str, device: str) -> bool:
    """The launch's fast path: a Python int naming a live object of ``kind`` on ``device``."""
    return type(value) is int and _LIVE.get(value) == (kind, device)


def check(kernel, name: str, value, kind: str, device: str) -> None:
    """Raise a ValueError naming the kernel parameter unless ``value`` is a live id of ``kind`` on ``device``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = int(value)  # an id read back from an array of uint64 is a numpy integer
    if is_live(value, kind, device):
        return
    where = f"kernel '{kernel.key}' parameter '{name}'"
    want = KIND_NAMES[kind]
    found = _LIVE.get(value) if isinstance(value, int) else None
    if found is None:
        why = "which is not the id of a live one (pass obj.id of an object you still hold)"
    elif found[0] != kind:
        why = f"but it is the id of an {KIND_NAMES[found[0]]}"
    else:
        why = f"but that one lives on '{found[1]}' and the launch runs on '{device}'"
    raise ValueError(f"{where}: expected the id of an {want}, got {value!r}, {why}")
