"""streamsafe on a Ray cluster of this machine: examples/ray_upscale.py on two workers (every frame against a serial
reference), a worker killed mid-clip and run again by Ray, and a view refused at the object store.

The module starts one local cluster (on the loopback address, two CPUs and two *logical* GPUs, so that the
workers go through Ray's GPU assignment; without CUDA they run on the model) and stops it at the end. The
example runs as a program of its own, a second driver of that cluster. Skipped where Ray Data or PyAV is not
installed (``pip install 'streamsafe[ray,video]'``; ``make test`` installs both).
"""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # (read when ray is imported: a loopback-only node)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

try:
    import ray
    import ray.data
except ImportError as e:  # (missing, or installed without what Ray Data needs)
    pytest.skip(f"Ray Data does not import ({e}): it is the 'ray' extra, pip install 'streamsafe[ray]'",
                allow_module_level=True)
av = pytest.importorskip("av", reason="the emulated decoder and the encoder use PyAV (the 'video' extra)")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")  # (Ray's own, copying its context)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ray_upscale.py"
TIMEOUT = 150  # seconds a run of the example may take (it takes about 10 on two CPU cores)
MODULE_LIMIT = 600  # seconds the whole module may take (it takes 20 to 50 on two CPU cores)
FRAMES = 16


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster for this module; its GCS address. Stopped (its processes only) at the end. The module
    is bounded in time: past ``MODULE_LIMIT`` seconds the run stops with every thread's traceback (a hang in Ray
    fails the tests in minutes, not at CI's limit), and a worker pool that cannot start fails in a minute."""
    faulthandler.dump_traceback_later(MODULE_LIMIT, exit=True)
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, object_store_memory=128 * 2**20,
             logging_level=logging.WARNING, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT / "tests")}})
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.wait_for_min_actors_s = 60
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from streamsafe.testing import make_test_clip

    folder = tmp_path_factory.mktemp("clips")
    for i, size in enumerate([(48, 32), (64, 32), (48, 32)]):
        make_test_clip(str(folder / f"clip-{i}.mp4"), FRAMES, size)
    return folder


def run_example(address: str, clips: Path, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    report = out / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(EXAMPLE), "--address", address, "-i", str(clips), "-o", str(out),
                             "--workers", "2", "--batch", "4", "--verify", "--json", str(report), *args],
                            capture_output=True, text=True, env=env, timeout=TIMEOUT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return json.loads(report.read_text()), output


def encoded_frames(path: Path) -> int:
    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def check_complete(report: dict[str, Any], out: Path) -> None:
    """Every frame of every clip came back right, and every clip was encoded whole."""
    assert report["verify_wrong"] == 0
    assert report["clips"] == 3 and report["frames"] == 3 * FRAMES
    assert sorted(Path(r["path"]).name for r in report["rows"]) == ["clip-0.mp4", "clip-1.mp4", "clip-2.mp4"]
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".json") == ["clip-0.mp4", "clip-1.mp4", "clip-2.mp4"]
    for clip in ("clip-0.mp4", "clip-1.mp4", "clip-2.mp4"):
        assert encoded_frames(out / clip) == FRAMES


def test_two_workers_every_frame_right(cluster: str, clips: Path, tmp_path: Path) -> None:
    report, output = run_example(cluster, clips, tmp_path)
    check_complete(report, tmp_path)
    assert report["attempts"] == {"clip-0.mp4": 1, "clip-1.mp4": 1, "clip-2.mp4": 1}
    workers = report["workers"]
    assert len(workers) == 2, workers  # one pipeline per worker, both used (an actor pool of two)
    assert sorted(w["gpu"] for w in workers.values()) == ["0", "1"]  # each pinned to the GPU Ray assigned it
    for w in workers.values():
        assert w["device"] == "model" and w["frames"] > 0 and w["fences"] > 0
    for row in report["rows"]:
        assert row["effect_runs"] == FRAMES and row["fences"] > 0 and row["attempt"] == 1
    assert "verify: 0 of 48 frames wrong" in output and "1 GPU and 1 CPU each" in output


def test_a_worker_killed_mid_clip_is_run_again_and_the_output_is_complete(cluster: str, clips: Path,
                                                                           tmp_path: Path) -> None:
    report, output = run_example(cluster, clips, tmp_path, "--kill-once", "clip-1.mp4:8")
    killed = re.findall(r"worker (\d+) kills itself at frame 8 of ", output)
    assert len(killed) == 1, output  # the first attempt died half way through the clip...
    assert report["attempts"] == {"clip-0.mp4": 1, "clip-1.mp4": 2, "clip-2.mp4": 1}  # ...and Ray ran it again
    (row,) = [r for r in report["rows"] if r["path"].endswith("clip-1.mp4")]
    assert row["attempt"] == 2 and row["num_frames"] == FRAMES
    assert not row["worker"].endswith(f":{killed[0]}")  # a new worker made it (the dead one's other clips may be in)
    assert "clip-1.mp4 (2 attempts)" in output
    check_complete(report, tmp_path)  # every frame right, every clip whole, no .part file left


def test_a_view_returned_across_the_object_store_is_refused(cluster: str, clips: Path) -> None:
    from _ray_views import ReturnsOutputs

    from streamsafe.integrations.ray import ObjectStoreViewError, UpscalePipeline

    ds = ray.data.from_items([{"path": str(clips / "clip-0.mp4")}])
    with pytest.raises(Exception) as caught:
        ds.map_batches(ReturnsOutputs, batch_size=1, compute=ray.data.ActorPoolStrategy(size=1)).take_all()
    message = str(caught.value)
    assert ObjectStoreViewError.__name__ in message, message
    assert "is <streamsafe SafeImage" in message and "a zero-copy view of an SDK buffer" in message  # the value
    assert "only owned host memory may cross" in message and "Fix: copy it to the host first" in message
    # the same worker class with its own copy-out passes (what the refusal is measured against)
    rows = ds.map_batches(UpscalePipeline, batch_size=1, compute=ray.data.ActorPoolStrategy(size=1)).take_all()
    assert np.asarray(rows[0]["frames"]).shape == (FRAMES, 64, 96, 3)
