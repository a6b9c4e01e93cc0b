"""StreamContract on the model: plans, the three ways in, safe outputs, errors, H5/H6/H7/H9."""

from __future__ import annotations

import itertools
import sys
import warnings
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.plan import plan_fences
from streamsafe.streams import StreamKind
from streamsafe.testing import ImageEncoding, TrueHDR, VideoSuperRes
from streamsafe.testing import _kernels as K


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial", devices=2)


def make_sr(sim: ss.sim.SimBackend, **kw: Any) -> VideoSuperRes:
    sr = VideoSuperRes(backend=sim, **kw)
    sr.output_width, sr.output_height = 32, 32
    sr.load()
    return sr


def frame(sim: ss.sim.SimBackend, seed: int = 0, stream: ss.Stream | None = None) -> Any:
    data = np.random.default_rng(seed).random((3, 16, 16), dtype=np.float32)
    arr = sim.empty((3, 16, 16), np.float32, name=f"frame{seed}")
    sim.launch(stream or sim.current_stream(), "producer.write", lambda: np.copyto(arr.buffer.data, data), writes=[arr])
    return arr, data


def expected(data: np.ndarray) -> np.ndarray:
    return K.to_rgb8(np, K.resize_bilinear(np, data, 32, 32)).astype(np.float32) / np.float32(255)


# -- plans -----------------------------------------------------------------------------------


def test_everything_on_the_legacy_stream_needs_no_fence(sim: ss.sim.SimBackend) -> None:
    legacy = sim.legacy_stream()
    for strategy in ("auto", "event", "async", "stream", "device"):
        plan = ss.StreamContract(make_sr(sim), legacy, strategy=strategy).plan
        copy = plan.copy_stream  # (auto, no input_stream: the inputs' copies are ordered, and waited for)
        assert (copy is not None) == (strategy == "auto"), strategy
        fences = [f for f in plan.fences if f.action not in ("sdk-blocking", "shadow-stream", "protect-input", "copy-input")
                  and copy not in (f.waiter, f.signaller)]
        assert fences == [], (strategy, str(plan))
    plan = ss.StreamContract(make_sr(sim), legacy, input_stream=legacy).plan
    # auto (the input's writer declared): stream 0 waits for itself, no fence; the input is still kept from
    # reuse while the run reads it (its memory goes back to the pool of the stream that allocated it)
    [h12] = plan.fences
    assert plan.non_blocking and (h12.hazard, h12.action, h12.signaller) == ("H12", "protect-input", legacy)
    [h6] = plan.on_release
    assert (h6.hazard, h6.action) == ("H6", "host-wait")


KINDS = ["legacy", "per-thread", "blocking", "non-blocking"]


def stream_of(sim: ss.sim.SimBackend, kind: str) -> ss.Stream:
    return {"legacy": sim.legacy_stream, "per-thread": sim.per_thread_stream}.get(kind, lambda: sim.create_stream(non_blocking=kind == "non-blocking"))()


@pytest.mark.parametrize("p,s,c", list(itertools.product(KINDS, repeat=3)))
def test_event_plan_has_no_host_wait_except_h6(sim: ss.sim.SimBackend, p: str, s: str, c: str) -> None:
    for encoding in (ImageEncoding.RGB8, ImageEncoding.RGB10A2):
        contract = ss.StreamContract(
            make_sr(sim, image_encoding=encoding), stream_of(sim, s), strategy="event",
            input_stream=stream_of(sim, p), consumer_stream=stream_of(sim, c),
        )
        plan = contract.plan
        assert plan.host_waits == ()
        assert all(f.action in ("device-wait", "sdk-blocking") for f in plan.fences), str(plan)
        assert [f.hazard for f in plan.on_release] == ["H6"]


@pytest.mark.parametrize("strategy", ["auto", "event", "async", "stream", "device"])
def test_inputs_are_never_ordered_by_a_host_wait(sim: ss.sim.SimBackend, strategy: str) -> None:
    producer, sdk = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    plan = ss.StreamContract(make_sr(sim), sdk, strategy=strategy, input_stream=producer).plan
    h1 = [f for f in plan.fences if f.hazard == "H1"]
    assert h1 and all(f.action == "device-wait" and not f.blocks_host for f in h1), str(plan)


