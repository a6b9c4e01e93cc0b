"""Zero-copy views of guarded outputs: which effect's output each view's memory is, and of which run.

A view imported with :meth:`SafeImage.__dlpack__ <streamsafe.SafeImage.__dlpack__>` (or made by
``out.torch(copy=False)``) is remembered by its memory (a data pointer, or the model's buffer), with the
buffer and the output generation it shows. A view used as another guarded effect's input makes that run
a reader of the output (effects chained by views); a view of an output its effect has since overwritten
by a later run is refused there (H7). Nothing here blocks or issues GPU work.
"""

from __future__ import annotations

import weakref
from typing import Any

from ._dlpack import array_key
from .frameworks import TORCH

__all__ = ["add", "read_by", "read_inputs", "views_exist", "registry"]

registry: dict[Any, tuple[weakref.ref[Any], int]] = {}
"""Memory of outputs imported as zero-copy views: key -> (buffer, generation). A view passed as
another guarded effect's input makes that run a reader of the output (effects chained by views)."""


def add(key: Any, buffer: Any, generation: int) -> None:
    """Remember that contents ``generation`` of ``buffer`` (:class:`~streamsafe.buffers.Buffer`) left as a
    zero-copy view of memory ``key``."""
    if key is None:
        return
    if len(registry) > 1024:
        _prune()
    registry[key] = (buffer.ref, generation)


def read_by(view: Any, key: Any) -> tuple[Any, int] | None:
    """For an input of a guarded call (``view``, its memory ``key``): the buffer and generation of the current
    output it is a zero-copy view of (the call reads that output), else ``None``. A view of an output its
    effect has since overwritten by a later run, without releasing the buffer meanwhile (the memory is still
    the SDK's), raises :class:`~streamsafe.errors.StaleOutputError`; so does a view known as such (tagged) of
    an output since released (``close()``, a resize: it points at freed memory). A model's view knows its run
    (``view_of``); a torch view a copy helper made is tagged by its buffer; any other view is known by the
    newest view imported at its memory, and is not refused while the buffer's newest contents are a plain call's
    (the SDK's own result, which streamsafe did not hand out: the view may show them)."""
    found = registry.get(key) if key is not None else None
    cls = type(view)
    tagged_class = _TAGGED.get(cls)
    if tagged_class is None:
        tagged_class = _TAGGED[cls] = hasattr(cls, "view_of")
    tag = view.view_of if tagged_class else None
    if found is None and tag is None:
        return None
    if tag is not None:
        buffer, generation = tag[0](), tag[1]
        if buffer is not None and getattr(buffer, "ledger", None) is None:  # (a tag of the model's own, not a buffer's)
            tag = None
            if found is None:
                return None
    exact = tag is not None  # (the view itself says which output it is: not another array at a freed address)
    if tag is None:
        assert found is not None
        buffer, generation = found[0](), found[1]
        if buffer is not None:
            tagged = buffer.tagged_generation(view)
            if tagged is not None:
                generation, exact = tagged, True
    if buffer is None:
        return None
    if generation != buffer.generation:
        # a view of an overwritten output, or (known by the view itself) of a released one: freed memory. A view
        # known by its memory alone may show the contents a plain call wrote last (the SDK's own result): not refused
        if exact or (generation >= buffer.release_generation and not buffer.closed and buffer.unlisted != buffer.generation):
            buffer.refuse_stale_view(generation, "input")
        return None
    return buffer, generation


def read_inputs(arrays: Any, ledger: Any, stream: Any) -> None:
    """The inputs of a call of ``ledger``'s object on ``stream``: each that is a zero-copy view of another object's
    current output makes the call a reader of it (that object's next write waits for ``stream``); a stale view of
    any output raises :class:`~streamsafe.errors.StaleOutputError` (see :func:`read_by`). Does not block."""
    tensor = TORCH.tensor
    for arr in arrays:
        cls = type(arr)
        key = arr.data_ptr() if cls is tensor else array_key(arr)
        tagged_class = _TAGGED.get(cls)
        if tagged_class is None:
            tagged_class = _TAGGED[cls] = hasattr(cls, "view_of")
        if not tagged_class and (key is None or key not in registry):  # (the common case: no view at all)
            continue
        found = read_by(arr, key)
        if found is not None and found[0].ledger is not ledger:
            buffer, generation = found
            buffer.add_reader(generation, stream)


_TAGGED: dict[type, bool] = {}
"""Per array type: whether its arrays say which output they are a view of (``view_of``)."""


def views_exist() -> bool:
    """Whether any view is remembered (the cheap check a call makes first)."""
    return bool(registry)


def _prune() -> None:
    for key, (ref, generation) in list(registry.items()):
        buffer = ref()
        if buffer is None or buffer.generation != generation:
            del registry[key]
