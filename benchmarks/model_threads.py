"""A thread-per-request program on the model (no GPU): does a request get slower as threads come and go?

Any machine:  PYTHONPATH=. python3 benchmarks/model_threads.py [--requests N] [--frames F] [--stream-per-frame]

One ``TrueHDR`` guarded by one ``auto`` contract on a ``SimBackend``; each request is a new thread that
writes its input on its own per-thread default stream (as CuPy with per-thread default streams, or
torch under ``cudaStreamPerThread``, would) and runs F frames, and the thread ends. Each thread leaves a
per-thread stream behind, which the legacy stream is implicitly ordered after. Rows, side by side in one
process (two fresh models, the requests alternating between them):

* ``model``: the model as it is: a legacy operation joins only the streams with work it has not seen;
* ``model, every stream joined``: every legacy operation joins every stream of the device (the rule
  before, ``SimBackend._every_implicit_peer``), which costs more with every thread that has been.

Prints the host milliseconds a request at points through the run, and the last tenth's mean.

``--stream-per-frame``: no threads; instead each request makes a new blocking stream (``create_stream``,
as a program that makes a stream per frame does), writes its input there and runs F frames. Each
stream stays in the model, and the legacy stream is implicitly ordered after it too.
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
    parser.add_argument("--frames", type=int, default=2)
    parser.add_argument("--stream-per-frame", action="store_true", help="a new blocking stream a request, no threads")
    args = parser.parse_args()
    import streamsafe as ss
    from streamsafe.sim import backend as sim_backend
    from streamsafe.testing import TrueHDR

    data = np.random.default_rng(0).random((3, 16, 16), dtype=np.float32)

    def setup() -> tuple[Any, Any]:
        sim = ss.SimBackend()
        fx = TrueHDR(backend=sim)
        fx.load()
        return sim, ss.StreamContract(fx, strategy="auto")

    rows = {"model": setup(), "model, every stream joined": setup()}
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
                sim_backend.SimBackend._implicit_peers = sim_backend.SimBackend._every_implicit_peer  # type: ignore[method-assign]
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
    print(f"every stream joined / model, last tenth: {last['model, every stream joined'] / last['model']:.1f}x")


if __name__ == "__main__":
    main()
