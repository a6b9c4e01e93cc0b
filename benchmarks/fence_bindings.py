"""What one device-side fence (and the reads a replay makes) costs the host through each binding:
cuda-bindings, ctypes on libcuda, the driver calls that keep the GIL (``streamsafe.backend._held``), torch;
on one thread, then on 8 threads at once. On a GPU machine:

    PYTHONPATH=. python3 benchmarks/fence_bindings.py

Each one-thread row is the best of 5 loops of 20,000 calls (after 2,000 untimed), in microseconds per call.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from typing import Any

N = 20000


def bench(torch: Any, label: str, fn: Callable[[], Any]) -> None:
    for _ in range(2000):
        fn()
    xs = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(N):
            fn()
        xs.append((time.perf_counter() - t) / N * 1e6)
    torch.cuda.synchronize()
    print(f"{label:55s} {min(xs):6.2f} us")


def threaded(torch: Any, d: Any, label: str, make_fence: Callable[..., Callable[[], Any]], threads: int = 8, n: int = 5000) -> None:
    """``threads`` threads, each fencing between two streams of its own ``n`` times with some Python between."""
    streams = [(torch.cuda.Stream(), torch.cuda.Stream()) for _ in range(threads)]
    events = [d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)[1] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        torch.cuda.set_device(0)
        fence = make_fence(events[i], *streams[i])
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
    print(f"{label:55s} {dt / (threads * n) * 1e6:6.2f} us per fence, {threads} threads")


def main() -> None:
    import torch
    from cuda.bindings import driver as d

    from streamsafe.backend._held import held_calls

    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    h1, h2 = s1.cuda_stream, s2.cuda_stream
    ev = d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)[1]
    evi = int(ev)
    rec, wait = d.cuEventRecord, d.cuStreamWaitEvent
    cs1, cs2, leg = d.CUstream(h1), d.CUstream(h2), d.CUstream(d.CU_STREAM_LEGACY)

    ok = d.CUresult.CUDA_SUCCESS

    # cuda-bindings (each row checks its results, as a library must)
    def cb() -> None:
        if rec(ev, cs1)[0] != ok or wait(cs2, ev, 0)[0] != ok:
            raise RuntimeError("cuda-bindings fence")

    def cb_legacy() -> None:
        if rec(ev, leg)[0] != ok or wait(cs2, ev, 0)[0] != ok:
            raise RuntimeError("cuda-bindings fence")

    def cb_int() -> None:
        if rec(evi, h1)[0] != ok or wait(h2, evi, 0)[0] != ok:
            raise RuntimeError("cuda-bindings fence")

    bench(torch, "cuda-bindings record+wait", cb)
    bench(torch, "cuda-bindings record(legacy)+wait", cb_legacy)
    bench(torch, "cuda-bindings cuCtxGetCurrent", d.cuCtxGetCurrent)
    try:
        bench(torch, "cuda-bindings record+wait with int args", cb_int)
    except Exception as e:
        print("int args refused:", e)

    # ctypes on libcuda, loaded here (the library's own calls below take the driver's entry points instead)
    lib = ctypes.CDLL("libcuda.so.1")
    vp, i32, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    crec, cwait, cgc = lib.cuEventRecord, lib.cuStreamWaitEvent, lib.cuCtxGetCurrent
    crec.argtypes, crec.restype = [vp, vp], i32
    cwait.argtypes, cwait.restype = [vp, vp, u32], i32
    cgc.argtypes, cgc.restype = [vp], i32
    crec2 = ctypes.CFUNCTYPE(i32, vp, vp)(("cuEventRecord", lib))
    cwait2 = ctypes.CFUNCTYPE(i32, vp, vp, u32)(("cuStreamWaitEvent", lib))

    def ct() -> None:
        if crec(evi, h1) or cwait(h2, evi, 0):
            raise RuntimeError("ctypes fence")

    def ct2() -> None:
        if crec2(evi, h1) or cwait2(h2, evi, 0):
            raise RuntimeError("ctypes fence")

    bench(torch, "ctypes libcuda record+wait", ct)
    bench(torch, "ctypes CFUNCTYPE record+wait", ct2)
    ref = ctypes.byref(ctypes.c_void_p())
    bench(torch, "ctypes cuCtxGetCurrent", lambda: cgc(ref))

    # torch, and the reads a replay makes
    tev = torch.cuda.Event()
    bench(torch, "torch Event.record + Stream.wait_event", lambda: (tev.record(s1), s2.wait_event(tev)))
    raw = torch._C._cuda_getCurrentRawStream
    bench(torch, "torch._C._cuda_getCurrentRawStream(0)", lambda: raw(0))
    x = torch.zeros(3, 16, 16, device="cuda")
    bench(torch, "tensor.get_device()", x.get_device)
    bench(torch, "tensor.shape", lambda: x.shape)
    bench(torch, "torch.cuda.current_stream(0)", lambda: torch.cuda.current_stream(0))
    bench(torch, "torch.from_dlpack(producer tensor)", lambda: torch.from_dlpack(x))

    # the driver calls that keep the GIL, then 8 threads through each binding
    held = held_calls()

    def bindings_fence(ev: Any, a: Any, b: Any) -> Callable[[], Any]:
        ca, cb = d.CUstream(a.cuda_stream), d.CUstream(b.cuda_stream)
        return lambda: (rec(ev, ca), wait(cb, ev, 0))

    def held_fence(ev: Any, a: Any, b: Any) -> Callable[[], Any]:
        e, ha, hb = int(ev), a.cuda_stream, b.cuda_stream
        return lambda: (held.cuEventRecord(e, ha), held.cuStreamWaitEvent(hb, e, 0))

    def torch_fence(ev: Any, a: Any, b: Any) -> Callable[[], Any]:
        t = torch.cuda.Event()
        return lambda: (t.record(a), b.wait_event(t))

    if held is not None:
        bench(torch, "held (PYFUNCTYPE via cuGetProcAddress) record+wait", held_fence(ev, s1, s2))
    for name, make in (("cuda-bindings", bindings_fence), ("held", held_fence), ("torch", torch_fence)):
        if name == "held" and held is None:
            print("held calls not found")
            continue
        threaded(torch, d, f"{name} record+wait", make)


if __name__ == "__main__":
    main()
