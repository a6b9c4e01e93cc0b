"""The contract on a real GPU: every hazard fixed by every strategy with real kernels and
amplified latency, a soak with torch, CuPy and JAX consumers, the vendor's documented code samples
inside a contract, and sanitize mode catching a deliberately missing fence."""

from __future__ import annotations

import json
import os
import time
import types
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from _lane import lane_output
from streamsafe.testing import _kernels as K

pytestmark = pytest.mark.gpu
H, W, OH, OW = 64, 64, 128, 128
SOAK = int(os.environ.get("STREAMSAFE_SOAK_FRAMES", "10000"))




@pytest.fixture(scope="module")
def frames() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    out = []
    for _ in range(16):
        x = rng.random((3, H, W), dtype=np.float32)
        out.append((x, K.to_rgb8(np, K.resize_bilinear(np, x, OH, OW)).astype(np.float32) / np.float32(255)))
    return out


def test_gpu_matrix_every_strategy_fixes_every_hazard(torch_cuda) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("cupy")
    from streamsafe.tools.hazards import STRATEGIES, format_table, rows_to_json, run_matrix

    rows = run_matrix(backend="cuda", frames=100, size=(64, 64), strategies=STRATEGIES)
    table = format_table(rows)
    print(table)
    if (path := lane_output("hazards-strategies-gpu.json")) is not None:
        path.write_text(rows_to_json(rows))
        path.with_suffix(".txt").write_text(table + "\n")
    for row in rows:
        if row.strategy != "none":
            assert row.corrupt_frames == 0, row
            assert not row.hazards_reported, row
    unfenced = [r for r in rows if r.strategy == "none" and r.race_reported]
    assert unfenced and all(r.corrupt_frames > 0 for r in unfenced)


def _consume(kind: str, out: Any, streams: dict[str, Any]) -> Any:
    import cupy

    if kind == "torch":
        return out.torch(streams["torch"])
    if kind == "cupy":
        with streams["cupy"]:
            return cupy.from_dlpack(out.image).copy()
    return out.jax()


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "cpu"):
        return x.cpu().numpy()
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy.asnumpy(x)
    return np.asarray(x)


def test_soak_zero_corruption_for_every_strategy(torch_cuda, frames) -> None:  # type: ignore[no-untyped-def]
    cupy = pytest.importorskip("cupy")
    pytest.importorskip("jax")
    torch = torch_cuda
    from streamsafe.testing import VideoSuperRes
    from streamsafe.testing.labs import GpuLab

    lab = GpuLab()
    consumers = {"torch": torch.cuda.Stream(), "cupy": cupy.cuda.Stream(non_blocking=False)}
    summary: dict[str, Any] = {}
    for strategy in ("auto", "event", "async", "stream", "device"):
        done = wrong = 0
        start = time.perf_counter()
        per_combo = -(-SOAK // 9)  # round up: at least SOAK frames per strategy
        for sdk_kind in ("non-blocking", "blocking", "legacy"):
            sdk = lab.stream(sdk_kind)
            for consumer in ("torch", "cupy", "jax"):
                sr = VideoSuperRes(backend=lab.backend, latency_us={"inference": 40, "conversion": 40})
                sr.output_width, sr.output_height = OW, OH
                sr.load()
                c = ss.StreamContract(sr, sdk, strategy=strategy)
                pending: list[tuple[Any, np.ndarray]] = []
                inputs = [torch.from_numpy(x).cuda() for x, _ in frames]
                torch.cuda.synchronize()
                for i in range(per_combo):
                    out = c.run(inputs[i % len(inputs)])
                    pending.append((_consume(consumer, out, consumers), frames[i % len(frames)][1]))
                    if len(pending) == 64 or i == per_combo - 1:
                        c.synchronize()
                        torch.cuda.synchronize()
                        cupy.cuda.runtime.deviceSynchronize()
                        for got, want in pending:
                            wrong += not np.allclose(_to_numpy(got), want, atol=1.5 / 255)
                        done += len(pending)
                        pending.clear()
                c.close()
        summary[strategy] = {"frames": done, "corrupt": wrong, "seconds": round(time.perf_counter() - start, 2)}
        print(f"soak {strategy}: {wrong} corrupt of {done} frames ({summary[strategy]['seconds']} s)")
    if (path := lane_output("soak.json")) is not None:
        path.write_text(json.dumps(summary, indent=1))
    for strategy, result in summary.items():
        assert result["frames"] >= SOAK and result["corrupt"] == 0, (strategy, result)


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "view"])
@pytest.mark.parametrize("current", ["side stream", "default stream"])
def test_out_torch_without_a_stream_copies_in_order_on_the_current_stream(torch_cuda, frames, current: str, copy: bool) -> None:  # type: ignore[no-untyped-def]
    """``out.torch()`` asks for the capsule on torch's current stream itself: the copy waits for the
    SDK's conversion on stream 0 (slowed to a random 200-800 us) on that stream; with no fence
    (``none``) the same copies read the output early. ``copy=False`` (a view): the SDK runs on a
    stream of its own and the user clones the view on the current stream after a random 0-400 us
    delay there, so the next run (on the SDK stream, converting on stream 0) must wait for that
    read before the SDK rewrites its buffer."""
    torch = torch_cuda
    from streamsafe.testing import VideoSuperRes

    be = ss.CudaBackend()
    rng = np.random.default_rng(7)
    side = torch.cuda.Stream() if current == "side stream" else torch.cuda.default_stream()
    inputs = [torch.from_numpy(x).cuda() for x, _ in frames]
    torch.cuda.synchronize()

    def corrupt(strategy: str) -> int:
        sr = VideoSuperRes(backend=be, latency_us={"inference": float(rng.integers(0, 200)), "conversion": float(rng.integers(200, 800))})
        sr.output_width, sr.output_height = OW, OH
        sr.load()
        sdk = side if copy else torch.cuda.Stream()  # a view's reader on a stream the next run does not follow
        c = ss.StreamContract(sr, sdk, strategy=strategy, allow_none=strategy == "none")
        copies = []
        with torch.cuda.stream(side):
            for i in range(24):
                out = c.run(inputs[i % len(inputs)])
                if copy:
                    got = out.torch()
                else:
                    view = out.torch(copy=False)
                    torch.cuda._sleep(int(rng.integers(0, 400)) * 1980)  # a late reader on the current stream
                    got = view.clone()
                copies.append((got, frames[i % len(frames)][1]))
        torch.cuda.synchronize()
        c.close()
        return sum(not np.allclose(got.cpu().numpy(), want, atol=1.5 / 255) for got, want in copies)

    results = {s: corrupt(s) for s in ("auto", "event", "async", "none")}
    print(f"out.torch(copy={copy}) on the {current}: corrupt of 24 {results}")
    assert results["auto"] == results["event"] == results["async"] == 0
    if current == "side stream":  # the legacy default stream already waits for stream 0 (it is stream 0)
        assert results["none"] > 0


