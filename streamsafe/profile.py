"""SDK profiles: the public way to tell streamsafe what an SDK's calls read, write and release.

The ordering core speaks of calls, buffers and streams. A profile says, for the classes of one SDK:

* which of their methods are **guarded calls** (any names): each reads its inputs on the stream it is given
  and writes the SDK's buffers, which later calls reuse;
* which are **releasing calls** (any names): after them the SDK's buffers are gone or replaced (their
  readers must be done first: H6, D6), and which of those **close** the object for good;
* which **parameters take input arrays** (by keyword; positional arguments that are not numbers are inputs
  too), else every argument whose value is an array;
* the **stream keyword** that names the stream a call issues its work on and the **blocking keyword** that
  says whether it may return before that work is done (either may be absent: then the SDK runs on the
  current stream, and :attr:`EffectProfile.host_waits` says whether it waits for it);
* how a call's **output** leaves (:attr:`EffectProfile.output`: the attribute of the result that holds a
  DLPack capsule of the SDK's buffer), the object's **device**, and which **contract** guards it: an
  :class:`EffectProfile` (one output buffer every call rewrites: a :class:`~streamsafe.StreamContract`) or a
  :class:`PoolProfile` (calls that hand out frames in buffers of a pool: a
  :class:`~streamsafe.contract.PoolContract`).

:func:`register` checks a profile and makes it known; :func:`profile_of` finds an object's (the newest
registered profile that names its class or a base of it, by identity or exact qualified name). Every field is
checked when a profile is made: a bad one raises :class:`~streamsafe.errors.ProfileError` naming the field and
the fix; and :func:`check_class` checks a profile against a class's own methods and signatures when a contract or
a class guard is made for it (a call the class lacks, a keyword its calls do not take). Nothing here blocks or
issues GPU work.
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import inspect
import keyword
import numbers
import threading
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from .calls import raw_method
from .errors import NotAnEffectError, ProfileError

__all__ = ["Profile", "EffectProfile", "PoolProfile", "register", "unregister", "profile_of", "profiles", "qualified_name",
           "call_signature", "check_class", "set_output_maker", "output_maker", "on_register"]


def _never(obj: Any, attr: str) -> bool:
    return False


def _no_conversion(obj: Any) -> bool:
    return False


def _device_attribute(obj: Any) -> int:
    return int(getattr(obj, "device", 0) or 0)


def _no_stream(obj: Any) -> Any:
    return None


def qualified_name(cls: type) -> str:
    """``module.QualName`` of ``cls``: what a profile's string in :attr:`Profile.classes` must equal."""
    return f"{cls.__module__}.{cls.__qualname__}"


