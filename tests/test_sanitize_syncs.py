"""Sanitize mode sees the program's own host synchronisations and event calls (streamsafe.sim.sync_hooks),
tested without a GPU: torch, CuPy and cuda.bindings are stand-ins (tests/_framework_standins.py) put in
``sys.modules``, their streams named by a fake driver backend, and the mirror is driven with the calls a GPU
run of the vendor's input recipe makes (recorded on an H200 under sanitize mode, event strategy). The same
recipe on the GPU: tests/gpu/test_sanitize_syncs_gpu.py."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import streamsafe as ss
from streamsafe import hooks
from streamsafe.backend import process_default, use_backend
from streamsafe.backend.cuda import CudaEvent
from streamsafe.errors import RaceError
from streamsafe.sim import mirror, sync_hooks
from streamsafe.streams import stream_from_handle

from _framework_standins import C, P, P1, S, CUhandle, FakeDriver, Immutable, make_bindings, make_cupy, make_torch

MODULES = ("torch", "cupy", "cuda.bindings.driver", "cuda.bindings.runtime")


class Told(hooks.Observer):
    """Logs what observers are told, into the same list as the stand-ins' own calls."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def on_fence(self, waiter: Any, signaller: Any) -> None:
        self.log.append(f"told fence {waiter.handle:#x} after {signaller.handle:#x}")

    def on_record(self, event: Any, stream: Any) -> None:
        self.log.append(f"told record on {stream.handle:#x}")

    def on_wait(self, stream: Any, event: Any) -> None:
        self.log.append(f"told wait on {stream.handle:#x}")

    def on_event_complete(self, event: Any) -> None:
        self.log.append("told event complete")

    def on_stream_synchronize(self, stream: Any) -> None:
        self.log.append(f"told stream sync {stream.handle:#x}")

    def on_device_synchronize(self, device: int) -> None:
        self.log.append(f"told device sync {device}")


