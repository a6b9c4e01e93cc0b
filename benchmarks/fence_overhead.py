"""Host time of one fence: CudaBackend (pooled driver event) vs a fresh torch.cuda.Event.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/fence_overhead.py [--json PATH] [--bindings]
Target (issue 2): CudaBackend median <= 5 us on an H200. Strategies are interleaved in
blocks so drift hits both alike; the result keeps every raw sample.

``--bindings`` then times one fence (an event record and a stream wait) through each way of calling
the driver, best of 5 loops of 20,000 calls: ``cuda.bindings`` (which releases the GIL around each
call), ``ctypes`` on ``libcuda`` (``CFUNCTYPE``: releases it too), ``ctypes.PYFUNCTYPE`` (keeps the GIL
for the call's microsecond) and torch's ``Event.record`` + ``Stream.wait_event``, with the reads a
guarded frame makes (torch's current stream, a tensor's device and shape); then each of them, and
``CudaBackend.fence``, on 8 threads at once, each fencing its own two streams with some Python between
fences, as the video server's lanes do: with many threads, a call that gives the GIL up and takes it
back costs more than the call.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from _timing import interleave


@dataclass
class FenceResult:
    """Raw per-fence host times in microseconds, per strategy."""

    samples_us: dict[str, list[float]] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for name, xs in self.samples_us.items():
            ordered = sorted(xs)
            out[name] = {
                "median_us": statistics.median(xs),
                "p90_us": ordered[int(0.9 * (len(ordered) - 1))],
                "mean_us": statistics.fmean(xs),
                "n": len(xs),
            }
        return out


def measure_fence_overhead(*, blocks: int = 50, per_block: int = 200, warmup: int = 2000) -> FenceResult:
    """Interleave blocks of each strategy; each sample is one block's mean time per fence."""
    import torch

    import streamsafe as ss

    backend = ss.CudaBackend()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    a, b = ss.as_stream(s1, backend=backend), ss.as_stream(s2, backend=backend)

    def streamsafe_fence() -> None:
        backend.fence(b, a)

    def torch_event_fence() -> None:
        ev = torch.cuda.Event()
        ev.record(s1)
        s2.wait_event(ev)

    def torch_synchronize() -> None:
        torch.cuda.synchronize()

    strategies: dict[str, Callable[[], None]] = {
        "streamsafe CudaBackend.fence": streamsafe_fence,
        "torch.cuda.Event record+wait (fresh event)": torch_event_fence,
        "torch.cuda.synchronize (idle device)": torch_synchronize,
    }
    return FenceResult(interleave(strategies, blocks=blocks, per_block=per_block, warmup=warmup, sync=torch.cuda.synchronize))


def format_result(result: FenceResult) -> str:
    lines = [f"{'strategy':<46} {'median us':>10} {'p90 us':>9} {'samples':>8}"]
    for name, s in result.summary().items():
        lines.append(f"{name:<46} {s['median_us']:>10.2f} {s['p90_us']:>9.2f} {s['n']:>8}")
    return "\n".join(lines)


# -- --bindings: one fence through each way of calling the driver, on one thread and on 8 ---------------

N_CALLS = 20000


def _best_us(torch: Any, fn: Callable[[], Any]) -> float:
    """The best of 5 loops of ``N_CALLS`` calls (after 2,000 untimed), microseconds a call."""
    for _ in range(2000):
        fn()
    xs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(N_CALLS):
            fn()
        xs.append((time.perf_counter() - t) / N_CALLS * 1e6)
    torch.cuda.synchronize()
    return min(xs)


