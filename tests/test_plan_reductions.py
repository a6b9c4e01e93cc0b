"""The fences a plan leaves out because others in the same place already give them (``async``).

``async`` runs the SDK on a blocking shadow stream R; stream 0 converts after it and implicitly
waits for R. So, before a run, stream 0's wait for a reader that R waits for too adds nothing, and
a repeated wait of R on one stream adds nothing; after a run, the SDK stream's wait for stream 0
(not R) covers both the input read and the import on the SDK stream. These tests show the
reduced plan has no race on the model with the adversarial scheduler, that it places what the
hand-written recipe places (2 fences a frame), and, as controls, that the fences it keeps are the
ones carrying the order: drop them too and the model finds the race.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.plan import Fence, FencePlan
from streamsafe.streams import implicitly_ordered

from test_ordering_holes import data_of, import_copy, make_sr, sr_expected, verify, write


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial")


def pipeline(sim: ss.sim.SimBackend, *, frames: int = 6, other_consumer: bool = False) -> tuple[int, int, ss.StreamContract]:
    """Frames produced in place on a non-blocking S, run under ``async`` on S, each output copied on S
    (or on another stream). Returns (corrupt frames, races, contract)."""
    s = sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True) if other_consumer else s
    c = ss.StreamContract(make_sr(sim), s, strategy="async")
    surface = sim.empty((3, 16, 16), np.float32, name="decoder surface")
    copies = []
    with sim.use_stream(s):
        for i in range(frames):
            data = data_of(i)
            write(sim, surface, data, s)
            copies.append((import_copy(sim, c.run(surface), consumer), sr_expected(data)))
    return verify(sim, copies), len(sim.races), c


def test_async_places_the_hand_recipes_two_fences(sim: ss.sim.SimBackend) -> None:
    corrupt, races, c = pipeline(sim, frames=2)
    before = dict(c.stats)
    s = c.plan.sdk
    surface = sim.empty((3, 16, 16), np.float32)
    with sim.use_stream(s):
        for i in range(4):
            write(sim, surface, data_of(i), s)
            import_copy(sim, c.run(surface), s)
    assert (c.stats["fences"] - before["fences"]) / 4 == 2  # R waits on S before; S waits on stream 0 after
    assert (corrupt, races) == (0, 0)


@pytest.mark.parametrize("other_consumer", [False, True], ids=["consumer-on-S", "consumer-elsewhere"])
def test_reduced_async_plan_has_no_race(sim: ss.sim.SimBackend, other_consumer: bool) -> None:
    assert pipeline(sim, other_consumer=other_consumer)[:2] == (0, 0)


def test_before_run_batch_drops_what_the_run_streams_wait_gives(sim: ss.sim.SimBackend) -> None:
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), s, strategy="async")
    plan = c.plan
    r, legacy = plan.run_stream, plan.conversion
    assert legacy is not None and implicitly_ordered(r, legacy)
    reuse = plan.reuse_fences((s,), plan.sdk_streams, (s,))
    batch = plan.before_run([*reuse, *plan.at("before run")])
    assert {(f.waiter, f.signaller) for f in reuse} == {(r, s), (legacy, s)}
    assert [(f.waiter, f.signaller) for f in batch if f.action == "device-wait"] == [(r, s)]
    # where stream 0 does not follow the run stream, its wait stays
    e = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True), strategy="event")
    other = sim.create_stream(non_blocking=True)
    reuse = e.plan.reuse_fences((other,), e.plan.sdk_streams, ())
    assert e.plan.before_run(reuse) == tuple(reuse)


def _without(monkeypatch: pytest.MonkeyPatch, drop: Any) -> None:
    """Make every before-run batch leave out the fences ``drop(plan, fence)`` names, besides the reductions."""
    original = FencePlan.before_run

    def before_run(self: FencePlan, fences: Any) -> tuple[Fence, ...]:
        return tuple(f for f in original(self, fences) if not drop(self, f))

    monkeypatch.setattr(FencePlan, "before_run", before_run)


def test_control_without_the_run_streams_wait_the_conversion_races(sim: ss.sim.SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait that makes stream 0's own wait redundant is the run stream's: drop it and stream 0's
    conversion overwrites the output while the previous copy reads it."""
    _without(monkeypatch, lambda plan, f: f.action == "device-wait" and f.waiter == plan.run_stream)
    assert pipeline(sim)[1] > 0


def test_control_the_import_on_s_relies_on_the_wait_after_run(sim: ss.sim.SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The import on S places nothing because S waited for stream 0 after the run: leave that wait
    out (the import still places nothing) and the copy reads the output before the conversion wrote it."""
    original = FencePlan.at

    def at(self: FencePlan, when: Any) -> tuple[Fence, ...]:
        fences = original(self, when)
        return tuple(f for f in fences if f.action != "device-wait") if when == "after run" else fences

    monkeypatch.setattr(FencePlan, "at", at)
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), s, strategy="async", input_stream=s)
    data = data_of(0)
    surface = sim.empty((3, 16, 16), np.float32)
    with sim.use_stream(s):
        write(sim, surface, data, s)
        copy = import_copy(sim, c.run(surface), s)
    assert not c.plan.import_fences(s)
    assert len(sim.races) > 0 or verify(sim, [(copy, sr_expected(data))]) > 0
