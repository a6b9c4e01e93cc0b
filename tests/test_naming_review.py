"""The review's refusals: each bad value gets a StreamsafeError (or the CLI's one-line usage error) that names the
value, the rule and the fix. Streams and devices named to ``as_stream``, the model's own arguments, the profiles'
fields, the CLI's ``run -m`` and ``bench --warmup``, a plane-less frame's ``raw_plane``, and what docs/errors.md
quotes."""

from __future__ import annotations

import dataclasses
import importlib
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import profile as pr
from streamsafe.errors import ArgumentError, InputArrayError, ProfileError, StreamsafeError, StreamValueError
from streamsafe.sim import SimBackend
from streamsafe.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _one_line_error(capsys: pytest.CaptureFixture[str], command: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"streamsafe {command}: ") and "Traceback" not in captured.err
    return lines[0]


# -- as_stream: the backend ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [42, "sim", SimBackend, object()], ids=["int", "str", "a class", "object"])
@pytest.mark.parametrize("obj", [None, 0, 2], ids=["None", "0", "2"])
def test_as_stream_refuses_what_is_not_a_backend(obj: Any, backend: Any) -> None:
    with pytest.raises(ArgumentError, match=r"as_stream\(backend=\.\.\.\) needs a backend object, not .*Pass "
                                            r"streamsafe\.sim\.SimBackend\(\)"):
        ss.as_stream(obj, backend=backend)


def test_as_stream_refuses_a_non_backend_with_a_stream_too() -> None:
    stream = SimBackend().create_stream()
    with pytest.raises(ArgumentError, match="needs a backend object, not 42"):
        ss.as_stream(stream, backend=42)


def test_as_stream_takes_a_backend_given_explicitly() -> None:
    sim = SimBackend()
    assert ss.as_stream(None, backend=sim) == sim.legacy_stream(0)
    assert ss.as_stream(1, backend=sim).backend is sim


# -- as_stream: the device of a default stream ---------------------------------------------------------------------

BAD_DEVICES = [-1, 1, 99, True, 0.0, "0"]


@pytest.mark.parametrize("device", BAD_DEVICES, ids=repr)
@pytest.mark.parametrize("handle", [0, 1, np.int64(1)], ids=["0", "1", "np.int64(1)"])
def test_a_legacy_handle_on_a_device_the_model_lacks_is_refused_as_none_is(handle: Any, device: Any) -> None:
    sim = SimBackend()
    with pytest.raises(StreamValueError) as by_none:
        ss.as_stream(None, device=device, backend=sim)
    with pytest.raises(StreamValueError) as by_handle:
        ss.as_stream(handle, device=device, backend=sim)
    assert str(by_handle.value) == str(by_none.value)  # one check, one message
    assert "the legacy stream of device" in str(by_handle.value)


@pytest.mark.parametrize("device", BAD_DEVICES, ids=repr)
def test_the_per_thread_handle_on_a_device_the_model_lacks_is_refused(device: Any) -> None:
    sim = SimBackend()
    with pytest.raises(StreamValueError, match=r"the per-thread stream of device") as e:
        ss.as_stream(2, device=device, backend=sim)
    with pytest.raises(StreamValueError) as made:
        sim.create_stream(device=device)  # the model's own check: the same rule and fix
    assert str(e.value).split(": ", 1)[1] == str(made.value).split(": ", 1)[1]


def test_a_device_out_of_range_names_the_devices_and_the_fix() -> None:
    sim = SimBackend()
    with pytest.raises(StreamValueError, match=r"invalid stream 'the legacy stream of device 3': the model has 1 device\(s\), "
                                               r"numbered 0 to 0\. Pick one of them, or make the model with more: "
                                               r"SimBackend\(devices=4\)\.$"):
        ss.as_stream(1, device=3, backend=sim)
    with pytest.raises(StreamValueError, match=r"device -1': the model has 1 device\(s\), numbered 0 to 0\. Pick one of them\.$"):
        ss.as_stream(0, device=-1, backend=sim)  # (more devices would not make -1 one)


