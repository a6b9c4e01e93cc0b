"""streamsafe.integrations.ray without Ray: the pipeline a Ray worker runs, in this process, on the model.

Ray itself is not needed here (the module imports it only to ask which GPU Ray assigned); tests/test_ray.py
runs the same class on a local Ray cluster.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import streamsafe as ss
from streamsafe.integrations.ray import ObjectStoreViewError, UpscalePipeline, assigned_gpu, require_owned

pytest.importorskip("av", reason="the emulated decoder decodes with PyAV (the 'video' extra)")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from streamsafe.testing import make_test_clip

    folder = tmp_path_factory.mktemp("clips")
    return [make_test_clip(str(folder / "a.mp4"), 12, (48, 32)), make_test_clip(str(folder / "b.mp4"), 9, (64, 32))]


def reference(path: str, scale: int) -> np.ndarray:
    """The clip's frames made with nothing racing: an in-order model, the effect run frame by frame, no guard."""
    from streamsafe.sim import SimBackend
    from streamsafe.testing import VideoSuperRes
    from streamsafe.testing.fake_pynvvideocodec import decode_reference

    sim = SimBackend()
    sr = VideoSuperRes(backend=sim)
    frames = decode_reference(path)
    h, w = frames[0].shape[1:]
    sr.output_width, sr.output_height = w * scale, h * scale
    sr.load()
    out = []
    for planes in frames:
        host = sim.download(sim.from_dlpack(sr.run(sim.array(planes / np.float32(255), dtype=np.float32)).image))
        out.append((np.clip(host, 0, 1) * 255 + 0.5).astype(np.uint8).transpose(1, 2, 0))
    return np.stack(out)


def wrong_frames(got: np.ndarray, want: np.ndarray) -> int:
    assert got.shape == want.shape
    return sum(not np.array_equal(g, w) for g, w in zip(got, want))


def test_import_streamsafe_imports_no_ray() -> None:
    code = ("import sys, streamsafe, streamsafe.integrations, streamsafe.integrations.ray as r; "
            "r.UpscalePipeline; print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_frame_matches_the_serial_reference_and_the_guard_adds_no_host_wait(clips: list[str]) -> None:
    pipeline = UpscalePipeline(scale=2, frames_per_call=4)
    assert pipeline.device == "model" and pipeline.gpu_ids == ()
    out = pipeline({"path": np.array([clips[0], clips[1], clips[0]])})
    assert list(out["path"]) == [clips[0], clips[1], clips[0]]
    for path, frames in zip(out["path"], out["frames"]):
        assert wrong_frames(frames, reference(path, 2)) == 0
    assert list(out["num_frames"]) == [12, 9, 12]
    assert list(out["decoder_calls"]) == [4, 4, 4]  # (the last returns no frame)
    assert list(out["effect_runs"]) == [12, 9, 12]
    # none a frame: none on the first clip, then 1 for the decoder's new source (D6) and 3 for the new size (H6)
    assert list(out["host_waits"]) == [0, 4, 4]
    assert all(out["fences"] > 0) and all(out["sdk_waits"] > 0)
    assert pipeline.totals["frames"] == 33 and pipeline.totals["clips"] == 3
    pipeline.close()


def test_without_fences_the_check_finds_wrong_frames(clips: list[str]) -> None:
    """The comparison can fail: the same pipeline with no fences races on the adversarial model."""
    pipeline = UpscalePipeline(scale=2, strategy="none")
    frames = pipeline.process(clips[0])["frames"]
    assert wrong_frames(frames, reference(clips[0], 2)) > 0
    pipeline.close()


def test_frames_and_a_sink(clips: list[str]) -> None:
    written: list[np.ndarray] = []

    class Sink:
        def write(self, frames: np.ndarray) -> None:
            written.append(frames)

        def close(self) -> dict[str, Any]:
            return {"output": "sink"}

    class WithSink(UpscalePipeline):
        def open_sink(self, path: str, width: int, height: int, fps: float) -> Sink:
            assert (width, height) == (96, 64)
            return Sink()

    row = WithSink(scale=2).process(clips[0])
    assert "frames" not in row and row["output"] == "sink" and row["num_frames"] == 12
    assert wrong_frames(np.concatenate(written), reference(clips[0], 2)) == 0
    pipeline = UpscalePipeline(scale=3)
    assert wrong_frames(np.concatenate(list(pipeline.frames(clips[1]))), reference(clips[1], 3)) == 0


def test_close_closes_the_effect_once_and_collection_closes_it_too(clips: list[str]) -> None:
    pipeline = UpscalePipeline()
    pipeline.process(clips[0])
    decoder_contract, effect_contract = pipeline.contracts
    effect = effect_contract.effect
    pipeline.close()
    pipeline.close()
    assert pipeline.closed and effect.closed and effect_contract.closed and decoder_contract.closed
    with pytest.raises(ss.errors.EffectStateError, match="closed"):
        pipeline.process(clips[0])
    other = UpscalePipeline()
    other.process(clips[1])
    effect = other.contracts[1].effect
    del other
    gc.collect()
    assert effect.closed


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ss.errors.ArgumentError, match="scale=5"):
        UpscalePipeline(scale=5)
    with pytest.raises(ss.errors.ArgumentError, match="device='tpu'"):
        UpscalePipeline(device="tpu")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="no such clip"):
        UpscalePipeline().process("/nonexistent/clip.mp4")


