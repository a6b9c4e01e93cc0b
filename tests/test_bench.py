"""The benchmark harness on CPU with an injected clock, and `streamsafe bench` on the model."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from streamsafe.bench import format_table, run_bench, to_json
from streamsafe.bench.report import write_png
from streamsafe.tools.cli import main
from streamsafe.strategy import Strategy


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakePipeline:
    """Each step advances the clock by ``cost`` seconds; records every call."""

    def __init__(self, name: str, clock: FakeClock, cost: float, log: list[tuple[str, str, int]], corrupt_every: int = 0) -> None:
        self.name, self.clock, self.cost, self.log = name, clock, cost, log
        self.steps = 0
        self.pending = 0
        self.corrupt_every = corrupt_every
        self.closed = False

    def step(self, frame: int) -> None:
        self.clock.t += self.cost
        self.steps += 1
        self.pending += 1
        self.log.append((self.name, "step", frame))

    def drain(self) -> list[float]:
        out = [self.cost * 1000] * self.pending
        self.pending = 0
        return out

    def settle(self) -> None:
        self.log.append((self.name, "settle", 0))

    def check(self) -> tuple[int, int]:
        n = self.steps - sum(1 for e in self.log if e[0] == self.name and e[1] == "checked")
        self.log += [(self.name, "checked", 0)] * n
        bad = n // self.corrupt_every if self.corrupt_every else 0
        return n, bad

    def counters(self) -> dict[str, int]:
        return {"fences": 2 * self.steps, "host_waits": self.steps, "runs": self.steps}

    def close(self) -> None:
        self.closed = True


def bench(costs: dict[str, float], **kw: Any) -> tuple[Any, list[tuple[str, str, int]], dict[str, FakePipeline]]:
    clock, log, made = FakeClock(), [], {}
    corrupt_every = kw.pop("corrupt_every", 0)

    def factory(scenario: str, strategy: Strategy) -> FakePipeline:
        pipe = FakePipeline(strategy.value, clock, costs[strategy.value], log, corrupt_every if strategy.value == "none" else 0)
        made[f"{scenario}/{strategy.value}"] = pipe
        return pipe

    args = dict(frames=6, warmup=2, block=3, clock=clock, cpu_clock=clock)
    args.update(kw)
    result = run_bench(factory, ["a"], list(costs), **args)
    return result, log, made


def test_exact_sample_counts_and_warmup_excluded() -> None:
    result, log, made = bench({"none": 0.001, "event": 0.002})
    for name in ("none", "event"):
        s = result.get("a", name)
        assert s.frames == 6 and len(s.block_wall_s) == 2 and len(s.latency_ms) == 6
        assert made[f"a/{name}"].steps == 8  # 2 warm-up + 6 timed
        assert s.runs == 6 and s.fences == 12 and s.host_waits == 6  # warm-up not counted
        assert s.fences_per_frame == 2.0 and s.host_waits_per_frame == 1.0
    timed_frames = [f for n, kind, f in log if n == "event" and kind == "step"]
    assert timed_frames == [0, 1, 2, 3, 4, 5, 6, 7]  # frame numbers continue after the warm-up


def test_blocks_are_interleaved() -> None:
    result, log, _ = bench({"none": 0.001, "event": 0.002, "device": 0.004})
    assert result.order == [("a", "none"), ("a", "event"), ("a", "device")] * 2
    # before each timed block every row settles (its unrelated load from earlier blocks finishes), not only its own
    assert [n for n, kind, _ in log if kind == "settle"] == ["none", "event", "device"] * 6
    steps = [n for n, kind, _ in log if kind == "step"]
    assert steps[6:] == ["none"] * 3 + ["event"] * 3 + ["device"] * 3 + ["none"] * 3 + ["event"] * 3 + ["device"] * 3


def test_fps_latency_cpu_and_ratios_from_the_injected_clock() -> None:
    result, _, _ = bench({"none": 0.001, "event": 0.002, "device": 0.004})
    assert result.get("a", "none").fps == pytest.approx(1000)
    assert result.get("a", "event").fps == pytest.approx(500)
    assert result.get("a", "device").cpu_ms_per_frame == pytest.approx(4.0)
    assert result.get("a", "event").latency(0.5) == pytest.approx(2.0)
    assert result.ratio("a", "event", "device") == pytest.approx(2.0)
    assert result.ratio("a", "event", "none") == pytest.approx(0.5)
    assert result.get("a", "event").fps_spread == pytest.approx(0.0)


def test_corruption_is_counted_and_shown() -> None:
    result, _, made = bench({"none": 0.001, "event": 0.002}, corrupt_every=2)
    assert result.get("a", "none").corrupt == 2 and result.get("a", "none").checked == 6  # one per checked block of 3
    assert result.get("a", "event").corrupt == 0
    assert "2/6" in format_table(result)
    assert all(p.closed for p in made.values())


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"frames": 0}, "frames must be a positive integer"),
        ({"frames": 7}, r"frames \(7\) must be a multiple of block \(3\)"),
        ({"block": 0}, "block must be a positive integer"),
        ({"warmup": -1}, "warmup must be a non-negative integer"),
    ],
)
def test_argument_checks(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bench({"none": 0.001}, **kw)


def test_unknown_or_repeated_strategies() -> None:
    with pytest.raises(ValueError, match="strategy 'fast' cannot be used"):
        bench({"fast": 0.001})
    with pytest.raises(ValueError, match="strategies is empty"):
        run_bench(lambda s, t: None, ["a"], [])  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="strategies repeat"):
        run_bench(lambda s, t: None, ["a"], ["none", "none"])  # type: ignore[arg-type,return-value]


def test_json_keeps_every_raw_sample() -> None:
    result, _, _ = bench({"none": 0.001, "event": 0.002})
    data = to_json(result)
    assert data["config"]["frames"] == 6 and data["timed"] is True
    cell = next(c for c in data["cells"] if c["strategy"] == "event")
    assert len(cell["samples"]["latency_ms"]) == 6 and len(cell["samples"]["block_wall_s"]) == 2
    assert cell["summary"]["ratio_to_none"] == pytest.approx(0.5)


def test_untimed_results_do_not_pretend() -> None:
    result, _, _ = bench({"none": 0.001, "event": 0.002}, timed=False)
    table = format_table(result)
    assert "SIMULATED" in table and "1000" not in table
    assert write_png(result, "/nonexistent/x.png") == "the simulated backend measures no time, so there is no frames/s chart"
    assert to_json(result)["cells"][0]["summary"]["fps"] is None


def test_bench_cli_on_the_model(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bench.json"
    assert main(["bench", "--backend", "sim", "--scenario", "a,f-vfg", "--frames", "4", "--block", "2",
                 "--quiet", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "SIMULATED" in text
    data = json.loads(out.read_text())
    cells = {(c["scenario"], c["strategy"]): c["summary"] for c in data["cells"]}
    assert cells[("a", "none")]["corrupt"] > 0  # a fast wrong strategy shows as wrong
    for (scenario, strategy), summary in cells.items():
        if strategy != "none":
            assert summary["corrupt"] == 0, (scenario, strategy)
    assert cells[("a", "device")]["fences_per_frame"] == 0 and cells[("a", "device")]["host_waits_per_frame"] > 0
    assert cells[("a", "async")]["host_waits_per_frame"] == 0  # async never makes the host wait
    assert cells[("f-vfg", "event")]["corrupt"] == 0


def test_bench_cli_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--backend", "sim", "--scenario", "z"]) == 2
    assert "unknown scenario 'z'" in capsys.readouterr().err
    assert main(["bench", "--backend", "sim", "--strategy", "fastest"]) == 2
    assert "unknown strategy 'fastest'" in capsys.readouterr().err
    assert main(["bench", "--backend", "sim", "--frames", "5", "--block", "2", "--quiet"]) == 2
    assert "--frames 5 is not a multiple of --block 2: every strategy runs whole blocks; pass --frames 6 or 4" in capsys.readouterr().err
    assert main(["bench", "--backend", "sim", "--block", "3", "--quiet"]) == 2  # the default frames named as such
    assert "--frames 8 (the default here) is not a multiple of --block 3" in capsys.readouterr().err


def test_cli_names_are_case_blind_and_repeats_run_once(capsys: pytest.CaptureFixture[str]) -> None:
    """``--strategy ALL`` was refused with a message that offered ``all``; ``Auto`` passed in hazards but not in
    bench; a repeated name ran twice (hazards, bench's scenarios) or failed with no fix (bench's strategies)."""
    assert main(["bench", "--backend", "sim", "--scenario", "A,a", "--strategy", "Auto,auto", "--quiet"]) == 0
    table = capsys.readouterr().out
    assert len([line for line in table.splitlines() if line.startswith("a ") and " auto " in line]) == 1
    assert main(["hazards", "--only", "H1", "--strategy", "ALL"]) == 0
    assert "Every fenced strategy (auto, event, async, stream, device)" in capsys.readouterr().out
    assert main(["hazards", "--only", "H1", "--strategy", "Auto,auto"]) == 0
    assert "Every fenced strategy (auto) copied all 8 frames" in capsys.readouterr().out  # (16: it ran twice)
    assert main(["hazards", "--only", "H1", "--strategy", "auto,ALL"]) == 0  # all, also in a list
    assert "Every fenced strategy (auto, event, async, stream, device)" in capsys.readouterr().out
    assert main(["bench", "--backend", "sim", "--strategy", "auto,", "--quiet"]) == 2
    assert "an empty strategy name in 'auto,'" in capsys.readouterr().err


def test_micro_benchmark_interleave_loop() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_timing.py"
    spec = importlib.util.spec_from_file_location("_timing", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls: list[str] = []
    syncs: list[int] = []
    samples = mod.interleave(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        blocks=3, per_block=2, warmup=1, sync=lambda: syncs.append(1),
    )
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3} and len(syncs) == 7
    with pytest.raises(ValueError, match="blocks and per_block must be >= 1"):
        mod.interleave({}, blocks=0, per_block=1, warmup=0, sync=lambda: None)


# -- hand-written references, the video server, and fence counts against the plan -----------------------

from streamsafe.bench import ServerPipeline, sim_factory  # noqa: E402
from streamsafe.bench.harness import Hand, as_row  # noqa: E402
from streamsafe.bench.pipelines import SCENARIOS, SimPipeline, scenario_by_key  # noqa: E402

SINGLE = [sc.key for sc in SCENARIOS if not sc.effects]
COUNTED = ("device-wait",)
PER_FRAME = ("before run", "after run", "at import")


def test_references_come_from_the_factory_and_x_hand_uses_the_faster() -> None:
    clock, log = FakeClock(), []
    costs = {"none": 0.001, "event": 0.004, "hand": 0.002, "hand-sync": 0.008}

    def factory(scenario: str, row: Any) -> FakePipeline:
        return FakePipeline(row.value, clock, costs[row.value], log)

    factory.references = ("hand", "hand-sync")  # type: ignore[attr-defined]
    result = run_bench(factory, ["a"], ["none", "event"], frames=6, warmup=2, block=3, clock=clock, cpu_clock=clock)
    assert result.strategies == ["none", "event", "hand", "hand-sync"]
    assert result.best_hand("a") == "hand"
    assert result.hand_ratio("a", "event") == pytest.approx(0.5)
    table = format_table(result)
    assert "x hand" in table and "x none" not in table and "none (unsafe)" in table
    cell = next(c for c in to_json(result)["cells"] if c["strategy"] == "event")["summary"]
    assert cell["ratio_to_hand"] == pytest.approx(0.5) and cell["hand_row"] == "hand"
    assert next(c for c in to_json(result)["cells"] if c["strategy"] == "none")["summary"]["unsafe"] is True
    assert run_bench(factory, ["a"], ["hand"], frames=3, warmup=0, block=3, clock=clock, cpu_clock=clock,
                     references=()).strategies == ["hand"]
    assert as_row("HAND") is Hand.HAND and as_row("auto") is Strategy.AUTO


class FakeBlockPipeline(FakePipeline):
    """Runs whole blocks itself, three frames per step, and reports worker CPU time."""

    frames_per_step = 3

    def run_block(self, first: int, count: int) -> float:
        for i in range(first, first + count):
            self.step(i)
        return 0.5


def test_block_pipelines_count_every_frame_and_worker_cpu() -> None:
    clock, log = FakeClock(), []
    result = run_bench(lambda s, r: FakeBlockPipeline(r.value, clock, 0.003, log), ["a"], ["event"], frames=6, warmup=2,
                       block=3, clock=clock, cpu_clock=clock)
    s = result.get("a", "event")
    assert s.frames == 18 and s.block_frames == [9, 9]
    assert s.fps == pytest.approx(1000)  # 9 frames per 9 ms block
    assert s.block_cpu_s == pytest.approx([0.009 + 0.5, 0.009 + 0.5])
    assert s.runs == 6  # effect calls, as the pipeline counts them


def _steady(pipe: Any, warm: int = 3, frames: int = 6) -> tuple[float, float]:
    for i in range(warm):
        pipe.step(i)
    c0 = pipe.counters()
    for i in range(warm, warm + frames):
        pipe.step(i)
    c1 = pipe.counters()
    runs = c1["runs"] - c0["runs"]
    return (c1["fences"] - c0["fences"]) / runs, (c1["host_waits"] - c0["host_waits"]) / runs


def _planned_fences(pipe: SimPipeline) -> int:
    """The device waits per frame the contract's printed plan lists for the pipeline's streams: at
    'before run', 'after run', 'at import' for the consumer, and 'before next run' for every stream
    that reads the output (the consumer; with JAX, whose recipe keeps a zero-copy view, also S)."""
    contract = pipe.runner.contract
    assert contract is not None
    S, C = pipe.stream, pipe.consumer
    plan = contract.plan_for(producer=S, sdk=S, consumer=C)
    if C == S:
        assert plan == contract.plan  # the contract's own (printed) plan
    printed = str(plan).splitlines()
    listed = [f for f in plan.fences if f.action in COUNTED and f.when in PER_FRAME]
    for f in listed:
        assert f"  {f}" in printed
    pattern = re.compile(r"^\s+H\d+\s+(before run|after run|at import)\s+.* waits on an event recorded on ")
    assert len(listed) == sum(1 for line in printed if pattern.match(line))
    next_run = [f for reader in dict.fromkeys((C, S)) for f in contract.plan_for(producer=S, sdk=S, consumer=reader).fences
                if f.action in COUNTED and f.when == "before next run"]
    # the next run places them in one batch with its own 'before run' fences, less those the batch already gives
    batch = plan.before_run([*next_run, *plan.at("before run")])
    return len(listed) - len([f for f in plan.at("before run") if f.action in COUNTED]) + len([f for f in batch if f.action in COUNTED])


@pytest.mark.parametrize("strategy", ["auto", "event", "async", "stream", "device"])
@pytest.mark.parametrize("scenario", SINGLE)
def test_fences_per_frame_match_the_plan(scenario: str, strategy: str) -> None:
    """A change that adds (or drops) a fence shows here: the bench's count per frame, in steady state,
    is what the contract's plan says for the scenario's streams."""
    pipe = sim_factory(scenario, Strategy(strategy))
    assert isinstance(pipe, SimPipeline)
    try:
        fences, _ = _steady(pipe)
        assert fences == _planned_fences(pipe), str(pipe.runner.contract.plan)  # type: ignore[union-attr]
    finally:
        pipe.close()


@pytest.mark.parametrize("strategy", [Strategy.EVENT, Strategy.ASYNC])
def test_fences_per_frame_match_the_plan_in_the_video_server(strategy: Strategy) -> None:
    pipe = sim_factory("server-2", strategy)
    assert isinstance(pipe, ServerPipeline)
    try:
        pipe.run_block(0, 3)
        c0 = pipe.counters()
        pipe.run_block(3, 5)
        c1 = pipe.counters()
        assert c1["runs"] - c0["runs"] == 10
        assert (c1["fences"] - c0["fences"]) / 10 == _planned_fences(pipe.lanes[0])
    finally:
        pipe.close()


def test_auto_in_the_video_server_uses_event_or_async_and_stays_correct() -> None:
    """auto picks per run: event while the lanes interleave, async for a lane running alone."""
    pipe = sim_factory("server-2", Strategy.AUTO)
    assert isinstance(pipe, ServerPipeline)
    try:
        pipe.run_block(0, 8)
        used = {lane.runner.contract.last_plan.strategy for lane in pipe.lanes}  # type: ignore[attr-defined]
        assert used <= {Strategy.EVENT, Strategy.ASYNC}
        pipe.drain()
        checked, corrupt = pipe.check()
        assert checked == 16 and corrupt == 0
        assert all(lane.sim.races == [] for lane in pipe.lanes)  # type: ignore[attr-defined]
    finally:
        pipe.close()


def _hand_expected(scenario: str, row: str) -> float:
    if not scenario_by_key(scenario).conversion:
        return 0
    return 2 if row == "hand" else 1


@pytest.mark.parametrize("row", ["hand", "hand-sync"])
@pytest.mark.parametrize("scenario", SINGLE)
def test_hand_rows_are_correct_on_the_model(scenario: str, row: str) -> None:
    pipe = sim_factory(scenario, row)
    assert isinstance(pipe, SimPipeline)
    fences, host_waits = _steady(pipe)
    pipe.drain()
    checked, corrupt = pipe.check()
    pipe.close()
    assert checked > 0 and corrupt == 0
    assert pipe.sim.races == []  # the happens-before model finds no unordered access either
    assert fences == _hand_expected(scenario, row)
    assert host_waits == (0 if row == "hand" else 1)


@pytest.mark.parametrize("row", ["hand", "hand-sync"])
@pytest.mark.parametrize("scenario", ["a", "d-jax", "f-vfg"])
def test_every_hand_fence_is_needed(scenario: str, row: str) -> None:
    """Minimal: without any one of its fences, the hand row races (and corrupts frames)."""
    probe = sim_factory(scenario, row)
    hand = probe.runner.hand  # type: ignore[attr-defined]
    sites = len(hand._before) + len(hand._after) + (0 if hand.consumer_on_sdk else 1)
    probe.close()
    assert sites == _hand_expected(scenario, row)
    for drop in range(sites):
        pipe = sim_factory(scenario, row)
        h = pipe.runner.hand  # type: ignore[attr-defined]
        fences = [*h._before, *h._after]
        if drop < len(fences):
            gone = fences[drop]
            h._before = tuple(f for f in h._before if f is not gone)
            h._after = tuple(f for f in h._after if f is not gone)
        else:
            h.import_fence = lambda handle: None
        for i in range(6):
            pipe.step(i)
        pipe.drain()
        _, corrupt = pipe.check()
        pipe.close()
        assert pipe.sim.races and corrupt > 0, (scenario, row, drop)  # type: ignore[attr-defined]


@pytest.mark.parametrize("row", ["hand", "hand-sync", "none"])
def test_reference_rows_run_no_streamsafe_code(row: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand rows (and the unsafe one) call the effect's own run(), not the dispatcher streamsafe puts on
    its class once any instance is guarded: a program with hand-written fences pays none of streamsafe's
    Python, so neither may the floor it is measured against."""
    from streamsafe import guarding

    guarded = sim_factory("a", "auto")  # guards an instance of the same emulated class: its dispatchers are on
    pipe = sim_factory("a", row)
    try:
        guarded.step(0)

        def refuse(effect: Any) -> None:
            raise AssertionError(f"a {row} row went through streamsafe's dispatcher")

        monkeypatch.setattr(guarding, "active_contract", refuse)
        for i in range(3):
            pipe.step(i)
        monkeypatch.undo()
        pipe.drain()
        checked, corrupt = pipe.check()
        assert checked > 0 and (corrupt > 0 if row == "none" else corrupt == 0)
    finally:
        pipe.close()
        guarded.close()


