"""DLPack constants and the model's stand-in for a capsule."""

from __future__ import annotations

from typing import Any

__all__ = ["DLPACK_CPU", "DLPACK_CUDA", "SimCapsule", "check_input_device", "require_cuda_input"]

DLPACK_CPU = 1
DLPACK_CUDA = 2


def check_input_device(what: str, obj: Any, dev_type: int, dev_id: int, device: int) -> None:
    """Raise :class:`~streamsafe.errors.InputArrayError` unless the input is on CUDA ``device``."""
    from .errors import InputArrayError

    if dev_type != DLPACK_CUDA:
        raise InputArrayError(
            what, obj, f"it lives on DLPack device type {dev_type}, not CUDA ({DLPACK_CUDA})",
            f"Move it to the GPU first (e.g. tensor.to('cuda:{device}')).",
        )
    if dev_id != device:
        raise InputArrayError(
            what, obj, f"it is on CUDA device {dev_id} but the effect runs on device {device}",
            f"Copy it to device {device}, or use an effect created with device={dev_id}.",
        )


def require_cuda_input(what: str, obj: Any, device: int) -> None:
    """Raise :class:`~streamsafe.errors.InputArrayError` unless ``obj`` speaks DLPack from CUDA ``device``."""
    from .errors import InputArrayError

    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise InputArrayError(
            what, obj, "it has no __dlpack__/__dlpack_device__ (a CUDA array is required)",
            "Pass a torch/CuPy/JAX CUDA array.",
        )
    dev_type, dev_id = obj.__dlpack_device__()
    check_input_device(what, obj, int(dev_type), int(dev_id), device)


class SimCapsule:
    """What a simulated producer's ``__dlpack__`` returns: importable once, like a PyCapsule.

    ``name`` follows the DLPack convention: ``"dltensor"`` (or ``"dltensor_versioned"``)
    until consumed, then ``"used_dltensor"`` (``"used_dltensor_versioned"``).
    """

    __slots__ = ("_array", "versioned", "_consumed")

    def __init__(self, array: Any, *, versioned: bool = False) -> None:
        self._array = array
        self.versioned = versioned
        self._consumed = False

    @property
    def name(self) -> str:
        base = "dltensor_versioned" if self.versioned else "dltensor"
        return f"used_{base}" if self._consumed else base

    @property
    def consumed(self) -> bool:
        return self._consumed

    def consume(self) -> Any:
        """Take the tensor out; a second call raises :class:`BufferError` as a real capsule does."""
        if self._consumed:
            raise BufferError(
                f"this DLPack capsule was already imported (its name is now {self.name!r}); a capsule "
                "can be consumed once. Import it once and copy the result, or ask the producer for a new capsule."
            )
        self._consumed = True
        return self._array

    def __repr__(self) -> str:
        return f"<SimCapsule {self.name!r}>"


def capsule_data_key(capsule: Any) -> Any:
    """Something that identifies the memory a capsule points at: the model's buffer, or the
    data pointer of a real ``dltensor``/``dltensor_versioned`` capsule (read without consuming it).
    ``None`` when it cannot be read."""
    if isinstance(capsule, SimCapsule):
        return capsule._array.buffer
    import ctypes

    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype = ctypes.c_char_p
    api.PyCapsule_GetName.argtypes = [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    try:
        name = api.PyCapsule_GetName(capsule)
    except Exception:
        return None
    if name not in (b"dltensor", b"dltensor_versioned"):
        return None
    ptr = api.PyCapsule_GetPointer(capsule, name)
    if not ptr:
        return None
    # DLManagedTensor starts with DLTensor (data first); the versioned struct puts
    # version (8 bytes), manager_ctx, deleter and flags (8 bytes each) before it.
    offset = 0 if name == b"dltensor" else 32
    return ctypes.c_void_p.from_address(ptr + offset).value
