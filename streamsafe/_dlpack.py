"""DLPack: device constants, in-place reads of a capsule's tensor, and the checks an input must pass."""

from __future__ import annotations

import ctypes
import datetime
import struct
import types
from typing import Any, NamedTuple

from .errors import HostArrayError, InputArrayError, InputDeviceError
from .frameworks import framework_of

__all__ = [
    "DLPACK_CPU",
    "DLPACK_CUDA",
    "CapsuleTensor",
    "read_capsule",
    "check_input_device",
    "require_cuda_input",
    "describe_array",
    "array_key",
    "CAPSULE",
    "is_capsule",
]

DLPACK_CPU = 1
DLPACK_CUDA = 2

DLPACK_DEVICE_NAMES = {
    1: "host memory (CPU)",
    3: "pinned host memory (CUDA host)",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCm",
    11: "ROCm host memory",
    12: "an external device",
    13: "CUDA managed memory",
    14: "oneAPI",
    15: "WebGPU",
    16: "Hexagon",
}
"""DLPack ``DLDeviceType`` values other than CUDA (2), named for messages."""


_OWN: dict[type, bool] = {}

CAPSULE: type = getattr(types, "CapsuleType", None) or type(datetime.datetime_CAPI)  # type: ignore[attr-defined]
"""Python's capsule type (``PyCapsule``): what ``__dlpack__`` returns."""


def is_capsule(value: Any, *, named: bool = False) -> bool:
    """Whether ``value`` is a DLPack capsule as a producer hands it out: a ``PyCapsule``, or a backend's own (the
    model's; not one of its arrays, which are producers). ``named``: a ``PyCapsule`` must also be named as DLPack's
    are, ``dltensor`` or ``dltensor_versioned`` (one ``PyCapsule_GetName`` call)."""
    cls = type(value)
    if cls is CAPSULE:
        return not named or _CAPSULE_NAME(value) in (b"dltensor", b"dltensor_versioned")
    return backend_own(cls) and not hasattr(cls, "__dlpack__")


_CAPSULE_NAME: Any = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
"""A private prototype of ``PyCapsule_GetName``."""


def backend_own(cls: type) -> bool:
    """Whether ``cls`` is a backend's own array or capsule type (it has ``__streamsafe_key__``: the model's). Cached
    per type (a type's missing attribute costs an exception each time it is asked)."""
    own = _OWN.get(cls)
    if own is None:
        own = _OWN[cls] = hasattr(cls, "__streamsafe_key__")
    return own


def array_key(arr: Any) -> Any:
    """What identifies an array's memory: a backend's own array's key (``__streamsafe_key__``: the model's
    buffer), else its data pointer (torch's ``data_ptr()``, CuPy's ``data.ptr``), else ``None``."""
    if backend_own(type(arr)):
        return arr.__streamsafe_key__
    data_ptr = getattr(arr, "data_ptr", None)  # torch (first: a tensor's .data is a new tensor each time)
    if callable(data_ptr):
        return data_ptr()
    data = getattr(arr, "data", None)
    ptr = getattr(data, "ptr", None)  # CuPy
    if isinstance(ptr, int):
        return ptr
    return None


def describe_array(obj: Any) -> str:
    """``module.Type (shape ..., dtype ...)``: an array named by type and shape, never by its data."""
    cls = type(obj)
    module = cls.__module__ or ""
    name = cls.__qualname__ if module in ("", "builtins") else f"{module}.{cls.__qualname__}"
    facts = []
    shape = getattr(obj, "shape", None)
    if shape is not None and not callable(shape):
        try:
            facts.append(f"shape {tuple(int(d) for d in shape)}")
        except (TypeError, ValueError):
            pass
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and not callable(dtype):
        facts.append(f"dtype {dtype}")
    return f"{name} ({', '.join(facts)})" if facts else name


def _to_device_fix(obj: Any, device: int) -> str | None:
    """How the array's own framework copies it to CUDA ``device`` (from the host or another GPU); ``None``
    for a framework streamsafe does not know."""
    fw = framework_of(obj)
    if fw == "torch":
        return f"x.to('cuda:{device}') (or x.cuda({device}))"
    if fw == "numpy":
        return f"torch.from_numpy(x).to('cuda:{device}'), or cupy.asarray(x) inside `with cupy.cuda.Device({device}):`"
    if fw == "cupy":
        return f"cupy.copy(x) inside `with cupy.cuda.Device({device}):`"
    if fw == "jax":
        return f"jax.device_put(x, jax.devices('gpu')[{device}])"
    if type(obj).__name__ == "SimArray":  # the model's own arrays
        return f"on the model, backend.array(backend.download(x), device={device}), or allocate it there: backend.empty(..., device={device})"
    return None


def check_input_device(what: str, obj: Any, dev_type: int, dev_id: int, device: int) -> None:
    """Raise unless the input is on CUDA ``device``: :class:`~streamsafe.errors.HostArrayError` for
    memory that is not on a GPU, :class:`~streamsafe.errors.InputDeviceError` (an
    :class:`~streamsafe.errors.InputArrayError` and a :class:`~streamsafe.errors.DeviceMismatchError`)
    for a GPU array of another device. Both messages name the array by type and shape only."""
    if dev_type != DLPACK_CUDA:
        where = DLPACK_DEVICE_NAMES.get(dev_type, "a device that is not CUDA")
        raise HostArrayError(
            what, obj, describe_array(obj),
            f"it lives in {where}: DLPack device type {dev_type}, not CUDA ({DLPACK_CUDA})",
            f"Move it to the GPU first: {_to_device_fix(obj, device) or f'a torch or CuPy array on cuda:{device}'}.",
        )
    if dev_id != device:
        raise InputDeviceError(
            what, obj, describe_array(obj), dev_id, device,
            f"Copy it to device {device} first: {_to_device_fix(obj, device) or 'with the framework that made it'}; "
            f"or use an effect created with device={dev_id}, one effect per GPU.",
        )


