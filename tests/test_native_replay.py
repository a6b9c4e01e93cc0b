"""The C extension's steady-state frame (``streamsafe/_replay.c``: ``replay`` and ``import_output``) against
the Python one it mirrors (:meth:`StreamContract._replay`, ``SafeImage.__dlpack__``): the same frames
through both must give the same outputs, races, counters, ledger states and replays."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
import streamsafe.contract as contract_module
import streamsafe.outputs as outputs_module
from streamsafe import occupancy, steady
from tests import fuzzing as fuzz
from streamsafe.testing.effects import TrueHDR, VideoSuperRes

BUILT = contract_module._NATIVE_REPLAY is not None
needs_c = pytest.mark.skipif(not BUILT, reason="the C extension is not built here (or STREAMSAFE_NATIVE=0)")
C_PARTS = (contract_module._NATIVE_REPLAY, outputs_module.native_import)
C_NOTE_RUN = occupancy.note_run


@contextlib.contextmanager
def frames_in(kind: str) -> Iterator[None]:
    """Steady-state frames in C (the default where it is built) or in Python, for the block."""
    saved = contract_module._NATIVE_REPLAY, outputs_module.native_import
    contract_module._NATIVE_REPLAY, outputs_module.native_import = C_PARTS if kind == "C" else (None, None)
    try:
        yield
    finally:
        contract_module._NATIVE_REPLAY, outputs_module.native_import = saved


def _sr(sim: ss.SimBackend, cls: type = VideoSuperRes) -> Any:
    sr = cls(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    return sr


def _x(sim: ss.SimBackend, i: int, stream: ss.Stream) -> Any:
    """A fresh 16x16 input written on ``stream`` (the host does not wait for it)."""
    arr = sim.empty((3, 16, 16), np.float32, name="frame")
    sim.launch(stream, "producer.write", lambda: arr.buffer.data.fill(i % 7 / 7), writes=[arr])
    return arr


def _counted(fn: Any) -> tuple[Any, int]:
    before = steady.replays
    out = fn()
    return out, steady.replays - before


@needs_c
@pytest.mark.parametrize("strategy", ["event", "auto", "async", "stream"])
def test_random_programs_give_the_same_results_with_either(strategy: str) -> None:
    """40 random pipelines (streams, guards, consumers, size changes, in-place inputs) per strategy, on
    the adversarial model: the same corrupt frames, races, errors and number of replayed frames."""
    replayed = 0
    for program in fuzz.programs(40, seed=7, frames=12):
        results = {}
        for kind in ("C", "Python"):
            with frames_in(kind):
                result, n = _counted(functools.partial(fuzz.run_model, program, strategy))
            got = result.to_dict()
            got.pop("seconds")
            results[kind] = (got, n)
        assert results["C"] == results["Python"], program.describe()
        replayed += results["C"][1]
    assert replayed > 100, "the programs must replay frames for this to compare anything"


def _frames(sim: Any, kind: str, strategy: str, frames: int, *, view: bool) -> tuple[Any, Any, list[Any], int]:
    """``frames`` guarded frames on ``sim`` with the frames in C or Python, each output imported on a reader
    stream (``view``) or on the SDK stream and copied there: the contract, the last output, the copies and
    how many frames replayed."""
    s = sim.create_stream(non_blocking=True)
    reader = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy=strategy, backend=sim)
    copies = []
    with frames_in(kind), sim.use_stream(s):
        before = steady.replays
        for i in range(frames):
            out = c.run(_x(sim, i, s))
            imported = sim.from_dlpack(out.image, stream=reader if view else s)
            copies.append(sim.copy(imported, reader if view else s))
        replays = steady.replays - before
    return c, out, copies, replays


def _pipeline(kind: str, strategy: str, frames: int, *, view: bool) -> dict[str, Any]:
    """A pipeline on the model with the frames in C or Python: what it leaves behind."""
    sim = ss.SimBackend(scheduler="adversarial")
    c, out, copies, replays = _frames(sim, kind, strategy, frames, view=view)
    image = out.image
    ledger = c.ledger
    mine = {"_ledger": ledger, "_effect": c.effect, "_capsule": image._capsule}  # (this pipeline's objects)
    slots = {name: getattr(image, name) is mine[name] if name in mine else getattr(image, name)
             for name in type(image).__slots__}
    state = (ledger.generation, tuple(ledger.readers), ledger.escaped, ledger.previous_sdk, ledger.input_shapes,
             ledger.plan, ledger._owner, ledger._closing_wait)
    sim.synchronize_device(0)
    return {
        "stats": dict(c.stats), "out_stats": dict(ledger.out_stats), "state": state, "slots": slots,
        "replays": replays, "races": [str(r) for r in sim.races], "data": [y.numpy().tobytes() for y in copies],
    }


@needs_c
@pytest.mark.parametrize("strategy", ["event", "auto", "async", "device"])
@pytest.mark.parametrize("view", [False, True])
def test_a_pipeline_ends_in_the_same_state(strategy: str, view: bool) -> None:
    c_side = _pipeline("C", strategy, 9, view=view)
    py_side = _pipeline("Python", strategy, 9, view=view)
    assert c_side["replays"] >= 6
    for key in ("stats", "out_stats", "replays", "races", "data"):
        assert c_side[key] == py_side[key], key
    # (the streams and plans are each pipeline's own objects: compare what they say)
    assert repr(c_side["state"]) == repr(py_side["state"])
    assert repr(c_side["slots"]) == repr(py_side["slots"])
    assert c_side["races"] == []


@needs_c
def test_the_c_frame_runs_where_it_is_built() -> None:
    """The C replay and import are the default (the tests above would compare Python with itself otherwise)."""
    sim = ss.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
    calls = []
    real = contract_module._NATIVE_REPLAY

    def spy(*args: Any) -> Any:
        out = real(*args)
        calls.append(out is not None)
        return out

    with sim.use_stream(s):
        for i in range(6):
            contract_module._NATIVE_REPLAY = spy
            try:
                out = c.run(_x(sim, i, s))
            finally:
                contract_module._NATIVE_REPLAY = real
            sim.copy(sim.from_dlpack(out.image, stream=s), s)
    assert calls[-3:] == [True] * 3, calls  # (the first frames record recipes, in the states the first runs leave; then C replays)


class _Refusing(VideoSuperRes):
    """Refuses its third and later frames (as the SDK refuses a dtype the facts do not hold)."""

    refuse = False

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if self.refuse:
            raise ValueError("refused")
        return super().run(*args, **kwargs)


@needs_c
@pytest.mark.parametrize("kind", ["C", "Python"])
def test_a_refused_replay_leaves_counters_ledger_and_lock_as_before(kind: str) -> None:
    sim = ss.SimBackend()
    s = sim.create_stream(non_blocking=True)
    other = sim.create_stream(non_blocking=True)
    sr = _sr(sim, _Refusing)
    c = ss.StreamContract(sr, s, strategy="event", backend=sim)
    with frames_in(kind), sim.use_stream(s):
        for i in range(3):
            out = c.run(_x(sim, i, s))
            sim.copy(sim.from_dlpack(out.image, stream=other), other)  # (a reader: the next run fences it)
        stats, generation, readers = dict(c.stats), c.ledger.generation, dict(c.ledger.readers)
        sr.refuse = True
        before = steady.replays
        with pytest.raises(ValueError, match="refused"):
            c.run(_x(sim, 9, s))
        assert steady.replays == before + 1, "the refused call was a replay"
    assert dict(c.stats) == stats
    assert (c.ledger.generation, dict(c.ledger.readers)) == (generation, readers)
    assert c.ledger._owner is None and c.ledger.try_hold() is not None, "the effect's lock was let go"


@needs_c
def test_a_replay_while_another_thread_holds_the_effect_takes_the_general_path() -> None:
    """The C replay does nothing when the lock is taken: the general path then raises, as in Python."""
    sim = ss.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
    with sim.use_stream(s):
        for i in range(3):
            out = c.run(_x(sim, i, s))
            sim.copy(sim.from_dlpack(out.image, stream=s), s)
        generation, stats = c.ledger.generation, dict(c.stats)
        holding, release = threading.Event(), threading.Event()

        def hold() -> None:
            with c.ledger.using("test"):
                holding.set()
                release.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        holding.wait(10)
        try:
            x = _x(sim, 5, s)
            assert contract_module._NATIVE_REPLAY(c, "run", (x,), False) is None
            with pytest.raises(ss.ConcurrentUseError):
                c.run(x)
        finally:
            release.set()
            t.join()
    assert (c.ledger.generation, dict(c.stats)) == (generation, stats)


@needs_c
def test_the_c_import_leaves_a_stale_or_consumed_output_to_python() -> None:
    sim = ss.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
    with sim.use_stream(s):
        old = c.run(_x(sim, 0, s))
        new = c.run(_x(sim, 1, s))
        assert outputs_module.native_import(old.image, None) is None  # stale: nothing done
        with pytest.raises(ss.StaleOutputError):
            old.image.__dlpack__()
        capsule = outputs_module.native_import(new.image, None)
        assert capsule is not None and new.image.consumed
        assert outputs_module.native_import(new.image, None) is None  # consumed: nothing done
        with pytest.raises(BufferError):
            new.image.__dlpack__()


@needs_c
def test_bind_replay_names_a_missing_part() -> None:
    native = contract_module.native()
    assert native is not None
    with pytest.raises(KeyError, match="part contract_globals missing"):
        native.bind_replay({})
    with pytest.raises(TypeError, match="one dict of parts"):
        native.bind_replay([])


class BoundSim(ss.SimBackend):
    """The model with fence programs bound, as on a GPU (the model itself issues them one by one): the bound
    call issues the same fences through the model. ``steps``: the bound call also carries steps for the C
    extension's ``run_fences`` (``native_steps``), in context ``ctx``, as ``CudaBackend``'s do."""

    steps: tuple[int, ...] | None = None
    ctx = 0
    bound_calls = 0

    def bind_fences(self, pairs: list[tuple[ss.Stream, ss.Stream]], owner: Any) -> Any:
        def run() -> None:
            self.bound_calls += 1
            for waiter, signaller in pairs:
                self.fence(waiter, signaller)

        if self.steps is not None:
            run.native_steps = (self.steps, self.ctx, self._failed)  # type: ignore[attr-defined]
        return run

    @staticmethod
    def _failed(failed: tuple[int, int]) -> None:
        raise RuntimeError(f"step {failed[0]} failed with {failed[1]}")


def _bound_pipeline(kind: str, strategy: str, frames: int = 8, **settings: Any) -> dict[str, Any]:
    sim = BoundSim(scheduler="adversarial")
    for name, value in settings.items():
        setattr(sim, name, value)
    c, _, copies, replays = _frames(sim, kind, strategy, frames, view=True)
    sim.synchronize_device(0)
    return {"stats": dict(c.stats), "out_stats": dict(c.ledger.out_stats), "replays": replays, "bound_calls": sim.bound_calls,
            "races": [str(r) for r in sim.races], "data": [y.numpy().tobytes() for y in copies]}


@needs_c
@pytest.mark.parametrize("strategy", ["event", "auto", "async"])
def test_bound_programs_run_and_count_the_same(strategy: str) -> None:
    """Programs bound as on a GPU: the C replay calls them and adds their counts as FenceProgram does."""
    c_side, py_side = _bound_pipeline("C", strategy), _bound_pipeline("Python", strategy)
    assert c_side == py_side
    assert c_side["replays"] >= 5 and c_side["bound_calls"] >= 5 and c_side["races"] == []


@needs_c
def test_a_bound_programs_steps_run_in_c_in_their_context_only() -> None:
    """A program with steps for run_fences: the C replay issues them itself when their context is current
    (the stand-in driver logs them; the bound call is not made), else makes the bound call; a failed step
    raises the program's error, and the frame counts nothing."""
    from _fake_driver import Driver

    native = contract_module.native()
    fake = Driver()
    saved = native.bound()
    native.bind(*fake.addresses())
    try:
        steps = (0, 0xE1, 0x51, 1, 0x52, 0xE1)
        here = _bound_pipeline("C", "event", steps=steps, ctx=fake.ctx)
        assert ("record", 0xE1, 0x51) in fake.log and ("wait", 0x52, 0xE1, 0) in fake.log
        fake.log.clear()
        elsewhere = _bound_pipeline("C", "event", steps=steps, ctx=fake.ctx + 1)
        assert {entry[0] for entry in fake.log} == {"ctx"}, "another context: the bound call, no step"
        assert elsewhere["bound_calls"] > here["bound_calls"]
        assert here["stats"] == elsewhere["stats"], "the same counts either way"
        fake.log.clear()
        fake.fail["wait"] = 700
        sim = BoundSim()
        sim.steps, sim.ctx = steps, fake.ctx
        s = sim.create_stream(non_blocking=True)
        reader = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
        with sim.use_stream(s):
            fake.fail.pop("wait")
            for i in range(4):
                sim.copy(sim.from_dlpack(c.run(_x(sim, i, s)).image, stream=reader), reader)
            fake.fail["wait"] = 700
            stats, generation = dict(c.stats), c.ledger.generation
            with pytest.raises(RuntimeError, match="step 1 failed with 700"):
                c.run(_x(sim, 5, s))
        assert (dict(c.stats), c.ledger.generation) == (stats, generation)
        assert c.ledger.try_hold() is not None
    finally:
        native.bind(*saved)