@pytest.fixture
def fw(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """The stand-in frameworks in ``sys.modules``, the fake driver as the current backend, and the streams
    P, S, C as each framework names them."""
    # (isolated from sanitize mode turned on for the whole test process by an earlier test: its observer and
    # its hold on the wrappers, which are the real frameworks' anyway)
    monkeypatch.setattr(hooks, "observers", ())
    monkeypatch.setattr(sync_hooks, "_users", 0)
    monkeypatch.setattr(sync_hooks, "_installed", {})
    monkeypatch.setattr(sync_hooks, "_EVENTS", {})
    log: list[str] = []
    torch, cupy = make_torch(log), make_cupy(log)
    driver, runtime = make_bindings(log, "driver"), make_bindings(log, "runtime")
    for name, module in zip(MODULES, (torch, cupy, driver, runtime)):
        monkeypatch.setitem(sys.modules, name, module)
    be = FakeDriver()
    with use_backend(be):  # type: ignore[arg-type]
        yield SimpleNamespace(
            log=log, torch=torch, cupy=cupy, driver=driver, runtime=runtime, be=be,
            tp=torch.cuda.Stream(P), ts=torch.cuda.Stream(S), tc=torch.cuda.Stream(C),
            cp=cupy.cuda.ExternalStream(P, 0), cs=cupy.cuda.ExternalStream(S, 0),
        )
    assert sync_hooks.installed() == [], "a test left sanitize mode's wrappers installed"


def told(log: list[str]) -> list[str]:
    return [line for line in log if line.startswith("told")]


# -- each call, and what it tells -------------------------------------------------------------------------------

def _torch_event(fw: Any) -> Any:
    event = fw.torch.cuda.Event()
    event.record(fw.tp)
    return event


def _cupy_event(fw: Any) -> Any:
    event = fw.cupy.cuda.Event()
    event.record(fw.cp)
    return event


def _runtime_event(fw: Any) -> Any:
    event = fw.cupy.cuda.Event()
    fw.cupy.cuda.runtime.eventRecord(event.ptr, P)
    return event.ptr


def _driver_event(fw: Any, flags: bool = False) -> Any:
    event = fw.driver.cuEventCreate(0)[1]
    if flags:
        fw.driver.cuEventRecordWithFlags(event, fw.driver.CUstream(P), 0)
    else:
        fw.driver.cuEventRecord(event, fw.driver.CUstream(P))
    return event


def _cudart_event(fw: Any, flags: bool = False) -> Any:
    event = fw.runtime.cudaEventCreate()[1]
    if flags:
        fw.runtime.cudaEventRecordWithFlags(event, P, 0)
    else:
        fw.runtime.cudaEventRecord(event, P)
    return event


HOST_WAITS: dict[str, tuple[Callable[[Any], Any], list[str]]] = {
    # name: (the program's host wait for P, after P's write; what the observers are told)
    "torch.cuda.Stream.synchronize": (lambda fw: fw.tp.synchronize(), ["told stream sync 0x1000"]),
    "torch.cuda.Stream.query": (lambda fw: fw.tp.query(), ["told stream sync 0x1000"]),
    "torch.cuda.synchronize": (lambda fw: fw.torch.cuda.synchronize(), ["told device sync 0"]),
    "torch.cuda.synchronize(device)": (lambda fw: fw.torch.cuda.synchronize("cuda:0"), ["told device sync 0"]),
    "torch.accelerator.synchronize": (lambda fw: fw.torch.accelerator.synchronize(), ["told device sync 0"]),
    "torch.cuda.Event.synchronize": (lambda fw: _torch_event(fw).synchronize(),
                                     ["told record on 0x1000", "told event complete"]),
    "torch.cuda.Event.query": (lambda fw: _torch_event(fw).query(), ["told record on 0x1000", "told event complete"]),
    "cupy.cuda.Device.synchronize": (lambda fw: fw.cupy.cuda.Device().synchronize(), ["told device sync 0"]),
    "cupy.cuda.runtime.deviceSynchronize": (lambda fw: fw.cupy.cuda.runtime.deviceSynchronize(), ["told device sync 0"]),
    "cupy.cuda.Stream.synchronize": (lambda fw: fw.cp.synchronize(), ["told stream sync 0x1000"]),
    "cupy.cuda.Stream.done": (lambda fw: fw.cp.done, ["told stream sync 0x1000"]),
    "cupy.cuda.Stream.record": (lambda fw: fw.cp.record().synchronize(), ["told record on 0x1000", "told event complete"]),
    "cupy.cuda.Event.synchronize": (lambda fw: _cupy_event(fw).synchronize(), ["told record on 0x1000", "told event complete"]),
    "cupy.cuda.Event.done": (lambda fw: _cupy_event(fw).done, ["told record on 0x1000", "told event complete"]),
    "cupy.cuda.runtime.streamSynchronize": (lambda fw: fw.cupy.cuda.runtime.streamSynchronize(P), ["told stream sync 0x1000"]),
    "cupy.cuda.runtime.streamQuery": (lambda fw: fw.cupy.cuda.runtime.streamQuery(P), ["told stream sync 0x1000"]),
    "cupy.cuda.runtime.eventSynchronize": (lambda fw: fw.cupy.cuda.runtime.eventSynchronize(_runtime_event(fw)),
                                           ["told record on 0x1000", "told event complete"]),
    "cupy.cuda.runtime.eventQuery": (lambda fw: fw.cupy.cuda.runtime.eventQuery(_runtime_event(fw)),
                                     ["told record on 0x1000", "told event complete"]),
    "cuCtxSynchronize": (lambda fw: fw.driver.cuCtxSynchronize(), ["told device sync 0"]),
    "cuStreamSynchronize": (lambda fw: fw.driver.cuStreamSynchronize(fw.driver.CUstream(P)), ["told stream sync 0x1000"]),
    "cuStreamQuery": (lambda fw: fw.driver.cuStreamQuery(fw.driver.CUstream(P)), ["told stream sync 0x1000"]),
    "cuEventSynchronize": (lambda fw: fw.driver.cuEventSynchronize(_driver_event(fw)),
                           ["told record on 0x1000", "told event complete"]),
    "cuEventRecordWithFlags": (lambda fw: fw.driver.cuEventSynchronize(_driver_event(fw, flags=True)),
                               ["told record on 0x1000", "told event complete"]),
    "cuEventQuery": (lambda fw: fw.driver.cuEventQuery(_driver_event(fw)), ["told record on 0x1000", "told event complete"]),
    "cudaDeviceSynchronize": (lambda fw: fw.runtime.cudaDeviceSynchronize(), ["told device sync 0"]),
    "cudaStreamSynchronize": (lambda fw: fw.runtime.cudaStreamSynchronize(P), ["told stream sync 0x1000"]),
    "cudaStreamQuery": (lambda fw: fw.runtime.cudaStreamQuery(P), ["told stream sync 0x1000"]),
    "cudaEventSynchronize": (lambda fw: fw.runtime.cudaEventSynchronize(_cudart_event(fw)),
                             ["told record on 0x1000", "told event complete"]),
    "cudaEventRecordWithFlags": (lambda fw: fw.runtime.cudaEventSynchronize(_cudart_event(fw, flags=True)),
                                 ["told record on 0x1000", "told event complete"]),
    "cudaEventQuery": (lambda fw: fw.runtime.cudaEventQuery(_cudart_event(fw)), ["told record on 0x1000", "told event complete"]),
}
"""Each way a program makes the host wait for P's work so far."""


def _torch_wait_event(fw: Any) -> None:
    fw.ts.wait_event(_torch_event(fw))


def _torch_event_wait(fw: Any) -> None:
    _torch_event(fw).wait(fw.ts)


DEVICE_WAITS: dict[str, tuple[Callable[[Any], Any], list[str]]] = {
    # name: (S made to wait for P's work so far on the device; what the observers are told)
    "torch.cuda.Stream.wait_stream": (lambda fw: fw.ts.wait_stream(fw.tp), ["told fence 0x2000 after 0x1000"]),
    "torch.cuda.Stream.wait_event": (_torch_wait_event, ["told record on 0x1000", "told wait on 0x2000"]),
    "torch.cuda.Event.wait": (_torch_event_wait, ["told record on 0x1000", "told wait on 0x2000"]),
    "cupy.cuda.Stream.wait_event": (lambda fw: fw.cs.wait_event(_cupy_event(fw)), ["told record on 0x1000", "told wait on 0x2000"]),
    "cupy.cuda.runtime.streamWaitEvent": (lambda fw: fw.cupy.cuda.runtime.streamWaitEvent(S, _runtime_event(fw)),
                                          ["told record on 0x1000", "told wait on 0x2000"]),
    "cuStreamWaitEvent": (lambda fw: fw.driver.cuStreamWaitEvent(fw.driver.CUstream(S), _driver_event(fw), 0),
                          ["told record on 0x1000", "told wait on 0x2000"]),
    "cudaStreamWaitEvent": (lambda fw: fw.runtime.cudaStreamWaitEvent(S, _cudart_event(fw), 0),
                            ["told record on 0x1000", "told wait on 0x2000"]),
}
"""Each way a program makes S wait for P on the device (no host wait)."""


@pytest.mark.parametrize("name", [*HOST_WAITS, *DEVICE_WAITS])
def test_each_call_tells_the_observers_what_it_did(fw: Any, name: str) -> None:
    call, want = {**HOST_WAITS, **DEVICE_WAITS}[name]
    with ss.sanitize(fw.be):
        hooks.register(Told(fw.log))
        try:
            call(fw)
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert told(fw.log) == want
    assert len(fw.log) > len(want), "the original call was not made"


def test_a_host_wait_is_told_after_it_and_an_event_record_before_it(fw: Any) -> None:
    with ss.sanitize(fw.be):
        hooks.register(Told(fw.log))
        try:
            fw.tp.synchronize()
            fw.driver.cuEventRecord(CUhandle(0xE800), fw.driver.CUstream(P))
            fw.runtime.cudaStreamWaitEvent(S, CUhandle(0xE800), 0)
            fw.cupy.cuda.Device(0).synchronize()
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert fw.log == [
        "torch Stream(0x1000).synchronize", "told stream sync 0x1000",
        "told record on 0x1000", "driver cuEventRecord",
        "told wait on 0x2000", "runtime cudaStreamWaitEvent",
        "cupy Device(0).synchronize", "told device sync 0",
    ]


def test_keyword_arguments_are_read_as_the_frameworks_name_them(fw: Any) -> None:
    with ss.sanitize(fw.be):
        hooks.register(Told(fw.log))
        try:
            event = fw.torch.cuda.Event()
            event.record(stream=fw.tp)
            event.wait(stream=fw.ts)
            fw.ts.wait_event(event=event)
            fw.torch.cuda.synchronize(device=0)
            fw.driver.cuStreamSynchronize(hStream=fw.driver.CUstream(C))
            fw.runtime.cudaStreamSynchronize(stream=C)
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert told(fw.log) == ["told record on 0x1000", "told wait on 0x2000", "told wait on 0x2000", "told device sync 0",
                            "told stream sync 0x3000", "told stream sync 0x3000"]


def test_a_failed_call_or_a_query_that_says_not_done_tells_nothing(fw: Any) -> None:
    fw.driver.fail["cuStreamSynchronize"] = 1  # CUDA_ERROR_INVALID_VALUE
    fw.driver.fail["cuEventQuery"] = 600  # CUDA_ERROR_NOT_READY
    fw.runtime.fail["cudaDeviceSynchronize"] = 700
    fw.tp.done = False
    fw.cupy.state.status = 600
    with ss.sanitize(fw.be):
        hooks.register(Told(fw.log))
        try:
            assert fw.driver.cuStreamSynchronize(fw.driver.CUstream(P)) == (1,)
            event = _driver_event(fw)
            assert fw.driver.cuEventQuery(event) == (600,)
            assert fw.runtime.cudaDeviceSynchronize() == (700,)
            assert fw.tp.query() is False
            assert fw.cupy.cuda.runtime.streamQuery(P) == 600
            event = fw.torch.cuda.Event()
            event.synchronize()  # never recorded: nothing to learn
            event.wait(fw.ts)  # nor to wait for
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert told(fw.log) == ["told record on 0x1000"]


def test_an_exception_from_the_call_goes_to_the_program_and_nothing_is_told(fw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any) -> None:
        raise RuntimeError("cudaErrorIllegalAddress")

    monkeypatch.setattr(fw.torch.cuda.Stream, "synchronize", broken)
    with ss.sanitize(fw.be):
        hooks.register(Told(fw.log))
        try:
            with pytest.raises(RuntimeError, match="IllegalAddress"):
                fw.tp.synchronize()
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert told(fw.log) == []


def test_a_call_streamsafe_makes_itself_is_not_told_again(fw: Any) -> None:
    own_code = {"__name__": "streamsafe.backend.cuda"}  # (streamsafe's backend tells of its own calls)
    exec("def synchronize_stream(driver, handle):\n    return driver.cuStreamSynchronize(handle)", own_code)
    with ss.sanitize(fw.be):
        hooks.register(Told(fw.log))
        try:
            own_code["synchronize_stream"](fw.driver, fw.driver.CUstream(P))
            fw.driver.cuStreamSynchronize(fw.driver.CUstream(P))  # the program's
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert fw.log == ["driver cuStreamSynchronize", "driver cuStreamSynchronize", "told stream sync 0x1000"]


def test_a_method_an_extension_base_type_defines_is_wrapped_on_the_class_named(fw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class StreamBase(metaclass=Immutable):  # (as torch._C._CudaStreamBase, were query defined there only)
        immutable = True

        def query(self) -> bool:
            fw.log.append("base query")
            return True

    class Stream(StreamBase):
        def __init__(self, handle: int) -> None:
            self.cuda_stream, self.device = handle, SimpleNamespace(index=0)

    Stream.__module__ = "torch.cuda.streams"
    monkeypatch.setattr(fw.torch.cuda, "Stream", Stream)
    with ss.sanitize(fw.be):
        assert "query" in Stream.__dict__ and "torch.cuda.Stream.query" in sync_hooks.installed()
        hooks.register(Told(fw.log))
        try:
            assert Stream(P).query() is True
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert fw.log == ["base query", "told stream sync 0x1000"]
    assert "query" not in Stream.__dict__ and StreamBase.__dict__["query"](Stream(P)) is True


def test_nothing_is_told_where_no_backend_names_the_programs_streams(fw: Any) -> None:
    sim = ss.sim.SimBackend()
    with ss.sanitize(fw.be), use_backend(sim), process_default(sim):
        hooks.register(Told(fw.log))
        try:
            fw.tp.synchronize()
            fw.torch.cuda.synchronize()
        finally:
            hooks.unregister(next(o for o in hooks.observers if isinstance(o, Told)))
    assert told(fw.log) == [] and len(fw.log) == 2


# -- installing and restoring --------------------------------------------------------------------------------

LABELS = [
    "torch.cuda.synchronize", "torch.accelerator.synchronize", "torch.cuda.Stream.synchronize", "torch.cuda.Stream.query",
    "torch.cuda.Stream.wait_event", "torch.cuda.Stream.wait_stream", "torch.cuda.Event.record", "torch.cuda.Event.wait",
    "torch.cuda.Event.synchronize", "torch.cuda.Event.query",
    "cupy.cuda.Device.synchronize", "cupy.cuda.Stream.synchronize", "cupy.cuda.Stream.done", "cupy.cuda.Stream.record",
    "cupy.cuda.Stream.wait_event", "cupy.cuda.Event.record", "cupy.cuda.Event.synchronize", "cupy.cuda.Event.done",
    "cupy.cuda.runtime.deviceSynchronize", "cupy.cuda.runtime.streamSynchronize", "cupy.cuda.runtime.eventSynchronize",
    "cupy.cuda.runtime.eventRecord", "cupy.cuda.runtime.streamWaitEvent", "cupy.cuda.runtime.eventQuery",
    "cupy.cuda.runtime.streamQuery",
    "cuda.bindings.driver.cuCtxSynchronize", "cuda.bindings.driver.cuStreamSynchronize",
    "cuda.bindings.driver.cuEventSynchronize", "cuda.bindings.driver.cuEventRecord",
    "cuda.bindings.driver.cuEventRecordWithFlags", "cuda.bindings.driver.cuStreamWaitEvent",
    "cuda.bindings.driver.cuEventQuery", "cuda.bindings.driver.cuStreamQuery",
    "cuda.bindings.runtime.cudaDeviceSynchronize", "cuda.bindings.runtime.cudaStreamSynchronize",
    "cuda.bindings.runtime.cudaEventSynchronize", "cuda.bindings.runtime.cudaEventRecord",
    "cuda.bindings.runtime.cudaEventRecordWithFlags", "cuda.bindings.runtime.cudaStreamWaitEvent",
    "cuda.bindings.runtime.cudaEventQuery", "cuda.bindings.runtime.cudaStreamQuery",
]


def _attributes(fw: Any) -> dict[str, Any]:
    """What each wrapped name holds now (a class's own dictionary entry, a module's attribute)."""
    cuda, cp = fw.torch.cuda, fw.cupy.cuda
    found: dict[str, Any] = {}
    for owner, names in ((cuda, ["synchronize"]), (fw.torch.accelerator, ["synchronize"]),
                         (cp.runtime, ["deviceSynchronize", "streamSynchronize", "eventRecord", "eventQuery"]),
                         (fw.driver, ["cuStreamSynchronize", "cuCtxSynchronize", "cuEventRecord"]),
                         (fw.runtime, ["cudaDeviceSynchronize", "cudaEventSynchronize"])):
        for name in names:
            found[f"{owner.__name__}.{name}"] = getattr(owner, name)
    for cls, names in ((cuda.Stream, ["synchronize", "wait_stream"]), (cuda.Event, ["record", "synchronize"]),
                       (cp.Device, ["synchronize"]), (cp.Stream.__mro__[1], ["synchronize", "done"]),
                       (cp.Event, ["record", "done"])):
        for name in names:
            found[f"{cls.__qualname__}.{name}"] = cls.__dict__[name]
    return found


def test_nothing_is_installed_outside_sanitize_mode_and_every_original_comes_back(fw: Any) -> None:
    before = _attributes(fw)
    assert sync_hooks.installed() == []
    with ss.sanitize(fw.be):
        assert sync_hooks.installed() == LABELS
        inside = _attributes(fw)
        assert [name for name in before if inside[name] is before[name]] == []
    after = _attributes(fw)
    assert [name for name in before if after[name] is not before[name]] == []
    assert sync_hooks.installed() == []
    fw.cupy.cuda.Device(0).synchronize()  # the immutable type's own method again (its attribute cache too)
    fw.tp.synchronize()
    assert fw.log[-2:] == ["cupy Device(0).synchronize", "torch Stream(0x1000).synchronize"]


def test_blocks_that_end_in_any_order_leave_the_wrappers_until_the_last(fw: Any) -> None:
    original = fw.torch.cuda.Stream.__dict__["synchronize"]
    first, second = ss.sanitize(fw.be), ss.sanitize(fw.be)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # (not the innermost: another thread's block, say)
    assert fw.torch.cuda.Stream.__dict__["synchronize"] is not original and sync_hooks.installed() == LABELS
    second.__exit__(None, None, None)
    assert fw.torch.cuda.Stream.__dict__["synchronize"] is original and sync_hooks.installed() == []


def test_blocks_in_two_threads(fw: Any) -> None:
    original = fw.cupy.cuda.Device.__dict__["synchronize"]
    inside, leave = threading.Barrier(3), threading.Barrier(3)

    def block() -> None:
        with ss.sanitize(fw.be):
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=block) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert fw.cupy.cuda.Device.__dict__["synchronize"] is not original
    leave.wait()
    for t in threads:
        t.join()
    assert fw.cupy.cuda.Device.__dict__["synchronize"] is original


def test_a_wrapper_someone_put_over_ours_stays(fw: Any) -> None:
    theirs = lambda *args: None  # noqa: E731 - another tool's wrapper
    with ss.sanitize(fw.be):
        fw.driver.cuCtxSynchronize = theirs
    assert fw.driver.cuCtxSynchronize is theirs


def test_a_framework_imported_in_sanitize_mode_is_wrapped_at_the_mirrors_next_call(fw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cupy")
    original = fw.cupy.cuda.runtime.deviceSynchronize
    with ss.sanitize(fw.be) as shadow:
        assert not any(label.startswith("cupy") for label in sync_hooks.installed())
        monkeypatch.setitem(sys.modules, "cupy", fw.cupy)  # the program imports CuPy now
        shadow.on_launch(fw.be.stream(S), "a kernel", [], [0xA000], 0)
        assert fw.cupy.cuda.runtime.deviceSynchronize is not original
        assert "cupy.cuda.runtime.deviceSynchronize" in sync_hooks.installed()
    assert fw.cupy.cuda.runtime.deviceSynchronize is original


def test_sanitize_mode_for_the_process_keeps_the_wrappers(fw: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mirror, "_ENV_MIRROR", None)
    shadow = mirror.enable_from_environment()
    try:
        assert sync_hooks.installed() == LABELS
        with ss.sanitize(fw.be):
            pass
        assert sync_hooks.installed() == LABELS  # (a block ending does not take the process's away)
    finally:
        hooks.unregister(shadow)
        sync_hooks.release()


def test_sanitize_mode_imports_no_framework() -> None:
    code = ("import sys, streamsafe as ss\n"
            "with ss.sanitize():\n    pass\n"
            "print(sorted(m for m in ('torch', 'cupy', 'jax', 'cuda.bindings.runtime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- the vendor's input recipe on the mirror ---------------------------------------------------------------------

SURFACE, STAGED, RESULT, OUT = 0xA000, 0xB000, 0xB100, 0xC000


def _tell(name: str, *args: Any) -> None:
    for o in hooks.observers:
        getattr(o, name)(*args)


def vendor_recipe(fw: Any, host_wait: Callable[[Any], Any] | None, frames: int = 3) -> Any:
    """The vendor's input recipe as sanitize mode hears it on the GPU (event strategy, nothing declared, copies
    on S): P rewrites a surface in place, the program makes the host wait for P (``host_wait``), then
    ``run(surface, non_blocking=False, stream_ptr=S)``; the streamsafe side is what contract, backend and
    emulated effect tell, in the order an H200 run told it. Returns the mirror."""
    be = fw.be
    p, s, legacy = be.stream(P), be.stream(S), stream_from_handle(0, 0, be)
    own = [CudaEvent(0, 0xF000), CudaEvent(0, 0xF010)]
    with ss.sanitize(be) as shadow:
        for i in range(frames):
            if i:  # torch's dispatch mode: a write of tracked memory (the surface, once the SDK has read it)
                _tell("on_launch", p, "torch copy_.default", [], [SURFACE], 0)
            if host_wait is not None:
                host_wait(fw)
            _tell("on_input_write", SURFACE, s, 0)
            _tell("on_launch", s, "VideoSuperRes.transfer", [SURFACE], [STAGED], 0)
            _tell("on_launch", s, "VideoSuperRes.inference", [STAGED], [RESULT], 0)
            _tell("on_stream_synchronize", s)  # non_blocking=False: the SDK's host wait
            _tell("on_launch", legacy, "VideoSuperRes.conversion", [RESULT], [OUT], 0)
            _tell("on_record", own[0], s)
            _tell("on_record", own[1], legacy)
            _tell("on_fence", s, legacy)
            _tell("on_output_read", OUT, s, 0)
            _tell("on_launch", s, "torch clone.default", [OUT], [], 0)
    return shadow


@pytest.mark.parametrize("name", [*HOST_WAITS, *DEVICE_WAITS])
def test_the_vendors_input_recipe_runs_clean_with_its_wait_for_the_producer(fw: Any, name: str) -> None:
    shadow = vendor_recipe(fw, {**HOST_WAITS, **DEVICE_WAITS}[name][0])
    assert shadow.races == []


def _device_1(fw: Any) -> None:
    fw.torch.cuda.synchronize(1)


def _wait_for_an_earlier_record(fw: Any) -> None:
    fw.ts.wait_event(fw.early)  # recorded on P before this frame's write


def _synchronize_an_earlier_record(fw: Any) -> None:
    fw.early.synchronize()


def _failed(fw: Any) -> None:
    fw.driver.fail["cuStreamSynchronize"] = 1
    fw.driver.cuStreamSynchronize(fw.driver.CUstream(P))


def _not_done(fw: Any) -> None:
    fw.cp._done = False
    assert not fw.cp.done


CONTROLS: dict[str, Callable[[Any], Any] | None] = {
    "no wait": None,
    "the host waits for another stream": lambda fw: fw.tc.synchronize(),
    "S waits for another stream": lambda fw: fw.ts.wait_stream(fw.tc),
    "the host waits for another device": _device_1,
    "the host waits for a stream of another device": lambda fw: fw.torch.cuda.Stream(P1, 1).synchronize(),
    "CuPy's host waits for another device": lambda fw: fw.cupy.cuda.Device(1).synchronize(),
    "S waits for an event recorded before the write": _wait_for_an_earlier_record,
    "the host waits for an event recorded before the write": _synchronize_an_earlier_record,
    "the wait failed": _failed,
    "the query said not done": _not_done,
}


@pytest.mark.parametrize("name", CONTROLS)
def test_control_the_recipe_without_its_wait_for_the_producer_is_reported(fw: Any, name: str) -> None:
    fw.early = fw.torch.cuda.Event()
    host_wait = CONTROLS[name]

    def frame(fw: Any) -> None:
        if fw.early.cuda_event == 0:
            fw.early.record(fw.tp)  # at frame 0: before the write of frame 1
        elif host_wait is not None:
            host_wait(fw)

    with pytest.raises(ss.errors.RaceError) as info:
        vendor_recipe(fw, frame)
    text = str(info.value)
    assert "'VideoSuperRes.transfer'" in text and "not ordered after write by 'torch copy_.default'" in text
    assert "0x1000" in text  # the producer's stream, named as the program's


def test_the_recipe_runs_clean_when_the_program_waits_through_each_framework_on_one_run(fw: Any) -> None:
    waits = list(HOST_WAITS.values()) + list(DEVICE_WAITS.values())
    frame = iter(range(10**6))
    shadow = vendor_recipe(fw, lambda fw: waits[next(frame) % len(waits)][0](fw), frames=2 * len(waits))
    assert shadow.races == []


_UNSEEN_WRITE = ("known limit (docs/guide.md, Sanitize mode): a write no hook reports (CuPy's kernels) is assumed at run(); "
                 "a torch read before run() that the program ordered after the producer is then reported as a race")


@pytest.mark.parametrize("torch_reads", [False, pytest.param(True, marks=pytest.mark.xfail(reason=_UNSEEN_WRITE, strict=True))])
def test_an_input_torch_read_after_an_unseen_producer_write_is_not_reported_against_the_run(fw: Any, torch_reads: bool) -> None:
    """A CuPy producer on P rewrites a declared input each frame (no hook sees CuPy's kernels), C waits for P and torch
    reads the input on C, then ``run()``. The mirror assumes the write at ``run()``, after C's read: a race reported in a
    correct program (strict xfail: the day it passes, the limit went). Placing the write earlier, or leaving it out when
    a torch read intervenes, hid real races (an unordered read of the old contents, the producer's rewrite not ordered
    after the SDK's read): the controls below."""
    be = fw.be
    p, s, c = be.stream(P), be.stream(S), be.stream(C)
    with ss.sanitize(be) as shadow:
        for i in range(3):
            if i:
                _tell("on_fence", p, s)  # (H12, the contract's: P rewrites the input once the SDK's read of it is done)
                if torch_reads:  # (frame 0's input is not tracked yet: torch's dispatch mode reports nothing then)
                    fw.tc.wait_stream(fw.tp)  # (the program orders C after P's write, the correct program's way)
                    shadow.on_launch(c, "torch sum.default", [SURFACE], [], 0)
            _tell("on_input_write", SURFACE, p, 0)
            _tell("on_fence", s, p)  # (H1: the SDK stream waits for the declared producer)
            _tell("on_launch", s, "VideoSuperRes.transfer", [SURFACE], [STAGED], 0)
    assert shadow.races == []


def test_control_an_unseen_producer_write_that_does_not_wait_for_the_sdks_read_is_still_reported(fw: Any) -> None:
    be = fw.be
    p, s = be.stream(P), be.stream(S)
    with ss.sanitize(be):
        _tell("on_input_write", SURFACE, p, 0)
        _tell("on_fence", s, p)
        _tell("on_launch", s, "VideoSuperRes.transfer", [SURFACE], [STAGED], 0)
        with pytest.raises(RaceError):
            _tell("on_input_write", SURFACE, p, 0)  # (no H12 wait: P rewrites while S may still read)


def _observed_torch(monkeypatch: pytest.MonkeyPatch, on_cuda: list[bool]) -> list[str]:
    """A stand-in for torch's observer (no CUDA here) that logs, with the thread, where it begins, ends and stops;
    torch runs on CUDA while ``on_cuda`` is not empty. No observer is registered before. Returns the log."""
    from streamsafe.sim import torch_observer

    monkeypatch.setattr(hooks, "observers", ())
    log: list[str] = []

    class Accesses:
        def __enter__(self) -> Accesses:
            log.append(f"begin in {threading.current_thread().name}")
            return self

        def __exit__(self, *exc: Any) -> None:
            log.append(f"end in {threading.current_thread().name}")

        def stop(self) -> None:
            log.append(f"stop in {threading.current_thread().name}")

    monkeypatch.setattr(torch_observer, "observe_torch", lambda mirror: Accesses() if on_cuda else None)
    return log


def test_sanitize_mode_entered_before_torch_runs_on_cuda_observes_torch_from_the_first_guarded_call_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``ss.sanitize()`` entered before torch initialised CUDA never observed torch's own ops in its block. It now
    begins at the first input or output a guarded call tells of once torch runs on CUDA, and ends with the block."""
    on_cuda: list[bool] = []
    log = _observed_torch(monkeypatch, on_cuda)
    with ss.sanitize():
        _tell("on_input_write", SURFACE, None, 0)  # (a guarded call on a GPU tells of its inputs)
        assert log == []
        on_cuda.append(True)
        for _ in range(2):
            _tell("on_input_write", SURFACE, None, 0)
        assert log == ["begin in MainThread"]
    assert log == ["begin in MainThread", "end in MainThread"] and hooks.observers == ()


def test_sanitize_modes_torch_watch_begins_only_in_the_thread_that_entered_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first guarded call on CUDA from a worker thread began torch's (per-thread) dispatch mode there, which the
    block's end could not end: it outlived sanitize mode. It begins only in the block's own thread."""
    on_cuda: list[bool] = []
    log = _observed_torch(monkeypatch, on_cuda)
    with ss.sanitize():
        on_cuda.append(True)
        worker = threading.Thread(target=_tell, args=("on_input_write", SURFACE, None, 0), name="worker")
        worker.start()
        worker.join()
        assert log == []
        _tell("on_input_write", SURFACE, None, 0)
    assert log == ["begin in MainThread", "end in MainThread"] and hooks.observers == ()


def test_control_torch_reading_an_input_after_run_and_its_producer_rewriting_it_unordered_is_reported(fw: Any) -> None:
    """Torch reads the input on C after ``run()`` (C ordered after the SDK's stream, not after the producer), and the
    producer, ordered after the SDK's read only, rewrites it: a real write-after-read race, reported. (A later read on
    the producer's own stream must not hide it.)"""
    be = fw.be
    p, s, c = be.stream(P), be.stream(S), be.stream(C)
    with ss.sanitize(be) as shadow:
        with pytest.raises(RaceError, match=r"write by 'producer\.write' .* is not ordered after read by 'torch lerp"):
            for i in range(3):
                if i:
                    _tell("on_fence", p, s)  # (H12: P waits for the SDK's read only)
                _tell("on_input_write", SURFACE, p, 0)
                _tell("on_fence", s, p)
                _tell("on_launch", s, "VideoSuperRes.transfer", [SURFACE], [STAGED], 0)
                fw.tc.wait_stream(fw.ts)  # (C after the SDK's stream)
                shadow.on_launch(c, "torch lerp.default", [SURFACE], [], 0)
                shadow.on_launch(p, "torch sum.default", [SURFACE], [], 0)  # (a read on the producer's own stream)


def test_sanitize_mode_ended_from_another_thread_stops_torchs_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sanitize block left from another thread than its own left torch's (per-thread) dispatch mode reporting to a
    mirror no longer registered, which still raised at races. The mode can be left only in its thread: it stays there,
    reporting nothing."""
    log = _observed_torch(monkeypatch, [True])
    block = ss.sanitize()
    block.__enter__()
    worker = threading.Thread(target=block.__exit__, args=(None, None, None), name="worker")
    worker.start()
    worker.join()
    assert log == ["begin in MainThread", "stop in worker"] and hooks.observers == ()
