"""The steady-state frame in C and in Python on a GPU: one pipeline that breaks naive fences (fresh inputs
from torch's allocator dropped after each run, the SDK on a stream of its own, random delays on the
producer, the SDK's stages and a late reader of each view) runs with each; both must copy every frame
right, replay, and count the same fences and host waits. The unfenced control corrupts frames."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
import streamsafe.contract as contract_module
import streamsafe.outputs as outputs_module
from streamsafe import steady
from streamsafe.testing import _kernels as K

pytestmark = pytest.mark.gpu
H, W, OH, OW = 64, 64, 128, 128
FRAMES = 60


@contextlib.contextmanager
def frames_in(kind: str) -> Iterator[None]:
    saved = contract_module._NATIVE_REPLAY, outputs_module.native_import
    if kind == "Python":
        contract_module._NATIVE_REPLAY = outputs_module.native_import = None
    try:
        yield
    finally:
        contract_module._NATIVE_REPLAY, outputs_module.native_import = saved


def _run(torch: Any, kind: str, strategy: str, seed: int) -> dict[str, Any]:
    from streamsafe.testing import VideoSuperRes

    rng = np.random.default_rng(seed)
    hosts = [rng.random((3, H, W), dtype=np.float32) for _ in range(8)]
    wants = [K.to_rgb8(np, K.resize_bilinear(np, x, OH, OW)).astype(np.float32) / np.float32(255) for x in hosts]
    with frames_in(kind):
        sr = VideoSuperRes(backend=ss.CudaBackend(), latency_us={"inference": 150.0, "conversion": 300.0})
        sr.output_width, sr.output_height = OW, OH
        sr.load()
        side, sdk = torch.cuda.Stream(), torch.cuda.Stream()
        c = ss.StreamContract(sr, sdk, strategy=strategy, allow_none=strategy == "none")
        copies = []
        with torch.cuda.stream(side):
            before = steady.replays
            for i in range(FRAMES):
                torch.cuda._sleep(int(rng.integers(0, 300)) * 1980)  # the producer late, on its stream
                x = torch.from_numpy(hosts[i % len(hosts)]).to("cuda", non_blocking=True)  # fresh, freed after run()
                out = c.run(x)
                del x  # (the allocator may hand its memory to the next frame's input while the SDK still reads it)
                if i % 2:
                    got = out.torch()
                else:
                    view = out.torch(copy=False)
                    torch.cuda._sleep(int(rng.integers(0, 400)) * 1980)  # a late reader of the view
                    got = view.clone()
                copies.append((got, wants[i % len(wants)]))
            replays = steady.replays - before
        torch.cuda.synchronize()
        stats = dict(c.stats)  # (every counter: runs, fences, waits, and the fences of each hazard)
        c.close()
    corrupt = sum(not np.allclose(got.cpu().numpy(), want, atol=1.5 / 255) for got, want in copies)
    return {"corrupt": corrupt, "replays": replays, "stats": stats}


@pytest.mark.skipif(contract_module._NATIVE_REPLAY is None, reason="the C extension is not built here")
@pytest.mark.parametrize("strategy", ["auto", "event", "async"])
def test_the_c_frame_and_the_python_frame_agree_on_a_gpu(torch_cuda, strategy: str) -> None:  # type: ignore[no-untyped-def]
    c_side = _run(torch_cuda, "C", strategy, seed=5)
    py_side = _run(torch_cuda, "Python", strategy, seed=5)
    print(f"[{strategy}] C frame {c_side}, Python frame {py_side}")
    assert c_side["corrupt"] == py_side["corrupt"] == 0
    assert c_side["replays"] >= FRAMES // 2 and py_side["replays"] >= FRAMES // 2
    assert c_side["stats"] == py_side["stats"]


def test_the_unfenced_control_corrupts(torch_cuda) -> None:  # type: ignore[no-untyped-def]
    result = _run(torch_cuda, "C", "none", seed=5)
    print(f"[none] {result}")
    assert result["corrupt"] > 0
