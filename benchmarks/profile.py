"""Where host time goes: profiles and breakdowns that explain the numbers of the other benchmarks.

    PYTHONPATH=. python3 benchmarks/profile.py COMMAND [options]      (COMMAND --help for its options)

Commands (each prints a table or a cProfile listing; none is a target):

* ``stub [event|auto] [--general|--declared] [-p] [--instructions]`` (any machine): streamsafe's own Python per guarded frame, a
  null effect on a stub backend whose fences do nothing and a stand-in for torch (the real one is never
  imported), so what is left is the contract's, the ledger's and the import's Python; ``-p`` adds a
  cProfile; ``--instructions`` counts CPU instructions a frame with valgrind's callgrind instead of timing it
  (within a few percent from run to run, whatever else the machine is doing). Compare two trees side by
  side on one machine with it.
* ``parts [event|auto] [--gpu] [--blocks N]`` (any machine; ``--gpu`` on a GPU): what each of a steady frame's
  per-call guarantees costs. The declared frame (``c.run(x).torch(copy=False)``) is timed whole and with one
  guarantee turned off at a time (the steady-frame lookup, the inputs' check against views of outputs, the
  device-sharing note, the raw-call mark, the view's tag and its registry entry), then with all of them off,
  in interleaved blocks. A diagnostic: each row but the first is unsafe. Without ``--gpu``: the stub backend
  and the stand-in for torch of ``stub``.
* ``contract [event|auto] [--frames N]`` (GPU): a cProfile of ``contract.run()`` + ``torch.from_dlpack(out.image)``
  with ``contract_overhead.py``'s null effect on a torch side stream, and the loop's wall time a frame.
* ``paths [auto|event ...] [--rounds N] [--no-gc] [--declared]`` (GPU): one guarded frame by each way out of it (no
  import, ``out.image`` through torch, the copy helper, the zero-copy view, torch's two steps of
  ``from_dlpack`` apart), beside the raw effect with torch's three ways of importing a capsule, with and
  without the ``event`` strategy's one fence by hand; fences a frame from the contract's counters. ``--declared``: the
  input stream declared (else ``auto`` copies each input, and the rows time the copies).
* ``effect [--rows raw,event,async] [--runs N]`` (GPU): a cProfile of the emulated ``VideoSuperRes``
  (540p -> 1080p, graph mode, as the bench runs it), raw and through a contract, in short blocks with the
  GPU drained between them (host work only).
* ``step [SCENARIO] [ROW ...] [--diff] [--sim]`` (GPU; ``--sim`` on the model): one bench step per row
  (default ``g-host``, ``hand auto``), every row's pipeline made first: host us a step (the rows
  interleaved, 5 blocks of 200), then a cProfile of 1,000 steps; ``--diff``: each function's own time a
  step in the second row less the first (profiled microseconds, inflated by cProfile, but where a gap is).
* ``g-host [--rows hand,auto] [--blocks N] [--json PATH] [--sim]`` (GPU; ``--sim`` checks it on the model):
  a step of bench scenario ``g-host`` split by part, the rows interleaved: the bench's loop, the effect's
  own ``run()``, the consumer (import and copy) and the row's own frame (fences, checks, bookkeeping: the
  row's runner less the other two). A part that differs between ``hand`` and ``auto`` is where the gap is.
  ``--json`` is what ``docs/make_g_host_figure.py`` draws.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file's name is the standard library's ``profile``, which ``cProfile`` imports: take the standard one
# first, with this folder off the path, then put the folder back (for ``_timing`` and ``contract_overhead``).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
import cProfile  # noqa: E402
import pstats  # noqa: E402

sys.path.insert(0, str(_HERE))

from _timing import best_us  # noqa: E402

# -- stub: streamsafe's own Python on any machine ----------------------------------------------------------


class StubBackend:
    """The backend protocol with no work behind it: fences and waits are counted, nothing else."""

    name = "stub"
    records_accesses = False  # (what a backend says it can do: streamsafe.backend.Backend)
    framework_streams = False
    private_handles = False
    array_type = None
    sanitizing = False
    host_array_fix = ""

    def __init__(self) -> None:
        import streamsafe as ss

        self._stream = ss.Stream
        self.sdk = ss.Stream(0, 0x1000, ss.StreamKind.NON_BLOCKING, self)  # type: ignore[arg-type]
        self._blocking = ss.StreamKind.BLOCKING
        self._non_blocking = ss.StreamKind.NON_BLOCKING
        self.fences = 0

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def stream_info(self, handle: int) -> tuple[int, bool]:
        return (0, handle != 0x2000)

    def current_stream(self, device: int | None = None) -> Any:
        return self.sdk

    def acquire_event(self, device: int) -> Any:
        return object()

    def release_event(self, event: Any) -> None:
        pass

    def record(self, event: Any, stream: Any) -> None:
        pass

    def wait(self, stream: Any, event: Any) -> None:
        pass

    def query(self, event: Any) -> bool:
        return True

    def synchronize_event(self, event: Any) -> None:
        pass

    def synchronize_stream(self, stream: Any) -> None:
        pass

    def synchronize_device(self, device: int) -> None:
        pass

    def fence(self, waiter: Any, signaller: Any) -> None:
        self.fences += 1

    def bind_fences(self, pairs: list[tuple[Any, Any]], owner: Any) -> Any:
        n = len(pairs)

        def run() -> None:  # what CudaBackend binds costs its driver calls only
            self.fences += n

        return run

    def acquire_stream(self, device: int, non_blocking: bool = False) -> Any:
        if non_blocking:  # (the stream auto copies undeclared inputs on)
            return self._stream(0, 0x3000, self._non_blocking, self)  # type: ignore[arg-type]
        return self._stream(0, 0x2000, self._blocking, self)  # type: ignore[arg-type]

    def hold_stream(self, stream: Any) -> Any:
        return None

    def release_stream(self, stream: Any) -> None:
        pass


_DATA = (ctypes.c_uint64 * 8)(0xABC000, 0, 0, 0, 0, 0, 0, 0)
_NEW = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))


class _Out:
    __slots__ = ("image",)

    def __init__(self, image: Any) -> None:
        self.image = image


class StubSuperRes:
    """nvvfx.VideoSuperRes's run() signature; returns a fresh plain capsule, does nothing else."""

    device = 0
    image_encoding = "RGB8"

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any:
        return _Out(_NEW(ctypes.addressof(_DATA), b"dltensor", None))

    def close(self) -> None:
        pass


