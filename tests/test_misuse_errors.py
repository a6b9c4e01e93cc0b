"""Misuse a newcomer makes in the second hour: each gets a StreamsafeError that names the value, the rule and the
fix, and changes nothing; the model is as strict as the driver; what streamsafe prints adds up."""

from __future__ import annotations

import pickle
import re
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.errors import ArgumentError, EffectConfigError, EnvironmentSettingError, FrameworkUnavailableError, RaceError, StrategyError
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes


def _sr(sim: SimBackend, **kw: Any) -> VideoSuperRes:
    sr = VideoSuperRes(backend=sim, **kw)
    sr.output_width = sr.output_height = 64
    sr.load()
    return sr


def _frame(sim: SimBackend, stream: Any = None) -> Any:
    x = sim.empty((3, 32, 32), np.float32, stream=stream)
    sim.fill(x, 0.5, stream=stream)
    return x


def test_a_bad_sanitize_switch_turns_nothing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMSAFE_SANITIZE", "bogus")
    with pytest.raises(EnvironmentSettingError, match="'bogus'"):
        with ss.sanitize():
            pass
    monkeypatch.delenv("STREAMSAFE_SANITIZE")
    sim = SimBackend()
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x = sim.empty(4, stream=a)
    sim.fill(x, 1, stream=a)
    sim.copy(x, b)  # a race, recorded: no sanitize mode was left on to raise it
    assert len(sim.races) == 1


def test_after_a_racy_raw_run_raises_in_sanitize_mode_the_next_guarded_run_is_clean() -> None:
    sim = SimBackend(scheduler="adversarial")
    sr = _sr(sim)
    S, P = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    with ss.sanitize(sim):
        first = _frame(sim, P)  # (kept: freed, its memory would go to the next frame while the raw run still reads it)
        with pytest.raises(RaceError):
            sr.run(first, stream_ptr=S.handle)  # the input's producer is not ordered: raises mid-run
        before = len(sim.races)
        with ss.stream_contract(sr, S, input_stream=P) as c:
            y = c.run(_frame(sim, P)).numpy()
    assert len(sim.races) == before and np.allclose(y, 128 / 255)


@pytest.mark.parametrize("call", ["contract", "use_backend", "sanitize"])
def test_a_backend_that_is_not_one_is_named_as_such(call: str) -> None:
    sim = SimBackend()
    sr = _sr(sim)
    with pytest.raises(ArgumentError, match="needs a backend object, not 42"):
        if call == "contract":
            ss.StreamContract(sr, None, backend=42)  # type: ignore[arg-type]
        elif call == "use_backend":
            with ss.use_backend(42):  # type: ignore[arg-type]
                pass
        else:
            with ss.sanitize(42):  # type: ignore[arg-type]
                pass


def test_an_effect_on_a_device_the_model_lacks_is_refused_at_load() -> None:
    sr = VideoSuperRes(backend=SimBackend(), device=3)
    sr.output_width = sr.output_height = 64
    with pytest.raises(EffectConfigError, match="has 1 device"):
        sr.load()
    assert not sr.is_loaded
    ok = VideoSuperRes(backend=SimBackend(devices=4), device=3)
    ok.output_width = ok.output_height = 64
    ok.load()


def test_a_race_on_the_shadow_stream_names_it_and_the_real_fix() -> None:
    sim = SimBackend(scheduler="adversarial")
    sr = _sr(sim)
    P = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True), strategy="async")  # no input_stream: P unknown
    with sim.use_stream(sim.create_stream(non_blocking=True)):
        c.run(_frame(sim, P)).numpy()
    text = "\n".join(str(r) for r in sim.races)
    assert "streamsafe's shadow stream" in text and "declare input_stream=" in text
    assert "make streamsafe's shadow stream" not in text and "wait on it before 'VideoSuperRes" not in text


def test_a_stream_ptr_that_contradicts_the_contract_or_a_non_bool_non_blocking_is_refused() -> None:
    sim = SimBackend()
    sr = _sr(sim)
    S, O = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, S)
    x = _frame(sim)
    with pytest.raises(ArgumentError, match="make a contract for that stream"):
        c.run(x, stream_ptr=O.handle)
    with pytest.raises(ArgumentError, match="must be True or False"):
        c.run(x, non_blocking="yes")
    assert c.stats["runs"] == 0 and c.generation == 0
    c.run(x, stream_ptr=S.handle)  # the contract's own stream: fine
    free = ss.StreamContract(_sr(sim))  # no stream declared: stream_ptr names the call's
    free.run(_frame(sim), stream_ptr=O.handle)
    assert free.plan_for(producer=O, sdk=O).sdk == O


def test_positional_keywords_and_a_positional_strategy() -> None:
    sim = SimBackend()
    sr = _sr(sim)
    with pytest.raises(ArgumentError, match="takes 1 positional argument"):
        ss.StreamContract(sr).run(_frame(sim), False, 0)
    assert ss.StreamContract(sr, None, "event").strategy is ss.Strategy.EVENT
    import inspect

    assert "_wait" not in str(inspect.signature(ss.StreamContract.synchronize))


