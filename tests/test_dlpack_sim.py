"""Simulated arrays follow the DLPack producer rules of a torch tensor."""

from __future__ import annotations

import numpy as np
import pytest

import streamsafe as ss


@pytest.fixture
def sim() -> ss.SimBackend:
    return ss.SimBackend(scheduler="adversarial")


def produce(sim: ss.SimBackend, producer: ss.Stream) -> object:
    arr = sim.empty(4, name="frame")
    with sim.use_stream(producer):
        sim.fill(arr, 3.0, name="producer writes frame")
    return arr


def test_dlpack_with_consumer_stream_orders_it_after_the_producer(sim: ss.SimBackend) -> None:
    producer, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    arr = produce(sim, producer)
    with sim.use_stream(producer):
        view = sim.from_dlpack(arr, stream=consumer)
    out = sim.copy(view, consumer, name="consumer copies")
    assert np.array_equal(sim.download(out, consumer), np.full(4, 3.0))
    assert sim.races == []


def test_dlpack_stream_none_means_no_sync_like_torch(sim: ss.SimBackend) -> None:
    producer, consumer = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=True)
    arr = produce(sim, producer)
    with sim.use_stream(producer):
        capsule = arr.__dlpack__()  # what the SDK does: no stream
    view = sim.from_dlpack(capsule)
    out = sim.copy(view, consumer, name="consumer copies")
    assert not np.array_equal(sim.download(out, consumer), np.full(4, 3.0))
    assert [(r.first.op, r.second.op) for r in sim.races] == [("producer writes frame", "consumer copies")]


def test_dlpack_rejects_stream_zero_and_copy(sim: ss.SimBackend) -> None:
    arr = sim.empty(2)
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        arr.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="copy=True"):
        arr.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="cannot export"):
        arr.__dlpack__(dl_device=(1, 0))


def test_capsule_is_consumed_once(sim: ss.SimBackend) -> None:
    capsule = sim.empty(2).__dlpack__(stream=-1, max_version=(1, 0))
    assert capsule.name == "dltensor_versioned"
    sim.from_dlpack(capsule)
    assert capsule.name == "used_dltensor_versioned"
    with pytest.raises(BufferError, match="already imported"):
        sim.from_dlpack(capsule)


def test_dlpack_device(sim: ss.SimBackend) -> None:
    assert sim.empty(2).__dlpack_device__() == (2, 0)


def test_capsule_data_key_reads_a_real_capsule_without_consuming_it() -> None:
    import ctypes

    from streamsafe._dlpack import capsule_data_key

    data = (ctypes.c_uint64 * 8)(0xABC000, 0, 0, 0, 0, 0, 0, 0)
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
    plain = new(ctypes.addressof(data), b"dltensor", None)
    versioned_data = (ctypes.c_uint64 * 8)(0, 0, 0, 0, 0xDEF000, 0, 0, 0)  # version, ctx, deleter, flags, then data
    versioned = new(ctypes.addressof(versioned_data), b"dltensor_versioned", None)
    assert capsule_data_key(plain) == 0xABC000 and capsule_data_key(plain) == 0xABC000
    assert capsule_data_key(versioned) == 0xDEF000
    assert capsule_data_key(new(ctypes.addressof(data), b"used_dltensor", None)) is None
    assert capsule_data_key(object()) is None