def test_none_is_the_unsafe_reference_on_the_model() -> None:
    pipe = sim_factory("a", "none")
    for i in range(6):
        pipe.step(i)
    pipe.drain()
    _, corrupt = pipe.check()
    pipe.close()
    assert corrupt > 0 and pipe.sim.races  # type: ignore[attr-defined]


@pytest.mark.parametrize("row", ["none", "auto", "event", "async", "device", "hand", "hand-sync"])
def test_video_server_on_the_model_runs_one_thread_per_effect(row: str) -> None:
    import threading

    pipe = sim_factory("server-4", row)
    assert isinstance(pipe, ServerPipeline) and pipe.frames_per_step == 4 and len(pipe.lanes) == 4
    seen: dict[int, set[str]] = {}
    for k, lane in enumerate(pipe.lanes):
        step = lane.step

        def traced(frame: int, k: int = k, step: Any = step) -> None:
            seen.setdefault(k, set()).add(threading.current_thread().name)
            step(frame)

        lane.step = traced
    try:
        cpu = pipe.run_block(0, 6)
        pipe.drain()
        checked, corrupt = pipe.check()
    finally:
        pipe.close()
    assert cpu >= 0 and checked == 24
    names = [next(iter(v)) for v in seen.values()]
    assert all(len(v) == 1 for v in seen.values()) and len(set(names)) == 4 and threading.main_thread().name not in names
    assert (corrupt > 0) if row == "none" else (corrupt == 0)
    assert pipe.lanes[0].sim is pipe.lanes[3].sim  # one device: stream 0 and device syncs are shared


