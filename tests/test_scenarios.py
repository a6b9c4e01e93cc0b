"""Small named scenarios of the CUDA ordering model.

Each scenario runs twice: without its fence the model reports the race (naming both
accesses) and the adversarial schedule produces wrong data; with the fence there is
no report and the data is right under every scheduler.
"""

from __future__ import annotations

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.sim.backend import SimArray

SCHEDULERS = ["adversarial", "in-order", "random"]


def write(sim: ss.sim.SimBackend, stream: ss.Stream, arr: SimArray, value: float, name: str) -> None:
    sim.fill(arr, value, stream, name=name)


def add_one(sim: ss.sim.SimBackend, stream: ss.Stream, src: SimArray, dst: SimArray, name: str) -> None:
    sim.launch(stream, name, lambda: np.copyto(dst.buffer.data, src.buffer.data + 1), reads=[src], writes=[dst])


def race_names(sim: ss.sim.SimBackend) -> set[tuple[str, str]]:
    return {(r.first.op, r.second.op) for r in sim.races}


# -- chain: A -> B -> C ----------------------------------------------------------------------


def chain(sim: ss.sim.SimBackend, fenced: bool) -> np.ndarray:
    a, b, c = (sim.create_stream(non_blocking=True) for _ in range(3))
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, a, x, 1.0, "A writes x")
    sim.fence(b, a)
    add_one(sim, b, x, y, "B: y = x + 1")
    if fenced:
        sim.fence(c, b)
    return sim.download(y, c)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_chain_fenced_is_ordered(scheduler: str) -> None:
    sim = ss.sim.SimBackend(scheduler=scheduler, seed=3)
    assert np.array_equal(chain(sim, fenced=True), np.full(4, 2.0))
    assert sim.races == []


def test_chain_missing_fence_races_and_corrupts(sim: ss.sim.SimBackend) -> None:
    out = chain(sim, fenced=False)
    assert not np.array_equal(out, np.full(4, 2.0))
    assert race_names(sim) == {("B: y = x + 1", "download y")}


# -- branch: A -> B, A -> C --------------------------------------------------------------------


def branch(sim: ss.sim.SimBackend, fence_c: bool) -> tuple[np.ndarray, np.ndarray]:
    a, b, c = (sim.create_stream(non_blocking=True) for _ in range(3))
    x, yb, yc = sim.empty(4, name="x"), sim.empty(4, name="yb"), sim.empty(4, name="yc")
    write(sim, a, x, 5.0, "A writes x")
    sim.fence(b, a)
    if fence_c:
        sim.fence(c, a)
    add_one(sim, b, x, yb, "B reads x")
    add_one(sim, c, x, yc, "C reads x")
    sim.synchronize_device()
    return yb.numpy(), yc.numpy()


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_branch_fenced_both_readers_see_the_write(scheduler: str) -> None:
    sim = ss.sim.SimBackend(scheduler=scheduler, seed=1)
    yb, yc = branch(sim, fence_c=True)
    assert np.array_equal(yb, np.full(4, 6.0)) and np.array_equal(yc, np.full(4, 6.0))
    assert sim.races == []  # two readers of x do not race with each other


def test_branch_unfenced_reader_races(sim: ss.sim.SimBackend) -> None:
    yb, yc = branch(sim, fence_c=False)
    assert np.array_equal(yb, np.full(4, 6.0))
    assert not np.array_equal(yc, np.full(4, 6.0))
    assert race_names(sim) == {("A writes x", "C reads x")}


# -- join: B, C -> A ---------------------------------------------------------------------------


def join(sim: ss.sim.SimBackend, wait_for_c: bool) -> np.ndarray:
    a, b, c = (sim.create_stream(non_blocking=True) for _ in range(3))
    y1, y2, z = sim.empty(4, name="y1"), sim.empty(4, name="y2"), sim.empty(4, name="z")
    write(sim, b, y1, 1.0, "B writes y1")
    write(sim, c, y2, 2.0, "C writes y2")
    sim.fence(a, b)
    if wait_for_c:
        sim.fence(a, c)
    sim.launch(a, "A: z = y1 + y2", lambda: np.copyto(z.buffer.data, y1.buffer.data + y2.buffer.data), reads=[y1, y2], writes=[z])
    return sim.download(z, a)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_join_waits_for_both(scheduler: str) -> None:
    sim = ss.sim.SimBackend(scheduler=scheduler, seed=7)
    assert np.array_equal(join(sim, wait_for_c=True), np.full(4, 3.0))
    assert sim.races == []


def test_join_missing_one_wait_races(sim: ss.sim.SimBackend) -> None:
    assert not np.array_equal(join(sim, wait_for_c=False), np.full(4, 3.0))
    assert race_names(sim) == {("C writes y2", "A: z = y1 + y2")}


