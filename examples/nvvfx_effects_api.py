"""A program written against nvvfx 0.2's API reference, the way programs in the wild use it.

    python examples/nvvfx_effects_api.py                             # the real SDK (a GPU with PyTorch)
    streamsafe run --fake-nvvfx examples/nvvfx_effects_api.py        # the emulation, its effects guarded
    python examples/nvvfx_effects_api.py --guarded                   # each effect in a streamsafe block

It uses the parts of nvvfx that NVIDIA's sample programs do not: the ``nvvfx.effects`` package and its
``QualityLevel`` (same-resolution denoise is a quality level of ``VideoSuperRes``), ``get_sdk_version()``,
``NvVFXError`` for a setting the SDK refuses, ``needs_reload`` after a change between runs, the
``shot_change=`` keyword of ``VideoFrameGeneration.run()`` and ``run_at_timestep()``, and a filter of its
own, made by subclassing ``nvvfx.effects.base.Effect`` with a ``_SELECTOR`` that names the SDK filter.

Every frame is a flat grey, so every result can be checked (its shape and its grey level, within 2 codes
of 255) whatever the SDK's arithmetic. Everything runs on the current stream (torch's, or the model's),
so the program is correct as written; ``--guarded`` puts each effect's calls in
``with streamsafe.stream_contract(effect, stream):``, the same calls, guarded.

Arrays: with a GPU, PyTorch CUDA tensors. Without one, the emulated nvvfx runs on streamsafe's CUDA
ordering model (``streamsafe.testing.install_fake_nvvfx()``, or ``streamsafe run --fake-nvvfx``) and the
frames are the model's arrays: the ``Model`` class below is the only streamsafe the plain program uses.
Exit status 0 when every result is right, 1 when one is wrong, 2 when there is neither a GPU nor the
emulation.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import numpy as np

PROGRAM = "nvvfx_effects_api.py"

try:
    import nvvfx
    from nvvfx.effects import QualityLevel
    from nvvfx.effects.base import Effect
except ImportError as e:
    print(f"{PROGRAM}: nvvfx cannot be imported ({e}); install NVIDIA's nvidia-vfx wheel, or run it on "
          f"streamsafe's emulation: streamsafe run --fake-nvvfx examples/{PROGRAM}", file=sys.stderr)
    raise SystemExit(2) from None


class ArtifactReduction(Effect):
    """A filter the bindings have no class for: the base class loads, runs and closes it."""

    _SELECTOR = "ArtifactReduction"


# -- where the frames live: PyTorch on a GPU, or streamsafe's CUDA model --------------------------------


class Torch:
    """CUDA tensors on torch's current stream."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def stream(self) -> Any:
        return self.torch.cuda.current_stream()

    def stream_ptr(self) -> int:
        return int(self.torch.cuda.current_stream().cuda_stream)

    def grey(self, level: int, h: int, w: int) -> Any:
        return self.torch.full((3, h, w), level / 255, device="cuda")

    def take(self, image: Any) -> np.ndarray:
        """``torch.from_dlpack(out.image).clone()``, then to the host."""
        return self.torch.from_dlpack(image).clone().cpu().numpy()  # type: ignore[no-any-return]


class Model:
    """The model's arrays, on its current stream (the emulated nvvfx runs on the same model)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def stream(self) -> Any:
        return self.sim.current_stream()

    def stream_ptr(self) -> int:
        return int(self.sim.current_stream().ptr)

    def grey(self, level: int, h: int, w: int) -> Any:
        return self.sim.array(np.full((3, h, w), level / 255, np.float32))

    def take(self, image: Any) -> np.ndarray:
        return self.sim.download(self.sim.copy(self.sim.from_dlpack(image)))  # type: ignore[no-any-return]


def device() -> Torch | Model:
    """PyTorch with a GPU; else the model, when nvvfx is streamsafe's emulation on it; else exit 2."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        return Torch(torch)
    try:
        from streamsafe.backend import current_backend
        from streamsafe.sim import SimBackend
        from streamsafe.testing import is_fake_nvvfx
    except ImportError:
        current_backend = None
    if current_backend is not None and is_fake_nvvfx(nvvfx) and isinstance(current_backend(), SimBackend):
        return Model(current_backend())
    print(f"{PROGRAM}: no GPU with PyTorch here, and nvvfx is not streamsafe's emulation on its model; run "
          f"streamsafe run --fake-nvvfx examples/{PROGRAM}", file=sys.stderr)
    raise SystemExit(2)