class _Fields(abc.ABCMeta):
    """The profiles' metaclass: a keyword that is no field of the profile's class, or a field with no default left
    out, is a :class:`~streamsafe.errors.ProfileError` naming it and the fix, before the dataclass's ``__init__``
    would raise a bare ``TypeError``. (``ABCMeta``'s kind: a subclass may mix in ``abc.ABC``.)"""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        _check_arguments(cls, args, kwargs)
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class Profile(metaclass=_Fields):
    """What every profile says; see the module docstring. Make an :class:`EffectProfile` or a
    :class:`PoolProfile`."""

    name: str
    """The SDK and class the profile describes (for messages), e.g. ``"nvvfx.VideoSuperRes"``."""
    classes: tuple[type | str, ...]
    """The classes it applies to, and their subclasses: each a class (matched by identity) or its exact
    qualified name, ``"module.QualName"`` (see :func:`qualified_name`)."""
    calls: tuple[str, ...]
    """The guarded calls (method names): each writes the SDK's buffers."""
    releases: tuple[str, ...] = ()
    """Calls after which the SDK's buffers are gone or replaced (their readers must be done first: H6, D6)."""
    closes: tuple[str, ...] = ()
    """The releasing calls after which the object is unusable (``close``); the others leave it usable (a reset)."""
    stream_keyword: str | None = None
    """The keyword that names the stream the SDK issues a call's work on; ``None``: the SDK takes no stream
    (an effect's then runs on the current stream; a pool's on :attr:`PoolProfile.stream_of`)."""
    device_of: Callable[[Any], int] = field(default=_device_attribute, compare=False)
    """``device_of(obj)``: the CUDA device of an object (default: its ``device`` attribute, else 0)."""
    errors_after_writes: tuple[str, ...] = ()
    """The names of the SDK's exception classes that may come after a call wrote (its own errors from inside a
    call): the call counts as made, and every output before it is stale. Any other exception is a refusal."""
    constructor_keywords: tuple[str, ...] = ()
    """Constructor arguments worth remembering (a decoder's ``cuda_stream`` and ``gpu_id``, which it keeps in
    C++): recorded for objects made while their class is guarded (:func:`streamsafe.construction.made_with`)."""
    module: str | None = None
    """The SDK's importable module (``"nvvfx"``): what ``streamsafe run``, ``streamsafe doctor`` and
    ``ss.guard("name")`` look for."""
    emulation: str | None = None
    """``"module:name"`` of an emulation of :attr:`module` (``streamsafe run --fake-nvvfx``): an object with
    ``install(force=False)``, ``uninstall()`` and ``is_fake(module)``, as :mod:`streamsafe.testing`'s are."""
    probe: Callable[[bool], dict[str, Any]] | None = field(default=None, compare=False)
    """``probe(gpu)``: what ``streamsafe doctor`` says of the SDK on this machine beyond its import (whether its
    hardware path opens; ``gpu``: whether a CUDA device is present), as a dict with a ``line`` for people and any
    facts for the JSON report; ``None``: the import alone is said. Called once per doctor run, before any framework
    makes a CUDA context; must not raise."""

    def __post_init__(self) -> None:
        _check_profile(self)

    @property
    def pool(self) -> bool:
        """Whether the object's calls hand out frames in buffers of a pool (a :class:`PoolProfile`)."""
        return False

    def applies_to(self, cls: type) -> bool:
        """Whether the profile describes ``cls`` (one of :attr:`classes` is ``cls`` or a base of it)."""
        return any(self.names(base) for base in cls.__mro__)

    def names(self, cls: type) -> bool:
        """Whether :attr:`classes` names ``cls`` itself (by identity or exact qualified name)."""
        for c in self.classes:
            if c is cls or (type(c) is str and c == qualified_name(cls)):
                return True
        return False

    def calls_of(self, cls: type) -> tuple[str, ...]:
        """The guarded and releasing calls ``cls`` has."""
        return tuple(name for name in (*self.calls, *self.releases) if callable(getattr(cls, name, None)))

    def device_index(self, obj: Any) -> int:
        """``device_of(obj)``, checked: a device index (an int of at least 0), else
        :class:`~streamsafe.errors.ProfileError` naming ``device_of``."""
        device = self.device_of(obj)
        if isinstance(device, bool) or not hasattr(device, "__index__") or device.__index__() < 0:
            raise ProfileError(self.name, "device_of", self.device_of,
                               f"gave {device!r} for a {qualified_name(type(obj))}, not a CUDA device index (an int of at least 0)",
                               "Make device_of return the index of the GPU the object runs on, e.g. device_of=lambda o: o.device")
        return int(device.__index__())


