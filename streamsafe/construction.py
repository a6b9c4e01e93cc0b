"""Constructor arguments an SDK object was made with, recorded while its class has streamsafe's dispatchers.

Some SDK objects keep what they were made with out of Python's reach (a decoder's ``cuda_stream`` and
``gpu_id`` live in C++). The dispatchers go on a class a profile names as soon as streamsafe sees it
(:func:`streamsafe.guarding.watch_profiles`), and its ``__init__`` then records the arguments its profile names
(:attr:`~streamsafe.profile.Profile.constructor_keywords`); :func:`made_with` reads them back. Nothing here
blocks or issues GPU work.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from .identity import WeakIdentityMap

__all__ = ["made_with", "recording_init"]

_made_with: WeakIdentityMap[dict[str, Any]] = WeakIdentityMap()
"""Objects made while their class was guarded: the constructor arguments their profile names."""


def made_with(obj: Any, name: str) -> Any:
    """The constructor argument ``name`` ``obj`` was made with, if its class was guarded then and its profile
    names it (:attr:`~streamsafe.profile.Profile.constructor_keywords`), else ``None``. Does not block."""
    return _made_with.get(obj, {}).get(name)


def recording_init(original: Any, names: tuple[str, ...], mark: str) -> Callable[..., None]:
    """``original`` (an ``__init__``) that also records the constructor arguments ``names`` (their defaults when
    not given), with the attribute ``mark`` set on it (the guard's sign of its own wrappers). An ``__init__`` whose
    signature cannot be read (a C++ SDK's) records the ``names`` passed by keyword."""
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        given = {n: kwargs[n] for n in names if n in kwargs}  # (by keyword: what a C++ constructor's signature hides)
        if signature is not None:
            try:
                bound = signature.bind(self, *args, **kwargs)
                bound.apply_defaults()
                given.update((n, bound.arguments[n]) for n in names if n in bound.arguments)
            except (TypeError, ValueError):  # (arguments the signature does not take: the SDK accepted them)
                pass
        if given:
            with contextlib.suppress(TypeError):  # (an object that cannot be weakly referenced: nothing kept)
                _made_with[self] = given

    with contextlib.suppress(AttributeError, TypeError):
        functools.update_wrapper(__init__, original)
    setattr(__init__, mark, True)
    return __init__