class RawStubSuperRes:
    """The same, in a class that is never guarded (it gets no dispatchers): the floor."""

    device = 0
    image_encoding = "RGB8"
    run = StubSuperRes.run  # the plain function, taken before any guard exists


class FakeInput:
    shape = (3, 16, 16)

    def __dlpack__(self, stream: Any = None) -> Any:
        return None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


class FakeTensor:
    """What the contract reads of a torch CUDA tensor: device, shape, data pointer, record_stream."""

    shape = (3, 16, 16)
    is_sparse = False
    dtype = device = None

    def get_device(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.shape

    def stride(self) -> tuple[int, ...]:
        return (256, 16, 1)

    def copy_(self, src: Any) -> FakeTensor:
        return self

    def data_ptr(self) -> int:
        return 0xDEF000

    def record_stream(self, stream: Any) -> None:
        pass

    def __dlpack__(self, stream: Any = None) -> Any:
        return None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


FakeTensor.__module__ = "torch"


def _install_fake_torch() -> bool:
    """A minimal ``torch`` module in ``sys.modules`` (current stream 0x1000, tensors :class:`FakeTensor`),
    also where torch is installed (this process never imports the real one); False if it was imported."""
    if "torch" in sys.modules:
        return False
    torch = types.ModuleType("torch")
    cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        current_stream=lambda device=None: types.SimpleNamespace(cuda_stream=0x1000),
        ExternalStream=lambda ptr, device=None: types.SimpleNamespace(cuda_stream=ptr),
        default_stream=lambda device=None: types.SimpleNamespace(cuda_stream=0),
    )
    cuda.stream = lambda stream: contextlib.nullcontext()  # (streamsafe copies an undeclared input under torch's stream)
    torch.cuda = cuda  # type: ignore[attr-defined]
    torch.empty_strided = lambda size, stride, dtype=None, device=None: FakeTensor()  # type: ignore[attr-defined]
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0x1000, _cuda_getDevice=lambda: 0)  # type: ignore[attr-defined]
    torch.Tensor = FakeTensor  # type: ignore[attr-defined]
    torch.from_dlpack = lambda capsule: FakeTensor()  # type: ignore[attr-defined]  # (out.torch(copy=False): a fresh view)
    sys.modules["torch"] = torch
    return True


