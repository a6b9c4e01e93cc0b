"""The model's memory: :class:`SimBuffer` (the data and the accesses that may still race), the caching
allocator's :class:`Lease` and pool keys, :class:`SimArray` (a CUDA array with the DLPack producer
protocol) and :class:`SimCapsule`, and small helpers on arrays and buffers."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._dlpack import DLPACK_CUDA
from ..backend.naming import as_stream
from ..errors import ArgumentError, DeviceMemoryError, InputArrayError
from ..streams import LEGACY_HANDLE, Stream
from .ops import SimEvent

if TYPE_CHECKING:
    from .backend import SimBackend
    from .races import Access, AccessKind

__all__ = [
    "FreeBlock", "Lease", "PoolKey", "SimArray", "SimBuffer", "SimCapsule", "as_dims", "buffers_of", "fill_poison",
    "model_capsule", "poisoned_block", "pool_stream", "stale_views",
]

_POISON = 0xDEAD


@dataclass(eq=False)
class SimBuffer:
    """Device memory in the model: a numpy array and the accesses that may still race.

    ``freed`` is set by :meth:`SimBackend.free` (``freed_by`` names that release); any
    later access is reported as a use after free.
    """

    name: str
    data: np.ndarray
    device: int
    freed: bool = False
    history: list[Access] = field(default_factory=list, repr=False)
    freed_by: Access | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"SimBuffer({self.name!r}, shape={self.data.shape}, dtype={self.data.dtype}, device={self.device})"


class Lease:
    """One allocation of the caching allocator, shared by every :class:`SimArray` of it
    (views made by ``from_dlpack``, capsules). When the last one is gone, a finalizer hands
    the block back to the pool of ``stream``. Pending operations hold the buffer, never this."""

    __slots__ = ("buffer", "stream", "recorded", "__weakref__")

    def __init__(self, buffer: SimBuffer, stream: Stream) -> None:
        self.buffer = buffer
        self.stream = stream
        self.recorded: set[Stream] = set()


class SimCapsule:
    """What a simulated producer's ``__dlpack__`` returns: importable once, like a PyCapsule.

    ``name`` follows the DLPack convention: ``"dltensor"`` (or ``"dltensor_versioned"``)
    until consumed, then ``"used_dltensor"`` (``"used_dltensor_versioned"``).
    """

    __slots__ = ("_array", "versioned", "_consumed", "view_of")

    def __init__(self, array: Any, *, versioned: bool = False) -> None:
        self._array = array
        self.versioned = versioned
        self._consumed = False
        self.view_of: Any = None
        """``(weak reference to a ledger, generation)`` when it is a guarded effect's output: an array the
        model imports from it is a view of that run's output (H7 when used after the next run)."""

    @property
    def name(self) -> str:
        """The capsule's DLPack name: ``dltensor`` (``_versioned``), ``used_...`` once imported."""
        base = "dltensor_versioned" if self.versioned else "dltensor"
        return f"used_{base}" if self._consumed else base

    @property
    def consumed(self) -> bool:
        """Whether the capsule was imported (a capsule imports once)."""
        return self._consumed

    @property
    def __streamsafe_key__(self) -> Any:
        """The memory it points at (the array's buffer), read without consuming it."""
        return self._array.buffer

    @property
    def array(self) -> Any:
        """The array it exports, while not consumed (``None`` after): the memory an importer gets."""
        return None if self._consumed else self._array

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


