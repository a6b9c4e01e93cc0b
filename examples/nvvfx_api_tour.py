"""A script written against the nvvfx 0.2 documentation, for all three effects and both encodings.

It runs unchanged on the real SDK, or on streamsafe's emulation after
``streamsafe.testing.install_fake_nvvfx()`` (see ``tests/gpu/test_testing_gpu.py``).
Everything runs on torch's current stream, so no extra synchronisation is needed.
Prints one line per effect; exits non-zero if an output has the wrong shape or dtype.

The names are nvvfx 0.2's: ``VideoSuperRes.QualityLevel`` (BICUBIC, LOW ... ULTRA upscale; the
DENOISE_* and DEBLUR_* levels run at 1x only, output size = input size; STREAMING_MEDIUM and
STREAMING_ULTRA upscale with low latency), ``VideoFrameGeneration.Mode`` (LOW, MEDIUM, HIGH),
``frame_multiplier`` in [2, 8]. Super resolution from 540p is within every scale's input limit
(2x: 2160p, 3x: 720p, 4x: 540p).
"""

import sys

import numpy as np

try:
    import torch
except ImportError:
    torch = None
if torch is None or not torch.cuda.is_available():
    why = "PyTorch is not installed" if torch is None else "torch.cuda.is_available() is False on this machine"
    print(f"nvvfx_api_tour.py: needs PyTorch with CUDA and an NVIDIA GPU ({why}); nothing was run. "
          "Without a GPU, see examples/quickstart_cpu.py and examples/effects_cpu.py (each effect on streamsafe's model)",
          file=sys.stderr)
    sys.exit(2)

import nvvfx
from nvvfx import TrueHDR, VideoFrameGeneration, VideoSuperRes

stream_ptr = torch.cuda.current_stream().cuda_stream
rng = np.random.default_rng(0)


def rgb8(h, w):
    return torch.rand(3, h, w, device="cuda")


def rgb10a2(h, w):
    codes = rng.integers(0, 1024, size=(3, h, w), dtype=np.uint32)
    packed = codes[0] | (codes[1] << 10) | (codes[2] << 20) | np.uint32(3 << 30)
    return torch.from_numpy(packed.view(np.int32)).cuda().view(torch.uint32)


results = {}

for encoding in (VideoSuperRes.ImageEncoding.RGB8, VideoSuperRes.ImageEncoding.RGB10A2):
    frame = rgb8(540, 960) if encoding == VideoSuperRes.ImageEncoding.RGB8 else rgb10a2(540, 960)
    with VideoSuperRes(quality=VideoSuperRes.QualityLevel.HIGH, image_encoding=encoding) as sr:
        sr.output_width = 1920
        sr.output_height = 1080
        sr.load()
        out = torch.from_dlpack(sr.run(frame, stream_ptr=stream_ptr).image).clone()
    results[f"VideoSuperRes {encoding.name}"] = (tuple(out.shape), out.dtype, frame, out)

for encoding in (VideoFrameGeneration.ImageEncoding.RGB8, VideoFrameGeneration.ImageEncoding.RGB10A2):
    make = rgb8 if encoding == VideoFrameGeneration.ImageEncoding.RGB8 else rgb10a2
    previous, current = make(270, 480), make(270, 480)
    vfg = VideoFrameGeneration(mode=VideoFrameGeneration.Mode.MEDIUM, image_encoding=encoding)
    vfg.input_width = 480
    vfg.input_height = 270
    vfg.frame_multiplier = 4
    vfg.load()
    frames = [torch.from_dlpack(vfg.run(previous, current, frame_index=i, stream_ptr=stream_ptr).image).clone() for i in range(1, 4)]
    mid = torch.from_dlpack(vfg.run_at_timestep(previous, current, 0.5, stream_ptr=stream_ptr).image).clone()
    vfg.close()
    results[f"VideoFrameGeneration {encoding.name}"] = (tuple(mid.shape), mid.dtype, (previous, current), frames + [mid])

hdr = TrueHDR(contrast=100, saturation=100, middle_gray=50, luminance=650)
hdr.load()
sdr = rgb8(540, 960)
out = torch.from_dlpack(hdr.run(sdr, stream_ptr=stream_ptr).image).clone()
hdr.close()
results["TrueHDR"] = (tuple(out.shape), out.dtype, sdr, out)

torch.cuda.current_stream().synchronize()
expected = {
    "VideoSuperRes RGB8": ((3, 1080, 1920), torch.float32),
    "VideoSuperRes RGB10A2": ((1080, 1920), torch.uint32),
    "VideoFrameGeneration RGB8": ((3, 270, 480), torch.float32),
    "VideoFrameGeneration RGB10A2": ((270, 480), torch.uint32),
    "TrueHDR": ((540, 960), torch.uint32),
}
ok = True
for name, (shape, dtype, _, _) in results.items():
    good = (shape, dtype) == expected[name]
    ok &= good
    print(f"{'ok ' if good else 'BAD'} {name}: shape {shape}, dtype {dtype}  (nvvfx {getattr(nvvfx, '__version__', '?')})")
raise SystemExit(0 if ok else 1)