def test_video_server_errors_reach_the_caller() -> None:
    pipe = sim_factory("server-2", "auto")
    assert isinstance(pipe, ServerPipeline)

    def boom(frame: int) -> None:
        raise RuntimeError("lane failed")

    pipe.lanes[1].step = boom
    try:
        with pytest.raises(RuntimeError, match="lane failed"):
            pipe.run_block(0, 2)
    finally:
        pipe.close()


@pytest.mark.parametrize("where", ["step", "thread_init"])
@pytest.mark.parametrize("group", ["server", "multi-gpu"])
def test_lane_group_errors_reach_the_caller_and_the_threads_end(group: str, where: str) -> None:
    """Both lane groups (the video server, the several-GPU bench) re-raise a lane's exception from its
    worker thread, raised in a step or in the thread's set-up, and stop their threads on close()."""
    from streamsafe.sim import SimBackend
    from streamsafe.bench.multi_gpu import SOAK_LANE, MultiGpuPipeline, SimLane
    from streamsafe.bench.pipelines import SimPipeline

    def boom(*args: Any) -> None:
        raise RuntimeError("lane failed")

    sim = SimBackend(devices=2, scheduler="adversarial")
    if group == "server":
        lanes: list[Any] = [SimPipeline(scenario_by_key("a"), "auto", sim=sim) for _ in range(2)]
    else:
        lanes = [SimLane(SOAK_LANE, "auto", sim, d) for d in (0, 1)]
    setattr(lanes[1], where, boom)
    pipe = ServerPipeline(lanes) if group == "server" else MultiGpuPipeline(lanes, [0, 1], ["auto", "auto"])
    workers = list(pipe._workers)
    try:
        with pytest.raises(RuntimeError, match="lane failed"):
            pipe.run_block(0, 2)
        with pytest.raises(RuntimeError, match="lane failed"):  # and again: the group stays usable to close
            pipe.run_block(2, 2)
    finally:
        pipe.close()
    assert len(workers) == 2 and not any(w.is_alive() for w in workers)


