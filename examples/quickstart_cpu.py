"""The README's quick start on a CPU: the three ways into streamsafe, on the simulated backend.

    python examples/quickstart_cpu.py          # no GPU, no SDK, no torch: NumPy only

``streamsafe.sim.SimBackend`` is a model of CUDA's ordering rules (streams, events, the legacy stream,
a caching allocator) holding real NumPy data, and ``streamsafe.testing.VideoSuperRes`` emulates
``nvvfx.VideoSuperRes`` on it with the SDK's exact stream behaviour. The model's adversarial
scheduler runs any ready work in any order CUDA allows, so a missing fence shows up as a wrong
frame, and every unordered access pair is reported in ``sim.races``.

The GPU code of the README, spelled on the model:

=====================================================  =========================================================
on a GPU (torch)                                       on the model
=====================================================  =========================================================
``torch.cuda.Stream()``                                ``sim.create_stream(non_blocking=True)``
``with torch.cuda.stream(s):``                         ``with sim.use_stream(s):``
a kernel writing the input on stream ``p``             ``sim.fill(frame, value, stream=p)``
``torch.from_dlpack(out.image)`` then ``.clone()``     ``sim.from_dlpack(out.image, stream=c)`` then
on stream ``c``                                        ``sim.copy(view, c)``
``out.numpy()``                                        ``out.numpy()`` (the same)
=====================================================  =========================================================

Three streams, all non-blocking (``torch.cuda.Stream()``'s kind), so nothing orders them implicitly:
a producer that writes each input frame (a decoder), the SDK stream, and a consumer that imports and
copies each result. Frame ``i`` is a flat grey of level ``LEVELS[i]``; upscaled it must still be that
grey, so a frame read too early, overwritten, or taken from a stale buffer is caught. Exit status 0
when every guarded frame is correct and the model found no race.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import streamsafe as ss
from streamsafe.testing import VideoSuperRes

SIZE_IN = (3, 36, 64)  # (channels, height, width): float32 RGB in [0, 1], as nvvfx takes it
WIDTH_OUT, HEIGHT_OUT = 128, 72
LEVELS = [30, 90, 150, 210]  # frame i is a flat grey of LEVELS[i] / 255

sim = ss.sim.SimBackend(scheduler="adversarial")
producer = sim.create_stream(non_blocking=True)  # writes the input frames
sdk = sim.create_stream(non_blocking=True)  # the SDK's stream (its stream_ptr)
consumer = sim.create_stream(non_blocking=True)  # imports and copies each result


def new_effect() -> VideoSuperRes:
    """An emulated VideoSuperRes on the model, set up as on a GPU: sizes, then load()."""
    sr = VideoSuperRes(backend=sim)  # on a GPU: nvvfx.VideoSuperRes()
    sr.output_width, sr.output_height = WIDTH_OUT, HEIGHT_OUT
    sr.load()
    return sr


def produce(level: int) -> Any:
    """A new input frame, written asynchronously on the producer stream (like a decoder's kernel)."""
    frame = sim.empty(SIZE_IN, np.float32, stream=producer)
    sim.fill(frame, np.float32(level / 255), stream=producer)
    return frame


def consume(out: Any) -> Any:
    """Import a result on the consumer stream and copy it: ``torch.from_dlpack(out.image).clone()`` on C."""
    view = sim.from_dlpack(out.image, stream=consumer)  # the import orders the consumer after the SDK
    return sim.copy(view, consumer)


def verdict(name: str, copies: list[Any]) -> bool:
    """Check every frame against its grey level; print one line; True when all are right and race-free."""
    sim.synchronize_device()
    wrong = sum(
        not np.array_equal(np.round(sim.download(copy, consumer) * 255), np.full((3, HEIGHT_OUT, WIDTH_OUT), level))
        for copy, level in zip(copies, LEVELS)
    )
    races = sim.take_races()
    print(f"{name:<34} {len(copies) - wrong}/{len(copies)} frames correct, {len(races)} races")
    return wrong == 0 and not races


def without_streamsafe() -> bool:
    """The SDK used as-is: stream_ptr=sdk, the result copied on the consumer stream. Races."""
    sr = new_effect()
    copies = []
    for level in LEVELS:
        out = sr.run(produce(level), stream_ptr=sdk.ptr)  # the SDK's raw output
        copies.append(consume(out))
    sr.close()
    return verdict("without streamsafe (the hazard):", copies)


def way_1_with_block() -> bool:
    """1. A block: plain ``sr.run(...)`` is guarded inside it."""
    sr = new_effect()
    copies = []
    with sim.use_stream(sdk), ss.stream_contract(sr, sdk, input_stream=producer, consumer_stream=consumer) as c:
        for level in LEVELS:
            out = sr.run(produce(level))  # or c.run(...): a SafeOutput either way
            copies.append(consume(out))
    print(f"streams: P (producer) {producer}, S (SDK) {sdk}, C (consumer) {consumer}")
    print(c.plan)  # which fence on which edge, and why
    sr.close()
    return verdict("1. with ss.stream_contract(...):", copies)


def way_2_decorator() -> bool:
    """2. A decorator: the effect is guarded for each call; the SDK stream is the current one at the call."""
    sr = new_effect()

    @ss.stream_safe(sr, input_stream=producer)
    def upscale(frame: Any) -> Any:
        return sr.run(frame)

    copies = []
    with sim.use_stream(sdk):
        for level in LEVELS:
            copies.append(consume(upscale(produce(level))))
    sr.close()
    return verdict("2. @ss.stream_safe(sr):", copies)


def way_3_contract() -> bool:
    """3. The contract itself: ``c.run(...)``, ``c.plan``, ``c.close()``."""
    c = ss.StreamContract(new_effect(), sdk, strategy="auto", input_stream=producer)
    copies = [consume(c.run(produce(level))) for level in LEVELS]
    host = c.run(produce(LEVELS[0])).numpy()  # a host copy (NumPy) in one call; blocks until it is done
    c.close()  # waits for copies still reading the output, then closes the effect
    ok = verdict("3. ss.StreamContract(sr, sdk):", copies)
    return ok and bool(np.all(np.round(host * 255) == LEVELS[0]))


def main() -> int:
    without_streamsafe()  # shown for contrast; its wrong frames are the point
    results = [way_1_with_block(), way_2_decorator(), way_3_contract()]
    print("all guarded frames correct, no race" if all(results) else "FAILED: a guarded frame was wrong or raced")
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
