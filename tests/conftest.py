"""Shared fixtures. Tests marked ``gpu`` skip cleanly on machines without a CUDA GPU."""

from __future__ import annotations

import importlib.util
import os

import pytest

# Every replayed steady-state call is planned again and compared with its recipe (streamsafe.steady).
os.environ.setdefault("STREAMSAFE_CHECK_REPLAY", "1")

import streamsafe as ss
from streamsafe import steady

# (set again here: the pytest plugin that provides fake_nvvfx imports streamsafe before this file)
steady.check_replay = os.environ["STREAMSAFE_CHECK_REPLAY"] == "1"


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("cuda.bindings") is None:
        return "cuda.bindings is not installed"
    from streamsafe.backend.cuda import CudaBackend

    return CudaBackend.probe()


_GPU_SKIP = _gpu_reason()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _GPU_SKIP is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {_GPU_SKIP}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the tests skipped for want of a GPU (and one a reason for any other skip), not a line each."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    gpu = 0
    for report in skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if "gpu" in getattr(report, "keywords", {}) or reason.startswith("needs a CUDA GPU"):
            gpu += 1
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    if gpu:
        terminalreporter.write_line(f"{gpu} GPU tests skipped: {f'needs a CUDA GPU: {_GPU_SKIP}' if _GPU_SKIP else 'see -rs'}")
    for reason, n in sorted(reasons.items()):
        terminalreporter.write_line(f"{n} skipped: {reason}")


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    """A SimBackend whose scheduler runs newest-ready-first and only when the host waits."""
    return ss.sim.SimBackend(scheduler="adversarial")