@dataclass(frozen=True)
class EffectProfile(Profile):
    """An SDK object with one output buffer that every guarded call rewrites (nvvfx's effects)."""

    stream_keyword: str | None = "stream_ptr"
    blocking_keyword: str | None = "non_blocking"
    """The keyword that says whether a call may return before its work is done (``False``: the SDK makes the
    host wait for the call's stream); ``None``: the SDK takes none (:attr:`host_waits` says what it does)."""
    host_waits: bool = True
    """Without a blocking keyword: whether each call returns only once its work on the stream is done."""
    inputs: tuple[str, ...] | None = None
    """The names of the parameters that take input arrays, by keyword (positional arguments that are not numbers
    are inputs too), each a parameter of a guarded call (:func:`check_class`); ``None``: every argument given by
    keyword whose value is an array (has ``__dlpack__``)."""
    settings: tuple[str, ...] = ()
    """Attributes whose change may release or replace the output buffer (see :attr:`releases_output`)."""
    releases_output: Callable[[Any, str], bool] = field(default=_never, compare=False)
    """``releases_output(effect, attr)``: whether changing ``attr`` (one of :attr:`settings`) may release or
    replace the effect's output buffer."""
    converts: Callable[[Any], bool] = field(default=_no_conversion, compare=False)
    """``converts(effect)``: whether a conversion stage on the conversion stream (nvvfx: RGB8 on the legacy
    stream) writes the output after the call's main work."""
    output: str | None = "image"
    """The attribute of a call's result that holds the DLPack capsule of the SDK's output buffer (anything else there is
    a :class:`~streamsafe.errors.ProfileError` at the call),
    handed out as a :class:`~streamsafe.SafeImage` (the guarded output's ``image``, and its attribute of this name);
    ``None``: the result itself is that capsule."""
    wrap: Callable[..., Any] | None = field(default=None, compare=False)
    """Advanced: ``wrap(result, output)``, the guarded result for the SDK's ``result`` given its guarded
    ``output`` (a :class:`~streamsafe.SafeOutput`); ``None``: the :class:`~streamsafe.SafeOutput` itself."""

    input_names: frozenset[str] | None = field(init=False, compare=False, repr=False)
    """:attr:`inputs` as a set (a call's keywords are compared with it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "input_names", None if self.inputs is None else frozenset(self.inputs))

    def input_keywords(self, kwargs: dict[str, Any]) -> list[str]:
        """The keywords of a call that carry its input arrays."""
        names = self.input_names
        skip = (self.stream_keyword, self.blocking_keyword)
        if names is not None:  # (an optional input left out as None is no input)
            return [k for k, v in kwargs.items() if k in names and k not in skip and v is not None]
        return [k for k, v in kwargs.items() if k not in skip and hasattr(v, "__dlpack__") and not isinstance(v, numbers.Number)]


@dataclass(frozen=True)
class PoolProfile(Profile):
    """An SDK object whose calls write buffers of a pool and hand them out as frames (a video decoder)."""

    frames_of: Callable[[Any], list[Any]] = field(default=lambda raw: [], compare=False)
    """``frames_of(result)``: the frames a call's result holds (a frame, a list of them, or none)."""
    buffer_key: Callable[[Any], Any] = field(default=lambda frame: None, compare=False)
    """``buffer_key(frame)``: what identifies a frame's buffer (its data pointer, or the model's buffer)."""
    stream_of: Callable[[Any], Any] = field(default=_no_stream, compare=False)
    """``stream_of(obj)``: the stream the object writes its buffers on, when it says (else ``None``: a guard's
    declared stream, else the SDK's default, the legacy stream)."""
    prefetches: bool = False
    """Whether a thread of the SDK's own writes, after each call, the buffers handed out before it (a threaded
    decoder decoding ahead): they are stale once the next call is made."""
    wrap: Callable[..., Any] | None = field(default=None, compare=False)
    """Advanced: ``wrap(result, frames)``, the guarded result given the guarded ``frames`` (each a
    :class:`~streamsafe.SafeFrame`, in the order :attr:`frames_of` gave); ``None``: the result with each frame
    replaced by its guarded one (a list stays a list)."""
    lazy: tuple[str, ...] = ()
    """The guarded calls whose result is an iterator that hands out its frames one step at a time (PyAV's
    ``container.decode()``, a generator): the guarded call returns a generator too, and each step of the SDK's
    iterator is a guarded call of its own (the object's turn, the fences before it, the records after it), whose
    frames are guarded as they come. Creating the iterator issues nothing."""
    frames_hold_buffers: bool = False
    """Whether a frame holds its buffer for as long as it lives: the SDK takes a buffer back into its pool only when
    the last reference to the frame (or to a capsule of it) goes, and never rewrites a buffer a frame holds (FFmpeg's
    reference-counted surfaces, PyAV's frames). Then no call is fenced (no D5): the guarded frame keeps the SDK's frame,
    and when it is dropped or closed, streamsafe keeps that until events recorded on every stream that read it have
    completed (an event-ordered release, as ``record_stream`` gives torch's allocator). ``False``: the SDK rewrites its
    buffers on later calls (PyNvVideoCodec's decoders), and each call waits for their readers (D5)."""
    planes: str | None = None
    """The attribute of an SDK frame that holds its planes, each a DLPack producer of a part of the frame's buffer
    (PyAV's ``frame.planes``: NV12's Y and interleaved UV): the guarded frame's :attr:`~streamsafe.SafeFrame.planes`
    are guarded producers of them, and its copies join the planes row after row. ``None``: a frame is one DLPack
    producer itself."""
    export_stream: bool = True
    """Whether a frame's (or plane's) ``__dlpack__`` takes the consumer's stream (DLPack's rule; PyNvVideoCodec's
    orders the consumer after its writes). ``False``: it refuses one (PyAV's raises), so streamsafe asks for the
    capsule with none; the frame must be complete when the call returns (the SDK's own host wait: D1)."""

    @property
    def pool(self) -> bool:
        return True

    def buffer_keys(self, raw: Any) -> list[Any]:
        """The buffer of each frame a call's result holds."""
        key = self.buffer_key
        return [key(f) for f in self.frames_of(raw)]


# -- checks -----------------------------------------------------------------------------------------------------

_NAMES = ("calls", "releases", "closes", "errors_after_writes", "constructor_keywords", "settings", "inputs", "lazy")
_CALLABLES = ("device_of", "releases_output", "converts", "frames_of", "buffer_key", "stream_of")


class _NotGiven:
    def __repr__(self) -> str:
        return "<not given>"


_REQUIRED = {
    "name": "Name the SDK and class, e.g. name='mysdk.Sharpener'",
    "classes": "Name the classes it applies to: classes=(MyClass,) with the class itself, or classes=('mymodule.MyClass',)",
    "calls": "Name the guarded calls (the methods that write the SDK's buffers), e.g. calls=('process',)",
}


