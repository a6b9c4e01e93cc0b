"""Simulated arrays follow the DLPack producer rules of a torch tensor."""

from __future__ import annotations

import numpy as np
import pytest

import streamsafe as ss


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(scheduler="adversarial")


def produce(sim: ss.sim.SimBackend, producer: ss.Stream) -> object:
    arr = sim.empty(4, name="frame")
    with sim.use_stream(producer):
        sim.fill(arr, 3.0, name="producer writes frame")
    return arr


def test_dlpack_with_consumer_stream_orders_it_after_the_producer(sim: ss.sim.SimBackend) -> None:
    producer, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    arr = produce(sim, producer)
    with sim.use_stream(producer):
        view = sim.from_dlpack(arr, stream=consumer)
    out = sim.copy(view, consumer, name="consumer copies")
    assert np.array_equal(sim.download(out, consumer), np.full(4, 3.0))
    assert sim.races == []


def test_dlpack_stream_none_means_no_sync_like_torch(sim: ss.sim.SimBackend) -> None:
    producer, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    arr = produce(sim, producer)
    with sim.use_stream(producer):
        capsule = arr.__dlpack__()  # what the SDK does: no stream
    view = sim.from_dlpack(capsule)
    out = sim.copy(view, consumer, name="consumer copies")
    assert not np.array_equal(sim.download(out, consumer), np.full(4, 3.0))
    assert [(r.first.op, r.second.op) for r in sim.races] == [("producer writes frame", "consumer copies")]


def test_dlpack_rejects_stream_zero_and_copy(sim: ss.sim.SimBackend) -> None:
    arr = sim.empty(2)
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        arr.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="copy=True"):
        arr.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot export"):
        arr.__dlpack__(dl_device=(1, 0))


def test_capsule_is_consumed_once(sim: ss.sim.SimBackend) -> None:
    capsule = sim.empty(2).__dlpack__(stream=-1, max_version=(1, 0))
    assert capsule.name == "dltensor_versioned"
    sim.from_dlpack(capsule)
    assert capsule.name == "used_dltensor_versioned"
    with pytest.raises(BufferError, match="already imported"):
        sim.from_dlpack(capsule)


def test_dlpack_device(sim: ss.sim.SimBackend) -> None:
    assert sim.empty(2).__dlpack_device__() == (2, 0)


def test_capsule_data_key_reads_a_real_capsule_without_consuming_it() -> None:
    import ctypes

    from streamsafe._dlpack import capsule_data_key

    data = (ctypes.c_uint64 * 8)(0xABC000, 0, 0, 0, 0, 0, 0, 0)
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
    plain = new(ctypes.addressof(data), b"dltensor", None)
    versioned_data = (ctypes.c_uint64 * 8)(1, 0, 0, 0, 0xDEF000, 0, 0, 0)  # version (major 1, minor 0), ctx, deleter, flags, then data
    versioned = new(ctypes.addressof(versioned_data), b"dltensor_versioned", None)
    assert capsule_data_key(plain) == 0xABC000 and capsule_data_key(plain) == 0xABC000
    assert capsule_data_key(versioned) == 0xDEF000
    assert capsule_data_key(new(ctypes.addressof(data), b"used_dltensor", None)) is None
    assert capsule_data_key(object()) is None


@pytest.mark.parametrize("versioned", [False, True])
def test_read_capsule_reads_a_tensor_in_place_and_leaves_the_capsule_importable(versioned: bool) -> None:
    """The emulated SDK's input reader: address (with the byte offset), device, shape, strides and dtype
    of a real capsule, which the producer still owns afterwards (a consumer can import it)."""
    from streamsafe._dlpack import read_capsule

    base = np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
    view = base[:, 1:, ::2]  # an offset into base, and strides
    capsule = view.__dlpack__(max_version=(1, 0)) if versioned else view.__dlpack__()
    got = read_capsule(capsule)
    assert got is not None
    assert got.ptr == view.__array_interface__["data"][0] and got.ptr != base.__array_interface__["data"][0]
    assert (got.device_type, got.device_id) == (1, 0)
    assert got.shape == (2, 2, 3) and got.strides == (15, 5, 2)
    assert (got.code, got.bits, got.lanes) == (2, 32, 1)
    assert read_capsule(capsule) == got  # reading again consumes nothing

    class Producer:  # hands numpy the same capsule: it is still unconsumed
        def __dlpack__(self, **kw: object) -> object:
            return capsule

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    assert np.array_equal(np.from_dlpack(Producer()), view)
    assert read_capsule(capsule) is None  # now consumed ("used_...")
    assert read_capsule(object()) is None


def test_the_emulators_input_layout_rules() -> None:
    """What graph mode copies with its own kernel (C-contiguous, NumPy dtypes) and what it leaves to CuPy."""
    from streamsafe._dlpack import CapsuleTensor
    from streamsafe.testing._engines import _LAYOUTS, TakenInput, _c_contiguous, _layout, _numpy_dtype

    assert _c_contiguous((3, 4, 5), None) and _c_contiguous((3, 4, 5), (20, 5, 1))
    assert _c_contiguous((3, 1, 5), (5, 99, 1))  # a dimension of size 1 may have any stride
    assert not _c_contiguous((3, 4, 5), (1, 3, 12)) and not _c_contiguous((3, 4, 5), (40, 10, 2))
    assert _c_contiguous((3, 0, 5), (7, 7, 7))  # empty
    for code, bits, want in ((2, 32, np.float32), (1, 32, np.uint32), (0, 8, np.int8), (6, 8, np.bool_), (2, 16, np.float16)):
        assert _numpy_dtype(code, bits, 1) == np.dtype(want)
    assert _numpy_dtype(4, 16, 1) is None  # bfloat16
    assert _numpy_dtype(2, 32, 4) is None  # a vector type
    for code, bits in ((2, 8), (6, 16), (6, 32), (0, 128), (1, 256), (2, 24), (2, 128)):  # no NumPy type (CuPy decides)
        assert _numpy_dtype(code, bits, 1) is None, (code, bits)

    def taken(ptr: int, strides: tuple[int, ...] | None, bits: int) -> TakenInput:
        tensor = CapsuleTensor(ptr, 2, 0, (3, 4, 5), strides, 2, bits, 1)
        return TakenInput(object(), ptr, tensor.shape, _layout(tensor))

    t = taken(0x1000, (1, 3, 12), 32)
    assert (t.nbytes, t.contiguous, t.shape, t.dtype, t.ptr) == (240, False, (3, 4, 5), np.dtype(np.float32), 0x1000)
    # layouts are remembered by shape, strides and dtype: another of any of them is worked out anew
    compact, half, again = taken(0x2000, None, 32), taken(0x3000, (1, 3, 12), 16), taken(0x4000, (1, 3, 12), 32)
    assert [(t.nbytes, t.contiguous) for t in (compact, half, again)] == [(240, True), (120, False), (240, False)]
    assert _LAYOUTS[((3, 4, 5), (1, 3, 12), 2, 16, 1)] == (np.dtype(np.float16), 120, False)  # (shape, strides, code, bits, lanes)
    assert _layout(CapsuleTensor(0, 2, 0, (2, 2), None, 4, 16, 1))[0] is None  # bfloat16: left to CuPy