class SimArray:
    """A CUDA array in the model, with the DLPack producer protocol of a torch tensor.

    ``__dlpack__(stream=s)`` makes ``s`` wait for the model's current stream (the
    producing framework's stream), as torch does; ``stream=None`` means, like torch 2.11,
    no synchronisation at all (``dlpack_none="no-sync"``) or, like the DLPack standard,
    the legacy stream (``dlpack_none="legacy"``).

    Arrays made by :meth:`SimBackend.empty` (and views and capsules of them) share one
    allocation; when the last is gone its memory returns to the allocator's pool.
    """

    def __init__(
        self, backend: SimBackend, buffer: SimBuffer, *, dlpack_none: str = "no-sync", lease: Lease | None = None
    ) -> None:
        if dlpack_none not in ("no-sync", "legacy"):
            raise ValueError(f"dlpack_none must be 'no-sync' or 'legacy', got {dlpack_none!r}")
        self.backend = backend
        self.buffer = buffer
        self.dlpack_none = dlpack_none
        self._lease = lease
        self._view_of: tuple[Any, int] | None = None
        """``(weak reference to a ledger, generation)`` for a zero-copy view of a guarded effect's output."""

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return tuple(self.buffer.data.shape)

    @property
    def view_of(self) -> tuple[Any, int] | None:
        """``(weak reference to a ledger, generation)`` for a zero-copy view of a guarded effect's output."""
        return self._view_of

    @property
    def __streamsafe_key__(self) -> SimBuffer:
        """What identifies its memory: the buffer (shared by every view of one allocation)."""
        return self.buffer

    @property
    def dtype(self) -> np.dtype[Any]:
        """The array's NumPy dtype."""
        return self.buffer.data.dtype

    @property
    def device(self) -> int:
        """The CUDA device the memory is on."""
        return self.buffer.device

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return self.buffer.data.ndim

    def record_stream(self, stream: Any) -> None:
        """Like ``torch.Tensor.record_stream``: the memory is in use on ``stream`` too.

        When the allocation is freed, an event is recorded on ``stream`` and the block is not
        handed out again before that event has completed. Does not block; orders nothing now.
        A no-op for the allocation stream and for memory the allocator does not own.
        """
        self.backend._record_stream(self, stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self.buffer.device)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> SimCapsule:
        """Export as a capsule; orders ``stream`` after the producer's current stream. Does not block."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"SimArray lives on {self.__dlpack_device__()}, cannot export to {dl_device}")
        if copy:
            raise BufferError("SimArray cannot copy during export (copy=True); import with copy=False, then copy")
        if stream == 0:
            raise ValueError("stream=0 is ambiguous for CUDA in DLPack; pass 1 for the legacy stream or 2 for per-thread")
        if stream is None and self.dlpack_none == "legacy":
            stream = LEGACY_HANDLE
        if stream is not None and stream != -1:
            consumer = as_stream(stream, device=self.device, backend=self.backend)
            producer = self.backend.current_stream(self.device)
            if consumer != producer:
                self.backend.fence(consumer, producer)
        versioned = max_version is not None and tuple(max_version) >= (1, 0)
        return SimCapsule(self, versioned=versioned)

    def numpy(self) -> np.ndarray:
        """A host copy, ordered after the current stream (like ``tensor.cpu()``). Blocks the host."""
        return self.backend.download(self)

    def __repr__(self) -> str:
        return f"SimArray({self.buffer.name!r}, shape={self.shape}, dtype={self.dtype}, device={self.device})"


FreeBlock = tuple[SimBuffer, list[SimEvent]]
"""A block in the allocator's free pool, with the events of the streams ``record_stream`` named."""
PoolKey = tuple[tuple[int, int], tuple[int, ...], str]
"""The allocator's pools are per stream (:func:`pool_stream`), shape and dtype."""


def pool_stream(stream: Stream) -> tuple[int, int]:
    """The allocator's key for the pool of ``stream``: device and handle. Torch's allocator and CuPy's pool
    know a stream by its handle, so every thread's per-thread stream (2) shares one pool, and a block a
    thread freed there goes to another thread's allocation on its own per-thread stream unordered."""
    return (stream.device, stream.handle)


def stale_views(reads: Iterable[Any], writes: Iterable[Any]) -> list[tuple[SimArray, AccessKind, Any, int]]:
    """The arrays among ``reads`` and ``writes`` that are views of a guarded effect's output that the
    effect has run again since (with whether each is read or written, its ledger and the view's run)."""
    stale = []
    for kind, items in (("read", reads), ("write", writes)):
        for item in items:
            tag = item._view_of if type(item) is SimArray else None
            if tag is not None and not item.buffer.freed:  # (released memory: a use after free, reported as such)
                ledger = tag[0]()
                if ledger is not None and ledger.generation != tag[1]:
                    stale.append((item, kind, ledger, tag[1]))
    return stale  # type: ignore[return-value]


