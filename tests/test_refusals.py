"""Calls and settings streamsafe or the SDK refuses leave the effect, the contract and the data as they were."""

from __future__ import annotations

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import VideoSuperRes

FENCED = ["auto", "event", "async", "stream", "device"]


def _setup(strategy: str) -> tuple[ss.sim.SimBackend, ss.StreamContract, VideoSuperRes, ss.Stream, ss.Stream]:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    prod, sdk, cons = (sim.create_stream(non_blocking=True) for _ in range(3))
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 128, 72
    sr.load()
    return sim, ss.StreamContract(sr, sdk, strategy=strategy, input_stream=prod), sr, prod, cons


@pytest.mark.parametrize("strategy", FENCED)
@pytest.mark.parametrize("bad", ["float64", "HWC", "too small"])
def test_an_input_the_sdk_refuses_leaves_the_counters_and_the_previous_output(strategy: str, bad: str) -> None:
    sim, c, sr, prod, cons = _setup(strategy)
    good = sim.empty((3, 36, 64), np.float32, stream=prod)
    sim.fill(good, 0.5, stream=prod)
    out = c.run(good)
    stats = dict(c.stats)
    shape, dtype = {"float64": ((3, 36, 64), np.float64), "HWC": ((36, 64, 3), np.float32), "too small": ((3, 8, 8), np.float32)}[bad]
    with pytest.raises(ss.errors.EffectConfigError):
        c.run(sim.empty(shape, dtype, stream=prod))
    assert dict(c.stats) == stats
    y = sim.copy(sim.from_dlpack(out.image, stream=cons), cons)  # the previous output is still valid
    sim.synchronize_stream(cons)
    assert float(sim.download(y).min()) == pytest.approx(0.5, abs=1 / 255)
    out2 = c.run(good)
    sim.from_dlpack(out2.image, stream=cons)
    sim.synchronize_device()
    assert sim.races == []
    assert c.stats["runs"] == stats["runs"] + 1


def test_configure_is_all_or_nothing() -> None:
    sim, c, sr, prod, cons = _setup("auto")
    c.run(sim.array(np.full((3, 36, 64), 0.5, np.float32)))
    stats = dict(c.stats)
    with pytest.raises(ss.errors.EffectConfigError, match="output_height=0"):
        c.configure(output_width=256, output_height=0)
    assert (sr.output_width, sr.output_height) == (128, 72)  # the width it took went back
    assert dict(c.stats) == stats
    out = c.run(sim.array(np.full((3, 36, 64), 0.5, np.float32)))
    assert sim.download(sim.from_dlpack(out.image, stream=cons)).shape == (3, 72, 128)


def test_configure_refusing_a_value_before_any_release_keeps_the_output() -> None:
    sim, c, sr, prod, cons = _setup("auto")
    out = c.run(sim.array(np.full((3, 36, 64), 0.5, np.float32)))
    stats = dict(c.stats)
    with pytest.raises(ss.errors.EffectConfigError, match="output_width='256'"):
        c.configure(output_width="256")
    assert dict(c.stats) == stats
    y = sim.copy(sim.from_dlpack(out.image, stream=cons), cons)
    sim.synchronize_device()
    assert sim.races == [] and float(sim.download(y).max()) == pytest.approx(0.5, abs=1 / 255)


class _DuckSDK:
    """A real-nvvfx-like effect: duck-typed, no emulation engine to name its backend."""

    device = 0

    def run(self, x: object, *, non_blocking: bool = False, stream_ptr: int = 0) -> None: ...

    def close(self) -> None: ...


@pytest.mark.parametrize("why", ["a bad stream", "async where unsound"])
def test_a_refused_contract_leaves_no_ledger_on_the_effect(why: str) -> None:
    from streamsafe.ledger import ledger_of

    wrong, right = ss.sim.SimBackend(), ss.sim.SimBackend()
    fx = _DuckSDK()
    with pytest.raises(ss.StreamsafeError):
        if why == "a bad stream":
            ss.StreamContract(fx, "not a stream", backend=wrong)
        else:
            ss.StreamContract(fx, strategy="async", conversion_stream=wrong.per_thread_stream(), backend=wrong)
    assert ledger_of(fx, create=False) is None
    with ss.use_backend(right):
        assert ss.StreamContract(fx).backend is right


def test_guard_refuses_an_unknown_option_at_once() -> None:
    with pytest.raises(ss.errors.ArgumentError, match="unexpected option 'input_streem'.*input_stream"):
        ss.guard(VideoSuperRes, input_streem=None)
    sim = ss.sim.SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width = 128  # the class was never guarded


