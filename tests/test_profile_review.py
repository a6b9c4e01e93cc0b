"""A newcomer's review of guarding an SDK of one's own through a profile (docs/guide.md, "Guarding your own SDK"):
each finding fails before its fix and passes after.

* unregistering a fallback profile of one's own left no fallback: duck-typed effects were refused for the rest of the
  process (the built-in nvvfx-like one is the fallback again); ``register(fallback="yes")`` was accepted;
* ``c.run(x)`` on the contract of a profile that guards no ``run`` raised a bare ``TypeError`` (and
  ``c.run_at_timestep(x)`` gave nvvfx's message): a ``MissingCallError`` naming the calls it guards;
* ``classes=(object,)`` was registered and broke the next contract with a bare ``TypeError``;
* ``output=`` naming an attribute that holds no DLPack capsule was found only at the import, with another error's fix,
  and that import used the output up: a ``ProfileError`` naming ``output=`` at the call.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import profile as sp
from streamsafe.errors import MissingCallError, NotAnEffectError, ProfileError
from streamsafe.profile import EffectProfile
from streamsafe.sim import SimBackend


class Out:
    def __init__(self, pixels: Any, meta: Any = None) -> None:
        self.pixels, self.meta = pixels, meta


class Blurrer:
    """An SDK of one's own: ``apply(src=..., queue=...)``, its result's capsule in ``pixels``."""

    def __init__(self) -> None:
        self.gpu = ss.current_backend()
        self.output: Any = None

    def apply(self, *, src: Any, queue: int = 0) -> Out:
        gpu, s = self.gpu, ss.as_stream(queue, backend=self.gpu)
        x = gpu.from_dlpack(src.__dlpack__())
        if self.output is None:
            self.output = gpu.malloc(x.shape, name="out")
        a, b = x.buffer, self.output.buffer
        gpu.launch(s, "blur", lambda: np.add(a.data, 1, out=b.data), reads=[x], writes=[self.output])
        gpu.synchronize_stream(s)
        return Out(self.output.__dlpack__(), meta={"frame": 1})


class Duck:
    """A class no profile names, with nvvfx's ``run()``: the fallback's."""

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any: ...


@pytest.fixture
def registered() -> Iterator[list[Any]]:
    """Profiles a test registers: unregistered after it."""
    made: list[Any] = []
    yield made
    for p in made:
        sp.unregister(p)


def _profile(output: str | None = "pixels") -> EffectProfile:
    return EffectProfile(name="Blurrer", classes=(Blurrer,), calls=("apply",), stream_keyword="queue", blocking_keyword=None,
                         inputs=("src",), output=output)


def test_unregistering_a_fallback_of_ones_own_brings_the_built_in_fallback_back(registered: list[Any]) -> None:
    built_in = sp.profile_of(Duck())
    mine = sp.register(EffectProfile(name="mine", classes=(), calls=("run",)), fallback=True)
    registered.append(mine)
    assert sp.profile_of(Duck()) is mine and sp.profiles()[-1] is mine
    sp.unregister(mine)
    assert sp.profile_of(Duck()) is built_in and sp.profiles()[-1] is built_in and mine not in sp.profiles()
    with pytest.raises(NotAnEffectError):  # (the fallback is nvvfx-like: an object without run() still has none)
        sp.profile_of(object())


def test_a_fallback_that_is_not_a_bool_is_refused(registered: list[Any]) -> None:
    built_in = sp.profile_of(Duck())
    with pytest.raises(ProfileError, match=r"fallback='yes' is not a bool\. Pass fallback=True or fallback=False"):
        sp.register(EffectProfile(name="mine", classes=(), calls=("run",)), fallback="yes")  # type: ignore[arg-type]
    assert sp.profile_of(Duck()) is built_in


@pytest.mark.parametrize("call", ["run", "run_at_timestep"])
def test_a_call_the_profile_does_not_guard_through_the_contract_names_the_ones_it_does(registered: list[Any], call: str) -> None:
    sim = SimBackend()
    with ss.use_backend(sim):
        registered.append(sp.register(_profile()))
        S = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(Blurrer(), S, input_stream=S)
        x = sim.empty((3, 4, 4))
        with pytest.raises(MissingCallError, match=rf"Blurrer has no {call}\(\): its profile \(Blurrer\) guards apply\(\); "
                                                   r"call c\.apply\(\.\.\.\) for Blurrer"):
            getattr(c, call)(x)
        assert c.stats["runs"] == 0
        assert isinstance(c.apply(src=x), ss.SafeOutput) and c.stats["runs"] == 1  # (the contract still works)


@pytest.mark.parametrize("base", [object, "builtins.object", type])
def test_a_profile_naming_the_base_of_every_object_is_refused(base: Any) -> None:
    with pytest.raises(ProfileError, match=r"the base of every object \(or class\): the profile would describe everything"):
        EffectProfile(name="everything", classes=(base,), calls=("apply",), stream_keyword=None, blocking_keyword=None)


def test_a_profile_of_a_metaclass_walks_its_subclasses() -> None:
    """(The subclass walk reached ``type`` through a metaclass and called its ``__subclasses__`` unbound.)"""
    class Meta(type):
        pass

    assert sp._subclasses(Meta) == [Meta]
    assert Meta in sp._subclasses(type)  # (a metaclass's own __subclasses__ takes no self: the walk calls type's)


@pytest.mark.parametrize(("output", "says"), [
    ("meta", r"output='meta' names the SDK's result's 'meta', a builtins\.dict, not the output's DLPack capsule \(its "
             r"attributes: pixels, meta\)\. Set output= to"),  # (a typo: the capsule is in pixels)
    (None, r"output=None says the SDK's result is the output's DLPack capsule, but it is a test_profile_review\.Out"),
])
def test_an_output_that_is_no_capsule_is_a_profile_error_at_the_call(registered: list[Any], output: str | None, says: str) -> None:
    sim = SimBackend()
    with ss.use_backend(sim):
        registered.append(sp.register(_profile(output=output)))
        S = sim.create_stream(non_blocking=True)
        c = ss.StreamContract(Blurrer(), S, input_stream=S)
        with pytest.raises(ProfileError, match=says):
            c.apply(src=sim.empty((3, 4, 4)))


class PositionalBlurrer(Blurrer):
    """:class:`Blurrer` whose stream may come by position: ``apply(src, queue=0)``."""

    def apply(self, src: Any, queue: int = 0) -> Out:  # type: ignore[override]
        return super().apply(src=src, queue=queue)


@pytest.mark.parametrize("how", ["class guard", "block", "contract"])
def test_a_stream_by_position_where_the_sdks_signature_takes_it_is_guarded_as_by_keyword(registered: list[Any], how: str) -> None:
    """``sdk.apply(x, stream)`` was refused under every guard ("the contract passes that itself"), though the SDK takes
    its stream by position: ``streamsafe run`` broke a correct program. It goes through as ``apply(x, queue=stream)``."""
    sim = SimBackend(scheduler="adversarial")
    with ss.use_backend(sim):
        registered.append(sp.register(EffectProfile(
            name="PositionalBlurrer", classes=(PositionalBlurrer,), calls=("apply",), stream_keyword="queue",
            blocking_keyword=None, inputs=("src",), output="pixels")))
        T = sim.create_stream(non_blocking=True)
        sdk = PositionalBlurrer()
        got = []
        guard: Any = (ss.guard(PositionalBlurrer, input_stream=T) if how == "class guard" else
                      ss.stream_contract(sdk, T, input_stream=T) if how == "block" else None)
        c = ss.StreamContract(sdk, T, input_stream=T) if how == "contract" else None
        with guard if guard is not None else contextlib.nullcontext():
            for v in range(4):
                x = sim.empty((3, 4, 4), np.float32)
                sim.fill(x, float(v), stream=T)
                out = (c.apply(x, T.ptr) if c is not None else sdk.apply(x, T.ptr))  # type: ignore[union-attr]
                assert isinstance(out, ss.SafeOutput)
                got.append(sim.copy(sim.from_dlpack(out.pixels, stream=T), T))
        sim.synchronize_device()
        assert [float(g.numpy().mean()) for g in got] == [1.0, 2.0, 3.0, 4.0] and sim.races == []


def test_a_stream_the_sdk_takes_by_keyword_only_is_still_refused_by_position() -> None:
    from streamsafe.testing import VideoSuperRes

    sim = SimBackend()
    sr = VideoSuperRes(backend=sim)
    sr.output_width = sr.output_height = 32
    sr.load()
    S = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(sr, S, input_stream=S)
    with pytest.raises(ss.errors.ArgumentError, match=r"takes 1 positional argument\(s\) \(its input\(s\)\); 2 were given"):
        c.run(sim.empty((3, 16, 16), np.float32), S.ptr)


@pytest.mark.parametrize("device", ["cuda:0", None, -1, True, 0.0])
def test_a_device_of_that_gives_no_device_index_is_a_profile_error(registered: list[Any], device: Any) -> None:
    """(It gave a ``DeviceMismatchError`` blaming the stream, or an ``InputDeviceError`` for "device None".)"""
    sim = SimBackend()
    with ss.use_backend(sim):
        registered.append(sp.register(EffectProfile(
            name="Blurrer", classes=(Blurrer,), calls=("apply",), stream_keyword="queue", blocking_keyword=None,
            inputs=("src",), output="pixels", device_of=lambda obj: device)))
        with pytest.raises(ProfileError, match=rf"device_of=.* gave {re.escape(repr(device))} for a test_profile_review\.Blurrer, "
                                               r"not a CUDA device index \(an int of at least 0\)\. Make device_of return"):
            ss.StreamContract(Blurrer(), sim.create_stream(non_blocking=True))


class CurrentStreamBlurrer(Blurrer):
    """:class:`Blurrer` with no stream argument: it runs on the current stream."""

    def apply(self, *, src: Any) -> Out:  # type: ignore[override]
        return super().apply(src=src, queue=int(self.gpu.current_stream().ptr))


def test_an_sdk_without_a_stream_keyword_called_while_another_stream_is_current_is_refused(registered: list[Any]) -> None:
    """A contract on S of an SDK that takes no stream, called while T is current: the SDK ran on T while the fences
    ordered S (3 of 4 frames wrong, 3 races, no word). Refused before anything is issued; with S current, guarded."""
    sim = SimBackend(scheduler="adversarial")
    with ss.use_backend(sim):
        registered.append(sp.register(EffectProfile(
            name="CurrentStreamBlurrer", classes=(CurrentStreamBlurrer,), calls=("apply",), stream_keyword=None,
            blocking_keyword=None, inputs=("src",), output="pixels")))
        S, T = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
        sdk = CurrentStreamBlurrer()
        x = sim.empty((3, 4, 4), np.float32)
        sim.fill(x, 1.0, stream=T)
        with sim.use_stream(T), ss.stream_contract(sdk, S, input_stream=T):
            with pytest.raises(ss.errors.ArgumentError, match=r"CurrentStreamBlurrer\.apply\(\) takes no stream: it runs on the "
                                                             r"current stream, .*, but this contract runs it on .*\. Make the "
                                                             r"contract's stream current around the call"):
                sdk.apply(src=x)
            with sim.use_stream(S):
                out = sdk.apply(src=x)
                got = sim.copy(sim.from_dlpack(out.pixels, stream=S), S)
        sim.synchronize_device()
        assert float(got.numpy().mean()) == 2.0 and sim.races == []


def test_a_pycapsule_that_is_not_dlpacks_is_no_output(registered: list[Any]) -> None:
    """(A later review: the check was by type only, so another library's capsule passed and failed at the import.)"""
    import datetime

    from streamsafe._dlpack import is_capsule

    assert is_capsule(np.zeros(3).__dlpack__(), named=True) and not is_capsule(datetime.datetime_CAPI, named=True)  # type: ignore[attr-defined]

    class CapiBlurrer(Blurrer):
        def apply(self, *, src: Any, queue: int = 0) -> Out:
            out = super().apply(src=src, queue=queue)
            out.meta = datetime.datetime_CAPI  # type: ignore[attr-defined]
            return out

    sim = SimBackend()
    with ss.use_backend(sim):
        registered.append(sp.register(EffectProfile(
            name="CapiBlurrer", classes=(CapiBlurrer,), calls=("apply",), stream_keyword="queue", blocking_keyword=None,
            inputs=("src",), output="meta")))
        S = sim.create_stream(non_blocking=True)
        with pytest.raises(ProfileError, match=r"output='meta' names the SDK's result's 'meta', a builtins\.PyCapsule, not the "
                                               r"output's DLPack capsule"):
            ss.StreamContract(CapiBlurrer(), S, input_stream=S).apply(src=sim.empty((3, 4, 4)))
