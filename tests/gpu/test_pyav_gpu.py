"""PyAV's NVDEC frames on the GPU, guarded: the surface-release race without streamsafe (D7), and none with it under
every strategy, with the views dropped at once and random delays on the consumer's stream; torch, CuPy and JAX
importing the guarded planes directly; the whole example program.

Needs PyAV with CUDA hardware acceleration (the GPU machine has no package index: the lane installs the wheel
named by ``PYAV_WHEEL``, or carried in ``.whl/``) and a clip: ``STREAMSAFE_PYAV_CLIP``, else one made with PyAV
(240 frames of 320x192, as measured). ``STREAMSAFE_PYAV_FRAMES`` frames per strategy (default 2,000; the clip is
decoded again and again) are decoded and checked. Skips cleanly without a GPU or without PyAV's CUDA decoding.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss

from _lane import lane_output

pytestmark = pytest.mark.gpu
av = pytest.importorskip("av", reason="needs PyAV (the lane installs PYAV_WHEEL or the wheel carried in .whl/)")

FRAMES = int(os.environ.get("STREAMSAFE_PYAV_FRAMES", "2000"))
STRATEGIES = ["auto", "event", "async", "stream", "device"]
US = 1980  # cycles a microsecond (the H200's SM clock under load)
ROOT = Path(__file__).resolve().parents[2]


def _hwaccel() -> Any:
    from av.codec.hwaccel import HWAccel

    return HWAccel(device_type="cuda", allow_software_fallback=False, is_hw_owned=True)


@pytest.fixture(scope="module")
def clip(torch_cuda: Any) -> str:
    path = os.environ.get("STREAMSAFE_PYAV_CLIP")
    if not path:
        from streamsafe.testing import make_test_clip

        path = make_test_clip(os.path.join(tempfile.mkdtemp(), "clip.mp4"), 240, (320, 192))
    try:  # PyAV's CUDA decoding, or a clean skip
        with av.open(path, hwaccel=_hwaccel()) as container:
            frame = next(container.decode(video=0))
            if frame.format.name != "cuda":
                pytest.skip(f"PyAV decoded into {frame.format.name}, not CUDA surfaces (no NVDEC in this build)")
    except pytest.skip.Exception:
        raise
    except Exception as e:  # noqa: BLE001
        if getattr(e, "errno", None) == 95:  # (EOPNOTSUPP: FFmpeg refuses a primary context made with other flags)
            pytest.skip(f"PyAV cannot decode on NVDEC in this process: {type(e).__name__}: {e}. FFmpeg makes its CUDA "
                        "device on the GPU's primary context with flags of its own and refuses one that torch (an earlier "
                        "GPU test) made already: run this module in a process of its own, as scripts/gpu_lane.sh pyav does")
        pytest.skip(f"PyAV cannot decode on NVDEC here: {type(e).__name__}: {e}")
    return path


@pytest.fixture(scope="module")
def reference(torch_cuda: Any, clip: str) -> list[Any]:
    """Each frame's Y plane, decoded with nothing racing (the view kept, copied, the device waited for)."""
    torch = torch_cuda
    out = []
    with av.open(clip, hwaccel=_hwaccel()) as container:
        for frame in container.decode(video=0):
            view = torch.utils.dlpack.from_dlpack(frame.planes[0].__dlpack__())
            out.append(view.clone())
            torch.cuda.synchronize()
    return out


def decode_and_read(torch: Any, clip: str, reference: list[Any], strategy: str | None, frames: int, most_us: int,
                    seed: int = 0) -> tuple[int, int, dict[str, int]]:
    """Decode ``frames`` frames (the clip again and again); for each, on the consumer's stream C after a random delay
    there, import the Y plane zero-copy, queue a copy of it and drop the view at once, the program decoding on at
    once. ``strategy=None``: no streamsafe (PyAV's recipe: a capsule with no stream). Returns (wrong copies, copies,
    the guards' counters inside their blocks, summed)."""
    rng = np.random.default_rng(seed)
    C = torch.cuda.Stream()
    copies: list[tuple[Any, int]] = []
    stats: dict[str, int] = {}
    while len(copies) < frames:
        container = av.open(clip, hwaccel=_hwaccel())
        guard: Any = (ss.stream_contract(container, strategy=strategy, allow_none=strategy == "none") if strategy
                      else contextlib.nullcontext())
        with guard as c:
            for i, frame in enumerate(container.decode(video=0)):
                if len(copies) == frames:
                    break
                with torch.cuda.stream(C):
                    torch.cuda._sleep(int(rng.integers(0, most_us + 1)) * US)
                    plane = frame.planes[0]
                    view = torch.from_dlpack(plane) if strategy else torch.utils.dlpack.from_dlpack(plane.__dlpack__())
                    copies.append((view.clone(), i))
                    del view, plane
            if strategy:
                for key, value in c.stats.items():
                    stats[key] = stats.get(key, 0) + value
        container.close()
    torch.cuda.synchronize()
    wrong = sum(not torch.equal(got, reference[i]) for got, i in copies)
    return wrong, len(copies), stats