# -- a reviewer's findings: each passed with the Python frame and failed with the C one, before its fix --------


def _both(fn: Any) -> dict[str, Any]:
    """``fn()``'s result (or the exception it raised, by type and text) with the frame in C and in Python,
    the thread check with it."""
    out = {}
    for kind in ("C", "Python"):
        with frames_in(kind), _note_run_in(kind):
            try:
                out[kind] = ("returned", fn())
            except Exception as e:  # noqa: BLE001 (the exception is the result compared)
                out[kind] = ("raised", type(e).__name__, str(e))
    return out


@contextlib.contextmanager
def _note_run_in(kind: str) -> Iterator[None]:
    saved = occupancy.note_run
    occupancy.note_run = C_NOTE_RUN if kind == "C" else occupancy.note_run_python
    try:
        yield
    finally:
        occupancy.note_run = saved


def _one_output(strategy: str = "event") -> tuple[ss.SimBackend, ss.Stream, Any, Any]:
    sim = ss.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy=strategy, backend=sim)
    with sim.use_stream(s):
        out = c.run(_x(sim, 0, s))
    return sim, s, c, out


@needs_c
@pytest.mark.parametrize("handle", [2**63, 2**64 - 1, -(2**63) - 1, 2**70])
def test_a_stream_number_beyond_a_c_long_is_not_the_default_consumer(handle: int) -> None:
    def attempt() -> Any:
        _, _, c, out = _one_output()
        try:
            out.image.__dlpack__(stream=handle)
            return ("imported", out.image.consumed, len(c.ledger.readers))
        except Exception as e:  # noqa: BLE001
            return (type(e).__name__, out.image.consumed, len(c.ledger.readers))

    got = _both(attempt)
    assert got["C"] == got["Python"]
    assert got["C"][1][0] != "imported"  # (an invalid handle is refused, the output left as it was)


