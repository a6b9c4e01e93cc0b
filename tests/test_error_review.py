"""The error review's findings (docs/errors.md's promise: bad input gets a StreamsafeError naming the value, the
rule and the fix, and leaves the SDK object and the user's data as they were), each fixed and pinned here:

* an unknown option and a non-bool ``allow_none`` given to the contracts' constructors are an ``ArgumentError``,
  as ``stream_contract()`` gives (not Python's bare ``TypeError``);
* a contract refused for its environment (``STREAMSAFE_SANITIZE=maybe``) leaves no ledger on the effect;
* a call whose arguments the SDK's signature does not take (one missing, a keyword it lacks, one given twice) is
  an ``ArgumentError`` naming the argument and the signature, before anything is issued or counted; a call that
  reuses a kept frame gets the same error;
* ``SafeImage.__dlpack__(max_version=...)`` that is no ``(major, minor)`` pair is refused before the capsule goes;
* an output given to an effect on another model is refused before its capsule is taken (it stays importable);
* an SDK that refuses a call after it took a guarded output as its input has used the output up (a DLPack
  capsule imports once): the errors page says so, and the way round it.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import steady
from streamsafe.errors import ArgumentError, EnvironmentSettingError, ExportError, InputArrayError, StreamsafeError
from streamsafe.ledger import ledger_of
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoFrameGeneration, VideoSuperRes

ROOT = Path(__file__).resolve().parents[1]


def _effect(sim: SimBackend, width: int = 128, height: int = 72) -> VideoSuperRes:
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = width, height
    sr.load()
    return sr


def _frame(sim: SimBackend, stream: Any, level: float = 0.25) -> Any:
    x = sim.empty((3, 36, 64), np.float32, stream=stream)
    sim.fill(x, np.float32(level), stream=stream)
    return x


# -- the contracts' options --------------------------------------------------------------------------------------


def test_an_unknown_option_is_the_argument_error_stream_contract_gives(sim: SimBackend) -> None:
    S = sim.create_stream(non_blocking=True)
    sr = _effect(sim)
    with pytest.raises(ArgumentError) as given:
        ss.stream_contract(sr, S, bogus=1)
    with pytest.raises(ArgumentError) as made:
        ss.StreamContract(sr, S, bogus=1)  # type: ignore[call-arg]
    assert str(made.value) == str(given.value)
    assert "'bogus'" in str(made.value) and "input_stream" in str(made.value)
    assert ledger_of(sr, create=False) is None  # (refused before anything was made)
    with pytest.raises(ArgumentError, match="no option 'bogus'"):
        ss.PoolContract(object(), bogus=1)  # type: ignore[call-arg]


def test_an_unknown_option_of_a_decoders_contract_is_an_argument_error(sim: SimBackend, fake_pynvvideocodec: Any) -> None:
    pytest.importorskip("av")
    from streamsafe.testing import sample_clip

    with ss.use_backend(sim):
        dec = fake_pynvvideocodec.SimpleDecoder(sample_clip(4, (64, 48)), output_color_type=fake_pynvvideocodec.OutputColorType.RGBP)
        with pytest.raises(ArgumentError, match="no option 'bogus'"):
            ss.PoolContract(dec, bogus=1)  # type: ignore[call-arg]
        with pytest.raises(ArgumentError, match="allow_none='yes'"):
            ss.PoolContract(dec, allow_none="yes")  # type: ignore[arg-type]
        ss.PoolContract(dec, strategy="none", allow_none=True).close()


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_allow_none_must_be_a_bool(sim: SimBackend, value: Any) -> None:
    S = sim.create_stream(non_blocking=True)
    sr = _effect(sim)
    with pytest.raises(ArgumentError, match=re.escape(f"allow_none={value!r}: it must be True or False")):
        ss.StreamContract(sr, S, strategy="none", allow_none=value)
    assert ledger_of(sr, create=False) is None
    assert ss.StreamContract(sr, S, strategy="none", allow_none=True).strategy is ss.Strategy.NONE


def test_a_contract_refused_for_its_environment_leaves_no_ledger(sim: SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    S = sim.create_stream(non_blocking=True)
    sr = _effect(sim)
    monkeypatch.setenv("STREAMSAFE_SANITIZE", "maybe")
    with pytest.raises(EnvironmentSettingError):
        ss.StreamContract(sr, S)
    assert ledger_of(sr, create=False) is None
    monkeypatch.delenv("STREAMSAFE_SANITIZE")
    ss.StreamContract(sr, S).close()


# -- calls the SDK's signature does not take ----------------------------------------------------------------------


def _interpolator(sim: SimBackend) -> VideoFrameGeneration:
    fg = VideoFrameGeneration(backend=sim)
    fg.input_width, fg.input_height = 64, 36
    fg.load()
    return fg


CALLS = {
    "nothing": (lambda c, x: c.run(), "missing its argument 'input_array'", "input_array"),
    "an unknown keyword": (lambda c, x: c.run(x, bogus=1), "takes no argument bogus=1", "bogus"),
    "the input by a name it lacks": (lambda c, x: c.run(image=x), "takes no argument image=", "image"),
    "the input twice": (lambda c, x: c.run(x, input_array=x), "got 'input_array' twice", "input_array"),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_a_call_the_sdks_signature_does_not_take_is_an_argument_error_before_anything_is_issued(sim: SimBackend, case: str) -> None:
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_effect(sim), S, input_stream=P)
    x = _frame(sim, P)
    out = c.run(x)
    stats, generation, fences = dict(c.stats), c.generation, sim.stats["fences"]
    call, says, argument = CALLS[case]
    with pytest.raises(ArgumentError) as e:
        call(c, x)
    message = str(e.value)
    assert says in message and argument in message
    assert "the SDK's signature is run(input_array, *, non_blocking=False, stream_ptr=0)" in message
    assert dict(c.stats) == stats and c.generation == generation and sim.stats["fences"] == fences  # (nothing issued)
    assert np.allclose(out.numpy(), 64 / 255, atol=1 / 255)  # (the previous output stays valid)


def test_an_interpolation_without_its_timestep_names_it(sim: SimBackend) -> None:
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_interpolator(sim), S, input_stream=P)
    a, b = _frame(sim, P), _frame(sim, P)
    with pytest.raises(ArgumentError, match=r"run_at_timestep\(\) is missing its argument 'timestep': the SDK's signature "
                                            r"is run_at_timestep\(previous, current, timestep, \*"):
        c.run_at_timestep(a, b)
    with pytest.raises(ArgumentError, match=r"missing its argument 'frame_index'.*Pass frame_index=\.\.\. \(by keyword\)"):
        c.run(a, b)
    assert c.stats["runs"] == 0
    c.run_at_timestep(a, b, 0.5).numpy()


def test_a_call_that_reuses_a_kept_frame_gets_the_same_argument_error(sim: SimBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steady, "check_replay", False)  # (the suite plans replayed calls again: not here)
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_effect(sim), S, input_stream=P)
    x = _frame(sim, P)
    c.run(x)
    out = c.run(x)
    stats, replays = dict(c.stats), steady.replays
    with pytest.raises(ArgumentError, match=r"takes no argument bogus=1: the SDK's signature is run\(input_array"):
        c.run(x, bogus=1)
    assert steady.replays == replays + 1  # (the kept frame was reused: its facts leave that keyword out)
    assert dict(c.stats) == stats
    assert np.allclose(out.numpy(), 64 / 255, atol=1 / 255)
    assert np.allclose(c.run(x).numpy(), 64 / 255, atol=1 / 255)


def test_an_sdk_error_inside_its_call_is_not_taken_for_arguments(sim: SimBackend) -> None:
    class Picky(VideoSuperRes):
        def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any:  # type: ignore[override]
            raise TypeError("the SDK's own TypeError")

    sr = Picky(backend=sim)
    sr.output_width, sr.output_height = 128, 72
    sr.load()
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, S, input_stream=P)
    with pytest.raises(TypeError, match="the SDK's own TypeError") as e:
        c.run(_frame(sim, P))
    assert not isinstance(e.value, StreamsafeError)


# -- exports ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["x", (1,), (1, 0, 0), (1.0, 0), (True, 0), 1])
def test_a_max_version_that_is_no_pair_of_ints_is_refused_and_the_output_stays_importable(sim: SimBackend, version: Any) -> None:
    S = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_effect(sim), S, input_stream=S)
    out = c.run(_frame(sim, S))
    with pytest.raises(ExportError, match=re.escape(f"max_version={version!r} is not a DLPack version")):
        out.image.__dlpack__(max_version=version)
    assert not out.image.consumed
    assert np.allclose(out.numpy(), 64 / 255, atol=1 / 255)


@pytest.mark.parametrize("version", [(1, 0), [1, 0], (np.int64(1), 0)])
def test_a_max_version_pair_is_taken(sim: SimBackend, version: Any) -> None:
    S = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_effect(sim), S, input_stream=S)
    out = c.run(_frame(sim, S))
    assert np.allclose(sim.download(sim.from_dlpack(out.image.__dlpack__(max_version=version))), 64 / 255, atol=1 / 255)


# -- a guarded output given as another effect's input ------------------------------------------------------------


def test_an_output_of_another_model_is_refused_before_its_capsule_is_taken() -> None:
    sim_a, sim_b = SimBackend(), SimBackend()
    P = sim_a.create_stream(non_blocking=True)
    ca = ss.StreamContract(_effect(sim_a), sim_a.create_stream(non_blocking=True), input_stream=P)
    cb = ss.StreamContract(_effect(sim_b), sim_b.create_stream(non_blocking=True))
    out = ca.run(_frame(sim_a, P))
    with pytest.raises(InputArrayError, match="another|not of"):
        cb.run(out.image)
    assert not out.image.consumed
    assert cb.stats["runs"] == 0
    assert np.allclose(out.numpy(), 64 / 255, atol=1 / 255)


def test_an_sdk_that_refuses_after_taking_an_output_has_used_it_up_as_the_errors_page_says(sim: SimBackend) -> None:
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    ca = ss.StreamContract(_effect(sim), S, input_stream=P)
    cb = ss.StreamContract(_effect(sim, 64, 36), S, input_stream=S)  # (an output smaller than its input: refused)
    out = ca.run(_frame(sim, P))
    with pytest.raises(ss.errors.EffectConfigError):
        cb.run(out.image)
    assert cb.stats["runs"] == 0
    # The SDK imported the capsule before it refused: DLPack hands a capsule to one consumer, once.
    assert out.image.consumed
    with pytest.raises(ExportError, match="already imported"):
        out.numpy()
    # The way round it the errors page gives: a copy (one import) as the input stays the program's when refused.
    y = ca.run(_frame(sim, P)).copy()
    with pytest.raises(ss.errors.EffectConfigError):
        cb.run(y)
    assert np.allclose(sim.download(y), 64 / 255, atol=1 / 255)
    text = " ".join((ROOT / "docs" / "errors.md").read_text().split())
    assert "used up" in text and "y = out.copy()" in text


@pytest.mark.parametrize("declared", [True, False], ids=["input_stream", "nothing declared"])
def test_a_run_the_sdk_refuses_leaves_the_counters_as_they_were_also_when_auto_copies_the_inputs(declared: bool) -> None:
    """(A real program's review: under ``auto`` with nothing declared, the copies' fence stayed counted, H1 1, after
    the SDK refused the run; ``streamsafe run``'s report showed it.)"""
    sim = SimBackend()
    P, S = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    sr = _effect(sim, 32, 16)  # (32x16 in and out: the SDK refuses 1x at quality HIGH)
    c = ss.StreamContract(sr, S, **({"input_stream": P} if declared else {}))
    before = dict(c.stats)
    x = sim.empty((3, 16, 32), np.float32)
    sim.fill(x, 0.5, stream=P)
    with warnings.catch_warnings(), pytest.raises(Exception, match="equals the input size"):  # (the SDK's own refusal)
        warnings.simplefilter("ignore")  # (HostWaitWarning, nothing declared)
        c.run(x)
    assert c.stats == before


def test_stream_safe_refuses_to_decorate_what_cannot_be_called() -> None:
    sim = SimBackend()
    with pytest.raises(ArgumentError, match=r"@stream_safe\(\.\.\.\) decorates a function, got 42 \(int\)"):
        ss.stream_safe(_effect(sim))(42)  # type: ignore[arg-type]
