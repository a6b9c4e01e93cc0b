"""A guarded call's inputs: each input found and checked, its producer's stream found, and the input kept from
reuse while the SDK may still read it.

* the **inputs** of a call: its positional arguments that are not numbers, and the keyword arguments its
  profile names (:meth:`~streamsafe.profile.EffectProfile.input_keywords`);
* the **producer** of each input (H1): the guard's declared ``input_stream``, else the producing framework's
  current stream (torch, CuPy, a backend's own arrays), else unknown: the run stream is then forwarded
  through ``__dlpack__(stream=...)`` when the SDK takes the input (:class:`Forwarding`);
* the **protection** of inputs after an asynchronous call (H12): torch's ``record_stream``, a backend array's
  ``record_stream``, else a keep-alive until an event on the run stream completes.

Views of other effects' outputs passed as inputs are :mod:`streamsafe.views`' (the engine asks it).

Nothing here blocks the host.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from typing import Any

from . import hooks
from ._dlpack import DLPACK_CPU, DLPACK_CUDA, backend_own, check_input_device, require_cuda_input
from .backend import Backend
from .backend.naming import as_stream
from .calls import raw_method
from .errors import ArgumentError, HostArrayError, InputArrayError, another_models_array
from .frameworks import TORCH, cupy_external_stream, framework_of, torch_current_stream_handle
from .ledger import EffectLedger
from .profile import EffectProfile, call_signature
from .streams import LEGACY_HANDLE, Stream

__all__ = ["Inputs", "Forwarding", "is_number", "call_keywords", "inputs_of", "unbound_call", "own_by_keyword", "positional_capacity"]


def call_keywords(profile: EffectProfile, cls: type, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, bool]:
    """A guarded call's stream keyword (``None``: not given) and blocking keyword, checked: no more positional
    arguments than the SDK's ``name`` takes, arguments its signature binds (none missing, no keyword it lacks:
    :func:`unbound_call`), and a blocking keyword that is a bool. Issues nothing."""
    own = (profile.stream_keyword, profile.blocking_keyword)
    capacity = positional_capacity(cls, name, own)
    if capacity is not None and len(args) > capacity:
        given = [k for k in (profile.blocking_keyword, profile.stream_keyword) if k]
        raise ArgumentError(
            f"{cls.__name__}.{name}() takes {capacity} positional argument(s) (its input(s)); {len(args)} were given. "
            + (f"Pass the others by keyword ({', '.join(k + '=' for k in given)}); the contract passes "
               f"{'those two' if len(given) == 2 else 'that'} itself" if given else "Pass the others by keyword")
        )
    error = unbound_call(cls, name, args, kwargs, own)
    if error is not None:
        raise error
    user_nb = False
    if profile.blocking_keyword is not None:
        user_nb = kwargs.get(profile.blocking_keyword, False)
        if type(user_nb) is not bool:
            raise ArgumentError(
                f"{profile.blocking_keyword}={user_nb!r}: it must be True or False. The contract decides whether the SDK "
                f"waits (its plan says why); a caller's {profile.blocking_keyword} counts only under strategy 'none'"
            )
    return (kwargs.get(profile.stream_keyword) if profile.stream_keyword is not None else None), user_nb


def is_number(value: Any) -> bool:
    """Whether a call's argument is a scalar (a timestep, a frame index), not an input array."""
    return isinstance(value, numbers.Number)


def inputs_of(profile: EffectProfile, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[int | str, ...]]:
    """A call's input arrays and where each is (a position, or a keyword), positional ones first."""
    keys: list[int | str] = [i for i, a in enumerate(args) if not is_number(a)]
    if kwargs:
        keys += profile.input_keywords(kwargs)
    return tuple(args[k] if type(k) is int else kwargs[k] for k in keys), tuple(keys)  # type: ignore[index]


