"""A buffer's tags of the zero-copy views its copy helpers hand out (``out.torch(copy=False)``): by identity, held
weakly (:class:`streamsafe.identity.WeakIdentityMap`), each with the generation it shows. A tag makes a stale view passed on late an exact refusal
(``streamsafe.views.read_by``); it must never name another object, and must not keep its view alive."""

from __future__ import annotations

import gc
from typing import Any
import weakref

import pytest

import streamsafe as ss
from streamsafe.testing import VideoSuperRes


class _Elementwise:
    def __bool__(self) -> bool:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")


class View:
    """A framework's array object as far as a tag sees it: weakly referenceable, hashed by identity, and compared
    elementwise as torch compares tensors (``view == view`` is an array, whose truth raises)."""

    def __eq__(self, other: object) -> Any:
        return _Elementwise()

    __hash__ = object.__hash__


def buffer() -> ss.buffers.Buffer:
    sim = ss.sim.SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 32, 32
    sr.load()
    return ss.StreamContract(sr, sim.create_stream(non_blocking=True)).ledger.output


def test_a_tag_names_its_view_and_no_other_object() -> None:
    """(A weak-keyed dictionary asked ``view == view`` of a tagged torch view and raised RuntimeError: a view of one
    effect passed to another guarded call failed so.)"""
    b = buffer()
    a, other = View(), View()
    b.tag_view(a, 3)
    assert b.tagged_generation(a) == 3
    assert b.tagged_generation(other) is None
    b.tag_view(a, 4)  # (the same view tagged again: the newer generation)
    assert b.tagged_generation(a) == 4


def test_a_tag_keeps_no_view_alive_and_a_recycled_address_is_not_tagged() -> None:
    b = buffer()
    a = View()
    b.tag_view(a, 1)
    ident, alive = id(a), weakref.ref(a)
    del a
    gc.collect()
    assert alive() is None, "the tag kept its view alive"
    reused = []
    for _ in range(1000):  # (CPython hands freed memory out again: a new object gets the dead view's id)
        v = View()
        reused.append(v)
        if id(v) == ident:
            assert b.tagged_generation(v) is None, "a new object at a dead view's address read as tagged"
            return
    pytest.skip("no new object took the dead view's address in this run")


def test_a_view_that_cannot_be_weakly_referenced_is_not_tagged() -> None:
    b = buffer()
    b.tag_view(7, 1)  # (an int: no weak reference; the memory's address still tells for real views)
    assert b.tagged_generation(7) is None


def test_tags_of_dead_views_go_and_live_ones_stay() -> None:
    b = buffer()
    live = [View() for _ in range(10)]
    for i, v in enumerate(live):
        b.tag_view(v, i)
    for i in range(2000):  # views that die at once, as a pipeline's do
        b.tag_view(View(), 100 + i)
    assert b.tagged is not None and len(b.tagged) == len(live)
    assert [b.tagged_generation(v) for v in live] == list(range(10))


def test_two_threads_first_tags_of_a_buffer_both_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads tag a view each on a buffer that has no tags yet, both making its map at the same moment (forced
    here: each map's making waits for the other's, or half a second): both tags stay in the one map kept."""
    import threading

    from streamsafe import buffers
    from streamsafe.identity import WeakIdentityMap

    meet = threading.Barrier(2, timeout=0.5)

    class Meeting(WeakIdentityMap):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__()
            try:
                meet.wait()
            except threading.BrokenBarrierError:
                pass

    monkeypatch.setattr(buffers, "WeakIdentityMap", Meeting)
    b = buffer()
    mine, theirs = View(), View()
    other = threading.Thread(target=b.tag_view, args=(theirs, 1))
    other.start()
    b.tag_view(mine, 1)
    other.join(5)
    assert (b.tagged_generation(mine), b.tagged_generation(theirs)) == (1, 1)
