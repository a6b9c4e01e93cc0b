"""The two ways in that wrap a contract: a ``with`` block (:func:`stream_contract`) and a decorator
(:func:`stream_safe`).

Inside a block, or a call of a decorated function, plain ``sr.run(...)`` goes through the contract
(:mod:`streamsafe.guarding` routes it). Nothing here blocks the host except where said.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any, NoReturn, Protocol, TypeVar, overload

from .contract import PoolContract, StreamContract, new_contract
from .errors import ArgumentError, UnguardedResultError
from .strategy import Strategy, StrategyName

__all__ = ["stream_contract", "stream_safe"]

F = TypeVar("F", bound=Callable[..., Any])


class _Decoder(Protocol):
    """What a type checker knows a video decoder by (PyNvVideoCodec's decoders hand out batches)."""

    def get_batch_frames(self, batch_size: int, /) -> Any: ...


@overload
def stream_contract(effect: _Decoder, stream: Any = None, strategy: Strategy | StrategyName = "auto",
                    **kwargs: Any) -> PoolContract: ...


@overload
def stream_contract(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto",
                    **kwargs: Any) -> StreamContract: ...


def stream_contract(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto",
                    **kwargs: Any) -> StreamContract | PoolContract:
    """A :class:`StreamContract` to use as ``with stream_contract(sr, stream) as c:`` (for a video decoder,
    PyNvVideoCodec's, a :class:`~streamsafe.contract.PoolContract`: ``stream`` is then the decoder's).

    Inside the block, plain ``sr.run(...)``/``sr.run_at_timestep(...)``/``sr.close()`` and
    changes of the output size or encoding go through the contract (blocks nest: the
    innermost takes them). Leaving the block makes the host wait for the copies issued in it
    (like the ``stream.synchronize()`` that ends the vendor's recipe). After the block, plain
    calls return the SDK's raw output again, but streamsafe still orders them after the copies
    it knows of, on the device, and an output made in the block may still be imported after
    it, until the next run.
    """
    return new_contract(effect, stream, strategy=strategy, **kwargs)  # type: ignore[no-any-return]


def stream_safe(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto", **kwargs: Any) -> Callable[[F], F]:
    """Decorator: the effect is guarded for each call of the function; the SDK stream is
    ``stream``, else the current stream at each call. The wrapper's ``.contract`` is the contract.
    It shares the effect's ledger with every other guard: the next run, through any of them,
    waits on the device for the copies of this one's outputs. Unlike a ``with`` block, the host
    does not wait for anything when the function returns: a frame per call, at the GPU's pace.

    A generator function, an ``async def`` and an async generator function are guarded for their whole
    life: each resumption (``next()``, ``send()``, each step of an ``await``) runs inside the guard, and
    the caller's code between two resumptions does not. A plain function that returns a generator,
    coroutine or async generator it did not make itself (a generator expression, say) is refused with
    :class:`~streamsafe.errors.UnguardedResultError`: its body would run after the guard ended."""
    contract = new_contract(effect, stream, strategy=strategy, **kwargs)

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise ArgumentError(f"@stream_safe(...) decorates a function, got {fn!r} ({type(fn).__name__}): put it on the "
                                "def of the function whose calls of the effect it guards")
        if inspect.isasyncgenfunction(fn):
            wrapper: Any = _async_generator_wrapper(fn, contract)
        elif inspect.iscoroutinefunction(fn):
            wrapper = _coroutine_wrapper(fn, contract)
        elif inspect.isgeneratorfunction(fn):
            wrapper = _generator_wrapper(fn, contract)
        else:

            @functools.wraps(fn)
            def wrapper(*args: Any, **kw: Any) -> Any:
                with contract.guarded(host_wait_on_exit=False):
                    result = fn(*args, **kw)
                if inspect.isgenerator(result) or inspect.iscoroutine(result) or inspect.isasyncgen(result):
                    _refuse_lazy_result(fn, result)
                return result

        wrapper.contract = contract
        return wrapper  # type: ignore[no-any-return]

    return decorate


def _refuse_lazy_result(fn: Any, result: Any) -> NoReturn:
    kind = "a coroutine" if inspect.iscoroutine(result) else "an async generator" if inspect.isasyncgen(result) else "a generator"
    if not inspect.isasyncgen(result):  # (an async generator never started has nothing to close)
        result.close()  # (never run: no "never awaited" warning, nothing left half-done)
    raise UnguardedResultError(getattr(fn, "__qualname__", repr(fn)), kind)


def _generator_wrapper(fn: Any, contract: StreamContract) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> Any:
        with contract.guarded(host_wait_on_exit=False):
            inner = fn(*args, **kw)
        return (yield from _guarded_steps(inner, contract))

    return wrapper


def _guarded_steps(inner: Any, contract: StreamContract) -> Any:
    """Drive the generator (or an ``__await__`` iterator) ``inner``, each step inside the guard; what the
    caller sends or throws in is passed on, and ``close()`` closes ``inner`` (inside the guard too)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        with contract.guarded(host_wait_on_exit=False):
            try:
                item = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as stop:
                return stop.value
        value, error = None, None
        try:
            value = yield item
        except GeneratorExit:
            with contract.guarded(host_wait_on_exit=False):
                inner.close()
            raise
        except BaseException as e:  # (thrown in by the caller: the inner generator gets it)
            error = e


class _GuardedAwait:
    """An awaitable that steps ``inner`` (an ``__await__`` iterator) inside the guard."""

    __slots__ = ("inner", "contract")

    def __init__(self, inner: Any, contract: StreamContract) -> None:
        self.inner = inner
        self.contract = contract

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield from _guarded_steps(self.inner, self.contract))


def _coroutine_wrapper(fn: Any, contract: StreamContract) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kw: Any) -> Any:
        with contract.guarded(host_wait_on_exit=False):
            coroutine = fn(*args, **kw)
        return await _GuardedAwait(coroutine.__await__(), contract)

    return wrapper


def _async_generator_wrapper(fn: Any, contract: StreamContract) -> Any:
    @functools.wraps(fn)
    async def wrapper(*args: Any, **kw: Any) -> Any:
        with contract.guarded(host_wait_on_exit=False):
            agen = fn(*args, **kw)
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                step = agen.asend(value) if error is None else agen.athrow(error)
                value, error = None, None
                try:
                    item = await _GuardedAwait(step.__await__(), contract)
                except StopAsyncIteration:
                    return
                try:
                    value = yield item
                except GeneratorExit:
                    raise
                except BaseException as e:  # (thrown in by the caller: the inner generator gets it)
                    error = e
        finally:
            await _GuardedAwait(agen.aclose().__await__(), contract)

    return wrapper