@needs_c
def test_an_image_with_a_slot_deleted_raises_attribute_error_not_a_crash() -> None:
    def attempt() -> Any:
        _, _, _, out = _one_output()
        del out.image._generation
        out.image.__dlpack__()

    got = _both(attempt)
    assert got["C"] == got["Python"] and got["C"][1] == "AttributeError"


@needs_c
@pytest.mark.parametrize("strategy", ["async", "event"])
def test_an_observer_registered_while_the_effect_runs_hears_the_after_run_fences(strategy: str) -> None:
    from streamsafe import hooks

    class Registering(VideoSuperRes):
        observer: Any = None

        def run(self, *args: Any, **kwargs: Any) -> Any:
            out = super().run(*args, **kwargs)
            if type(self).observer is not None:
                hooks.register(type(self).observer)  # (as another thread may while the SDK runs)
            return out

    class Counting(hooks.Observer):
        fences = 0

        def on_fence(self, waiter: Any, signaller: Any) -> None:
            self.fences += 1

    def frame() -> Any:
        sim = BoundSim()
        s, reader = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim, Registering), s, strategy=strategy, backend=sim)
        observer = Counting()
        try:
            with sim.use_stream(s):
                for i in range(5):
                    sim.from_dlpack(c.run(_x(sim, i, s)).image, stream=reader)
                calls = sim.bound_calls
                Registering.observer = observer
                c.run(_x(sim, 7, s))
                return (sim.bound_calls - calls, observer.fences, dict(c.stats))
        finally:
            Registering.observer = None
            hooks.unregister(observer)

    got = _both(frame)
    assert got["C"] == got["Python"]


