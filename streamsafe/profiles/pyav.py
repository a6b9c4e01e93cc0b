"""PyAV's NVDEC frames as a pool profile: what FFmpeg does with the CUDA surfaces PyAV hands out.

Measured on an H200 with PyAV 19 (``docs/guide.md``, "PyAV's NVDEC frames"), for a container opened with
``av.open(path, hwaccel=av.codec.hwaccel.HWAccel(device_type="cuda", allow_software_fallback=False,
is_hw_owned=True))``:

* ``container.decode(...)`` is a generator (a lazy call): each step decodes until a frame comes out, in a
  CUDA surface of FFmpeg's pool (``format.name == "cuda"``, NV12: ``frame.planes[0]`` the Y plane
  ``uint8 (H, W)``, ``planes[1]`` the interleaved UV ``(H/2, W/2, 2)``, both with the decoder's row pitch). The
  frame is complete when it comes out (D1: no race on the decode side was seen).
* A plane's ``__dlpack__()`` exports it with no stream; ``__dlpack__(stream=...)`` raises ``NotImplementedError``,
  so ``torch.from_dlpack(plane)`` fails as it is. The capsule holds a reference to the frame; when the last
  reference (the frame object, a capsule, a view imported from one) goes, the surface goes back to FFmpeg's pool
  with no stream order, and a later frame is decoded into it. A consumer that reads a plane on its own stream
  (3 ms behind) and drops the view at once: 238 of 240 frames wrong; the pool held 2 surfaces.
* So the frames hold their buffers (:attr:`~streamsafe.profile.PoolProfile.frames_hold_buffers`): no call is
  fenced, and a guarded frame, when dropped or closed, keeps PyAV's frame until events recorded on every stream
  that read it complete (D7). Guarded, ``frame.planes[i]`` are producers that take the consumer's stream.
* ``close()`` closes the container: a release (the readers are waited for once; frames already handed out stay
  valid: they hold their surfaces).

Frames that are not CUDA video frames (audio, or video decoded into host memory) pass through unguarded. The
classes are named by their exact qualified names: PyAV's ``InputContainer`` and streamsafe's emulation of an NVDEC
container (:mod:`streamsafe.testing.fake_pyav`).
"""

from __future__ import annotations

from typing import Any

from ..profile import PoolProfile, register

__all__ = ["INPUT_CONTAINER", "CONTAINER_CLASSES", "frames_of", "is_device_frame", "probe"]

CONTAINER_CLASSES = ("InputContainer", "EmulatedInputContainer")
"""The class names of the containers the profile describes (what :func:`streamsafe.guard` looks for in a module)."""


def is_device_frame(obj: Any) -> bool:
    """Whether ``obj`` is a video frame in device memory: a CUDA surface (``format.name == "cuda"``) with planes."""
    return getattr(getattr(obj, "format", None), "name", None) == "cuda" and hasattr(obj, "planes")


def frames_of(raw: Any) -> list[Any]:
    """The device frames a step of ``decode()`` gave: the frame, when it is one (audio frames and frames in host
    memory are not guarded)."""
    return [raw] if is_device_frame(raw) else []


def _device_of(container: Any) -> int:
    """The container's GPU: what it says (the emulation does), else the ``device_id`` of its video stream's hardware
    acceleration, else 0."""
    own = getattr(container, "device", None)
    if own is not None:
        return int(own)
    try:
        hwaccel = container.streams.video[0].codec_context.hwaccel
    except (AttributeError, IndexError):
        return 0
    return int(getattr(hwaccel, "device_id", 0) or 0)


def probe(gpu: bool) -> dict[str, Any]:
    """What ``streamsafe doctor`` says of PyAV once it imports (not emulated): whether it decodes on NVDEC, its CUDA
    hardware acceleration (on a GPU, a device context made for H.264; FFmpeg sets the primary context's flags, so
    this must come before torch's first CUDA call). Does not raise."""
    try:
        import av
        from av.codec.hwaccel import HWAccel, hwdevices_available
    except Exception as e:  # noqa: BLE001  (too old for hardware decoding, or broken)
        nvdec = f"none: no hardware decoding in this PyAV ({type(e).__name__}: {e})"
    else:
        if "cuda" not in hwdevices_available():
            nvdec = "none: this build has no CUDA hardware acceleration"
        elif not gpu:
            nvdec = "no GPU (on a CPU: streamsafe.testing.install_fake_pyav_hw())"
        else:
            try:
                HWAccel(device_type="cuda", allow_software_fallback=False, is_hw_owned=True).create(av.Codec("h264", "r"))
                nvdec = "opens for H.264"
            except Exception as e:  # noqa: BLE001
                nvdec = f"does not open for H.264: {type(e).__name__}: {e}"
    return {"line": f"NVDEC {nvdec}", "nvdec": nvdec}


INPUT_CONTAINER = register(PoolProfile(
    name="av.InputContainer (NVDEC frames)",
    classes=("av.container.input.InputContainer", "streamsafe.testing.fake_pyav.EmulatedInputContainer"),
    calls=("decode",), lazy=("decode",), releases=("close",), closes=("close",),
    frames_of=frames_of, device_of=_device_of, stream_keyword=None,
    frames_hold_buffers=True, planes="planes", export_stream=False,
    module="av", emulation="streamsafe.testing.fake_pyav:EMULATION", probe=probe,
))
"""PyAV's input container: ``decode()`` hands out frames lazily; each holds its CUDA surface until it goes."""
