"""An SDK guarded through a profile of its own, called as it documents itself: a stream given by position, an SDK
whose stream defaults to the current one, an optional input left out as ``None``, a property beside the calls, a
call named like one of the contract's own attributes, a profile unregistered while a class guard is on.

The SDK here doubles its input into its own output buffer on the stream it is given (``None``: the current one),
then waits for it; its output is read on another stream C, and a later plain call must wait for that read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import profile as P
from streamsafe.sim import SimBackend
from test_profile_checks import Sharpened as Result, Sharpener


class SDK(Sharpener):
    """``process(image, stream=0)``: the guide's Sharpener (it doubles ``image`` into its own output buffer on ``stream``,
    then waits), with the input and the stream also by position."""

    def _work(self, image: Any, stream: Any) -> Result:
        return Sharpener.process(self, image=image, stream=stream)

    def process(self, image: Any, stream: Any = 0) -> Result:  # (the stream may come by position)
        return self._work(image, stream)

    @property
    def mode(self) -> str:
        return "fast"


class CurrentByDefault(SDK):
    def process(self, image: Any, stream: Any = None) -> Result:  # (no stream: the current one)
        return self._work(image, stream)


class Masked(SDK):
    def process(self, image: Any, mask: Any = None, *, stream: Any = 0) -> Result:
        return self._work(image, stream)


class Planner(SDK):
    def plan(self, image: Any, *, stream: Any = 0) -> Result:
        return self._work(image, stream)


def profile_of(cls: type, **fields: Any) -> P.EffectProfile:
    return P.EffectProfile(**{"name": "test." + cls.__name__, "classes": (cls,), "calls": ("process",),
                              "stream_keyword": "stream", "blocking_keyword": None, "output": "frame", **fields})


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


@pytest.fixture
def registered() -> Iterator[list[P.Profile]]:
    made: list[P.Profile] = []
    yield made
    ss.unguard()
    for p in made:
        P.unregister(p)


def _filled(sim: SimBackend, value: float, stream: Any = None) -> Any:
    x = sim.empty((3, 8, 8))
    sim.fill(x, value, stream)
    return x


def _read_elsewhere(sim: SimBackend, cls: type) -> tuple[Any, Any, Any, Any]:
    """A guarded call on S, its output read on C; returns the SDK object, S, the next input and C's copy (2.0)."""
    S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    sdk = cls()
    with sim.use_stream(S):
        out = ss.StreamContract(sdk, S).process(_filled(sim, 1.0, S))
    copy = sim.copy(sim.from_dlpack(out.frame, stream=C), C)
    return sdk, S, _filled(sim, 5.0, S), copy


@pytest.mark.parametrize(("cls", "how"), [(SDK, "by position"), (CurrentByDefault, "the SDK's default: the current stream")])
def test_a_plain_call_after_a_guard_waits_for_the_readers_on_the_stream_it_runs_on(
        sim: SimBackend, registered: list[P.Profile], cls: type, how: str) -> None:
    """A plain call of an object a contract guarded before is tracked: its stream, given by position or left to the
    SDK's default, waits for the output's readers (before, streamsafe took keyword-only stream 0: C's copy raced)."""
    registered.append(P.register(profile_of(cls)))
    sdk, S, y, copy = _read_elsewhere(sim, cls)
    with sim.use_stream(S):
        sdk.process(y, S.ptr) if how == "by position" else sdk.process(y)
    sim.synchronize_device(0)
    assert sim.races == [] and np.all(sim.download(copy) == 2.0)


def test_a_stream_by_position_under_a_guard_is_read_as_by_keyword(sim: SimBackend, registered: list[P.Profile]) -> None:
    """``sdk.process(y, S.ptr)`` under a guard: the SDK takes its stream by position, so the guard reads it as
    ``stream=S.ptr`` (it was refused: a program correct without streamsafe failed with it); given both ways, refused
    before anything is issued. C's copy of the output before is waited for either way."""
    registered.append(P.register(profile_of(SDK)))
    sdk, S, y, copy = _read_elsewhere(sim, SDK)
    with ss.guard(SDK), sim.use_stream(S):
        with pytest.raises(ss.errors.ArgumentError, match=r"got 'stream' twice, by position \(argument 2\) and as stream="):
            sdk.process(y, S.ptr, stream=S.ptr)
        out = sdk.process(y, S.ptr)
        assert isinstance(out, ss.SafeOutput)
        again = sim.copy(sim.from_dlpack(out.frame, stream=S), S)
    sim.synchronize_device(0)
    assert sim.races == [] and np.all(sim.download(copy) == 2.0) and np.all(sim.download(again) == 10.0)