class _NullEffect:
    """nvvfx's ``run()`` signature, no GPU work: its output is a raw capsule of one buffer, rewritten each run."""

    device = 0
    image_encoding = "RGB8"

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any:
        return types.SimpleNamespace(image=self._buffer.__dlpack__(stream=-1))

    def close(self) -> None:
        pass


@pytest.mark.parametrize("tags", ["tagged", "control-untagged"])
def test_views_chained_into_another_effect_are_read_or_refused_by_their_tag(torch_cuda, monkeypatch, tags: str) -> None:  # type: ignore[no-untyped-def]
    """Effects chained by zero-copy views: a torch view of one effect's output passed to another effect is read
    (the first effect's next run waits for it); one passed after its effect ran again is refused. Every view of an
    output has the same memory, so only the view's tag (by identity: torch compares tensors elementwise, and a
    weak-keyed dictionary asked ``view == view`` and raised "Boolean value of Tensor with more than one value is
    ambiguous") tells the old view from the newest. Control: with the tags off, the stale view goes through."""
    torch = torch_cuda
    from streamsafe.buffers import Buffer

    if tags != "tagged":
        monkeypatch.setattr(Buffer, "tag_view", lambda self, view, generation: None)
    side = torch.cuda.Stream()
    x = torch.zeros(3, 16, 16, device="cuda")
    with torch.cuda.stream(side):
        first = ss.StreamContract(_NullEffect(torch.zeros(3, 32, 32, device="cuda")), side, input_stream=side)
        second = ss.StreamContract(_NullEffect(torch.zeros(3, 32, 32, device="cuda")), side, input_stream=side)
        old = first.run(x).torch(copy=False)
        new = first.run(x).torch(copy=False)
        assert old.data_ptr() == new.data_ptr()
        second.run(new)  # a current view: read (before, the tag's lookup raised RuntimeError here)
        refused = None
        try:
            second.run(old)
        except ss.errors.StaleOutputError as e:
            refused = e
    torch.cuda.synchronize()
    first.close()
    second.close()
    if tags == "tagged":
        assert refused is not None and "#1" in str(refused), refused
    else:
        assert refused is None, "the control refused the stale view without its tag: the test above shows nothing"