class Inputs:
    """The inputs of one guard's calls (see the module docstring). ``declared``: the guard's ``input_stream``,
    or ``None``."""

    __slots__ = ("backend", "device", "ledger", "declared", "profile", "torch_streams")

    def __init__(self, backend: Backend, device: int, ledger: EffectLedger, declared: Stream | None, profile: EffectProfile) -> None:
        self.backend = backend
        self.device = device
        self.ledger = ledger
        self.declared = declared
        self.profile = profile
        self.torch_streams: dict[Stream, Any] = {}
        """torch's stream objects for the run streams it is told of (``record_stream`` takes one)."""

    def of_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], tuple[int | str, ...], list[Stream | None]]:
        """The input arrays of a call, where each is, and their producers' streams (``None``: unknown); every input
        is checked first (an array of another device, host memory, a scalar given as text raise). Issues nothing."""
        for i, a in enumerate(args[1:], 1):
            if a is None or isinstance(a, (str, bytes)):  # (a timestep or a frame index given as text, or left out)
                raise InputArrayError(
                    f"argument {i + 1}", a,
                    f"{'None' if a is None else 'a ' + type(a).__name__} is neither an input array nor a number",
                    "Pass the inputs as CUDA arrays and a timestep or index as a number, "
                    "e.g. c.run_at_timestep(previous, next, 0.5)",
                )
        arrays, keys = inputs_of(self.profile, args, kwargs)
        try:
            producers = [self.producer_of(a) for a in arrays]
        except HostArrayError as e:
            fix = self.backend.host_array_fix
            if not fix:
                raise
            raise HostArrayError(e.what, e.value, _described(e), e.rule, f"{e.fix} {fix}") from None
        return arrays, keys, producers

    def producer_of(self, arr: Any) -> Stream | None:
        """Check an input and find its producer's stream (``None``: unknown, forward instead)."""
        if TORCH.tensor is not None and isinstance(arr, TORCH.tensor):
            return self._torch_producer(arr)
        require_cuda_input("input", arr, self.device)
        owner = _owner(arr)
        if owner is not None and owner is not self.backend:
            raise another_models_array(arr, self.backend, "input")
        if owner is None and _guarded_output(type(arr)):
            self._check_output(arr)
        if self.declared is not None:
            return self.declared
        if owner is not None:
            return owner.current_stream(self.device)  # type: ignore[no-any-return]
        fw = framework_of(arr)
        if fw == "torch":
            import torch

            return as_stream(torch.cuda.current_stream(self.device), backend=self.backend)
        if fw == "cupy":
            import cupy

            with cupy.cuda.Device(self.device):
                return as_stream(cupy.cuda.get_current_stream(), backend=self.backend)
        return None  # JAX and unknown producers: forward __dlpack__(stream=S)

    def _check_output(self, output: Any) -> None:
        """A guarded output given as an input (a :class:`~streamsafe.SafeImage`, ``SafeFrame`` or ``SafePlane``):
        refused before the SDK takes its capsule (an output imports once) when it is memory of another backend and
        either backend is a model (each model's memory lives in that model only; the GPU's backends share it)."""
        owner, mine = output.memory_backend, self.backend
        if owner is mine or (owner.array_type is None and mine.array_type is None):
            return
        raise InputArrayError(
            "input", output,
            f"it is an output of {owner!r} (id {id(owner):#x}), not of {mine!r} (id {id(mine):#x}), this effect's "
            "backend; each model's memory lives only in the model that made it. Nothing was imported: the output "
            "is as it was",
            "Pass it to an effect made with the backend it belongs to, or copy it into this effect's backend first "
            "(on the model: backend.array(out.numpy()))",
        )

    def _torch_producer(self, arr: Any) -> Stream:
        """The fast path for torch tensors: device from ``get_device()``, stream from torch's raw current-stream
        pointer (no Python stream object), kind from the driver."""
        dev = arr.get_device()  # -1 for a CPU tensor
        check_input_device("input", arr, DLPACK_CPU if dev < 0 else DLPACK_CUDA, dev, self.device)
        if self.declared is not None:
            return self.declared
        import torch

        handle = torch_current_stream_handle(torch, dev)
        known = self.ledger.holds.stream(handle) if dev == self.device else None
        return known if known is not None else as_stream(handle, device=dev, backend=self.backend)

    def for_sdk(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], keys: tuple[int | str, ...], producers: Sequence[Stream | None],
        run_stream: Stream, *, forward: bool, record: bool,
    ) -> tuple[list[Any], dict[str, Any], dict[int, Forwarding]]:
        """The call's arguments as the SDK gets them: an input of an unknown producer wrapped to forward the run
        stream (``forward``, H1), and, on a model (``record``), each input kept alive wrapped to note the memory
        the SDK's own import takes. Returns the arguments, keywords and the wrappers by input id."""
        call_args, call_kwargs = list(args), dict(kwargs)
        seen: dict[int, Forwarding] = {}
        for key, producer in zip(keys, producers):
            a = call_args[key] if type(key) is int else call_kwargs[key]  # type: ignore[index]
            stream = run_stream if forward and producer is None else None
            if stream is None and not (record and self.kept_alive(a)):
                continue
            wrapper = Forwarding(a, stream)
            if record:
                seen[id(a)] = wrapper
            if type(key) is int:
                call_args[key] = wrapper  # type: ignore[index]
            else:
                call_kwargs[key] = wrapper  # type: ignore[index]
        return call_args, call_kwargs, seen

    def copyable(self, arrays: Sequence[Any]) -> bool:
        """Whether every input can be copied with its exact layout (a torch tensor or a CuPy array whose elements
        fill their memory, or a backend's own array), so that ``auto`` can hand the SDK copies instead of waiting
        for the SDK's work on the host (:meth:`copy_inputs`). Issues nothing."""
        return all(_copyable(a, self.backend) for a in arrays)

    def copy_inputs(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], keys: tuple[int | str, ...], stream: Stream,
    ) -> tuple[list[Any], dict[str, Any], list[Any]]:
        """The call's arguments with each input replaced by a copy issued on ``stream`` (streamsafe's own, which
        already waits for each input's producer), allocated there, with the original's layout; returns the
        arguments, keywords and the copies. Issues the copies; does not block."""
        call_args, call_kwargs = list(args), dict(kwargs)
        copies = []
        for key in keys:
            a = call_args[key] if type(key) is int else call_kwargs[key]  # type: ignore[index]
            c = self._copy(a, stream)
            copies.append(c)
            if type(key) is int:
                call_args[key] = c  # type: ignore[index]
            else:
                call_kwargs[key] = c  # type: ignore[index]
        return call_args, call_kwargs, copies

    def _copy(self, a: Any, stream: Stream) -> Any:
        if _owner(a) is self.backend:
            return self.backend.copy(a, stream, name=f"streamsafe's copy of {a.buffer.name}")  # type: ignore[attr-defined]
        fw = framework_of(a)
        if fw == "torch":
            import torch

            with torch.cuda.stream(self.torch_stream(stream)):
                if not _dense(a.shape, a.stride()):  # (a kept frame's input of another layout: the same values)
                    return a.clone(memory_format=torch.contiguous_format)
                c = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
                c.copy_(a)
            return c
        import cupy

        with cupy.cuda.Device(self.device), cupy_external_stream(cupy, stream):
            return a.copy(order="K")

    def kept_alive(self, a: Any) -> bool:
        """Whether :meth:`protect` keeps ``a`` alive (not a backend's own array or a torch tensor, which it
        protects with ``record_stream``)."""
        return not (_owner(a) is not None or (TORCH.tensor is not None and type(a) is TORCH.tensor) or framework_of(a) == "torch")

    def protect(self, inputs: Sequence[Any], run_stream: Stream, seen: dict[int, Forwarding] | None = None) -> None:
        """H12: keep each input from being recycled while the run stream may still read it: torch's
        ``record_stream`` (the allocator then waits for the run stream), else a keep-alive until an event
        recorded on the run stream completes. In sanitize mode on a GPU a torch input is also kept until a
        completed query of such an event (the mirror sees that query order the host, not the allocator's own
        wait: else the memory's next owner would look racy to it). Does not block."""
        if run_stream.thread:
            # A per-thread run stream: the allocator records its event in whichever thread frees the input,
            # where 2 names another stream. The legacy stream follows every thread's per-thread stream.
            run_stream = as_stream(LEGACY_HANDLE, device=run_stream.device, backend=self.backend)
        others = []
        # (sanitize mode on a GPU: the torch inputs are kept until a completed query too; no list otherwise)
        ordered: list[Any] | None = [] if hooks.observers and not self.ledger.resolved_backend().records_accesses else None
        for arr in inputs:
            if (TORCH.tensor is not None and type(arr) is TORCH.tensor) or framework_of(arr) == "torch":
                arr.record_stream(self.torch_stream(run_stream))
                if ordered is not None:
                    ordered.append(arr)
            elif _owner(arr) is not None and hasattr(arr, "record_stream"):
                arr.record_stream(run_stream)
            else:
                others.append(arr)
        if ordered:
            self.ledger.keepalive.add(ordered, run_stream, ordering=True)
        if others:
            self.ledger.keepalive.add(others, run_stream)
            if seen:
                # On the model the allocator learns what the keep-alive does on a GPU: the memory the SDK
                # imported is not recycled before the run stream's work is done (its accesses then retire
                # with the block). The SDK's own import told which memory that is: no second export.
                for arr in others:
                    wrapper = seen.get(id(arr))
                    inner = wrapper.imported if wrapper is not None else None
                    if inner is not None and _owner(inner) is self.backend:
                        inner.record_stream(run_stream)

    def torch_stream(self, stream: Stream) -> Any:
        """torch's stream object for ``stream`` (made once)."""
        ts = self.torch_streams.get(stream)
        if ts is None:
            import torch

            if stream.ptr == 0:
                ts = torch.cuda.default_stream(self.device)
            else:
                ts = torch.cuda.ExternalStream(stream.ptr, device=self.device)
            self.torch_streams[stream] = ts
        return ts

