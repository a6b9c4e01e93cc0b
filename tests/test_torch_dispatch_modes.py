"""Sanitize mode's torch observer leaves torch's dispatch-mode stack as it found it, whatever order the modes of
nested sanitize blocks began and end in (torch pops the innermost mode on any mode's exit). Needs torch (any build:
the modes are torch's own, no GPU); skips without it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: E402

from streamsafe.sim.torch_observer import TorchAccesses  # noqa: E402


class _Mirror:
    def tracked_keys(self) -> set[Any]:
        return set()


def test_an_inner_blocks_observation_begun_first_and_ended_first_leaves_the_outer_mode_on_top() -> None:
    """An outer ``ss.sanitize()`` block whose observation began late (torch not on CUDA at its start) pushes its mode
    over the inner block's: the inner's exit popped the outer's mode, and left its own reporting to an ended block."""
    inner, outer = TorchAccesses(torch, _Mirror()), TorchAccesses(torch, _Mirror())
    inner.__enter__()
    outer.__enter__()
    inner.__exit__(None, None, None)
    assert _get_current_dispatch_mode() is not None and inner.stopped and not outer.stopped
    assert (torch.zeros(2) + 1).tolist() == [1.0, 1.0]  # (ops pass through both)
    outer.__exit__(None, None, None)
    assert _get_current_dispatch_mode() is None  # (the stopped one under it went with it)


def test_in_order_the_mode_is_simply_left() -> None:
    accesses = TorchAccesses(torch, _Mirror())
    accesses.__enter__()
    accesses.__exit__(None, None, None)
    assert _get_current_dispatch_mode() is None and not accesses.stopped
