"""Zero-copy views of guarded outputs: which effect's output each view's memory is, and of which run.

A view imported with :meth:`SafeImage.__dlpack__ <streamsafe.SafeImage.__dlpack__>` (or made by
``out.torch(copy=False)``) is remembered by its memory (a data pointer, or the model's buffer), with the
ledger and the output generation it shows. A view used as another guarded effect's input makes that run
a reader of the output (effects chained by views); a view of an output its effect has since overwritten
by a later run is refused there (H7). Nothing here blocks or issues GPU work.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["add", "at", "view_owner", "stale_view", "views_exist"]

_VIEWS: dict[Any, tuple[weakref.ref[Any], int]] = {}
"""Memory of outputs imported as zero-copy views: key -> (ledger, generation). A view passed as
another guarded effect's input makes that run a reader of the output (effects chained by views)."""


def add(key: Any, ledger: Any, generation: int) -> None:
    """Remember that output ``generation`` of ``ledger``'s effect left as a zero-copy view of memory ``key``."""
    if key is None:
        return
    if len(_VIEWS) > 1024:
        _prune()
    _VIEWS[key] = (weakref.ref(ledger), generation)


def at(key: Any) -> tuple[Any, int] | None:
    """The ledger and generation of the newest view imported at memory ``key`` (current or not), else ``None``."""
    found = _VIEWS.get(key) if key is not None else None
    if found is None:
        return None
    ledger = found[0]()
    return None if ledger is None else (ledger, found[1])


def view_owner(key: Any) -> tuple[Any, int] | None:
    """The ledger and generation whose current output ``key`` is a view of, if any."""
    found = _VIEWS.get(key)
    if found is None:
        return None
    ledger = found[0]()
    if ledger is None or ledger.generation != found[1]:
        del _VIEWS[key]
        return None
    return ledger, found[1]


def stale_view(view: Any, key: Any) -> tuple[Any, int] | None:
    """The ledger and generation of an output ``view`` (an array, memory ``key``) was a zero-copy view of,
    when that effect has overwritten it since by a later run and not released the buffer meanwhile (the
    memory is still the SDK's output buffer); else ``None``."""
    tag = getattr(view, "view_of", None)  # (a model's view knows its run)
    if isinstance(tag, tuple) and len(tag) == 2:
        ledger = tag[0]() if callable(tag[0]) else None
        generation = tag[1]
    else:
        found = _VIEWS.get(key) if key is not None else None
        if found is None:
            return None
        ledger = found[0]()
        generation = found[1]
        if ledger is not None:
            tagged = ledger.view_generation(view, None)
            generation = tagged if tagged is not None else generation
    if ledger is None or not isinstance(generation, int):
        return None
    if generation != ledger.generation and generation >= ledger.release_generation and not ledger.closed:
        return ledger, generation
    return None


def views_exist() -> bool:
    """Whether any view is remembered (the cheap check a call makes first)."""
    return bool(_VIEWS)


def _prune() -> None:
    for key, (ref, generation) in list(_VIEWS.items()):
        ledger = ref()
        if ledger is None or ledger.generation != generation:
            del _VIEWS[key]
