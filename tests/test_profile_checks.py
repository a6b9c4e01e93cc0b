"""The profile API's rules where a profile meets its SDK: the attribute a profile's ``output`` names is guarded, a class
guard of a module takes that module's classes only, a profile is checked against its SDK's signatures when a contract is
made, and the messages and texts the profile API shows (a contract for an object no profile names, ``streamsafe
doctor``'s profiles, a decoder's plan, a copied output)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import profile as P
from streamsafe.sim import SimBackend


@dataclasses.dataclass
class Sharpened:
    frame: object  # a DLPack capsule of the SDK's output buffer


class Sharpener:
    """The guide's stand-in SDK: ``process(*, image, stream)`` doubles a frame; ``reset()`` frees the output buffer."""

    def __init__(self) -> None:
        self.gpu = ss.current_backend()
        self.output: Any = None

    def process(self, *, image: Any, stream: int = 0) -> Sharpened:
        gpu, s = self.gpu, ss.as_stream(stream, backend=self.gpu)
        x = gpu.from_dlpack(image.__dlpack__())
        if self.output is None:
            self.output = gpu.malloc(x.shape, name="Sharpener.output")
        src, dst = x.buffer, self.output.buffer
        gpu.launch(s, "sharpen", lambda: np.multiply(src.data, 2, out=dst.data), reads=[x], writes=[self.output])
        gpu.synchronize_stream(s)
        return Sharpened(frame=self.output.__dlpack__())

    def reset(self) -> None:
        if self.output is not None:
            self.gpu.free(self.output)
            self.output = None


SHARPENER = P.EffectProfile(
    name="sharpener.Sharpener", classes=(Sharpener,), calls=("process",), releases=("reset",), stream_keyword="stream",
    blocking_keyword=None, host_waits=True, inputs=("image",), output="frame",
)


@pytest.fixture
def sim() -> Iterator[SimBackend]:
    backend = SimBackend(scheduler="adversarial")
    with ss.use_backend(backend):
        yield backend


@pytest.fixture
def registered() -> Iterator[Any]:
    """``registered(profile)``: the profile registered until the test ends."""
    made: list[Any] = []

    def register(profile: Any) -> Any:
        made.append(P.register(profile))
        return profile

    yield register
    for profile in made:
        P.unregister(profile)


def _frame(sim: SimBackend, stream: Any, value: float = 1.0) -> Any:
    x = sim.empty((3, 8, 8))
    sim.fill(x, value, stream)
    return x


# -- 1. the attribute the profile's output names is the guarded output ----------------------------------------------


def test_the_attribute_output_names_is_the_guarded_image(sim: SimBackend, registered: Any) -> None:
    registered(SHARPENER)
    S, C = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    c = ss.StreamContract(Sharpener(), S, input_stream=S)
    out = c.process(image=_frame(sim, S))
    assert isinstance(out, ss.SafeOutput) and out.frame is out.image and isinstance(out.frame, ss.SafeImage)
    # code written for the SDK (result.frame) is ordered: its copy on C waits for the SDK's write, the next call for it
    copied = sim.copy(sim.from_dlpack(out.frame, stream=C), C)
    c.process(image=_frame(sim, S, 2.0))
    sim.synchronize_device(0)
    assert np.all(sim.download(copied) == 2.0)
    sim.assert_no_races()


# -- 7. a copied output names how to copy its data ------------------------------------------------------------------


def test_copying_a_safe_image_names_how_to_copy_the_data(sim: SimBackend, registered: Any) -> None:
    registered(SHARPENER)
    S = sim.create_stream(non_blocking=True)
    out = ss.StreamContract(Sharpener(), S, input_stream=S).process(image=_frame(sim, S))
    for make in (copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match=r"can be imported once; copy the data \(out\.copy\(\), out\.torch\(\)\)$"):
            make(out.image)


# -- 2. a class guard of a module takes the classes defined in it or its package only --------------------------------