# -- event re-record: a wait sees the record that was latest when it was issued ------------------


def test_wait_issued_after_rerecord_sees_latest_record(sim: ss.sim.SimBackend) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    ev = sim.create_event()
    write(sim, a, x, 1.0, "A writes 1")
    sim.record(ev, a)
    write(sim, a, x, 2.0, "A writes 2")
    sim.record(ev, a)  # re-record: now covers both writes
    sim.wait(b, ev)
    add_one(sim, b, x, y, "B reads x")
    assert np.array_equal(sim.download(y, b), np.full(4, 3.0))
    assert sim.races == []


def test_wait_issued_before_rerecord_does_not_see_it(sim: ss.sim.SimBackend) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    ev = sim.create_event()
    write(sim, a, x, 1.0, "A writes 1")
    sim.record(ev, a)
    sim.wait(b, ev)  # captures the first record only
    write(sim, a, x, 2.0, "A writes 2")
    sim.record(ev, a)
    add_one(sim, b, x, y, "B reads x")
    out = sim.download(y, b)
    assert not np.array_equal(out, np.full(4, 3.0))
    assert race_names(sim) == {("A writes 2", "B reads x")}


def test_wait_on_never_recorded_event_orders_nothing(sim: ss.sim.SimBackend) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, a, x, 1.0, "A writes x")
    sim.wait(b, sim.create_event())
    add_one(sim, b, x, y, "B reads x")
    sim.synchronize_device()
    assert race_names(sim) == {("A writes x", "B reads x")}


# -- the legacy default stream ------------------------------------------------------------------


@pytest.mark.parametrize("writer_first", [True, False])
def test_legacy_stream_is_implicitly_ordered_with_blocking_stream(sim: ss.sim.SimBackend, writer_first: bool) -> None:
    blocking, legacy = sim.create_stream(non_blocking=False), sim.legacy_stream()
    w, r = (blocking, legacy) if writer_first else (legacy, blocking)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, w, x, 4.0, "write x")
    add_one(sim, r, x, y, "read x")
    assert np.array_equal(sim.download(y, r), np.full(4, 5.0))
    assert sim.races == []


@pytest.mark.parametrize("writer_is_legacy", [True, False])
def test_legacy_stream_is_not_ordered_with_non_blocking_stream(sim: ss.sim.SimBackend, writer_is_legacy: bool) -> None:
    nb, legacy = sim.create_stream(non_blocking=True), sim.legacy_stream()
    w, r = (legacy, nb) if writer_is_legacy else (nb, legacy)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, w, x, 4.0, "write x")
    add_one(sim, r, x, y, "read x")
    assert not np.array_equal(sim.download(y, r), np.full(4, 5.0))
    assert race_names(sim) == {("write x", "read x")}


def test_two_blocking_streams_are_not_ordered(sim: ss.sim.SimBackend) -> None:
    b1, b2 = sim.create_stream(), sim.create_stream()
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, b1, x, 4.0, "write x")
    add_one(sim, b2, x, y, "read x")
    sim.synchronize_device()
    assert race_names(sim) == {("write x", "read x")}


def test_legacy_stream_bridges_two_blocking_streams(sim: ss.sim.SimBackend) -> None:
    b1, b2, legacy = sim.create_stream(), sim.create_stream(), sim.legacy_stream()
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, b1, x, 4.0, "write x")
    sim.launch(legacy, "legacy no-op")  # waits for b1; b2 then waits for it
    add_one(sim, b2, x, y, "read x")
    assert np.array_equal(sim.download(y, b2), np.full(4, 5.0))
    assert sim.races == []


# -- the per-thread default stream --------------------------------------------------------------


def test_per_thread_stream_is_not_ordered_with_blocking_streams(sim: ss.sim.SimBackend) -> None:
    pt, blocking = sim.per_thread_stream(), sim.create_stream(non_blocking=False)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, pt, x, 4.0, "per-thread writes x")
    add_one(sim, blocking, x, y, "blocking reads x")
    assert not np.array_equal(sim.download(y, blocking), np.full(4, 5.0))
    assert race_names(sim) == {("per-thread writes x", "blocking reads x")}


def test_per_thread_stream_is_ordered_with_legacy_stream(sim: ss.sim.SimBackend) -> None:
    # CUDA runtime docs: the per-thread default stream synchronises with the legacy default stream.
    pt, legacy = sim.per_thread_stream(), sim.legacy_stream()
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, pt, x, 4.0, "per-thread writes x")
    add_one(sim, legacy, x, y, "legacy reads x")
    assert np.array_equal(sim.download(y, legacy), np.full(4, 5.0))
    assert sim.races == []