# -- the program ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="160x90", help="frame size WxH (the SDK's smallest side is 90)")
    parser.add_argument("--guarded", action="store_true", help="each effect's calls inside streamsafe.stream_contract")
    args = parser.parse_args(argv)
    w, h = (int(v) for v in args.size.lower().split("x"))
    dev = device()
    wrong: list[str] = []

    def guarded(effect: Any) -> Any:
        """The block the effect's calls run in: a streamsafe contract with ``--guarded``, else nothing."""
        if not args.guarded:
            return contextlib.nullcontext()
        import streamsafe

        return streamsafe.stream_contract(effect, dev.stream())

    def check(what: str, out: Any, shape: tuple[int, ...], levels: tuple[int, ...]) -> None:
        """``out.image`` holds a flat grey of one of ``levels`` (within 2 codes) in ``shape``."""
        got = dev.take(out.image)
        level = int(np.round(float(got.mean()) * 255))
        ok = got.shape == shape and any(abs(level - want) <= 2 for want in levels) and float(np.ptp(got)) * 255 <= 4
        print(f"{what:<50} {tuple(got.shape)} grey {level:>3}  {'ok' if ok else 'WRONG'}")
        if not ok:
            wrong.append(what)

    print(f"nvvfx {nvvfx.__version__}, VFX SDK {nvvfx.get_sdk_version()}")

    # VideoSuperRes with nvvfx.effects.QualityLevel: denoise at 1x, then upscale on the same effect.
    with nvvfx.VideoSuperRes(QualityLevel.DENOISE_HIGH) as sr, guarded(sr):
        sr.output_width, sr.output_height = w, h
        sr.load()
        check("VideoSuperRes DENOISE_HIGH at 1x", sr.run(dev.grey(90, h, w), stream_ptr=dev.stream_ptr()), (3, h, w), (90,))
        sr.quality = QualityLevel.HIGH
        sr.output_width, sr.output_height = 2 * w, 2 * h
        print(f"after a change of quality and size: needs_reload={sr.needs_reload}")
        check("VideoSuperRes HIGH at 2x", sr.run(dev.grey(90, h, w), stream_ptr=dev.stream_ptr()), (3, 2 * h, 2 * w), (90,))
        print(f"after the run: needs_reload={sr.needs_reload}")

    # A setting the SDK refuses: an upscaling quality at 1x (only the denoise and deblur levels run at 1x).
    try:
        with nvvfx.VideoSuperRes(QualityLevel.ULTRA) as refused:
            refused.output_width, refused.output_height = w, h
            refused.load()
            refused.run(dev.grey(90, h, w), stream_ptr=dev.stream_ptr())
    except nvvfx.NvVFXError as e:
        print(f"NvVFXError, as expected: {e}")
    else:
        print("ULTRA at 1x was not refused: WRONG")
        wrong.append("NvVFXError")

    # VideoFrameGeneration: interpolate, then say there is a cut (shot_change=True): nothing is interpolated.
    vfg = nvvfx.VideoFrameGeneration(automatic_shot_change_detection_enabled=False)
    vfg.input_width, vfg.input_height = w, h
    vfg.frame_multiplier = 2
    vfg.load()
    with guarded(vfg):
        a, b = dev.grey(60, h, w), dev.grey(180, h, w)
        check("VideoFrameGeneration frame_index=1", vfg.run(a, b, frame_index=1, stream_ptr=dev.stream_ptr()), (3, h, w), (120,))
        check("VideoFrameGeneration frame_index=1, shot_change=True",
              vfg.run(a, b, frame_index=1, shot_change=True, stream_ptr=dev.stream_ptr()), (3, h, w), (60, 180))
        check("run_at_timestep(0.25, shot_change=True)",
              vfg.run_at_timestep(a, b, 0.25, shot_change=True, stream_ptr=dev.stream_ptr()), (3, h, w), (60, 180))
    vfg.close()

    # A filter of the program's own: nvvfx.effects.base.Effect subclassed with a _SELECTOR.
    with ArtifactReduction(device=0) as fx, guarded(fx):
        fx.load()
        check(f"{type(fx).__name__} (_SELECTOR {fx._SELECTOR!r})", fx.run(dev.grey(150, h, w), stream_ptr=dev.stream_ptr()),
              (3, h, w), (150,))

    print(f"{PROGRAM}: {'all results right' if not wrong else f'{len(wrong)} wrong: ' + ', '.join(wrong)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
