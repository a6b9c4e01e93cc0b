"""The model's legacy stream over many threads' per-thread streams (a thread-per-request program).

CUDA orders the legacy stream's next work after the earlier work of every blocking and per-thread
stream of its device, so a legacy operation in the model joins those streams' clocks. A stream with
no work since the legacy stream last learnt of its last operation adds nothing to that join: the
model leaves it out, so the thousandth request costs what the first did instead of joining a
thousand dead threads' streams (``benchmarks/model_threads.py`` measures it). These tests check that
leaving them out changes nothing the model says: the same races, data, clocks and execution order
as joining every stream, on random programs over several threads' streams; and that it is left out.
The argument needs every clock entry of a stream to come from that stream's own operations, so a
model refuses another model's events (a reviewer's counterexample waited on one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamsafe as ss
from streamsafe.sim import backend as sim_backend
from streamsafe.streams import StreamKind

N_BUFFERS = 3
N_EVENTS = 2
THREADS = (0, 101, 102, 103)  # 0: the test's own thread; the others act as threads with those tokens


def _every_peer(self: Any, state: Any) -> Iterable[Any]:
    return self._every_implicit_peer(state)  # type: ignore[no-any-return]


@contextmanager
def every_peer() -> Iterator[None]:
    saved = sim_backend.SimBackend._implicit_peers
    sim_backend.SimBackend._implicit_peers = _every_peer  # type: ignore[method-assign]
    try:
        yield
    finally:
        sim_backend.SimBackend._implicit_peers = saved  # type: ignore[method-assign]


@dataclass(frozen=True)
class Program:
    kinds: tuple[tuple[str, int], ...]  # (kind, acting thread) per stream
    steps: tuple[tuple, ...]


@st.composite
def programs(draw: st.DrawFn) -> Program:
    kinds = [("legacy", 0)]
    for _ in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["per-thread", "per-thread", "blocking", "non-blocking"]))
        kinds.append((kind, draw(st.sampled_from(THREADS)) if kind == "per-thread" else 0))
    n = len(kinds)
    stream, buf, event = st.integers(0, n - 1), st.integers(0, N_BUFFERS - 1), st.integers(0, N_EVENTS - 1)
    kernel = st.tuples(st.just("kernel"), stream, st.frozensets(buf, max_size=2), buf, st.integers(1, 9))
    step = st.one_of(
        kernel, kernel, kernel,
        st.tuples(st.just("kernel"), st.just(0), st.frozensets(buf, max_size=2), buf, st.integers(1, 9)),  # legacy work
        st.tuples(st.just("fence"), stream, stream),
        st.tuples(st.just("record"), event, stream),
        st.tuples(st.just("wait"), stream, event),
        st.tuples(st.just("sync_stream"), stream),
        st.tuples(st.just("sync_device")),
    )
    return Program(tuple(kinds), tuple(draw(st.lists(step, min_size=3, max_size=24))))


def run(program: Program, scheduler: Any) -> tuple[Any, ...]:
    """The program on a fresh model: the races, the data, every stream's and the host's clock, the order
    in which the operations ran."""
    sim = ss.sim.SimBackend(scheduler=scheduler)
    sim.trace = []
    streams: list[tuple[ss.Stream, int]] = []
    for kind, thread in program.kinds:
        if kind == "legacy":
            streams.append((sim.legacy_stream(), 0))
        elif kind == "per-thread":
            with sim.acting_as(thread):
                streams.append((sim.per_thread_stream(), thread))
        else:
            streams.append((sim.create_stream(non_blocking=kind == "non-blocking"), 0))
    bufs = [sim.array(np.full(2, float(i + 1)), name=f"b{i}") for i in range(N_BUFFERS)]
    events = [sim.create_event() for _ in range(N_EVENTS)]

    def on(i: int) -> Any:
        return sim.acting_as(streams[i][1])

    for i, step in enumerate(program.steps):
        if step[0] == "kernel":
            _, s, reads, dst, k = step
            srcs, out = [bufs[r] for r in sorted(reads)], bufs[dst]

            def body(srcs: list[Any] = srcs, out: Any = out, k: int = k) -> None:
                out.buffer.data[...] = sum((a.buffer.data for a in srcs), np.zeros(2)) + k

            with on(s):
                sim.launch(streams[s][0], f"k{i}", body, reads=srcs, writes=[out])
        elif step[0] == "fence":
            with on(step[1]):  # (the waiter's thread issues the wait; the signaller's record goes to its own)
                sim.fence(streams[step[1]][0], streams[step[2]][0])
        elif step[0] == "record":
            with on(step[2]):
                sim.record(events[step[1]], streams[step[2]][0])
        elif step[0] == "wait":
            with on(step[1]):
                sim.wait(streams[step[1]][0], events[step[2]])
        elif step[0] == "sync_stream":
            with on(step[1]):
                sim.synchronize_stream(streams[step[1]][0])
        elif step[0] == "sync_device":
            sim.synchronize_device()
    clocks = sorted((repr(st.key), repr(st.clock)) for states in sim._by_device.values() for st in states)
    sim.synchronize_device()
    verdict = sorted((r.buffer, r.first.op, r.first.kind, r.second.op, r.second.kind) for r in sim.races)
    order = [(t["name"], t["where"], t["issued"]) for t in sim.trace]
    return verdict, [b.numpy().tolist() for b in bufs], clocks, repr(sim._host_clock), order


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_leaving_out_streams_with_nothing_new_changes_nothing(program: Program) -> None:
    for make in (ss.sim.AdversarialScheduler, ss.sim.InOrderScheduler):
        now = run(program, make())
        with every_peer():
            before = run(program, make())
        assert now == before


def test_the_generator_makes_legacy_work_after_other_threads_work() -> None:
    """Guard: the programs above do exercise a legacy operation that finds a stream with nothing new."""
    found = []
    rule = sim_backend.SimBackend._implicit_peers

    def counting(self: Any, state: Any) -> Iterable[Any]:
        if state.stream.kind is StreamKind.LEGACY:
            found.append(len(_every_peer(self, state)) - len(rule(self, state)))  # type: ignore[arg-type]
        return rule(self, state)

    @settings(max_examples=100, deadline=None, database=None, derandomize=True)
    @given(program=programs())
    def probe(program: Program) -> None:
        run(program, ss.sim.AdversarialScheduler())

    sim_backend.SimBackend._implicit_peers = counting  # type: ignore[method-assign]
    try:
        probe()
    finally:
        sim_backend.SimBackend._implicit_peers = rule  # type: ignore[method-assign]
    assert sum(1 for d in found if d > 0) >= 20, found


def test_a_legacy_operation_joins_only_streams_with_new_work() -> None:
    """A thread-per-request program: 50 threads' per-thread streams, each with work, then legacy work
    that joins them all; the next legacy operation joins only the one stream that has worked since."""
    sim = ss.sim.SimBackend()
    x = sim.array(np.zeros(2), name="x")
    for token in range(1000, 1050):
        with sim.acting_as(token):
            sim.launch(sim.per_thread_stream(), "request", lambda: None, reads=[x])
    legacy = sim.legacy_stream()
    sim.launch(legacy, "first legacy work", lambda: None, writes=[x])  # (after every request's read: no race)
    state = sim._state(legacy)
    assert len(list(sim._implicit_peers(state))) == 0
    with sim.acting_as(1007):
        s = sim.per_thread_stream()
        sim.launch(s, "one more request", lambda: None, reads=[x])
    assert [o.stream for o in sim._implicit_peers(state)] == [s]
    assert len(list(_every_peer(sim, state))) == 50  # (what the rule before joined every time)
    sim.launch(legacy, "second legacy work", lambda: None, writes=[x])
    sim.synchronize_device()
    assert sim.races == []


@pytest.mark.parametrize("call", ["record", "wait", "query", "poll", "synchronize_event", "release_event"])
def test_another_models_event_is_refused_and_changes_nothing(call: str) -> None:
    """An event's clock counts its own model's operations, under keys every model shares (the legacy
    stream, the first created stream, a thread's per-thread stream): waited on in another model it would
    tell that model's legacy stream it had seen work it has not, and the legacy stream would then leave
    that stream out and run before its write (a reviewer's reproducer). Each call refuses it instead,
    with nothing issued."""
    a = ss.sim.SimBackend()
    sa = a.create_stream()
    for i in range(3):
        a.launch(sa, f"a{i}", None)
    foreign = a.create_event()
    a.record(foreign, sa)
    b = ss.sim.SimBackend(scheduler=ss.sim.AdversarialScheduler())
    sb = b.create_stream()
    assert sb.key == sa.key  # (the keys that collide)
    legacy = b.legacy_stream()
    before = (b._state(legacy).seq, b._state(sb).seq, repr(b._host_clock))
    calls = {
        "record": lambda: b.record(foreign, sb),
        "wait": lambda: b.wait(legacy, foreign),
        "query": lambda: b.query(foreign),
        "poll": lambda: b.poll(foreign),
        "synchronize_event": lambda: b.synchronize_event(foreign),
        "release_event": lambda: b.release_event(foreign),
    }
    with pytest.raises(ss.errors.ArgumentError, match=rf"{call}: SimEvent.* is not an event of this SimBackend \(another model made it\).*"
                                         r"create_event\(\) or acquire_event\(\)"):
        calls[call]()
    assert (b._state(legacy).seq, b._state(sb).seq, repr(b._host_clock)) == before
    # the program the reviewer wrote, with b's own event: the legacy read runs after the write
    x = b.array(np.zeros(2), name="x")
    own = b.create_event()
    b.record(own, sb)
    b.wait(legacy, own)
    b.launch(sb, "write x", lambda: x.buffer.data.fill(7.0), writes=[x])
    out = np.zeros(2)
    b.launch(legacy, "read x", lambda: np.copyto(out, x.buffer.data), reads=[x])
    b.synchronize_device()
    assert out.tolist() == [7.0, 7.0] and b.races == []


def test_a_hand_made_event_is_refused() -> None:
    sim = ss.sim.SimBackend()
    with pytest.raises(ValueError, match=r"is not an event of this SimBackend \(no model made it\)"):
        sim.wait(sim.legacy_stream(), sim_backend.SimEvent(0))
