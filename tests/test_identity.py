"""What streamsafe keeps per SDK object, and per view, is the object's own: found by identity, held weakly.

A weak-keyed dictionary finds its keys by ``==``: two SDK objects that compare equal (a value object, a frozen
dataclass) shared one ledger (one effect's run made the other's output stale) and one class-guard contract; a
torch view's ``==`` is elementwise and raised."""

from __future__ import annotations

import contextlib
import gc
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.identity import WeakIdentityMap
from streamsafe.testing import VideoSuperRes


class EqualSuperRes(VideoSuperRes):
    """An SDK class whose objects compare equal (and hash alike) whatever their buffers: a value object."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return 1


def _effect(sim: ss.sim.SimBackend) -> EqualSuperRes:
    fx = EqualSuperRes(backend=sim)
    fx.output_width = fx.output_height = 32
    fx.load()
    return fx


def test_two_sdk_objects_that_compare_equal_have_a_ledger_each() -> None:
    sim = ss.sim.SimBackend()
    a, b = _effect(sim), _effect(sim)
    assert a == b
    s = sim.create_stream(non_blocking=True)
    first, second = ss.StreamContract(a, s, input_stream=s), ss.StreamContract(b, s, input_stream=s)
    assert first.ledger is not second.ledger
    x = sim.empty((3, 16, 16), np.float32)
    out = first.run(x)
    second.run(x)  # (the other object's run: this output is still the current one)
    sim.from_dlpack(out.image, stream=s)
    assert first.stats["runs"] == second.stats["runs"] == 1


def test_a_class_guard_makes_a_contract_for_each_of_two_equal_objects() -> None:
    sim = ss.sim.SimBackend()
    a, b = _effect(sim), _effect(sim)
    s = sim.create_stream(non_blocking=True)
    x = sim.empty((3, 16, 16), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with sim.use_stream(s), ss.guard(EqualSuperRes, backend=sim) as cg:
            out = a.run(x)
            b.run(x)
            sim.from_dlpack(out.image, stream=s)  # (a's output, not made stale by b's run)
            assert cg.contract_for(a) is not cg.contract_for(b)


class Elementwise:
    """Compared as torch compares tensors: ``x == x`` is an array, whose truth raises."""

    class _Array:
        def __bool__(self) -> bool:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")

    def __eq__(self, other: object) -> Any:
        return Elementwise._Array()

    __hash__ = object.__hash__


def test_the_map_finds_an_object_by_identity_never_by_equality() -> None:
    m: WeakIdentityMap[int] = WeakIdentityMap()
    a, b = Elementwise(), Elementwise()
    m[a] = 1
    assert m.get(a) == 1 and a in m
    assert m.get(b) is None and b not in m
    m[a] = 2
    assert m.get(a) == 2 and len(m) == 1
    assert m.pop(a) == 2 and m.get(a) is None
    with pytest.raises(KeyError):
        del m[a]


def test_an_entry_goes_with_its_object_and_a_new_object_at_its_id_has_none() -> None:
    class Thing:
        pass

    m: WeakIdentityMap[str] = WeakIdentityMap()
    live = Thing()
    m[live] = "live"
    for _ in range(1000):
        m[Thing()] = "dies at once"
    gc.collect()
    assert len(m) == 1 and list(m) == [live] and m.values() == ["live"]
    gone = Thing()
    m[gone] = "gone"
    ident = id(gone)
    del gone
    for _ in range(1000):  # (CPython hands freed memory out again: a new object gets the dead one's id)
        new = Thing()
        if id(new) == ident:
            assert m.get(new) is None and new not in m
            return
    pytest.skip("no new object took the dead object's id in this run")


def test_an_object_that_cannot_be_weakly_referenced_is_refused() -> None:
    m: WeakIdentityMap[int] = WeakIdentityMap()
    with pytest.raises(TypeError):
        m[7] = 1
    assert m.get(7) is None


def test_threads_setting_and_objects_dying_keep_every_live_entry() -> None:
    class Thing:
        pass

    m: WeakIdentityMap[int] = WeakIdentityMap()
    lost: list[int] = []

    def work(n: int) -> None:
        for _ in range(300):
            keep = [Thing() for _ in range(20)]
            for t in keep:
                m[t] = n
            for _ in range(20):
                m[Thing()] = -1  # (dies at once, its entry with it)
            lost.extend(n for t in keep if m.get(t) != n)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert lost == [] and len(m) == 0


def test_an_object_the_collector_finalizes_inside_a_class_guard_call_does_not_hang_it() -> None:
    """Objects in reference cycles whose ``__del__`` closes them: the collector may finalize one at an allocation
    inside the class guard's own bookkeeping for another object's first call, and that close goes through the same
    guard in the same thread (its lock is re-entrant; a plain lock hung the thread)."""

    class Closing(VideoSuperRes):
        def __del__(self) -> None:
            try:
                self.close()
            except Exception:  # noqa: BLE001,S110 (a finalizer's close: nothing to report to)
                pass

    sim = ss.sim.SimBackend()
    s = sim.create_stream(non_blocking=True)
    finished: list[bool] = []

    def program() -> None:
        threshold = gc.get_threshold()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with sim.use_stream(s), ss.guard(Closing, backend=sim):
                gc.set_threshold(1, 1, 1)
                try:
                    for _ in range(60):
                        fx = Closing(backend=sim)
                        fx.output_width = fx.output_height = 32
                        fx.load()
                        fx.me = fx  # type: ignore[attr-defined]  # (a cycle: only the collector frees it)
                        fx.run(sim.empty((3, 16, 16), np.float32))
                        del fx
                finally:
                    gc.set_threshold(*threshold)
        finished.append(True)

    t = threading.Thread(target=program, daemon=True)
    t.start()
    t.join(60)
    assert finished, "the program hung in the class guard"


class LutSuperRes(VideoSuperRes):
    """An SDK whose profile names an array-valued setting (a look-up table): NumPy compares it elementwise."""

    lut: Any = None


@contextlib.contextmanager
def _lut_pipeline(settings: tuple[str, ...]) -> Iterator[tuple[Any, Any, Any, Any, Any]]:
    """A :class:`LutSuperRes` (its table zeros) under a profile of these ``settings``, guarded by a contract: yields
    ``(sim, stream, effect, contract, input)``; the profile is unregistered afterwards."""
    import dataclasses

    from streamsafe import profile as P

    lut_profile = P.register(dataclasses.replace(P.profile_of(VideoSuperRes), name="test.LutSuperRes",
                                                 classes=(LutSuperRes,), settings=settings))
    try:
        sim = ss.sim.SimBackend()
        fx = LutSuperRes(backend=sim)
        fx.output_width = fx.output_height = 32
        fx.lut = np.zeros(4)
        fx.load()
        s = sim.create_stream(non_blocking=True)
        yield sim, s, fx, ss.StreamContract(fx, s, input_stream=s), sim.empty((3, 16, 16), np.float32)
    finally:
        P.unregister(lut_profile)


def test_a_setting_whose_value_is_an_array_is_compared_without_its_elementwise_eq() -> None:
    with _lut_pipeline((*ss.profile.profile_of(VideoSuperRes).settings, "lut")) as (sim, s, fx, c, x):
        for _ in range(3):
            c.run(x)  # (steady frames: the same table each call)
        c.configure(lut=np.ones(4))  # (before: "The truth value of an array with more than one element is ambiguous")
        c.run(x)
        fx.lut = np.full(4, 2.0)  # (a plain change, through the class's guard of its settings)
        out = c.run(x)
        sim.from_dlpack(out.image, stream=s)
        assert list(fx.lut) == [2.0] * 4 and c.stats["runs"] == 5


def test_threads_setting_and_popping_the_same_objects_leave_nothing_behind() -> None:
    """Sets and pops of one object from several threads at once are ordered: no value lost, and once the objects
    die the map holds nothing (not even the bookkeeping of a weak reference set twice at once)."""
    import sys

    class Thing:
        pass

    m: WeakIdentityMap[int] = WeakIdentityMap()
    things = [Thing() for _ in range(50)]

    def work(n: int) -> None:
        for i in range(400):
            for t in things:
                m[t] = n
                if i % 7 == 0:
                    m.pop(t)
                    m[t] = n

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert all(thing in m for thing in things) and len(m) == len(things)
    things.clear()
    gc.collect()
    assert len(m) == 0
    assert not m._entries and not m._keys  # noqa: SLF001 (the bookkeeping itself: a leak shows only there)


def test_a_profile_whose_one_setting_is_an_array_runs_every_call() -> None:
    """One setting: the effect's configuration is the array itself (not a tuple of settings). Its ``==`` is
    elementwise, so no kept frame matches it (as any value unequal to itself): each call is planned, none raises."""
    with _lut_pipeline(("lut",)) as (sim, s, fx, c, x):
        for _ in range(4):
            c.run(x)  # (before: "The truth value of an array ... is ambiguous" at the kept frame's check)
        fx.lut = np.ones(4)
        out = c.run(x)
        sim.from_dlpack(out.image, stream=s)
        assert c.stats["runs"] == 5
