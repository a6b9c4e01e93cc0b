"""PoolContract: the guard of an SDK object whose calls write buffers of a pool (a video decoder).

The same three ways in as an effect's contract::

    with ss.stream_contract(decoder, stream) as c:     # decoder.get_batch_frames, decoder[i], ... guarded
        frames = decoder.get_batch_frames(8)           # SafeFrame each: a reader of its buffer at each import
        y = torch.from_dlpack(frames[0]).clone()       # the next decode waits for this stream on the device

``stream`` is the decoder's stream: the ``cuda_stream`` it was created with (``None``: what the decoder
says of itself, or the ``cuda_stream`` it was made with while its class was guarded, or what an earlier guard
declared; else its default, 0, the legacy stream, only assumed: then ``auto`` makes the host wait for the
readers, since a device wait could be on the wrong stream). Before each call that may write a buffer, that
stream waits on the device for every stream that imported a frame (D5); the decoder's own host wait then
covers them, so streamsafe adds no host wait. A frame whose buffer the decoder has written since raises
:class:`~streamsafe.errors.StaleOutputError` on import. :func:`new_contract` picks the contract an SDK
object's profile asks for (``stream_contract``, ``stream_safe`` and the class guard use it).
"""

from __future__ import annotations

import functools
from typing import Any, NoReturn

from . import guarding, hooks
from .backend import Backend, current_backend, require_backend
from .backend.naming import as_stream, stream_on_device
from .contract import StreamContract, contract_sinks
from .errors import ArgumentError, EffectStateError, NotAnEffectError, StreamsafeError
from .frames import restore_counters
from .guarding import GuardedBlocks, call_raw
from .interrupts import after_writes
from .ledger import new_stats
from .plan import FencePlan
from .pool import BufferPool, pool_of, pool_plan, waited_streams
from .profile import Profile, profile_of
from .strategy import Strategy, StrategyName, as_strategy
from .sharing import Unshareable
from .streams import LEGACY_HANDLE, Stream

__all__ = ["PoolContract", "new_contract", "default_pool_contract", "OPTIONS"]


OPTIONS = ("input_stream", "consumer_stream", "conversion_stream", "backend", "allow_none")
"""The keyword options a contract takes (a decoder's refuses an input and a conversion stream)."""