def test_fences_only_where_kinds_leave_an_edge_open(sim: ss.sim.SimBackend) -> None:
    blocking, legacy = sim.create_stream(), sim.legacy_stream()
    plan = plan_fences(ss.Strategy.EVENT, sdk=blocking, conversion=legacy, consumer=blocking, producer=blocking)
    assert plan.fences == ()  # stream 0 and a blocking stream order each other implicitly
    nb = sim.create_stream(non_blocking=True)
    plan = plan_fences(ss.Strategy.EVENT, sdk=nb, conversion=legacy, consumer=nb, producer=nb)
    # the copy on the SDK stream is done before the next conversion (the SDK's host wait), and the SDK
    # stream waited for the conversion at the import: no H5 fence of its own
    assert {(f.hazard, f.action) for f in plan.fences} == {("H2", "sdk-blocking"), ("H3", "device-wait")}
    other = sim.create_stream(non_blocking=True)
    plan = plan_fences(ss.Strategy.EVENT, sdk=nb, conversion=legacy, consumer=other, producer=nb)
    assert {(f.hazard, f.when, f.waiter, f.signaller) for f in plan.fences if f.hazard == "H5"} == {
        ("H5", "before next run", legacy, other), ("H5", "before next run", nb, other), ("H5", "before next run", nb, legacy),
    }
    plan = plan_fences(ss.Strategy.ASYNC, sdk=nb, conversion=legacy, consumer=nb, producer=nb, shadow=sim.create_stream())
    assert any(f.hazard == "H5" and f.waiter == legacy and f.signaller == nb for f in plan.fences)  # no host wait there


def test_auto_picks_async_for_a_non_blocking_sdk_stream_and_says_why(sim: ss.sim.SimBackend) -> None:
    s = sim.create_stream(non_blocking=True)
    plan = ss.StreamContract(make_sr(sim), s, input_stream=s).plan
    assert plan.strategy is ss.Strategy.ASYNC and plan.non_blocking
    assert plan.run_stream.kind is StreamKind.BLOCKING and "shadow stream" in plan.reason
    assert "strategy=auto -> async" in str(plan)


@pytest.mark.parametrize("kind", ["non-blocking", "blocking", "legacy"])
def test_auto_copies_the_inputs_when_no_input_stream_is_declared_and_says_why(sim: ss.sim.SimBackend, kind: str) -> None:
    """Without ``input_stream=`` an undeclared stream may write the input once ``run()`` returns (the vendor's
    recipe synchronises it before the call): ``auto`` hands the SDK copies made on a stream of its own, waits on
    the host for the copies only, and says how to drop them."""
    fx = TrueHDR(backend=sim)
    fx.load()
    hdr = ss.StreamContract(fx, sim.create_stream(non_blocking=True)).plan  # (no conversion stage either)
    for plan in (ss.StreamContract(make_sr(sim), stream_of(sim, kind)).plan, hdr):
        assert plan.non_blocking and plan.copy_stream is not None, str(plan)
        assert [f.signaller for f in plan.host_waits] == [plan.copy_stream]
        waits = [(f.when, f.waiter, f.signaller) for f in plan.fences if f.action == "device-wait"]
        assert ("before run", plan.copy_stream, plan.producer) in waits  # the copy reads the written input
        assert ("after input copy", plan.run_stream, plan.copy_stream) in waits  # the SDK reads the finished copy
        assert "declare input_stream=" in plan.reason.lower()
        assert "input copied on" in str(plan) and "Q=" in str(plan)


def test_plans_compare_equal(sim: ss.sim.SimBackend) -> None:
    s = sim.create_stream(non_blocking=True)
    a = plan_fences(ss.Strategy.EVENT, sdk=s, conversion=sim.legacy_stream(), consumer=s, producer=s)
    b = plan_fences(ss.Strategy.EVENT, sdk=s, conversion=sim.legacy_stream(), consumer=s, producer=s)
    assert a == b and str(a) == str(b)


# -- strategies: errors ---------------------------------------------------------------------------


