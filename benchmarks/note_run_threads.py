"""What ``auto``'s look at the other threads of a device costs per guarded call, with N other live threads
that ran since this thread's last run (a video server's lanes). Any machine, no GPU:

    python3 benchmarks/note_run_threads.py [N ...]     (default: 1 3 7)
"""

from __future__ import annotations

import sys
import threading
import time
import timeit

from streamsafe import occupancy


def per_call_us(others: int, n: int = 100_000) -> float:
    """Microseconds per ``note_run`` on this thread while ``others`` live threads ran on device 0 since its last call."""
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait) for _ in range(others)]
    for t in threads:
        t.start()
    try:
        seen = occupancy._seen.setdefault(0, {})

        def others_ran() -> None:
            now = time.monotonic()
            for t in threads:
                seen[t.ident] = (now, t)  # type: ignore[index]

        def call() -> None:
            others_ran()
            occupancy.note_run(0)

        occupancy.note_run(0)
        with_call = min(timeit.repeat(call, number=n, repeat=5)) / n
        alone = min(timeit.repeat(others_ran, number=n, repeat=5)) / n
        return (with_call - alone) * 1e6
    finally:
        stop.set()
        for t in threads:
            t.join()
        occupancy._seen.clear()


def main() -> None:
    for others in [int(a) for a in sys.argv[1:]] or [1, 3, 7]:
        print(f"{others} other live thread(s): {per_call_us(others):.2f} us per note_run")


if __name__ == "__main__":
    main()
