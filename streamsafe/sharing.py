"""Objects that stand for live GPU state (a contract, an output, a frame) and so refuse to be copied or
pickled, each with a message that says why and what to copy instead. Nothing here blocks."""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = ["Unshareable"]


class Unshareable:
    """``copy.copy``, ``copy.deepcopy`` and ``pickle`` raise ``TypeError`` with the class's own messages."""

    __slots__ = ()
    _no_copy = "this object cannot be copied"
    """The message of a copy: what the object holds, and what to copy instead."""
    _no_pickle = "this object cannot be pickled"
    """The message of a pickle."""

    def __copy__(self) -> NoReturn:
        raise TypeError(self._no_copy)

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError(self._no_copy)

    def __reduce__(self) -> NoReturn:
        raise TypeError(self._no_pickle)