def test_unknown_strategy(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    with pytest.raises(ss.errors.StrategyError, match=r"strategy 'fastest' cannot be used: it is not one of 'auto', 'event'") as info:
        ss.stream_contract(sr, strategy="fastest")
    assert isinstance(info.value, ValueError)
    assert sr.is_loaded and sr.runs == 0


def test_none_needs_opt_in(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.StrategyError, match="pass allow_none=True"):
        ss.StreamContract(make_sr(sim), strategy="none")
    assert ss.StreamContract(make_sr(sim), strategy="NONE", allow_none=True).strategy is ss.Strategy.NONE


def test_async_refused_where_unsound(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.StrategyError, match="not the legacy stream.*per-thread.*Use strategy='event'"):
        ss.StreamContract(make_sr(sim), strategy="async", conversion_stream=sim.per_thread_stream())
    # auto falls back to event, which is sound there
    plan = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True), conversion_stream=sim.per_thread_stream()).plan
    assert plan.strategy is ss.Strategy.EVENT and not plan.non_blocking


def test_stream_of_another_device(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.DeviceMismatchError, match="is on CUDA device 1, but device 0 is required"):
        ss.StreamContract(make_sr(sim), sim.create_stream(device=1))


def test_closed_effect(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    sr.close()
    with pytest.raises(ss.errors.EffectStateError, match="closed"):
        ss.StreamContract(sr)
    sr2 = make_sr(sim)
    c = ss.StreamContract(sr2)
    c.close()
    with pytest.raises(ss.errors.EffectStateError, match=r"run\(\) cannot run: the effect is closed"):
        c.run(frame(sim)[0])


def test_bad_input_changes_nothing(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True))
    ok = c.run(frame(sim)[0])
    fences = dict(c.stats)
    with pytest.raises(ss.errors.InputArrayError, match=r"not CUDA \(2\)"):
        c.run(np.zeros((3, 16, 16), np.float32))
    with pytest.raises(ss.errors.InputArrayError, match="on CUDA device 1 but the effect runs on device 0"):
        c.run(sim.array(np.zeros((3, 16, 16), np.float32), device=1))
    with pytest.raises(ss.errors.InputArrayError, match="has no __dlpack__"):
        c.run("frame.png")
    assert c.stats == fences and sr.runs == 1
    ok.image.check_importable()  # the previous output is still current


# -- another model's streams and arrays ------------------------------------------------------------


def test_a_stream_of_another_model_is_refused(sim: ss.sim.SimBackend) -> None:
    """Two models number their streams alike: another model's stream named an unrelated stream of the
    effect's (it was taken as the contract's SDK stream and aliased its shadow stream)."""
    other = ss.sim.SimBackend()
    sim.create_stream(non_blocking=True)
    foreign = other.create_stream(non_blocking=True)
    sr = make_sr(sim)
    for kw in ({"stream": foreign}, {"input_stream": foreign}, {"consumer_stream": foreign}):
        with pytest.raises(ss.errors.StreamValueError, match=r"it is a stream of SimBackend.*not of the backend in use.*Create the stream with the effect's backend"):
            ss.StreamContract(sr, **kw)
    out = ss.StreamContract(sr, sim.create_stream(non_blocking=True)).run(sim.empty((3, 16, 16), np.float32))
    with pytest.raises(ss.errors.StreamValueError, match="another stream there"):
        out.record_stream(foreign)
    assert sr.runs == 1


def test_the_default_streams_of_another_model_are_the_same_streams(sim: ss.sim.SimBackend) -> None:
    """The legacy and per-thread streams name the same stream in every model: accepted, mapped to the effect's."""
    other = ss.sim.SimBackend()
    sr = make_sr(sim)
    for stream in (other.legacy_stream(), other.per_thread_stream()):
        c = ss.StreamContract(sr, stream)
        assert c.plan.sdk == stream and c.plan.sdk.backend is sim
        out = c.run(sim.empty((3, 16, 16), np.float32))
        assert out.numpy().shape == (3, 32, 32)
    assert sim.races == []


@pytest.mark.parametrize("declared", [False, True])
def test_an_array_of_another_model_is_refused_before_the_run(sim: ss.sim.SimBackend, declared: bool) -> None:
    other = ss.sim.SimBackend()
    sr = make_sr(sim)
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, s, input_stream=s if declared else None)
    out = c.run(sim.empty((3, 16, 16), np.float32))
    fences = dict(c.stats)
    foreign = other.empty((3, 16, 16), np.float32)
    with pytest.raises(ss.errors.InputArrayError, match=r"input SimArray.*memory of SimBackend.*Allocate it with the effect's backend"):
        c.run(foreign)
    assert dict(c.stats) == fences  # refused before any fence
    with pytest.raises(ss.errors.InputArrayError, match=r"input_array SimArray.*memory of SimBackend"):
        sr.run(foreign)  # the emulated SDK itself, unguarded
    assert sr.runs == 1 and out.numpy().shape == (3, 32, 32)  # the effect and its output as they were


