"""The hand-written references: the fences an expert writes for a bench scenario's exact streams.

No :class:`~streamsafe.StreamContract`, no ledger, no plan: raw events, one per fence site,
created once and re-recorded every frame (a wait captures the record it sees), through
``cuda.bindings`` with the calls prebound on the GPU (:class:`RawFences`) or through the
model's ``record``/``wait`` on :class:`~streamsafe.sim.SimBackend` (:class:`SimFences`), so CI
checks that they are correct. This is the floor streamsafe is measured against (``x hand``).

The bench's streams: the user's stream **S** (a non-blocking torch side stream) produces
every input and, except for the JAX consumer, copies every output; **L** is stream 0, where the
SDK converts RGB8 output; **J** is JAX's own stream (the JAX consumer).

``hand`` (no host wait where the streams allow it):

* RGB8: the SDK runs on a *blocking* stream **B** with ``non_blocking=True`` (the documented
  async trick: stream 0 then waits for B on the device, H2). Before each run, B waits on S:
  the input S wrote (H1), and the copy S issued of the previous output, which the next
  conversion overwrites (H5: stream 0 waits for B's earlier work implicitly, and B waited on S).
  After each run, S waits on stream 0: the copy reads what stream 0 wrote (H3), and S's later
  work (a recycled input allocation, an input rewrite) comes after B's read of the input, which
  stream 0 waited for (H12), so no ``record_stream`` is needed. 2 fences per run. JAX: J waits on
  stream 0 at the import instead of S after the run; JAX's ``block_until_ready`` then makes the
  host wait for the copy, which came after B's read (H12) and before the next run (H5).
* RGB10A2 (no conversion stage): everything runs on S in order: ``non_blocking=True``, no fence
  (JAX: J waits on S at the import).

``hand-sync`` (the blocking recipe): the SDK on S with ``non_blocking=False``. The host waits
for S inside ``run()``, after inference: that closes H2 and H12, and, since S's copy of the
previous output was issued on S before, also H5 for the conversion that overwrites it. RGB8:
after each run S waits on stream 0 (H3; also the next inference overwrites the 8-bit result
stream 0 converts, H5). 1 fence per run. JAX: J waits on stream 0 at the import instead.

Each of these fences is needed: the bench's tests drop each in turn on the model and see a race.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .._dlpack import DLPACK_CUDA
from ..streams import LEGACY_HANDLE, PER_THREAD_HANDLE, Stream, StreamKind
from .harness import Hand

__all__ = ["FenceSites", "SimFences", "RawFences", "HandRunner", "HandImage", "own_method"]

FenceFn = Callable[[], None]


class FenceSites(Protocol):
    """Where a hand-written runner gets its fences and its blocking stream."""

    def site(self, waiter: Stream, signaller: Stream) -> FenceFn:
        """A prebound fence: later work on ``waiter`` waits for the work issued so far on ``signaller``."""
        ...

    def blocking_stream(self) -> Stream: ...

    def host_wait(self, stream: Stream) -> None: ...

    def close(self) -> None: ...


class SimFences:
    """Fence sites on the model: one event per site, re-recorded each time (``record`` + ``wait``)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def site(self, waiter: Stream, signaller: Stream) -> FenceFn:
        sim = self.sim
        event = sim.create_event(signaller.device)
        record, wait = sim.record, sim.wait

        def fence() -> None:
            record(event, signaller)
            wait(waiter, event)

        return fence

    def blocking_stream(self) -> Stream:
        return self.sim.create_stream(non_blocking=False)  # type: ignore[no-any-return]

    def host_wait(self, stream: Stream) -> None:
        self.sim.synchronize_stream(stream)

    def close(self) -> None:
        pass