@pytest.mark.parametrize(("device", "fix"), [(True, "Pass the device as an int"), (1.0, "Pass device=1 as an int"),
                                             ("1", "Pass device=1 as an int"), ("x", "Pass the device as an int")], ids=repr)
def test_a_device_that_is_no_int_is_refused_with_the_int_to_pass(device: Any, fix: str) -> None:
    sim = SimBackend(devices=2)
    with pytest.raises(StreamValueError, match=rf"named by its number \(an int\), not a {type(device).__name__}\. {fix} \(0 to 1\)"):
        ss.as_stream(1, device=device, backend=sim)


def test_a_device_of_the_model_still_names_its_default_streams() -> None:
    sim = SimBackend(devices=2)
    assert ss.as_stream(1, device=1, backend=sim) == sim.legacy_stream(1)
    assert ss.as_stream(0, device=1, backend=sim).device == 1
    assert ss.as_stream(2, device=1, backend=sim).device == 1
    assert ss.as_stream(None, device=1, backend=sim) == sim.legacy_stream(1)


# -- the model's own arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "says"), [
    ({"on_race": "x"}, r"on_race='x' is invalid: it must be 'record' .* or 'raise' .*SimBackend\(on_race='raise'\)"),
    ({"on_race": None}, r"on_race=None is invalid"),
    ({"max_pending": 0}, r"max_pending=0 is invalid: .* an int of at least 1; leave it out for the default"),
    ({"max_pending": -3}, r"max_pending=-3 is invalid"),
    ({"max_pending": "a"}, r"max_pending='a' is invalid"),
    ({"max_pending": True}, r"max_pending=True is invalid"),
    ({"max_pending": 2.5}, r"max_pending=2\.5 is invalid"),
    ({"max_free_events": 0}, r"max_free_events=0 is invalid: .* an int of at least 1; leave it out for the default \(64\)"),
    ({"max_free_events": "8"}, r"max_free_events='8' is invalid"),
    ({"scheduler": "random", "seed": [1]}, r"seed=\[1\] is invalid: .* an int or None"),
    ({"scheduler": "random", "seed": 1.5}, r"seed=1\.5 is invalid"),
], ids=repr)
def test_simbackend_refuses_bad_arguments_with_argument_error(kw: dict[str, Any], says: str) -> None:
    with pytest.raises(ArgumentError, match=says):
        SimBackend(**kw)


def test_simbackend_takes_an_integral_max_pending() -> None:
    assert SimBackend(max_pending=np.int64(3)).max_pending == 3  # type: ignore[arg-type]
    assert type(SimBackend(max_pending=np.int64(3)).max_pending) is int  # type: ignore[arg-type]
    assert SimBackend(on_race="raise").on_race == "raise"


@pytest.mark.parametrize("value", ["yes", 1, None, np.bool_(True)], ids=repr)
def test_create_stream_takes_non_blocking_as_a_bool_only(value: Any) -> None:
    sim = SimBackend()
    with pytest.raises(ArgumentError, match=rf"create_stream\(non_blocking={re.escape(repr(value))}\): non_blocking must be "
                                            "True or False"):
        sim.create_stream(non_blocking=value)


def test_fill_download_and_copy_refuse_what_is_not_the_models() -> None:
    sim = SimBackend()
    x = sim.empty((2,))
    with pytest.raises(ArgumentError, match=r"fill: stream='s' \(str\) is not a stream of the model\. Pass one of its streams"):
        sim.fill(x, 1, stream="s")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"download: stream=0 \(int\) is not a stream"):
        sim.download(x, 0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"download: 5 \(int\) is not an array of the model: download takes a SimArray\. "
                                            r"Make one with sim\.empty"):
        sim.download(5)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"fill: .* is not an array of the model"):
        sim.fill(np.zeros(2), 1)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"copy: None \(NoneType\) is not an array of the model"):
        sim.copy(None)  # type: ignore[arg-type]
    other = SimBackend().empty((2,))
    for call in (lambda: sim.fill(other, 1), lambda: sim.download(other), lambda: sim.copy(other)):
        with pytest.raises(InputArrayError, match=r"memory of SimBackend"):
            call()
    sim.fill(x, 3, stream=sim.legacy_stream())
    assert sim.download(x).tolist() == [3, 3]
    assert sim.download(sim.copy(x)).tolist() == [3, 3]


