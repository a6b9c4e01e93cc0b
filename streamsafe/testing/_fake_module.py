"""Putting an emulated SDK module in ``sys.modules`` under the SDK's name, and taking it out again.

What ``install_fake_nvvfx()`` and ``install_fake_pynvvideocodec()`` (and their blocks and pytest fixtures)
share: a real module already imported is kept unless forced (then it and its submodules are restored when
the emulation goes), a second install is harmless, and a block or a fixture undoes only what it did. An
emulated package's submodules (the module attributes named ``<name>.<sub>``, at any depth) go in and out
of ``sys.modules`` with it.
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
        self.install_call = "streamsafe.testing." + uninstall[2:]
        """The public call that does :meth:`install` (for messages that tell where the emulation is)."""
        self._saved: list[dict[str, Any]] = []
        """For each install that shadowed something: the ``sys.modules`` entries under :attr:`name` it took out."""

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
        self._saved.append({key: sys.modules.pop(key) for key in self._entries()})
        mod = self.build()
        sys.modules.update(self.tree(mod))
        return mod

    def uninstall(self) -> None:
        """Remove the emulation (with its submodules) and restore what was there before (if anything)."""
        if not self.is_fake(sys.modules.get(self.name)):
            return
        previous = self._saved.pop() if self._saved else {}
        for key in self._entries():
            del sys.modules[key]
        sys.modules.update(previous)

    def _entries(self) -> list[str]:
        """The ``sys.modules`` keys of :attr:`name` and its submodules, now."""
        prefix = self.name + "."
        return [key for key in list(sys.modules) if key == self.name or key.startswith(prefix)]

    def tree(self, mod: types.ModuleType) -> dict[str, types.ModuleType]:
        """``mod`` and its submodules by their names: ``mod`` under :attr:`name`, then each module attribute
        whose ``__name__`` is ``<its parent's name>.<attribute>``, at any depth."""
        found = {self.name: mod}
        stack = [mod]
        while stack:
            parent = stack.pop()
            for attr, value in vars(parent).items():
                if isinstance(value, types.ModuleType) and value.__name__ == f"{parent.__name__}.{attr}":
                    found[value.__name__] = value
                    stack.append(value)
        return found

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
        for key in self._entries():  # (a real module's submodules too: the test sees the emulation's only)
            monkeypatch.delitem(sys.modules, key)
        for key, module in self.tree(mod).items():
            monkeypatch.setitem(sys.modules, key, module)
        return mod