def test_a_property_named_as_a_call_is_refused_and_never_replaced(sim: SimBackend, registered: list[P.Profile]) -> None:
    p = P.register(profile_of(SDK, calls=("process", "mode")))
    registered.append(p)
    with pytest.raises(ss.errors.ProfileError, match="'mode', which is a property"):
        ss.StreamContract(SDK(), sim.create_stream(non_blocking=True))
    assert SDK().mode == "fast"
    P.unregister(p)
    registered.clear()
    assert SDK().mode == "fast"


def test_one_keyword_for_the_stream_and_the_blocking_flag_is_refused() -> None:
    with pytest.raises(ss.errors.ProfileError, match="blocking_keyword"):
        profile_of(SDK, blocking_keyword="stream")
    with pytest.raises(ss.errors.ProfileError, match="inputs"):
        profile_of(SDK, inputs=("image", "stream"))


def test_a_profile_unregistered_under_a_class_guard_leaves_plain_calls_to_the_sdk(sim: SimBackend, registered: list[P.Profile]) -> None:
    p = P.register(profile_of(SDK))
    with ss.guard(SDK):
        P.unregister(p)
        out = SDK().process(_filled(sim, 1.0))  # (no profile describes the class now: the SDK's own call)
    assert isinstance(out, Result)


def test_an_optional_input_left_out_as_none_is_no_input(sim: SimBackend, registered: list[P.Profile]) -> None:
    registered.append(P.register(profile_of(Masked, inputs=("image", "mask"))))
    c = ss.StreamContract(Masked(), sim.create_stream(non_blocking=True))
    out = c.process(image=_filled(sim, 1.0), mask=None)
    assert np.all(out.numpy() == 2.0)


def test_a_call_named_like_a_contract_attribute_warns_and_goes_through_call(sim: SimBackend, registered: list[P.Profile]) -> None:
    registered.append(P.register(profile_of(Planner, calls=("plan",))))
    with pytest.warns(UserWarning, match=r"c\.call\('plan', \.\.\.\)"):
        c = ss.StreamContract(Planner(), sim.create_stream(non_blocking=True))
    assert np.all(c.call("plan", _filled(sim, 1.0)).numpy() == 2.0)


class _Frozen(type):
    def __setattr__(cls, name: str, value: Any) -> None:
        raise TypeError("this class refuses new attributes")


class Locked(SDK, metaclass=_Frozen):
    """A class that refuses dispatchers: a block patches the instance instead."""


def test_a_refused_inner_block_leaves_the_outer_blocks_instance_patch(sim: SimBackend, registered: list[P.Profile]) -> None:
    registered.append(P.register(profile_of(Locked)))
    obj = Locked()
    c = ss.StreamContract(obj, sim.create_stream(non_blocking=True))
    with c:
        with pytest.raises(ss.errors.StreamsafeError, match="already guarded"), c:
            pass
        assert isinstance(obj.process(_filled(sim, 1.0)), ss.SafeOutput)  # (still the outer block's)


def test_a_class_guards_contract_does_not_warn_of_calls_its_attributes_shadow(sim: SimBackend, registered: list[P.Profile]) -> None:
    """Under ``ss.guard`` the program calls ``obj.plan(...)`` itself (through the dispatcher): no contract of its to
    call ``c.call("plan", ...)`` on, so no warning that names one."""
    import warnings

    registered.append(P.register(profile_of(Planner, calls=("plan",))))
    with ss.guard(Planner):
        obj = Planner()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = obj.plan(_filled(sim, 1.0), stream=sim.create_stream(non_blocking=True).ptr)
    assert isinstance(out, ss.SafeOutput) and not [w for w in seen if "c.call" in str(w.message)]