@needs_c
def test_counters_go_to_the_contracts_stats_as_it_is_now() -> None:
    def frames() -> Any:
        sim = ss.SimBackend()
        s = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
        with sim.use_stream(s):
            for i in range(4):
                sim.from_dlpack(c.run(_x(sim, i, s)).image)
            old, c.stats = c.stats, dict.fromkeys(c.stats, 0)
            for i in range(4):
                sim.from_dlpack(c.run(_x(sim, i, s)).image)
        return (dict(c.stats), dict(old), c.ledger.out_stats is c.stats)

    got = _both(frames)
    assert got["C"] == got["Python"] and got["C"][1][0]["runs"] == 4


@needs_c
def test_the_thread_check_reads_the_modules_clock_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def notes() -> Any:
        occupancy.forget()
        now = [100.0]
        monkeypatch.setattr(occupancy, "_clock", lambda: now[0])
        started, stop = threading.Event(), threading.Event()

        def other() -> None:
            occupancy.note_run(0)
            started.set()
            stop.wait(5)

        t = threading.Thread(target=other)
        t.start()
        started.wait(5)
        try:
            first = occupancy.note_run(0)
            now[0] += 0.5
            return (first, occupancy.note_run(0), sorted(v[0] for v in occupancy._seen[0].values()))
        finally:
            stop.set()
            t.join()
            occupancy.forget()

    got = _both(notes)
    assert got["C"] == got["Python"] and got["C"][1][2] == [100.0, 100.5]