def _check_arguments(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise :class:`~streamsafe.errors.ProfileError` for arguments ``cls(*args, **kwargs)`` cannot take: a keyword
    that is no parameter of its constructor (or a field the profile sets itself), one given twice or left out, too
    many values by position. A constructor of a subclass's own that takes ``*args`` or ``**kwargs`` checks its own."""
    params = constructor_parameters(cls)
    if params is None or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return  # (a constructor of its own that takes *args or **kwargs checks its own)
    names = [p.name for p in params]
    given = kwargs.get("name", args[0] if args else None)
    profile = given if isinstance(given, str) and given else f"<unnamed {cls.__name__}>"
    for key, value in kwargs.items():
        if key in names:
            continue
        if any(f.name == key for f in fields(cls)):  # type: ignore[arg-type]
            rule = f"is set by {cls.__name__} itself, from the other fields"
        else:
            rule = f"is not a field of {cls.__name__}"
        close = difflib.get_close_matches(key, names, 1)
        raise ProfileError(profile, key, value, rule, (f"Did you mean {close[0]}=? " if close else "")
                           + f"Drop it, or give one of {cls.__name__}'s fields: {', '.join(names)}")
    if len(args) > len(names):
        raise ProfileError(profile, "fields", args, f"are {len(args)} values given by position; {cls.__name__} has "
                           f"{len(names)} fields", "Give the fields by keyword: name=..., classes=..., calls=...")
    twice = [key for key in names[:len(args)] if key in kwargs]
    if twice:
        raise ProfileError(profile, twice[0], kwargs[twice[0]], "is given twice, by position and by keyword",
                           "Give it once, by keyword")
    for p in params[len(args):]:
        if p.name not in kwargs and p.default is p.empty:
            raise ProfileError(profile, p.name, _NotGiven(), f"is required: {cls.__name__} has no default for it",
                               _REQUIRED.get(p.name, f"Give {p.name}=..."))


def constructor_parameters(cls: type) -> list[inspect.Parameter] | None:
    """The parameters of ``cls``'s constructor after ``self`` (for a dataclass, its fields and init-only variables),
    ``None`` when they cannot be read. What a profile's and a contract's construction check an argument against.
    Cached per class."""
    if cls not in _parameters:
        try:
            params: list[inspect.Parameter] | None = list(inspect.signature(cls.__init__).parameters.values())[1:]  # type: ignore[misc]
        except (TypeError, ValueError):
            params = None
        _parameters[cls] = params
    return _parameters[cls]


_parameters: dict[type, list[inspect.Parameter] | None] = {}


def _check_profile(p: Profile) -> None:
    """Raise :class:`~streamsafe.errors.ProfileError` for the first field of ``p`` streamsafe cannot use."""
    name = p.name if isinstance(p.name, str) and p.name else repr(p.name)
    if not isinstance(p.name, str) or not p.name:
        raise ProfileError(name, "name", p.name, "is not a non-empty string", "Name the SDK and class, e.g. name='mysdk.Sharpener'")
    present = {f.name for f in fields(p)}
    for attr in _NAMES:
        if attr not in present:
            continue
        value = getattr(p, attr)
        if value is None and attr == "inputs":
            continue
        _check_names(name, attr, value, allow_empty=attr != "calls")
    _check_classes(name, p.classes)
    unknown = [c for c in p.closes if c not in p.releases]
    if unknown:
        raise ProfileError(name, "closes", p.closes, f"names {unknown[0]!r}, which is not in releases={p.releases!r}",
                           "List every closing call in releases too")
    both = set(p.calls) & set(p.releases)
    if both:
        raise ProfileError(name, "releases", p.releases, f"repeats the guarded call {sorted(both)[0]!r}",
                           "A call either writes the buffers (calls) or releases them (releases), not both")
    for attr in ("stream_keyword", "blocking_keyword"):
        if attr in present:
            value = getattr(p, attr)
            if value is not None and not (isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value)):
                raise ProfileError(name, attr, value, "is not a keyword name", f"Give the SDK's keyword as a string, or {attr}=None when it takes none")
    stream_kw, blocking_kw = getattr(p, "stream_keyword", None), getattr(p, "blocking_keyword", None)
    if stream_kw is not None and stream_kw == blocking_kw:
        raise ProfileError(name, "blocking_keyword", blocking_kw, f"is the stream keyword too ({stream_kw!r}): one parameter "
                           "cannot take both the stream and whether the call may return early",
                           "Name the SDK's blocking keyword, or blocking_keyword=None when it takes none")
    for attr, kw in (("stream_keyword", stream_kw), ("blocking_keyword", blocking_kw)):
        if kw is not None and kw in (getattr(p, "inputs", None) or ()):
            raise ProfileError(name, "inputs", p.inputs, f"names {kw!r}, the {attr}: it takes no input array",  # type: ignore[attr-defined]
                               "List only the parameters that take input arrays")
    lazy = getattr(p, "lazy", ())
    strays = [c for c in lazy if c not in p.calls]
    if strays:
        raise ProfileError(name, "lazy", lazy, f"names {strays[0]!r}, which is not in calls={p.calls!r}",
                           "List every lazy call in calls too (a lazy call is a guarded call whose result is an iterator)")
    if "planes" in present and p.planes is not None and not (isinstance(p.planes, str) and p.planes.isidentifier()):  # type: ignore[attr-defined]
        raise ProfileError(name, "planes", p.planes, "is not an attribute name",  # type: ignore[attr-defined]
                           "Name the attribute of a frame that holds its planes (planes='planes'), or planes=None when a "
                           "frame is one DLPack producer")
    for attr in ("host_waits", "prefetches", "frames_hold_buffers", "export_stream"):
        if attr in present and not isinstance(getattr(p, attr), bool):
            raise ProfileError(name, attr, getattr(p, attr), "is not True or False", f"Set {attr}=True or {attr}=False")
    if getattr(p, "frames_hold_buffers", False) and getattr(p, "prefetches", False):
        raise ProfileError(name, "prefetches", True, "contradicts frames_hold_buffers=True (an SDK that rewrites the "
                           "buffers it handed out cannot also leave them to its frames)", "Set one of them, not both")
    if "output" in present and p.output is not None and not (isinstance(p.output, str) and p.output.isidentifier()):  # type: ignore[attr-defined]
        raise ProfileError(name, "output", p.output, "is not an attribute name",  # type: ignore[attr-defined]
                           "Name the attribute of a call's result that holds the output's DLPack capsule, or output=None "
                           "when the result is the capsule itself")
    for attr in (*_CALLABLES, "wrap", "probe"):
        if attr in present:
            value = getattr(p, attr)
            if not callable(value) and not (attr in ("wrap", "probe") and value is None):
                raise ProfileError(name, attr, value, "is not callable", f"Give a function for {attr}, or leave it out for the default")
    for attr in ("module", "emulation"):
        value = getattr(p, attr)
        if value is not None and not (isinstance(value, str) and value):
            raise ProfileError(name, attr, value, "is not a non-empty string", f"Leave {attr} out, or give a string")
    if p.emulation is not None:
        module, colon, obj = p.emulation.partition(":")
        if not (colon and all(part.isidentifier() for part in module.split(".")) and obj.isidentifier()):
            raise ProfileError(name, "emulation", p.emulation, "is not 'module:name' (an importable module's dotted name, "
                               "a colon, and the name of the emulation object in it)",
                               "Name the emulation object, e.g. 'streamsafe.testing.fake_nvvfx:EMULATION'")