def test_guard_options_are_the_contracts() -> None:
    import inspect

    from streamsafe.class_guard import GUARD_OPTIONS

    params = set(inspect.signature(ss.StreamContract.__init__).parameters) - {"self", "effect", "stream", "strategy"}
    assert set(GUARD_OPTIONS) == params


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", True), ("YES", True), ("on", True), ("0", False), ("False", False),
                                           ("no", False), ("off", False), ("", False)])
def test_sanitize_switch_reads_the_usual_spellings(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    monkeypatch.setenv("STREAMSAFE_SANITIZE", value)
    assert ss.sim.SimBackend().on_race == ("raise" if on else "record")


@pytest.mark.parametrize("name", ["STREAMSAFE_SANITIZE", "STREAMSAFE_REPLAY", "STREAMSAFE_CHECK_REPLAY"])
def test_a_switch_with_another_value_is_refused_with_its_name_and_the_fix(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    from streamsafe._env import env_flag

    monkeypatch.setenv(name, "ture")
    with pytest.raises(ss.errors.EnvironmentSettingError, match=rf"{name}='ture' is not a switch.*set it to 1 .*or 0 .*or unset it"):
        env_flag(name, False, "what it does")
    if name == "STREAMSAFE_SANITIZE":
        with pytest.raises(ss.errors.EnvironmentSettingError):
            ss.sim.SimBackend()


def test_the_testing_kit_is_reachable_from_a_plain_import() -> None:
    import subprocess
    import sys

    code = "import streamsafe as ss; print(ss.testing.VideoSuperRes.__name__, callable(ss.testing.install_fake_nvvfx))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["VideoSuperRes", "True"]


def test_run_at_timestep_on_an_effect_without_it_says_so_before_anything_is_issued() -> None:
    sim, c, sr, prod, cons = _setup("auto")
    frame = sim.array(np.full((3, 36, 64), 0.5, np.float32))
    stats, fences = dict(c.stats), sim.stats["fences"]
    with pytest.raises(ss.errors.MissingCallError, match=r"VideoSuperRes has no run_at_timestep\(\): only VideoFrameGeneration.*c.run"):
        c.run_at_timestep(frame, frame, 0.5)
    assert dict(c.stats) == stats and sim.stats["fences"] == fences


@pytest.mark.parametrize("timestep", ["0.5", None, b"0.5"])
def test_a_timestep_that_is_not_a_number_is_named_as_such(timestep: object) -> None:
    from streamsafe.testing import VideoFrameGeneration

    sim = ss.sim.SimBackend()
    fg = VideoFrameGeneration(backend=sim)
    fg.input_width, fg.input_height = 64, 36
    fg.load()
    c = ss.StreamContract(fg, sim.create_stream(non_blocking=True))
    frame = sim.array(np.full((3, 36, 64), 0.5, np.float32))
    with pytest.raises(ss.errors.InputArrayError, match=r"argument 3 .* is neither an input array nor a number.*timestep or index as a number"):
        c.run_at_timestep(frame, frame, timestep)
    assert c.stats["fences"] == 0 and c.stats["runs"] == 0


@pytest.mark.parametrize("call", ["use_backend", "sanitize", "process_default"])
def test_a_backend_argument_that_is_not_one_is_refused_at_once(call: str) -> None:
    from streamsafe.backend import process_default

    fn = {"use_backend": ss.use_backend, "sanitize": ss.sanitize, "process_default": process_default}[call]
    with pytest.raises(ss.errors.ArgumentError, match=rf"{call}\(\) needs a backend object, not 'sim' \(str\).*streamsafe.sim.SimBackend\(\)"):
        with fn("sim"):  # type: ignore[arg-type]
            pass


def test_model_device_numbers_must_be_ints() -> None:
    with pytest.raises(ss.errors.ArgumentError, match=r"devices='2' is invalid: .*an int of at least 1"):
        ss.sim.SimBackend(devices="2")  # type: ignore[arg-type]
    assert ss.sim.SimBackend(devices=np.int64(2)).device_count() == 2
    with pytest.raises(ss.errors.StreamValueError, match=r"named by its number \(an int\), not a str. Pass device=0 as an int"):
        ss.sim.SimBackend().create_stream(device="0")  # type: ignore[arg-type]


def test_a_numpy_integer_stream_handle_is_an_int_handle() -> None:
    sim = ss.sim.SimBackend()
    s = sim.create_stream(non_blocking=True)
    assert ss.as_stream(np.int64(s.handle), backend=sim) == s


def test_guard_of_nothing_is_refused() -> None:
    with pytest.raises(ss.errors.NotAnEffectError, match=r"found no effect class to guard"):
        ss.guard([])


def test_a_stale_output_after_close_says_the_effect_was_closed() -> None:
    sim, c, sr, prod, cons = _setup("auto")
    out = c.run(sim.array(np.full((3, 36, 64), 0.5, np.float32)))
    c.close()
    with pytest.raises(ss.errors.StaleOutputError, match="has since been closed, which released its buffer") as e:
        sim.from_dlpack(out.image, stream=cons)
    assert e.value.closed
    sim2, c2, _, _, cons2 = _setup("auto")
    frame = sim2.array(np.full((3, 36, 64), 0.5, np.float32))
    first = c2.run(frame)
    c2.run(frame)
    with pytest.raises(ss.errors.StaleOutputError, match="has since run again or released its buffer"):
        sim2.from_dlpack(first.image, stream=cons2)


@pytest.mark.parametrize("strategy", FENCED)
def test_a_refused_input_on_the_replay_path_leaves_the_counters_too(strategy: str) -> None:
    """The steady-state replay keys on shapes, not dtypes: a same-shape input of the wrong dtype is replayed
    up to the SDK's refusal, which must leave the counters as a refusal on the planned path does."""
    from streamsafe import steady

    sim, c, sr, prod, cons = _setup(strategy)
    good = sim.empty((3, 36, 64), np.float32, stream=prod)
    sim.fill(good, 0.5, stream=prod)
    for _ in range(3):
        c.run(good)
    stats = {k: v for k, v in c.stats.items() if v}
    replays = steady.replays
    with pytest.raises(ss.errors.EffectConfigError):
        c.run(sim.empty((3, 36, 64), np.float64, stream=prod))
    assert steady.replays == replays + 1  # (the refused call was a replay)
    assert {k: v for k, v in c.stats.items() if v} == stats


def test_restoring_the_counters_never_empties_them() -> None:
    from streamsafe.engine import restore_counters as _restore_counters

    stats = {"runs": 3, "fences": 5, "H1": 2}
    seen: list[dict[str, int]] = []

    class Watching(dict):  # type: ignore[type-arg]
        def clear(self) -> None:
            raise AssertionError("cleared: a reader on another thread would find no keys")

        def pop(self, key: str, *default: int) -> int:
            seen.append(dict(self))
            return dict.pop(self, key, *default)  # type: ignore[no-any-return]

    watched = Watching(stats, H6=1)
    watched["fences"] = 9
    _restore_counters(watched, stats)
    assert dict(watched) == stats and all("runs" in s for s in seen)


def test_a_refused_contract_keeps_a_ledger_another_contract_took_up_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread B makes a contract on the same effect while A, which made the ledger, is being refused
    (the interleaving forced on one thread): the ledger stays, shared by B and every later contract."""
    from streamsafe import contract as C
    from streamsafe.ledger import ledger_of

    sim = ss.sim.SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 128, 72
    sr.load()
    original = C.StreamContract.plan
    others: list[ss.StreamContract] = []

    def plan(self: ss.StreamContract) -> object:
        if not others and self.strategy is ss.Strategy.ASYNC:
            others.append(C.StreamContract(sr, sim.create_stream(non_blocking=True)))  # B, between A's steps
            raise ss.errors.StrategyError("async", "refused for the test", "none")
        return original.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(C.StreamContract, "plan", property(plan))
    with pytest.raises(ss.errors.StrategyError):
        C.StreamContract(sr, sim.create_stream(non_blocking=True), strategy="async")
    monkeypatch.setattr(C.StreamContract, "plan", original)
    assert ledger_of(sr, create=False) is others[0].ledger
    assert C.StreamContract(sr, sim.create_stream(non_blocking=True)).ledger is others[0].ledger


def test_the_new_refusals_are_streamsafe_errors_and_the_builtin_kinds() -> None:
    assert issubclass(ss.errors.ArgumentError, (ss.StreamsafeError)) and issubclass(ss.errors.ArgumentError, TypeError)
    assert issubclass(ss.errors.ArgumentError, ValueError)
    assert issubclass(ss.errors.MissingCallError, ss.StreamsafeError) and issubclass(ss.errors.MissingCallError, AttributeError)