@pytest.mark.parametrize("facts", ["layout a fact", "control-layout-no-fact"])
def test_a_kept_frame_that_copies_its_input_is_not_reused_for_a_cropped_one(torch_cuda, monkeypatch, facts: str) -> None:  # type: ignore[no-untyped-def]
    """``auto`` with no input stream declared copies a dense input and not a cropped one of the same shape (it has
    gaps between rows): a frame kept for dense inputs is not reused for the crop (``STREAMSAFE_CHECK_REPLAY=1``
    plans each reused call again and requires the same frame). Control: with the layout no fact, the copying frame
    is reused and the check raises."""
    torch = torch_cuda
    from streamsafe import steady

    monkeypatch.setattr(steady, "check_replay", True)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        c = ss.StreamContract(_NullEffect(torch.zeros(3, 32, 32, device="cuda")), side, strategy="auto")
        if facts != "layout a fact":
            c.steady.copies = False
        dense, big = torch.zeros(3, 16, 16, device="cuda"), torch.zeros(3, 16, 32, device="cuda")
        for _ in range(3):
            c.run(dense).torch()
        copies = c.stats["input_copies"]
        assert copies == 3
        try:
            c.run(big[:, :, :16]).torch()
            reused = None
        except AssertionError as e:
            reused = e
    torch.cuda.synchronize()
    c.close()
    if facts == "layout a fact":
        assert reused is None and c.stats["input_copies"] == copies, reused
    else:
        assert reused is not None, "the control reused nothing: the test above shows nothing"


def test_seed_samples_run_inside_a_contract_without_device_syncs(torch_cuda, frames) -> None:  # type: ignore[no-untyped-def]
    cupy = pytest.importorskip("cupy")
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    torch = torch_cuda
    from streamsafe.testing import VideoSuperRes

    be = ss.CudaBackend()
    sr = VideoSuperRes(backend=be, latency_us={"inference": 100, "conversion": 100})
    sr.output_width, sr.output_height = OW, OH
    sr.load()
    side = torch.cuda.Stream()
    bad = {"torch": 0, "cupy": 0, "jax": 0}
    n = 100
    with torch.cuda.stream(side), ss.stream_contract(sr, side):
        for i in range(n):
            x, want = frames[i % len(frames)]
            frame = torch.from_numpy(x).cuda()
            # the vendor's documented torch recipe, minus its torch.cuda.synchronize()
            stream = torch.cuda.current_stream()
            result = sr.run(frame, stream_ptr=stream.cuda_stream, non_blocking=False)
            output = torch.from_dlpack(result.image).clone()
            bad["torch"] += not np.allclose(output.cpu().numpy(), want, atol=1.5 / 255)
            # the vendor's documented CuPy note, minus its deviceSynchronize()
            result = sr.run(frame)
            with cupy.cuda.Stream(non_blocking=True):
                copied = cupy.from_dlpack(result.image).copy()
                bad["cupy"] += not np.allclose(cupy.asnumpy(copied), want, atol=1.5 / 255)
            # the vendor's documented JAX adapter code, unchanged
            result = sr.run(frame)
            adapter = ss.JaxDLPackAdapter(result.image, device_id=0)
            output_view = jax.dlpack.from_dlpack(adapter, copy=False)
            output = jnp.array(output_view, copy=True)
            output.block_until_ready()
            bad["jax"] += not np.allclose(np.asarray(output), want, atol=1.5 / 255)
    sr.close()
    print(f"seed samples inside a contract, {n} frames each, corrupted: {bad}")
    if (path := lane_output("seed-samples.json")) is not None:
        path.write_text(json.dumps({"frames": n, "corrupt": bad}))
    assert bad == {"torch": 0, "cupy": 0, "jax": 0}


def test_sanitize_reports_a_deliberately_missing_fence(torch_cuda, frames) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("cupy")
    torch = torch_cuda
    from streamsafe.testing import VideoSuperRes

    be = ss.CudaBackend()
    sdk, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    x = torch.from_numpy(frames[0][0]).cuda()
    torch.cuda.synchronize()

    def make() -> Any:
        sr = VideoSuperRes(backend=be)
        sr.output_width, sr.output_height = OW, OH
        sr.load()
        return sr

    with ss.sanitize() as shadow:  # fenced: no report
        c = ss.StreamContract(make(), sdk, strategy="event")
        for _ in range(3):
            with torch.cuda.stream(sdk):
                c.run(x).torch(consumer)
        c.close()
    assert shadow.races == []
    with ss.sanitize(), pytest.raises(ss.errors.RaceError) as info:  # the H3 fence left out on purpose
        c = ss.StreamContract(make(), sdk, strategy="none", allow_none=True)
        with torch.cuda.stream(sdk):
            c.run(x).torch(consumer)
    text = str(info.value)
    print(text)
    assert "VideoSuperRes.conversion" in text and "consumer.copy" in text
    if (path := lane_output("sanitize.txt")) is not None:
        path.write_text(text + "\n")