def _check_names(profile: str, attr: str, value: Any, *, allow_empty: bool) -> None:
    if isinstance(value, str):
        raise ProfileError(profile, attr, value, "is a string, not a tuple of names",
                           f"Write {attr}=({value!r},) (a tuple), so that each name counts whole")
    if not isinstance(value, tuple):
        raise ProfileError(profile, attr, value, f"is a {type(value).__name__}, not a tuple of names",
                           f"Write {attr}=(...) with the names as strings")
    if not value and not allow_empty:
        raise ProfileError(profile, attr, value, "is empty", f"Name at least one method in {attr}")
    for item in value:
        if not (isinstance(item, str) and item.isidentifier()):
            raise ProfileError(profile, attr, value, f"holds {item!r}, which is not a name",
                               f"Give each entry of {attr} as the name of a method, parameter or class, a string")
    if len(set(value)) != len(value):
        raise ProfileError(profile, attr, value, "repeats a name", f"Name each entry of {attr} once")


def _check_classes(profile: str, classes: Any) -> None:
    if isinstance(classes, (str, type)):
        named = classes.__name__ if isinstance(classes, type) else classes
        raise ProfileError(profile, "classes", classes, "is a single class, not a tuple of them",
                           f"Write a tuple: classes=({named},) with the class itself, or classes=('module.{named.rpartition('.')[2]}',) "
                           "with its exact qualified name")
    if not isinstance(classes, tuple):
        raise ProfileError(profile, "classes", classes, f"is a {type(classes).__name__}, not a tuple",
                           "Write classes=(MyClass,) or classes=('mymodule.MyClass',)")
    for c in classes:
        if c in (object, type, "builtins.object", "builtins.type"):
            raise ProfileError(profile, "classes", classes, f"holds {c if isinstance(c, str) else c.__name__!r}, the base of every "
                               "object (or class): the profile would describe everything",
                               "Name the SDK's own classes, or its nearest base class of its own")
        if isinstance(c, type):
            continue
        if not (isinstance(c, str) and "." in c and all(part.isidentifier() for part in c.replace("<locals>", "x").split("."))):
            raise ProfileError(profile, "classes", classes, f"holds {c!r}, which is neither a class nor an exact qualified name",
                               "Give each class itself, or its 'module.QualName' (streamsafe.profile.qualified_name(cls) "
                               "says it): names match exactly, never in part")


