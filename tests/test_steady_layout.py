"""A kept frame is reused only for inputs the planner would plan the same way: where ``auto`` may copy the inputs
(no ``input_stream`` declared), a torch input's layout decides whether it is copied (only one whose elements fill
their memory is), so its strides are a fact of the call; a layout without strides (sparse) is always planned.

torch is not installed here: a stand-in tensor type with torch's names is what :mod:`streamsafe.steady` reads
(``get_device()``, ``shape``, ``stride()``), and the planner's rule is :func:`streamsafe.inputs._copyable`. The GPU
lane runs the same with real tensors (``tests/gpu/test_contract_gpu.py``)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from streamsafe import frameworks, steady
from streamsafe.inputs import _copyable
from streamsafe.profiles.nvvfx import VIDEO_SUPER_RES
from streamsafe.steady import SteadyFrames


class Tensor:
    """A torch tensor as the steady facts read one (``__module__`` "torch": the planner calls it a torch input)."""

    __module__ = "torch"

    def __init__(self, shape: tuple[int, ...], stride: tuple[int, ...] | None, sparse: bool = False) -> None:
        self.shape, self._stride, self.is_sparse = shape, stride, sparse

    def get_device(self) -> int:
        return 0

    def stride(self) -> tuple[int, ...]:
        if self._stride is None:
            raise RuntimeError("sparse tensors do not have strides")
        return self._stride


@pytest.fixture
def torch_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    torch: Any = types.ModuleType("torch")
    torch.Tensor = Tensor
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0x5000, _cuda_getDevice=lambda: 0)
    monkeypatch.setitem(sys.modules, "torch", torch)
    facts = frameworks.TorchFacts()
    facts.refresh()
    monkeypatch.setattr(steady, "TORCH", facts)


GPU = types.SimpleNamespace(array_type=None)  # (the CUDA backend has no arrays of its own)
DENSE = Tensor((3, 16, 16), (256, 16, 1))
CROPPED = Tensor((3, 16, 16), (512, 32, 1))  # big[:, :16, :16] of a (3, 16, 32) frame: the same shape, gaps between rows
SPARSE = Tensor((3, 16, 16), None, sparse=True)


def test_the_planner_copies_a_dense_input_and_not_a_cropped_one_of_the_same_shape() -> None:
    assert _copyable(DENSE, GPU) and not _copyable(CROPPED, GPU)  # (why the layout is a fact below)


@pytest.mark.usefixtures("torch_facts")
def test_where_auto_may_copy_the_inputs_their_layout_is_a_fact() -> None:
    kept = SteadyFrames(0, GPU, None, VIDEO_SUPER_RES, copies=True)
    dense = kept.facts("run", (DENSE,), {}, False)
    assert dense is not None and dense != kept.facts("run", (CROPPED,), {}, False)
    assert kept.facts("run", (SPARSE,), {}, False) is None  # (no strides: planned every time)
    assert kept.facts("run", (DENSE,), {}, False) == dense


@pytest.mark.usefixtures("torch_facts")
def test_with_no_copies_the_layout_is_no_fact() -> None:
    kept = SteadyFrames(0, GPU, None, VIDEO_SUPER_RES)  # (a declared input stream, or another strategy: nothing copied)
    assert kept.facts("run", (DENSE,), {}, False) == kept.facts("run", (CROPPED,), {}, False) is not None


@pytest.mark.usefixtures("torch_facts")
@pytest.mark.parametrize("copies", [True, False])
def test_the_lookups_fast_path_names_the_facts_a_frame_was_kept_for(copies: bool) -> None:
    """``find``'s path for one torch tensor builds the facts ``facts()`` gives, so a frame kept for them is found (with
    the strides where ``auto`` may copy: found for the same layout, not for a crop)."""
    from streamsafe.steady import Kept

    kept = SteadyFrames(0, GPU, None, VIDEO_SUPER_RES, copies=copies)
    entry = Kept.__new__(Kept)
    entry.facts, entry.state, entry.config, entry.frame, entry.thread, entry.holds = (
        kept.facts("run", (DENSE,), {}, False), ("state",), ("config",), "the kept frame", None, ())
    kept.kept = [entry]
    ledger = types.SimpleNamespace(state=lambda: ("state",))
    assert kept.find("run", (DENSE,), {}, False, ledger, lambda effect: ("config",), None) == "the kept frame"
    found = kept.find("run", (CROPPED,), {}, False, ledger, lambda effect: ("config",), None)
    assert (found is None) if copies else (found == "the kept frame")