@pytest.mark.parametrize("how", ["configure", "synchronize"])
def test_a_stream_the_program_destroys_after_a_release_is_never_used_again(torch_cuda, how: str) -> None:  # type: ignore[no-untyped-def]
    """A run on a CuPy stream, a release (an output-size change, or the host wait of synchronize()), the
    stream dropped and destroyed, then a run on another stream. The ledger kept the first stream as the
    previous run's SDK stream, and the next run's event wait on it crashed the process (a review on an
    H200); the release now waits for it on the host and forgets it. Each frame is compared with NumPy."""
    import gc

    cupy = pytest.importorskip("cupy")
    from streamsafe.testing import VideoSuperRes

    sr = VideoSuperRes(latency_us=200)
    sr.input_width = sr.input_height = 32
    sr.output_width = sr.output_height = 64
    sr.load()
    c = ss.StreamContract(sr, strategy="event")
    data = np.random.default_rng(0).random((3, 32, 32), dtype=np.float32)
    x = cupy.asarray(data)
    first = cupy.cuda.Stream(non_blocking=True)
    with first:
        c.run(x)  # never imported: nothing else holds the stream
    if how == "configure":
        c.configure(output_width=96)
    else:
        c.synchronize()
    assert c.ledger.previous_sdk == ()
    del first
    gc.collect()
    second = cupy.cuda.Stream(non_blocking=True)
    with second:
        got = cupy.asnumpy(c.run(x).cupy())
    second.synchronize()
    ow = 96 if how == "configure" else 64
    want = K.to_rgb8(np, K.resize_bilinear(np, data, 64, ow)).astype(np.float32) / np.float32(255)
    assert got.shape == want.shape and float(np.abs(got - want).max()) <= 0.5 / 255
    c.close()


_STREAM_PER_FRAME = """
import gc, sys
import numpy as np, cupy
import streamsafe as ss
from streamsafe import ledger
from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K
if sys.argv[1] == "unheld":  # the old ledger: the SDK stream's object is not kept
    ledger.Ledger._hold_sdk_streams = lambda self, keep=None: self._release_holds()
strategy, how = sys.argv[2], sys.argv[3]
sr = VideoSuperRes(latency_us={"inference": 300, "conversion": 100})
sr.output_width = sr.output_height = 64
sr.load()
c = ss.StreamContract(sr, strategy=strategy)
rng = np.random.default_rng(3)
datas = [rng.random((3, 32, 32), dtype=np.float32) for _ in range(4)]
xs = [cupy.asarray(d) for d in datas]
consumer = cupy.cuda.Stream(non_blocking=True)
copies = []
for i in range(40):
    if how == "stream per frame":  # a stream for this frame only: destroyed once dropped
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            out = c.run(xs[i % 4])
        copies.append(out.cupy(consumer))
        del s, out
    else:  # a contract and its stream per clip of 4 frames, dropped without close()
        if i % 4 == 0:
            s = cupy.cuda.Stream(non_blocking=True)
            c = ss.StreamContract(sr, s, strategy=strategy)
        out = c.run(xs[i % 4])
        copies.append(out.cupy(consumer))
        del out
        if i % 4 == 3:
            del c, s
    gc.collect()
cupy.cuda.runtime.deviceSynchronize()
wrong = 0
for i, cp in enumerate(copies):
    want = K.to_rgb8(np, K.resize_bilinear(np, datas[i % 4], 64, 64)).astype(np.float32) / np.float32(255)
    wrong += float(np.abs(cupy.asnumpy(cp) - want).max()) > 0.5 / 255
print("wrong", wrong)
"""


@pytest.mark.parametrize("how", ["stream per frame", "contract per clip"])
@pytest.mark.parametrize("strategy", ["auto", "event", "async"])
def test_a_stream_made_for_each_frame_lives_until_the_next_run_has_fenced_it(torch_cuda, strategy: str, how: str) -> None:
    """``with cupy.cuda.Stream(): out = c.run(x)`` with a new stream each frame, dropped after it (CuPy
    destroys it), or a contract declared with a new stream for each clip of four frames, both dropped
    without ``close()``: the ledger holds the SDK stream's object until the next run's wait on it is
    issued, so that wait never names a destroyed handle. In a subprocess, each frame compared with NumPy; the same
    program with the old ledger (the object not held) is run too and its outcome printed: a destroyed
    handle is undefined behaviour (on the lent H200 the process died of SIGSEGV under ``event``, and
    passed by chance under ``auto`` and ``async`` on an H200), so it is not asserted."""
    import subprocess
    import sys

    pytest.importorskip("cupy")
    outcomes = {}
    for held in ("held", "unheld"):
        proc = subprocess.run([sys.executable, "-c", _STREAM_PER_FRAME, held, strategy, how], capture_output=True, text=True, timeout=120)
        outcomes[held] = (proc.returncode, (proc.stdout.strip().splitlines() or [""])[-1], proc.stderr.strip().splitlines()[-1:])
    print(f"{how} [{strategy}]: {outcomes}")
    rc, last, err = outcomes["held"]
    assert rc == 0 and last == "wrong 0", outcomes["held"]
