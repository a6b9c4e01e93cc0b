"""What the array frameworks in this process say about streams.

torch, CuPy and JAX are optional: each is consulted only when the user's program has
already imported it (``sys.modules``), so asking never imports a framework and never
creates a CUDA context. Nothing here blocks the host.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import Any

__all__ = [
    "TORCH",
    "is_framework_stream",
    "TorchFacts",
    "on_torch_device",
    "cupy_external_stream",
    "framework_of",
    "framework_current_stream_handle",
    "loaded_frameworks",
    "torch_current_stream_handle",
]


def loaded_frameworks() -> list[str]:
    """The frameworks the program has imported, in the order streamsafe prefers them."""
    return [name for name in ("torch", "cupy", "jax") if name in sys.modules]


def framework_of(obj: Any) -> str | None:
    """``"torch"``, ``"cupy"``, ``"jax"``, ``"numpy"`` or ``None``, by the object's type."""
    root = (type(obj).__module__ or "").split(".", 1)[0]
    if root in ("torch", "cupy", "numpy"):
        return root
    if root in ("jax", "jaxlib"):
        return "jax"
    return None


def torch_current_stream_handle(torch: Any, device: int) -> int:
    """torch's current stream pointer on ``device``, without building a Python stream object."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return int(raw(device)) if raw is not None else int(torch.cuda.current_stream(device).cuda_stream)


def cupy_external_stream(cupy: Any, stream: Any) -> Any:
    """A CuPy stream object for ``stream``, a :class:`~streamsafe.Stream` CuPy did not create:
    ``cupy.cuda.Stream.from_external`` (through the stream's ``__cuda_stream__``) where CuPy has it
    (14 and later, where ``ExternalStream`` is deprecated), else ``cupy.cuda.ExternalStream`` on the
    stream's handle and device. Make the stream's device current first. Creates no stream; does not block."""
    cuda = cupy.cuda
    if hasattr(cuda.Stream, "from_external"):
        return cuda.Stream.from_external(stream)
    return cuda.ExternalStream(stream.handle, stream.device)


def framework_current_stream_handle(device: int, framework: str | None = None) -> tuple[int, str] | None:
    """The raw handle of the current stream of ``framework`` (or the first loaded one) on ``device``.

    Returns ``(handle, framework)`` or ``None`` when no loaded framework has a current
    stream for CUDA (JAX has none visible to Python).
    """
    names = [framework] if framework else loaded_frameworks()
    for name in names:
        if name == "torch" and "torch" in sys.modules:
            torch = sys.modules["torch"]
            if torch.cuda.is_initialized():  # initialised implies available (and is_available() costs a driver call)
                return torch_current_stream_handle(torch, device), "torch"
        if name == "cupy" and "cupy" in sys.modules:
            cupy = sys.modules["cupy"]
            with cupy.cuda.Device(device):
                return int(cupy.cuda.get_current_stream().ptr), "cupy"
    return None


class TorchFacts:
    """torch's tensor type and two raw reads (the current stream's handle, the current device), found once
    torch is loaded (``None`` until then: importing streamsafe never imports torch). Does not block."""

    __slots__ = ("tensor", "raw_stream", "current_device")

    def __init__(self) -> None:
        self.tensor: Any = None
        self.raw_stream: Any = None
        """``raw_stream(device)``: torch's current stream pointer on ``device``, as an int (no stream object)."""
        self.current_device: Any = None

    def refresh(self) -> None:
        """Look torch up, once it is imported (a tensor was seen)."""
        if self.tensor is None:
            torch = sys.modules.get("torch")
            tensor = getattr(torch, "Tensor", None)
            if tensor is not None:
                raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # type: ignore[union-attr]
                self.raw_stream = raw if raw is not None else functools.partial(torch_current_stream_handle, torch)
                self.current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device  # type: ignore[union-attr]
                self.tensor = tensor


TORCH = TorchFacts()
"""The process's :class:`TorchFacts`."""


def on_torch_device(device: int) -> Any:
    """torch's current device set to ``device`` for the block when it is another, and restored after (the
    SDK takes torch inputs with ``__dlpack__()``, which torch refuses off the tensor's device)."""
    if TORCH.current_device is not None and sys.modules["torch"].cuda.is_initialized() and TORCH.current_device() != device:
        return sys.modules["torch"].cuda.device(device)
    return contextlib.nullcontext()


def is_framework_stream(obj: Any) -> bool:
    """A stream object of torch, CuPy or cuda.core (destroyed when it goes; it holds no effect)."""
    return framework_of(obj) in ("torch", "cupy") or (type(obj).__module__ or "").startswith("cuda.")
