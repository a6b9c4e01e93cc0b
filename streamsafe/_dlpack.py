"""DLPack constants and the model's stand-in for a capsule."""

from __future__ import annotations

from typing import Any

__all__ = ["DLPACK_CPU", "DLPACK_CUDA", "SimCapsule"]

DLPACK_CPU = 1
DLPACK_CUDA = 2


class SimCapsule:
    """What a simulated producer's ``__dlpack__`` returns: importable once, like a PyCapsule.

    ``name`` follows the DLPack convention: ``"dltensor"`` (or ``"dltensor_versioned"``)
    until consumed, then ``"used_dltensor"`` (``"used_dltensor_versioned"``).
    """

    __slots__ = ("_array", "versioned", "_consumed")

    def __init__(self, array: Any, *, versioned: bool = False) -> None:
        self._array = array
        self.versioned = versioned
        self._consumed = False

    @property
    def name(self) -> str:
        base = "dltensor_versioned" if self.versioned else "dltensor"
        return f"used_{base}" if self._consumed else base

    @property
    def consumed(self) -> bool:
        return self._consumed

    def consume(self) -> Any:
        """Take the tensor out; a second call raises :class:`BufferError` as a real capsule does."""
        if self._consumed:
            raise BufferError(
                f"this DLPack capsule was already imported (its name is now {self.name!r}); a capsule "
                "can be consumed once. Import it once and copy the result, or ask the producer for a new capsule."
            )
        self._consumed = True
        return self._array

    def __repr__(self) -> str:
        return f"<SimCapsule {self.name!r}>"
