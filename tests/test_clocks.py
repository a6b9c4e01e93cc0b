from __future__ import annotations

from streamsafe.sim.clocks import HOST, VectorClock, is_ordered_after


def test_join_is_pointwise_max_and_immutable() -> None:
    a = VectorClock({(0, 5): 2, HOST: 1})
    b = VectorClock({(0, 5): 1, (0, 6): 4})
    j = a.join(b)
    assert (j[(0, 5)], j[(0, 6)], j[HOST]) == (2, 4, 1)
    assert a[(0, 6)] == 0  # a unchanged
    assert j.covers(a) and j.covers(b) and not a.covers(b)


def test_is_ordered_after() -> None:
    c = VectorClock({(0, 5): 3})
    assert is_ordered_after(c, (0, 5), 3)
    assert not is_ordered_after(c, (0, 5), 4)
    assert not is_ordered_after(c, (0, 6), 1)


def test_advanced_and_equality() -> None:
    c = VectorClock().advanced((0, 5), 2)
    assert c == VectorClock({(0, 5): 2}) and hash(c) == hash(VectorClock({(0, 5): 2}))
    assert c.advanced((0, 5), 1)[(0, 5)] == 2
    assert "cuda:0/0x5:2" in repr(c)