# -- the registry ---------------------------------------------------------------------------------------------

_registered: list[Profile] = []
_fallback: list[Profile] = []
_listeners: list[Callable[[Profile], None]] = []
_by_class: dict[type, Profile] = {}
_lock = threading.Lock()


def register(profile: Profile, *, fallback: bool = False) -> Profile:
    """Make ``profile`` known (a later one for the same classes comes first); with ``fallback``, it is the
    profile of any object with a ``run()`` no other profile describes (an SDK duck-typed on nvvfx's API), until it is
    unregistered (then the fallback before it is again).
    Returns it. Raises :class:`~streamsafe.errors.ProfileError` for anything but a profile, and for a profile that
    names no class (``classes=()``) registered without ``fallback``."""
    if not isinstance(profile, Profile) or type(profile) is Profile:
        what = type(profile).__name__
        raise ProfileError(
            getattr(profile, "name", "?") if not isinstance(profile, dict) else str(profile.get("name", "?")),
            "profile", profile, f"is a {what}, not an EffectProfile or a PoolProfile",
            "Make one: streamsafe.profile.EffectProfile(name=..., classes=(...), calls=(...), ...) "
            "(or PoolProfile for an SDK that hands out frames of a pool), then register() it",
        )
    if type(fallback) is not bool:
        raise ProfileError(profile.name, "fallback", fallback, "is not a bool", "Pass fallback=True or fallback=False")
    if fallback and not isinstance(profile, EffectProfile):
        raise ProfileError(profile.name, "fallback", fallback, "is only for an EffectProfile", "Register a PoolProfile without fallback=")
    if not fallback and not profile.classes:
        raise ProfileError(profile.name, "classes", profile.classes, "is empty: registered so, the profile would describe "
                           "no class and guard nothing",
                           "Name at least one class: classes=(MyClass,) or classes=('mymodule.MyClass',); or register it "
                           "with fallback=True, as the profile of any object with a run() no other profile describes")
    with _lock:
        if fallback:  # (the newest is the fallback; unregistered, the one before it is again: nvvfx-like, built in)
            _fallback[:] = [profile, *(p for p in _fallback if p is not profile)]
        else:
            _registered.insert(0, profile)
        _by_class.clear()
    for listener in list(_listeners):
        listener(profile)
    return profile


def on_register(listener: Callable[[Profile], None]) -> None:
    """Call ``listener(profile)`` after each :func:`register` (the guards put their dispatchers on the classes a
    new profile names as soon as it is registered: :func:`streamsafe.guarding.watch_profiles`)."""
    if listener not in _listeners:
        _listeners.append(listener)


def unregister(profile: Profile) -> None:
    """Forget ``profile`` (objects already guarded keep it). Does nothing when it is not registered."""
    with _lock:
        _registered[:] = [p for p in _registered if p is not profile]
        _fallback[:] = [p for p in _fallback if p is not profile]
        _by_class.clear()


def profiles() -> tuple[Profile, ...]:
    """Every registered profile, the newest first (the fallback last)."""
    return (*_registered, *_fallback[:1])


def profile_of(obj: Any) -> Any:
    """The profile of ``obj`` (an instance or a class): the newest registered profile that names its class, else
    the newest that names the nearest base class along its MRO, else the fallback for an object with a ``run()``.
    Raises :class:`~streamsafe.errors.NotAnEffectError` when there is none. Does not block."""
    cls = obj if isinstance(obj, type) else type(obj)
    found = _by_class.get(cls)
    if found is not None:
        return found
    for base in cls.__mro__:
        for profile in _registered:
            if profile.names(base):
                _by_class[cls] = profile
                return profile
    if not _fallback or not callable(getattr(cls, "run", None)):
        raise NotAnEffectError(
            f"no SDK profile describes {qualified_name(cls)}: streamsafe guards nvvfx's effects, PyNvVideoCodec's "
            "decoders and PyAV's input containers (and any class with nvvfx's run()); for another SDK, register a profile: "
            "streamsafe.profile.register(streamsafe.profile.EffectProfile(...)) (docs/guide.md, 'Guarding your own SDK')"
        )
    _by_class[cls] = _fallback[0]
    return _fallback[0]


