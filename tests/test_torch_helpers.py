"""``out.torch()`` and ``out.torch(copy=False)`` on the model, with a torch stand-in over the simulated backend.

The stand-in has what streamsafe uses of torch here: ``torch._C._cuda_getCurrentRawStream`` (the
raw read of the current stream), ``torch.cuda.stream(s)``, ``torch.cuda.current_stream()`` (the
ledger keeps the consumer's stream object) and ``torch.from_dlpack`` of a raw capsule
(here the model's import, so the model sees every read and finds every race). The GPU lane runs
the same helpers with real torch (``tests/gpu/test_contract_gpu.py``).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K


class TensorStandIn:
    """A torch tensor over a model array: ``clone()`` copies on torch's current stream."""

    def __init__(self, torch: TorchStandIn, array: Any) -> None:
        self.torch, self.array = torch, array

    def clone(self) -> Any:
        return self.torch.sim.copy(self.array, self.torch.current, name="torch.clone")


class TorchStandIn(types.ModuleType):
    """``torch`` as the copy and view helpers see it, over a :class:`~streamsafe.SimBackend`."""

    def __init__(self, sim: ss.sim.SimBackend, current: ss.Stream) -> None:
        super().__init__("torch")
        self.sim = sim
        self.current = current
        self.reported: ss.Stream | None = None
        """What the raw current-stream read answers; ``None``: the current stream (a test may make it lie)."""
        self.refuse: ss.Stream | None = None
        """A stream ``torch.cuda.stream()`` fails to enter (a test of a helper that fails before its import)."""
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=self._raw_stream)
        self.cuda = types.SimpleNamespace(stream=self._stream, is_initialized=lambda: True, current_stream=self._stream_object)

    def _raw_stream(self, device: int) -> int:
        return (self.reported or self.current).ptr

    def _stream_object(self, device: int) -> Any:
        return types.SimpleNamespace(cuda_stream=self.current.ptr)

    @contextlib.contextmanager
    def _stream(self, stream: ss.Stream) -> Iterator[None]:
        if stream is self.refuse:
            raise RuntimeError("CUDA error: the stand-in refuses this stream")
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def from_dlpack(self, capsule: Any) -> TensorStandIn:
        assert not hasattr(capsule, "__dlpack__"), "the helpers hand torch a raw capsule"
        return TensorStandIn(self, self.sim.from_dlpack(capsule))


@contextlib.contextmanager
def torch_stand_in(sim: ss.sim.SimBackend, current: ss.Stream) -> Iterator[TorchStandIn]:
    """A :class:`TorchStandIn` with ``current`` as torch's current stream, as ``sys.modules["torch"]`` for the block."""
    fake = TorchStandIn(sim, current)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "torch", fake)
        yield fake


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial")


def effect(sim: ss.sim.SimBackend) -> VideoSuperRes:
    sr = VideoSuperRes(backend=sim, latency_us={"conversion": 300.0})
    sr.output_width, sr.output_height = 32, 32
    sr.load()
    return sr


def frame(sim: ss.sim.SimBackend, seed: int, stream: ss.Stream) -> tuple[Any, np.ndarray]:
    data = np.random.default_rng(seed).random((3, 16, 16), dtype=np.float32)
    arr = sim.empty((3, 16, 16), np.float32, name=f"frame{seed}")
    sim.launch(stream, "producer.write", lambda: np.copyto(arr.buffer.data, data), writes=[arr])
    return arr, K.to_rgb8(np, K.resize_bilinear(np, data, 32, 32)).astype(np.float32) / np.float32(255)


def run_frames(sim: ss.sim.SimBackend, strategy: str, *, copy: bool, lie: bool = False, pass_stream: bool = False,
               frames: int = 4) -> tuple[list[str], int]:
    """Frames through a contract on S, each taken with ``out.torch(copy=copy)`` on the consumer stream
    C (a view is then copied on C by the user, before the next run; the model's adversarial scheduler
    runs C's work as late as the fences allow). Returns the model's races and the count of wrong frames. ``lie``: torch's raw current-stream read answers S while
    the copy runs on C. ``pass_stream``: C is passed to the helper instead of being torch's current stream."""
    s, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(effect(sim), s, strategy=strategy, allow_none=strategy == "none")
    results = []
    with torch_stand_in(sim, s if pass_stream else consumer) as fake:
        if lie:
            fake.reported = s
        for i in range(frames):
            arr, want = frame(sim, i, s)
            out = c.run(arr)
            got = out.torch(consumer, copy=copy) if pass_stream else out.torch(copy=copy)
            if not copy:  # the user's own read of the view on C, before the next run (which must wait for it)
                assert isinstance(got, TensorStandIn)
                got = sim.copy(got.array, consumer, name="consumer.copy")
            results.append((got, want))
    sim.synchronize_device()
    wrong = sum(not np.allclose(got.numpy(), want, atol=1.5 / 255) for got, want in results)
    return [str(r) for r in sim.races], wrong


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("strategy", ["auto", "event", "async", "stream", "device"])
def test_torch_helpers_order_the_import_on_torchs_current_stream(sim: ss.sim.SimBackend, strategy: str, copy: bool) -> None:
    races, wrong = run_frames(sim, strategy, copy=copy)
    assert races == [] and wrong == 0