class RawFences:
    """Fence sites on the driver: ``cuEventRecord`` + ``cuStreamWaitEvent`` on an event created once
    per site (timing disabled), with the stream handles and functions bound at creation.

    Create it on a thread where the device's primary context is current (torch has touched the
    device); a site on the legacy stream also needs that in the thread that calls it."""

    def __init__(self, device: int = 0) -> None:
        from cuda.bindings import driver

        self._d = driver
        self.device = device
        self._events: list[Any] = []
        self._blocking: list[Stream] = []

    def _check(self, result: Any, call: str) -> Any:
        err = result[0]
        if err != self._d.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{call} failed: {self._d.cuGetErrorName(err)[1].decode()}")
        return result[1] if len(result) > 1 else None

    def _cu(self, stream: Stream) -> Any:
        d = self._d
        if stream.handle == LEGACY_HANDLE:
            return d.CUstream(d.CU_STREAM_LEGACY)
        if stream.handle == PER_THREAD_HANDLE:
            return d.CUstream(d.CU_STREAM_PER_THREAD)
        return d.CUstream(stream.handle)

    def site(self, waiter: Stream, signaller: Stream) -> FenceFn:
        d = self._d
        event = self._check(d.cuEventCreate(int(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
        self._events.append(event)
        record, wait, ok = d.cuEventRecord, d.cuStreamWaitEvent, d.CUresult.CUDA_SUCCESS
        s, w = self._cu(signaller), self._cu(waiter)

        def fence() -> None:
            if record(event, s)[0] != ok or wait(w, event, 0)[0] != ok:
                raise RuntimeError(f"hand fence {waiter} <- {signaller} failed (cuEventRecord/cuStreamWaitEvent)")

        return fence

    def blocking_stream(self) -> Stream:
        """A blocking stream (``cuStreamCreate`` with flags 0), kept for the life of the process."""
        handle = self._check(self._d.cuStreamCreate(0), "cuStreamCreate")
        stream = Stream(self.device, int(handle), StreamKind.BLOCKING)
        self._blocking.append(stream)
        return stream

    def host_wait(self, stream: Stream) -> None:
        self._check(self._d.cuStreamSynchronize(self._cu(stream)), "cuStreamSynchronize")

    def close(self) -> None:
        for event in self._events:
            self._check(self._d.cuEventDestroy(event), "cuEventDestroy")
        self._events.clear()


def own_method(effect: Any, name: str) -> Any:
    """The effect's own ``name`` (an unbound function), past any dispatcher streamsafe put on its class
    for the rows that guard an instance: a program with hand-written fences pays no streamsafe code."""
    from ..calls import raw_method

    found = raw_method(type(effect), name)
    if found is None:
        raise AttributeError(f"{type(effect).__name__} has no {name}()")
    return found


def dlpack_stream(handle: int, device: int) -> Stream:
    """A consumer's DLPack ``stream=`` value as a :class:`Stream` (1 legacy, 2 per-thread, else a pointer)."""
    if handle in (0, LEGACY_HANDLE):
        return Stream(device, LEGACY_HANDLE, StreamKind.LEGACY)
    if handle == PER_THREAD_HANDLE:
        return Stream(device, PER_THREAD_HANDLE, StreamKind.PER_THREAD)
    return Stream(device, handle, StreamKind.NON_BLOCKING)  # the kind only matters for the default streams


class HandImage:
    """The SDK's raw capsule with ``__dlpack__``: the consumer's stream waits on the output's last
    writer first (a prebound fence per consumer stream). Importable once."""

    __slots__ = ("_capsule", "_runner", "_device")

    def __init__(self, capsule: Any, runner: HandRunner, device: int) -> None:
        self._capsule = capsule
        self._runner = runner
        self._device = device

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self._device)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("a DLPack capsule can be consumed once")
        if stream is None or stream == -1:
            self._runner.import_host_wait()  # no consumer stream to fence: make the host wait instead
        else:
            self._runner.import_fence(int(stream))
        return capsule


class HandRunner:
    """Runs the effect with the hand-written fences of ``mode`` (see the module docstring).

    ``conversion``: the output has an RGB8 conversion stage on stream 0. ``consumer_on_sdk``:
    the consumer copies on S (torch, CuPy, the model); else it imports on its own stream through
    :class:`HandImage` and the host waits for its copy (JAX)."""

    def __init__(
        self,
        effect: Any,
        stream: Stream,
        mode: Hand,
        sites: FenceSites,
        *,
        conversion: bool,
        legacy: Stream,
        consumer_on_sdk: bool = True,
    ) -> None:
        self.effect, self.stream, self.mode, self.sites = effect, stream, mode, sites
        self._run = own_method(effect, "run")
        self.device = stream.device
        self.consumer_on_sdk = consumer_on_sdk
        self.runs = self.fences = self.host_waits = 0
        self._import_sites: dict[int, FenceFn] = {}
        before: list[FenceFn] = []
        after: list[FenceFn] = []
        if conversion and mode is Hand.HAND:
            run = sites.blocking_stream()
            self.non_blocking = True
            before.append(sites.site(run, stream))
            if consumer_on_sdk:
                after.append(sites.site(stream, legacy))
        elif conversion:
            run = stream
            self.non_blocking = False
            if consumer_on_sdk:
                after.append(sites.site(stream, legacy))
        else:
            run = stream
            self.non_blocking = mode is Hand.HAND
        self.run_stream = run
        self.last_writer = legacy if conversion else run
        self._before, self._after = tuple(before), tuple(after)
        self._per_run = len(before) + len(after)

    def run(self, calls: list[dict[str, Any]], inputs: list[Any], consume: Callable[[Any], Any]) -> list[Any]:
        """One ``run()`` per entry of ``calls`` (its extra keywords), each output consumed before the next."""
        copies = []
        effect, ptr, nb = self.effect, self.run_stream.ptr, self.non_blocking
        run = self._run
        for kw in calls:
            for fence in self._before:
                fence()
            out = run(effect, *inputs, stream_ptr=ptr, non_blocking=nb, **kw)
            for fence in self._after:
                fence()
            self.runs += 1
            self.fences += self._per_run
            self.host_waits += not nb
            image = out.image if self.consumer_on_sdk else HandImage(out.image, self, self.device)
            copies.append(consume(image))
        return copies

    def import_fence(self, handle: int) -> None:
        """The consumer's stream (a DLPack ``stream=`` value) waits on the output's last writer."""
        fence = self._import_sites.get(handle)
        if fence is None:
            fence = self._import_sites[handle] = self.sites.site(dlpack_stream(handle, self.device), self.last_writer)
        fence()
        self.fences += 1

    def import_host_wait(self) -> None:
        """A consumer that names no stream: the host waits for the output's last writer."""
        self.sites.host_wait(self.last_writer)
        self.host_waits += 1

    def counters(self) -> dict[str, int]:
        return {"fences": self.fences, "host_waits": self.host_waits, "runs": self.runs}

    def close(self) -> None:
        """H6 by hand: the host waits for the copies on S (and the SDK's own work), then closes."""
        self.sites.host_wait(self.stream)
        self.effect.close()
        self.sites.close()