def test_an_effect_on_a_device_the_model_lacks_is_refused_clearly() -> None:
    sr = VideoSuperRes(backend=ss.sim.SimBackend(), device=1)
    with pytest.raises(ss.errors.StreamValueError, match=r"the legacy stream of device 1.*the model has 1 device\(s\).*SimBackend\(devices=2\)"):
        ss.StreamContract(sr)


# -- the three ways in ---------------------------------------------------------------------------


def pipeline(sim: ss.sim.SimBackend, run: Any, consumer: ss.Stream, frames: int = 3) -> list[tuple[Any, np.ndarray]]:
    copies = []
    for i in range(frames):
        arr, data = frame(sim, i)
        out = run(arr)
        view = sim.from_dlpack(out.image, stream=consumer)  # like torch.from_dlpack(out.image) on C
        copies.append((sim.copy(view, consumer, name="consumer.copy"), expected(data)))
    return copies


def check(sim: ss.sim.SimBackend, copies: list[tuple[Any, np.ndarray]]) -> None:
    sim.synchronize_device()
    assert sim.races == [], [str(r) for r in sim.races]
    for copy, want in copies:
        np.testing.assert_array_equal(copy.numpy(), want)


def test_with_block_guards_plain_run_and_restores(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    s, c_stream = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    with ss.stream_contract(sr, s) as c:
        copies = pipeline(sim, sr.run, c_stream)
        assert type(sr).__name__ == "VideoSuperRes" and isinstance(sr, VideoSuperRes)
    check(sim, copies)
    assert type(sr) is VideoSuperRes and "_streamsafe_contract" not in sr.__dict__
    assert c.stats["runs"] == 3
    raw = sr.run(frame(sim, 9)[0])  # unguarded again: the SDK's raw output
    assert not isinstance(raw, ss.SafeOutput)


def test_with_block_restores_on_error(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    with pytest.raises(KeyError), ss.stream_contract(sr):
        raise KeyError("boom")
    assert type(sr) is VideoSuperRes


def test_direct_contract(sim: ss.sim.SimBackend) -> None:
    c_stream = sim.create_stream(non_blocking=True)
    contract = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True), strategy="event")
    check(sim, pipeline(sim, contract.run, c_stream))


def test_decorator_takes_the_stream_at_each_call(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c_stream = sim.create_stream(non_blocking=True)

    @ss.stream_safe(sr)
    def upscale(arr: Any) -> Any:
        return sr.run(arr)

    streams = [sim.create_stream(non_blocking=True), sim.create_stream(), sim.legacy_stream()]
    copies = []
    for s in streams:
        with sim.use_stream(s):
            copies += pipeline(sim, upscale, c_stream, frames=1)
    check(sim, copies)
    assert upscale.contract.stats["runs"] == 3 and type(sr) is VideoSuperRes


def test_nested_guards_share_the_effect_and_the_innermost_takes_plain_calls(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c_stream = sim.create_stream(non_blocking=True)
    with ss.stream_contract(sr, strategy="event") as outer:
        inner = ss.StreamContract(sr, sim.create_stream(non_blocking=True))  # made while a block is open: no recursion
        with inner:
            copies = pipeline(sim, sr.run, c_stream, frames=2)
        copies += pipeline(sim, sr.run, c_stream, frames=1)
    check(sim, copies)
    assert (inner.stats["runs"], outer.stats["runs"]) == (2, 1)
    assert inner.ledger is outer.ledger


# -- safe outputs ----------------------------------------------------------------------------------


def test_output_keeps_sdk_fields_and_speaks_dlpack(sim: ss.sim.SimBackend) -> None:
    c = ss.StreamContract(make_sr(sim))
    out = c.run(frame(sim)[0])
    assert isinstance(out.raw, ss.testing.VideoSuperResOutput)
    assert out.image.__dlpack_device__() == (2, 0)
    assert "SafeImage" in repr(out.image)


def test_second_import_is_a_buffer_error(sim: ss.sim.SimBackend) -> None:
    out = ss.StreamContract(make_sr(sim)).run(frame(sim)[0])
    sim.from_dlpack(out.image)
    with pytest.raises(BufferError, match="already imported; a DLPack capsule can be consumed once"):
        sim.from_dlpack(out.image)


def test_stale_output_after_next_run_or_close(sim: ss.sim.SimBackend) -> None:
    c = ss.StreamContract(make_sr(sim))
    first = c.run(frame(sim, 1)[0])
    c.run(frame(sim, 2)[0])
    with pytest.raises(ss.errors.StaleOutputError, match=r"came from run #1.*now at #2.*Copy each output before the next run"):
        sim.from_dlpack(first.image)
    last = c.run(frame(sim, 3)[0])
    c.close()
    with pytest.raises(ss.errors.StaleOutputError):
        last.numpy()


def test_copy_true_and_wrong_device_are_refused(sim: ss.sim.SimBackend) -> None:
    out = ss.StreamContract(make_sr(sim)).run(frame(sim)[0])
    with pytest.raises(BufferError, match="copy=True"):
        out.image.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot be exported"):
        out.image.__dlpack__(dl_device=(1, 0))
    for bad in (5, "cuda", (2,), "20", b"\x02\x00", (2.9, 0.4), (float("inf"), 0), ("2", "0"), (True, 0)):
        with pytest.raises(ss.errors.ExportError, match="not a DLPack device"):
            out.image.__dlpack__(dl_device=bad)
    assert not out.image.consumed


def test_numpy_helper(sim: ss.sim.SimBackend) -> None:
    arr, data = frame(sim)
    out = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True)).run(arr)
    np.testing.assert_array_equal(out.numpy(), expected(data))
    assert sim.races == []