# -- host synchronisation as a fence -------------------------------------------------------------


@pytest.mark.parametrize("how", ["stream", "device", "event", "none"])
def test_host_sync_orders_later_work(sim: ss.sim.SimBackend, how: str) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, a, x, 8.0, "A writes x")
    if how == "stream":
        sim.synchronize_stream(a)
    elif how == "device":
        sim.synchronize_device()
    elif how == "event":
        ev = sim.create_event()
        sim.record(ev, a)
        sim.synchronize_event(ev)
    add_one(sim, b, x, y, "B reads x")
    out = sim.download(y, b)
    if how == "none":
        assert not np.array_equal(out, np.full(4, 9.0))
        assert race_names(sim) == {("A writes x", "B reads x")}
    else:
        assert np.array_equal(out, np.full(4, 9.0))
        assert sim.races == []


def test_event_query_true_is_a_host_fence() -> None:
    sim = ss.sim.SimBackend(scheduler="in-order")
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, a, x, 1.0, "A writes x")
    ev = sim.create_event()
    sim.record(ev, a)
    assert sim.query(ev)
    add_one(sim, b, x, y, "B reads x")
    sim.synchronize_device()
    assert sim.races == []


def test_event_query_is_false_while_work_is_pending(sim: ss.sim.SimBackend) -> None:
    a = sim.create_stream(non_blocking=True)
    x = sim.empty(4, name="x")
    write(sim, a, x, 1.0, "A writes x")
    ev = sim.create_event()
    sim.record(ev, a)
    assert not sim.query(ev)  # the adversarial scheduler runs nothing until the host waits
    sim.synchronize_event(ev)
    assert sim.query(ev)


# -- the two race shapes ----------------------------------------------------------------------------


def test_write_write_race_names_both_writes(sim: ss.sim.SimBackend) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x = sim.empty(4, name="x")
    write(sim, a, x, 1.0, "first writer")
    write(sim, b, x, 2.0, "second writer")
    sim.synchronize_device()
    [race] = sim.races
    assert (race.first.kind, race.second.kind) == ("write", "write")
    assert (race.first.op, race.second.op) == ("first writer", "second writer")
    text = str(race)
    assert "first writer" in text and "second writer" in text and "non-blocking" in text
    assert "record an event on" in text  # says how to fix it
    # the later write may land first: the result is the first writer's value
    assert np.array_equal(x.numpy(), np.full(4, 1.0))


def test_read_write_race_names_reader_and_writer(sim: ss.sim.SimBackend) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    sim.synchronize_device()
    write(sim, a, x, 1.0, "init")
    sim.synchronize_stream(a)
    add_one(sim, a, x, y, "reader")  # reads x on A
    write(sim, b, x, 9.0, "overwriter")  # overwrites x on B: write-after-read
    out = sim.download(y, a)
    assert not np.array_equal(out, np.full(4, 2.0))  # the reader saw the overwrite
    [race] = sim.races
    assert (race.first.op, race.first.kind, race.second.op, race.second.kind) == ("reader", "read", "overwriter", "write")


def test_write_after_read_fenced_is_clean(sim: ss.sim.SimBackend) -> None:
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x, y = sim.empty(4, name="x"), sim.empty(4, name="y")
    write(sim, a, x, 1.0, "init")
    add_one(sim, a, x, y, "reader")
    sim.fence(b, a)
    write(sim, b, x, 9.0, "overwriter")
    assert np.array_equal(sim.download(y, a), np.full(4, 2.0))
    assert sim.races == []


def test_on_race_raise_stops_at_the_racing_access() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial", on_race="raise")
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x = sim.empty(4, name="x")
    write(sim, a, x, 1.0, "w1")
    with pytest.raises(ss.errors.RaceError, match="w1") as info:
        write(sim, b, x, 2.0, "w2")
    assert info.value.races[0].second.op == "w2"


def test_host_free_races_with_pending_reader(sim: ss.sim.SimBackend) -> None:
    a = sim.create_stream(non_blocking=True)
    x = sim.array(np.ones(4), name="x")
    y = sim.copy(x, a, name="copy x")
    sim.free(x, name="close() frees x")
    out = sim.download(y, a)
    assert not np.array_equal(out, np.ones(4))
    assert race_names(sim) == {("copy x", "close() frees x")}


def test_verdict_does_not_depend_on_the_schedule() -> None:
    verdicts = []
    for scheduler in SCHEDULERS:
        sim = ss.sim.SimBackend(scheduler=scheduler, seed=11)
        join(sim, wait_for_c=False)
        verdicts.append(race_names(sim))
    assert verdicts[0] == verdicts[1] == verdicts[2] != set()
