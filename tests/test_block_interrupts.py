"""A Ctrl-C while a guard block is entered or left leaves no block open: after the ``with``, the thread's plain calls
are the SDK's own again, and nothing keeps the contract (nor its effect, nor the stack frame) alive.

CPython runs a signal handler (and raises its ``KeyboardInterrupt``) as a function starts or right after a call
returns; a trace function raises one at each start and each return of the functions a block goes through, one
point per run (the control: with no interrupt, the same checks hold)."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe import contract as contract_module
from streamsafe import guarding
from streamsafe.sim import SimBackend
from streamsafe.testing import VideoSuperRes

CODES = {  # the functions a block goes through on its way in and out
    "push": guarding.push.__code__, "pop": guarding.pop.__code__, "code_frame": guarding.code_frame.__code__,
    "stack_frame_argument": guarding.stack_frame_argument.__code__,
    "GuardBlock.__enter__": guarding.GuardBlock.__enter__.__code__, "GuardBlock.__exit__": guarding.GuardBlock.__exit__.__code__,
    "GuardedBlocks.__enter__": guarding.GuardedBlocks.__enter__.__code__,
    "GuardedBlocks.__exit__": guarding.GuardedBlocks.__exit__.__code__,
    "enter_block": contract_module.StreamContract.enter_block.__code__,
    "leave_block": contract_module.StreamContract.leave_block.__code__,
}


class CtrlCAt:
    """A ``KeyboardInterrupt`` at the ``event`` ("call": its start, "return": as it returns) of ``code``, once."""

    def __init__(self, code: Any, event: str) -> None:
        self.code, self.event, self.fired = code, event, False

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is self.code and not self.fired:
            if event == self.event:
                self.fired = True
                sys.settrace(None)
                raise KeyboardInterrupt
            return self._trace
        return self._trace if event == "call" and frame.f_code is self.code else None

    def __enter__(self) -> CtrlCAt:
        sys.settrace(self._trace)
        return self

    def __exit__(self, kind: Any, *rest: Any) -> bool:
        sys.settrace(None)
        return kind is KeyboardInterrupt


def _effect() -> tuple[SimBackend, Any, Any, Any]:
    sim = SimBackend(scheduler="adversarial")
    fx = VideoSuperRes(backend=sim)
    fx.output_width = fx.output_height = 32
    fx.load()
    return sim, fx, sim.create_stream(non_blocking=True), sim.array(np.full((3, 16, 16), 0.5, np.float32))


WAYS: dict[str, Callable[[Any], Any]] = {
    "with stream_contract": lambda c: c,
    "with c.guarded()": lambda c: c.guarded(),
}


OUT_OF_REACH = {("GuardBlock.__exit__", "call", "with c.guarded()"), ("GuardedBlocks.__exit__", "call", "with stream_contract"),
                ("GuardBlock.__enter__", "return", "with c.guarded()"), ("GuardedBlocks.__enter__", "return", "with stream_contract")}
"""Left: a Ctrl-C as the block's own ``__exit__`` starts, before its first line runs, or as its ``__enter__`` has
returned (the ``with`` statement then calls no ``__exit__``): no code of the block runs there to end it."""


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("event", ["call", "return"])
@pytest.mark.parametrize("where", [*CODES, "control"])
def test_a_ctrl_c_on_the_way_in_or_out_of_a_block_leaves_none_open(way: str, event: str, where: str,
                                                                    request: pytest.FixtureRequest) -> None:
    if (where, event, way) in OUT_OF_REACH:
        request.applymarker(pytest.mark.xfail(strict=True, reason="out of a block's reach: no code of the block runs there"))
    sim, fx, S, x = _effect()
    c = ss.StreamContract(fx, S, input_stream=S)
    with sim.use_stream(S):
        interrupt = CtrlCAt(CODES[where], event) if where != "control" else None
        try:
            if interrupt is not None:
                sys.settrace(interrupt._trace)
            with WAYS[way](c):
                fx.run(x)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if interrupt is not None and event == "call" and where in ("push", "pop") and not interrupt.fired:
            pytest.skip(f"{where} is not reached this way")
        assert guarding._open.get(id(fx)) is None, "a block stayed open"
        out = fx.run(x, stream_ptr=S.ptr)  # (the block has ended: the SDK's own call)
        assert not isinstance(out, ss.SafeOutput)
        sim.synchronize_device()
    gone = weakref.ref(c)
    c.close()
    del c, fx
    gc.collect()
    assert gone() is None, "something still holds the contract"


@pytest.mark.parametrize("way", list(WAYS))
def test_a_ctrl_c_entering_an_inner_block_leaves_the_outer_one_open(way: str) -> None:
    """An interrupt before the inner block opened ends no block: the outer one of the same contract stays open."""
    sim, fx, S, x = _effect()
    c = ss.StreamContract(fx, S, input_stream=S)
    with sim.use_stream(S):
        with WAYS[way](c):
            try:
                with CtrlCAt(CODES["enter_block"], "call"), WAYS[way](c):
                    pass
            except KeyboardInterrupt:
                pass
            assert isinstance(fx.run(x), ss.SafeOutput), "the outer block was ended by the inner one's interrupt"
        sim.synchronize_device()


@pytest.mark.parametrize("way", list(WAYS))
def test_a_ctrl_c_in_an_inner_blocks_host_wait_leaves_the_outer_one_open(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner block had ended when its exit's host wait was interrupted: the outer one stays open."""
    sim, fx, S, x = _effect()
    c = ss.StreamContract(fx, S, input_stream=S)
    real = type(c)._synchronize
    fired: list[int] = []

    def interrupted_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(c), "_synchronize", interrupted_wait)
    with sim.use_stream(S):
        with WAYS[way](c):
            try:
                with WAYS[way](c):
                    fx.run(x)
            except KeyboardInterrupt:
                pass
            assert fired and isinstance(fx.run(x), ss.SafeOutput), "the outer block was ended by the inner one's interrupt"
        sim.synchronize_device()