def test_guarding_a_module_takes_only_the_classes_defined_in_it(sim: SimBackend, registered: Any) -> None:
    import json
    import sys
    import types

    registered(SHARPENER)  # (names Sharpener, defined in this test module, by identity)
    for verb in (ss.guard, ss.unguard):
        with pytest.raises(ss.StreamsafeError, match="'json' has none of the classes .* defined in it or its package"):
            verb(json)
    importer = types.ModuleType("importer")  # a module that only imports the class
    importer.Sharpener = Sharpener  # type: ignore[attr-defined]
    with pytest.raises(ss.StreamsafeError, match="nothing to guard"):
        ss.guard(importer)
    with ss.guard(sys.modules[__name__]) as g:  # the module that defines it
        assert g.classes == (Sharpener,)
        with ss.guard(Sharpener) as inner:
            with pytest.raises(ss.StreamsafeError, match="nothing to unguard"):
                ss.unguard(json)
            assert inner.active  # (unguard of another module left it)


def test_a_module_whose_profile_names_it_takes_its_emulations_classes(registered: Any) -> None:
    import types

    sdk = types.ModuleType("sharpener_sdk")  # an emulation of the SDK, installed under its name
    sdk.Sharpener = Sharpener  # type: ignore[attr-defined]
    registered(dataclasses.replace(SHARPENER, module="sharpener_sdk"))
    with ss.guard(sdk) as g:
        assert g.classes == (Sharpener,)


# -- 4. a contract for an object no profile describes says what profile_of says ------------------------------------


def test_a_contract_for_an_object_no_profile_describes_points_to_registering_one() -> None:
    class Unknown:
        def process(self) -> None: ...

    with pytest.raises(ss.errors.NotAnEffectError) as e:
        P.profile_of(Unknown())
    said = str(e.value)
    for make in (ss.StreamContract, ss.PoolContract, ss.stream_contract):
        with pytest.raises(ss.errors.NotAnEffectError) as e:
            make(Unknown())
        assert said in str(e.value) and "Guarding your own SDK" in str(e.value)
        assert "Create the effect first" not in str(e.value) and "Make the decoder first" not in str(e.value)
    for not_made in (None, Sharpener):  # (no instance yet: make it first)
        with pytest.raises(ss.errors.NotAnEffectError, match="Create the effect first"):
            ss.StreamContract(not_made)


# -- 6. a decoder's plan speaks of the decoder ------------------------------------------------------------------------


def test_a_pool_plan_prints_the_decoders_streams_and_releases(sim: SimBackend) -> None:
    from streamsafe.plan import pool_plan
    from streamsafe.strategy import Strategy

    writer = ss.as_stream(sim.create_stream(non_blocking=True), backend=sim)
    for strategy in (Strategy.AUTO, Strategy.STREAM, Strategy.DEVICE):
        plan = pool_plan(strategy, writer)
        text = str(plan)
        assert f"streams: decoder={writer}  C={writer}" in text, text
        assert "non_blocking=" not in text and "L=" not in text and "P=" not in text and "run(non_blocking" not in text
        assert f"D1   inside run       the decoder's call makes the host wait for {writer}" in text
        assert "\n  on reconfigure_decoder()/end():\n" in text and "on close()/resize" not in text
        assert [(f.hazard, f.why) for f in plan.on_release] == [
            ("D6", "the decoder frees or reallocates its buffers with no stream order")], text


def test_a_decoders_contract_prints_its_own_releases_and_an_effects_plan_is_as_before(
    fake_pynvvideocodec: Any, sim_backend: SimBackend
) -> None:
    from streamsafe.testing import VideoSuperRes, sample_clip

    sim = sim_backend  # (the fixture's model, current: the emulated decoder runs on it)
    clip = sample_clip(4, (64, 48))
    C = sim.create_stream(non_blocking=True)
    c = ss.stream_contract(fake_pynvvideocodec.ThreadedDecoder(clip, 2), consumer_stream=C)
    text = str(c.plan)
    assert "\n  on end()/reconfigure_decoder():\n  D6 " in text and f"C={ss.as_stream(C, backend=sim)}" in text, text
    effect = str(ss.StreamContract(VideoSuperRes(backend=sim), sim.create_stream(non_blocking=True)).plan)
    assert "non_blocking=" in effect and "L=" in effect and "\n  on close()/resize:\n  H6 " in effect, effect


