"""StreamContract: the four streams of an effect call, and the fences that order them.

Three ways in::

    with ss.stream_contract(sr, stream, strategy="auto") as c:   # sr.run is guarded in the block
        out = sr.run(frame)                                      # or c.run(frame)
        y = torch.from_dlpack(out.image).clone()                 # ordered on torch's current stream

    @ss.stream_safe(sr)                                          # stream taken at each call
    def upscale(frame): ...

    c = ss.StreamContract(sr, stream)                            # used directly: c.run(...), c.close()

Streams (DESIGN.md section 2): **P** the input's producer (declared ``input_stream``, else
the producer framework's current stream at call time, else forwarded through
``__dlpack__(stream=S)``), **S** the SDK stream (the contract's ``stream``, a
``stream_ptr`` passed to ``run``, else the current stream at call time), **L** the RGB8
conversion stream (the legacy stream; none for RGB10A2), **C** the consumer's stream
(what the consumer passes to ``__dlpack__``, else ``consumer_stream``, else S).
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from . import _sanitize
from ._dlpack import DLPACK_CPU, DLPACK_CUDA, check_input_device, require_cuda_input
from .backend import Backend, SimBackend, current_backend
from .backend.sim import SimArray
from .errors import EffectStateError, StreamsafeError, UnguardedChangeError
from .frameworks import framework_of, torch_current_stream_handle
from .outputs import SafeImage, SafeOutput
from .plan import Fence, FencePlan, _release_fence, consumer_fences, plan_fences, reuse_fences
from .strategy import Strategy, as_strategy
from .streams import LEGACY_HANDLE, Stream, as_stream

__all__ = ["StreamContract", "stream_contract", "stream_safe", "CONFIG_ATTRS"]

CONFIG_ATTRS = ("output_width", "output_height", "image_encoding", "input_width", "input_height")
"""Attributes whose change may release or replace the SDK's output buffer (H6)."""

F = TypeVar("F", bound=Callable[..., Any])