@pytest.mark.parametrize("copy", [True, False])
def test_torch_helpers_order_the_import_on_a_stream_passed_to_them(sim: ss.sim.SimBackend, copy: bool) -> None:
    races, wrong = run_frames(sim, "event", copy=copy, pass_stream=True)
    assert races == [] and wrong == 0


@pytest.mark.parametrize("copy", [True, False])
def test_without_the_current_stream_the_same_reads_race(sim: ss.sim.SimBackend, copy: bool) -> None:
    """The control: the helpers order the stream torch names; when that is not the stream that reads
    (the read answers S, the copy runs on C), the model finds the reads racing the SDK's writes."""
    races, _ = run_frames(sim, "event", copy=copy, lie=True)
    assert races, "the control found no race: the test above could not fail"
    races_none, _ = run_frames(ss.sim.SimBackend(scheduler="adversarial"), "none", copy=copy)
    assert races_none


def test_a_view_is_one_import_and_goes_stale_at_the_next_run(sim: ss.sim.SimBackend) -> None:
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(effect(sim), s)
    with torch_stand_in(sim, s):
        out = c.run(frame(sim, 0, s)[0])
        out.torch(copy=False)
        with pytest.raises(BufferError, match="already imported"):
            out.torch(copy=False)
        with pytest.raises(BufferError, match="already imported"):
            out.torch()
        assert c.ledger.escaped  # the view left: the next run waits for every stream that may read it
        unread = c.run(frame(sim, 1, s)[0])
        c.run(frame(sim, 2, s)[0])
        with pytest.raises(ss.errors.StaleOutputError):  # the SDK reused the buffer: no view of it is handed out
            unread.torch(copy=False)


def test_a_copy_helper_that_fails_before_importing_leaves_a_later_view_recorded(sim: ss.sim.SimBackend) -> None:
    """A helper marks the output as copied (no view leaves it) before it imports; when it fails first
    (here torch refuses the stream), a later zero-copy import is a view again: the release waits for
    its stream. Without that, close() races the view's reader (the model finds it)."""
    s, bad = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    consumer = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(effect(sim), s)
    with torch_stand_in(sim, consumer) as fake:
        fake.refuse = bad
        out = c.run(frame(sim, 0, s)[0])
        with pytest.raises(RuntimeError, match="refuses"):
            out.torch(bad)
        assert not out.image.consumed
        view = out.torch(copy=False)
        assert c.ledger.escaped
        sim.copy(view.array, consumer, name="user.read")  # the user's read of the view on torch's current stream
        c.close()  # H6: the host waits for every stream that may still read the buffer
    sim.synchronize_device()
    assert sim.races == [], [str(r) for r in sim.races]


@pytest.mark.parametrize("copy", [True, False])
def test_a_stream_of_another_device_is_refused_before_the_import(copy: bool) -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial", devices=2)
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(effect(sim), s)
    with torch_stand_in(sim, s):
        out = c.run(frame(sim, 0, s)[0])
        other = sim.create_stream(non_blocking=True, device=1)
        with pytest.raises(ss.errors.DeviceMismatchError, match="consumer's stream.*stream of device 0"):
            out.torch(other, copy=copy)
        out.image.check_importable()  # untouched: still importable, and as a view if it is one
        assert out.image._escapes
        out.torch(copy=copy)


@pytest.mark.parametrize("copy", [True, False])
def test_an_object_that_is_no_stream_is_refused_before_the_import(sim: ss.sim.SimBackend, copy: bool) -> None:
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(effect(sim), s)
    with torch_stand_in(sim, s):
        out = c.run(frame(sim, 0, s)[0])
        with pytest.raises(ss.errors.StreamTypeError, match=r"cannot use 'cuda:0' \(type builtins.str\) as a CUDA stream"):
            out.torch("cuda:0", copy=copy)
        assert not out.image.consumed and out.image._escapes