def require_cuda_input(what: str, obj: Any, device: int) -> None:
    """Raise :class:`~streamsafe.errors.InputArrayError` unless ``obj`` speaks DLPack from CUDA ``device``
    (see :func:`check_input_device` for the subclasses raised)."""
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise InputArrayError(
            what, obj, "it has no __dlpack__/__dlpack_device__ (a CUDA array is required)",
            "Pass a torch/CuPy/JAX CUDA array.",
        )
    dev_type, dev_id = obj.__dlpack_device__()
    check_input_device(what, obj, int(dev_type), int(dev_id), device)


def capsule_data_key(capsule: Any) -> Any:
    """Something that identifies the memory a capsule points at: what a capsule object of a backend's own
    says (``__streamsafe_key__``: the model's buffer), or the data pointer of a real
    ``dltensor``/``dltensor_versioned`` capsule (read without consuming it). ``None`` when it cannot be read."""
    if backend_own(type(capsule)):
        return capsule.__streamsafe_key__
    # DLManagedTensor starts with DLTensor, whose first field is the data pointer: for the plain capsule the
    # SDK makes, one call reads it (a name mismatch raises)
    try:
        return _CAPSULE_WORDS(capsule, b"dltensor")[0] or None
    except Exception:
        pass
    address = _versioned_address(capsule)
    return ctypes.c_void_p.from_address(address).value if address is not None else None


def _dltensor_address(capsule: Any) -> int | None:
    """The address of the ``DLTensor`` in a raw ``dltensor`` or ``dltensor_versioned`` capsule, read
    without consuming it; ``None`` for a consumed capsule (``used_...``) or anything else."""
    try:  # one call for the plain capsule the SDK makes (a name mismatch raises)
        return _CAPSULE_API(capsule, b"dltensor") or None
    except Exception:
        return _versioned_address(capsule)


def _versioned_address(capsule: Any) -> int | None:
    """The address of the ``DLTensor`` in a raw ``dltensor_versioned`` capsule of major version 1, else ``None``."""
    try:
        # the versioned struct puts version (8 bytes), manager_ctx, deleter and flags (8 bytes each) before DLTensor
        ptr = _CAPSULE_API(capsule, b"dltensor_versioned")
    except Exception:
        return None
    if not ptr or ctypes.c_uint32.from_address(ptr).value != 1:  # (a major version this reader does not know)
        return None
    return int(ptr) + 32


class CapsuleTensor(NamedTuple):
    """The ``DLTensor`` a capsule holds, read without consuming the capsule (:func:`read_capsule`)."""

    ptr: int
    """The first element's address (``data + byte_offset``)."""
    device_type: int
    device_id: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    """In elements; ``None``: C-contiguous (the DLPack convention)."""
    code: int
    """``DLDataTypeCode``: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool, ..."""
    bits: int
    lanes: int


_DLTENSOR = struct.Struct("<QiiiBBHQQQ")
"""``DLTensor``: data, device (type, id), ndim, dtype (code, bits, lanes), shape, strides, byte_offset."""
_DLTENSOR_BYTES = ctypes.c_char * _DLTENSOR.size
_INT64S: dict[int, tuple[struct.Struct, Any]] = {}


def read_capsule(capsule: Any) -> CapsuleTensor | None:
    """The tensor a raw ``dltensor`` or ``dltensor_versioned`` capsule describes, read in place: the
    capsule is neither consumed nor renamed, so its producer still owns the memory (and frees it
    when the capsule goes). ``None`` for anything else (a consumed capsule, another object).
    Does not block; touches host memory only."""
    address = _dltensor_address(capsule)
    if address is None:
        return None
    data, dev_type, dev_id, ndim, code, bits, lanes, shape_ptr, strides_ptr, byte_offset = _DLTENSOR.unpack_from(
        _DLTENSOR_BYTES.from_address(address)
    )
    if ndim < 0 or ndim > 64 or (ndim and not shape_ptr):
        return None
    ints = _INT64S.get(ndim)
    if ints is None:
        ints = _INT64S[ndim] = (struct.Struct(f"<{ndim}q"), ctypes.c_char * (8 * ndim))
    shape = ints[0].unpack_from(ints[1].from_address(shape_ptr)) if ndim else ()
    strides = ints[0].unpack_from(ints[1].from_address(strides_ptr)) if ndim and strides_ptr else None
    # (tuple.__new__: the NamedTuple's own __new__ is a Python function, a third of this call's cost)
    return tuple.__new__(CapsuleTensor, (data + byte_offset, dev_type, dev_id, shape, strides, code, bits, lanes))


_CAPSULE_API: Any = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
"""A private prototype of ``PyCapsule_GetPointer`` (setting ``ctypes.pythonapi``'s shared one on every call
cost microseconds and changed it for everyone)."""
_CAPSULE_WORDS: Any = ctypes.PYFUNCTYPE(ctypes.POINTER(ctypes.c_uint64), ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
"""``PyCapsule_GetPointer`` returning the pointer as an array of 64-bit words: the first is the data pointer of
the ``DLTensor`` a plain ``dltensor`` capsule holds."""