_OUTPUTS: dict[type, bool] = {}


def _guarded_output(cls: type) -> bool:
    """Whether ``cls`` is a guarded output's (it says whose memory it is: ``memory_backend``). Cached per type."""
    known = _OUTPUTS.get(cls)
    if known is None:
        known = _OUTPUTS[cls] = isinstance(getattr(cls, "memory_backend", None), property)
    return known


def _owner(arr: Any) -> Any:
    """The backend whose own array ``arr`` is (a model's: it has ``__streamsafe_key__``), else ``None``."""
    return arr.backend if backend_own(type(arr)) else None


def _dense(shape: Sequence[int], strides: Sequence[int], itemsize: int = 1) -> bool:
    """Whether elements of ``shape`` laid out by ``strides`` (in units of ``itemsize``) fill their span exactly,
    in some order of the dimensions: no gaps, no element seen twice (then a copy with the same strides is the
    same layout)."""
    if 0 in shape:
        return True
    expected = 1
    for stride, size in sorted((st // itemsize, sz) for sz, st in zip(shape, strides) if sz > 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _copyable(a: Any, backend: Backend) -> bool:
    """:meth:`Inputs.copyable` for one input."""
    if _owner(a) is backend:
        return True
    fw = framework_of(a)
    if fw == "torch":
        return not a.is_sparse and _dense(a.shape, a.stride())  # type: ignore[no-any-return]
    if fw == "cupy":
        return _dense(a.shape, a.strides, a.itemsize) and hasattr(a, "copy")
    return False


def _described(error: HostArrayError) -> str:
    """The array's description inside a :class:`HostArrayError`'s message (type and shape, no data)."""
    text = str(error)
    head = f"{error.what} "
    return text[len(head):text.index(" is not on a GPU")] if text.startswith(head) and " is not on a GPU" in text else "the input"


class Forwarding:
    """An input whose ``__dlpack__()`` (called by the SDK with no stream) asks the producer to order the SDK
    stream, as DLPack intends (H1 when the producer's stream is unknown); with no stream, a plain pass-through.
    A capsule object of a backend's own (the model's) tells which array the SDK imports (``imported``: the
    memory the SDK reads)."""

    __slots__ = ("_arr", "_stream", "imported")

    def __init__(self, arr: Any, stream: Stream | None) -> None:
        self._arr = arr
        self._stream = stream
        self.imported: Any = None

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        if self._stream is not None:
            kwargs["stream"] = self._stream.dlpack
        capsule = self._arr.__dlpack__(**kwargs)
        inner = getattr(capsule, "array", None) if backend_own(type(capsule)) else None
        if inner is not None:
            self.imported = inner
        return capsule

    def __getattr__(self, name: str) -> Any:
        return getattr(self._arr, name)


_positional: dict[tuple[type, str, tuple[str | None, ...]], int | None] = {}


def argument(cls: type, name: str, param: str, args: tuple[Any, ...], kwargs: dict[str, Any], missing: Any) -> Any:
    """What the SDK's own ``cls.name`` gets for its parameter ``param`` in a call with ``args`` and ``kwargs``: by
    keyword, else by position, else its default (``missing`` when it has none, or its signature cannot be read)."""
    if param in kwargs:
        return kwargs[param]
    sig = call_signature(cls, raw_method(cls, name), name)
    if sig is None:
        return missing
    for i, p in enumerate(sig.parameters.values()):
        if p.name == param:
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and i < len(args):
                return args[i]
            return missing if p.default is p.empty else p.default
    return missing


def positional_capacity(cls: type, name: str, own: tuple[str | None, ...] = ()) -> int | None:
    """How many positional arguments the SDK's own ``cls.name`` takes before the first of the parameters the guard
    passes itself (``own``: the stream and blocking keywords), ``None``: any number, or unknown."""
    key = (cls, name, own)
    if key not in _positional:
        sig = call_signature(cls, raw_method(cls, name), name, wrapped=False)  # (what the call binds to: a wrapper's own)
        params = list(sig.parameters.values()) if sig is not None else None
        if params is None or any(p.kind is p.VAR_POSITIONAL for p in params):
            _positional[key] = None
        else:
            positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            names = [p.name for p in positional]
            _positional[key] = min([names.index(k) for k in own if k in names], default=len(positional))
    return _positional[key]


def own_by_keyword(cls: type, name: str, own: tuple[str | None, ...], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` with the arguments given by position from the first of the parameters the guard passes
    itself (``own``: the stream and blocking keywords) on, when they are all such parameters and the SDK's own
    ``cls.name`` takes them by keyword too, passed by keyword instead (``apply(x, stream)`` as
    ``apply(x, queue=stream)``): the guard reads and passes them by keyword. Unchanged when there are none, or when
    they cannot move (the call's checks then say why); one given both ways raises
    :class:`~streamsafe.errors.ArgumentError`. Issues nothing."""
    capacity = positional_capacity(cls, name, own)
    if capacity is None or len(args) <= capacity:
        return args, kwargs
    sig = call_signature(cls, raw_method(cls, name), name, wrapped=False)
    assert sig is not None  # (a capacity is known only for a signature read)
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    moved = positional[capacity:len(args)]
    if any(p.name in kwargs for p in moved):  # (given twice: by position and by keyword)
        error = unbound_call(cls, name, args, kwargs, own)
        if error is not None:
            raise error
    if len(moved) < len(args) - capacity or any(p.kind is p.POSITIONAL_ONLY or p.name in kwargs or p.name not in own
                                                for p in moved):
        return args, kwargs  # (an input after the stream stays where it is: refused, since it could not be fenced)
    return args[:capacity], {**kwargs, **{p.name: v for p, v in zip(moved, args[capacity:])}}


class _Binding:
    """What :func:`unbound_call` needs of the SDK's own ``cls.name``: its signature (``self`` left out, no
    annotations), and how many positional arguments must come (the common call binds with no more work)."""

    __slots__ = ("signature", "text", "required", "keywords_required", "own")

    def __init__(self, signature: inspect.Signature, name: str, own: tuple[str | None, ...]) -> None:
        params = list(signature.parameters.values())
        self.signature = signature
        plain = signature.replace(parameters=[p.replace(annotation=p.empty) for p in params], return_annotation=signature.empty)
        self.text = f"{name}{plain}"
        """The signature as a message shows it: ``run(input_array, *, non_blocking=False, stream_ptr=0)``."""
        takes_keywords = any(p.kind is p.VAR_KEYWORD for p in params)
        self.own = tuple(k for k in own if k is not None and (takes_keywords or (
            k in signature.parameters and signature.parameters[k].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                                         inspect.Parameter.KEYWORD_ONLY))))
        """The keywords the guard passes itself that the SDK takes by keyword."""
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.required = max((i + 1 for i, p in enumerate(positional) if p.default is p.empty and p.name not in self.own), default=0)
        """How many positional arguments reach every positional parameter without a default that the guard does not
        pass itself (a call by position alone passes at least these)."""
        self.keywords_required = any(p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in self.own for p in params)
        """Whether a keyword-only parameter the guard does not pass has no default."""


_bindings: dict[tuple[type, str, tuple[str | None, ...]], _Binding | None] = {}


def unbound_call(cls: type, name: str, args: Sequence[Any], kwargs: dict[str, Any],
                 own: tuple[str | None, ...] = ()) -> ArgumentError | None:
    """The :class:`~streamsafe.errors.ArgumentError` for arguments the SDK's own ``cls.name`` cannot take (one
    missing, a keyword it does not have, one given twice), naming the argument and the SDK's signature; ``None``
    when they bind, or the signature cannot be read (a C method: the SDK then says). ``own``: the keywords the guard
    passes itself (the stream and blocking keywords), bound as if given. Issues nothing; called while a call is
    planned, never for a kept frame (its facts were planned with arguments that bound)."""
    key = (cls, name, own)
    binding = _bindings.get(key, _UNREAD)
    if binding is _UNREAD:
        sig = call_signature(cls, raw_method(cls, name), name, wrapped=False)  # (a decorator's wrapper's own)
        binding = _bindings[key] = None if sig is None else _Binding(sig, name, own)
    if binding is None:
        return None
    assert isinstance(binding, _Binding)
    if not kwargs and len(args) >= binding.required and not binding.keywords_required:
        return None  # (the common call: its inputs by position; positional_capacity checked the upper bound)
    passed = dict(kwargs)
    for k in binding.own:
        passed.setdefault(k, None)
    try:
        binding.signature.bind(*args, **passed)
    except TypeError as e:
        return _unbound(cls, name, binding, args, kwargs, e)
    return None


_UNREAD: Any = object()


def _unbound(cls: type, name: str, binding: _Binding, args: Sequence[Any], kwargs: dict[str, Any], error: TypeError) -> ArgumentError:
    """The error for a call :func:`unbound_call` found does not bind: the argument at fault, the signature, the fix."""
    params = binding.signature.parameters
    call = f"{cls.__name__}.{name}()"
    shown = f"the SDK's signature is {binding.text}"
    takes_keywords = any(p.kind is p.VAR_KEYWORD for p in params.values())
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for k in kwargs:
        p = params.get(k)
        if p is None and not takes_keywords or p is not None and p.kind is p.POSITIONAL_ONLY:
            return ArgumentError(
                f"{call} takes no argument {k}={_shown(kwargs[k])}: {shown}. Pass only the arguments it names "
                f"({', '.join(names)}), each by position or by keyword as the signature allows"
            )
        if p is not None and p in positional and positional.index(p) < len(args):
            return ArgumentError(
                f"{call} got {k!r} twice, by position (argument {positional.index(p) + 1}) and as {k}=: {shown}. "
                "Pass it once"
            )
    bound_by_position = {p.name for p in positional[:len(args)]}
    missing = [p.name for p in params.values() if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               and p.name not in bound_by_position and p.name not in kwargs and p.name not in binding.own]
    if missing:
        how = ", ".join(f"{m}=..." if params[m].kind is params[m].KEYWORD_ONLY else m for m in missing)
        by_keyword = all(params[m].kind is params[m].KEYWORD_ONLY for m in missing)
        return ArgumentError(
            f"{call} is missing {'its argument' if len(missing) == 1 else 'the arguments'} "
            f"{', '.join(repr(m) for m in missing)}: {shown}. Pass {how}"
            + (" (by keyword)" if by_keyword else " (by position, or by keyword where the signature allows)")
        )
    return ArgumentError(f"{call} cannot take these arguments ({error}): {shown}. Pass the arguments it names")


def _shown(value: Any) -> str:
    """A value as a message names it: short, never an array's data."""
    if hasattr(value, "__dlpack__") or hasattr(value, "shape"):
        from ._dlpack import describe_array

        return f"<{describe_array(value)}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