class StreamContract:
    """Fences one effect's calls. See the module docstring for the streams and the three ways in.

    ``strategy`` is a :class:`~streamsafe.Strategy` or its name; ``"none"`` also needs
    ``allow_none=True``. ``backend`` defaults to the effect's own (emulated effects) or the
    current backend. Constructing a contract does not block and issues no GPU work.
    """

    def __init__(
        self,
        effect: Any,
        stream: Any = None,
        *,
        strategy: Strategy | str = "auto",
        input_stream: Any = None,
        consumer_stream: Any = None,
        conversion_stream: Any = None,
        backend: Backend | None = None,
        allow_none: bool = False,
    ) -> None:
        self.strategy = as_strategy(strategy, allow_none=allow_none)
        if getattr(effect, "closed", False):
            raise EffectStateError(type(effect).__name__, "stream_contract", "closed", "Create a new effect.")
        self.effect = effect
        self._cls = type(effect)
        self.device = int(getattr(effect, "device", 0))
        self.backend: Backend = backend or _effect_backend(effect) or current_backend()
        dev, be = self.device, self.backend
        self._sdk_fixed = None if stream is None else as_stream(stream, device=dev, backend=be)
        self._input = None if input_stream is None else as_stream(input_stream, device=dev, backend=be)
        self._consumer = None if consumer_stream is None else as_stream(consumer_stream, device=dev, backend=be)
        self._conversion_spec = (
            as_stream(conversion_stream, device=dev, backend=be)
            if conversion_stream is not None
            else as_stream(LEGACY_HANDLE, device=dev, backend=be)
        )
        self.generation = 0
        self.closed = False
        self._shadow: Stream | None = None
        self._plans: dict[tuple[Any, ...], FencePlan] = {}
        self._consumer_plans: dict[tuple[Any, ...], tuple[list[Fence], list[Fence]]] = {}
        self._last_plan: FencePlan | None = None
        self._since_run: dict[Stream, None] = {}
        self._outstanding: dict[Stream, None] = {}
        self._last_consumer: Stream | None = None
        self._holds: dict[Stream, Any] = {}  # consumer stream objects kept alive while fences still need them
        self._keepalive: list[tuple[Any, Any]] = []
        self._torch_streams: dict[int, Any] = {}
        self._guard_depth = 0
        self._guard_host_wait = True
        self._swapped = False
        self._config = self._snapshot()
        self.stats = {"runs": 0, "fences": 0, "host_waits": 0, "device_syncs": 0, "sdk_waits": 0}
        """Counters: runs; device-side fences; host waits and device syncs streamsafe made; and runs in
        which the SDK itself made the host wait (``non_blocking=False``)."""
        if os.environ.get("STREAMSAFE_SANITIZE") == "1":
            _sanitize.enable_from_environment()
        _ = self.plan  # validates the strategy for these streams now (e.g. async where unsound)

    # -- plans ---------------------------------------------------------------------------------

    @property
    def conversion_stream(self) -> Stream | None:
        """The RGB8 conversion stream (legacy unless declared), or ``None`` for RGB10A2 output."""
        return None if _is_rgb10a2(self.effect) else self._conversion_spec

    def _sdk_stream(self) -> Stream:
        return self._sdk_fixed if self._sdk_fixed is not None else as_stream(None, device=self.device, backend=self.backend)

    def _shadow_stream(self) -> Stream | None:
        if self.strategy not in (Strategy.ASYNC, Strategy.AUTO):
            return None
        if self._shadow is None:
            self._shadow = self.backend.acquire_stream(self.device, non_blocking=False)  # type: ignore[attr-defined]
        return self._shadow

    @property
    def plan(self) -> FencePlan:
        """The plan for the declared streams (else the current ones) and the default consumer."""
        sdk = self._sdk_stream()
        return self.plan_for(producer=self._input or sdk, sdk=sdk)

    def plan_for(self, *, producer: Stream | None, sdk: Stream | None = None, consumer: Stream | None = None, non_blocking: bool = False) -> FencePlan:
        """The plan for given streams (``producer=None``: unknown, forwarded). Cached; does not block."""
        sdk = sdk or self._sdk_stream()
        consumer = consumer or self._consumer or sdk
        conversion = self.conversion_stream
        shadow = self._shadow_stream()
        key = (producer, sdk, consumer, conversion, shadow, non_blocking)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = plan_fences(
                self.strategy, sdk=sdk, conversion=conversion, consumer=consumer, producer=producer,
                shadow=shadow, user_non_blocking=non_blocking,
            )
        return plan

    # -- running -------------------------------------------------------------------------------

    def run(self, *args: Any, **kwargs: Any) -> SafeOutput:
        """``effect.run(...)`` with the plan's fences. Blocks the host only where the plan says
        (the SDK's own wait under ``event``/``stream``/``device``, host waits under ``stream``/``device``).

        ``stream_ptr=`` names the SDK stream for this call. The plan decides ``non_blocking``;
        a caller's ``non_blocking`` is used only by strategy ``none``."""
        return self._call("run", args, kwargs)

    def run_at_timestep(self, *args: Any, **kwargs: Any) -> SafeOutput:
        """``effect.run_at_timestep(...)`` with the plan's fences (see :meth:`run`)."""
        return self._call("run_at_timestep", args, kwargs)

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> SafeOutput:
        if self.closed:
            raise EffectStateError(type(self.effect).__name__, name, "closed", "Create a new effect and contract.")
        method = getattr(self._cls, name)
        stream_ptr = kwargs.pop("stream_ptr", None)
        user_nb = bool(kwargs.pop("non_blocking", False))
        sdk = self._sdk_stream() if stream_ptr is None else as_stream(stream_ptr, device=self.device, backend=self.backend)
        _refresh_torch()
        inputs = [(i, a) for i, a in enumerate(args) if not isinstance(a, (int, float, bool))]
        producers = [self._producer_of(a) for _, a in inputs]  # validates every input first
        self._check_unguarded_change()
        plan = self.plan_for(producer=producers[0] if producers else sdk, sdk=sdk, non_blocking=user_nb)
        run_stream = plan.run_stream
        fences: list[Fence] = []
        if self._last_plan is not None:  # the previous output may still be read, or converted
            for consumer in self._since_run:
                fences += self._consumer_fences(plan, consumer)[1]
            fences += self._consumer_fences(plan, None)[1]
        fences += plan.at("before run")
        for producer in producers[1:]:
            if producer != producers[0]:
                fences += self.plan_for(producer=producer, sdk=sdk, non_blocking=user_nb).at("before run")
        call_args = list(args)
        for (i, arr), producer in zip(inputs, producers):
            if producer is None and plan.strategy is not Strategy.NONE:
                call_args[i] = _Forwarding(arr, run_stream)
        self._apply(fences)
        self._since_run.clear()
        shadow = _sanitize.active()
        if shadow is not None:
            shadow.producer_writes(self, [a for _, a in inputs], producers)
        raw = method(self.effect, *call_args, stream_ptr=run_stream.ptr, non_blocking=plan.non_blocking, **kwargs)
        self.generation += 1  # only now: an input the SDK rejects leaves the previous output valid
        if any(f.hazard == "H12" for f in plan.fences):
            self._protect_inputs([a for _, a in inputs], run_stream)
        self._prune_keepalive()
        self._last_plan = plan
        self._config = self._snapshot()
        self.stats["runs"] += 1
        self.stats["sdk_waits"] += not plan.non_blocking
        return SafeOutput(raw, SafeImage(self, raw.image, self.generation, self.device))

    def _producer_of(self, arr: Any) -> Stream | None:
        """Validate an input and find its producer's stream (``None``: unknown, forward instead)."""
        if _TORCH_TENSOR is not None and isinstance(arr, _TORCH_TENSOR):
            return self._torch_producer(arr)
        require_cuda_input("input", arr, self.device)
        if self._input is not None:
            return self._input
        if isinstance(arr, SimArray):
            return arr.backend.current_stream(self.device)
        fw = framework_of(arr)
        if fw == "torch":
            import torch

            return as_stream(torch.cuda.current_stream(self.device), backend=self.backend)
        if fw == "cupy":
            import cupy

            with cupy.cuda.Device(self.device):
                return as_stream(cupy.cuda.get_current_stream(), backend=self.backend)
        return None  # JAX and unknown producers: forward __dlpack__(stream=S)

    def _torch_producer(self, arr: Any) -> Stream:
        """The fast path for torch tensors: device from ``get_device()``, stream from torch's raw
        current-stream pointer (no Python stream object), kind from the driver."""
        dev = arr.get_device()  # -1 for a CPU tensor
        check_input_device("input", arr, DLPACK_CPU if dev < 0 else DLPACK_CUDA, dev, self.device)
        if self._input is not None:
            return self._input
        import torch

        return as_stream(torch_current_stream_handle(torch, dev), device=dev, backend=self.backend)

    # -- fences --------------------------------------------------------------------------------

    def _apply(self, fences: list[Fence]) -> None:
        synced = False
        for fence in fences:
            if fence.action == "device-wait" and _NVTX is None:  # hot path: skips the _nvtx context manager (measured ~0.5 us per run)
                self.backend.fence(fence.waiter, fence.signaller)  # type: ignore[arg-type]
                self.stats["fences"] += 1
            elif fence.action == "device-wait":
                assert fence.waiter is not None and fence.signaller is not None
                with _nvtx(f"streamsafe {fence.hazard} fence", self.backend):
                    self.backend.fence(fence.waiter, fence.signaller)
                self.stats["fences"] += 1
            elif fence.action == "host-wait":
                assert fence.signaller is not None
                with _nvtx(f"streamsafe {fence.hazard} host wait", self.backend):
                    event = self.backend.acquire_event(self.device)
                    try:
                        self.backend.record(event, fence.signaller)
                        self.backend.synchronize_event(event)
                    finally:
                        self.backend.release_event(event)
                self.stats["host_waits"] += 1
            elif fence.action == "device-sync" and not synced:
                with _nvtx(f"streamsafe {fence.hazard} device sync", self.backend):
                    self.backend.synchronize_device(self.device)
                self.stats["device_syncs"] += 1
                synced = True

    def _on_import(self, image: SafeImage, stream: Any) -> None:
        """A consumer imports the current output on ``stream``: order it after the SDK (H3/H4)."""
        plan = self._last_plan
        assert plan is not None
        if stream is None or (isinstance(stream, int) and stream == -1):
            consumer = self._consumer or plan.sdk
        else:
            consumer = as_stream(stream, device=self.device, backend=self.backend)
        self._apply(self._consumer_fences(plan, consumer)[0])
        self._since_run[consumer] = None
        self._outstanding[consumer] = None
        self._last_consumer = consumer
        self._hold(consumer)
        shadow = _sanitize.active()
        if shadow is not None:
            shadow.consumer_reads(self, image, consumer)

    def _consumer_fences(self, plan: FencePlan, consumer: Stream | None) -> tuple[list[Fence], list[Fence]]:
        """(at import, before next run) for ``consumer``; ``None``: the 8-bit result's reuse. Cached."""
        key = (plan.strategy, plan.run_stream, plan.conversion, consumer)
        cached = self._consumer_plans.get(key)
        if cached is None:
            if consumer is None:
                fences = reuse_fences(plan.strategy, run_stream=plan.run_stream, conversion=plan.conversion)
            else:
                fences = consumer_fences(plan.strategy, run_stream=plan.run_stream, conversion=plan.conversion, consumer=consumer)
            cached = self._consumer_plans[key] = (
                [f for f in fences if f.when == "at import"],
                [f for f in fences if f.when == "before next run"],
            )
        return cached

    def _hold(self, consumer: Stream) -> None:
        """Keep the framework's object for ``consumer`` alive: a stream a consumer made for one copy
        (``with cupy.cuda.Stream(): ...``) would otherwise be destroyed before the next run's fence
        is recorded on it, and a destroyed handle cannot be used."""
        if consumer in self._holds or consumer.ptr in (0, 1, 2):
            return
        import sys

        if "cupy" in sys.modules:
            current = sys.modules["cupy"].cuda.get_current_stream()
            if current.ptr == consumer.handle:
                self._holds[consumer] = current
                return
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            if torch.cuda.is_initialized():
                current = torch.cuda.current_stream(self.device)
                if current.cuda_stream == consumer.handle:
                    self._holds[consumer] = current

    def _release_holds(self) -> None:
        for consumer in list(self._holds):
            if consumer not in self._since_run and consumer not in self._outstanding:
                del self._holds[consumer]

    def _consumers_done(self) -> None:
        """The host waited for the last consumer's copy (a helper that blocks)."""
        if self._last_consumer is not None:
            self._outstanding.pop(self._last_consumer, None)
            self._since_run.pop(self._last_consumer, None)
            self._release_holds()

    def _before_release(self) -> None:
        """H6: the host waits for every copy that may still read the buffer."""
        if self.strategy is Strategy.NONE:
            return
        fences = [_release_fence(self._last_plan.strategy if self._last_plan else self.strategy, c) for c in self._outstanding]
        self._apply(fences)
        self._outstanding.clear()
        self._since_run.clear()
        self._release_holds()

    # -- inputs after an asynchronous run (H12) ------------------------------------------------

    def _protect_inputs(self, inputs: list[Any], run_stream: Stream) -> None:
        others = []
        for arr in inputs:
            if framework_of(arr) == "torch":
                arr.record_stream(self._torch_stream(run_stream))
            else:
                others.append(arr)
        if others:
            event = self.backend.acquire_event(self.device)
            self.backend.record(event, run_stream)
            self._keepalive.append((event, others))

    def _torch_stream(self, stream: Stream) -> Any:
        ts = self._torch_streams.get(stream.handle)
        if ts is None:
            import torch

            if stream.ptr == 0:
                ts = torch.cuda.default_stream(self.device)
            else:
                ts = torch.cuda.ExternalStream(stream.ptr, device=self.device)
            self._torch_streams[stream.handle] = ts
        return ts

    def _prune_keepalive(self) -> None:
        while self._keepalive and self.backend.query(self._keepalive[0][0]):
            self.backend.release_event(self._keepalive.pop(0)[0])

    def _drain_keepalive(self) -> None:
        for event, _ in self._keepalive:
            self.backend.synchronize_event(event)
            self.backend.release_event(event)
        self._keepalive.clear()

    # -- configuration and life cycle -----------------------------------------------------------

    def _snapshot(self) -> tuple[Any, ...]:
        return tuple(getattr(self.effect, name, None) for name in CONFIG_ATTRS)

    def _check_unguarded_change(self) -> None:
        now = self._snapshot()
        if now == self._config or not self._outstanding:
            self._config = now
            return
        changes = ", ".join(
            f"{name} {old} -> {new}" for name, old, new in zip(CONFIG_ATTRS, self._config, now) if old != new
        )
        consumers = ", ".join(str(c) for c in self._outstanding)
        error = UnguardedChangeError(type(self.effect).__name__, changes, consumers)
        self._config = now
        self._outstanding.clear()
        self._since_run.clear()
        self.generation += 1
        if _sanitize.active() is not None or _sanitize.sim_sanitizing(self.backend):
            raise error
        warnings.warn(str(error), RuntimeWarning, stacklevel=4)

    def configure(self, **attrs: Any) -> None:
        """Set effect attributes. A change that may release the output buffer (output size,
        encoding) first makes the host wait for every copy still reading it (H6)."""
        changes = {k: v for k, v in attrs.items() if getattr(self.effect, k, object()) != v}
        if any(k in CONFIG_ATTRS for k in changes):
            self._before_release()
            self.generation += 1
        set_attr: Any = self._cls.__setattr__  # the effect's own (property setters, validation)
        for name, value in attrs.items():
            set_attr(self.effect, name, value)
        self._config = self._snapshot()

    def synchronize(self) -> None:
        """Block the host until every copy of an output issued through this contract is done."""
        self._before_release()
        self._drain_keepalive()

    def close(self) -> None:
        """Close the effect once every copy is done (H6). Blocks the host for those copies. Idempotent."""
        if self.closed:
            return
        self._before_release()
        self._drain_keepalive()
        self._cls.close(self.effect)
        self.generation += 1
        self.closed = True
        if self._shadow is not None:
            # Pooled, never destroyed: torch records events on it later for inputs given record_stream().
            self.backend.release_stream(self._shadow)  # type: ignore[attr-defined]
            self._shadow = None

    # -- the guard (``with`` and the decorator) --------------------------------------------------

    def __enter__(self) -> StreamContract:
        self._install_guard(host_wait_on_exit=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self._remove_guard()

    @contextlib.contextmanager
    def guarded(self, *, host_wait_on_exit: bool = True) -> Iterator[StreamContract]:
        """Route ``effect.run``/``run_at_timestep``/``close`` and configuration changes through
        this contract inside the block."""
        self._install_guard(host_wait_on_exit=host_wait_on_exit)
        try:
            yield self
        finally:
            self._remove_guard()

    def _install_guard(self, *, host_wait_on_exit: bool) -> None:
        owner = self.effect.__dict__.get("_streamsafe_contract")
        if owner is not None and owner is not self:
            raise StreamsafeError(
                f"{type(self.effect).__name__} is already guarded by another StreamContract; "
                "use that contract, or leave its block first"
            )
        self._guard_depth += 1
        if self._guard_depth > 1:
            return
        self._guard_host_wait = host_wait_on_exit
        self.effect.__dict__["_streamsafe_contract"] = self
        try:
            self.effect.__class__ = _guarded_class(self._cls)
            self._swapped = True
        except TypeError:  # a class whose instances cannot change class: patch the instance
            for name in ("run", "run_at_timestep", "close"):
                if hasattr(self._cls, name):
                    self.effect.__dict__[name] = getattr(self, name)
            self._swapped = False

    def _remove_guard(self) -> None:
        self._guard_depth -= 1
        if self._guard_depth > 0:
            return
        if self._swapped:
            self.effect.__class__ = self._cls
        else:
            for name in ("run", "run_at_timestep", "close"):
                self.effect.__dict__.pop(name, None)
        self.effect.__dict__.pop("_streamsafe_contract", None)
        if self.closed or self.strategy is Strategy.NONE:
            return
        if self._guard_host_wait:
            # Later unguarded use may run on any stream: only a host wait keeps the copies safe.
            self._before_release()
        elif self._last_plan is not None:
            # The decorator: order the SDK's streams after the copies, on the device.
            plan = self._last_plan
            fences: list[Fence] = []
            for consumer in self._since_run:
                fences += [
                    f for f in consumer_fences(plan.strategy, run_stream=plan.sdk, conversion=plan.conversion, consumer=consumer)
                    if f.when == "before next run"
                ]
            self._apply(fences)

    def __repr__(self) -> str:
        return f"StreamContract({type(self.effect).__name__}, strategy={self.strategy.value}, backend={self.backend.name})"


class _Forwarding:
    """An input whose ``__dlpack__()`` (called by the SDK with no stream) asks the producer to
    order the SDK stream, as DLPack intends (H1 when the producer's stream is unknown)."""

    __slots__ = ("_arr", "_stream")

    def __init__(self, arr: Any, stream: Stream) -> None:
        self._arr = arr
        self._stream = stream

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()

    def __dlpack__(self, **kwargs: Any) -> Any:
        kwargs["stream"] = self._stream.dlpack
        return self._arr.__dlpack__(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._arr, name)


_GUARDED: dict[type, type] = {}


def _guarded_class(cls: type) -> type:
    guarded = _GUARDED.get(cls)
    if guarded is not None:
        return guarded

    def contract_of(self: Any) -> StreamContract:
        return self.__dict__["_streamsafe_contract"]  # type: ignore[no-any-return]

    ns: dict[str, Any] = {
        "run": lambda self, *a, **k: contract_of(self).run(*a, **k),
        "close": lambda self: contract_of(self).close(),
    }
    if hasattr(cls, "run_at_timestep"):
        ns["run_at_timestep"] = lambda self, *a, **k: contract_of(self).run_at_timestep(*a, **k)

    set_attr: Any = cls.__setattr__

    def __setattr__(self: Any, name: str, value: Any) -> None:
        contract = self.__dict__.get("_streamsafe_contract")
        if contract is not None and name in CONFIG_ATTRS:
            contract.configure(**{name: value})
        else:
            set_attr(self, name, value)

    ns["__setattr__"] = __setattr__
    guarded = type(cls.__name__, (cls,), ns)
    guarded.__qualname__ = cls.__qualname__
    guarded.__module__ = cls.__module__
    _GUARDED[cls] = guarded
    return guarded


def _effect_backend(effect: Any) -> Backend | None:
    engine = getattr(type(effect), "engine", None)
    if isinstance(engine, property):
        return effect.engine.backend  # type: ignore[no-any-return]
    return None


def _is_rgb10a2(effect: Any) -> bool:
    if type(effect).__name__ == "TrueHDR" or getattr(type(effect), "_has_rgb8_conversion", True) is False:
        return True
    encoding = getattr(effect, "image_encoding", None)
    return getattr(encoding, "name", str(encoding)).upper().endswith("RGB10A2")


@contextlib.contextmanager
def _nvtx(message: str, backend: Backend) -> Iterator[None]:
    if isinstance(backend, SimBackend) or _NVTX is None:
        yield
        return
    with _NVTX.annotate(message, domain="streamsafe"):
        yield


def _load_nvtx() -> Any:
    try:
        import nvtx

        return nvtx
    except ImportError:
        return None


_NVTX = _load_nvtx()


def _torch_tensor_type() -> Any:
    import sys

    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


_TORCH_TENSOR: Any = None  # set lazily: importing streamsafe must not import torch


def _refresh_torch() -> None:
    global _TORCH_TENSOR
    if _TORCH_TENSOR is None:
        _TORCH_TENSOR = _torch_tensor_type()


def stream_contract(effect: Any, stream: Any = None, strategy: Strategy | str = "auto", **kwargs: Any) -> StreamContract:
    """A :class:`StreamContract` to use as ``with stream_contract(sr, stream) as c:``.

    Inside the block, plain ``sr.run(...)``/``sr.run_at_timestep(...)``/``sr.close()`` and
    changes of the output size or encoding go through the contract; they are restored on
    exit (also on error). On exit the host waits for outstanding copies, so later
    unguarded use cannot overwrite a buffer a fenced consumer still reads.
    """
    return StreamContract(effect, stream, strategy=strategy, **kwargs)


def stream_safe(effect: Any, stream: Any = None, strategy: Strategy | str = "auto", **kwargs: Any) -> Callable[[F], F]:
    """Decorator: the effect is guarded for each call of the function; the SDK stream is
    ``stream``, else the current stream at each call. The wrapper's ``.contract`` is the contract.
    Between calls, the SDK's streams are ordered after outstanding copies on the device."""
    contract = StreamContract(effect, stream, strategy=strategy, **kwargs)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            with contract.guarded(host_wait_on_exit=False):
                return fn(*args, **kw)

        wrapper.contract = contract  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
