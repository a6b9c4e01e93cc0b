"""A thread-per-request program on the model (no GPU): does a request get slower as threads come and go?

Any machine:  PYTHONPATH=. python3 benchmarks/model_threads.py [--requests N] [--frames F] [--stream-per-frame]
              PYTHONPATH=. python3 benchmarks/model_threads.py --lanes [N ...]

One ``TrueHDR`` guarded by one ``auto`` contract on a ``SimBackend``; each request is a new thread that
writes its input on its own per-thread default stream (as CuPy with per-thread default streams, or
torch under ``cudaStreamPerThread``, would) and runs F frames, and the thread ends. Each thread leaves a
per-thread stream behind, which the legacy stream is implicitly ordered after. Rows, side by side in one
process (two fresh models, the requests alternating between them):

* ``model``: the model as it is: a legacy operation joins only the streams with work it has not seen;
* ``model, every stream joined``: every legacy operation joins every stream of the device (the rule
  before, ``SimBackend._every_implicit_peer``, where the model still has it), which costs more with
  every thread that has been.

Prints the host milliseconds a request at points through the run, and the last tenth's mean.

``--stream-per-frame``: no threads; instead each request makes a new blocking stream (``create_stream``,
as a program that makes a stream per frame does), writes its input there and runs F frames. Each
stream stays in the model, and the legacy stream is implicitly ordered after it too.

``--lanes [N ...]`` (default 1 2 4 8): threads that live at once instead, a video server on the model. N
threads, each with its own ``TrueHDR`` and contract on one model device, run F frames each (``--frames``,
here 200 by default) at the same time; rows ``auto`` and ``event`` take turns (``--rounds``, 5). With two
threads or more ``auto`` picks ``event`` (another live thread ran on the device since its last run), so
the two rows place the same fences and ``auto`` less ``event`` is what ``auto``'s look at the other
threads of the device costs a frame; it must not grow with N. The threads share the GIL, so the row's
wall time over every frame of every thread is the host's cost a frame. On the model a frame also pays
the model's own bookkeeping (tens of microseconds), so read the difference against the rounds' spread.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--frames", type=int, default=None, help="frames a request (2), or a thread with --lanes (200)")
    parser.add_argument("--stream-per-frame", action="store_true", help="a new blocking stream a request, no threads")
    parser.add_argument("--lanes", type=int, nargs="*", help="N threads at once, auto against event (default 1 2 4 8)")
    parser.add_argument("--rounds", type=int, default=5, help="with --lanes: rounds of auto and event")
    args = parser.parse_args()
    if args.lanes is not None:
        lanes(args.lanes or [1, 2, 4, 8], frames=args.frames or 200, rounds=args.rounds)
        return
    args.frames = args.frames or 2
    import streamsafe as ss
    from streamsafe.sim import backend as sim_backend
    from streamsafe.testing import TrueHDR

    data = np.random.default_rng(0).random((3, 16, 16), dtype=np.float32)

    def setup() -> tuple[Any, Any]:
        sim = ss.sim.SimBackend()
        fx = TrueHDR(backend=sim)
        fx.load()
        return sim, ss.StreamContract(fx, strategy="auto")

    old_rule = getattr(sim_backend.SimBackend, "_every_implicit_peer", None)
    rows = {"model": setup()}
    if old_rule is not None:
        rows["model, every stream joined"] = setup()
    else:
        print("(this model has no _every_implicit_peer: the row with the rule before is left out)")
    rule = sim_backend.SimBackend._implicit_peers
    times: dict[str, list[float]] = {name: [] for name in rows}

    def request(sim: Any, contract: Any) -> None:
        s = sim.create_stream() if args.stream_per_frame else sim.per_thread_stream(0)
        for _ in range(args.frames):
            x = sim.empty((3, 16, 16), np.float32, stream=s)
            sim.launch(s, "write", lambda x=x: np.copyto(x.buffer.data, data), writes=[x])
            contract.run(x)

    for _ in range(args.requests):
        for name, (sim, contract) in rows.items():
            if name != "model":
                sim_backend.SimBackend._implicit_peers = old_rule  # type: ignore[method-assign]
            try:
                t0 = time.perf_counter()
                if args.stream_per_frame:
                    request(sim, contract)
                else:
                    thread = threading.Thread(target=request, args=(sim, contract))
                    thread.start()
                    thread.join()
                times[name].append((time.perf_counter() - t0) * 1e3)
            finally:
                sim_backend.SimBackend._implicit_peers = rule  # type: ignore[method-assign]
    for name, (sim, contract) in rows.items():
        sim.synchronize_device()
        if sim.races:
            raise SystemExit(f"{name}: the model reported {len(sim.races)} races; the program is fenced, so this is a bug")
        contract.close()
    tenth = max(1, args.requests // 10)
    what = "a new stream each, one thread" if args.stream_per_frame else "a new thread each"
    print(f"{'stream-per-request' if args.stream_per_frame else 'thread-per-request'} on the model: host ms a request "
          f"({args.frames} frames, {what})")
    print(f"  {'after requests':<16}" + "".join(f"{name:>30}" for name in rows))
    for at in sorted({0, *range(tenth - 1, args.requests, max(1, args.requests // 5)), args.requests - 1}):
        print(f"  {at + 1:<16}" + "".join(f"{times[name][at]:30.2f}" for name in rows))
    last = {name: statistics.mean(xs[-tenth:]) for name, xs in times.items()}
    print(f"  {'last tenth':<16}" + "".join(f"{last[name]:30.2f}" for name in rows))
    if "model, every stream joined" in last:
        print(f"every stream joined / model, last tenth: {last['model, every stream joined'] / last['model']:.1f}x")


def lanes(counts: list[int], *, frames: int, rounds: int) -> None:
    """``--lanes``: N threads driving their own effects on one model device at once, ``auto`` against ``event``."""
    import streamsafe as ss
    from streamsafe.testing import TrueHDR

    data = np.random.default_rng(0).random((3, 16, 16), dtype=np.float32)
    print(f"threads at once on one model device, {frames} frames each: host us a frame (all threads' frames over the "
          f"wall time), median of {rounds} rounds, auto and event taking turns")
    print(f"  {'threads':<8} {'auto':>10} {'event':>10} {'auto - event':>13} {'spread':>8}")
    for n in counts:
        sim = ss.sim.SimBackend()
        contracts: dict[str, list[Any]] = {}
        for strategy in ("auto", "event"):
            contracts[strategy] = []
            for _ in range(n):
                fx = TrueHDR(backend=sim)
                fx.load()
                contracts[strategy].append(ss.StreamContract(fx, strategy=strategy))

        def lane(contract: Any, start: threading.Barrier, sim: Any = sim) -> None:
            s = sim.per_thread_stream(0)
            start.wait()
            for _ in range(frames):
                x = sim.empty((3, 16, 16), np.float32, stream=s)
                sim.launch(s, "write", lambda x=x: np.copyto(x.buffer.data, data), writes=[x])
                contract.run(x)

        per_frame: dict[str, list[float]] = {"auto": [], "event": []}
        for _ in range(rounds + 1):  # (the first round warms up, untimed)
            for strategy, cs in contracts.items():
                start = threading.Barrier(n + 1)
                threads = [threading.Thread(target=lane, args=(c, start)) for c in cs]
                for t in threads:
                    t.start()
                start.wait()
                t0 = time.perf_counter()
                for t in threads:
                    t.join()
                per_frame[strategy].append((time.perf_counter() - t0) / (n * frames) * 1e6)
        sim.synchronize_device()
        if sim.races:
            raise SystemExit(f"{n} threads: the model reported {len(sim.races)} races; the program is fenced, so this is a bug")
        for cs in contracts.values():
            for c in cs:
                c.close()
        a, e = (statistics.median(per_frame[k][1:]) for k in ("auto", "event"))
        spread = max(statistics.pstdev(per_frame[k][1:]) / statistics.mean(per_frame[k][1:]) for k in per_frame)
        print(f"  {n:<8} {a:10.1f} {e:10.1f} {a - e:13.1f} {spread:8.1%}")


if __name__ == "__main__":
    main()