_signatures: dict[tuple[type, str, bool], Any] = {}


def call_signature(cls: type, method: Any, name: str, *, wrapped: bool = True) -> inspect.Signature | None:
    """The signature of the SDK's own ``cls.name`` without its first parameter (``self``), or ``None`` when it
    cannot be read (a C method) or takes ``*args``. ``wrapped=False``: a decorator's wrapper's own (what a call
    binds to), not the function it wraps (what its parameters mean). Cached per class."""
    key = (cls, name, wrapped)
    if key not in _signatures:
        sig = None
        if inspect.isfunction(method):
            try:
                every = list(inspect.signature(method, follow_wrapped=wrapped).parameters.values())
            except (TypeError, ValueError):
                every = []
            if every and every[0].kind in (every[0].POSITIONAL_ONLY, every[0].POSITIONAL_OR_KEYWORD):
                sig = inspect.Signature(every[1:])
        _signatures[key] = sig
    return _signatures[key]


# -- a profile against the SDK's own classes -----------------------------------------------------------------------

_checked: dict[tuple[Profile, type], None] = {}


def check_class(profile: Profile, cls: type) -> None:
    """Raise :class:`~streamsafe.errors.ProfileError` where ``profile`` contradicts what ``cls`` (a class it describes,
    whose objects a contract or a class guard is about to guard) says of itself, so that a typo does not leave the
    guard off, nor fail at the first call with the SDK's own error after its work:

    * each name in :attr:`~Profile.calls` and :attr:`~Profile.releases` is a method of ``cls``, or, where the profile
      names a base class of several SDK classes (nvvfx's ``Effect``), of one of that base's subclasses; a name that is
      none is refused when it is close to one of ``cls``'s methods (a typo) or when none of the names is a method (a
      call an older version of the SDK lacks is left out);
    * :attr:`~Profile.stream_keyword` and :attr:`~EffectProfile.blocking_keyword` are parameters of each guarded call
      whose signature can be read (:func:`call_signature`), and each name in :attr:`~EffectProfile.inputs` a parameter
      of one of them;
    * :attr:`~EffectProfile.output` is an attribute of the result a guarded call says it returns, where it says so with
      a dataclass (else a call whose result lacks it raises the same error).

    A call whose signature cannot be read (a C method) or that takes ``**kwargs`` is not checked. The fallback (a
    class no profile names, duck-typed on nvvfx's ``run()``) is checked for its keywords only. Checked once per profile
    and class. Does not block."""
    key = (profile, cls)
    if key in _checked:
        return
    named = next((base for base in cls.__mro__ if profile.names(base)), None)
    if named is not None:
        _check_calls(profile, cls, named)
    _check_keywords(profile, cls, fallback=named is None)
    _check_output(profile, cls)
    _checked[key] = None


def _check_calls(profile: Profile, cls: type, named: type) -> None:
    family: list[type] | None = None
    for attr in ("calls", "releases"):
        for name in getattr(profile, attr):
            static = inspect.getattr_static(cls, name, None)
            if static is not None and not is_method(cls, name):
                what = "a property" if isinstance(static, property) else f"a {type(static).__name__} attribute"
                raise ProfileError(
                    profile.name, attr, getattr(profile, attr),
                    f"names {name!r}, which is {what} of {qualified_name(cls)}, not a method: a guard would replace it",
                    "Name only methods; an attribute whose change may release the output goes in settings=",
                )
            if callable(getattr(cls, name, None)):
                continue
            if family is None:
                family = _subclasses(named)
            if any(callable(getattr(sub, name, None)) for sub in family):
                continue  # (a method of another class the profile describes: nvvfx's run_at_timestep)
            methods = sorted(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None)))
            close = difflib.get_close_matches(name, methods, 1)
            present = [n for n in getattr(profile, attr) if callable(getattr(cls, n, None))]
            if not close and present:
                continue  # (a call this version of the SDK lacks, not a typo: the guard covers the calls it has)
            raise ProfileError(
                profile.name, attr, getattr(profile, attr),
                f"names {name!r}, which is not a method of {qualified_name(cls)} (its methods: {', '.join(methods) or 'none'})",
                (f"Did you mean {close[0]!r}? " if close else "") + f"Name each of {cls.__name__}'s methods as the SDK spells it",
            )


def is_method(cls: type, name: str) -> bool:
    """Whether ``cls.name`` is a method (a guarded call a dispatcher may stand in for): not a property, nor any other
    attribute."""
    attr = inspect.getattr_static(cls, name, None)
    return attr is not None and not isinstance(attr, property) and callable(getattr(cls, name, None))


