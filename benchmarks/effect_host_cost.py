"""Host time of one emulated run(): eager stages vs CUDA-graph stages (the bench's), per effect.

Run on a GPU machine:  PYTHONPATH=. python3 benchmarks/effect_host_cost.py [--json PATH] [--profile] [--calls] [--in-frame]

Each row is the median over blocks of the host microseconds per raw ``run()`` (no contract),
``non_blocking=True``, no added latency, the effect's own streams. The GPU is drained before each
block, and a block is short (16 runs), so the driver's launch queue never fills: what is timed is
the host's work, not the GPU's. The last column runs 200 frames back to back instead: there the
queue fills and the host waits for the GPU, so it shows the GPU's time per frame when that is the
larger. Issue 10's target: the bench's emulated SDK at most 30 us of host time per ``run()``.

``--calls`` times the driver calls one graph-mode ``run()`` is made of, each alone (the floor).
``--in-frame`` times each step of graph-mode ``run()`` inside real runs (short blocks too), with the
timing wrappers of ``hot_path_parts.py --in-frame`` (their own cost measured and taken off; what is
left of it lands in the steps that call other timed steps).
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


def driver_calls(n: int = 2000, per_block: int = 16) -> dict[str, float]:
    """Median host microseconds of each driver call a graph-mode run makes, alone, through the calls
    that keep the GIL; and of the Python-level steps around them (the input's export and import)."""
    import ctypes

    import cupy
    import torch

    import streamsafe as ss
    from streamsafe._dlpack import read_capsule
    from streamsafe.backend._held import held_calls
    from streamsafe.testing._engines import CupyEngine, _CopyLauncher

    held = held_calls()
    assert held is not None, "the driver's entry points were not found"
    be = ss.CudaBackend()
    engine = CupyEngine(be, 0)
    side = torch.cuda.Stream()
    s = side.cuda_stream
    x = torch.rand(3, 540, 960, device="cuda")
    buf = cupy.empty((3, 540, 960), dtype=cupy.float32)
    ev = be.acquire_event(0)
    one = cupy.empty(1, dtype=cupy.float32)
    graph = engine.capture(lambda st: engine.launch(st, "one", lambda xp, r, w: w[0].fill(1.0), [], [one]))
    launcher = _CopyLauncher(cupy, 0, held.cuLaunchKernel)
    box = ctypes.c_void_p()
    ref = ctypes.byref(box)
    steps: dict[str, Any] = {
        "cuEventRecord (SDK stream)": lambda: held.cuEventRecord(ev.handle_int, s),
        "cuEventRecord (legacy stream)": lambda: held.cuEventRecord(ev.handle_int, 1),
        "cuStreamWaitEvent": lambda: held.cuStreamWaitEvent(s, ev.handle_int, 0),
        "cuCtxGetCurrent": lambda: held.cuCtxGetCurrent(ref),
        "cuLaunchKernel (the input copy, 6 MB)": lambda: launcher([x.data_ptr(), buf.data.ptr, buf.nbytes], s),
        "cuLaunchKernel (two inputs' copy, 2 x 6 MB)": lambda: launcher([x.data_ptr(), buf.data.ptr, buf.nbytes] * 2, s),
        "cuMemcpyDtoDAsync (6 MB)": lambda: held.cuMemcpyDtoDAsync(buf.data.ptr, x.data_ptr(), buf.nbytes, s),
        "cuGraphLaunch (one kernel, SDK stream)": lambda: held.cuGraphLaunch(graph.handle, s),
        "cuGraphLaunch (one kernel, legacy stream)": lambda: held.cuGraphLaunch(graph.handle, 1),
        "torch x.__dlpack__()": lambda: x.__dlpack__(),
        "torch x.__dlpack__() + read_capsule": lambda: read_capsule(x.__dlpack__()),
        "torch x.__dlpack__() + cupy.from_dlpack": lambda: cupy.from_dlpack(x.__dlpack__()),
        "cupy buf.__dlpack__(stream=-1)": lambda: buf.__dlpack__(stream=-1),
    }
    out: dict[str, float] = {}
    for name, step in steps.items():
        samples = []
        for _ in range(max(1, n // per_block)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_block):
                step()
            samples.append((time.perf_counter() - t0) / per_block * 1e6)
        out[name] = statistics.median(samples)
    torch.cuda.synchronize()
    be.release_event(ev)
    return out


def in_frame(runs: int = 4000, per_block: int = 16) -> dict[str, Any]:
    """Each step's own host microseconds per graph-mode run, inside real runs (``--in-frame``)."""
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from _timers import OwnTimers, patch_all

    import streamsafe as ss
    from streamsafe.testing import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes
    from streamsafe.testing import _engines, effects

    be = ss.CudaBackend()
    side = torch.cuda.Stream()
    x = torch.rand(3, 540, 960, device="cuda")
    y = torch.rand(3, 540, 960, device="cuda")
    results: dict[str, Any] = {}
    vfg = VideoFrameGeneration(backend=be, launch_mode="graph")
    vfg.input_width, vfg.input_height = 960, 540
    for kind, fx in (("VideoSuperRes RGB8 540p->1080p", VideoSuperRes(backend=be, launch_mode="graph", image_encoding=ImageEncoding.RGB8)),
                     ("TrueHDR 540p", TrueHDR(backend=be, launch_mode="graph")),
                     ("VideoFrameGeneration 540p", vfg)):
        if isinstance(fx, VideoSuperRes):
            fx.output_width, fx.output_height = 1920, 1080
        fx.load()
        args, kwargs = ((x, y), {"frame_index": 1}) if fx is vfg else ((x,), {})

        def frame(fx: Any = fx, args: Any = args, kwargs: Any = kwargs) -> Any:
            return fx.run(*args, stream_ptr=side.cuda_stream, non_blocking=True, **kwargs)

        for _ in range(20):
            frame()
        torch.cuda.synchronize()
        plain = []
        for _ in range(runs // per_block):
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(per_block):
                frame()
            plain.append((time.perf_counter_ns() - t0) / per_block / 1000)
        timers = OwnTimers()
        timers.calibrate()
        eng = fx.engine
        sites: list[tuple[Any, str, str]] = [
            (fx, "run", "run()'s own lines"),
            (fx, "_check_ready", "checks (_check_ready, _check_image, _check_scale)"),
            (fx, "_check_image", "checks (_check_ready, _check_image, _check_scale)"),
            (fx, "_acquire", "taking the input (_acquire, take)"),
            (eng, "take", "taking the input (_acquire, take)"),
            (torch.Tensor, "__dlpack__", "torch's export of the input (x.__dlpack__(); an SDK pays it too)"),
            (_engines, "read_capsule", "reading the capsule (read_capsule, _numpy_dtype)"),
            (_engines, "_numpy_dtype", "reading the capsule (read_capsule, _numpy_dtype)"),
            (fx, "_run_stages", "_run_stages' own lines"),
            (fx, "_run_graphed", "_run_graphed's own lines (the graph key)"),
            (fx, "_stage_graphed", "_run_graphed's own lines (the graph key)"),
            (eng, "shape_dtype", "buffer look-ups (shape_dtype, _internal_buffer, _output_buffer)"),
            (fx, "_internal_buffer", "buffer look-ups (shape_dtype, _internal_buffer, _output_buffer)"),
            (fx, "_output_buffer", "buffer look-ups (shape_dtype, _internal_buffer, _output_buffer)"),
            (eng, "copy_inputs", "the input copy's own lines (copy_inputs)"),
            (_engines._CopyLauncher, "__call__", "the input copy's launch (cuLaunchKernel and its arguments)"),
            (eng, "launch_graph", "graph launches (launch_graph, cuGraphLaunch)"),
            (eng, "stream_cached", "stream look-ups (stream_cached)"),
            (eng, "_on_device", "the device check (_on_device)"),
            (fx, "_mark_own_work", "the SDK's own-work events (_mark_own_work, cuEventRecord)"),
            (eng, "export", "the output's export (export)"),
            (effects, type(frame()).__name__, "the output object"),
        ]
        if fx is vfg:
            sites.append((fx, "_generate", "run()'s own lines"))
        if isinstance(fx, VideoSuperRes):
            sites.append((fx, "_check_scale", "checks (_check_ready, _check_image, _check_scale)"))
        torch.cuda.synchronize()
        n = (runs // per_block) * per_block
        with patch_all(timers, sites):
            wall = timers.run_frames(frame, torch.cuda.synchronize, n, warmup=20, per_block=per_block)
        parts, instrumented = timers.parts_us(wall, n, "the frame loop's own lines (no wrapped call)")
        results[kind] = {"run_us": statistics.median(plain), "instrumented_us": instrumented, "parts_us": parts,
                         "timer_overhead_ns": timers.overhead_ns, "timed_calls_per_run": sum(timers.calls.values()) / n}
        fx.close()
    return results


def profile(runs: int = 2000) -> None:
    """cProfile of graph-mode VideoSuperRes RGB8 runs: where the emulated SDK's host time goes."""
    import cProfile
    import pstats

    import torch

    import streamsafe as ss
    from streamsafe.testing import VideoSuperRes

    side = torch.cuda.Stream()
    x = torch.rand(3, 540, 960, device="cuda")
    fx = VideoSuperRes(backend=ss.CudaBackend(), launch_mode="graph")
    fx.output_width, fx.output_height = 1920, 1080
    fx.load()
    for _ in range(20):
        fx.run(x, stream_ptr=side.cuda_stream, non_blocking=True)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    for _ in range(runs // 16):  # short blocks, the GPU drained between them (not profiled): host work only
        torch.cuda.synchronize()
        prof.enable()
        for _ in range(16):
            fx.run(x, stream_ptr=side.cuda_stream, non_blocking=True)
        prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--profile", action="store_true", help="also a cProfile of graph-mode VideoSuperRes runs")
    parser.add_argument("--calls", action="store_true", help="also each driver call of a graph-mode run, alone")
    parser.add_argument("--in-frame", action="store_true", help="also each step of a graph-mode run, timed inside real runs")
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
            print(f"{name:<48} {us:>7.2f} us")
    if args.in_frame:
        steps = report["in_frame"] = in_frame()
        for kind, r in steps.items():
            print(f"\n{kind}, graph mode: {r['run_us']:.1f} us per run (median of short blocks); inside runs, "
                  f"{r['instrumented_us']:.1f} us less the timers ({r['timed_calls_per_run']:.0f} timed calls a run "
                  f"at {r['timer_overhead_ns']:.0f} ns)")
            for name, us in sorted(r["parts_us"].items(), key=lambda kv: -kv[1]):
                print(f"  {name:<72} {us:>7.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.profile:
        profile()

if __name__ == "__main__":
    main()
