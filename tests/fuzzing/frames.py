"""The fuzzer's input frames and what each output frame must be, computed on the host with NumPy."""

from __future__ import annotations

import functools

import numpy as np

from streamsafe.testing import _kernels as K

from .program import BANK, Program, State

__all__ = ["frame_data", "reference"]


@functools.lru_cache(maxsize=512)
def frame_data(index: int, h: int, w: int, encoding: str) -> np.ndarray:
    """Input frame ``index % BANK`` of size ``h x w`` (read-only). Neighbouring frames differ everywhere
    by about 0.17 on average, below VideoFrameGeneration's cut threshold, so blends stay blends."""
    base = np.random.default_rng((h, w, 7)).random((3, h, w), dtype=np.float32)
    noise = np.random.default_rng((index % BANK, h, w)).random((3, h, w), dtype=np.float32)
    rgb = (np.float32(0.5) * base + np.float32(0.5) * noise).astype(np.float32)
    data = K.pack_rgb10a2(np, rgb) if encoding == "RGB10A2" else rgb
    data.setflags(write=False)
    return data


def _rgb8_roundtrip(rgb: np.ndarray) -> np.ndarray:
    out = np.empty(rgb.shape, np.float32)
    K.from_rgb8(np, K.to_rgb8(np, rgb), out)
    return out


@functools.lru_cache(maxsize=2048)
def _reference_cached(effect: str, st: State, scale: int, index: int, vfg_t: float, detect: bool) -> np.ndarray:
    h, w = st.in_hw[0] * scale, st.in_hw[1] * scale
    if effect == "truehdr":
        c, s, m, lum = st.hdr
        out = K.tone_map_hdr(np, frame_data(index, h, w, "RGB8"), contrast=c, saturation=s, middle_gray=m, luminance=lum)
    elif effect == "vfg":
        prev, cur = frame_data(index - 1, h, w, st.encoding), frame_data(index, h, w, st.encoding)
        if st.encoding == "RGB10A2":
            out = K.pack_rgb10a2(np, K.blend(np, K.unpack_rgb10a2(np, prev), K.unpack_rgb10a2(np, cur), vfg_t, detect))
        else:
            out = _rgb8_roundtrip(K.blend(np, prev, cur, vfg_t, detect))
    else:
        oh, ow = st.out_hw[0] * scale, st.out_hw[1] * scale
        data = frame_data(index, h, w, st.encoding)
        if st.encoding == "RGB10A2":
            out = K.pack_rgb10a2(np, K.resize_bilinear(np, K.unpack_rgb10a2(np, data), oh, ow))
        else:
            out = _rgb8_roundtrip(K.resize_bilinear(np, data, oh, ow))
    out.setflags(write=False)
    return out


def reference(program: Program, k: int, scale: int = 1) -> np.ndarray:
    """What frame ``k`` of ``program`` must be, computed on the host with NumPy."""
    step = program.steps[k]
    t = 0.0
    if program.effect == "vfg":
        kind, value = step.vfg_call
        t = value / step.state.multiplier if kind == "index" else float(value)
    return _reference_cached(program.effect, step.state, scale, k + BANK, t, program.detect)


def _matches(got: np.ndarray, want: np.ndarray, exact: bool) -> bool:
    """Exact on the model; on a GPU one code step of rounding (a race gives another frame or garbage)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype == np.uint32:
        if exact:
            return bool(np.array_equal(got, want))
        for shift in (0, 10, 20):
            diff = np.abs(((got >> shift) & 0x3FF).astype(np.int64) - ((want >> shift) & 0x3FF).astype(np.int64))
            if diff.max(initial=0) > 1:
                return False
        return bool(np.array_equal(got >> 30, want >> 30))
    if exact:
        return bool(np.array_equal(got, want))
    return bool(np.allclose(got, want, atol=1.5 / 255, rtol=0))
