"""Host time of one emulated run(): eager stages vs CUDA-graph stages (the bench's), per effect.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/effect_host_cost.py [--json PATH] [--calls]

Each row is the median over blocks of the host microseconds per raw ``run()`` (no contract),
``non_blocking=True``, no added latency, the effect's own streams. The GPU is drained before each
block, and a block is short (16 runs), so the driver's launch queue never fills: what is timed is
the host's work, not the GPU's. The last column runs 200 frames back to back instead: there the
queue fills and the host waits for the GPU, so it shows the GPU's time per frame when that is the
larger. Issue 10's target: the bench's emulated SDK at most 30 us of host time per ``run()``.

``--calls`` times the calls one graph-mode ``run()`` is made of, each alone, in the same short blocks
(the floor of a run): the driver calls through ``ctypes.PYFUNCTYPE`` on ``libcuda`` (the GIL kept for the
call, as the emulator keeps it), torch's export of the input and CuPy's of the output. Where a run's
host time goes, function by function: ``benchmarks/profile.py effect``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def _effects() -> list[tuple[str, Any, tuple[Any, ...], dict[str, Any]]]:
    """(name, make(mode), args, kwargs) for each effect the bench uses."""
    import torch

    import streamsafe as ss
    from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes

    be = ss.CudaBackend()
    x = torch.rand(3, 540, 960, device="cuda")
    x10 = torch.randint(0, 2**30, (540, 960), device="cuda", dtype=torch.int32).view(torch.uint32)

    def sr(mode: str, enc: Any) -> Any:
        fx = VideoSuperRes(backend=be, launch_mode=mode, image_encoding=enc)
        fx.output_width, fx.output_height = 1920, 1080
        return fx

    def vfg(mode: str) -> Any:
        fx = VideoFrameGeneration(backend=be, launch_mode=mode)
        fx.input_width, fx.input_height = 960, 540
        return fx

    return [
        ("VideoSuperRes RGB8 540p->1080p", lambda m: sr(m, ImageEncoding.RGB8), (x,), {}),
        ("VideoSuperRes RGB10A2 540p->1080p", lambda m: sr(m, ImageEncoding.RGB10A2), (x10,), {}),
        ("VideoFrameGeneration 540p", vfg, (x, x), {"frame_index": 1}),
        ("TrueHDR 540p", lambda m: TrueHDR(backend=be, launch_mode=m), (x,), {}),
    ]


def measure(blocks: int = 60, per_block: int = 16, sustained_blocks: int = 8, sustained: int = 200) -> dict[str, dict[str, list[float]]]:
    """Host microseconds per run, per effect and mode (``eager``, ``graph``), and back to back
    (``graph sustained``)."""
    import torch

    side = torch.cuda.Stream()
    results: dict[str, dict[str, list[float]]] = {}
    for kind, make, args, kw in _effects():
        for mode, n_blocks, n in (("eager", blocks, per_block), ("graph", blocks, per_block), ("graph sustained", sustained_blocks, sustained)):
            fx = make(mode.split()[0])
            fx.load()
            for _ in range(3):  # the first run of a key is eager (compiles, captures)
                fx.run(*args, stream_ptr=side.cuda_stream, non_blocking=True, **kw)
            samples = []
            for _ in range(n_blocks):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(n):
                    fx.run(*args, stream_ptr=side.cuda_stream, non_blocking=True, **kw)
                samples.append((time.perf_counter() - t0) / n * 1e6)
            torch.cuda.synchronize()
            fx.close()
            results.setdefault(kind, {})[mode] = samples
    return results


_COPY_KERNEL = r"""
extern "C" __global__ void copy_words(const unsigned long long* src, unsigned long long* dst, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def driver_calls(n: int = 2000, per_block: int = 16) -> dict[str, float]:
    """Median host microseconds of each call a graph-mode run makes, alone: the driver calls through
    ``ctypes.PYFUNCTYPE`` (the GIL kept), and torch's and CuPy's DLPack exports around them."""
    import ctypes

    import cupy
    import torch
    from cuda.bindings import driver as d

    lib = ctypes.CDLL("libcuda.so.1")
    P, vp, i32, u32, u64, sz = ctypes.PYFUNCTYPE, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_size_t
    cu_record = P(i32, vp, vp)(("cuEventRecord", lib))
    cu_wait = P(i32, vp, vp, u32)(("cuStreamWaitEvent", lib))
    cu_ctx = P(i32, vp)(("cuCtxGetCurrent", lib))
    cu_copy = P(i32, u64, u64, sz, vp)(("cuMemcpyDtoDAsync_v2", lib))
    cu_graph = P(i32, vp, vp)(("cuGraphLaunch", lib))
    cu_launch = P(i32, vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp)(("cuLaunchKernel", lib))

    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    s = side.cuda_stream
    x = torch.rand(3, 540, 960, device="cuda")
    buf = cupy.empty((3, 540, 960), dtype=cupy.float32)
    torch.cuda.synchronize()
    ok = d.CUresult.CUDA_SUCCESS
    err, ev = d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    assert err == ok, err
    evi = int(ev)

    kernel = cupy.RawKernel(_COPY_KERNEL, "copy_words")
    kernel.compile()
    fn = kernel.kernel.ptr

    def launch_copy(pairs: list[tuple[int, int, int]], stream: int) -> int:
        """One launch of the copy kernel per (src, dst, bytes), its arguments packed each call."""
        rc = 0
        for src, dst, nbytes in pairs:
            words = nbytes // 8
            args = (ctypes.c_uint64 * 3)(src, dst, words)
            base = ctypes.addressof(args)
            params = (ctypes.c_void_p * 3)(base, base + 8, base + 16)
            rc |= cu_launch(fn, min(4096, (words + 255) // 256), 1, 1, 256, 1, 1, 0, stream, params, None)
        return rc

    # a graph of one kernel, captured on a stream of its own (the emulator captures each stage group once)
    one = cupy.empty(1, dtype=cupy.float32)
    capture = torch.cuda.Stream()
    with cupy.cuda.ExternalStream(capture.cuda_stream):
        one.fill(1.0)  # (compiled and loaded before the capture)
    torch.cuda.synchronize()
    cs = d.CUstream(capture.cuda_stream)
    assert d.cuStreamBeginCapture(cs, d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0] == ok
    with cupy.cuda.ExternalStream(capture.cuda_stream):
        one.fill(1.0)
    err, graph = d.cuStreamEndCapture(cs)
    assert err == ok, err
    err, exe = d.cuGraphInstantiate(graph, 0)  # (cuda.bindings 13: the flags form is this one)
    assert err == ok, err
    exe_handle = int(exe)
    box = ctypes.byref(ctypes.c_void_p())
    copy_one = [(x.data_ptr(), buf.data.ptr, buf.nbytes)]
    steps: dict[str, Any] = {
        "cuEventRecord (SDK stream)": lambda: cu_record(evi, s),
        "cuEventRecord (legacy stream)": lambda: cu_record(evi, 1),
        "cuStreamWaitEvent": lambda: cu_wait(s, evi, 0),
        "cuCtxGetCurrent": lambda: cu_ctx(box),
        "cuLaunchKernel (the input copy, 6 MB)": lambda: launch_copy(copy_one, s),
        "cuLaunchKernel x2 (two inputs' copies, 2 x 6 MB)": lambda: launch_copy(copy_one * 2, s),
        "cuMemcpyDtoDAsync (6 MB)": lambda: cu_copy(buf.data.ptr, x.data_ptr(), buf.nbytes, s),
        "cuGraphLaunch (one kernel, SDK stream)": lambda: cu_graph(exe_handle, s),
        "cuGraphLaunch (one kernel, legacy stream)": lambda: cu_graph(exe_handle, 1),
        "torch x.__dlpack__()": lambda: x.__dlpack__(),
        "torch x.__dlpack__() + cupy.from_dlpack": lambda: cupy.from_dlpack(x.__dlpack__()),
        "cupy buf.__dlpack__(stream=-1)": lambda: buf.__dlpack__(stream=-1),
    }
    out: dict[str, float] = {}
    for name, step in steps.items():
        status = step()
        if name.startswith("cu") and not name.startswith("cupy") and status:  # (a driver call returns its status: nonzero fails)
            raise RuntimeError(f"{name} failed: CUresult {status}")
        samples = []
        for _ in range(max(1, n // per_block)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_block):
                step()
            samples.append((time.perf_counter() - t0) / per_block * 1e6)
        out[name] = statistics.median(samples)
    torch.cuda.synchronize()
    d.cuGraphExecDestroy(exe)
    d.cuGraphDestroy(graph)
    d.cuEventDestroy(ev)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--calls", action="store_true", help="also each call of a graph-mode run, alone")
    args = parser.parse_args()
    results = measure()
    print(f"{'effect':<36} {'eager us/run':>13} {'graph us/run':>13} {'eager/graph':>12} {'graph back to back':>19}")
    for kind, modes in results.items():
        e, g, b = (statistics.median(modes[m]) for m in ("eager", "graph", "graph sustained"))
        print(f"{kind:<36} {e:>13.1f} {g:>13.1f} {e / g:>12.1f} {b:>19.1f}")
    report: dict[str, Any] = {"runs": results}
    if args.calls:
        calls = driver_calls()
        report["calls"] = calls
        print()
        for name, us in calls.items():
            print(f"{name:<50} {us:>7.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)

if __name__ == "__main__":
    main()
