"""What the GPU recipe programs share (tests/gpu/test_idiomatic_gpu.py, test_sanitize_syncs_gpu.py): a bank of
inputs with their expected outputs, the emulated effect with real latencies, and a random delay on a stream."""

from __future__ import annotations

from typing import Any

import numpy as np

from streamsafe.testing import VideoSuperRes
from streamsafe.testing import _kernels as K

H, W, OH, OW = 32, 32, 64, 64
US = 1980  # cycles a microsecond (the H200's SM clock under load)


def make_bank(torch: Any) -> tuple[list[Any], list[Any]]:
    """Eight random inputs on the GPU and the upscaled RGB8 frame each must give."""
    rng = np.random.default_rng(5)
    xs = [rng.random((3, H, W), dtype=np.float32) for _ in range(8)]
    want = [K.to_rgb8(np, K.resize_bilinear(np, x, OH, OW)).astype(np.float32) / np.float32(255) for x in xs]
    return [torch.from_numpy(x).cuda() for x in xs], [torch.from_numpy(w).cuda() for w in want]


def effect() -> Any:
    """A loaded emulated VideoSuperRes (H x W -> OH x OW) with 60 us of inference and 30 us of conversion."""
    sr = VideoSuperRes(latency_us={"inference": 60, "conversion": 30})
    sr.output_width, sr.output_height = OW, OH
    sr.load()
    return sr


def delay(torch: Any, rng: np.random.Generator, stream: Any, most_us: int = 150) -> None:
    """A random delay of up to ``most_us`` on ``stream``."""
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(rng.integers(0, most_us)) * US)