# -- 5. streamsafe doctor says whether each profile's module imports --------------------------------------------------


def test_doctor_says_whether_each_registered_profiles_module_imports(
    registered: Any, fake_nvvfx: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from streamsafe.tools.cli import main

    registered(dataclasses.replace(SHARPENER, name="sharpener.Sharpener (absent)", module="sharpener_sdk_not_installed"))
    registered(dataclasses.replace(SHARPENER, name="sharpener.Sharpener (here)", module="json"))
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    mine = [line for line in lines if line.startswith("  sharpener.Sharpener")]
    assert len(mine) == 2 and mine[0].split() == ["sharpener.Sharpener", "(here)", "json:", "yes", f"({json.__version__})"]
    assert mine[1].split()[:6] == ["sharpener.Sharpener", "(absent)", "sharpener_sdk_not_installed:", "no:", "not", "installed"]
    nvvfx = [line for line in lines if line.startswith("  nvvfx.VideoSuperRes ")]
    assert len(nvvfx) == 1 and nvvfx[0].endswith("nvvfx: yes (0.2.0+streamsafe), streamsafe's emulation"), nvvfx
    every = [p for p in P.profiles() if p.module]
    assert main(["doctor", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["profiles"]
    assert [(r["profile"], r["module"]) for r in rows] == [(p.name, p.module) for p in every]


# -- 3. a profile is checked against its SDK's signatures when a contract is made --------------------------------------


def _refused(profile: Any, make: Any = None) -> str:
    """The ProfileError ``profile`` gets where a contract (and a class guard) is made for a Sharpener; nothing ran."""
    sdk = (make or Sharpener)()
    with pytest.raises(ss.errors.ProfileError) as e:
        ss.StreamContract(sdk, input_stream=0)
    assert sdk.output is None  # (refused before any call)
    with pytest.raises(ss.errors.ProfileError) as again:
        ss.guard(type(sdk))
    assert str(again.value) == str(e.value)
    return str(e.value)


@pytest.mark.parametrize(("change", "said"), [
    ({"calls": ("proces",)}, "calls=('proces',) names 'proces', which is not a method of test_profile_checks.Sharpener "
                             "(its methods: process, reset). Did you mean 'process'?"),
    ({"releases": ("rest",)}, "releases=('rest',) names 'rest', which is not a method of"),
    ({"inputs": ("imgae",)}, "inputs=('imgae',) names 'imgae', which no guarded call of test_profile_checks.Sharpener "
                             "takes: process(*, image, stream=0). Did you mean 'image'?"),
    ({"stream_keyword": "stream_ptr"}, "stream_keyword='stream_ptr' is not a parameter of "
                                       "test_profile_checks.Sharpener.process(*, image, stream=0). Set stream_keyword="),
    ({"blocking_keyword": "non_blocking"}, "blocking_keyword='non_blocking' is not a parameter of "
                                           "test_profile_checks.Sharpener.process(*, image, stream=0)"),
    ({"output": "image"}, "output='image' is not an attribute of the SDK's result, a test_profile_checks.Sharpened (its "
                          "attributes: frame). Set output= to the attribute"),
], ids=["calls", "releases", "inputs", "stream_keyword", "blocking_keyword", "output"])
def test_a_field_its_sdk_contradicts_is_refused_when_the_contract_is_made(
    sim: SimBackend, registered: Any, change: dict[str, Any], said: str
) -> None:
    registered(dataclasses.replace(SHARPENER, **change))
    message = _refused(SHARPENER)
    assert message.startswith("profile 'sharpener.Sharpener': ") and said.replace("test_profile_checks.", "") in message.replace(
        Sharpener.__module__ + ".", ""), message


class Unannotated(Sharpener):
    def process(self, *, image, stream=0):  # type: ignore[no-untyped-def]  # (no return annotation: a result unknown)
        return super().process(image=image, stream=stream)


def test_an_output_a_result_lacks_is_refused_at_the_first_call_where_nothing_says_it_before(
    sim: SimBackend, registered: Any
) -> None:
    registered(dataclasses.replace(SHARPENER, classes=(Unannotated,), output="image"))
    S = sim.create_stream(non_blocking=True)
    c = ss.StreamContract(Unannotated(), S, input_stream=S)
    with pytest.raises(ss.errors.ProfileError, match=r"output='image' is not an attribute of the SDK's result, a "
                                                      r"\S+Sharpened \(its attributes: frame\)"):
        c.process(image=_frame(sim, S))
    assert c.stats["runs"] == 1  # (the call was made: it counts)


def test_calls_whose_signature_cannot_be_read_are_not_checked(sim: SimBackend, registered: Any) -> None:
    import functools

    class Compiled(Sharpener):  # (as a C method: no signature Python can read)
        process = functools.partialmethod(Sharpener.process)  # type: ignore[assignment]

    class Keywords(Sharpener):  # (takes any keyword)
        def process(self, **kwargs: Any) -> Any:  # type: ignore[override]
            return super().process(image=kwargs["image"], stream=kwargs.get("stream", 0))

    for cls in (Compiled, Keywords):
        registered(dataclasses.replace(SHARPENER, classes=(cls,), inputs=("imgae",), blocking_keyword="non_blocking",
                                       output="frame"))
        ss.StreamContract(cls(), input_stream=0)
    registered(dataclasses.replace(SHARPENER, classes=(Compiled,), calls=("proces",)))
    with pytest.raises(ss.errors.ProfileError, match="'proces', which is not a method"):  # (its methods are known)
        ss.StreamContract(Compiled(), input_stream=0)


def test_an_nvvfx_like_class_without_nvvfx_keywords_is_told_to_register_a_profile(sim: SimBackend) -> None:
    class DuckTyped:  # (no profile names it: the fallback, nvvfx's run(), duck-typed)
        def run(self, x: Any) -> Any: ...

    with pytest.raises(ss.errors.ProfileError, match=r"^profile 'an nvvfx-like effect': stream_keyword='stream_ptr' is not a "
                                                     r"parameter of \S+DuckTyped.run\(x\)\. .*\(a profile for DuckTyped of its own"):
        ss.StreamContract(DuckTyped())


def test_every_shipped_profile_passes_against_streamsafes_emulations(fake_nvvfx: Any, fake_pynvvideocodec: Any) -> None:
    from nvvfx.effects.base import Effect

    from streamsafe.testing import fake_pyav

    class ArtifactReduction(Effect):  # (a program's own filter: nvvfx's base class, which names run_at_timestep too)
        _SELECTOR = "ArtifactReduction"

    class DuckTyped:  # (the fallback: nvvfx's API, duck-typed)
        def run(self, frame: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> Any: ...

    classes = [fake_nvvfx.VideoSuperRes, fake_nvvfx.VideoFrameGeneration, fake_nvvfx.TrueHDR, Effect, ArtifactReduction,
               DuckTyped, fake_pynvvideocodec.SimpleDecoder, fake_pynvvideocodec.ThreadedDecoder,
               fake_pyav.EmulatedInputContainer]
    for cls in classes:
        P.check_class(P.profile_of(cls), cls)
    with ss.guard(ss.testing):  # (and every class a guard of the emulations takes)
        pass


def test_a_call_an_older_sdk_lacks_is_left_out_not_refused() -> None:
    """A name far from every method (PyNvVideoCodec's seek_to_index on a version before it) is no typo: the guard
    covers the calls the class has; a name close to a method is refused with the method's name."""
    from streamsafe.profile import EffectProfile, check_class

    class Older:
        def process(self, *, image: object, stream: object = None) -> None: ...

    fields = dict(classes=(Older,), stream_keyword="stream", blocking_keyword=None, inputs=("image",))
    check_class(EffectProfile(name="older", calls=("process", "seek_to_index"), **fields), Older)
    with pytest.raises(ss.errors.ProfileError, match="Did you mean 'process'"):
        check_class(EffectProfile(name="typo", calls=("process", "proces"), **fields), Older)