def test_the_errors_that_were_not_streamsafe_errors_are() -> None:
    with pytest.raises(ArgumentError, match="scheduler='bogus'"):
        SimBackend(scheduler="bogus")
    with pytest.raises(StrategyError, match="'fast'"):
        ss.Strategy("fast")
    assert ss.Strategy("EVENT") is ss.Strategy.EVENT
    with pytest.raises(FrameworkUnavailableError, match="install_fake_nvvfx"):
        ss.guard("nvvfx")
    sim = SimBackend()
    for obj in (_sr(sim), sim):
        with pytest.raises(ArgumentError, match="cannot be pickled"):
            pickle.dumps(obj)


def test_a_counter_is_not_a_setting() -> None:
    sim = SimBackend()
    c = ss.StreamContract(_sr(sim))
    with pytest.raises(EffectConfigError, match="'runs' is read-only"):
        c.configure(runs=3)


def test_out_of_range_inputs_are_clamped_as_documented() -> None:
    sim = SimBackend()
    c = ss.StreamContract(_sr(sim))
    x = sim.array(np.full((3, 32, 32), 7.0, np.float32))
    assert np.all(c.run(x).numpy() == 1.0)
    x = sim.array(np.full((3, 32, 32), np.nan, np.float32))
    assert np.all(c.run(x).numpy() == 0.0)
    doc = " ".join((VideoSuperRes.__doc__ or "").split())
    assert "clamped" in doc and "NaN reads as 0" in doc


def test_assert_no_races_prints_each_race_as_sanitize_does() -> None:
    sim = SimBackend()
    sim.assert_no_races()
    a, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    x = sim.empty(4, stream=a)
    sim.fill(x, 1, stream=a)
    sim.copy(x, b)
    with pytest.raises(AssertionError, match=r"1 unordered access pair\(s\) found:\n  - read by 'copy"):
        sim.assert_no_races()


def test_the_run_reports_fences_add_up(tmp_path: Any) -> None:
    from streamsafe.tools.runner import run_program

    program = tmp_path / "p.py"
    program.write_text(
        "import numpy as np, streamsafe as ss\n"
        "from nvvfx import VideoSuperRes\n"
        "sim = ss.current_backend()\n"
        "S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)\n"
        "sr = VideoSuperRes(); sr.output_width = sr.output_height = 64; sr.load()\n"
        "for i in range(3):\n"
        "    x = sim.empty((3, 32, 32), np.float32, stream=S); sim.fill(x, 0.5, stream=S)\n"
        "    out = sr.run(x, stream_ptr=S.handle)\n"
        "    sim.copy(sim.from_dlpack(out.image, stream=C), C)\n"
        "sr.output_width = 128\n"
    )
    report = run_program(str(program), [], fake_nvvfx=True, strategy="stream")
    e = report.effects[0]
    assert sum(e.fences_by_hazard.values()) == e.fences + e.host_waits + e.device_syncs
    assert e.host_waits > 0


@pytest.mark.parametrize("how", ["second import", "copy=True", "dl_device"])
def test_an_export_the_output_cannot_give_is_an_export_error_that_pickles(how: str) -> None:
    from streamsafe.errors import ExportError, StreamsafeError

    sim = SimBackend()
    sr = _sr(sim)
    S = sim.create_stream(non_blocking=True)
    with sim.use_stream(S):
        out = ss.StreamContract(sr, S, input_stream=S).run(_frame(sim, S))
    if how == "second import":
        out.image.__dlpack__()
        call: Any = out.image.__dlpack__
    elif how == "copy=True":
        call = lambda: out.image.__dlpack__(copy=True)  # noqa: E731
    else:
        call = lambda: out.image.__dlpack__(dl_device=(1, 0))  # noqa: E731
    with pytest.raises(ExportError) as caught:
        call()
    assert isinstance(caught.value, (StreamsafeError, BufferError)) and caught.value.fix
    again = pickle.loads(pickle.dumps(caught.value))
    assert (type(again), str(again)) == (ExportError, str(caught.value))
    assert not hasattr(ss, "ExportError")  # (new: only in streamsafe.errors, no deprecated top-level name)


@pytest.mark.parametrize(("args", "named"), [(((3, 4, 4), "float99"), "dtype='float99'"), (((3, -1),), "shape=(3, -1)"),
                                             ((("a",),), "shape=('a',)")])
def test_the_models_allocation_refuses_what_numpy_cannot_allocate(args: tuple[Any, ...], named: str) -> None:
    sim = ss.sim.SimBackend()
    for allocate in (sim.empty, sim.malloc):
        with pytest.raises(ss.errors.ArgumentError, match=re.escape(named)):
            allocate(*args)