@needs_c
def test_a_config_value_unequal_to_itself_never_replays() -> None:
    class Unequal:
        def __eq__(self, other: object) -> bool:
            return False

        __hash__ = object.__hash__

    token = Unequal()

    class Odd(TrueHDR):  # (its one config attribute is the config itself, not a tuple's item)
        @property
        def image_encoding(self) -> Any:  # (a value not equal to itself, as NaN)
            return token

    def frames() -> Any:
        sim = ss.SimBackend()
        s = sim.create_stream(non_blocking=True)
        hdr = Odd(backend=sim)
        hdr.load()
        c = ss.StreamContract(hdr, s, strategy="event", backend=sim)
        with sim.use_stream(s):
            before = steady.replays
            for i in range(6):
                sim.from_dlpack(c.run(_x(sim, i, s)).image)
        return (steady.replays - before, dict(c.stats))

    got = _both(frames)
    assert got["C"] == got["Python"]


@needs_c
@pytest.mark.parametrize(
    "extra",
    [tuple(range(40)), tuple(float(k) for k in range(300))],  # (the second: past the C frame's own array, once overrun)
    ids=["40 ints", "300 floats"],
)
def test_a_call_with_many_arguments_replays_as_in_python(extra: tuple[Any, ...]) -> None:
    class Many(VideoSuperRes):
        def run(self, input_array: Any, *extra: Any, **kwargs: Any) -> Any:
            return super().run(input_array, **kwargs)

    def frames() -> Any:
        sim = ss.SimBackend()
        s = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(_sr(sim, Many), s, strategy="event", backend=sim)
        with sim.use_stream(s):
            before = steady.replays
            for i in range(8):
                sim.from_dlpack(c.run(_x(sim, i, s), *extra).image)
        return (steady.replays - before, dict(c.stats))

    got = _both(frames)
    assert got["C"] == got["Python"] and got["C"][1][0] > 0


# -- a second reviewer's findings ------------------------------------------------------------------------------


@needs_c
def test_an_image_slot_deleted_during_the_import_raises_attribute_error() -> None:
    def attempt() -> Any:
        _, _, _, out = _one_output()
        image, generation = out.image, out.image._generation

        class Deleting:
            """A generation whose comparison deletes the image's default consumer (code that runs mid-import)."""

            def __eq__(self, other: object) -> bool:
                with contextlib.suppress(AttributeError):
                    del image._default_consumer
                return other == generation

            def __ne__(self, other: object) -> bool:
                return not self.__eq__(other)

            __hash__ = None  # type: ignore[assignment]

        image._generation = Deleting()
        image.__dlpack__()

    got = _both(attempt)
    assert got["C"] == got["Python"] and got["C"][1] == "AttributeError"


