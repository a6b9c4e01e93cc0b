"""CudaBackend on a real GPU: stream kinds from the driver, fences that order real kernels,
host waits, and a bounded event pool. Marked ``gpu``: skipped without a CUDA device."""

from __future__ import annotations

import importlib.util

import pytest

import streamsafe as ss
from streamsafe.errors import CudaDriverError
from streamsafe.streams import StreamKind

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 400 * 1980  # ~400 us of spinning on the writer's stream
TRIALS = 40


def make_stream(torch, kind: str):  # type: ignore[no-untyped-def]
    """A torch stream object (possibly wrapping a CuPy stream) and what streamsafe should see."""
    if kind == "torch-nonblocking":
        return torch.cuda.Stream()
    if kind == "legacy":
        return torch.cuda.default_stream()
    if kind == "cupy-blocking":
        cupy = pytest.importorskip("cupy")
        cs = cupy.cuda.Stream(non_blocking=False)
        ext = torch.cuda.ExternalStream(cs.ptr)
        ext._keepalive = cs  # type: ignore[attr-defined]
        return ext
    raise AssertionError(kind)


def test_stream_kinds_match_design_table(torch_cuda, cuda_backend) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    be = cuda_backend
    assert ss.as_stream(torch.cuda.Stream(), backend=be).kind is StreamKind.NON_BLOCKING
    assert ss.as_stream(torch.cuda.current_stream(), backend=be).kind is StreamKind.LEGACY
    assert ss.as_stream(torch.cuda.default_stream(), backend=be).kind is StreamKind.LEGACY
    assert ss.as_stream(2, backend=be).kind is StreamKind.PER_THREAD
    if importlib.util.find_spec("cupy"):
        import cupy

        assert ss.as_stream(cupy.cuda.Stream(), backend=be).kind is StreamKind.BLOCKING
        assert ss.as_stream(cupy.cuda.Stream(non_blocking=True), backend=be).kind is StreamKind.NON_BLOCKING
        assert ss.as_stream(cupy.cuda.Stream.null, backend=be).kind is StreamKind.LEGACY
    if importlib.util.find_spec("cuda.core"):
        from cuda.core import Device

        dev = Device(0)
        dev.set_current()
        s = dev.create_stream()
        assert ss.as_stream(s, backend=be).kind is StreamKind.NON_BLOCKING
    nb = torch.cuda.Stream()
    assert ss.as_stream(nb.cuda_stream, backend=be) == ss.as_stream(nb, backend=be)
    assert ss.as_stream(nb, backend=be).device == 0


def _trial(torch, be, w, r, fence, value: float) -> bool:  # type: ignore[no-untyped-def]
    """One slow write on ``w`` and a copy on ``r``; True when the copy saw the write. ``fence``: False,
    True (``be.fence``), or a callable that places the fence (a bound program)."""
    x = _trial.x  # type: ignore[attr-defined]
    y = _trial.y  # type: ignore[attr-defined]
    torch.cuda.synchronize()
    x.fill_(-1.0)
    y.fill_(-2.0)
    torch.cuda.synchronize()
    with torch.cuda.stream(w):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(value)
    if callable(fence):
        fence()
    elif fence:
        be.fence(ss.as_stream(r, backend=be), ss.as_stream(w, backend=be))
    with torch.cuda.stream(r):
        y.copy_(x)
    torch.cuda.synchronize()
    return bool((y == value).all().item())


PAIRS = [
    ("torch-nonblocking", "torch-nonblocking"),
    ("torch-nonblocking", "legacy"),
    ("legacy", "torch-nonblocking"),
    ("cupy-blocking", "legacy"),
    ("legacy", "cupy-blocking"),
    ("cupy-blocking", "torch-nonblocking"),
    ("torch-nonblocking", "cupy-blocking"),
    ("cupy-blocking", "cupy-blocking"),
]