def _threaded_us(torch: Any, make_fence: Callable[[Any, Any], Callable[[], Any]], threads: int = 8, n: int = 5000) -> float:
    """``threads`` threads, each fencing between two streams of its own ``n`` times with some Python
    between fences: wall microseconds per fence over all of them."""
    streams = [(torch.cuda.Stream(), torch.cuda.Stream()) for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        torch.cuda.set_device(0)
        fence = make_fence(*streams[i])
        barrier.wait()
        for _ in range(n):
            fence()
            sum(range(30))  # some Python between fences, as a pipeline has

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    return dt / (threads * n) * 1e6


class _DriverCalls:
    """``cuEventRecord``, ``cuStreamWaitEvent`` and ``cuCtxGetCurrent`` from ``libcuda``, through ctypes:
    ``CFUNCTYPE`` (the GIL released around each call, as ``cuda.bindings`` does) or ``PYFUNCTYPE`` (kept)."""

    def __init__(self, keep_gil: bool) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        make = ctypes.PYFUNCTYPE if keep_gil else ctypes.CFUNCTYPE
        vp, i32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
        self.record = make(i32, vp, vp)(("cuEventRecord", lib))
        self.wait = make(i32, vp, vp, u32)(("cuStreamWaitEvent", lib))
        self.ctx = make(i32, vp)(("cuCtxGetCurrent", lib))


def measure_bindings() -> dict[str, float]:
    """Microseconds a call, per row (see the module docstring)."""
    import torch
    from cuda.bindings import driver as d

    import streamsafe as ss

    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    h1, h2 = s1.cuda_stream, s2.cuda_stream
    ok = d.CUresult.CUDA_SUCCESS
    flags = d.CUevent_flags.CU_EVENT_DISABLE_TIMING

    def new_event() -> Any:
        err, ev = d.cuEventCreate(flags)
        if err != ok:
            raise RuntimeError(f"cuEventCreate: {err}")
        return ev

    ev = new_event()
    evi = int(ev)
    rec, wait = d.cuEventRecord, d.cuStreamWaitEvent
    cs1, cs2, leg = d.CUstream(h1), d.CUstream(h2), d.CUstream(d.CU_STREAM_LEGACY)
    released, kept = _DriverCalls(keep_gil=False), _DriverCalls(keep_gil=True)
    box = ctypes.byref(ctypes.c_void_p())

    def cb() -> None:  # (each row checks its results, as a library must)
        if rec(ev, cs1)[0] != ok or wait(cs2, ev, 0)[0] != ok:
            raise RuntimeError("cuda-bindings fence")

    def cb_legacy() -> None:
        if rec(ev, leg)[0] != ok or wait(cs2, ev, 0)[0] != ok:
            raise RuntimeError("cuda-bindings fence")

    def ctypes_fence(calls: _DriverCalls) -> Callable[[], None]:
        record, wait_ = calls.record, calls.wait

        def fence() -> None:
            if record(evi, h1) or wait_(h2, evi, 0):
                raise RuntimeError("ctypes fence")

        return fence

    tev = torch.cuda.Event()
    x = torch.zeros(3, 16, 16, device="cuda")
    rows: dict[str, Callable[[], Any]] = {
        "cuda-bindings record+wait": cb,
        "cuda-bindings record(legacy)+wait": cb_legacy,
        "cuda-bindings cuCtxGetCurrent": d.cuCtxGetCurrent,
        "ctypes CFUNCTYPE record+wait (GIL released)": ctypes_fence(released),
        "ctypes PYFUNCTYPE record+wait (GIL kept)": ctypes_fence(kept),
        "ctypes PYFUNCTYPE cuCtxGetCurrent": lambda: kept.ctx(box),
        "torch Event.record + Stream.wait_event": lambda: (tev.record(s1), s2.wait_event(tev)),
        "torch.cuda.current_stream(0)": lambda: torch.cuda.current_stream(0),
        "tensor.get_device()": x.get_device,
        "tensor.shape": lambda: x.shape,
        "torch.from_dlpack(producer tensor)": lambda: torch.from_dlpack(x),
    }
    out = {name: _best_us(torch, fn) for name, fn in rows.items()}

    backend = ss.CudaBackend()

    def bindings_fence(a: Any, b: Any) -> Callable[[], Any]:
        e, ca, cb_ = new_event(), d.CUstream(a.cuda_stream), d.CUstream(b.cuda_stream)
        return lambda: (rec(e, ca), wait(cb_, e, 0))

    def kept_fence(a: Any, b: Any) -> Callable[[], Any]:
        e, ha, hb = int(new_event()), a.cuda_stream, b.cuda_stream
        return lambda: (kept.record(e, ha), kept.wait(hb, e, 0))

    def torch_fence(a: Any, b: Any) -> Callable[[], Any]:
        t = torch.cuda.Event()
        return lambda: (t.record(a), b.wait_event(t))

    def streamsafe_fence(a: Any, b: Any) -> Callable[[], Any]:
        sa, sb = ss.as_stream(a, backend=backend), ss.as_stream(b, backend=backend)
        return lambda: backend.fence(sb, sa)

    for name, make in (("cuda-bindings", bindings_fence), ("ctypes PYFUNCTYPE (GIL kept)", kept_fence),
                       ("torch", torch_fence), ("streamsafe CudaBackend.fence", streamsafe_fence)):
        out[f"{name} record+wait, 8 threads (wall us per fence)"] = _threaded_us(torch, make)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write raw samples and summary here")
    parser.add_argument("--blocks", type=int, default=50)
    parser.add_argument("--per-block", type=int, default=200)
    parser.add_argument("--bindings", action="store_true", help="also one fence through each driver binding, on 1 and 8 threads")
    args = parser.parse_args()
    result = measure_fence_overhead(blocks=args.blocks, per_block=args.per_block)
    print(format_result(result))
    report: dict[str, Any] = {"summary": result.summary(), **asdict(result)}
    if args.bindings:
        report["bindings_us"] = bindings = measure_bindings()
        print()
        for name, us in bindings.items():
            print(f"{name:<62} {us:7.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