@needs_c
def test_the_second_recipe_search_reads_the_recipes_the_contract_holds_then() -> None:
    class Hooked(VideoSuperRes):
        hook: Any = None

        @property
        def input_height(self) -> Any:  # (read under the effect's lock, with the config)
            if Hooked.hook is not None:
                Hooked.hook()
            return self._in[1]

        @input_height.setter
        def input_height(self, value: Any) -> None:
            self._set_in(1, "input_height", value)

    def frames() -> Any:
        sim = ss.SimBackend()
        s, r1, r2 = (sim.create_stream(non_blocking=True) for _ in range(3))
        c = ss.StreamContract(_sr(sim, Hooked), s, strategy="event", backend=sim)
        log = []
        with sim.use_stream(s):
            for i in range(12):
                if i == 9:
                    Hooked.hook = lambda: setattr(c, "_recipes", [])  # (the contract's recipes dropped meanwhile)
                before = steady.replays
                out = c.run(_x(sim, i, s))
                Hooked.hook = None
                sim.from_dlpack(out.image, stream=(r1, r2)[i % 2])
                log.append(steady.replays - before)
        return (log, dict(c.stats))

    got = _both(frames)
    assert got["C"] == got["Python"]


@contextlib.contextmanager
def _torch_stand_in(raw_current: Any) -> Iterator[None]:
    """A ``torch`` module with what ``out.torch()`` touches (the current stream's handle, ``from_dlpack``),
    for the block; the real one (if any) and the helpers' cache put back after."""
    import sys
    import types

    saved, saved_current = sys.modules.get("torch"), outputs_module._RAW_CURRENT
    stand_in = types.ModuleType("torch")
    stand_in._C = types.SimpleNamespace(_cuda_getCurrentRawStream=raw_current)  # type: ignore[attr-defined]
    stand_in.from_dlpack = lambda capsule: types.SimpleNamespace(clone=lambda: ("copy of", capsule))  # type: ignore[attr-defined]
    sys.modules["torch"] = stand_in
    outputs_module._RAW_CURRENT = False
    try:
        yield
    finally:
        outputs_module._RAW_CURRENT = saved_current
        if saved is None:
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = saved


@needs_c
def test_a_copy_whose_import_fails_leaves_the_output_importable_as_a_view() -> None:
    """``out.torch()``'s first lines (the import in C): when the import raises, the output is as a failed copy
    helper leaves it, so a later zero-copy import is recorded as a view (the next run waits for its reader)."""

    def attempt() -> Any:
        sim, s, c, out = _one_output()
        calls = [0]

        def current_stream(device: int) -> int:
            calls[0] += 1
            if calls[0] == 1:
                raise RuntimeError("a transient CUDA error")
            return -1

        with _torch_stand_in(current_stream), pytest.raises(RuntimeError, match="transient"):
            outputs_module.torch_copy(out.image)
        escapes = out.image._escapes
        with sim.use_stream(s):
            sim.from_dlpack(out.image, stream=sim.create_stream(non_blocking=True))
        return (escapes, c.ledger.escaped)

    got = _both(attempt)
    assert got["C"] == got["Python"] == ("returned", (True, True))


# -- a third reviewer's finding ---------------------------------------------------------------------------------


@needs_c
def test_a_bind_that_raises_changes_nothing() -> None:
    """``bind_replay`` with a wrong part (an image class without the slots it fills) raises, and the frames
    after it still replay with the parts bound before (before the fix: half-bound, the next frame crashed)."""
    import streamsafe.outputs as outputs

    class Small:
        __slots__ = ("_effect", "_ledger", "_capsule")

    native = contract_module.native()
    parts = {
        "contract_globals": vars(contract_module), "steady": steady, "views": contract_module._VIEWS,
        "local": contract_module.guarding._local, "raw_cache": contract_module.guarding._raw_cache,
        "raw_method": contract_module.guarding.raw_method, "call_raw": contract_module.call_raw,
        "SafeOutput": outputs.SafeOutput, "SafeImage": Small, "SimArray": contract_module.SimArray,
        "SimBackend": ss.SimBackend, "thread_token": contract_module.thread_token,
        "restore_counters": contract_module._restore_counters, "hooks": contract_module.hooks,
        "SimCapsule": contract_module.SimCapsule, "capsule_data_key": contract_module.capsule_data_key,
        "on_this_thread": contract_module.on_this_thread, "prune_views": contract_module._prune_views,
        "ledger": contract_module.sys.modules["streamsafe.ledger"], "get_ident": threading.get_ident,
    }
    with pytest.raises(AttributeError, match="_generation"):
        native.bind_replay(parts)
    sim = ss.SimBackend()
    s = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(_sr(sim), s, strategy="event", backend=sim)
    with sim.use_stream(s):
        before = steady.replays
        for i in range(6):
            out = c.run(_x(sim, i, s))
            assert type(out.image) is outputs.SafeImage
            sim.from_dlpack(out.image)
    assert steady.replays - before >= 3
