"""``Declared``: a base for the simulation's data classes (``Model``, ``State``, ``Control``,
``ModelBuilder``) whose attributes are exactly the ones their classes annotate.

Setting any other attribute raises an ``AttributeError`` naming it and the class: without this,
``builder.default_particle_radius = 0.05`` or ``model.soft_contact_mu = 1.0`` (names from other
engines, or typos) would be accepted and silently change nothing.
"""

from __future__ import annotations

import difflib


class Declared:
    """Refuses to set an attribute that no class in its MRO annotates (properties with a setter
    are allowed too)."""

    __slots__ = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._declared_names = frozenset(n for c in cls.__mro__ for n in vars(c).get("__annotations__", {}))

    def __setattr__(self, name: str, value) -> None:
        cls = type(self)
        if name not in cls._declared_names:
            setter = getattr(getattr(cls, name, None), "fset", None)
            if setter is None:
                raise AttributeError(_undeclared(cls, name), name=name, obj=self)
        object.__setattr__(self, name, value)


def _undeclared(cls: type, name: str) -> str:
    public = sorted(n for n in cls._declared_names if not n.startswith("_"))
    close = difflib.get_close_matches(name, public, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return (f"{cls.__name__} has no attribute {name!r} to set: {cls.__name__}'s attributes are the ones "
            f"its class declares ({cls.__module__}.{cls.__qualname__}){hint}")