def test_bench_cli_on_the_model_has_hand_rows_and_the_video_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bench.json"
    assert main(["bench", "--backend", "sim", "--scenario", "a,e-rgb10,server-2", "--strategy", "none,auto,device",
                 "--frames", "4", "--block", "2", "--quiet", "--json", str(out)]) == 0
    cells = {(c["scenario"], c["strategy"]): c["summary"] for c in json.loads(out.read_text())["cells"]}
    for scenario in ("a", "e-rgb10", "server-2"):
        for row in ("hand", "hand-sync"):
            assert cells[(scenario, row)]["corrupt"] == 0 and cells[(scenario, row)]["checked"] > 0
    assert cells[("a", "hand")]["fences_per_frame"] == 2 and cells[("a", "hand")]["host_waits_per_frame"] == 0
    assert cells[("e-rgb10", "hand")]["fences_per_frame"] == 0
    assert cells[("server-2", "none")]["corrupt"] > 0 and cells[("server-2", "auto")]["checked"] == 8


@pytest.mark.parametrize("command", ["stub", "step --sim", "g-host --sim", "parts auto --blocks 2 --per-block 50"])
def test_the_profile_benchmark_runs_on_any_machine(command: str) -> None:
    """``benchmarks/profile.py`` in its CPU modes still finds what it times (the public API it drives is there)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, str(root / "benchmarks" / "profile.py"), *command.split()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()


def test_the_instruction_count_runs_the_frames_alone() -> None:
    """``profile.py stub --instructions`` counts two runs of ``--loop-only`` under callgrind: that mode runs the
    guarded frames (the contract's counters show them) and prints nothing of its own."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    script = str(root / "benchmarks" / "profile.py")
    code = "\n".join([
        "import runpy, sys, streamsafe",
        "sys.argv = ['profile.py', 'stub', 'auto', '--frames', '300', '--loop-only']",
        "made = []",
        "streamsafe.contract.contract_sinks.append(type('Sink', (), {'add': lambda self, c: made.append(c)})())",
        f"runpy.run_path({script!r}, run_name='__main__')",
        "print(made[0].stats['runs'])",
    ])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=root / "benchmarks",
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["2300"]  # 2,000 warm-up frames, then the 300 asked for


# -- a saved run, read again ------------------------------------------------------------------------------


def _saved_run() -> Any:
    """A timed run as a GPU gives it: a hand row, an unsafe row that corrupted frames, a server scenario."""
    from streamsafe.bench import BenchResult, Samples

    def cell(scenario: str, strategy: str, wall: float, corrupt: int = 0) -> Samples:
        return Samples(scenario, strategy, frames=40, block_wall_s=[0.4 * wall, 0.6 * wall], block_frames=[20, 20],
                       block_cpu_s=[0.3 * wall, 0.5 * wall], latency_ms=[1.0 + i / 40 for i in range(40)],
                       fences=80, host_waits=40 if strategy == "event" else 0, runs=40, checked=40, corrupt=corrupt)

    walls = {"none": 0.03, "auto": 0.045, "event": 0.05, "device": 0.09, "hand": 0.044, "hand-sync": 0.06}
    samples = {(sc, st): cell(sc, st, w * (2 if sc == "server-2" else 1), corrupt=7 if st == "none" else 0)
               for sc in ("a", "server-2") for st, w in walls.items()}
    return BenchResult(backend="cuda", timed=True, scenarios=["a", "server-2"], strategies=list(walls), frames=40,
                       warmup=20, block=20, samples=samples, order=list(samples), environment={"gpu": "NVIDIA H200"})


def test_a_saved_run_reads_back_as_it_was(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from streamsafe.bench import write_json
    from streamsafe.bench.report import read_json

    result = _saved_run()
    path = tmp_path / "run.json"
    write_json(result, str(path))
    again = read_json(str(path))
    assert format_table(again) == format_table(result) and to_json(again) == json.loads(path.read_text())
    assert again.hand_ratio("a", "auto") == pytest.approx(0.044 / 0.045) and again.best_hand("a") == "hand"


def test_bench_from_json_prints_and_charts_a_saved_run_without_running(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    from streamsafe.bench import write_json

    saved = tmp_path / "run.json"
    write_json(_saved_run(), str(saved))
    again = tmp_path / "again.json"
    assert main(["bench", "--from-json", str(saved), "--scenario", "server-2", "--strategy", "auto,hand",
                 "--json", str(again)]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[:2] for line in out.splitlines() if line.startswith(("a ", "server-2 "))]
    assert rows == [["server-2", "auto"], ["server-2", "hand"], ["server-2", "hand-sync"]], out  # (hand rows kept)
    assert {(c["scenario"], c["strategy"]) for c in json.loads(again.read_text())["cells"]} == {
        ("server-2", "auto"), ("server-2", "hand"), ("server-2", "hand-sync")}


@pytest.mark.parametrize("args,says", [
    (["--frames", "40"], "--frames set how a run goes, and --from-json runs nothing"),
    (["--backend", "cuda", "--block", "5"], "--block, --backend set how a run goes"),
    (["--scenario", "g-host"], "unknown scenario in that run 'g-host'; choose from a, server-2 or all"),
    (["--strategy", "stream"], "unknown strategy in that run 'stream'"),
])
def test_bench_from_json_refuses_what_it_cannot_do(tmp_path, capsys: pytest.CaptureFixture[str], args: list[str], says: str) -> None:  # type: ignore[no-untyped-def]
    from streamsafe.bench import write_json

    saved = tmp_path / "run.json"
    write_json(_saved_run(), str(saved))
    assert main(["bench", "--from-json", str(saved), *args]) == 2
    assert says in capsys.readouterr().err


def test_bench_from_json_names_a_file_that_is_no_run(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "other.json"
    other.write_text('{"cells": []}')
    assert main(["bench", "--from-json", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"{other} is not a file that `streamsafe bench --json` wrote: the file has no 'config'" in err
    assert "give the JSON of a bench run (streamsafe bench --json FILE)" in err
    assert main(["bench", "--from-json", str(tmp_path / "missing.json")]) == 2
    assert "No such file" in capsys.readouterr().err
    other.write_text('{"summary": {}, "raw": []}')
    assert main(["bench", "--from-json", str(other)]) == 2
    assert "it is the JSON of the two-GPU bench" in capsys.readouterr().err


def _mangled(tmp_path, change) -> str:  # type: ignore[no-untyped-def]
    from streamsafe.bench import write_json

    path = tmp_path / "run.json"
    write_json(_saved_run(), str(path))
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return str(path)


def _cell(data: dict[str, Any], scenario: str, strategy: str) -> dict[str, Any]:
    return next(c for c in data["cells"] if (c["scenario"], c["strategy"]) == (scenario, strategy))


@pytest.mark.parametrize("change,says", [
    (lambda d: _cell(d, "a", "hand")["samples"]["block_wall_s"].__setitem__(0, None),
     "cell 4 (a / hand)'s samples.block_wall_s[0] is None, not a number"),
    (lambda d: _cell(d, "a", "auto")["samples"]["latency_ms"].__setitem__(3, "1.0"),
     "cell 1 (a / auto)'s samples.latency_ms[3] is '1.0', not a number"),
    (lambda d: _cell(d, "a", "auto")["samples"]["block_frames"].__setitem__(0, 20.5),
     "samples.block_frames[0] is 20.5, not a whole number"),
    (lambda d: _cell(d, "a", "auto")["samples"].pop("latency_ms"), "cell 1 (a / auto)'s samples has no 'latency_ms'"),
    (lambda d: d.__setitem__("timed", "false"), "'timed' is 'false', not true or false"),
    (lambda d: d["config"].__setitem__("frames", None), "'config.frames' is None, not a whole number"),
    (lambda d: d["config"].__setitem__("scenarios", []), "'config.scenarios' is [], not a list of names"),
    (lambda d: d["cells"].append(d["cells"][0]), "cell 12 (a / none) comes twice"),
    (lambda d: d.__setitem__("order", [["a"]]), "'order' is not a list of [scenario, strategy] pairs"),
    (lambda d: _cell(d, "a", "auto")["samples"]["block_cpu_s"].pop(), "samples have 2 blocks of frames but 2 wall times and 1 CPU times"),
])
def test_read_json_names_the_field_and_the_rule(tmp_path, change, says: str) -> None:  # type: ignore[no-untyped-def]
    from streamsafe.bench.report import read_json

    with pytest.raises(ValueError) as e:
        read_json(_mangled(tmp_path, change))
    assert says in str(e.value) and "is not a file that `streamsafe bench --json` wrote" in str(e.value)


def test_bench_from_json_keeps_the_hand_rows_and_refuses_a_choice_that_matches_nothing(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """--strategy auto keeps the hand rows (as a run does: x hand is over them); no match is an error."""
    saved = _mangled(tmp_path, lambda d: None)
    again = tmp_path / "again.json"
    assert main(["bench", "--from-json", saved, "--strategy", "auto", "--scenario", "a", "--json", str(again)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("a ")]
    assert [r[1] for r in rows] == ["auto", "hand", "hand-sync"] and rows[0][9] == "0.98"
    data = json.loads(again.read_text())
    assert data["order"] == [[a, b] for a, b in data["order"] if a == "a" and b in ("auto", "hand", "hand-sync")]
    assert len(data["order"]) == 3 and data["config"]["strategies"] == ["auto", "hand", "hand-sync"]
    empty = _mangled(tmp_path, lambda d: d["cells"].clear())
    assert main(["bench", "--from-json", empty]) == 2
    assert "that run has no cell of scenario a, server-2 and strategy none, auto, event, device, hand, hand-sync; it has none" in capsys.readouterr().err


def test_a_hand_row_with_no_frames_in_its_time_gives_no_ratio() -> None:
    result = _saved_run()
    for row in ("hand", "hand-sync"):
        hand = result.get("a", row)
        hand.block_frames, hand.frames = [0, 0], 0
    assert result.hand_ratio("a", "auto") != result.hand_ratio("a", "auto")  # (NaN: no division by zero)


def test_the_chart_draws_each_strategy_over_the_hand_row() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from streamsafe.bench.report import _bars

    result = _saved_run()
    fig, ax = plt.subplots()
    _bars(ax, result, ["a"], result.strategies)
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([result.hand_ratio("a", s) for s in result.strategies])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a\nhand 909/s"]  # (40 frames in 0.044 s)
    plt.close(fig)


def test_the_chart_file_is_written(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    assert write_png(_saved_run(), str(path)) is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_decode_pipeline_benchmark_counts_on_the_model(tmp_path: Any) -> None:
    """``benchmarks/decode_pipeline.py --model``: every fenced row is correct, the unfenced one is not, and only
    the recipe waits on the host."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("av")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "decode.json"
    result = subprocess.run([sys.executable, str(root / "benchmarks" / "decode_pipeline.py"), "--model", "--json", str(out)],
                            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(out.read_text())["model"]
    assert all(rows[r]["corrupt"] == 0 and rows[r]["races"] == 0 for r in ("recipe", "hand", "streamsafe", "streamsafe-view"))
    assert rows["none"]["corrupt"] > 0
    assert rows["recipe"]["host_waits"] > 0 and rows["streamsafe"]["host_waits"] == 0 and rows["hand"]["host_waits"] == 0


def test_the_readme_rows_guard_blocks_end_with_their_pipelines() -> None:
    """A server's lanes enter the README row's block on their worker threads; the pipelines' close, in the main
    thread, ends each (before, every lane's block stayed open with its contract and effect)."""
    import warnings

    from streamsafe import guarding

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_bench(sim_factory, ["server-2"], ["auto"], frames=8, warmup=2, block=4, backend="sim", timed=False,
                  references=["readme"])
    assert guarding._open == {}


def test_the_strategies_script_runs_without_a_gpu(tmp_path: Any) -> None:
    """Its docstring says it runs on the model without a GPU (counts only): no chart is asked for there."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "strategies.py"), "--scenario", "a", "--frames", "4"],
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "bench.json").is_file() and not (tmp_path / "bench.png").exists()


def test_corruption_in_the_warm_up_is_counted_apart_and_shown() -> None:
    """A corrupt frame is one, timed or not: the warm-up's are counted apart, shown, and a hand row with one is no floor."""
    result, _, _ = bench({"none": 0.001, "hand": 0.002}, corrupt_every=2, warmup=4)
    none = result.get("a", "none")
    assert (none.warmup_checked, none.warmup_corrupt) == (4, 2) and (none.checked, none.corrupt) == (6, 2)
    assert "2/6 +2 warm-up" in format_table(result)
    again = read_json_of(result)
    assert (again.get("a", "none").warmup_checked, again.get("a", "none").warmup_corrupt) == (4, 2)
    assert result.get("a", "hand").warmup_corrupt == 0 and result.best_hand("a") == "hand"


def read_json_of(result: Any) -> Any:
    import json
    import tempfile

    from streamsafe.bench.report import clean_json, read_json, to_json

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(clean_json(to_json(result)), f)
    return read_json(f.name)
