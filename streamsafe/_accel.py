"""The optional C extension :mod:`streamsafe._native`, when it was built and is not switched off.

It makes the hot path's driver calls (event records, stream waits, graph and kernel launches, a
whole bound fence program in one call) and reads DLPack capsules in place, the same work as the
``ctypes`` calls of :mod:`streamsafe.backend._held` and :mod:`streamsafe._dlpack` at a fraction of
their host cost; and it runs the steady-state frame (``streamsafe/_replay.c``: the replay, the
output's import and ``auto``'s thread check, the same steps as their Python methods). It is built by ``pip install`` where a C compiler is present; without one,
streamsafe makes the same calls through ``ctypes``, in the same order.
``STREAMSAFE_NATIVE=0`` makes streamsafe ignore it (the switch the benchmarks compare).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._env import env_flag

__all__ = ["native", "native_status"]

_NATIVE: ModuleType | None | bool = False
_WHY = ""
ABI = 2
"""The C extension's call shapes this package expects (``STREAMSAFE_NATIVE_ABI`` in ``streamsafe/_native.c``):
a build of older sources is not used."""


def native() -> ModuleType | None:
    """The :mod:`streamsafe._native` module, or ``None`` (not built, or ``STREAMSAFE_NATIVE=0``).
    Looked up once per process."""
    global _NATIVE, _WHY
    if _NATIVE is False:
        if not env_flag("STREAMSAFE_NATIVE", True, "use the C extension", strict=False):
            _NATIVE, _WHY = None, "switched off (STREAMSAFE_NATIVE=0)"
        else:
            try:
                _NATIVE, _WHY = importlib.import_module("streamsafe._native"), "built"
            except ImportError as e:
                why = "no build of it for this Python" if isinstance(e, ModuleNotFoundError) else str(e)
                _NATIVE, _WHY = None, f"not built ({why}); the same calls go through ctypes. Reinstall with a C compiler present (pip install -e .) to build it"
            else:
                abi = getattr(_NATIVE, "ABI", 1)
                if abi != ABI:
                    _NATIVE, _WHY = None, (
                        f"not used: its build is of other sources (ABI {abi}, this package's {ABI}); the same calls go "
                        "through ctypes. Rebuild it (pip install -e .) to use it"
                    )
    return _NATIVE  # type: ignore[return-value]


def native_status() -> str:
    """One line for ``streamsafe doctor``: whether the C extension is in use, and why not."""
    module = native()
    return "in use" if module is not None else _WHY
