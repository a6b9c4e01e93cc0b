"""A zero-copy view of an output is known by its memory (:mod:`streamsafe.views`): the buffer reads its address once
per allocation, and again once the SDK may have put the output elsewhere: after a release, and after a call whose
inputs changed size (an effect whose output size follows its input reallocates it inside ``run()``). The address
is read under the effect's turn, so a release from another thread cannot slip in between the read and the import.

A model's view knows its output by itself (``view_of``); a torch view on a GPU is known by its memory only. The
views below drop what they know, as a torch view has nothing to tell."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import buffers, views
from streamsafe.testing import Effect, TrueHDR, VideoSuperRes


class Passthrough(Effect):
    _SELECTOR = "ArtifactReduction"  # (a filter the emulation does not know: it passes the input through, same size)


def untagged(view: Any) -> Any:
    view._view_of = None  # (known by its memory alone, as torch.from_dlpack's view is on a GPU)
    return view


def frame(sim: ss.sim.SimBackend, size: int, value: float) -> Any:
    return sim.array(np.full((3, size, size), value, np.float32))


def two_effects() -> tuple[ss.sim.SimBackend, Any, Any, Any]:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    a, b = Passthrough(backend=sim), TrueHDR(backend=sim)
    a.load()
    b.load()
    p = sim.current_stream()
    ca = ss.StreamContract(a, sim.create_stream(non_blocking=True), input_stream=p)
    return sim, ca, b, p


def test_a_view_of_an_output_reallocated_by_a_size_change_is_read_by_the_next_effect() -> None:
    sim, ca, b, _ = two_effects()
    sim.from_dlpack(ca.run(frame(sim, 16, 0.25)).image)
    out = ca.run(frame(sim, 24, 0.5))  # inputs of another size: the effect reallocates its output
    c, p3 = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    view = untagged(sim.from_dlpack(out.image, stream=c))
    sim.fence(p3, c)  # (the program's own order: P3 after C)
    cb = ss.StreamContract(b, sim.create_stream(non_blocking=True), input_stream=p3)
    with sim.use_stream(sim.create_stream(non_blocking=True)):
        cb.run(view)  # B's stream reads A's output: A's next run must wait for it
    ca.run(frame(sim, 24, 0.75))
    sim.synchronize_device()
    assert sim.races == [], [str(r) for r in sim.races]


def test_a_view_of_an_output_freed_by_a_size_change_is_refused() -> None:
    sim, ca, b, p = two_effects()
    old = untagged(sim.from_dlpack(ca.run(frame(sim, 16, 0.25)).image))
    sim.from_dlpack(ca.run(frame(sim, 24, 0.5)).image)  # the old output's memory is freed here
    cb = ss.StreamContract(b, sim.create_stream(non_blocking=True), input_stream=p)
    with pytest.raises(ss.errors.StaleOutputError):
        cb.run(old)


def test_the_address_is_read_under_the_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's ``configure()`` (a release) while an import reads the output's address is a concurrent use
    of the effect, refused: it cannot free the buffer between the read and the import. (Before, the address was read
    first: the release went through, the import was refused, and the freed buffer's address stayed cached for the
    new buffer, so views of every later output were known by the wrong memory.)"""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    c = ss.StreamContract(sr, sim.create_stream(non_blocking=True), input_stream=sim.current_stream())
    out = c.run(frame(sim, 16, 0.25))
    reading, go = threading.Event(), threading.Event()
    real = buffers.capsule_data_key

    def slow_read(capsule: Any) -> Any:
        reading.set()
        go.wait(5)
        return real(capsule)

    monkeypatch.setattr(buffers, "capsule_data_key", slow_read)
    other: list[BaseException] = []

    def configure() -> None:
        reading.wait(5)
        try:
            c.configure(output_width=64)
        except BaseException as e:  # noqa: BLE001 (what the other thread met)
            other.append(e)
        go.set()

    t = threading.Thread(target=configure)
    t.start()
    try:
        sim.from_dlpack(out.image)
    finally:
        go.set()
        t.join()
    monkeypatch.setattr(buffers, "capsule_data_key", real)
    assert len(other) == 1 and isinstance(other[0], ss.errors.ConcurrentUseError), other
    view = sim.from_dlpack(c.run(frame(sim, 16, 0.5)).image)
    assert view.buffer in views.registry  # the output's own memory


class Interrupting(Passthrough):
    """Stopped by a Ctrl-C right after its work is issued, when told to."""

    interrupt = False

    def run(self, *args: Any, **kwargs: Any) -> Any:
        out = super().run(*args, **kwargs)
        if self.interrupt:
            raise KeyboardInterrupt
        return out


@pytest.mark.parametrize("path", ["after synchronize", "tracked raw call", "interrupted"])
def test_every_recorded_size_change_reads_the_address_again(path: str) -> None:
    """The calls whose inputs changed size by the other ways the ledger records them (new SDK streams after a host
    wait, a plain call of the effect, a call left by an interrupt) make the next import read the address again."""
    sim = ss.sim.SimBackend(scheduler="adversarial")
    a = Interrupting(backend=sim)
    a.load()
    ca = ss.StreamContract(a, sim.create_stream(non_blocking=True), input_stream=sim.current_stream())
    sim.from_dlpack(ca.run(frame(sim, 16, 0.25)).image)
    if path == "after synchronize":
        ca.synchronize()
    elif path == "tracked raw call":
        a.run(frame(sim, 24, 0.5))
    else:
        a.interrupt = True
        with pytest.raises(KeyboardInterrupt):
            ca.run(frame(sim, 24, 0.5))
        a.interrupt = False
    out = ca.run(frame(sim, 24, 0.5))
    b = TrueHDR(backend=sim)
    b.load()
    c, p3 = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    view = untagged(sim.from_dlpack(out.image, stream=c))
    assert view.buffer in views.registry
    sim.fence(p3, c)
    cb = ss.StreamContract(b, sim.create_stream(non_blocking=True), input_stream=p3)
    with sim.use_stream(sim.create_stream(non_blocking=True)):
        cb.run(view)
    ca.run(frame(sim, 24, 0.75))
    sim.synchronize_device()
    assert sim.races == [], [str(r) for r in sim.races]
