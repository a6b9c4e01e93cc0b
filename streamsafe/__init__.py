"""streamsafe: safe, cheap stream ordering for GPU video effects and decoders across PyTorch, CuPy and JAX.

NVIDIA's nvvfx effects (``VideoSuperRes``, ``VideoFrameGeneration``, ``TrueHDR``), PyNvVideoCodec's decoders
(``SimpleDecoder``, ``ThreadedDecoder``) and any SDK a registered profile describes. Three ways in
(:func:`stream_contract`, :func:`stream_safe`, :class:`StreamContract` for an effect, :class:`PoolContract` for a
decoder), a class guard (:func:`guard`), sanitize mode (:func:`sanitize`), the strategies and the guarded outputs
(:class:`SafeOutput` of an effect, :class:`SafeFrame` of a decoder). The errors
are in :mod:`streamsafe.errors`, the CUDA ordering model in :mod:`streamsafe.sim`, the emulated SDKs in
:mod:`streamsafe.testing`, the SDK profiles in :mod:`streamsafe.profiles`.

Import never needs a GPU, a driver, or any array framework: the CUDA backend loads lazily, and
:class:`streamsafe.sim.SimBackend` models CUDA ordering in pure Python.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from . import _env
from . import guarding as _guarding
from . import errors as errors
from . import profiles as profiles
from . import sim as sim
from ._version import __version__
from .backend import cuda_available, current_backend, use_backend
from .backend.naming import as_stream
from .blocks import stream_contract, stream_safe
from .class_guard import ClassGuard, guard, unguard
from .contract import PoolContract, StreamContract
from .errors import StreamsafeError
from .outputs import JaxDLPackAdapter, SafeFrame, SafeImage, SafeOutput
from .plan import Fence, FencePlan
from .sim.sanitize import sanitize
from .strategy import Strategy, StrategyName
from .streams import Stream, StreamKind

__all__ = [
    "__version__",
    "ClassGuard",
    "CudaBackend",
    "Fence",
    "FencePlan",
    "JaxDLPackAdapter",
    "PoolContract",
    "SafeFrame",
    "SafeImage",
    "SafeOutput",
    "Strategy",
    "StrategyName",
    "Stream",
    "StreamContract",
    "StreamKind",
    "StreamsafeError",
    "as_stream",
    "cuda_available",
    "current_backend",
    "guard",
    "sanitize",
    "stream_contract",
    "stream_safe",
    "unguard",
    "use_backend",
]


_SUBPACKAGES = ("testing", "bench", "tools")
"""Subpackages reachable as attributes without their own import (imported on first use)."""

_NEW_ERRORS = ("StreamsafeError", "ExportError", "EnvironmentSettingWarning", "HostWaitWarning", "DeviceMemoryError", "ProfileError")
"""Names of :mod:`streamsafe.errors` that ``streamsafe`` never exported (the base class is exported still)."""

_MOVED = {
    **{name: "streamsafe.errors" for name in errors.__all__ if name not in _NEW_ERRORS},
    **{name: "streamsafe.sim" for name in (
        "SimBackend", "AdversarialScheduler", "ChoiceScheduler", "InOrderScheduler", "RandomScheduler",
        "HOST", "VectorClock", "is_ordered_after", "Access", "Race",
    )},
    "implicitly_ordered": "streamsafe.streams",
    "plan_fences": "streamsafe.plan",
    "Ledger": "streamsafe.ledger",
}
"""Names ``streamsafe`` exported in 0.1.0, and the module each lives in now (they warn, then work)."""


_env.warn_unknown_names()  # (a misspelt STREAMSAFE_* switch would be ignored silently)
_guarding.watch_profiles()  # (dispatchers on the SDK classes now: a method bound before the first guard is guarded too)


def __getattr__(name: str) -> Any:
    if name == "CudaBackend":  # lazy: needs cuda.bindings, and a driver to construct
        from .backend.cuda import CudaBackend

        return CudaBackend
    if name in _SUBPACKAGES:  # ss.testing.VideoSuperRes after a plain `import streamsafe as ss`
        return importlib.import_module(f".{name}", __name__)
    where = _MOVED.get(name)
    if where is not None:
        warnings.warn(
            f"streamsafe.{name} is deprecated: it lives in {where} (use {where}.{name}); the old name goes in a "
            "later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(where), name)
    raise AttributeError(f"module 'streamsafe' has no attribute {name!r}")
