"""Errors raised by streamsafe.

Every error derives from :class:`StreamsafeError`. Subclasses carry the facts as
fields and build their message from them: what rule was broken, the value seen,
and how to fix it. Errors about the *type* of a value also derive from
:class:`TypeError`, errors about a *value* from :class:`ValueError`, so existing
``except`` clauses keep working.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "UnguardedResultError",
    "StreamsafeError",
    "ExportError",
    "EnvironmentSettingError",
    "EnvironmentSettingWarning",
    "HostWaitWarning",
    "ArgumentError",
    "MissingCallError",
    "ProfileError",
    "StreamTypeError",
    "StreamValueError",
    "DeviceMismatchError",
    "CudaDriverError",
    "BackendUnavailableError",
    "RaceError",
    "EffectStateError",
    "InputArrayError",
    "EffectConfigError",
    "StrategyError",
    "StaleOutputError",
    "UnguardedChangeError",
    "ConcurrentUseError",
    "InputDeviceError",
    "HostArrayError",
    "NotAnEffectError",
    "FrameworkUnavailableError",
    "DeviceMemoryError",
]


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class StreamsafeError(Exception):
    """Base class of every error streamsafe raises."""


class StreamTypeError(StreamsafeError, TypeError):
    """An object was given where a CUDA stream is expected, and it is not one."""

    def __init__(self, value: Any, accepted: str) -> None:
        self.value = value
        self.accepted = accepted
        super().__init__(
            f"cannot use {_show(value)} (type {type(value).__module__}.{type(value).__qualname__}) "
            f"as a CUDA stream. Accepted: {accepted}."
        )


class StreamValueError(StreamsafeError, ValueError):
    """A stream was given by a value that names no usable stream."""

    def __init__(self, value: Any, rule: str, fix: str) -> None:
        self.value = value
        self.rule = rule
        self.fix = fix
        super().__init__(f"invalid stream {_show(value)}: {rule}. {fix}")


class DeviceMismatchError(StreamsafeError, ValueError):
    """A stream, event or array belongs to another device than the one required."""

    def __init__(self, what: str, value: Any, actual: int, expected: int, fix: str) -> None:
        self.what = what
        self.value = value
        self.actual = actual
        self.expected = expected
        self.fix = fix
        super().__init__(
            f"{what} {_show(value)} is on CUDA device {actual}, but device {expected} is required. {fix}"
        )


class CudaDriverError(StreamsafeError, RuntimeError):
    """A CUDA driver call failed; names the call and the driver's error."""

    def __init__(self, call: str, code: int, name: str, description: str, hint: str = "") -> None:
        self.call = call
        self.code = code
        self.name = name
        self.description = description
        self.hint = hint
        message = f"{call} failed with {name} ({code}): {description}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class BackendUnavailableError(StreamsafeError, RuntimeError):
    """The requested backend cannot run on this machine."""

    def __init__(self, backend: str, reason: str, fix: str) -> None:
        self.backend = backend
        self.reason = reason
        self.fix = fix
        super().__init__(f"the {backend} backend is unavailable: {reason}. {fix}")


class RaceError(StreamsafeError, RuntimeError):
    """The happens-before model found accesses to one buffer that no fence orders.

    ``races`` holds the :class:`streamsafe.sim.races.Race` reports, each naming both accesses.
    """

    def __init__(self, races: list[Any]) -> None:
        self.races = list(races)
        lines = [f"{len(self.races)} unordered access pair(s) found:"]
        lines += [f"  - {race}" for race in self.races[:10]]
        if len(self.races) > 10:
            lines.append(f"  ... and {len(self.races) - 10} more")
        super().__init__("\n".join(lines))


class EffectStateError(StreamsafeError, RuntimeError):
    """An effect was used in a state that does not allow the call (closed, not loaded)."""

    def __init__(self, effect: str, call: str, state: str, fix: str) -> None:
        self.effect = effect
        self.call = call
        self.state = state
        self.fix = fix
        super().__init__(f"{effect}.{call}() cannot run: the effect is {state}. {fix}")


