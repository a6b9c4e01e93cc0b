"""The benchmark harness on CPU with an injected clock, and `streamsafe bench` on the model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamsafe.bench import format_table, run_bench, to_json
from streamsafe.bench.report import write_png
from streamsafe.cli import main
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
    assert [n for n, kind, _ in log if kind == "settle"] == ["none", "event", "device"] * 2  # one per timed block
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
    assert "multiple of block" in capsys.readouterr().err


def test_micro_benchmark_interleave_loop() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "_interleave.py"
    spec = importlib.util.spec_from_file_location("_interleave", path)
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