def test_jax_adapter_protocol() -> None:
    capsule = object()
    adapter = ss.JaxDLPackAdapter(capsule, device_id=1)
    assert adapter.__dlpack_device__() == (2, 1)
    assert adapter.__dlpack__(stream=5, max_version=(1, 0)) is capsule
    with pytest.raises(BufferError, match="consumed once"):
        adapter.__dlpack__()
    with pytest.raises(BufferError, match="copy=False"):
        ss.JaxDLPackAdapter(capsule).__dlpack__(copy=True)
    assert ss.JaxDLPackAdapter(capsule).__dlpack_device__() == (2, 0)  # (a raw capsule: the vendor's default)


def test_jax_adapter_takes_a_contract_outputs_own_device() -> None:
    """An output on device 1 given to the adapter with its default device_id: before, the adapter said
    device 0 and JAX would have read device 1's memory as device 0's, unfenced (found by a review helper)."""
    sim = ss.sim.SimBackend(scheduler="adversarial", devices=2)
    with sim.device(1):
        sr = make_sr(sim, device=1)
        out = ss.StreamContract(sr, sim.create_stream(non_blocking=True)).run(sim.array(np.zeros((3, 16, 16), np.float32), device=1))
    assert ss.JaxDLPackAdapter(out.image).__dlpack_device__() == (2, 1)
    assert ss.JaxDLPackAdapter(out, device_id=1).__dlpack_device__() == (2, 1)
    with pytest.raises(ss.errors.DeviceMismatchError) as e:
        ss.JaxDLPackAdapter(out.image, device_id=0)
    assert "is on CUDA device 1, but device 0 is required. Leave device_id out" in str(e.value)
    assert sim.from_dlpack(out.image).buffer.device == 1  # (the refused adapter consumed nothing)


@pytest.mark.parametrize("helper,framework", [("torch", "torch"), ("cupy", "cupy"), ("jax", "jax"), ("view", "torch")])
def test_a_copy_helper_without_its_framework_says_what_to_install(
    sim: ss.sim.SimBackend, monkeypatch: pytest.MonkeyPatch, helper: str, framework: str
) -> None:
    """(It raised a bare ModuleNotFoundError.) An ImportError still, so code that catches one keeps working."""
    for name in ("torch", "cupy", "jax", "jax.numpy"):
        monkeypatch.setitem(sys.modules, name, None)  # None: "cannot be imported", whatever is installed
    c = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True))
    out = c.run(sim.empty((3, 16, 16), np.float32))
    call = {"torch": out.torch, "cupy": out.cupy, "jax": out.jax, "view": lambda: out.torch(copy=False)}[helper]
    with pytest.raises(ss.errors.FrameworkUnavailableError, match=rf"needs {framework}, which cannot be imported.*pip install 'streamsafe\[.*out.numpy\(\)") as info:
        call()
    assert isinstance(info.value, ImportError) and info.value.name == framework
    assert out.numpy().shape == (3, 32, 32)  # the output untouched