def test_the_release_race_is_real_without_streamsafe(torch_cuda: Any, clip: str, reference: list[Any]) -> None:
    wrong, total, _ = decode_and_read(torch_cuda, clip, reference, None, len(reference), most_us=3000)
    _record(f"control (unguarded, views dropped, 0-3 ms consumer delays): {wrong}/{total} wrong")
    assert wrong > 0, "no frame was wrong without streamsafe: the race did not show"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_no_frame_is_wrong_under_any_strategy(torch_cuda: Any, clip: str, reference: list[Any], strategy: str) -> None:
    """FRAMES frames per strategy, views dropped at once, 0-300 us random delays on the consumer (and 0-3 ms for the
    first clip's worth, where the unguarded program gets nearly every frame wrong)."""
    torch = torch_cuda
    wrong, total, stats = decode_and_read(torch, clip, reference, strategy, len(reference), most_us=3000, seed=1)
    more_wrong, more, more_stats = decode_and_read(torch, clip, reference, strategy, FRAMES - total, most_us=300, seed=2)
    wrong, total = wrong + more_wrong, total + more
    waits = stats.get("host_waits", 0) + more_stats.get("host_waits", 0)
    syncs = stats.get("device_syncs", 0) + more_stats.get("device_syncs", 0)
    d7 = stats.get("D7", 0) + more_stats.get("D7", 0)
    _record(f"{strategy}: {wrong}/{total} wrong; streamsafe's host waits {waits / total:.3f} a frame, device syncs "
            f"{syncs / total:.3f} a frame, D7 fences {d7 / total:.2f} a frame")
    assert wrong == 0
    if strategy in ("auto", "event", "async"):
        assert syncs == 0 and d7 >= total // 2


def test_strategy_none_races(torch_cuda: Any, clip: str, reference: list[Any]) -> None:
    wrong, total, _ = decode_and_read(torch_cuda, clip, reference, "none", len(reference), most_us=3000)
    _record(f"none (guarded, no fences): {wrong}/{total} wrong")
    assert wrong > 0


def test_torch_cupy_and_jax_import_the_guarded_planes(torch_cuda: Any, clip: str, reference: list[Any]) -> None:
    torch = torch_cuda
    cupy = pytest.importorskip("cupy")
    C = torch.cuda.Stream()
    with av.open(clip, hwaccel=_hwaccel()) as container, ss.stream_contract(container):
        for i, frame in enumerate(container.decode(video=0)):
            if i == 8:
                break
            with torch.cuda.stream(C):
                y = torch.from_dlpack(frame.planes[0]).clone()
                uv = torch.from_dlpack(frame.planes[1])
                assert tuple(uv.shape) == (y.shape[0] // 2, y.shape[1] // 2, 2)
                nv12 = frame.torch()
            with cupy.cuda.ExternalStream(C.cuda_stream):
                assert cupy.array_equal(cupy.from_dlpack(frame.planes[0]), cupy.asarray(reference[i]))
                assert frame.cupy().shape == (y.shape[0] * 3 // 2, y.shape[1])
            torch.cuda.synchronize()
            assert torch.equal(y, reference[i]) and torch.equal(nv12[: y.shape[0]], reference[i])
            assert np.array_equal(frame.planes[0].numpy(), reference[i].cpu().numpy())
            with contextlib.suppress(ImportError):
                import jax

                assert np.array_equal(np.asarray(frame.planes[0].jax()), reference[i].cpu().numpy())
                assert np.asarray(frame.jax()).shape == tuple(nv12.shape)
                if i == 0:  # (JAX imports compact arrays only: a plane with the decoder's row pitch may be refused)
                    try:
                        direct = np.asarray(jax.dlpack.from_dlpack(frame.planes[0]))
                        _record(f"jax.dlpack.from_dlpack(plane): {'right' if np.array_equal(direct, reference[i].cpu().numpy()) else 'WRONG'}")
                    except Exception as e:  # noqa: BLE001
                        _record(f"jax.dlpack.from_dlpack(plane) refused by JAX: {type(e).__name__}: {str(e)[:120]}")


def test_the_example_program_on_the_gpu(torch_cuda: Any, clip: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    guarded = subprocess.run([sys.executable, str(ROOT / "examples" / "pyav_nvdec_upscale.py"), "-i", clip, "--verify",
                              "--frames", "120", "--consumer-delay-us", "300"], capture_output=True, text=True, env=env,
                             timeout=300)
    _record("example, guarded: " + " | ".join(guarded.stdout.splitlines()[-3:]))
    assert guarded.returncode == 0, guarded.stdout + guarded.stderr
    assert "verify: 0 of 120 frames wrong" in guarded.stdout


def _record(line: str) -> None:
    out = lane_output("pyav.txt")
    if out is not None:
        with open(out, "a") as f:
            f.write(line + "\n")
