"""Safe outputs: the SDK's output with an ``image`` that is a proper DLPack producer; a decoder's frames.

``torch.from_dlpack(out.image)``, ``cupy.from_dlpack(out.image)`` and ``jax.dlpack.from_dlpack(out.image)``
pass their stream to ``__dlpack__``; the :class:`SafeImage` makes that stream wait for the SDK (H3/H4) before
handing over the capsule, and tells the buffer (:class:`~streamsafe.buffers.Buffer`) which stream now reads it
(for H5/H6). :class:`SafeFrame` is one frame a guarded decoder handed out, in a buffer of its pool: importable
any number of times until the decoder writes that buffer again. Each output owns its state and its
operations (imports, copies, ``record_stream``); :class:`JaxDLPackAdapter` is the adapter from the vendor's
documentation, complete with the protocol.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
import sys
import weakref
from typing import TYPE_CHECKING, Any

from ._dlpack import CAPSULE, DLPACK_CUDA, is_capsule
from .backend.naming import stream_on_device
from .errors import ArgumentError, DeviceMismatchError, ExportError, FrameworkUnavailableError, StreamsafeError
from .frameworks import torch_current_stream_handle
from .profile import no_output, set_output_maker
from .sharing import Unshareable
from .streams import LEGACY_HANDLE as LEGACY_DLPACK, Stream, handle_of, on_this_thread

if TYPE_CHECKING:
    from .buffers import Buffer
    from .ledger import PoolLedger

__all__ = ["SafeImage", "SafeOutput", "SafeFrame", "SafePlane", "JaxDLPackAdapter"]

_CONSUMED = (
    "this output's capsule was already imported; a DLPack capsule can be consumed once (H9)",
    "Import it once and keep that copy (out.torch(), out.cupy(), out.jax(), out.numpy() each import once), "
    "or copy the array the first import gave you",
)


def _check_export(device: tuple[int, int], copy: bool | None, dl_device: tuple[int, int] | None) -> None:
    """The export rules every producer here shares: no copy during export, no other device."""
    if copy:
        raise ExportError(
            "the output cannot be copied during export (copy=True; JAX's PJRT does not support it either)",
            "Import with copy=False and copy afterwards (the vendor's documented JAX recipe: jnp.array(view, copy=True))",
        )
    if dl_device is None:
        return
    if not _int_pair(dl_device):
        raise ExportError(
            f"dl_device={dl_device!r} is not a DLPack device: DLPack names one by a pair (device type, device id)",
            f"Leave dl_device out, or pass {device}, the output's own device",
        )
    wanted = (int(dl_device[0]), int(dl_device[1]))
    if wanted != device:
        raise ExportError(
            f"the output lives on DLPack device {device} and cannot be exported to dl_device={wanted}",
            f"Import it on its own device (leave dl_device out, or pass {device}) and copy it to the other one afterwards",
        )


def _int_pair(value: Any) -> bool:
    """Whether ``value`` is a pair of ints (a tuple or list of two integers, no bool): what DLPack names a device and
    a version by."""
    if type(value) is tuple and len(value) == 2 and type(value[0]) is int and type(value[1]) is int:
        return True  # (the common one, torch's max_version at each import: no generator)
    return (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value))


def _framework(name: str, helper: str, extra: str) -> Any:
    """The module ``name`` (already imported, almost always), else a clear error naming ``helper``'s need."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise FrameworkUnavailableError(name.split(".")[0], helper, str(e), extra) from e


def _have_torch() -> bool:
    """Whether torch is there to copy with (imported, or importable): the GPU copy helpers' first choice."""
    return "torch" in sys.modules or importlib.util.find_spec("torch") is not None


class _BufferView(Unshareable):
    """What an output of a buffer owns: the buffer, the generation it shows, its device; the import of a capsule,
    ``record_stream``, and the check of a consumer's stream."""

    __slots__ = ()
    _buffer: Buffer
    _generation: int
    _device: int

    @property
    def generation(self) -> int:
        """The buffer's generation this output shows."""
        return self._generation

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self._device)

    @property
    def memory_backend(self) -> Any:
        """The backend whose memory this output is (its SDK object's: a model, or the GPU's driver). A guarded call
        refuses, as its input, an output of another model before its capsule is taken."""
        return self._buffer.ledger.resolved_backend()

    def record_stream(self, stream: Any) -> None:
        """Declare that a zero-copy view of this output is also read on ``stream`` (any stream object streamsafe
        accepts), like torch's ``Tensor.record_stream``: ``stream`` is ordered after the SDK's writes now, and the
        SDK's next write and release wait for it. Needed for a view read on a stream that is neither the one it
        was imported on nor the current one at the next write. Does not block the host."""
        buffer = self._buffer
        buffer.add_reader(self._generation, stream_on_device(stream, self._device, buffer.ledger.resolved_backend(), "consumer"))

    def _reader_stream(self, stream: Any) -> Stream:
        """The :class:`Stream` a consumer names in ``__dlpack__(stream=...)``: a held handle needs no driver query;
        a per-thread stream is the importing thread's (whoever named it). Does not block."""
        buffer = self._buffer
        consumer = buffer.ledger.holds.stream(stream) or stream_on_device(
            stream, self._device, buffer.ledger.resolved_backend(), "consumer")
        return on_this_thread(consumer) if consumer.thread else consumer

    def _import(self, consumer: Stream, capsule: Any, escapes: bool) -> None:
        """``capsule`` imported on ``consumer``: the buffer orders and records the read, a view (``escapes``) is
        remembered by its memory, a model's capsule learns its output (H7). Does not block."""
        self._buffer.import_output(self._generation, consumer, capsule, escapes=escapes)

    def _on_device(self, stream: Any) -> None:
        """Raise :class:`~streamsafe.errors.DeviceMismatchError` unless ``stream`` (a framework's stream object)
        is on the output's device: a helper imports on the current stream of that device. A stream object that
        names the output's device passes without a driver query."""
        device: int | None
        if isinstance(stream, Stream):
            device = stream.device
        else:
            try:
                device = handle_of(stream)[1]
            except StreamsafeError:
                device = None  # not a stream object: the full check below raises the right error
        if device != self._device:
            stream_on_device(stream, self._device, self._buffer.ledger.resolved_backend(), "consumer")