# -- H5, H6, H7 through the contract ------------------------------------------------------------


def test_configure_waits_for_copies_before_the_buffer_goes(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c_stream = sim.create_stream(non_blocking=True)
    arr, data = frame(sim)
    with ss.stream_contract(sr, sim.legacy_stream()) as c:
        out = sr.run(arr)
        copy = sim.copy(sim.from_dlpack(out.image, stream=c_stream), c_stream, name="consumer.copy")
        waits = c.stats["host_waits"]
        sr.output_width = 64  # guarded: waits for the copy (H6), then resizes
        assert c.stats["host_waits"] - waits == 2  # the copy's stream, and the current stream (a zero-copy view escaped)
    np.testing.assert_array_equal(sim.download(copy, c_stream), expected(data))
    assert sim.races == []
    assert sr.output_width == 64


def test_direct_reconfiguration_between_runs_is_reported(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c_stream = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, sim.legacy_stream())
    out = c.run(frame(sim)[0])
    sim.copy(sim.from_dlpack(out.image, stream=c_stream), c_stream)
    VideoSuperRes.output_width.fset(sr, 64)  # behind the contract's back
    with pytest.warns(RuntimeWarning, match=r"reconfigured directly between runs \(output_width 32 -> 64\)"):
        c.run(frame(sim, 1)[0])
    c2 = ss.StreamContract(make_sr(sim), sim.legacy_stream())
    out = c2.run(frame(sim)[0])
    sim.copy(sim.from_dlpack(out.image, stream=c_stream), c_stream)
    VideoSuperRes.output_width.fset(c2.effect, 64)
    with ss.sanitize(sim), pytest.raises(ss.errors.UnguardedChangeError, match="Change it through the contract"):
        c2.run(frame(sim, 1)[0])


def test_leaving_the_block_protects_copies_from_unguarded_use(sim: ss.sim.SimBackend) -> None:
    sr = make_sr(sim)
    c_stream = sim.create_stream(non_blocking=True)
    arr, data = frame(sim)
    with ss.stream_contract(sr, sim.legacy_stream()):
        out = sr.run(arr)
        copy = sim.copy(sim.from_dlpack(out.image, stream=c_stream), c_stream, name="consumer.copy")
    sr.run(frame(sim, 5)[0], stream_ptr=sim.create_stream(non_blocking=True).ptr)  # unguarded, other stream
    np.testing.assert_array_equal(sim.download(copy, c_stream), expected(data))
    assert not [r for r in sim.races if "consumer.copy" in (r.first.op, r.second.op)]


def test_unfenced_the_same_pipeline_races(sim: ss.sim.SimBackend) -> None:
    c_stream = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True), strategy="none", allow_none=True)
    copies = pipeline(sim, lambda a: c.run(a, non_blocking=True), c_stream)
    sim.synchronize_device()
    assert sim.races
    assert any(not np.array_equal(copy.numpy(), want) for copy, want in copies)


def test_sanitize_on_the_model_raises_at_the_racing_access(sim: ss.sim.SimBackend) -> None:
    c_stream = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True), strategy="none", allow_none=True)
    with ss.sanitize(sim), pytest.raises(ss.errors.RaceError, match="'VideoSuperRes.transfer'.*not ordered after write by 'producer.write'"):
        pipeline(sim, lambda a: c.run(a, non_blocking=True), c_stream, frames=1)
    assert sim.on_race == "record"


def test_true_hdr_contract(sim: ss.sim.SimBackend) -> None:
    hdr = TrueHDR(backend=sim)
    hdr.load()
    c_stream = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(hdr, sim.create_stream())
    assert c.conversion_stream is None and {f.hazard for f in c.plan.fences} <= {"H12", "H4", "H5", "H1"}
    arr, data = frame(sim)
    out = c.run(arr)
    copy = sim.copy(sim.from_dlpack(out.image, stream=c_stream), c_stream)
    want = K.tone_map_hdr(np, data, contrast=100, saturation=100, middle_gray=50, luminance=650)
    np.testing.assert_array_equal(sim.download(copy, c_stream), want)
    assert sim.races == []