def buffers_of(items: Iterable[SimArray | SimBuffer]) -> tuple[SimBuffer, ...]:
    """The buffers of ``items`` (arrays or buffers)."""
    if not items:
        return ()
    return tuple([item.buffer if isinstance(item, SimArray) else item for item in items])


def as_dims(shape: Sequence[int] | int) -> tuple[int, ...]:
    """An allocation's shape as a tuple of ints (an int for one dimension); else :class:`~streamsafe.errors.ArgumentError`."""
    try:
        dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        dims = None
    if dims is None or any(d < 0 for d in dims):
        raise ArgumentError(f"shape={shape!r} is not an array's shape: the model allocates a tuple of sizes, each an int >= 0. "
                            "Pass e.g. (3, 1080, 1920)")
    return dims


def as_dtype(dtype: Any) -> np.dtype[Any]:
    """An allocation's element type as NumPy's; else :class:`~streamsafe.errors.ArgumentError`."""
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ArgumentError(f"dtype={dtype!r} is not an element type NumPy knows: the model's arrays are NumPy's. "
                            "Pass e.g. np.float32 or 'uint8'") from None


def fill_poison(data: np.ndarray) -> None:
    """Fill fresh or released memory with garbage (NaN, a pattern; never zeros for numbers)."""
    if data.dtype.kind == "f":
        data.fill(np.nan)
    elif data.dtype.kind in "iu":
        data.fill(_POISON % (np.iinfo(data.dtype).max + 1))
    else:
        data.fill(0)


@functools.cache
def _host_memory() -> int | None:
    """This host's physical memory in bytes, where the system says (``None`` elsewhere); asked once."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def poisoned_block(dims: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A fresh NumPy block for a model allocation of ``dims`` x ``dtype``, filled with the poison pattern; or
    :class:`DeviceMemoryError` (also a ``MemoryError``) when this host cannot hold it: the model keeps every byte of
    its device memory in host memory."""
    nbytes = math.prod(dims) * dtype.itemsize
    total = _host_memory()
    try:
        if total is not None and nbytes > total:
            raise MemoryError
        data = np.empty(dims, dtype=dtype)
    except MemoryError:
        limit = f"this host's memory ({total / 2**30:.1f} GiB)" if total is not None and nbytes > total else \
            "this host could give (NumPy's allocation failed)"
        raise DeviceMemoryError(
            f"{dims} {dtype.name} on the model", nbytes, limit,
            "The model (streamsafe.sim) keeps its device memory in this host's memory; its ordering and arithmetic do "
            "not depend on the size, so test with smaller frames (e.g. (3, 72, 128)), or run at this size on a GPU",
        ) from None
    fill_poison(data)
    return data


def model_capsule(obj: Any, capsule: Any, backend: Any, what: str = "array") -> SimCapsule:
    """``capsule``, what ``obj.__dlpack__()`` gave, when it is memory of the model ``backend``; else an
    :class:`InputArrayError` (also a ``TypeError``): a NumPy or CPU capsule, whatever device ``obj`` claims, or
    (``capsule`` ``None``) an ``obj`` without ``__dlpack__``."""
    if isinstance(capsule, SimCapsule):
        return capsule
    if capsule is None:
        raise InputArrayError(what, obj, "it has no __dlpack__ and is not a capsule of this model",
                              "Pass an array of this model (sim.empty(...), sim.array(x)), a guarded output, or its capsule.")
    try:
        claim = f"it says it is on device {tuple(obj.__dlpack_device__())} (__dlpack_device__), but "
    except Exception:  # noqa: BLE001  (no such method, or one that fails: the capsule is what counts)
        claim = ""
    raise InputArrayError(
        what,
        obj,
        f"{claim}its __dlpack__() gave a {type(capsule).__name__}, not memory of {backend!r}: on the model, device "
        "memory is what a SimBackend allocated, and a NumPy or CPU capsule is host memory",
        "Allocate it on the model (sim.empty(...), sim.array(x)), or pass a guarded output or a view of one.",
    )