# -- what may cross the object store ----------------------------------------------------------------------------


def test_owned_host_memory_passes() -> None:
    owned = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    column = np.empty(2, dtype=object)
    column[0], column[1] = owned, owned.transpose(0, 2, 1)
    require_owned({"frames": column, "path": np.array(["a", "b"]), "n": 3, "t": (1.5, None, "x", b"y"), "v": owned[::2]})


def test_refused_values(clips: list[str]) -> None:
    sim = ss.sim.SimBackend()
    from streamsafe.testing import VideoSuperRes
    from streamsafe.testing.fake_pynvvideocodec import SimpleDecoder

    with ss.use_backend(sim):
        decoder = SimpleDecoder(clips[0], cuda_stream=sim.create_stream(non_blocking=True).handle)
        dc = ss.PoolContract(decoder)
        frame = dc.get_batch_frames(1)[0]
        sr = VideoSuperRes(backend=sim)
        sr.output_width, sr.output_height = 96, 64
        sr.load()
        out = ss.StreamContract(sr).run(sim.array(np.zeros((3, 32, 48), np.float32)))
        cases = {
            "a zero-copy view of an SDK buffer": [frame, out, out.image],
            "device memory": [frame.copy(), sim.from_dlpack(out.image)],
            "DLPack capsule": [np.arange(3).__dlpack__()],
            "np.from_dlpack": [np.from_dlpack(np.arange(3))],
        }
        for what, values in cases.items():
            for value in values:
                with pytest.raises(ObjectStoreViewError) as caught:
                    require_owned({"frames": [value]}, "the batch")
                message = str(caught.value)
                assert what in message, message
                assert "the batch['frames'][0] is " in message  # the value and where it was
                assert "only owned host memory may cross" in message and "Fix: copy it to the host" in message
                assert isinstance(caught.value, ss.StreamsafeError) and isinstance(caught.value, TypeError)
    again = pickle.loads(pickle.dumps(caught.value))  # (it crosses back to the driver in Ray's task error)
    assert type(again) is ObjectStoreViewError and str(again) == message


def test_a_view_returned_by_to_host_is_refused_before_it_leaves(clips: list[str]) -> None:
    class ReturnsViews(UpscalePipeline):
        def to_host(self, copies: list[Any]) -> Any:
            return copies  # the copies on the copy stream: device memory, not the host copy

    pipeline = ReturnsViews()
    with pytest.raises(ObjectStoreViewError, match=r"ReturnsViews.to_host\(\)'s result\[0\] is .*device memory"):
        pipeline({"path": np.array([clips[0]])})
    pipeline.close()


def test_outside_ray_no_gpu_is_assigned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert assigned_gpu() == (0, ())



# -- examples/ray_upscale.py without Ray (tests/test_ray.py runs it on a cluster) ----------------------------------


def _example(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(ROOT / "examples" / "ray_upscale.py"), *args], capture_output=True,
                          text=True, env=env, timeout=120, cwd=cwd)


def test_the_example_without_ray_checks_every_frame_and_the_check_can_fail(tmp_path: Path) -> None:
    args = ("--no-ray", "--verify", "--clips", "2", "--frames", "9", "-i", str(tmp_path / "in"), "--no-encode")
    result = _example(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "made 2 test clips" in result.stdout and "verify: 0 of 18 frames wrong" in result.stdout
    result = _example(*args, "--strategy", "none", cwd=tmp_path)  # no fences: the same clips come out wrong
    assert result.returncode == 1 and "verify: 0 of" not in result.stdout, result.stdout + result.stderr


def test_the_example_refuses_what_needs_ray_in_one_process(tmp_path: Path) -> None:
    result = _example("--no-ray", "--kill-once", "clip-0.mp4:1", cwd=tmp_path)
    assert result.returncode == 2 and "--kill-once need Ray workers" in result.stderr


def test_the_example_on_the_gpu_says_what_is_missing(tmp_path: Path) -> None:
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    result = _example("--no-ray", "--gpu", "--clips", "1", "--frames", "2", "-i", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and "torch with CUDA is not available" in result.stderr, result.stderr