def test_seed_torch_recipe_on_the_model(sim: ss.sim.SimBackend) -> None:
    """The vendor's documented recipe, with torch spelled as the model, inside a contract and with no device sync."""
    sr = make_sr(sim)
    stream = sim.create_stream(non_blocking=True)  # a torch side stream
    with sim.use_stream(stream), ss.stream_contract(sr, stream):
        arr, data = frame(sim)
        result = sr.run(arr, stream_ptr=stream.ptr, non_blocking=False)
        output = sim.copy(sim.from_dlpack(result.image))  # torch.from_dlpack(result.image).clone()
    np.testing.assert_array_equal(output.numpy(), expected(data))
    assert sim.races == []


def test_seed_jax_adapter_forwards_to_a_safe_image(sim: ss.sim.SimBackend) -> None:
    c_stream = sim.create_stream(non_blocking=True)
    sr = make_sr(sim)
    with ss.stream_contract(sr, sim.create_stream(non_blocking=True)):
        arr, data = frame(sim)
        result = sr.run(arr)
        adapter = ss.JaxDLPackAdapter(result.image, device_id=0)  # the vendor's documented code, unchanged
        view = sim.from_dlpack(adapter, stream=c_stream)  # JAX passes its stream to __dlpack__
        copy = sim.copy(view, c_stream)
    np.testing.assert_array_equal(sim.download(copy, c_stream), expected(data))
    assert sim.races == [] and result.image.consumed


def test_warning_free_normal_use(sim: ss.sim.SimBackend) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = ss.StreamContract(make_sr(sim), input_stream=sim.current_stream())
        for i in range(3):
            c.run(frame(sim, i)[0]).numpy()


def test_a_kept_host_wait_is_said_once_per_contract_naming_the_declaration(sim: ss.sim.SimBackend) -> None:
    """Nothing declared: auto copies the inputs and waits for the copies on the host, and says so once per
    contract, at the user's line, naming input_stream=; a second contract says it again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = ss.StreamContract(make_sr(sim))
        for i in range(5):
            c.run(frame(sim, i)[0]).numpy()
        said = [w for w in caught if issubclass(w.category, ss.errors.HostWaitWarning)]
        assert len(said) == 1 and said[0].filename == __file__
        text = str(said[0].message)
        assert "input_stream=P" in text and "VideoSuperRes" in text and "host wait" in text
        assert c.stats["input_copies"] == 5 and c.stats["host_waits"] == 5
        ss.StreamContract(make_sr(sim)).run(frame(sim, 0)[0]).numpy()
        assert len([w for w in caught if issubclass(w.category, ss.errors.HostWaitWarning)]) == 2
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=ss.errors.HostWaitWarning)
        warnings.filterwarnings("ignore", category=ss.errors.HostWaitWarning)  # (the filter a user adds)
        ss.StreamContract(make_sr(sim)).run(frame(sim, 0)[0]).numpy()


def test_an_input_the_sdk_rejects_keeps_the_previous_output_valid(sim: ss.sim.SimBackend) -> None:
    c = ss.StreamContract(make_sr(sim))
    arr, data = frame(sim)
    out = c.run(arr)
    with pytest.raises(ss.errors.EffectConfigError, match="RGB8 input must be float32"):
        c.run(sim.array(np.zeros((3, 16, 16), np.float64)))
    np.testing.assert_array_equal(out.numpy(), expected(data))


@pytest.mark.parametrize(("strategy", "declared", "copies"), [("auto", False, True), ("auto", True, False), ("event", False, False)])
def test_a_contract_tells_its_steady_frames_whether_auto_may_copy_the_inputs(
        sim: ss.sim.SimBackend, strategy: str, declared: bool, copies: bool) -> None:
    """Where ``auto`` may copy the inputs (nothing declared), a torch input's strides are a steady fact
    (``tests/test_steady_layout.py``)."""
    c = ss.StreamContract(make_sr(sim), sim.create_stream(non_blocking=True), strategy=strategy,
                          input_stream=sim.current_stream() if declared else None)
    assert c.steady.copies is copies


def test_a_plan_reason_keeps_a_names_capitals(sim: ss.sim.SimBackend) -> None:
    from streamsafe.testing import TrueHDR

    hdr = TrueHDR(backend=sim)
    hdr.load()
    text = str(ss.StreamContract(hdr, sim.create_stream(non_blocking=True)).plan)  # (auto, nothing declared: the copies' reason)
    assert "RGB10A2" in text and "rGB10A2" not in text
