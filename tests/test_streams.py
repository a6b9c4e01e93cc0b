"""Stream identity: every accepted spelling, every rejected one, and the one ordering rule."""

from __future__ import annotations

import itertools

import pytest

import streamsafe as ss
from streamsafe.streams import LEGACY_HANDLE, PER_THREAD_HANDLE, StreamKind


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    return ss.sim.SimBackend(devices=2)


@pytest.mark.parametrize("value", [0, 1])
def test_zero_and_one_name_the_legacy_stream(sim: ss.sim.SimBackend, value: int) -> None:
    s = ss.as_stream(value, backend=sim)
    assert (s.handle, s.kind, s.device, s.ptr, s.dlpack) == (LEGACY_HANDLE, StreamKind.LEGACY, 0, 0, 1)


def test_two_names_the_per_thread_stream(sim: ss.sim.SimBackend) -> None:
    s = ss.as_stream(2, backend=sim, device=1)
    assert (s.handle, s.kind, s.device) == (PER_THREAD_HANDLE, StreamKind.PER_THREAD, 1)


def test_kind_of_a_created_stream_is_read_from_the_backend(sim: ss.sim.SimBackend) -> None:
    nb, b = sim.create_stream(non_blocking=True), sim.create_stream(non_blocking=False)
    assert ss.as_stream(nb.handle, backend=sim).kind is StreamKind.NON_BLOCKING
    assert ss.as_stream(b.handle, backend=sim).kind is StreamKind.BLOCKING


def test_none_is_the_current_stream(sim: ss.sim.SimBackend) -> None:
    assert ss.as_stream(None, backend=sim).kind is StreamKind.LEGACY
    side = sim.create_stream(non_blocking=True)
    with sim.use_stream(side):
        assert ss.as_stream(None, backend=sim) == side
    assert ss.as_stream(None, backend=sim).kind is StreamKind.LEGACY


def test_active_backend_is_used_when_none_is_named(sim: ss.sim.SimBackend) -> None:
    side = sim.create_stream()
    with ss.use_backend(sim):
        assert ss.as_stream(side.handle) == side
        assert ss.current_backend() is sim


def test_objects_with_cuda_stream_protocol(sim: ss.sim.SimBackend) -> None:
    side = sim.create_stream(non_blocking=True, device=1)

    class Foreign:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, side.handle)

    s = ss.as_stream(Foreign(), backend=sim)
    assert s == side and s.device == 1 and s.kind is StreamKind.NON_BLOCKING


def test_a_stream_value_passes_through_and_is_immutable(sim: ss.sim.SimBackend) -> None:
    side = sim.create_stream()
    assert ss.as_stream(side) is side
    with pytest.raises(AttributeError):
        side.handle = 5  # type: ignore[misc]
    assert hash(side) == hash(ss.Stream(side.device, side.handle, side.kind))


@pytest.mark.parametrize("bad", ["stream", 1.5, True, object(), [1]])
def test_unknown_objects_raise_type_error_naming_value_and_accepted(sim: ss.sim.SimBackend, bad: object) -> None:
    with pytest.raises(ss.errors.StreamTypeError) as info:
        ss.as_stream(bad, backend=sim)
    assert isinstance(info.value, TypeError)
    assert repr(bad)[:20] in str(info.value)
    assert "torch.cuda.Stream" in str(info.value) and "__cuda_stream__" in str(info.value)


def test_negative_handle_is_a_value_error(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.StreamValueError, match=r"invalid stream -1: negative handles .* Pass a stream object"):
        ss.as_stream(-1, backend=sim)


def test_unknown_handle_fails_like_the_driver(sim: ss.sim.SimBackend) -> None:
    with pytest.raises(ss.errors.CudaDriverError, match="cuStreamGetFlags failed with CUDA_ERROR_INVALID_HANDLE"):
        ss.as_stream(0xABC000, backend=sim)


