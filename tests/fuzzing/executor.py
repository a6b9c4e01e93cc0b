"""The executor both runners share: a program run step by step on a world's primitives, its copies checked."""

from __future__ import annotations

import contextlib
import os
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import streamsafe as ss
from streamsafe.testing.effects import ImageEncoding, TrueHDR, VideoFrameGeneration, VideoSuperRes

from .frames import _matches, reference
from .program import BANK, DELAY_STAGES, Program, Step
from .results import Result


class _World:
    """The primitives a runner provides. ``stream`` handles are the runner's own objects."""

    name = "?"
    scale = 1
    exact = True
    check_every = 0
    """Check copies every this many frames (0: only at the end)."""

    def stream(self, role: str, kind: str) -> Any:
        raise NotImplementedError

    def sdk_value(self, stream: Any) -> Any:
        """What to give a guard as ``stream=`` / ``input_stream=``."""
        raise NotImplementedError

    def ptr(self, stream: Any) -> int:
        raise NotImplementedError

    def context(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def make_effect(self, program: Program) -> Any:
        raise NotImplementedError

    def set_delays(self, effect: Any, delays: dict[str, float]) -> None:
        pass

    def produce(self, stream: Any, encoding: str, h: int, w: int, index: int, delay: float, slot: str | None) -> Any:
        raise NotImplementedError

    def spin(self, stream: Any, us: float) -> None:
        pass

    def other_work(self, stream: Any, us: float) -> None:
        raise NotImplementedError

    def helper(self, out: Any, framework: str, stream: Any) -> Any:
        raise NotImplementedError

    def import_view(self, out: Any, framework: str, stream: Any) -> Any:
        raise NotImplementedError

    def copy(self, view: Any, framework: str, stream: Any) -> Any:
        raise NotImplementedError

    def user_fence(self, waiter: Any, signaller: Any) -> None:
        raise NotImplementedError

    def synchronize(self) -> None:
        raise NotImplementedError

    def to_numpy(self, copy: Any) -> np.ndarray:
        raise NotImplementedError

    def races(self) -> list[Any]:
        return []

    def cleanup(self) -> None:
        pass


class _Api:
    """What a frame body calls: ``run``/``run_at_timestep``/``configure`` through one guard."""

    __slots__ = ("run", "run_at_timestep", "configure")

    def __init__(self, run: Callable[..., Any], run_at_timestep: Callable[..., Any] | None, configure: Callable[..., None]) -> None:
        self.run = run
        self.run_at_timestep = run_at_timestep
        self.configure = configure


class _Execution:
    def __init__(self, program: Program, strategy: str, world: _World, result: Result, max_delay_us: float, late_us: float) -> None:
        self.p = program
        self.strategy = strategy
        self.world = world
        self.result = result
        self.max_delay_us = max_delay_us
        self.late_us = late_us
        self.pending: list[tuple[int, str, Any]] = []
        self.deferred: list[Callable[[], None]] = []
        self.prev: tuple[int, tuple[int, int, str], Any] | None = None
        self.ring: dict[tuple[int, int, str], list[int]] = {}
        self.effect: Any = None
        self.main: Any = None
        self.second: Any = None
        self.stack = contextlib.ExitStack()
        self.setting_up = True

    # streams and guards ---------------------------------------------------------------------------

    def _streams(self) -> None:
        p, w = self.p, self.world
        self.S = w.stream("S", p.sdk)
        self.P = self.S if p.producer == "S" else w.stream("P", p.producer)
        self.C = self.S if p.consumer == "S" else w.stream("C", p.consumer)
        self.C2 = w.stream("C2", p.consumer2)
        self.S2 = self.S if p.second_sdk == "S" else w.stream("S2", p.second_sdk)

    def _kwargs(self, sdk: Any) -> tuple[Any, dict[str, Any]]:
        kw: dict[str, Any] = {"strategy": self.strategy, "allow_none": self.strategy == "none"}
        if self.p.declare_input:
            kw["input_stream"] = self.world.sdk_value(self.P)
        return (self.world.sdk_value(sdk) if self.p.declare_sdk else None), kw

    def _build(self, kind: str, sdk: Any) -> Any:
        stream, kw = self._kwargs(sdk)
        if kind == "contract":
            return ss.StreamContract(self.effect, stream, **kw)
        if kind == "decorator":
            return ss.stream_safe(self.effect, stream, **kw)(_call_thunk)
        if kind == "with":
            return self.stack.enter_context(ss.stream_contract(self.effect, stream, **kw))
        return None  # with-per-frame: built per frame

    def _effect_api(self, contract: Any) -> _Api:
        if self.p.call == "contract" and contract is not None:
            return _Api(contract.run, getattr(contract, "run_at_timestep", None), lambda **a: _setattrs(self.effect, a))
        fx = self.effect
        return _Api(lambda *a, **k: fx.run(*a, **k), getattr(fx, "run_at_timestep", None), lambda **a: _setattrs(fx, a))

    def _guarded(self, which: str, body: Callable[[_Api], None]) -> None:
        p = self.p
        kind = p.guard if which == "main" else p.second
        assert kind is not None
        sdk = self.S if which == "main" else self.S2
        ctx = {"S": sdk, "P": self.P, "none": None}[p.context]
        with self.world.context(ctx) if ctx is not None else contextlib.nullcontext():
            if kind == "contract":
                if which == "main":
                    c = self.main
                else:
                    if self.second is None:
                        self.second = self._build("contract", sdk)
                    c = self.second
                body(_Api(c.run, getattr(c, "run_at_timestep", None), c.configure))
            elif kind == "with":
                body(self._effect_api(self.main))
            elif kind == "decorator":
                fn = self.main if which == "main" else self.second
                fn(lambda: body(self._effect_api(None)))
            else:
                stream, kw = self._kwargs(sdk)
                with ss.stream_contract(self.effect, stream, **kw) as c:
                    body(self._effect_api(c))

    # frames ---------------------------------------------------------------------------------------

    def _inputs(self, k: int, step: Step) -> list[Any]:
        p, w = self.p, self.world
        st = step.state
        h, wd = st.in_hw[0] * w.scale, st.in_hw[1] * w.scale
        enc = "RGB8" if p.effect == "truehdr" else st.encoding
        d = self._delay(step, "P")
        idx = k + BANK
        if p.effect != "vfg":
            slot = None if p.inputs == "fresh" else "surface"
            return [w.produce(self.P, enc, h, wd, idx, d, slot)]
        key = (h, wd, enc)
        if p.inputs == "fresh":
            prev = self.prev[2] if self.prev is not None and self.prev[:2] == (idx - 1, key) else None
            if prev is None:
                prev = w.produce(self.P, enc, h, wd, idx - 1, 0.0, None)
            cur = w.produce(self.P, enc, h, wd, idx, d, None)
            self.prev = (idx, key, cur)
            return [prev, cur]
        ring = self.ring.setdefault(key, [-1, -1])
        cur = w.produce(self.P, enc, h, wd, idx, d, f"ring{idx % 2}")
        ring[idx % 2] = idx
        if ring[(idx - 1) % 2] != idx - 1:
            prev = w.produce(self.P, enc, h, wd, idx - 1, 0.0, f"ring{(idx - 1) % 2}")
            ring[(idx - 1) % 2] = idx - 1
        else:
            prev = w.produce(self.P, enc, h, wd, idx - 1, -1.0, f"ring{(idx - 1) % 2}")  # -1: look up, no write
        return [prev, cur]

    def _delay(self, step: Step, stage: str) -> float:
        frac = step.delays[DELAY_STAGES.index(stage)]
        return frac * (self.late_us if stage == "late" else self.max_delay_us)

    def _frame(self, k: int, step: Step) -> None:
        p = self.p
        inputs = self._inputs(k, step)
        for issue in self.deferred:  # the previous frame's deferred consumption: before this run
            issue()
        self.deferred.clear()
        self.world.set_delays(self.effect, {s: self._delay(step, s) for s in ("transfer", "inference", "conversion")})
        extra: dict[str, Any] = {}
        sdk = self.S if step.guard == "main" else self.S2
        if p.stream_ptr:
            extra["stream_ptr"] = self.world.ptr(sdk)
        if p.user_non_blocking:
            extra["non_blocking"] = True
        scale = self.world.scale

        def body(api: _Api) -> None:
            if step.config:
                api.configure(**{a: _scaled(a, v, scale) for a, v in step.config})
            if p.effect == "vfg":
                kind, value = step.vfg_call
                if kind == "index":
                    out = api.run(inputs[0], inputs[1], frame_index=int(value), **extra)
                else:
                    assert api.run_at_timestep is not None
                    out = api.run_at_timestep(inputs[0], inputs[1], float(value), **extra)
            else:
                out = api.run(inputs[0], **extra)
            self._consume(k, step, out)

        self._guarded(step.guard, body)
        inputs.clear()  # the program keeps no reference to this frame's inputs (VideoFrameGeneration keeps `current`)

    def _consume(self, k: int, step: Step, out: Any) -> None:
        c, w = step.consume, self.world
        label = str(c)
        if c.style == "helper":
            stream = self.C2 if c.on_c2 else self.C
            delay = self._delay(step, "C")

            def helper() -> None:
                w.spin(stream, delay)
                self.pending.append((k, label, w.helper(out, c.framework, stream)))

            if c.deferred:
                self.deferred.append(helper)
            else:
                helper()
            return
        view = w.import_view(out, c.framework, self.C)

        def finish() -> None:
            if c.late:
                w.other_work(self.C, self._delay(step, "late"))
            target = self.C
            if c.on_c2:
                w.user_fence(self.C2, self.C)
                declare = getattr(out, "record_stream", None)
                if declare is not None:  # the view is read on a stream streamsafe cannot see: say so
                    declare(w.sdk_value(self.C2))
                target = self.C2
            w.spin(target, self._delay(step, "C"))
            self.pending.append((k, label, w.copy(view, c.framework, target)))

        if c.deferred:
            self.deferred.append(finish)
        else:
            finish()

    def _close(self) -> None:
        kind = self.p.guard
        if kind == "contract":
            self.main.close()
        elif kind == "with":
            self.effect.close()  # guarded inside the block
        elif kind == "decorator":
            self.main.contract.close()
        else:
            stream, kw = self._kwargs(self.S)
            with ss.stream_contract(self.effect, stream, **kw):
                self.effect.close()

    def check(self) -> None:
        if not self.pending:
            return
        self.world.synchronize()
        r = self.result
        for k, label, copy in self.pending:
            ok = _matches(self.world.to_numpy(copy), reference(self.p, k, self.world.scale), self.world.exact)
            r.frames += 1
            counts = r.per_consumer.setdefault(label, [0, 0])
            counts[0] += 1
            if not ok:
                r.corrupt += 1
                counts[1] += 1
                r.corrupt_frames.append(k)
        self.pending.clear()

    def execute(self) -> None:
        p, r = self.p, self.result
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self._streams()
                self.effect = self.world.make_effect(p)
                if p.second in ("contract", "decorator") and not p.second_built_inside:
                    self.second = self._build(p.second, self.S2)  # before the main guard's block opens
                self.main = self._build(p.guard, self.S)
                self.setting_up = False
                for k, step in enumerate(p.steps):
                    self._frame(k, step)
                    every = self.world.check_every
                    if every and (k + 1) % every == 0 and not self.deferred:
                        self.check()
                for issue in self.deferred:
                    issue()
                self.deferred.clear()
                self._close()
                self.stack.close()
                self.check()
            except Exception as e:  # a crash is a failure of the library under test: record it
                if isinstance(e, ss.errors.StrategyError) and self.setting_up:
                    r.skipped = str(e).splitlines()[0]  # e.g. async where it is unsound
                else:
                    r.error = _describe_error(e)
                with contextlib.suppress(Exception):
                    self.stack.close()
                with contextlib.suppress(Exception):
                    self.check()  # the copies issued before the crash
            finally:
                self.deferred.clear()
                self.pending.clear()
        r.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]


