"""SDK profiles: what an SDK's calls read, write and release, and how their outputs leave.

The ordering core speaks of calls, buffers and streams. A :class:`Profile` says, for the classes
of one SDK, which of their methods are *guarded calls* (each reads its inputs on the stream it is
given and writes the SDK's output buffer, which the next such call reuses), which methods release
the buffers, which attributes replace the output buffer when they change, whether a conversion
stage on another stream follows the call, and how a call's output leaves (``wrap``: for nvvfx, a
raw DLPack capsule in ``.image`` becomes a :class:`~streamsafe.SafeImage` producer). A *pool* profile
(``pool=True``: PyNvVideoCodec's decoders) says instead how to find the frames a call hands out and each
one's buffer; the frames leave as :class:`~streamsafe.SafeFrame` producers that take the consumer's stream.

Profiles are registered (:func:`register`) by the module that describes an SDK
(:mod:`streamsafe.profiles.nvvfx` for nvvfx's effects, imported with streamsafe); the guards look an
effect's profile up with :func:`profile_of`. Nothing here blocks or issues GPU work.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import NotAnEffectError

__all__ = ["Profile", "register", "profile_of", "profiles"]


def _never(effect: Any, attr: str) -> bool:
    return False


def _always(effect: Any) -> bool:
    return True


@dataclass(frozen=True)
class Profile:
    """One SDK's calls, as the ordering core needs to know them. See the module docstring."""

    name: str
    """The SDK and class the profile describes (for messages), e.g. ``"nvvfx.VideoSuperRes"``."""
    classes: tuple[str, ...]
    """The class names it applies to, matched along an effect's MRO (a subclass of ``VideoSuperRes`` too)."""
    calls: tuple[str, ...]
    """Guarded calls: each reads its inputs and writes a new generation of the output buffer."""
    releases: tuple[str, ...] = ("close",)
    """Calls after which the SDK's buffers are gone (their readers must be done first: H6)."""
    input_keywords: tuple[str, ...] = ()
    """The keyword names under which a call takes input arrays."""
    stream_keyword: str = "stream_ptr"
    """The keyword that names the stream the SDK issues the call's work on."""
    blocking_keyword: str = "non_blocking"
    """The keyword that says whether the call may return before its work is done (``False``: the SDK's
    own host wait for the call's stream)."""
    settings: tuple[str, ...] = ()
    """Attributes whose change may release or replace the output buffer (see :attr:`releases_output`)."""
    releases_output: Callable[[Any, str], bool] = field(default=_never, compare=False)
    """``releases_output(effect, attr)``: whether changing ``attr`` (one of :attr:`settings`) may release
    or replace ``effect``'s output buffer."""
    converts: Callable[[Any], bool] = field(default=_always, compare=False)
    """``converts(effect)``: whether a conversion stage on the conversion stream (nvvfx: RGB8 on the legacy
    stream) writes the output after the call's main work."""
    wrap: Callable[..., Any] | None = field(default=None, compare=False)
    """``wrap(raw, ledger, generation, device, default_consumer, effect)``: the guarded output handed to the
    program for the SDK's ``raw`` result (``None``: the raw result)."""

    pool: bool = False
    """Whether each call writes buffers of a pool and hands them out as frames (a decoder; see
    :mod:`streamsafe.pool`), rather than one output buffer that every call rewrites (nvvfx's effects).
    Then :attr:`wrap` is ``wrap(raw, frames, device, default_consumer, owner, pool)`` with ``frames`` each
    raw frame's ``(ledger, generation)`` and ``pool`` the :class:`~streamsafe.pool.BufferPool`."""
    prefetches: bool = False
    """For a pool: whether a thread of the SDK's own writes, after each call, the buffers handed out before it
    (a threaded decoder decoding ahead): they are stale once the next call is made."""
    frames_of: Callable[[Any], list[Any]] = field(default=lambda raw: [], compare=False)
    """For a pool: the raw frames a call's result holds (a frame, a list of them, or none)."""
    buffer_key: Callable[[Any], Any] = field(default=lambda frame: None, compare=False)
    """For a pool: what identifies a raw frame's buffer (its data pointer, or the model's buffer)."""
    stream_of: Callable[[Any], Any] = field(default=lambda owner: None, compare=False)
    """For a pool: the stream the object writes its buffers on, when it says (else ``None``: a guard's
    declared stream, else the SDK's default)."""
    device_of: Callable[[Any], int] = field(default=lambda owner: int(getattr(owner, "device", 0) or 0), compare=False)
    """The CUDA device of an object (an effect's ``device``; a decoder's ``gpu_id``)."""
    constructor_keywords: tuple[str, ...] = ()
    """Constructor arguments worth remembering (a decoder's ``cuda_stream`` and ``gpu_id``, which it keeps in
    C++): recorded for objects made while their class is guarded (:func:`streamsafe.construction.made_with`)."""
    errors_after_writes: tuple[str, ...] = ()
    """For a pool: the names of the SDK's exception classes that may come after some buffers were written (its
    own errors from inside a call), so every frame handed out so far goes stale; others (an index out of range)
    come before any write."""

    input_keywords_set: frozenset[str] = field(init=False, compare=False, repr=False)
    """:attr:`input_keywords` as a set (a call's keywords are compared with it on every frame)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_keywords_set", frozenset(self.input_keywords))

    def applies_to(self, cls: type) -> bool:
        """Whether the profile describes ``cls`` (one of :attr:`classes` is in its MRO)."""
        return any(c.__name__ in self.classes for c in cls.__mro__)


_registered: list[Profile] = []
_fallback: list[Profile] = []
_by_class: dict[type, Profile] = {}
_lock = threading.Lock()


def register(profile: Profile, *, fallback: bool = False) -> Profile:
    """Make ``profile`` known (a later one for the same classes comes first); with ``fallback``, it is the
    profile of any effect no other profile describes (an SDK duck-typed on nvvfx's API). Returns it."""
    with _lock:
        if fallback:
            _fallback[:] = [profile]
        else:
            _registered.insert(0, profile)
        _by_class.clear()
    return profile


def profiles() -> tuple[Profile, ...]:
    """Every registered profile, the newest first (the fallback last)."""
    return (*_registered, *_fallback)


def profile_of(effect: Any) -> Profile:
    """The profile of ``effect`` (an instance or a class): the newest registered one that applies to its
    class, else the fallback. Raises :class:`~streamsafe.errors.NotAnEffectError` when there is none.
    Does not block."""
    cls = effect if isinstance(effect, type) else type(effect)
    found = _by_class.get(cls)
    if found is not None:
        return found
    for profile in _registered:
        if profile.applies_to(cls):
            break
    else:
        if not _fallback:
            raise NotAnEffectError(
                f"no SDK profile describes {cls.__qualname__}: import streamsafe (it registers nvvfx's), "
                "or register one with streamsafe.profile.register(Profile(...))"
            )
        profile = _fallback[0]
    _by_class[cls] = profile
    return profile
