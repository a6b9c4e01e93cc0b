"""Fences as the backend issues them: one by one (:func:`apply_fences`), or bound once into a
:class:`FenceProgram` that a steady-state frame replays with no per-frame lookups."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import hooks
from .backend import Backend
from .plan import Fence
from .streams import issuable
from .streams import thread_token as _thread_token

__all__ = ["apply_fences", "FenceProgram", "ImportPrograms"]


def apply_fences(backend: Backend, device: int, fences: Iterable[Fence], stats: dict[str, int]) -> None:
    """Issue ``fences`` through ``backend``. Device waits do not block the host; host waits and
    device syncs do (one device sync at most per call). Another thread's per-thread default stream
    is fenced through the legacy stream (:func:`~streamsafe.streams.issuable`)."""
    synced = False
    nvtx = _NVTX if _NVTX is not None and not backend.records_accesses else None
    for fence in fences:
        action = fence.action
        if nvtx is not None and action in ("device-wait", "host-wait", "device-sync"):
            with nvtx.annotate(f"streamsafe {fence.hazard} {action}", domain="streamsafe"):
                synced = _apply_one(backend, device, fence, stats, synced)
            continue
        if action == "device-wait":  # the hot path, inline
            waiter, signaller = fence.waiter, fence.signaller
            if waiter.thread or signaller.thread:  # type: ignore[union-attr]
                waiter, signaller = issuable(waiter), issuable(signaller)  # type: ignore[arg-type]
            backend.fence(waiter, signaller)  # type: ignore[arg-type]
            stats["fences"] += 1
            stats[fence.hazard] = stats.get(fence.hazard, 0) + 1
        else:
            synced = _apply_one(backend, device, fence, stats, synced)


def _apply_one(backend: Backend, device: int, fence: Fence, stats: dict[str, int], synced: bool) -> bool:
    action = fence.action
    if action in ("device-wait", "host-wait") or (action == "device-sync" and not synced):
        stats[fence.hazard] = stats.get(fence.hazard, 0) + 1
    if action == "device-wait":
        backend.fence(issuable(fence.waiter), issuable(fence.signaller))  # type: ignore[arg-type]
        stats["fences"] += 1
    elif action == "host-wait":
        assert fence.signaller is not None
        event = backend.acquire_event(device)
        try:
            backend.record(event, issuable(fence.signaller))
            backend.synchronize_event(event)
        finally:
            backend.release_event(event)
        stats["host_waits"] += 1
    elif action == "device-sync" and not synced:
        backend.synchronize_device(device)
        stats["device_syncs"] += 1
        synced = True
    return synced


def _load_nvtx() -> Any:
    try:
        import nvtx

        return nvtx
    except ImportError:
        return None


_NVTX = _load_nvtx()


class FenceProgram:
    """A fixed list of fences, bound once to the backend's calls. Running it issues exactly those
    fences (device waits do not block the host; host waits and device syncs, if any, do) and
    adds the same counts to a stats dict as :func:`~streamsafe.ledger.apply_fences` would.

    A program that fences a per-thread default stream is bound for the thread that made it (handle
    2 names that thread's stream); run from another thread, it issues its fences one by one, each
    as that thread must (:func:`~streamsafe.streams.issuable`)."""

    __slots__ = ("fences", "plan", "counts_exactly", "_backend", "_device", "_bound", "_counts", "_thread", "__weakref__")

    def __init__(self, backend: Any, device: int, fences: tuple[Fence, ...], plan: Any = None, *, bind: bool = True) -> None:
        self.fences = fences
        self.plan = plan
        """The plan the fences came from, when the caller keys programs by plan."""
        self._backend = backend
        self._device = device
        self._bound: Callable[[], None] | None = None
        self._counts: tuple[tuple[str, int], ...] = ()
        self._thread: int | None = None
        """The thread the program is bound for, when it fences a per-thread default stream."""
        if any((f.waiter is not None and f.waiter.thread) or (f.signaller is not None and f.signaller.thread) for f in fences):
            self._thread = _thread_token()
        device_waits = all(f.action == "device-wait" for f in fences)
        if device_waits:
            counts: dict[str, int] = {"fences": len(fences)}
            for f in fences:
                counts[f.hazard] = counts.get(f.hazard, 0) + 1
            self._counts = tuple(counts.items()) if fences else ()
        bind_fences = getattr(backend, "bind_fences", None) if bind else None
        if fences and bind_fences is not None and device_waits:
            self._bound = bind_fences([(issuable(f.waiter), issuable(f.signaller)) for f in fences], self)  # type: ignore[arg-type]
        self.counts_exactly = device_waits
        """Whether :meth:`uncount` can take back what a run added to the counters (a program of device waits
        only; one with host waits or device syncs counts as :func:`apply_fences` does)."""

    def __call__(self, stats: dict[str, int]) -> None:
        bound = self._bound
        if bound is None or hooks.observers or (self._thread is not None and self._thread != _thread_token()):
            # (observers hear of each fence: one by one; so does another thread than the bound one)
            if self.fences:
                apply_fences(self._backend, self._device, self.fences, stats)
            return
        bound()
        for name, n in self._counts:
            stats[name] = stats.get(name, 0) + n

    def uncount(self, stats: dict[str, int]) -> None:
        """Take back from ``stats`` the counts one run of this program added (the call it fenced was
        refused): a hazard's count back at zero goes, as it was. Only where :attr:`counts_exactly`; the
        fences themselves stay issued."""
        for name, n in self._counts:
            left = stats.get(name, 0) - n
            if left or name == "fences":
                stats[name] = left
            else:
                stats.pop(name, None)

    def __bool__(self) -> bool:
        return bool(self.fences)

    def __repr__(self) -> str:
        how = "bound" if self._bound is not None else "applied one by one"
        return f"<FenceProgram {len(self.fences)} fence(s), {how}>"


class ImportPrograms:
    """The bound import fences of one ledger's outputs: a :class:`FenceProgram` per consumer stream, for the
    plan that wrote the output (made again when the plan changes; at most 64 kept)."""

    __slots__ = ("by_consumer", "backend_of", "device")

    def __init__(self, backend_of: Callable[[], Any], device: int) -> None:
        self.by_consumer: dict[Any, FenceProgram] = {}
        self.backend_of = backend_of
        self.device = device

    def get(self, plan: Any, consumer: Any) -> FenceProgram:
        """The program of an import of ``plan``'s output on ``consumer``. Issues nothing."""
        program = self.by_consumer.get(consumer)
        if program is None or program.plan is not plan:
            if len(self.by_consumer) > 64:
                self.by_consumer.clear()
            program = self.by_consumer[consumer] = FenceProgram(self.backend_of(), self.device, plan.import_fences(consumer), plan)
        return program
