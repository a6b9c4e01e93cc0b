"""streamsafe: safe, cheap stream ordering for GPU video effects across PyTorch, CuPy and JAX.

Import never needs a GPU, a driver, or any array framework: the CUDA backend loads
lazily, and :class:`SimBackend` models CUDA ordering in pure Python.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__
from .backend import SimBackend, current_backend, cuda_available, use_backend
from .sim.schedule import AdversarialScheduler, ChoiceScheduler, InOrderScheduler, RandomScheduler
from .sim.clocks import HOST, VectorClock, is_ordered_after
from .contract import StreamContract, stream_contract, stream_safe
from .errors import (
    ArgumentError,
    BackendUnavailableError,
    ConcurrentUseError,
    CudaDriverError,
    DeviceMismatchError,
    EffectConfigError,
    EffectStateError,
    EnvironmentSettingError,
    FrameworkUnavailableError,
    MissingCallError,
    HostArrayError,
    InputArrayError,
    InputDeviceError,
    NotAnEffectError,
    RaceError,
    StaleOutputError,
    StrategyError,
    StreamsafeError,
    StreamTypeError,
    StreamValueError,
    UnguardedChangeError,
)
from .class_guard import ClassGuard, guard, unguard
from .ledger import Ledger
from .outputs import JaxDLPackAdapter, SafeImage, SafeOutput
from .plan import Fence, FencePlan, plan_fences
from .sim.races import Access, Race
from .sanitize import sanitize
from .strategy import Strategy, StrategyName
from .streams import Stream, StreamKind, as_stream, implicitly_ordered

__all__ = [
    "__version__",
    "Access",
    "AdversarialScheduler",
    "BackendUnavailableError",
    "ChoiceScheduler",
    "ClassGuard",
    "ConcurrentUseError",
    "CudaBackend",
    "CudaDriverError",
    "DeviceMismatchError",
    "EffectConfigError",
    "EffectStateError",
    "Fence",
    "FencePlan",
    "HOST",
    "EnvironmentSettingError",
    "ArgumentError",
    "MissingCallError",
    "FrameworkUnavailableError",
    "HostArrayError",
    "InputArrayError",
    "InputDeviceError",
    "NotAnEffectError",
    "JaxDLPackAdapter",
    "Ledger",
    "InOrderScheduler",
    "Race",
    "RaceError",
    "RandomScheduler",
    "SafeImage",
    "SafeOutput",
    "SimBackend",
    "StaleOutputError",
    "Strategy",
    "StrategyError",
    "StrategyName",
    "StreamContract",
    "Stream",
    "StreamKind",
    "StreamTypeError",
    "StreamValueError",
    "StreamsafeError",
    "UnguardedChangeError",
    "VectorClock",
    "as_stream",
    "cuda_available",
    "current_backend",
    "guard",
    "implicitly_ordered",
    "is_ordered_after",
    "plan_fences",
    "sanitize",
    "stream_contract",
    "stream_safe",
    "unguard",
    "use_backend",
]


_SUBPACKAGES = ("testing", "bench", "tools")
"""Subpackages reachable as attributes without their own import (imported on first use)."""


def __getattr__(name: str) -> Any:
    if name == "CudaBackend":  # lazy: needs cuda.bindings, and a driver to construct
        from .backend.cuda import CudaBackend

        return CudaBackend
    if name in _SUBPACKAGES:  # ss.testing.VideoSuperRes after a plain `import streamsafe as ss`
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'streamsafe' has no attribute {name!r}")
