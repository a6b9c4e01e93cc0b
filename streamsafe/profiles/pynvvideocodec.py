"""PyNvVideoCodec's decoders as pool profiles: what NVIDIA's video decoder does with its output buffers.

Measured on an H200 with PyNvVideoCodec 2.2.4 (``docs/guide.md``, "NVIDIA's video decoder"):

* ``SimpleDecoder``: ``get_batch_frames(n)``, ``decoder[i]``, ``decoder[a:b]`` and
  ``get_batch_frames_by_index(...)`` write the frames they return into buffers of a pool the decoder
  reuses (``get_batch_frames(8)`` hands back the same 8 data pointers batch after batch), on the
  decoder's stream (``cuda_stream=``, default 0: the legacy stream), and wait on the host for that stream
  before they return: the frames are complete (D1). A device wait enqueued on that stream delays the
  decode, so the readers of a buffer are fenced there (D5). ``seek_to_index`` writes no buffer but is
  fenced the same way (cheap, and the next decode follows it). ``reconfigure_decoder`` may reallocate
  the pool: a release (D6).
* ``ThreadedDecoder``: the same, and a thread of its own decodes ahead into the buffers no longer
  handed out: a batch's buffers are rewritten at any time after the next ``get_batch_frames`` (a ring of
  about ``2 * buffer_size + 1`` buffers). ``end()`` and ``reconfigure_decoder`` release.
* Frames (``DecodedFrame``) are DLPack producers that take the consumer's stream (``stream=0`` raises,
  as DLPack says); guarded, they leave as :class:`~streamsafe.SafeFrame`.
"""

from __future__ import annotations

from typing import Any

from ..construction import made_with
from ..profile import PoolProfile, register

__all__ = ["SIMPLE_DECODER", "THREADED_DECODER", "DECODER_CLASSES", "frames_of", "buffer_key", "probe"]

DECODER_CLASSES = ("SimpleDecoder", "ThreadedDecoder")
"""The class names of PyNvVideoCodec's decoders (what :func:`streamsafe.guard` looks for in a module)."""


def _is_frame(obj: Any) -> bool:
    return hasattr(obj, "__dlpack__") and not isinstance(obj, (list, tuple))


def frames_of(raw: Any) -> list[Any]:
    """The frames a decoder call returned: one frame, a list of frames, or none (``seek_to_index``); frames inside
    nested lists and tuples too (a subclass's call that returns ``(frames, timestamps)``)."""
    if isinstance(raw, (list, tuple)):
        return [f for item in raw for f in frames_of(item)]
    return [raw] if _is_frame(raw) else []


def buffer_key(frame: Any) -> Any:
    """What identifies a frame's buffer: the model's buffer (``__streamsafe_key__``), else the data pointer
    of its first plane (``cuda()``'s CUDA array interface)."""
    if hasattr(type(frame), "__streamsafe_key__"):
        return frame.__streamsafe_key__
    planes = frame.cuda()
    first = planes[0] if isinstance(planes, (list, tuple)) else planes
    return first.__cuda_array_interface__["data"][0]


def _stream_of(decoder: Any) -> Any:
    """The decoder's stream: what it says (the emulation does), else the ``cuda_stream`` it was made with, where
    its class was guarded then (the real decoder keeps it in C++), else ``None``."""
    own = getattr(decoder, "cuda_stream", None)
    return own if own is not None else made_with(decoder, "cuda_stream")


def _device_of(decoder: Any) -> int:
    """The decoder's GPU: what it says, else the ``gpu_id`` it was made with (where recorded), else 0."""
    own = getattr(decoder, "device", None)
    return int(own if own is not None else made_with(decoder, "gpu_id") or 0)


def probe(gpu: bool) -> dict[str, Any]:
    """What ``streamsafe doctor`` says of NVIDIA's decoder once it imports (not emulated): on a GPU, whether NVDEC
    opens for H.264 (its capabilities, asked of the decoder). Does not raise."""
    if not gpu:
        return {"line": "NVDEC: no GPU", "nvdec": None}
    try:
        import PyNvVideoCodec as nvc

        codec = next(v for k, v in nvc.cudaVideoCodec.__members__.items() if "H264" in k.upper())
        chroma = next(v for k, v in nvc.cudaVideoChromaFormat.__members__.items() if "420" in k)
        caps = nvc.GetDecoderCaps(gpuid=0, codec=codec, chromaformat=chroma, bitdepth=8)
        ok = bool(caps.get("is_supported", caps.get("num_decoder_engines", 0))) if isinstance(caps, dict) else bool(caps)
        nvdec = ("opens: H.264 8-bit 4:2:0 supported" if ok else "H.264 8-bit 4:2:0 not supported") + f" ({caps})"
    except Exception as e:  # noqa: BLE001
        nvdec = f"could not ask the decoder's capabilities: {type(e).__name__}: {e}"
    return {"line": f"NVDEC {nvdec}", "nvdec": nvdec}


def _profile(name: str, cls: str, calls: tuple[str, ...], releases: tuple[str, ...], prefetches: bool) -> PoolProfile:
    return PoolProfile(
        name=name, classes=(f"PyNvVideoCodec.decoders.{cls}.{cls}", f"PyNvVideoCodec.{cls}",
                            f"streamsafe.testing.fake_pynvvideocodec.{cls}"),
        calls=calls, releases=releases, prefetches=prefetches, frames_of=frames_of, buffer_key=buffer_key,
        stream_of=_stream_of, device_of=_device_of, stream_keyword=None, constructor_keywords=("cuda_stream", "gpu_id"),
        errors_after_writes=("PyNvVCException",), module="PyNvVideoCodec",
        emulation="streamsafe.testing.fake_pynvvideocodec:EMULATION", probe=probe,
    )


SIMPLE_DECODER = register(_profile(
    "PyNvVideoCodec.SimpleDecoder", "SimpleDecoder",
    ("get_batch_frames", "__getitem__", "get_batch_frames_by_index", "seek_to_index"), ("reconfigure_decoder",), False))
THREADED_DECODER = register(_profile(
    "PyNvVideoCodec.ThreadedDecoder", "ThreadedDecoder", ("get_batch_frames",), ("end", "reconfigure_decoder"), True))