@pytest.mark.parametrize("writer,reader", PAIRS)
def test_fence_orders_real_kernels_as_the_model_predicts(torch_cuda, cuda_backend, writer: str, reader: str) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    be = cuda_backend
    _trial.x = torch.empty(1 << 20, device="cuda")  # type: ignore[attr-defined]
    _trial.y = torch.empty(1 << 20, device="cuda")  # type: ignore[attr-defined]
    w = make_stream(torch, writer)
    r = make_stream(torch, reader)  # a second stream even when the kind is the same
    ordered = ss.streams.implicitly_ordered(ss.as_stream(w, backend=be), ss.as_stream(r, backend=be))
    wrong_unfenced = sum(not _trial(torch, be, w, r, False, float(i)) for i in range(TRIALS))
    wrong_fenced = sum(not _trial(torch, be, w, r, True, float(i)) for i in range(TRIALS))
    print(f"{writer} -> {reader}: implicitly ordered={ordered}, wrong without fence {wrong_unfenced}/{TRIALS}, "
          f"with fence {wrong_fenced}/{TRIALS}")
    assert wrong_fenced == 0
    if ordered:
        assert wrong_unfenced == 0
    else:
        assert wrong_unfenced > TRIALS // 2  # a 400 us head start: the unfenced reader nearly always wins


@pytest.mark.parametrize("calls", ["held", "bindings"])
@pytest.mark.parametrize("reader", ["torch-nonblocking", "legacy"])
def test_bound_fences_order_real_kernels_through_either_kind_of_driver_call(  # type: ignore[no-untyped-def]
    torch_cuda, cuda_backend, monkeypatch, calls: str, reader: str
) -> None:
    """A bound fence program orders real kernels through the driver calls that keep the GIL (found on
    every GPU machine) and through cuda.bindings' own, onto a stream and onto the legacy stream (whose
    program checks the context first); without it the reader wins the race."""
    from streamsafe.backend import _held

    if calls == "held":
        assert _held.held_calls() is not None, "the driver's entry points were not found"
    else:
        monkeypatch.setattr(_held, "_HELD", None)
    torch, be = torch_cuda, cuda_backend
    _trial.x = torch.empty(1 << 20, device="cuda")  # type: ignore[attr-defined]
    _trial.y = torch.empty(1 << 20, device="cuda")  # type: ignore[attr-defined]
    w, r = torch.cuda.Stream(), make_stream(torch, reader)
    owner = type("Owner", (), {})()
    program = be.bind_fences([(ss.as_stream(r, backend=be), ss.as_stream(w, backend=be))], owner)
    wrong_unfenced = sum(not _trial(torch, be, w, r, False, float(i)) for i in range(TRIALS))
    wrong_fenced = sum(not _trial(torch, be, w, r, program, float(i)) for i in range(TRIALS))
    print(f"bound program, {calls} calls, -> {reader}: wrong without fence {wrong_unfenced}/{TRIALS}, with {wrong_fenced}/{TRIALS}")
    assert wrong_fenced == 0
    assert wrong_unfenced > TRIALS // 2


def test_host_waits_and_query(torch_cuda, cuda_backend) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    be = cuda_backend
    s = torch.cuda.Stream()
    stream = ss.as_stream(s, backend=be)
    x = torch.zeros(1 << 16, device="cuda")
    for sync in ("stream", "event", "device"):
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(7.0)
        ev = be.acquire_event(0)
        be.record(ev, stream)
        assert not be.query(ev)  # still spinning
        if sync == "stream":
            be.synchronize_stream(stream)
        elif sync == "event":
            be.synchronize_event(ev)
        else:
            be.synchronize_device(0)
        assert be.query(ev)
        be.release_event(ev)
        assert bool((x == 7.0).all().item())
        x.zero_()


def test_event_pool_stays_bounded_over_100k_fences(torch_cuda, cuda_backend) -> None:  # type: ignore[no-untyped-def]
    torch = torch_cuda
    be = ss.CudaBackend(max_free_events=8)
    a = ss.as_stream(torch.cuda.Stream(), backend=be)
    b = ss.as_stream(torch.cuda.Stream(), backend=be)
    legacy = ss.as_stream(0, backend=be)
    for i in range(100_000):
        be.fence(b if i % 3 else legacy, a)
    torch.cuda.synchronize()
    stats = be.pool_stats(0)
    print(f"event pool after 100,000 fences: {stats}")
    assert stats.created == 1 and stats.in_use == 1  # one fence event for this thread, reused 100,000 times


def test_driver_errors_name_the_call(cuda_backend) -> None:  # type: ignore[no-untyped-def]
    from streamsafe.backend.cuda import _check, _load_driver

    d = _load_driver()
    with pytest.raises(CudaDriverError, match=r"cuDeviceGet failed with CUDA_ERROR_INVALID_DEVICE \(101\)"):
        _check(d.cuDeviceGet(9999), "cuDeviceGet")
    with pytest.raises(ss.errors.StreamValueError, match="numbered 0 to"):
        cuda_backend.synchronize_device(9999)