def _call_thunk(thunk: Callable[[], Any]) -> Any:
    return thunk()


def _setattrs(obj: Any, attrs: dict[str, Any]) -> None:
    for name, value in attrs.items():
        setattr(obj, name, value)


def _scaled(name: str, value: Any, scale: int) -> Any:
    if name.endswith(("_width", "_height")):
        return int(value) * scale
    if name == "image_encoding":
        return ImageEncoding[value]
    return value


_PACKAGE = os.path.dirname(os.path.abspath(ss.__file__)).replace("\\", "/") + "/"
"""streamsafe's own folder: an error is placed at its innermost frame in there (the fuzzer is outside it)."""


def _describe_error(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)
    where = ""
    for fr in reversed(frames):
        name = fr.filename.replace("\\", "/")
        if name.startswith(_PACKAGE):
            where = f" at {name[len(_PACKAGE):]}:{fr.lineno} {fr.name}"
            break
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}{where}"


def _make_effect(program: Program, backend: Any, scale: int) -> Any:
    st = program.initial
    if program.effect == "truehdr":
        fx: Any = TrueHDR(backend=backend)
    elif program.effect == "vfg":
        fx = VideoFrameGeneration(backend=backend, automatic_shot_change_detection_enabled=program.detect)
        fx.input_height, fx.input_width = st.in_hw[0] * scale, st.in_hw[1] * scale
        fx.frame_multiplier = st.multiplier
    else:
        fx = VideoSuperRes(backend=backend, image_encoding=ImageEncoding[st.encoding])
        fx.output_height, fx.output_width = st.out_hw[0] * scale, st.out_hw[1] * scale
    fx.load()
    return fx


def _execute(program: Program, strategy: str, world: _World, backend: str, max_delay_us: float = 0.0, late_us: float = 0.0) -> Result:
    result = Result(program, strategy, backend)
    start = time.perf_counter()
    try:
        _Execution(program, strategy, world, result, max_delay_us, late_us).execute()
        races = world.races()
        result.races = len(races)
        result.race_samples = [str(r).splitlines()[0][:300] for r in races[:3]]
        result.hazards = sorted({_classify(r) for r in races})
    finally:
        world.cleanup()
    result.seconds = time.perf_counter() - start
    return result


def _classify(race: Any) -> str:
    try:
        from streamsafe.tools.hazards import classify

        return classify(race)
    except Exception:
        return "?"