def _instructions(args: argparse.Namespace) -> None:
    """``stub --instructions``: CPU instructions per guarded frame, counted by callgrind (within a few percent
    from run to run, whatever else the machine is doing): two runs of different lengths, their difference
    over the difference in frames (start-up and warm-up cancel out)."""
    import os
    import re
    import shutil
    import subprocess

    if shutil.which("valgrind") is None:
        sys.exit("profile.py stub --instructions needs valgrind (apt-get install valgrind)")
    counts = []
    lengths = (2000, 10000)
    for frames in lengths:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, str(Path(__file__)),
                   "stub", args.strategy, "--frames", str(frames), "--loop-only", *(["--general"] if args.general else []),
                   *(["--declared"] if args.declared else [])]
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True)
        counts.append(int(re.search(r"Collected : (\d+)", done.stderr).group(1)))  # type: ignore[union-attr]
    per_frame = (counts[1] - counts[0]) / (lengths[1] - lengths[0])
    print(f"strategy {args.strategy}: {per_frame:,.0f} instructions per guarded frame (run + import; callgrind)")


def cmd_stub(args: argparse.Namespace) -> None:
    if args.instructions:
        _instructions(args)
        return
    general = args.general or not _install_fake_torch()
    import streamsafe as ss

    be = StubBackend()
    fx, raw_fx = StubSuperRes(), RawStubSuperRes()
    if general:
        x: Any = FakeInput()
        c = ss.StreamContract(fx, be.sdk, strategy=args.strategy, input_stream=be.sdk, backend=be)  # type: ignore[arg-type]
        path = "general path (a plain DLPack input, declared input stream)"
    else:
        x = FakeTensor()
        declared = {"input_stream": be.sdk} if args.declared else {}
        c = ss.StreamContract(fx, be.sdk, strategy=args.strategy, backend=be, **declared)  # type: ignore[arg-type]
        path = "steady state (a torch-like input" + (", declared input stream)" if args.declared else ")")

    def frame() -> None:
        c.run(x).image.__dlpack__(stream=0x1000)

    for _ in range(2000):
        frame()
    if args.loop_only:  # (a child of --instructions: the frames and nothing else, the collector off)
        import gc

        gc.disable()
        for _ in range(args.frames):
            frame()
        return
    n = args.frames
    start = time.perf_counter()
    for _ in range(n):
        frame()
    per_frame = (time.perf_counter() - start) / n * 1e6
    start = time.perf_counter()
    for _ in range(n):
        raw_fx.run(x, stream_ptr=0x1000)  # type: ignore[misc]
    raw = (time.perf_counter() - start) / n * 1e6
    print(f"strategy {args.strategy}, {path}: {per_frame:.2f} us per guarded frame (run + import), raw run {raw:.2f} us, "
          f"streamsafe's Python {per_frame - raw:.2f} us")
    if args.p:
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(5000):
            frame()
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


# -- contract: a cProfile of the guarded frame on the GPU --------------------------------------------------


