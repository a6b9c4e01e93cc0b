"""The per-thread default stream on a real GPU: handle 2 names the issuing thread's stream, and the
legacy stream orders another thread's per-thread stream (what streamsafe's fences rely on)."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from _lane import lane_output
from _per_thread import expected, in_thread, take_turns
from streamsafe import ledger as ledger_module, program as program_module
from streamsafe.streams import issuable

pytestmark = pytest.mark.gpu
H = W = 64


def test_handle_2_is_the_issuing_threads_stream_and_legacy_orders_it(torch_cuda) -> None:  # type: ignore[no-untyped-def]
    """A 40 ms kernel on the main thread's per-thread stream. In another thread, an event recorded on
    "2" is done at once (it is that thread's own, empty stream: the hole), while one recorded where
    :func:`~streamsafe.streams.issuable` puts it (the legacy stream) waits for the kernel. Then the
    other direction: a wait on the legacy stream, issued in another thread, holds the main thread's
    later per-thread work."""
    torch = torch_cuda
    from streamsafe.testing._engines import spin_cycles_per_us

    be = ss.CudaBackend()
    cycles = spin_cycles_per_us(0)
    per_thread = torch.cuda.ExternalStream(2, device=0)
    torch.cuda.synchronize()
    mine = ss.as_stream(2, backend=be)
    with torch.cuda.stream(per_thread):
        torch.cuda._sleep(int(40_000 * cycles))

    def other() -> tuple[bool, bool, str]:
        naive, fenced = be.acquire_event(0), be.acquire_event(0)
        be.record(naive, ss.Stream(0, 2, ss.StreamKind.PER_THREAD, be))  # "2" in this thread
        be.record(fenced, issuable(mine))
        time.sleep(0.005)
        return be.query(naive), be.query(fenced), str(issuable(mine))

    naive_done, fenced_done, where = in_thread(other)
    torch.cuda.synchronize()

    # the other direction: the legacy stream waits (in another thread) for a 40 ms kernel on a side stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(40_000 * cycles))
    side_stream = ss.as_stream(side, backend=be)
    in_thread(lambda: be.fence(issuable(mine), side_stream))  # mine is another thread's there: the legacy stream waits
    after = be.acquire_event(0)
    with torch.cuda.stream(per_thread):
        torch.cuda._sleep(10)
    be.record(after, mine)
    time.sleep(0.005)
    held = not be.query(after)
    torch.cuda.synchronize()
    result = {"naive_record_done_at_once": naive_done, "legacy_record_done_at_once": fenced_done, "issued_on": where,
              "later_per_thread_work_held_by_legacy_wait": held}
    print(f"per-thread primitive: {result}")
    if (path := lane_output("per-thread-primitive.json")) is not None:
        path.write_text(json.dumps(result, indent=1))
    assert naive_done, "an event recorded on 2 in another thread should not follow the main thread's kernel"
    assert not fenced_done and "legacy" in where
    assert held


def _hdr_ok(got: np.ndarray, want: np.ndarray) -> bool:
    return all(np.abs((got >> s & 0x3FF).astype(int) - (want >> s & 0x3FF).astype(int)).max() <= 1 for s in (0, 10, 20))


def _two_threads_per_thread_readers(torch: Any, strategy: str, frames: int, seed: int) -> int:
    """One emulated TrueHDR (random latencies) on a side stream, run by two threads taking turns; each
    thread reads the output late (a random 0.3-3 ms on its per-thread stream, longer than the next run takes to reach its write) through
    ``torch.from_dlpack(out.image)`` on its per-thread stream. Returns the corrupt frames."""
    from streamsafe.testing import TrueHDR
    from streamsafe.testing._engines import spin_cycles_per_us

    be = ss.CudaBackend()
    cycles = spin_cycles_per_us(0)
    rng = np.random.default_rng(seed)
    fx = TrueHDR(backend=be, latency_us={"inference": float(rng.integers(0, 100))})
    fx.load()
    side = torch.cuda.Stream()
    c = ss.StreamContract(fx, side, strategy=strategy, allow_none=strategy == "none")
    datas = [rng.random((3, H, W), dtype=np.float32) for _ in range(8)]
    wants = [expected(x) for x in datas]
    inputs = [torch.from_numpy(x).cuda() for x in datas]
    delays = rng.integers(300, 3000, size=frames)
    torch.cuda.synchronize()
    copies: list[Any] = [None] * frames

    def step(i: int) -> None:  # (in the thread of its turn: 2 is that thread's per-thread stream)
        with torch.cuda.stream(torch.cuda.ExternalStream(2, device=0)):
            out = c.run(inputs[i % len(inputs)])
            torch.cuda._sleep(int(delays[i] * cycles))  # a late reader
            copies[i] = torch.from_dlpack(out.image).clone()

    try:
        take_turns(frames, step)
    finally:
        torch.cuda.synchronize()
        c.close()
    return sum(not _hdr_ok(cp.cpu().numpy(), wants[i % len(wants)]) for i, cp in enumerate(copies))


def test_readers_on_each_threads_per_thread_stream(torch_cuda, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    frames = 200
    results = {s: _two_threads_per_thread_readers(torch, s, frames, seed=k) for k, s in enumerate(("auto", "event", "async", "none"))}
    for module in (program_module, ledger_module):
        monkeypatch.setattr(module, "issuable", lambda s: s)  # the old behaviour: fence "2" in the next run's thread
    results["event, fenced on the wrong thread's 2"] = _two_threads_per_thread_readers(torch, "event", frames, seed=9)
    monkeypatch.undo()
    print(f"per-thread readers, two threads, corrupt of {frames}: {results}")
    if (path := lane_output("per-thread-readers.json")) is not None:
        path.write_text(json.dumps({"frames": frames, "corrupt": results}, indent=1))
    assert results["auto"] == results["event"] == results["async"] == 0
    assert results["none"] > 0
    assert results["event, fenced on the wrong thread's 2"] > 0


_CUPY_PER_THREAD = """
import sys, threading
import numpy as np, cupy
import streamsafe as ss
from streamsafe import ledger, program
from streamsafe.testing import TrueHDR
from streamsafe.testing import _kernels as K
from streamsafe.testing._engines import _spin_kernel, spin_cycles_per_us

strategy, frames = sys.argv[1], int(sys.argv[2])
assert cupy.cuda.get_current_stream().ptr == 2, "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1 makes 2 the current stream"
if strategy == "wrong-thread":  # the old behaviour: another thread's 2 fenced as this thread's
    strategy = "event"
    ledger.issuable = program.issuable = lambda s: s
rng = np.random.default_rng(5)
fx = TrueHDR(latency_us={"inference": float(rng.integers(0, 100))})
fx.load()
c = ss.StreamContract(fx, cupy.cuda.Stream(non_blocking=True), strategy=strategy, allow_none=strategy == "none")
datas = [rng.random((3, 64, 64), dtype=np.float32) for _ in range(8)]
wants = [K.tone_map_hdr(np, x, contrast=100, saturation=100, middle_gray=50, luminance=650) for x in datas]
delays = rng.integers(300, 3000, size=frames)
spin, cycles = _spin_kernel(), spin_cycles_per_us(0)
copies = [None] * frames
turns = [threading.Event() for _ in range(frames + 1)]
errors = []

def worker(parity):
    for i in range(parity, frames, 2):
        turns[i].wait()
        try:
            x = cupy.asarray(datas[i % 8])  # written on this thread's per-thread stream (CuPy's current)
            out = c.run(x)
            spin((1,), (1,), (np.int64(delays[i] * cycles),))  # a late reader, on the same stream
            copies[i] = cupy.from_dlpack(out.image).copy()
        except BaseException as e:
            errors.append(e)
        finally:
            turns[i + 1].set()

threads = [threading.Thread(target=worker, args=(p,)) for p in (0, 1)]
for t in threads:
    t.start()
turns[0].set()
for t in threads:
    t.join()
cupy.cuda.runtime.deviceSynchronize()
if errors:
    raise errors[0]
ok = lambda got, want: all(np.abs((got >> s & 0x3FF).astype(int) - (want >> s & 0x3FF).astype(int)).max() <= 1 for s in (0, 10, 20))
print("wrong", sum(not ok(cupy.asnumpy(cp), wants[i % 8]) for i, cp in enumerate(copies)))
"""


def test_cupy_with_per_thread_default_streams_in_two_threads(torch_cuda) -> None:  # type: ignore[no-untyped-def]
    """``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1`` (each thread's CuPy work on its own per-thread stream), one
    effect shared by two threads taking turns, each producing, running and copying (late) on its stream:
    no frame wrong under auto, event and async; wrong frames without fences, and with another thread's
    per-thread stream fenced as the next run's own (the old behaviour). Each run in a subprocess (the
    mode is read when CuPy loads)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("cupy")
    env = {**os.environ, "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM": "1"}
    frames = 200
    results: dict[str, Any] = {}
    for strategy in ("auto", "event", "async", "none", "wrong-thread"):
        proc = subprocess.run([sys.executable, "-c", _CUPY_PER_THREAD, strategy, str(frames)], capture_output=True, text=True,
                              timeout=180, env=env)
        last = (proc.stdout.strip().splitlines() or [""])[-1]
        results[strategy] = int(last.split()[1]) if proc.returncode == 0 and last.startswith("wrong") else proc.stderr[-600:]
    print(f"CuPy per-thread default streams, two threads, wrong of {frames}: {results}")
    if (path := lane_output("per-thread-cupy.json")) is not None:
        path.write_text(json.dumps({"frames": frames, "wrong": results}, indent=1))
    assert results["auto"] == results["event"] == results["async"] == 0, results
    assert isinstance(results["none"], int) and results["none"] > 0, results
    assert isinstance(results["wrong-thread"], int) and results["wrong-thread"] > 0, results