class SafeImage(_BufferView):
    """A DLPack producer for one output of a guarded call; importable once.

    It talks to the SDK object's buffer, not to the guard that made it, so an output of one guard is ordered
    against every other guard's calls."""

    _no_copy = "a SafeImage cannot be copied: its capsule can be imported once; copy the data (out.copy(), out.torch())"
    _no_pickle = "a SafeImage cannot be pickled: it points at GPU memory the SDK owns; pickle a copy (out.numpy())"

    __slots__ = ("_buffer", "_capsule", "_generation", "_device", "_default_consumer", "_effect", "_consumed", "_escapes",
                 "_consumer")

    def __init__(self, buffer: Buffer, capsule: Any, generation: int, device: int, default_consumer: Stream, effect: Any = None) -> None:
        self._buffer = buffer
        self._capsule = capsule
        self._generation = generation
        self._device = device
        self._default_consumer = default_consumer
        self._effect = effect  # the SDK's memory lives as long as its effect: an output keeps it alive
        self._consumed = False
        self._escapes = True
        """Whether an import makes a view that leaves streamsafe (not one of its copy helpers)."""
        self._consumer: Stream | None = None

    @property
    def consumed(self) -> bool:
        """Whether the capsule was imported (an output imports once)."""
        return self._consumed

    @property
    def escapes(self) -> bool:
        """Whether the next import makes a zero-copy view that leaves streamsafe (not a copy helper's)."""
        return self._escapes

    def __dlpack__(
        self, *, stream: Any = None, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """Hand the capsule to a consumer on ``stream`` (DLPack rules: 1 legacy, 2 per-thread, else a stream
        pointer; ``None``/``-1``: the contract's consumer stream).

        Orders the consumer stream after the SDK's writes on the device (or by a host wait under the
        ``stream``/``device`` strategies), and the effect's next call and release after the consumer. Raises
        :class:`~streamsafe.errors.ExportError` (a ``BufferError``) on a second import or for a ``max_version`` that is
        no ``(major, minor)`` pair of ints (the capsule then stays importable), and
        :class:`~streamsafe.errors.StaleOutputError` if the buffer was reused since."""
        if self._consumed:
            raise ExportError(*_CONSUMED)
        if max_version is not None and not _int_pair(max_version):
            raise ExportError(  # (before anything is handed out: the capsule stays importable)
                f"max_version={max_version!r} is not a DLPack version: DLPack names one by a pair of ints "
                "(major, minor)", "Leave max_version out, or pass the newest version your consumer reads, e.g. (1, 0)",
            )
        buffer = self._buffer
        generation = self._generation
        if generation != buffer.generation:
            buffer.check_current(generation)
        if copy or dl_device is not None:
            _check_export((DLPACK_CUDA, self._device), copy, dl_device)
        if stream is None or (type(stream) is int and stream == -1):
            consumer = self._default_consumer
        else:
            held = buffer.ledger.holds.known.get(stream) if type(stream) is int else None  # (held: no driver query)
            consumer = held if held is not None and not held.thread else self._reader_stream(stream)
        capsule = self._capsule
        buffer.import_output(generation, consumer, capsule, escapes=self._escapes)
        self._consumer = consumer
        self._consumed = True
        return capsule

    def check_importable(self) -> None:
        """Raise if the capsule was consumed or its buffer has been reused or released."""
        if self._consumed:
            raise ExportError(*_CONSUMED)
        self._buffer.check_current(self._generation)

    def reader_done(self) -> None:
        """The host waited for the copy its import made (a helper that blocks): that stream reads no more."""
        self._buffer.reader_done(self._generation, self._consumer)

    # -- the copy helpers' imports -------------------------------------------------------------------------

    def _for_copy(self) -> SafeImage:
        """Checked importable and marked as read by a copy helper (no view leaves it); a helper that fails before
        its import calls :meth:`_copy_failed`."""
        self.check_importable()
        self._escapes = False
        return self

    def _copy_failed(self) -> None:
        """A copy helper raised: if it never imported the capsule, a later import may be a view again (the next
        call and the release must then wait for its stream, H7)."""
        if not self._consumed:
            self._escapes = True

    def torch(self, stream: Any = None, *, copy: bool = True) -> Any:
        """A torch copy (``copy=False``: a zero-copy view) issued on ``stream`` or torch's current stream of the
        output's device: see :meth:`SafeOutput.torch`. Does not block."""
        torch = _framework("torch", "out.torch()" if copy else "out.torch(copy=False)", "torch")
        if stream is not None:
            self._on_device(stream)
        if not copy:
            if stream is None:
                view = self._torch_import(torch)
            else:
                with torch.cuda.stream(stream):
                    view = self._torch_import(torch)
            self._buffer.tag_view(view, self._generation)  # (a view passed down a pipeline late is refused: H7)
            return view
        self._for_copy()
        try:
            if stream is None:
                return self._torch_import(torch).clone()
            with torch.cuda.stream(stream):
                return self._torch_import(torch).clone()
        except BaseException:
            self._copy_failed()
            raise

    def _torch_import(self, torch: Any) -> Any:
        """``torch.from_dlpack(image)``, with the capsule asked for on torch's current stream of the image's device
        here (a raw stream read, no ``torch.cuda.Stream`` object): what ``torch.from_dlpack`` does for a producer
        object, without the stream object it builds to learn the stream (a few microseconds a frame)."""
        handle = torch_current_stream_handle(torch, self._device)
        return torch.from_dlpack(self.__dlpack__(stream=handle or LEGACY_DLPACK))  # DLPack: 1 names stream 0

    def cupy(self, stream: Any = None) -> Any:
        """A CuPy copy issued on ``stream`` or CuPy's current stream: see :meth:`SafeOutput.cupy`."""
        cupy = _framework("cupy", "out.cupy()", "cupy-cuda13")
        if stream is not None:
            self._on_device(stream)
        self._for_copy()
        try:
            if stream is None:
                return cupy.from_dlpack(self).copy()
            with stream:
                return cupy.from_dlpack(self).copy()
        except BaseException:
            self._copy_failed()
            raise

    def jax(self) -> Any:
        """A JAX copy: see :meth:`SafeOutput.jax`. Blocks the host until the copy is done."""
        jax = _framework("jax", "out.jax()", "jax")
        jnp = _framework("jax.numpy", "out.jax()", "jax")
        self._for_copy()
        try:
            view = jax.dlpack.from_dlpack(self, copy=False)
        except BaseException:
            self._copy_failed()
            raise
        out = jnp.array(view, copy=True)
        out.block_until_ready()
        self.reader_done()
        return out

    def numpy(self) -> Any:
        """A host copy (NumPy): see :meth:`SafeOutput.numpy`. Blocks the host until it is complete."""
        backend = self._buffer.ledger.resolved_backend()
        if backend.records_accesses:  # the model: its own import and host copy
            self._for_copy()
            model: Any = backend
            try:
                result = model.download(model.from_dlpack(self))
            except BaseException:
                self._copy_failed()
                raise
            self.reader_done()
            return result
        if _have_torch():
            result = self.torch().cpu().numpy()
        else:
            result = _framework("cupy", "out.numpy() on the GPU without torch", "cupy-cuda13").asnumpy(self.cupy())
        self.reader_done()
        return result

    def copy(self, stream: Any = None) -> Any:
        """A copy in the backend's own arrays, issued on ``stream`` (default: the current one): on the model a
        :class:`~streamsafe.sim.SimArray`, on a GPU a torch tensor (else a CuPy array). Does not block."""
        backend = self._buffer.ledger.resolved_backend()
        if not backend.records_accesses:
            return self.torch(stream) if _have_torch() else self.cupy(stream)
        model: Any = backend
        consumer = model.current_stream(self._device) if stream is None else stream_on_device(
            stream, self._device, backend, "consumer")
        self._for_copy()
        try:
            view = model.from_dlpack(self, stream=consumer)
        except BaseException:
            self._copy_failed()
            raise
        return model.copy(view, consumer)

    def __repr__(self) -> str:
        state = "consumed" if self._consumed else f"run #{self._generation}"
        return f"<streamsafe SafeImage cuda:{self._device} {state}>"


class SafeOutput(Unshareable):
    """The SDK's output with ``image`` a :class:`SafeImage`; so is the attribute the profile's
    :attr:`~streamsafe.profile.EffectProfile.output` names (``out.frame`` for ``output="frame"``: code written for the
    SDK gets the guarded output); other fields are the SDK output's.

    The copy helpers import once, copy on the given (or the framework's current) stream, and return an array the
    framework owns, which may outlive the effect."""

    _no_copy = "a SafeOutput cannot be copied: its image can be imported once; copy the data (out.torch(), out.copy())"
    _no_pickle = "a SafeOutput cannot be pickled: it points at GPU memory the SDK owns; pickle a copy (out.numpy())"

    __slots__ = ("raw", "image", "_attr")

    def __init__(self, raw: Any, image: SafeImage, attr: str | None = "image") -> None:
        self.raw = raw
        self.image = image
        self._attr = attr
        """The attribute of the SDK's result that holds the output (the profile's ``output``): it gives :attr:`image`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in SafeOutput.__slots__:
            raise AttributeError(name)
        if name == self._attr:
            return self.image
        return getattr(self.raw, name)

    def __repr__(self) -> str:
        return f"SafeOutput({type(self.raw).__name__}, image={self.image!r})"

    def record_stream(self, stream: Any) -> None:
        """Declare that a zero-copy view of this output is also read on ``stream``: see
        :meth:`SafeImage.record_stream`. Does not block the host."""
        self.image.record_stream(stream)

    def torch(self, stream: Any = None, *, copy: bool = True) -> Any:
        """A torch copy, issued on ``stream`` (a torch stream on the output's device) or torch's current stream
        there. Does not block. A stream of another device raises :class:`~streamsafe.errors.DeviceMismatchError`,
        before anything is imported.

        ``copy=False``: a zero-copy view instead, ordered on that stream exactly as ``torch.from_dlpack(out.image)``
        is, a few microseconds cheaper (torch builds no stream object to learn its current stream). Like any view
        of the SDK's buffer it is valid until the effect's next call, ``close()`` or resize (H7); the next call
        waits for that stream."""
        return self.image.torch(stream, copy=copy)

    def cupy(self, stream: Any = None) -> Any:
        """A CuPy copy, issued on ``stream`` (a CuPy stream on the output's device) or CuPy's current stream. Does
        not block. A stream of another device raises :class:`~streamsafe.errors.DeviceMismatchError`, before
        anything is imported."""
        return self.image.cupy(stream)

    def jax(self) -> Any:
        """A JAX copy: the vendor's documented recipe with JAX's own stream fenced instead of a device sync.

        Zero-copy import (JAX passes its stream to ``__dlpack__``), then ``jnp.array(copy=True)`` and
        ``block_until_ready()``. Blocks the host until the copy is done."""
        return self.image.jax()

    def numpy(self) -> Any:
        """A host copy (NumPy). Blocks the host until it is complete; the copy is ordered after the SDK's writes,
        and the effect's next call and release after the copy."""
        return self.image.numpy()

    def copy(self, stream: Any = None) -> Any:
        """A copy in the backend's own arrays, issued on ``stream`` (default: the current one): on the model a
        :class:`~streamsafe.sim.SimArray`, on a GPU a torch tensor (else a CuPy array). Does not block."""
        return self.image.copy(stream)


class SafeFrame(_BufferView):
    """One frame a guarded decoder handed out, in one buffer of the decoder's pool.

    A DLPack producer that takes the consumer's stream, like the SDK's frame: each import on a stream makes it a
    reader of the buffer, so the decoder's stream waits for it on the device before the decoder writes the buffer
    again. Importable any number of times until then; after, an import raises
    :class:`~streamsafe.errors.StaleOutputError`. Other attributes (``shape``, ``dtype``, ``timestamp``, ...) are
    the SDK frame's. Keeps the decoder alive (the buffer is the decoder's memory).

    A frame of planes (PyAV's NV12 frames: its profile's :attr:`~streamsafe.profile.PoolProfile.planes`) is imported
    plane by plane (:attr:`planes`, each a :class:`SafePlane`); its copy helpers join the planes row after row (NV12:
    ``(H * 3 // 2, W)`` ``uint8``, Y then the interleaved UV). A frame that holds its buffer (PyAV's: the decoder takes
    the buffer back only when the frame goes) is never rewritten: when it is dropped or :meth:`close`\\ d, its SDK frame
    is kept until every read streamsafe knows of is done, then let go (D7); a closed frame is stale."""

    _no_copy = "a SafeFrame cannot be copied: it points at a buffer the decoder reuses; copy the data (frame.torch(), frame.copy())"
    _no_pickle = "a SafeFrame cannot be pickled: it points at GPU memory the decoder owns; pickle a copy (frame.numpy())"

    __slots__ = ("raw", "_buffer", "_generation", "_device", "_default_consumer", "_owner", "_pool", "_planes_attr",
                 "_export_stream", "_finalizer", "__weakref__")

    def __init__(self, raw: Any, buffer: Buffer, generation: int, device: int, default_consumer: Stream, owner: Any,
                 pool: PoolLedger | None = None) -> None:
        self.raw = raw  # (the SDK's own frame: importing it directly orders nothing streamsafe knows of)
        self._buffer = buffer
        self._generation = generation
        self._device = device
        self._default_consumer = default_consumer
        self._owner = owner
        self._pool = pool
        profile = pool.profile if pool is not None else None
        self._planes_attr = profile.planes if profile is not None else None
        """The attribute of the SDK frame that holds its planes (``None``: the frame is one producer)."""
        self._export_stream = profile.export_stream if profile is not None else True
        """Whether the SDK's ``__dlpack__`` takes the consumer's stream (else it is asked with none)."""
        self._finalizer: Any = None
        if pool is not None and pool.frames_hold:
            # the SDK frame goes back when this one goes (or closes), once its readers are done: the ledger keeps it
            self._finalizer = weakref.finalize(self, pool.frame_dropped, raw, buffer)
            self._finalizer.atexit = False

    @property
    def stale(self) -> bool:
        """Whether the decoder has written this frame's buffer again (or freed it), or the frame was closed, since."""
        return self._generation != self._buffer.generation

    def check_importable(self) -> None:
        """Raise :class:`~streamsafe.errors.StaleOutputError` if the decoder has written the buffer since (or the frame
        was closed)."""
        fix = _HELD_FIX if self._finalizer is not None else _FRAME_FIX
        self._buffer.check_current(self._generation, "this decoded frame", fix, source="the decoder")

    @property
    def planes(self) -> tuple[SafePlane, ...]:
        """The frame's planes as guarded DLPack producers (PyAV's NV12: Y ``(H, W)`` and the interleaved UV
        ``(H/2, W/2, 2)``, each with the decoder's row pitch), ordered as the frame is. Raises ``AttributeError`` for
        a frame that is one producer itself (PyNvVideoCodec's)."""
        attr = self._planes_attr
        if attr is None:
            raise AttributeError(f"{type(self.raw).__name__} frames have no planes: the frame is one DLPack producer "
                                 "(torch.from_dlpack(frame), frame.torch())")
        if self.raw is None:  # (closed)
            self.check_importable()
        # (made at each access, never kept: a plane holds its frame, and a frame holding its planes would be a cycle
        # that only the garbage collector ends, late: the frame's buffer would go back to the decoder late)
        return tuple(SafePlane(self, i) for i in range(len(getattr(self.raw, attr))))

    def raw_plane(self, index: int) -> Any:
        """The SDK frame's own plane ``index`` (importing it directly orders nothing streamsafe knows of). Raises
        :class:`~streamsafe.errors.StaleOutputError` once the frame is closed, and :attr:`planes`' ``AttributeError``
        for a frame that is one producer itself (PyNvVideoCodec's)."""
        attr = self._planes_attr
        if attr is None:  # planes' own error (called, not read: __getattr__ would answer with the SDK frame's bare one)
            return type(self).planes.fget(self)  # type: ignore[attr-defined]
        if self.raw is None:
            self.check_importable()
        return getattr(self.raw, attr)[index]

    def close(self) -> None:
        """Give a frame that holds its buffer back to the decoder now instead of when the frame goes (D7): under
        ``auto``, ``event`` and ``async`` once events recorded now on every stream that read it complete (no host
        wait); under ``stream`` and ``device`` after a host wait. The frame (and any plane of it) is stale after.
        Does nothing for a frame the decoder rewrites by itself (PyNvVideoCodec's), nor twice."""
        finalizer = self._finalizer
        if finalizer is None or self._pool is None:
            return
        found = finalizer.detach()
        if found is not None:
            _, _, (raw, buffer), _ = found
            self.raw = None  # (the ledger keeps the SDK's frame until the reads are done, then lets it go)
            self._pool.frame_closed(raw, buffer)

    def __enter__(self) -> SafeFrame:
        return self

    def __exit__(self, *exc: object) -> None:
        """:meth:`close` the frame."""
        self.close()

    def cuda(self) -> Any:
        """The SDK frame's CUDA array interface views (``DecodedFrame.cuda()``): streamsafe does not see them read,
        so the framework's current stream at the next decode is taken to read them. Raises
        :class:`~streamsafe.errors.StaleOutputError` if the buffer was written again since."""
        self.check_importable()
        self._buffer.view_escaped(self._generation)
        return self.raw.cuda()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "planes":  # (the property raised AttributeError: its own message, not the SDK frame's)
            return SafeFrame.planes.fget(self)  # type: ignore[attr-defined]
        raw = self.raw
        if raw is None:  # (closed: its SDK frame went back to the decoder)
            self.check_importable()
        return getattr(raw, name)

    def __dlpack__(
        self, stream: Any = None, *, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A capsule of the frame for a consumer on ``stream`` (positional too, as the SDK's frame takes it; DLPack
        rules: ``None`` or 1 the legacy stream, 2 per-thread, else a stream pointer; ``-1``: the guard's consumer
        stream, with no synchronisation asked of the SDK). Records ``stream`` as a reader of the buffer (the
        decoder's next write waits for it on the device). Raises :class:`~streamsafe.errors.StaleOutputError` if
        the buffer was written again since, :class:`~streamsafe.errors.ExportError` for a frame of planes (import a
        plane). Does not block."""
        if copy or dl_device is not None:
            _check_export((DLPACK_CUDA, self._device), copy, dl_device)
        if self._planes_attr is not None:
            raise ExportError(
                f"a {type(self.raw).__name__} is {len(self.planes)} planes, not one array (NV12: Y, then the interleaved UV)",
                "Import a plane (torch.from_dlpack(frame.planes[0])), or copy the frame whole (frame.torch(): the planes "
                "row after row)",
            )
        return self.export(stream, escapes=True)[0]

    def export(self, stream: Any, *, escapes: bool, plane: int | None = None) -> tuple[Any, Stream]:
        """A capsule of the frame (of its plane ``plane``) imported on ``stream`` (as :meth:`__dlpack__` takes it),
        and the consumer stream it was ordered on; ``escapes``: the consumer keeps a zero-copy view (not a copy
        helper's). Does not block."""
        if self._generation != self._buffer.generation:
            self.check_importable()
        if type(stream) is int and stream == -1:
            consumer, raw_stream = self._default_consumer, -1
        else:
            raw_stream = LEGACY_DLPACK if stream is None or (type(stream) is int and stream == 0) else stream
            consumer = self._reader_stream(raw_stream)
            raw_stream = consumer.dlpack if not isinstance(raw_stream, int) else raw_stream
        source = self.raw if plane is None else self.raw_plane(plane)
        # (an SDK that takes no stream hands out complete frames, D1: the consumer needs no fence of its own)
        capsule = source.__dlpack__(stream=raw_stream) if self._export_stream else source.__dlpack__()
        self._import(consumer, capsule, escapes)
        return capsule, consumer

    def _copied(self, consumer: Stream) -> None:
        """A helper's copy was issued on ``consumer`` and reads the frame no more: the decoder's next write waits for
        an event recorded right after it, not for ``consumer``'s later work."""
        if self._pool is not None:
            self._pool.capture(self._buffer, self._generation, consumer)

    def _whole(self) -> tuple[int | None, ...]:
        """What a copy of the whole frame reads: the frame itself, or each of its planes."""
        return (None,) if self._planes_attr is None else tuple(range(len(self.planes)))

    def torch(self, stream: Any = None, *, copy: bool = True) -> Any:
        """A torch copy (``copy=False``: a zero-copy view, valid until the decoder writes the buffer again), issued
        on ``stream`` or torch's current stream; a frame of planes is copied into one tensor, its planes row after
        row. Does not block."""
        return self.torch_parts(self._whole(), stream, copy)

    def torch_parts(self, parts: tuple[int | None, ...], stream: Any, copy: bool) -> Any:
        """A torch copy of ``parts`` (the frame, a plane, or the planes joined), or a view of one. Does not block."""
        torch = _framework("torch", "frame.torch()", "torch")
        if stream is not None:
            self._on_device(stream)
            with torch.cuda.stream(stream):
                return self._torch(torch, copy, parts)
        return self._torch(torch, copy, parts)

    def _torch(self, torch: Any, copy: bool, parts: tuple[int | None, ...]) -> Any:
        handle = torch_current_stream_handle(torch, self._device) or LEGACY_DLPACK
        if len(parts) > 1 and not copy:
            raise ArgumentError("a frame of planes has no one zero-copy view: take a plane's, "
                                "frame.planes[0].torch(copy=False), or a copy of the whole frame, frame.torch()")
        views = []
        for part in parts:
            capsule, consumer = self.export(handle, escapes=not copy, plane=part)
            views.append(torch.from_dlpack(capsule))
        if not copy:
            self._buffer.tag_view(views[0], self._generation)
            return views[0]
        out = views[0].clone() if len(views) == 1 else torch.cat(_rows(views))
        self._copied(consumer)
        return out

    def copy(self, stream: Any = None) -> Any:
        """A copy in the backend's own arrays, issued on ``stream`` (default: the current one): on the model a
        :class:`~streamsafe.sim.SimArray`, on a GPU a torch tensor (else a CuPy array). Does not block."""
        return self.copy_parts(self._whole(), stream)

    def copy_parts(self, parts: tuple[int | None, ...], stream: Any) -> Any:
        """A copy of ``parts`` in the backend's own arrays (see :meth:`copy`). Does not block."""
        backend = self._buffer.ledger.resolved_backend()
        if not backend.records_accesses:
            return self.torch_parts(parts, stream, True) if _have_torch() else self.cupy_parts(parts, stream)
        model: Any = backend
        consumer = model.current_stream(self._device) if stream is None else stream_on_device(
            stream, self._device, backend, "consumer")
        views = []
        for part in parts:
            capsule, consumer = self.export(consumer.dlpack, escapes=False, plane=part)
            views.append(model.from_dlpack(capsule, stream=consumer))
        out = model.copy(views[0], consumer) if len(views) == 1 else _model_join(model, views, consumer)
        self._copied(consumer)
        return out

    def cupy(self, stream: Any = None) -> Any:
        """A CuPy copy, issued on ``stream`` or CuPy's current stream (a frame of planes: its planes row after row).
        Does not block."""
        return self.cupy_parts(self._whole(), stream)

    def cupy_parts(self, parts: tuple[int | None, ...], stream: Any) -> Any:
        """A CuPy copy of ``parts`` (see :meth:`cupy`). Does not block."""
        cupy = _framework("cupy", "frame.cupy()", "cupy-cuda13")
        if stream is not None:
            self._on_device(stream)
            with stream:
                return self._cupy(cupy, parts)
        return self._cupy(cupy, parts)

    def _cupy(self, cupy: Any, parts: tuple[int | None, ...]) -> Any:
        handle = cupy.cuda.get_current_stream().ptr or LEGACY_DLPACK
        views = []
        for part in parts:
            capsule, consumer = self.export(handle, escapes=False, plane=part)
            views.append(cupy.from_dlpack(capsule))
        out = views[0].copy() if len(views) == 1 else cupy.concatenate(_rows(views))
        self._copied(consumer)
        return out

    def jax(self) -> Any:
        """A JAX copy (imported on JAX's stream, copied, waited for; a frame of planes: its planes row after row,
        through a compact torch or CuPy copy, as JAX imports no row pitch). Blocks the host until the copy is done."""
        return self.jax_parts(self._whole())

    def jax_parts(self, parts: tuple[int | None, ...]) -> Any:
        """A JAX copy of ``parts`` (see :meth:`jax`). Blocks the host until the copy is done."""
        jax = _framework("jax", "frame.jax()", "jax")
        jnp = _framework("jax.numpy", "frame.jax()", "jax")
        if self._planes_attr is not None:
            # (a plane has the decoder's row pitch, and JAX imports compact arrays only: a compact copy first, on
            # torch's (or CuPy's) current stream, which JAX's import then waits for through DLPack)
            compact = self.torch_parts(parts, None, True) if _have_torch() else self.cupy_parts(parts, None)
            out = jnp.array(jax.dlpack.from_dlpack(compact, copy=False), copy=True)
            out.block_until_ready()
            return out
        views = [jax.dlpack.from_dlpack(_Once(self, part), copy=False) for part in parts]
        out = jnp.array(views[0], copy=True) if len(views) == 1 else jnp.concatenate(_rows(views))
        out.block_until_ready()
        return out

    def numpy(self) -> Any:
        """A host copy (NumPy; a frame of planes: its planes row after row). Blocks the host until it is complete."""
        return self.numpy_parts(self._whole())

    def numpy_parts(self, parts: tuple[int | None, ...]) -> Any:
        """A host copy of ``parts`` (see :meth:`numpy`). Blocks the host until it is complete."""
        backend = self._buffer.ledger.resolved_backend()
        if backend.records_accesses:  # the model: its own import and host copy
            model: Any = backend
            consumer = model.current_stream(self._device)
            if len(parts) == 1:
                result = model.download(model.from_dlpack(self.export(consumer.dlpack, escapes=False, plane=parts[0])[0]),
                                        consumer)
            else:
                result = model.download(self.copy_parts(parts, consumer), consumer)
            self._buffer.reader_done(self._generation, consumer)
            return result
        if _have_torch():
            return self.torch_parts(parts, None, True).cpu().numpy()
        return _framework("cupy", "frame.numpy() on the GPU without torch", "cupy-cuda13").asnumpy(self.cupy_parts(parts, None))

    def __repr__(self) -> str:
        state = "stale" if self.stale else f"buffer write #{self._generation}"
        return f"<streamsafe SafeFrame of {self._buffer.name} cuda:{self._device} {state}>"


class SafePlane(Unshareable):
    """One plane of a guarded frame of planes (PyAV's NV12 Y or UV): a DLPack producer that takes the consumer's
    stream (``torch.from_dlpack(plane)``, ``cupy.from_dlpack(plane)``, ``jax.dlpack.from_dlpack(plane)`` work as
    they are), ordered as its frame is, with its frame's copy helpers for the plane alone. Other attributes
    (``width``, ``height``, ``line_size``, ...) are the SDK plane's. Keeps its frame alive."""

    _no_copy = "a SafePlane cannot be copied: it points at a buffer the decoder owns; copy the data (plane.torch())"
    _no_pickle = "a SafePlane cannot be pickled: it points at GPU memory the decoder owns; pickle a copy (plane.numpy())"

    __slots__ = ("frame", "index")

    def __init__(self, frame: SafeFrame, index: int) -> None:
        self.frame = frame
        self.index = index

    @property
    def raw(self) -> Any:
        """The SDK's own plane (importing it directly orders nothing streamsafe knows of)."""
        return self.frame.raw_plane(self.index)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.raw, name)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.frame.__dlpack_device__()

    @property
    def memory_backend(self) -> Any:
        """The backend whose memory the plane is (its frame's)."""
        return self.frame.memory_backend

    def __dlpack__(
        self, stream: Any = None, *, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A capsule of the plane for a consumer on ``stream`` (DLPack rules, as :meth:`SafeFrame.__dlpack__`): the
        consumer is recorded as a reader of the frame (the frame goes back to the decoder only after its reads).
        Raises :class:`~streamsafe.errors.StaleOutputError` for a closed frame's plane. Does not block."""
        if copy or dl_device is not None:
            _check_export(self.__dlpack_device__(), copy, dl_device)
        return self.frame.export(stream, escapes=True, plane=self.index)[0]

    def record_stream(self, stream: Any) -> None:
        """Declare that a view of the plane is also read on ``stream`` (see :meth:`SafeFrame.record_stream`)."""
        self.frame.record_stream(stream)

    def torch(self, stream: Any = None, *, copy: bool = True) -> Any:
        """A torch copy of the plane (``copy=False``: a zero-copy view), issued on ``stream`` or torch's current
        stream. Does not block."""
        return self.frame.torch_parts((self.index,), stream, copy)

    def cupy(self, stream: Any = None) -> Any:
        """A CuPy copy of the plane, issued on ``stream`` or CuPy's current stream. Does not block."""
        return self.frame.cupy_parts((self.index,), stream)

    def copy(self, stream: Any = None) -> Any:
        """A copy of the plane in the backend's own arrays, issued on ``stream`` (default: current). Does not block."""
        return self.frame.copy_parts((self.index,), stream)

    def jax(self) -> Any:
        """A JAX copy of the plane. Blocks the host until the copy is done."""
        return self.frame.jax_parts((self.index,))

    def numpy(self) -> Any:
        """A host copy of the plane (NumPy). Blocks the host until it is complete."""
        return self.frame.numpy_parts((self.index,))

    def __repr__(self) -> str:
        return f"<streamsafe SafePlane {self.index} of {self.frame!r}>"


def _rows(views: list[Any]) -> list[Any]:
    """Arrays of a frame's planes as rows of one width (NV12's UV ``(H/2, W/2, 2)`` as ``(H/2, W)``), to join."""
    rows = [v.reshape(v.shape[0], -1) for v in views]
    if len({r.shape[1] for r in rows}) > 1:
        raise ArgumentError(f"the frame's planes have rows of different widths ({[tuple(r.shape) for r in rows]}): they "
                            "do not join into one array; copy each plane (frame.planes[i].torch())")
    return rows


def _model_join(model: Any, views: list[Any], stream: Stream) -> Any:
    """On the model: one array of ``views`` (a frame's planes) row after row, copied by a kernel on ``stream``."""
    shapes = [(v.shape[0], math.prod(v.shape[1:])) for v in views]
    if len({w for _, w in shapes}) > 1:
        raise ArgumentError(f"the frame's planes have rows of different widths ({shapes}): they do not join into one "
                            "array; copy each plane (frame.planes[i].copy())")
    out = model.empty((sum(h for h, _ in shapes), shapes[0][1]), views[0].dtype, stream=stream, device=views[0].device)
    sources, dst = [v.buffer for v in views], out.buffer  # (pending work holds buffers, not arrays)

    def join() -> None:
        row = 0
        for src, (h, w) in zip(sources, shapes):
            dst.data[row:row + h] = src.data.reshape(h, w)
            row += h

    model.launch(stream, "join planes", join, reads=views, writes=[out])
    return out


_FRAME_FIX = (
    "The decoder has written this frame's buffer again since (the next batch of the same size, the call after next "
    "for decoder[i], the next call for a ThreadedDecoder, or a new source). Copy a frame you keep (frame.torch(), "
    "frame.cupy()) before the decoder's next call"
)
_HELD_FIX = (
    "The frame was closed (frame.close()), which gave its buffer back to the decoder. Copy what you keep (frame.torch(), "
    "frame.planes[0].torch()) before you close it, or keep the frame open while you read it"
)


class _Once:
    """A frame (or one plane of it) as a one-import producer (what JAX's ``from_dlpack`` wants), that does not escape."""

    __slots__ = ("frame", "plane")

    def __init__(self, frame: SafeFrame, plane: int | None = None) -> None:
        self.frame = frame
        self.plane = plane

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.frame.__dlpack_device__()

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        return self.frame.export(stream, escapes=False, plane=self.plane)[0]


class JaxDLPackAdapter:
    """The vendor's documented adapter for JAX >= 0.7.2, with the whole producer protocol.

    Wraps a raw capsule (e.g. ``result.image`` from the SDK); that orders nothing, so use it after the SDK's work is
    complete. Given a contract's ``out.image`` (inside ``with stream_contract(...)`` the documented code passes
    exactly that), it forwards JAX's stream to it, so the import is fenced. Handed out once; then
    :class:`~streamsafe.errors.ExportError` (a ``BufferError``). Never blocks the host; it orders exactly what the
    wrapped object's ``__dlpack__`` orders."""

    def __init__(self, capsule: Any, device_id: int | None = None) -> None:
        """``device_id``: the CUDA device the capsule's memory is on. A contract's output knows its own (then a
        different ``device_id`` raises :class:`DeviceMismatchError`); a raw capsule's is taken as given, 0 when not
        (the vendor's default)."""
        if isinstance(capsule, SafeOutput):
            capsule = capsule.image
        if isinstance(capsule, SafeImage):
            device = capsule.__dlpack_device__()[1]
            if device_id is not None and int(device_id) != device:
                raise DeviceMismatchError(
                    f"JaxDLPackAdapter(device_id={int(device_id)}): the output", capsule, device, int(device_id),
                    f"Leave device_id out (the output says its device) or pass device_id={device}.",
                )
            device_id = device
        self._capsule = capsule
        self._device_id = 0 if device_id is None else int(device_id)
        self._used = False

    def __dlpack__(
        self, *, stream: Any = None, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """The capsule, once. Orders JAX's ``stream`` after the SDK's writes when it wraps a contract's image (through
        its ``__dlpack__``); a raw capsule orders nothing. Does not block."""
        if self._used:
            raise ExportError(*_CONSUMED)
        _check_export(self.__dlpack_device__(), copy, dl_device)
        if isinstance(self._capsule, SafeImage):
            capsule = self._capsule.__dlpack__(stream=stream, max_version=max_version)
        else:
            capsule = self._capsule
        self._used = True
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self._device_id)


# -- how a guarded call's result leaves (the makers the contracts use, through streamsafe.profile) ---------------


def _effect_outputs(attr: str | None, wrap: Any, buffer: Buffer, device: int, profile: str = "?") -> Any:
    """How an effect's calls' results leave: ``output(raw, generation, frame, effect)`` gives the SDK's result with its
    capsule (the attribute ``attr`` of it; ``None``: the result itself) a :class:`SafeImage` producer, as a
    :class:`SafeOutput` (given to ``wrap(raw, output)`` when there is one). A result without ``attr``, or whose
    ``attr`` holds no DLPack capsule, raises :class:`~streamsafe.errors.ProfileError` (the ``profile``'s ``output``
    is wrong for it)."""
    named = [False]  # (whether a result's capsule was found named as DLPack's: checked once, then its type each call)
    if attr is None or wrap is not None:
        def output(raw: Any, generation: int, frame: Any, effect: Any) -> Any:
            capsule = raw if attr is None else getattr(raw, attr, _NONE)
            if type(capsule) is not CAPSULE or not named[0]:
                _check_capsule(profile, attr, raw, capsule, named)
            out = SafeOutput(raw, SafeImage(buffer, capsule, generation, device, frame.default_consumer, effect), attr)
            return out if wrap is None else wrap(raw, out)
    else:
        def output(raw: Any, generation: int, frame: Any, effect: Any) -> Any:
            capsule = getattr(raw, attr, _NONE)
            if type(capsule) is not CAPSULE or not named[0]:
                _check_capsule(profile, attr, raw, capsule, named)
            return SafeOutput(raw, SafeImage(buffer, capsule, generation, device, frame.default_consumer, effect), attr)
    return output


def _check_capsule(profile: str, attr: Any, raw: Any, capsule: Any, named: list[bool]) -> None:
    """Raise :class:`~streamsafe.errors.ProfileError` unless ``capsule`` is a DLPack capsule (the first ``PyCapsule``
    by its name too: ``named[0]`` is set then)."""
    if not is_capsule(capsule, named=not named[0]):
        raise _no_output(profile, attr, raw, capsule)
    if type(capsule) is CAPSULE:
        named[0] = True


_NONE = object()


def _no_output(profile: str, attr: Any, raw: Any, capsule: Any) -> Exception:
    """The error for a result without the attribute the profile's ``output`` names, or whose attribute (or itself, for
    ``output=None``) is no DLPack capsule (the call was made: it counts)."""
    attributes = list(vars(raw)) if hasattr(raw, "__dict__") else [n for n in dir(raw) if not n.startswith("_")]
    return no_output(profile, attr, type(raw), [n for n in attributes if not n.startswith("_")],
                     None if capsule is _NONE else type(capsule))


def _pool_output(raw: Any, frames: list[Any], made: list[tuple[Buffer, int]], device: int, default_consumer: Stream,
                 owner: Any, pool: PoolLedger) -> Any:
    """A pooled SDK's result with each of its ``frames`` (in order) a :class:`SafeFrame`, wherever it stands in lists
    and tuples (a tuple stays a tuple, a list a list)."""
    guarded = {id(f): SafeFrame(f, buffer, generation, device, default_consumer, owner, pool)
               for f, (buffer, generation) in zip(frames, made)}
    return _replace(raw, guarded)


def _replace(value: Any, guarded: dict[int, SafeFrame]) -> Any:
    found = guarded.get(id(value))
    if found is not None:
        return found
    if isinstance(value, list):
        return [_replace(v, guarded) for v in value]
    if type(value) is tuple:
        return tuple(_replace(v, guarded) for v in value)
    return value


set_output_maker("effect", _effect_outputs)
set_output_maker("pool", _pool_output)