def cmd_contract(args: argparse.Namespace) -> None:
    import torch
    from contract_overhead import NullSuperRes

    import streamsafe as ss

    side = torch.cuda.Stream()
    out_buffer = torch.zeros(3, 32, 32, device="cuda")
    x = torch.zeros(3, 16, 16, device="cuda")
    c = ss.StreamContract(NullSuperRes(out_buffer), side, strategy=args.strategy)

    def frame() -> None:
        torch.from_dlpack(c.run(x).image)

    for _ in range(500):
        frame()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(args.frames):
        frame()
    per = (time.perf_counter() - t) / args.frames * 1e6
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.frames):
        frame()
    profile.disable()
    torch.cuda.synchronize()
    print(f"strategy {args.strategy}: {per:.1f} us per frame (run + torch import of out.image), {args.frames} frames")
    pstats.Stats(profile).sort_stats("tottime").print_stats(30)


# -- parts: what each per-call guarantee of a steady frame costs ------------------------------------------


def _parts() -> dict[str, list[tuple[Any, str, Any]]]:
    """Each guarantee a steady frame pays for on every call, as the patches that turn it off (unsafe: timing only)."""
    from streamsafe import buffers, engine, occupancy, steady, views

    real_find = steady.SteadyFrames.find
    found: dict[int, Any] = {}

    def same_frame(self: Any, *args: Any) -> Any:  # (the frame the lookup gave the first time, with no lookup after)
        frame = found.get(id(self))
        if frame is None:
            frame = found[id(self)] = real_find(self, *args)
        return frame

    parts = {
        "steady-frame lookup (facts, ledger state, settings)": [(steady.SteadyFrames, "find", same_frame)],
        "inputs checked against views of outputs (H7)": [(views, "read_inputs", lambda arrays, ledger, stream: None)],
        "device-sharing note (auto's choice)": [(occupancy, "note_run", lambda device: False)],
        "raw-call mark (calls from inside the SDK's call through)": [
            (engine, "call_raw", lambda obj, method, args, kwargs: method(obj, *args, **kwargs))],
        "view tag (a view passed on late is refused)": [(buffers.Buffer, "tag_view", lambda self, view, generation: None)],
        "views registry entry (a stale view as an input is refused)": [(views, "add", lambda key, buffer, generation: None)],
    }
    for patches in parts.values():
        for owner, name, _ in patches:
            if not callable(getattr(owner, name, None)):  # (the tool follows the code: a part that moved is an error)
                raise RuntimeError(f"profile.py parts: {owner.__name__}.{name} is gone; update the part it turns off")
    parts["all of the above"] = [p for patches in list(parts.values()) for p in patches]
    return parts


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Any:
    saved = [(owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def cmd_parts(args: argparse.Namespace) -> None:
    from _timing import interleave

    if args.gpu:
        import torch
        from contract_overhead import NullSuperRes

        import streamsafe as ss

        torch.cuda.set_device(0)
        side = torch.cuda.Stream()
        x: Any = torch.zeros(3, 16, 16, device="cuda")
        with torch.cuda.stream(side):
            c = ss.StreamContract(NullSuperRes(torch.zeros(3, 32, 32, device="cuda")), side, strategy=args.strategy, input_stream=side)
        stream: Any = torch.cuda.stream(side)
        sync = torch.cuda.synchronize
    else:
        if not _install_fake_torch():
            sys.exit("profile.py parts: torch is imported in this process; run it with --gpu, or in a process without torch")
        import streamsafe as ss

        be = StubBackend()
        x = FakeTensor()
        c = ss.StreamContract(StubSuperRes(), be.sdk, strategy=args.strategy, backend=be, input_stream=be.sdk)  # type: ignore[arg-type]
        stream = contextlib.nullcontext()
        sync = lambda: None  # noqa: E731

    def frame() -> None:
        c.run(x).torch(copy=False)

    parts = _parts()
    rows = {"whole frame": frame, **{name: frame for name in parts}}
    contexts = {name: functools.partial(_patched, patches) for name, patches in parts.items()}
    with stream:
        runs = c.stats["runs"]
        samples = interleave(rows, blocks=args.blocks, per_block=args.per_block, warmup=2000, sync=sync, contexts=contexts)
        if c.stats["runs"] - runs != len(rows) * (2000 + args.blocks * args.per_block):
            raise RuntimeError("profile.py parts: the frames did not all go through the contract")
        sync()
    whole = statistics.median(samples["whole frame"])
    where = "on this GPU" if args.gpu else "on the stub backend (streamsafe's Python only)"
    print(f"strategy {args.strategy}, a declared steady frame (run + out.torch(copy=False)) {where}: host us a frame, "
          f"median of {args.blocks} interleaved blocks of {args.per_block}; each row below the first turns one guarantee off (unsafe)")
    print(f"  {'':<60} {'us':>7} {'saved':>7}")
    for name, xs in samples.items():
        m = statistics.median(xs)
        print(f"  {name:<60} {m:7.2f} {'' if name == 'whole frame' else f'{whole - m:7.2f}'}")


# -- paths: each way out of a guarded frame ---------------------------------------------------------------


def cmd_paths(args: argparse.Namespace) -> None:
    if args.no_gc:
        import gc

        gc.disable()

    import torch
    from contract_overhead import LEGACY_HANDLE, NullSuperRes, PlainNullSuperRes, _Producer

    import streamsafe as ss
    from streamsafe.bench import RawFences

    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    torch.cuda.set_stream(side)  # bench scenario (a): the side stream produces, runs the SDK and imports
    x = torch.zeros(3, 16, 16, device="cuda")
    h = side.cuda_stream
    from_dlpack = torch.from_dlpack
    current_stream = torch.cuda.current_stream
    import_capsule = torch.utils.dlpack.from_dlpack  # (a raw capsule: no current-stream read)
    raw = PlainNullSuperRes(torch.zeros(3, 32, 32, device="cuda"))
    be = ss.CudaBackend()
    fence = RawFences(0).site(ss.as_stream(side, backend=be), ss.as_stream(LEGACY_HANDLE, device=0, backend=be))

    def raw_run() -> Any:
        return raw.run(x, stream_ptr=h, non_blocking=True)

    def fenced_run() -> Any:  # the event strategy's one fence, by hand (two driver calls)
        image = raw_run().image
        fence()
        return image

    for strategy in args.strategies:
        declared = {"input_stream": side} if args.declared else {}  # (undeclared, auto copies each input: H12)
        c = ss.StreamContract(NullSuperRes(torch.zeros(3, 32, 32, device="cuda")), side, strategy=strategy, **declared)
        rows: dict[str, Callable[[], Any]] = {
            "c.run(x)": lambda c=c: c.run(x),
            "c.run(x).image.__dlpack__(stream=h)": lambda c=c: c.run(x).image.__dlpack__(stream=h),
            "torch.from_dlpack(c.run(x).image)": lambda c=c: from_dlpack(c.run(x).image),
            "c.run(x).torch()": lambda c=c: c.run(x).torch(),
            "c.run(x).torch(copy=False)": lambda c=c: c.run(x).torch(copy=False),
            # torch.from_dlpack's two steps around __dlpack__, each alone: its current-stream read, its import
            "current_stream() + c.run(x).image.__dlpack__(stream=h)":
                lambda c=c: (current_stream("cuda:0"), c.run(x).image.__dlpack__(stream=h)),
            "import(c.run(x).image.__dlpack__(stream=h))": lambda c=c: import_capsule(c.run(x).image.__dlpack__(stream=h)),
            "raw run": raw_run,
            "raw run + torch.from_dlpack(capsule)": lambda: from_dlpack(raw_run().image),
            "raw run + torch.from_dlpack(producer object)": lambda: from_dlpack(_Producer(raw_run().image)),
            "raw run + torch.from_dlpack(capsule).clone()": lambda: from_dlpack(raw_run().image).clone(),
            # the same imports after a hand fence: do the driver's calls make torch's own steps dearer?
            "raw run + hand fence + torch.from_dlpack(capsule)": lambda: from_dlpack(fenced_run()),
            "raw run + hand fence + torch.from_dlpack(producer object)": lambda: from_dlpack(_Producer(fenced_run())),
        }
        for r in range(args.rounds):
            for name, fn in rows.items():
                for _ in range(300):
                    fn()
                runs, fences = c.stats["runs"], c.stats["fences"]
                us = best_us(fn, torch.cuda.synchronize)
                tail = "" if name.startswith("raw") else f"   {(c.stats['fences'] - fences) / max(1, c.stats['runs'] - runs):.1f} fences a frame"
                print(f"{strategy:<6} round {r + 1}  {name:<56} {us:>7.2f} us{tail}")
        c.close()


# -- effect: a cProfile of the emulated SDK's run() -------------------------------------------------------


def cmd_effect(args: argparse.Namespace) -> None:
    import torch

    import streamsafe as ss
    from streamsafe.testing import VideoSuperRes

    be = ss.CudaBackend()
    side = torch.cuda.Stream()
    x = torch.rand(3, 540, 960, device="cuda")
    torch.cuda.synchronize()
    for label in args.rows.split(","):
        sr = VideoSuperRes(backend=be, launch_mode="graph")
        sr.output_width, sr.output_height = 1920, 1080
        sr.load()
        if label == "raw":
            def run(sr: Any = sr) -> None:
                sr.run(x, stream_ptr=side.cuda_stream, non_blocking=True)
        else:
            c = ss.StreamContract(sr, side, strategy=label)

            def run(c: Any = c) -> None:
                with torch.cuda.stream(side):
                    c.run(x).torch()
        for _ in range(50):
            run()
        torch.cuda.synchronize()
        host = []
        prof = cProfile.Profile()
        for _ in range(args.runs // 16):  # short blocks, the GPU drained between them (untimed): host work only
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(16):
                run()
            host.append((time.perf_counter() - t0) / 16 * 1e6)
        for _ in range(args.runs // 16):
            torch.cuda.synchronize()
            prof.enable()
            for _ in range(16):
                run()
            prof.disable()
        torch.cuda.synchronize()
        print(f"\n=== {label}: {statistics.median(host):.1f} us of host time per run() (median of blocks of 16) ===")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


# -- step: a bench step per row, timed and profiled ------------------------------------------------------


def _pipelines(scenario: str, rows: list[str], sim: bool) -> list[Any]:
    from streamsafe.bench.harness import as_row
    from streamsafe.bench.pipelines import GpuPipeline, SimPipeline, scenario_by_key

    sc = scenario_by_key(scenario)
    make = SimPipeline if sim else GpuPipeline
    return [make(sc, as_row(name)) for name in rows]  # (every row's effect made first, as in the bench)


def cmd_step(args: argparse.Namespace) -> None:
    rows = args.rows or ["hand", "auto"]
    stats: list[pstats.Stats] = []
    pipes = _pipelines(args.scenario, rows, args.sim)
    try:
        for pipe in pipes:
            for i in range(100):
                pipe.step(i)
            pipe.drain()
            pipe.check()
        per_step: dict[str, list[float]] = {name: [] for name in rows}
        frame = 100
        for _ in range(5):  # the rows interleaved in blocks of 200 steps (a host's phase hits every row alike)
            for name, pipe in zip(rows, pipes):
                t0 = time.perf_counter()
                for i in range(frame, frame + 200):
                    pipe.step(i)
                per_step[name].append((time.perf_counter() - t0) / 200 * 1e6)
                pipe.drain()
                pipe.check()
            frame += 200
        for name, pipe in zip(rows, pipes):
            profile = cProfile.Profile()
            profile.enable()
            for i in range(frame, frame + 1000):
                pipe.step(i)
            profile.disable()
            pipe.drain()
            checked, corrupt = pipe.check()
            print(f"\n== {args.scenario} / {name}{' (model)' if args.sim else ''}: {statistics.median(per_step[name]):.1f} us "
                  f"per step on the host, median of 5 interleaved blocks {[round(x, 1) for x in per_step[name]]} "
                  f"(corrupt {corrupt}/{checked})")
            pstats.Stats(profile).sort_stats("tottime").print_stats(22)
            stats.append(pstats.Stats(profile))
    finally:
        for pipe in pipes:
            pipe.close()
    if args.diff and len(stats) >= 2:
        _print_diff(rows[0], rows[1], stats[0], stats[1])


def _own_us(st: pstats.Stats) -> dict[str, tuple[float, int]]:
    """Own time per step (us, over the 1,000 profiled steps) and calls per step, by function."""
    out: dict[str, tuple[float, int]] = {}
    for (file, _line, fn), (_, ncalls, tottime, _, _) in st.stats.items():  # type: ignore[attr-defined]
        key = f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{fn}"
        us, n = out.get(key, (0.0, 0))
        out[key] = (us + tottime * 1e6 / 1000, n + ncalls)
    return out


def _print_diff(first: str, second: str, a: pstats.Stats, b: pstats.Stats) -> None:
    one, two = _own_us(a), _own_us(b)
    rows = [(two.get(k, (0.0, 0))[0] - one.get(k, (0.0, 0))[0], k, one.get(k, (0.0, 0))[1], two.get(k, (0.0, 0))[1])
            for k in set(one) | set(two)]
    rows.sort(reverse=True)
    total = sum(d for d, *_ in rows)
    print(f"\n== own time per step, {second} less {first} (profiled us; total {total:.1f})")
    print(f"{'us':>7}  {'calls ' + first:>12}  {'calls ' + second:>12}  function")
    for d, k, n1, n2 in rows[:30]:
        print(f"{d:7.2f}  {n1 / 1000:12.1f}  {n2 / 1000:12.1f}  {k}")


# -- g-host: a host-bound step split by part --------------------------------------------------------------

_PARTS = ("step", "runner", "effect run", "consumer")


def cmd_g_host(args: argparse.Namespace) -> None:
    import json

    from streamsafe.bench.hand import own_method
    from streamsafe.testing import VideoSuperRes

    rows = args.rows.split(",")
    clock = time.perf_counter_ns
    spent = dict.fromkeys(_PARTS, 0)

    def timed(fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = clock()
            try:
                return fn(*a, **k)
            finally:
                spent[part] += clock() - t0
        return wrapper

    cls = VideoSuperRes  # g-host's effect; wrapped before any row is made (the hand row binds its run() then)
    saved = cls.__dict__["run"]
    wrapped = cls.run = timed(saved, "effect run")  # type: ignore[method-assign]
    pipes: list[Any] = []
    try:
        pipes = _pipelines("g-host", rows, args.sim)
        for pipe in pipes:
            if own_method(pipe.effect, "run") is not wrapped:
                raise RuntimeError("the effect's run() is not the timed one: the split would be wrong")
            pipe._consume = timed(pipe._consume, "consumer")
            pipe.runner.run = timed(pipe.runner.run, "runner")
        for pipe in pipes:  # 100 untimed steps each, checked
            for i in range(100):
                pipe.step(i)
            pipe.drain()
            pipe.check()
        frame = 100
        samples: dict[str, dict[str, list[float]]] = {name: {part: [] for part in _PARTS} for name in rows}
        corrupt = dict.fromkeys(rows, 0)
        for _ in range(args.blocks):
            for name, pipe in zip(rows, pipes):
                for part in _PARTS:
                    spent[part] = 0
                t0 = clock()
                for i in range(frame, frame + 200):
                    pipe.step(i)
                spent["step"] = clock() - t0
                for part in _PARTS:
                    samples[name][part].append(spent[part] / 200 / 1000)
                pipe.drain()
                corrupt[name] += pipe.check()[1]
            frame += 200
    finally:
        for pipe in pipes:
            pipe.close()
        if cls.__dict__.get("run") is wrapped:
            cls.run = saved  # type: ignore[method-assign]
    print(f"g-host{' (model: the times mean nothing)' if args.sim else ''}, host us a step split by part, "
          f"median of {args.blocks} interleaved blocks of 200 steps")
    print(f"  {'row':<22} {'step':>8} {'loop':>8} {'frame':>8} {'effect':>8} {'consumer':>9} {'corrupt':>8}")
    medians: dict[str, dict[str, float]] = {}
    for name, parts in samples.items():
        m = {part: statistics.median(xs) for part, xs in parts.items()}
        m["loop"] = statistics.median(s - r for s, r in zip(parts["step"], parts["runner"]))
        m["frame"] = statistics.median(r - e - c for r, e, c in zip(parts["runner"], parts["effect run"], parts["consumer"]))
        medians[name] = m
        print(f"  {name:<22} {m['step']:8.1f} {m['loop']:8.1f} {m['frame']:8.1f} {m['effect run']:8.1f} {m['consumer']:9.1f} "
              f"{corrupt[name]:8d}")
    print("loop: the bench's step less the runner; frame: the runner less the effect's run and the consumer "
          "(fences, checks, bookkeeping); effect: its own run(); consumer: the import and the copy")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scenario": "g-host", "model": args.sim, "unit": "host us a step", "blocks_us": samples,
                       "medians_us": medians}, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[4:]))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("stub", help="streamsafe's own Python per guarded frame, on a stub backend (any machine)")
    p.add_argument("strategy", nargs="?", default="event", choices=["event", "auto", "async", "stream", "device"])
    p.add_argument("--general", action="store_true", help="a plain DLPack input with a declared input stream")
    p.add_argument("--declared", action="store_true", help="the torch-like input with its stream declared (input_stream=)")
    p.add_argument("--frames", type=int, default=20000)
    p.add_argument("-p", action="store_true", help="also a cProfile of 5,000 frames")
    p.add_argument("--instructions", action="store_true",
                   help="CPU instructions per frame instead of microseconds (callgrind: repeatable on a noisy machine)")
    p.add_argument("--loop-only", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(fn=cmd_stub)
    p = sub.add_parser("parts", help="what each per-call guarantee of a steady frame costs (any machine; --gpu)")
    p.add_argument("strategy", nargs="?", default="event", choices=["event", "auto"])
    p.add_argument("--gpu", action="store_true", help="torch and the CUDA driver, contract_overhead.py's null effect")
    p.add_argument("--blocks", type=int, default=15)
    p.add_argument("--per-block", type=int, default=1000)
    p.set_defaults(fn=cmd_parts)
    p = sub.add_parser("contract", help="cProfile of a guarded frame with a null effect (GPU)")
    p.add_argument("strategy", nargs="?", default="event")
    p.add_argument("--frames", type=int, default=3000)
    p.set_defaults(fn=cmd_contract)
    p = sub.add_parser("paths", help="one guarded frame by each way out of it (GPU)")
    p.add_argument("strategies", nargs="*", default=["auto", "event"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-gc", action="store_true", help="with Python's cyclic garbage collector off")
    p.add_argument("--declared", action="store_true", help="the input stream declared (input_stream=): no input copies")
    p.set_defaults(fn=cmd_paths)
    p = sub.add_parser("effect", help="cProfile of the emulated VideoSuperRes, raw and guarded (GPU)")
    p.add_argument("--rows", default="raw,event,async", help="raw and/or strategies, comma-separated")
    p.add_argument("--runs", type=int, default=2000)
    p.add_argument("--top", type=int, default=20, help="functions listed per row")
    p.set_defaults(fn=cmd_effect)
    p = sub.add_parser("step", help="one bench step per row, timed interleaved, then profiled (GPU; --sim)")
    p.add_argument("scenario", nargs="?", default="g-host")
    p.add_argument("rows", nargs="*")
    p.add_argument("--diff", action="store_true", help="each function's own time, the second row less the first")
    p.add_argument("--sim", action="store_true", help="the bench's pipelines on the model (checks the script; no costs)")
    p.set_defaults(fn=cmd_step)
    p = sub.add_parser("g-host", help="a g-host step split by part, per row (GPU; --sim)")
    p.add_argument("--rows", default="hand,auto")
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--json", help="every block's parts and their medians, host us a step (docs/make_g_host_figure.py)")
    p.add_argument("--sim", action="store_true", help="on the model (checks the script; no costs)")
    p.set_defaults(fn=cmd_g_host)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