def _subclasses(cls: type) -> list[type]:
    """``cls`` and every subclass of it defined now."""
    found, stack = [cls], [cls]
    while stack:
        subclasses: list[type] = type.__subclasses__(stack.pop())  # (as a function: a metaclass's own takes no self)
        for sub in subclasses:
            if sub not in found:
                found.append(sub)
                stack.append(sub)
    return found


def _check_keywords(profile: Profile, cls: type, *, fallback: bool) -> None:
    sigs = [(name, call_signature(cls, raw_method(cls, name), name)) for name in profile.calls if callable(getattr(cls, name, None))]
    readable = [(name, sig) for name, sig in sigs
                if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())]
    for attr in ("stream_keyword", "blocking_keyword"):
        value = getattr(profile, attr, None)
        if value is None:
            continue
        for name, sig in readable:
            if value not in _keywords(sig):
                what = "names the stream it runs on" if attr == "stream_keyword" else "says whether it waits for its work"
                raise ProfileError(
                    profile.name, attr, value, f"is not a parameter of {qualified_name(cls)}.{name}{_shown(sig)}",
                    f"Set {attr}= to the keyword of {name}() that {what}, or {attr}=None when it takes none"
                    + (f" (a profile for {cls.__name__} of its own: streamsafe.profile.register)" if fallback else ""),
                )
    inputs = getattr(profile, "inputs", None)
    if inputs is None or fallback or not sigs or len(readable) < len(sigs):
        return  # (a call that cannot be read may take any of them)
    taken = {k for _, sig in readable for k in _keywords(sig)}
    for name in inputs:
        if name not in taken:
            calls = ", ".join(f"{call}{_shown(sig)}" for call, sig in readable)
            close = difflib.get_close_matches(name, sorted(taken), 1)
            raise ProfileError(
                profile.name, "inputs", inputs, f"names {name!r}, which no guarded call of {qualified_name(cls)} takes: {calls}",
                (f"Did you mean {close[0]!r}? " if close else "") + "Name the parameters that take input arrays as the "
                "SDK's signature spells them, or inputs=None (every array given by keyword is an input)",
            )


def _check_output(profile: Profile, cls: type) -> None:
    attr = getattr(profile, "output", None)
    if attr is None:
        return
    for name in profile.calls:
        method = raw_method(cls, name)
        if not inspect.isfunction(method):
            continue
        try:
            result = typing.get_type_hints(method).get("return")
        except Exception:  # noqa: BLE001  (an annotation that does not resolve here says nothing)
            continue
        if isinstance(result, type) and dataclasses.is_dataclass(result) and not hasattr(result, "__getattr__"):
            known = [f.name for f in dataclasses.fields(result)]
            if attr not in known and not hasattr(result, attr):
                raise no_output(profile.name, attr, result, known)


def no_output(profile: str, attr: str | None, result: type, attributes: list[str], found: type | None = None) -> ProfileError:
    """The :class:`~streamsafe.errors.ProfileError` for an :attr:`EffectProfile.output` the SDK's result (of type
    ``result``, with ``attributes``) does not have, or (``found``: the type of what it names) that is no DLPack capsule."""
    if found is None:
        rule = f"is not an attribute of the SDK's result, a {qualified_name(result)}"
    elif attr is None:
        rule = f"says the SDK's result is the output's DLPack capsule, but it is a {qualified_name(result)}"
    else:
        rule = f"names the SDK's result's {attr!r}, a {qualified_name(found)}, not the output's DLPack capsule"
    return ProfileError(
        profile, "output", attr, f"{rule} (its attributes: {', '.join(attributes) or 'none'})",
        "Set output= to the attribute that holds the output's DLPack capsule, or output=None when the result is the "
        "capsule itself",
    )


def _keywords(sig: inspect.Signature) -> list[str]:
    return [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _shown(sig: inspect.Signature) -> str:
    """A call's parameters as the SDK's signature gives them, without annotations."""
    plain = [p.replace(annotation=p.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=plain, return_annotation=sig.empty))


# -- how outputs leave: the output layer's makers -----------------------------------------------------------------

_output_makers: dict[str, Callable[..., Any]] = {}


def set_output_maker(kind: str, make: Callable[..., Any]) -> None:
    """The output layer (:mod:`streamsafe.outputs`) says how a call's result leaves: ``kind`` ``"effect"``
    (``make(attr, wrap, buffer, device, profile)``: the guard's ``output(raw, generation, frame, effect)``, a guarded
    output; ``profile``: the profile's name, for its errors)
    or ``"pool"`` (``make(raw, frames, made, device, default_consumer, owner, pool)``: the result with its frames
    guarded)."""
    _output_makers[kind] = make


def output_maker(kind: str) -> Callable[..., Any]:
    """The maker :func:`set_output_maker` gave for ``kind`` (``import streamsafe`` imports the output layer)."""
    return _output_makers[kind]