def test_stream_of_another_device_is_refused(sim: ss.sim.SimBackend) -> None:
    other = sim.create_stream(device=1)
    with pytest.raises(ss.errors.DeviceMismatchError) as info:
        ss.as_stream(other, device=0)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.actual, err.expected) == (1, 0)
    assert "is on CUDA device 1, but device 0 is required" in str(err)


def test_bad_cuda_stream_protocol_value(sim: ss.sim.SimBackend) -> None:
    class Bad:
        def __cuda_stream__(self) -> int:
            return 7

    with pytest.raises(ss.errors.StreamTypeError, match=r"must return \(version, handle\)"):
        ss.as_stream(Bad(), backend=sim)


# -- the one ordering rule --------------------------------------------------------------------

KINDS = [StreamKind.LEGACY, StreamKind.PER_THREAD, StreamKind.BLOCKING, StreamKind.NON_BLOCKING]
EXPECTED = {
    # (a, b): ordered?  (different streams of one device)
    (StreamKind.LEGACY, StreamKind.PER_THREAD): True,
    (StreamKind.LEGACY, StreamKind.BLOCKING): True,
    (StreamKind.LEGACY, StreamKind.NON_BLOCKING): False,
    (StreamKind.PER_THREAD, StreamKind.BLOCKING): False,
    (StreamKind.PER_THREAD, StreamKind.NON_BLOCKING): False,
    (StreamKind.BLOCKING, StreamKind.BLOCKING): False,
    (StreamKind.BLOCKING, StreamKind.NON_BLOCKING): False,
    (StreamKind.NON_BLOCKING, StreamKind.NON_BLOCKING): False,
}


def test_table_covers_every_pair_of_kinds() -> None:
    singletons = {StreamKind.LEGACY, StreamKind.PER_THREAD}  # one of each per device
    pairs = {p for p in itertools.combinations_with_replacement(KINDS, 2) if not (p[0] == p[1] and p[0] in singletons)}
    assert pairs == set(EXPECTED)


@pytest.mark.parametrize("a,b", list(EXPECTED))
def test_implicit_ordering_table(a: StreamKind, b: StreamKind) -> None:
    sa, sb = ss.Stream(0, 0x1000, a), ss.Stream(0, 0x2000, b)
    assert ss.streams.implicitly_ordered(sa, sb) is EXPECTED[(a, b)]
    assert ss.streams.implicitly_ordered(sb, sa) is EXPECTED[(a, b)]
    assert ss.streams.implicitly_ordered(sa, sa)


def test_streams_of_different_devices_are_never_ordered() -> None:
    assert not ss.streams.implicitly_ordered(ss.Stream(0, 1, StreamKind.LEGACY), ss.Stream(1, 1, StreamKind.LEGACY))


class _FakeCupyStreams:
    """Just enough of ``cupy.cuda`` for :func:`streamsafe.frameworks.cupy_external_stream`."""

    def __init__(self, from_external: bool) -> None:
        import types

        self.calls: list[tuple[str, tuple[object, ...]]] = []
        calls = self.calls

        class Stream:
            pass

        if from_external:
            Stream.from_external = staticmethod(lambda s: calls.append(("from_external", (s.__cuda_stream__(),))) or "new")  # type: ignore[attr-defined]
        self.cuda = types.SimpleNamespace(
            Stream=Stream, ExternalStream=lambda ptr, device: calls.append(("ExternalStream", (ptr, device))) or "old"
        )


@pytest.mark.parametrize("from_external", [True, False])
def test_cupy_external_stream_uses_from_external_where_cupy_has_it(sim: ss.sim.SimBackend, from_external: bool) -> None:
    from streamsafe.frameworks import cupy_external_stream

    s = sim.create_stream(device=1)
    cupy = _FakeCupyStreams(from_external)
    got = cupy_external_stream(cupy, s)
    if from_external:  # CuPy 14 deprecates ExternalStream: the stream protocol instead, never both
        assert (got, cupy.calls) == ("new", [("from_external", ((0, s.handle),))])
    else:
        assert (got, cupy.calls) == ("old", [("ExternalStream", (s.handle, 1))])
