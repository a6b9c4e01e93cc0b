"""The two ways in that wrap a contract: a ``with`` block (:func:`stream_contract`) and a decorator
(:func:`stream_safe`).

Inside a block, or a call of a decorated function, plain ``sr.run(...)`` goes through the contract
(:mod:`streamsafe.guarding` routes it). Nothing here blocks the host except where said.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .contract import StreamContract
from .strategy import Strategy, StrategyName

__all__ = ["stream_contract", "stream_safe"]

F = TypeVar("F", bound=Callable[..., Any])


def stream_contract(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto", **kwargs: Any) -> StreamContract:
    """A :class:`StreamContract` to use as ``with stream_contract(sr, stream) as c:``.

    Inside the block, plain ``sr.run(...)``/``sr.run_at_timestep(...)``/``sr.close()`` and
    changes of the output size or encoding go through the contract (blocks nest: the
    innermost takes them). Leaving the block makes the host wait for the copies issued in it
    (like the ``stream.synchronize()`` that ends the vendor's recipe). After the block, plain
    calls return the SDK's raw output again, but streamsafe still orders them after the copies
    it knows of, on the device, and an output made in the block may still be imported after
    it, until the next run.
    """
    return StreamContract(effect, stream, strategy=strategy, **kwargs)


def stream_safe(effect: Any, stream: Any = None, strategy: Strategy | StrategyName = "auto", **kwargs: Any) -> Callable[[F], F]:
    """Decorator: the effect is guarded for each call of the function; the SDK stream is
    ``stream``, else the current stream at each call. The wrapper's ``.contract`` is the contract.
    It shares the effect's ledger with every other guard: the next run, through any of them,
    waits on the device for the copies of this one's outputs. Unlike a ``with`` block, the host
    does not wait for anything when the function returns: a frame per call, at the GPU's pace."""
    contract = StreamContract(effect, stream, strategy=strategy, **kwargs)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kw: Any) -> Any:
            with contract.guarded(host_wait_on_exit=False):
                return fn(*args, **kw)

        wrapper.contract = contract  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