# -- a frame that is one producer itself ---------------------------------------------------------------------------


def test_raw_plane_of_a_frame_with_no_planes_says_so(tmp_path: Path) -> None:
    pytest.importorskip("av")
    F = importlib.import_module("streamsafe.testing.fake_pynvvideocodec")  # (the package's name is a fixture's)

    sim = SimBackend()
    with ss.use_backend(sim), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clip = F.make_test_clip(str(tmp_path / "clip.mp4"), frames=2)
        stream = sim.create_stream(non_blocking=True)
        dec = F.SimpleDecoder(clip, cuda_stream=stream, output_color_type=F.OutputColorType.RGBP)
        with ss.stream_contract(dec, stream):
            frame = dec.get_batch_frames(1)[0]
            with pytest.raises(AttributeError, match=r"DecodedFrame frames have no planes: the frame is one DLPack producer "
                                                     r"\(torch\.from_dlpack\(frame\), frame\.torch\(\)\)"):
                frame.raw_plane(0)
            with pytest.raises(AttributeError, match=r"DecodedFrame frames have no planes"):
                frame.planes  # noqa: B018 (the property's own message, not the SDK frame's bare one)


# -- profiles ------------------------------------------------------------------------------------------------------

BASE = {"name": "x.C", "classes": ("m.C",), "calls": ("process",)}


def test_a_keyword_that_is_no_field_is_a_profile_error() -> None:
    with pytest.raises(ProfileError, match=r"profile 'x\.C': bogus=1 is not a field of EffectProfile\. Drop it, or give one "
                                           r"of EffectProfile's fields: name, classes, calls, ") as e:
        pr.EffectProfile(**BASE, bogus=1)
    assert (e.value.field, e.value.value) == ("bogus", 1)
    with pytest.raises(ProfileError, match=r"call=\('run',\) is not a field of PoolProfile\. Did you mean calls=\?"):
        pr.PoolProfile(name="x.D", classes=("m.D",), call=("run",))
    with pytest.raises(ProfileError, match=r"input_names=1 is set by EffectProfile itself"):
        pr.EffectProfile(**BASE, input_names=1)
    with pytest.raises(ProfileError, match=r"bogus=1 is not a field of EffectProfile"):
        dataclasses.replace(pr.EffectProfile(**BASE), bogus=1)


@pytest.mark.parametrize("missing", ["name", "classes", "calls"])
def test_a_required_field_left_out_is_a_profile_error(missing: str) -> None:
    kw = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ProfileError, match=rf"{missing}=<not given> is required: EffectProfile has no default for it\. "
                                           r"(Name|Give)") as e:
        pr.EffectProfile(**kw)
    assert e.value.field == missing
    assert e.value.profile == ("x.C" if missing != "name" else "<unnamed EffectProfile>")


def test_fields_given_twice_or_too_many_by_position_are_profile_errors() -> None:
    with pytest.raises(ProfileError, match=r"calls=\('y',\) is given twice, by position and by keyword"):
        pr.EffectProfile("x.C", ("m.C",), ("process",), calls=("y",))  # type: ignore[misc]
    with pytest.raises(ProfileError, match=r"are 40 values given by position; PoolProfile has \d+ fields\. Give the fields by keyword"):
        pr.PoolProfile(*range(40))  # type: ignore[arg-type]
    assert pr.EffectProfile("x.C", ("m.C",), ("process",)).calls == ("process",)  # by position still works


@pytest.mark.parametrize("emulation", [":", "m:", ":EMULATION", "a.:X", "a:b:c", "a b:X", "a:b.c"])
def test_emulation_must_name_a_module_and_an_object(emulation: str) -> None:
    with pytest.raises(ProfileError, match=r"is not 'module:name' \(an importable module's dotted name, a colon"):
        pr.EffectProfile(**BASE, emulation=emulation)


def test_emulation_of_the_builtin_profiles_still_passes() -> None:
    assert pr.EffectProfile(**BASE, emulation="streamsafe.testing.fake_nvvfx:EMULATION").emulation
    for p in pr.profiles():
        assert p.emulation is None or ":" in p.emulation


