"""NVIDIA's real video decoder (PyNvVideoCodec) on the GPU, guarded: the reuse race without streamsafe, and
none with it, per strategy, with randomized delays on every stream; batches and single frames,
``SimpleDecoder`` and ``ThreadedDecoder``, the decoder on its default stream and on the program's; the
whole decode -> convert -> VideoSuperRes -> consumer pipeline; sanitize mode's verdicts, as the model's.

Needs the ``pynvvideocodec`` wheel (the GPU machine has no package index: the lane installs ``.whl/``) and
a clip: ``STREAMSAFE_TEST_CLIP``, else one made with PyAV. ``STREAMSAFE_DECODER_FRAMES`` frames per strategy
(default 10,000) are decoded and checked.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.testing import VideoSuperRes

from _lane import lane_output

pytestmark = pytest.mark.gpu
nvc = pytest.importorskip("PyNvVideoCodec", reason="needs NVIDIA's decoder (pip install 'streamsafe[pynvvideocodec]')")

FRAMES = int(os.environ.get("STREAMSAFE_DECODER_FRAMES", "10000"))
STRATEGIES = ["auto", "event", "async", "stream", "device"]
CONFIGS = [(mode, own) for mode in ("batch", "single", "threaded") for own in (False, True)]
US = 1980  # cycles a microsecond (the H200's SM clock under load)


@pytest.fixture(scope="module")
def clip() -> str:
    path = os.environ.get("STREAMSAFE_TEST_CLIP")
    if path:
        return path
    pytest.importorskip("av")
    from streamsafe.testing import make_test_clip

    return make_test_clip(os.path.join(tempfile.mkdtemp(), "clip.mp4"), 240, (320, 192))


@pytest.fixture(scope="module")
def reference(torch_cuda: Any, clip: str) -> list[Any]:
    """Every frame of the clip, decoded with nothing racing (each copied, then the device waited for)."""
    torch = torch_cuda
    dec = nvc.SimpleDecoder(clip, gpu_id=0, use_device_memory=True, output_color_type=nvc.OutputColorType.RGBP)
    frames = []
    while batch := dec.get_batch_frames(8):
        for f in batch:
            frames.append(torch.from_dlpack(f).clone())
            torch.cuda.synchronize()
    return frames


def _decoder(clip: str, mode: str, stream: int) -> Any:
    kw = {"gpu_id": 0, "cuda_stream": stream, "use_device_memory": True, "output_color_type": nvc.OutputColorType.RGBP}
    if mode == "threaded":
        return nvc.ThreadedDecoder(clip, 8, **kw)
    return nvc.SimpleDecoder(clip, **kw)


def _delay(torch: Any, rng: np.random.Generator, stream: Any, most_us: int) -> None:
    with torch.cuda.stream(stream):
        torch.cuda._sleep(int(rng.integers(0, most_us + 1)) * US)


def decode_and_consume(torch: Any, clip: str, reference: list[Any], mode: str, own_stream: bool, strategy: str | None,
                       frames: int, most_us: int = 300, seed: int = 0) -> tuple[int, int, dict[str, int]]:
    """Decode ``frames`` frames (the clip again and again) and copy each on a consumer stream C after a random
    delay there, the program decoding on at once; a random delay on the decoder's stream before each call
    too. ``strategy=None``: no streamsafe. Returns (corrupt copies, copies, the guard's counters)."""
    rng = np.random.default_rng(seed)
    own = torch.cuda.Stream() if own_stream else None
    D = own if own is not None else torch.cuda.default_stream()
    C = torch.cuda.Stream()
    n = len(reference)
    dec = _decoder(clip, mode, own.cuda_stream if own is not None else 0)
    guard: Any = (ss.stream_contract(dec, D, strategy=strategy, allow_none=strategy == "none") if strategy
                  else contextlib.nullcontext())  # (D: the decoder's stream, declared as the guide says)
    copies: list[tuple[Any, int]] = []
    position = 0
    with guard:
        while len(copies) < frames:
            _delay(torch, rng, D, most_us // 3)
            if mode == "single":
                batch, first = [dec[position % n]], position % n
            else:
                batch, first = dec.get_batch_frames(8), position % n
                if not batch:  # the clip's end: from the start again
                    if mode == "threaded":
                        dec.reconfigure_decoder(clip)
                    else:
                        dec.seek_to_index(0)
                    position = 0
                    continue
            for k, frame in enumerate(batch):
                _delay(torch, rng, C, most_us)
                with torch.cuda.stream(C):
                    copies.append((torch.from_dlpack(frame).clone(), (first + k) % n))
            position += len(batch)
        stats = dict(guard.stats) if strategy else {}
    torch.cuda.synchronize()
    wrong = sum(not torch.equal(got, reference[i]) for got, i in copies)
    return wrong, len(copies), stats


@pytest.mark.parametrize(("mode", "own_stream"), CONFIGS)
def test_the_reuse_race_is_real_without_streamsafe(torch_cuda: Any, clip: str, reference: list[Any], mode: str, own_stream: bool) -> None:
    wrong, total, _ = decode_and_consume(torch_cuda, clip, reference, mode, own_stream, None, 240, most_us=3000)
    _record(f"control {mode} {'own' if own_stream else 'default'} stream: {wrong}/{total} corrupt")
    assert wrong > 0, "no frame was corrupted without streamsafe: the race did not show"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_frame_is_corrupted_under_any_strategy(torch_cuda: Any, clip: str, reference: list[Any], strategy: str) -> None:
    """FRAMES frames per strategy, spread over the six configurations."""
    per = -(-FRAMES // len(CONFIGS))
    total_wrong = total = 0
    for seed, (mode, own) in enumerate(CONFIGS):
        wrong, n, stats = decode_and_consume(torch_cuda, clip, reference, mode, own, strategy, per, seed=seed)
        _record(f"{strategy} {mode} {'own' if own else 'default'} stream: {wrong}/{n} corrupt, "
                f"host waits {stats['host_waits']} (for a new source: {stats.get('D6', 0)}), device syncs {stats['device_syncs']}, "
                f"D5 fences {stats.get('D5', 0)}")
        total_wrong += wrong
        total += n
        if strategy in ("auto", "event", "async"):  # no host wait of streamsafe's, but a new source's (D6)
            assert stats["host_waits"] == stats.get("D6", 0) and stats["device_syncs"] == 0
    assert total >= FRAMES
    assert total_wrong == 0


@pytest.mark.parametrize("strategy", [None, "auto", "stream"])
def test_the_whole_pipeline_decode_convert_upscale_consume(torch_cuda: Any, clip: str, reference: list[Any], strategy: str | None) -> None:
    torch = torch_cuda
    rng = np.random.default_rng(7)
    h, w = reference[0].shape[1:]
    expected_sr = VideoSuperRes()
    expected_sr.output_width, expected_sr.output_height = 2 * w, 2 * h
    expected_sr.load()
    with ss.stream_contract(expected_sr) as c:
        expected = [c.run(f.float().div(255)).torch() for f in reference[:48]]
    sr = VideoSuperRes(latency_us={"inference": 40, "conversion": 20})
    sr.output_width, sr.output_height = 2 * w, 2 * h
    sr.load()
    U, C = torch.cuda.Stream(), torch.cuda.Stream()
    dec = _decoder(clip, "batch", 0)
    guards = contextlib.ExitStack()
    if strategy:
        guards.enter_context(ss.stream_contract(dec, strategy=strategy))
        guards.enter_context(ss.stream_contract(sr, U, strategy=strategy, input_stream=U))
    copies = []
    with guards:
        for _ in range(6):
            for frame in dec.get_batch_frames(8):
                _delay(torch, rng, U, 2000)  # (the conversion late: the next decode overwrites what it reads, unfenced)
                with torch.cuda.stream(U):
                    out = sr.run(torch.from_dlpack(frame).float().div_(255))  # the user's conversion, then the effect
                _delay(torch, rng, C, 300)
                with torch.cuda.stream(C):
                    copies.append((torch.from_dlpack(out.image).clone(), len(copies)))
    torch.cuda.synchronize()
    wrong = sum(not torch.allclose(got, expected[i], atol=1.5 / 255) for got, i in copies)
    _record(f"pipeline {strategy or 'unguarded'}: {wrong}/{len(copies)} corrupt")
    if strategy:
        assert wrong == 0
    else:
        assert wrong > 0


def test_sanitize_reports_the_race_and_not_the_guarded_program(torch_cuda: Any, clip: str, reference: list[Any]) -> None:
    """As the model: strategy none (no fence) races (D5 named), the guarded program does not."""
    torch = torch_cuda
    with ss.sanitize() as model, pytest.raises(ss.errors.RaceError) as info:
        decode_and_consume(torch, clip, reference, "batch", True, "none", 24)
    _record(f"sanitize, no fences: {str(info.value).splitlines()[0]}")
    with ss.sanitize() as model:
        decode_and_consume(torch, clip, reference, "batch", True, "auto", 48)
    assert model.races == []


def _record(line: str) -> None:
    out = lane_output("decoder.txt")
    if out is not None:
        with open(out, "a") as f:
            f.write(line + "\n")
