"""Wrapping a framework's functions and methods for a while, and putting the originals back: what sanitize
mode's hooks (:mod:`streamsafe.sim.sync_hooks`) install. Nothing here knows a framework or blocks."""

from __future__ import annotations

import ctypes
import gc
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["MISSING", "Patch", "Wrap", "restore", "set_type_attribute", "wrap_attribute", "wrap_method"]

Wrap = Callable[[Any], Any]
"""``wrap(original) -> replacement``."""

MISSING = object()
"""No such attribute (a version of the framework without it; an override added where there was none)."""


class Patch:
    """One attribute replaced: its owner (a module or a class), its name, what it was (``MISSING``: an
    override added to a subclass), what it is now, a label for people, and whether the owner is an immutable
    type written through its dictionary."""

    __slots__ = ("owner", "name", "original", "replacement", "label", "immutable")

    def __init__(self, owner: Any, name: str, original: Any, replacement: Any, label: str, immutable: bool = False) -> None:
        self.owner, self.name, self.original, self.replacement, self.label = owner, name, original, replacement, label
        self.immutable = immutable


def set_type_attribute(cls: type, name: str, value: Any, *, immutable: bool = False) -> None:
    """``setattr(cls, name, value)``; with ``immutable``, for an extension type that refuses it (CuPy's
    ``Device`` is a Cython ``cdef class``), written into the type's own dictionary, then ``PyType_Modified`` so
    that Python's attribute cache sees the change. Raises ``TypeError`` when it cannot."""
    try:
        setattr(cls, name, value)
        return
    except TypeError:
        if not immutable:
            raise
    namespaces = gc.get_referents(cls.__dict__)
    if len(namespaces) != 1 or not isinstance(namespaces[0], dict):
        raise TypeError(f"cannot set {name!r} on {cls.__qualname__}: its dictionary is not reachable")
    namespaces[0][name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))


def wrap_attribute(module: Any, name: str, wrap: Wrap, label: str) -> Patch | None:
    """Replace ``module.name`` with ``wrap(module.name)``; ``None`` when there is no such attribute."""
    original = getattr(module, name, MISSING)
    if original is MISSING:
        return None
    replacement = wrap(original)
    setattr(module, name, replacement)
    return Patch(module, name, original, replacement, label)


def wrap_method(cls: Any, name: str, wrap: Wrap, label: str, *, immutable: bool = False) -> Patch | None:
    """Wrap ``cls.name`` where it is defined (a base class: its subclasses see it too); where that is an
    extension type that refuses it, as an override on ``cls`` itself, or with ``immutable`` in the type's
    dictionary (:func:`set_type_attribute`). ``None`` (with a warning when it cannot be wrapped) when it is
    not there."""
    owner = next((c for c in getattr(cls, "__mro__", ()) if name in c.__dict__), None)
    if owner is None or owner is object:
        return None
    original = owner.__dict__[name]
    replacement = wrap(original)
    try:
        set_type_attribute(owner, name, replacement, immutable=immutable)
    except TypeError as e:
        if owner is not cls:
            try:
                setattr(cls, name, replacement)
                return Patch(cls, name, MISSING, replacement, label)
            except TypeError:
                pass
        warnings.warn(f"sanitize mode does not see {label}: {e}", RuntimeWarning, stacklevel=2)
        return None
    return Patch(owner, name, original, replacement, label, immutable)


def restore(patch: Patch) -> None:
    """Put the original back, unless something else replaced the wrapper since (then theirs stays)."""
    owner, name = patch.owner, patch.name
    current = owner.__dict__.get(name, MISSING) if isinstance(owner, type) else getattr(owner, name, MISSING)
    if current is not patch.replacement:
        return
    if not isinstance(owner, type):
        setattr(owner, name, patch.original)
    elif patch.original is MISSING:
        delattr(owner, name)
    else:
        set_type_attribute(owner, name, patch.original, immutable=patch.immutable)