def test_a_profile_naming_no_class_is_refused_when_registered_without_fallback() -> None:
    before = pr.profiles()
    empty = pr.EffectProfile(**{**BASE, "classes": ()})
    with pytest.raises(ProfileError, match=r"classes=\(\) is empty: registered so, the profile would describe no class and "
                                           r"guard nothing\. Name at least one class: .* or register it with fallback=True"):
        pr.register(empty)
    assert pr.profiles() == before


# -- the CLI -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["", " "])
def test_run_with_an_empty_module_is_a_usage_error(module: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fake-nvvfx", "-m", module]) == 2
    line = _one_line_error(capsys, "run")
    assert f"-m {module!r}: the module name is empty; give the module to run as a script, e.g. -m mypackage.pipeline" in line


def test_run_with_an_empty_module_and_program_arguments_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-m", "", "arg"]) == 2
    assert "the module name is empty" in _one_line_error(capsys, "run")


@pytest.mark.parametrize(("value", "says"), [("-5", "got -5: give 0 or more"), ("x", "got 'x': give a whole number, 0 or more")])
def test_bench_warmup_below_zero_is_an_argparse_error_with_the_fix(value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--backend", "sim", "--warmup", value, "--quiet"])
    assert exc.value.code == 2
    assert f"argument --warmup: expected a non-negative integer, {says}" in capsys.readouterr().err


def test_non_negative_int_takes_zero() -> None:
    from streamsafe.tools.cli import non_negative_int

    assert non_negative_int("0") == 0 and non_negative_int("20") == 20


def test_the_harness_says_the_fix_for_a_negative_warmup() -> None:
    from streamsafe.bench import run_bench, sim_factory

    with pytest.raises(ValueError, match=r"warmup must be a non-negative integer, got -1: give 0 or more"):
        run_bench(sim_factory, ["a"], ["auto"], frames=4, warmup=-1, block=4, backend="sim", timed=False)


# -- docs/errors.md says what the code does ------------------------------------------------------------------------


def _errors_page() -> str:
    return " ".join((ROOT / "docs" / "errors.md").read_text().split())


def test_the_errors_page_quotes_the_strategy_error_whole() -> None:
    with pytest.raises(ss.errors.StrategyError) as e:
        ss.Strategy("fast")
    assert f"`StrategyError: {e.value}`" in _errors_page()
    assert "(in any case, spaces around it ignored)" in _errors_page()


def test_the_errors_page_says_an_unguarded_change_outside_sanitize_mode_is_a_runtime_warning() -> None:
    """UnguardedChangeError is an exception class; outside sanitize mode its text comes as a RuntimeWarning, which the
    filter the page gives silences."""
    from streamsafe.testing import VideoSuperRes

    assert not issubclass(ss.errors.UnguardedChangeError, Warning)
    text = _errors_page()
    row = text[text.index("| `UnguardedChangeError` |"):].split("\n", 1)[0]
    assert "a `RuntimeWarning` with the same message" in row
    found = re.search(r"`(warnings\.filterwarnings\([^`]*RuntimeWarning\))`", text)
    assert found, "the page gives no filter for the warning"

    sim = SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 32, 32
    sr.load()
    reader = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, sim.legacy_stream(), input_stream=sim.legacy_stream())
    x = sim.array(np.zeros((3, 16, 16), np.float32))
    out = c.run(x)
    sim.copy(sim.from_dlpack(out.image, stream=reader), reader)
    VideoSuperRes.output_width.fset(sr, 64)  # behind the contract's back, while the copy may still read
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        exec(found.group(1), {"warnings": warnings})
        c.run(x)
    assert [w for w in seen if "reconfigured directly" in str(w.message)] == []
    VideoSuperRes.output_width.fset(sr, 32)
    out = c.run(x)
    sim.copy(sim.from_dlpack(out.image, stream=reader), reader)
    VideoSuperRes.output_width.fset(sr, 64)
    with pytest.warns(RuntimeWarning, match=r"^VideoSuperRes was reconfigured directly between runs") as warned:
        c.run(x)
    assert not any(isinstance(w.message, StreamsafeError) for w in warned)