class InputArrayError(StreamsafeError, TypeError):
    """An input is not a CUDA array speaking DLPack on the effect's device."""

    def __init__(self, what: str, value: Any, rule: str, fix: str) -> None:
        self.what = what
        self.value = value
        self.rule = rule
        self.fix = fix
        super().__init__(f"{what} {_show(value)} is not usable: {rule}. {fix}")


class EffectConfigError(StreamsafeError, ValueError):
    """A parameter, shape or dtype is outside what the effect accepts."""

    def __init__(self, effect: str, name: str, value: Any, rule: str) -> None:
        self.effect = effect
        self.name = name
        self.value = value
        self.rule = rule
        super().__init__(f"{effect}: {name}={_show(value)} is invalid: {rule}")


class StrategyError(StreamsafeError, ValueError):
    """An unknown strategy, or one that cannot be sound for the streams given."""

    def __init__(self, value: Any, rule: str, fix: str) -> None:
        self.value = value
        self.rule = rule
        self.fix = fix
        super().__init__(f"strategy {_show(value)} cannot be used: {rule}. {fix}")


class StaleOutputError(StreamsafeError, BufferError):
    """An output was imported after its SDK buffer was reused or released (H7)."""

    def __init__(self, output: str, run: int, current: int, fix: str, *, closed: bool = False,
                 source: str = "the effect") -> None:
        self.output = output
        self.run = run
        self.current = current
        self.fix = fix
        self.closed = closed
        """Whether the effect was closed (rather than run again or resized)."""
        if source == "the effect":
            call, since = "run", ("been closed, which released its buffer" if closed else "run again or released its buffer")
        else:  # (a decoder's frame: its buffer, written again by a later call)
            call, since = "call", "written this buffer again or released it"
        self.source = source
        super().__init__(
            f"{output} came from {call} #{run}, but {source} has since {since} "
            f"(now at #{current}); its memory holds other data. {fix}"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # (picklable: it crosses multiprocessing)
        return _stale, (self.output, self.run, self.current, self.fix, self.closed, self.source)


class ExportError(StreamsafeError, BufferError):
    """An output's capsule cannot be handed out as asked: it was imported already (H9), or the consumer asks
    for a copy during export or for another device (DLPack's ``BufferError``)."""

    def __init__(self, rule: str, fix: str) -> None:
        self.rule = rule
        self.fix = fix
        super().__init__(f"{rule}. {fix}")

    def __reduce__(self) -> tuple[Any, ...]:  # (picklable: it crosses multiprocessing)
        return type(self), (self.rule, self.fix)


def _concurrent(effect: str, call: str, owner: str, caller: str, kind: str) -> ConcurrentUseError:
    return ConcurrentUseError(effect, call, owner, caller, kind=kind)


def _stale(output: str, run: int, current: int, fix: str, closed: bool, source: str) -> StaleOutputError:
    return StaleOutputError(output, run, current, fix, closed=closed, source=source)


class UnguardedChangeError(StreamsafeError, RuntimeError):
    """The effect's output configuration changed outside the contract while a copy may still read the buffer."""

    def __init__(self, effect: str, changes: str, consumers: str) -> None:
        self.effect = effect
        self.changes = changes
        self.consumers = consumers
        super().__init__(
            f"{effect} was reconfigured directly between runs ({changes}) while copies on {consumers} "
            "may still read the released buffer (H6). Change it through the contract "
            "(c.configure(...) or inside `with stream_contract(...)`), which waits for the copies first."
        )


class ConcurrentUseError(StreamsafeError, RuntimeError):
    """Two threads used one effect (through any of its guards) at the same time."""

    def __init__(self, effect: str, call: str, owner: str, caller: str, *, kind: str = "effect") -> None:
        self.effect = effect
        self.call = call
        self.owner = owner
        self.caller = caller
        self.kind = kind
        """``"effect"`` or ``"decoder"`` (the message's words)."""
        around = ("each decode and the copies of its frames" if kind == "decoder" else "run() and the copy of its output")
        super().__init__(
            f"{effect}: thread {caller!r} called {call}() while thread {owner!r} is inside a call on the same {kind}. "
            f"A{'n' if kind[0] in 'aeiou' else ''} {kind} and its contracts are used by one thread at a time: give each "
            f"thread its own {kind} and contract, or serialise the calls (a lock or a queue around {around})."
        )

    def __reduce__(self) -> tuple[Any, ...]:  # (picklable: it crosses multiprocessing)
        return _concurrent, (self.effect, self.call, self.owner, self.caller, self.kind)


class InputDeviceError(InputArrayError, DeviceMismatchError):
    """An input is a CUDA array of another device than the effect's.

    Both an :class:`InputArrayError` and a :class:`DeviceMismatchError`: either ``except`` catches it.
    ``actual`` is the array's device, ``expected`` the effect's; the message describes the
    array by type and shape (never its data) and gives the framework's copy.
    """

    def __init__(self, what: str, value: Any, described: str, actual: int, expected: int, fix: str) -> None:
        self.what = what
        self.value = value
        self.actual = actual
        self.expected = expected
        self.rule = f"it is on CUDA device {actual} but the effect runs on device {expected}"
        self.fix = fix
        Exception.__init__(self, f"{what} {described} is on CUDA device {actual} but the effect runs on device {expected}. {fix}")


class HostArrayError(InputArrayError):
    """An input lives in host memory (or on another non-CUDA DLPack device), not on a GPU.

    The message describes the array by type and shape (never its data) and gives the
    framework's way to put it on the effect's device.
    """

    def __init__(self, what: str, value: Any, described: str, rule: str, fix: str) -> None:
        self.what = what
        self.value = value
        self.rule = rule
        self.fix = fix
        Exception.__init__(self, f"{what} {described} is not on a GPU: {rule}. {fix}")


class NotAnEffectError(StreamsafeError, TypeError):
    """Something that is not an effect instance (``None``, a number, a class, a module) was given
    where an effect is needed."""


class UnguardedResultError(StreamsafeError, TypeError):
    """A function decorated with ``@stream_safe`` returned a generator, coroutine or async generator it
    did not make itself: its body would run after the guard ended, unguarded."""

    def __init__(self, function: str, kind: str) -> None:
        self.function = function
        self.kind = kind
        super().__init__(
            f"@stream_safe: {function}() returned {kind} that it did not make itself (a generator expression, or a call "
            f"of another generator or async function), so its body would run after the guard ended, unguarded; it was "
            f"closed. Decorate the function that holds the loop: a generator function, an async def or an async "
            f"generator function is guarded at each resumption for its whole life (or use `with stream_contract(...)` "
            f"inside it)"
        )


class FrameworkUnavailableError(StreamsafeError, ImportError):
    """A call needs a module that cannot be imported: a copy helper's framework (``out.torch()``, ``out.cupy()``,
    ``out.jax()``), PyAV for the emulated decoder, the SDK a class guard names (``ss.guard("nvvfx")``)."""

    def __init__(self, framework: str, helper: str, reason: str, extra: str | None, alternative: str | None = None) -> None:
        self.framework = framework
        self.helper = helper
        self.reason = reason
        if alternative is None:  # (a decoder's frame.torch() is told of frame.numpy(), an effect's out.torch() of out.numpy())
            what = "frame" if helper.startswith("frame.") else "output"
            alternative = f"or take a host copy with {helper.split('.')[0] if '.' in helper else 'out'}.numpy(); the {what} is untouched"
        install = f"Install it (pip install 'streamsafe[{extra}]'), " if extra else "Install it, "
        super().__init__(f"{helper} needs {framework}, which cannot be imported here ({reason}). {install}{alternative}",
                         name=framework)


class EnvironmentSettingError(StreamsafeError, ValueError):
    """A ``STREAMSAFE_*`` environment variable holds a value streamsafe does not read."""

    def __init__(self, name: str, value: str, meaning: str,
                 accepted: str = "1 (also true, yes, on) or 0 (also false, no, off), in any case") -> None:
        self.name, self.value = name, value
        super().__init__(f"{name}={value!r} is not a switch streamsafe reads ({meaning}): set it to {accepted}, or unset it")


class EnvironmentSettingWarning(RuntimeWarning):
    """A ``STREAMSAFE_*`` environment variable streamsafe does not act on: a name it does not know (a misspelt
    switch, named with the closest known one), or a value of a speed or test switch it does not read (the default
    is kept). Warned once, at the user's line. Not an error: ``-W error::streamsafe.errors.EnvironmentSettingWarning``
    makes it one."""


class HostWaitWarning(UserWarning):
    """``auto`` makes the host wait on every call for something a declaration would order on the device: with no
    ``input_stream``, a stream streamsafe does not know may rewrite an input once ``run()`` returns, so the host
    waits for the inputs' copies (or, for inputs it cannot copy, for the SDK's work). Warned once per contract, at
    the user's line, naming the declaration that removes the wait. Not an error:
    ``warnings.filterwarnings("ignore", category=streamsafe.errors.HostWaitWarning)`` silences it."""

    def __init__(self, effect: str, cost: str, fix: str) -> None:
        self.effect, self.cost, self.fix = effect, cost, fix
        super().__init__(
            f"{effect}: no input_stream is declared, so auto {cost} on every call (a stream streamsafe does not know "
            f"may rewrite an input once run() returns). If your program writes each input on one stream, declare it: "
            f"{fix}. `streamsafe run --advise your_program.py` names the streams your inputs come from"
        )


class DeviceMemoryError(StreamsafeError, MemoryError):
    """An allocation the device cannot hold: on the model (which keeps every byte in this host's memory), one
    larger than the host's memory. Also a ``MemoryError``."""

    def __init__(self, what: str, nbytes: int, limit: str, fix: str) -> None:
        self.what = what
        self.nbytes = nbytes
        super().__init__(f"cannot allocate {what}: {nbytes / 2**30:.1f} GiB is more than {limit}. {fix}")


class ArgumentError(StreamsafeError, TypeError, ValueError):
    """An argument streamsafe cannot use: not a backend where one is needed, an option a call does not
    take, a device count that is not a positive int. Also a ``TypeError`` and a ``ValueError``."""


class MissingCallError(StreamsafeError, AttributeError):
    """A call the effect does not have (``run_at_timestep`` on an effect that does not interpolate).
    Also an ``AttributeError``."""


class ProfileError(StreamsafeError, TypeError, ValueError):
    """An SDK profile streamsafe cannot use (:mod:`streamsafe.profile`): a field of the wrong type or value, or
    something else given to ``register()``. Names the profile, the field, the value, the rule and the fix."""

    def __init__(self, profile: str, field: str, value: Any, rule: str, fix: str) -> None:
        self.profile, self.field, self.value, self.rule, self.fix = profile, field, value, rule, fix
        super().__init__(f"profile {profile!r}: {field}={_show(value)} {rule}. {fix}")


def another_models_array(array: Any, backend: Any, what: str = "array") -> InputArrayError:
    """The :class:`InputArrayError` for memory of a simulated backend (or of none) given to another ``backend`` as ``what``."""
    owner = getattr(array, "backend", None)
    return InputArrayError(
        what,
        array,
        f"it is memory of {owner!r} (id {id(owner):#x}), not of {backend!r} (id {id(backend):#x}); "
        "each model's memory lives only in the model that made it",
        "Allocate it with the effect's backend (backend.empty(...)), or make the effect with the backend the "
        "array belongs to (backend=...).",
    )
