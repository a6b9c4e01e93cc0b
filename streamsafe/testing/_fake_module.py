"""Putting an emulated SDK module in ``sys.modules`` under the SDK's name, and taking it out again.

What ``install_fake_nvvfx()`` and ``install_fake_pynvvideocodec()`` (and their blocks and pytest fixtures)
share: a real module already imported is kept unless forced (then restored when the emulation goes), a
second install is harmless, and a block or a fixture undoes only what it did.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import BackendUnavailableError

__all__ = ["MARK", "ModuleFake"]

MARK = "__streamsafe_fake__"
"""The attribute an emulated module carries (``True``)."""


class ModuleFake:
    """The emulated module ``name``, made by ``build()`` (which sets :data:`MARK` on it)."""

    def __init__(self, name: str, build: Callable[[], types.ModuleType], uninstall: str) -> None:
        self.name = name
        self.build = build
        self.uninstall_call = uninstall
        """The public call that undoes :meth:`install` (for the message of a refused install)."""
        self._saved: list[Any] = []

    @staticmethod
    def is_fake(module: Any) -> bool:
        """Whether ``module`` is one of streamsafe's emulations."""
        return module is not None and bool(getattr(module, MARK, False))

    def install(self, *, force: bool = False) -> types.ModuleType:
        """Put the emulation in ``sys.modules``; returns it. A real module already imported is kept unless
        ``force`` (then :meth:`uninstall` puts it back); installing twice returns the one already there."""
        current = sys.modules.get(self.name)
        if self.is_fake(current):
            return current  # type: ignore[return-value]
        if current is not None and not force:
            raise BackendUnavailableError(  # (a StreamsafeError and a RuntimeError)
                f"emulated {self.name}", f"a real {self.name} module is already imported",
                f"Pass force=True to shadow it with the emulation ({self.uninstall_call} puts it back)",
            )
        self._saved.append(current)
        mod = self.build()
        sys.modules[self.name] = mod
        return mod

    def uninstall(self) -> None:
        """Remove the emulation and restore what was there before (if anything)."""
        if not self.is_fake(sys.modules.get(self.name)):
            return
        previous = self._saved.pop() if self._saved else None
        if previous is None:
            del sys.modules[self.name]
        else:
            sys.modules[self.name] = previous

    @contextlib.contextmanager
    def block(self, *, force: bool = False) -> Iterator[types.ModuleType]:
        """The emulation inside the block, undone after it only if the block installed it."""
        already = self.is_fake(sys.modules.get(self.name))
        mod = self.install(force=force)
        try:
            yield mod
        finally:
            if not already and sys.modules.get(self.name) is mod:
                self.uninstall()

    def for_test(self, monkeypatch: Any) -> types.ModuleType:
        """A pytest fixture's module: a session-wide install as it is; else a new emulation put in place through
        ``monkeypatch`` (whatever ``sys.modules`` held is back after the test)."""
        current = sys.modules.get(self.name)
        if self.is_fake(current):
            return current  # type: ignore[return-value]
        mod = self.build()
        monkeypatch.setitem(sys.modules, self.name, mod)
        return mod