def new_contract(obj: Any, stream: Any = None, *, strategy: Strategy | StrategyName = "auto", **options: Any) -> Any:
    """The contract ``obj``'s profile asks for: a :class:`PoolContract` for a pooled SDK (a decoder), else a
    :class:`~streamsafe.StreamContract`. An unknown option raises :class:`~streamsafe.errors.ArgumentError`.
    Does not block."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ArgumentError(f"a contract has no option {unknown[0]!r}: its options are strategy= and {', '.join(OPTIONS)}")
    if obj is not None and _is_pool(obj):
        return PoolContract(obj, stream, strategy=strategy, **options)
    return StreamContract(obj, stream, strategy=strategy, **options)


def _is_pool(obj: Any) -> bool:
    try:
        return profile_of(obj).pool
    except NotAnEffectError:
        return False


class PoolContract(GuardedBlocks, Unshareable):
    """Fences one pooled SDK object's calls (see the module docstring). ``strategy``: ``auto``, ``event`` and
    ``async`` fence on the device; ``stream`` host-waits each reader, ``device`` the whole device, before a
    decode; ``none`` (with ``allow_none=True``) fences nothing. ``consumer_stream``: the stream an import that
    names none (``stream=-1``) reads on (default: the decoder's). Constructing one does not block."""

    _no_copy = "a PoolContract cannot be copied: it orders one decoder's buffers; make another for another decoder"
    _no_pickle = "a PoolContract cannot be pickled: it holds live CUDA streams and a decoder"

    def __init__(
        self,
        sdk: Any,
        stream: Any = None,
        strategy: Strategy | StrategyName = "auto",
        *,
        consumer_stream: Any = None,
        backend: Backend | None = None,
        allow_none: bool = False,
        input_stream: Any = None,
        conversion_stream: Any = None,
    ) -> None:
        self.profile: Profile = profile_of(sdk)
        """The SDK profile of the object (:mod:`streamsafe.profile`; a pool profile)."""
        if isinstance(sdk, type) or not self.profile.pool:
            what = f"the class {sdk.__qualname__}" if isinstance(sdk, type) else f"{sdk!r} ({type(sdk).__name__})"
            raise NotAnEffectError(
                f"PoolContract needs an SDK object whose calls write a pool of buffers (a PyNvVideoCodec SimpleDecoder or "
                f"ThreadedDecoder instance), got {what}. Make the decoder first; for an nvvfx effect use "
                "ss.StreamContract (ss.stream_contract picks the right one)"
            )
        self.strategy = as_strategy(strategy, allow_none=allow_none)
        self.effect_name = type(sdk).__name__
        for name, value in (("input_stream", input_stream), ("conversion_stream", conversion_stream)):
            if value is not None:
                raise ArgumentError(
                    f"{name}={value!r}: a {self.effect_name} takes no input and converts nothing on another stream; "
                    "declare only its stream (the cuda_stream it was created with) and, if you like, consumer_stream="
                )
        self._effect: Any = sdk
        self.device = self.profile.device_of(sdk)
        if backend is not None:
            require_backend(backend, "PoolContract(backend=...)")
        existing = pool_of(sdk, create=False)
        own_backend = getattr(sdk, "backend", None) or (existing.backend if existing else None)
        if backend is not None and own_backend is not None and backend is not own_backend:
            raise ArgumentError(
                f"backend={backend!r}: {self.effect_name} decodes on {own_backend!r}, and its frames are that backend's "
                "memory. Leave backend= out (the decoder's is used), or make the decoder on that backend"
            )
        self.backend: Backend = backend or own_backend or current_backend()
        dev, be = self.device, self.backend
        own = self.profile.stream_of(sdk)  # (what the decoder says, or was made with)
        said = None if own is None else as_stream(own or LEGACY_HANDLE, device=dev, backend=be)
        self.stream_known = True
        if stream is not None:
            self.stream: Stream = stream_on_device(stream, dev, be, "sdk")
            if said is not None and said != self.stream:
                raise ArgumentError(
                    f"stream {self.stream} is not {self.effect_name}'s stream ({said}): the decoder writes its frames on "
                    "the cuda_stream it was created with. Pass that stream, or none"
                )
        elif said is not None:
            self.stream = said
        elif existing is not None and existing.writer is not None and existing.writer_known:
            self.stream = existing.writer  # (a guard declared the decoder's stream before; it has not changed)
        else:
            self.stream = as_stream(LEGACY_HANDLE, device=dev, backend=be)  # the SDK's default, cuda_stream=0
            self.stream_known = False
        """:attr:`stream` is the decoder's stream (declared, said by the decoder, recorded when it was made, or
        declared to an earlier guard), rather than assumed to be its default (then ``auto`` waits on the host)."""
        self._consumer = None if consumer_stream is None else stream_on_device(consumer_stream, dev, be, "consumer")
        self._stream_objects = (stream, consumer_stream)  # (the streams the contract fences live as long as it)
        self.pool: BufferPool = existing or pool_of(sdk, self.backend, device=dev)  # type: ignore[assignment]
        if self.pool.backend is None:
            self.pool.backend = self.backend
        if self.stream_known or self.pool.writer is None:
            self.pool.writer, self.pool.writer_known = self.stream, self.stream_known
        self.plan: FencePlan = pool_plan(self.strategy, self.stream, writer_known=self.stream_known)
        """The plan of every call (a value you can print)."""
        self.stats = new_stats()
        """Counters: calls, device-side fences, host waits and device syncs streamsafe made, and calls in which
        the decoder made the host wait for its own stream (every call)."""
        self.closed = False
        self.guard_owner: Any = None
        self._tracked = guarding.install(type(sdk))
        for sink in contract_sinks:
            sink.add(self)

    @property
    def effect(self) -> Any:
        """The guarded SDK object."""
        return self._effect

    @property
    def generation(self) -> int:
        """The number of calls that wrote the pool's buffers (through any guard)."""
        return self.pool.calls

    def __getattr__(self, name: str) -> Any:
        profile = self.__dict__.get("profile")
        if profile is not None and (name in profile.calls or name in profile.releases):
            return functools.partial(self.call, name)
        raise AttributeError(f"{type(self).__name__} of {self.__dict__.get('effect_name', '?')} has no attribute {name!r}")

    def __getitem__(self, key: Any) -> Any:
        """``decoder[key]`` through the contract (see :meth:`call`)."""
        return self.call("__getitem__", key)

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``sdk.name(*args, **kwargs)`` with the fences: before a call that writes buffers, the SDK's stream
        waits for every reader (D5, on the device under ``event``); a releasing call first makes the host wait
        for them (D6). Returns the SDK's result with each frame a :class:`~streamsafe.SafeFrame`. Blocks the host
        only for a release, under ``stream``/``device``, and in the SDK's own wait."""
        if self.closed:
            self._refuse_closed(name)
        if name in self.profile.releases:
            return self._release(name, args, kwargs)
        if name not in self.profile.calls:
            raise ArgumentError(f"{name!r} is not a call of {self.profile.name}: its calls are {', '.join(self.profile.calls)}")
        pool, plan, stats = self.pool, self.plan, self.stats
        default_consumer = self._consumer or self.stream
        with pool.turns.using(name, False, pool):
            pool.plan = plan
            if self.stream_known or not pool.writer_known:
                pool.writer, pool.writer_known = self.stream, self.stream_known
            counted = dict(stats)
            fences = pool.before_call(plan)
            pool.apply(fences, stats)
            pool.wait_captured(plan, stats, waited_streams(fences))
            profile = self.profile
            returned = False
            try:
                raw = call_raw(self.effect, name, args, kwargs)
                returned = True
                keys = [profile.buffer_key(f) for f in profile.frames_of(raw)]
                if hooks.observers and not self.backend.records_accesses:
                    self._report_writes(keys)
                made = pool.after_call(self.effect, plan, keys, stats, default_consumer, prefetches=profile.prefetches)
            except BaseException as e:  # interrupted after it may have written, or refused (streamsafe.interrupts)
                if returned or after_writes(e, profile.errors_after_writes):  # a call, counted as such
                    pool.after_interrupted_call(self.effect, plan, stats, default_consumer)
                    stats["runs"] += 1
                    stats["sdk_waits"] += 1
                else:
                    restore_counters(stats, counted)  # (the SDK refused: the counters count calls; the waits stay queued)
                raise
            stats["runs"] += 1
            stats["sdk_waits"] += 1  # (D1: the decoder's own host wait, every call)
        wrap = self.profile.wrap
        return raw if wrap is None else wrap(raw, made, self.device, default_consumer, self.effect, pool)

    def _report_writes(self, keys: list[Any]) -> None:
        """Sanitize mode on a GPU: the SDK's writes of its buffers, which no kernel of streamsafe's shows, go to
        the observers (after the fences, which they saw), then its own host wait for its stream."""
        for o in hooks.observers:
            for key in keys:
                o.on_launch(self.stream, f"{self.effect_name} writes a decoded frame", [], [key], self.device)
            o.on_stream_synchronize(self.stream)

    def _release(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        pool = self.pool
        with pool.turns.using(name, False, pool):
            pool.apply(pool.release_fences(self.strategy), self.stats)
            try:
                return call_raw(self.effect, name, args, kwargs)
            finally:
                pool.released()  # (refused or not, the SDK may have freed its buffers on the way)

    def synchronize(self) -> None:
        """Block the host until every read of a frame streamsafe knows of is done. Frames stay valid."""
        pool = self.pool
        with pool.turns.using("synchronize", True, pool):
            pool.apply(pool.release_fences(self.strategy), self.stats)
            pool.waited()

    def close(self) -> None:
        """End the contract once every known read is done (blocks the host for them). The decoder itself stays
        usable (it has no close; ``ThreadedDecoder.end()`` is guarded as a release). Idempotent."""
        if not self.closed:
            self.synchronize()
            self.closed = True

    def _refuse_closed(self, call: str) -> NoReturn:
        raise EffectStateError(self.effect_name, call, "closed", "Make a new contract for the decoder.")

    # -- the guard (``with`` and the decorator), as an effect's contract ------------------------------------

    def _hold_effect_weakly(self) -> None:
        """(A class guard's contract: the pool keeps it; the decoder is the program's.)"""

    def enter_block(self, frame: Any) -> None:
        """Route the plain calls made by ``frame``'s code through this contract (what a guard block does on
        entry: :meth:`guarded`, ``with``, the decorator). Does not block."""
        if self.closed:
            self._refuse_closed("stream_contract")
        if not self._tracked:
            raise StreamsafeError(
                f"cannot guard plain {self.effect_name} calls: its class refuses new attributes. "
                "Call the contract instead: c.get_batch_frames(...), c[i]."
            )
        guarding.push(self.effect, self, frame)

    def leave_block(self, frame: Any, *, host_wait: bool) -> None:
        """End :meth:`enter_block` for ``frame``; with ``host_wait``, block the host as :meth:`synchronize`."""
        guarding.pop(self.effect, self, frame)
        if host_wait and not self.closed and self.strategy is not Strategy.NONE:
            self.synchronize()

    def __repr__(self) -> str:
        return f"PoolContract({self.effect_name}, strategy={self.strategy.value}, stream={self.stream}, backend={self.backend.name})"


def default_pool_contract(sdk: Any, strategy: Strategy | StrategyName, options: dict[str, Any], owner: Any) -> PoolContract:
    """The contract a class guard ``owner`` made for ``sdk`` (made at its first call). Does not block."""
    pool = pool_of(sdk, create=False)
    contract = pool.default_contract if pool is not None else None
    if contract is None or contract.closed or contract.guard_owner is not owner:
        contract = PoolContract(sdk, None, strategy=strategy, **options)
        contract.guard_owner = owner
        contract.pool.default_contract = contract
    return contract  # type: ignore[no-any-return]

