"""The emulated effects' arithmetic, written once against the NumPy API.

``xp`` is ``numpy`` (the model) or ``cupy`` (real kernels on the GPU); every function
is elementwise or a gather, so it never makes the host wait. These are also the
references tests compare against.

Encodings:

* RGB8: float32 ``(3, H, W)`` in ``[0, 1]``. The SDK's internal result is 8-bit
  (``round(v * 255)``), converted back to float32 (``u8 / 255``) on stream 0.
* RGB10A2: uint32 ``(H, W)``; bits 0-9 red, 10-19 green, 20-29 blue, 30-31 alpha.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "resize_bilinear",
    "to_rgb8",
    "to_rgb8_into",
    "from_rgb8",
    "copy_into",
    "assign",
    "pass_through",
    "pack_rgb10a2",
    "unpack_rgb10a2",
    "blend",
    "tone_map_hdr",
    "PQ_PEAK_NITS",
]

PQ_PEAK_NITS = 10000.0


_CUPY: dict[str, Any] = {}

_RESIZE_BODY = r"""
int plane = oh * ow;
int c = i / plane;
int r = i - c * plane;
int y = r / ow;
int x = r - y * ow;
float py = __fadd_rn(__fmul_rn(__fadd_rn((float)y, 0.5f), sy), -0.5f);
py = fminf(fmaxf(py, 0.f), (float)(h - 1));
float px = __fadd_rn(__fmul_rn(__fadd_rn((float)x, 0.5f), sx), -0.5f);
px = fminf(fmaxf(px, 0.f), (float)(w - 1));
int y0 = (int)floorf(py);
int x0 = (int)floorf(px);
int y1 = min(y0 + 1, h - 1);
int x1 = min(x0 + 1, w - 1);
float wy = __fadd_rn(py, -(float)y0);
float wx = __fadd_rn(px, -(float)x0);
long long base = (long long)c * h * w;
float top = __fadd_rn(__fmul_rn(src[base + y0 * w + x0], __fadd_rn(1.f, -wx)), __fmul_rn(src[base + y0 * w + x1], wx));
float bot = __fadd_rn(__fmul_rn(src[base + y1 * w + x0], __fadd_rn(1.f, -wx)), __fmul_rn(src[base + y1 * w + x1], wx));
out = __fadd_rn(__fmul_rn(top, __fadd_rn(1.f, -wy)), __fmul_rn(bot, wy));
"""


def _cupy_kernel(xp: Any, name: str) -> Any:
    """One fused CuPy kernel per stage (the same float32 operations, in the same order, as NumPy)."""
    kernel = _CUPY.get(name)
    if kernel is None:
        if name == "resize":
            kernel = xp.ElementwiseKernel(
                "raw float32 src, int32 h, int32 w, int32 oh, int32 ow, float32 sy, float32 sx",
                "float32 out", _RESIZE_BODY, "streamsafe_resize",
            )
        elif name == "to_rgb8":
            kernel = xp.ElementwiseKernel(
                "float32 v", "uint8 out", "out = (unsigned char)rintf(__fmul_rn(fminf(fmaxf(v, 0.f), 1.f), 255.f));",
                "streamsafe_to_rgb8",
            )
        else:
            kernel = xp.ElementwiseKernel("uint8 u", "float32 out", "out = __fdiv_rn((float)u, 255.f);", "streamsafe_from_rgb8")
        _CUPY[name] = kernel
    return kernel


def _is_cupy(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "cupy"


def resize_bilinear(xp: Any, src: Any, out_h: int, out_w: int) -> Any:
    """Bilinear resize of ``(C, H, W)`` float32 with half-pixel centres (``align_corners=False``)."""
    _, h, w = src.shape
    f32 = xp.float32
    if _is_cupy(xp):
        out = xp.empty((src.shape[0], out_h, out_w), dtype=xp.float32)
        _cupy_kernel(xp, "resize")(xp.ascontiguousarray(src), h, w, out_h, out_w, f32(h / out_h), f32(w / out_w), out)
        return out

    def axis(n_out: int, n_in: int) -> tuple[Any, Any, Any]:
        pos = (xp.arange(n_out, dtype=f32) + f32(0.5)) * f32(n_in / n_out) - f32(0.5)
        pos = xp.clip(pos, f32(0), f32(n_in - 1))
        i0 = xp.floor(pos).astype(xp.int64)
        i1 = xp.minimum(i0 + 1, n_in - 1)
        return i0, i1, (pos - i0.astype(f32))

    y0, y1, wy = axis(out_h, h)
    x0, x1, wx = axis(out_w, w)
    wy = wy[None, :, None]
    wx = wx[None, None, :]
    top = src[:, y0][:, :, x0] * (f32(1) - wx) + src[:, y0][:, :, x1] * wx
    bottom = src[:, y1][:, :, x0] * (f32(1) - wx) + src[:, y1][:, :, x1] * wx
    return (top * (f32(1) - wy) + bottom * wy).astype(f32)


def to_rgb8(xp: Any, rgb: Any) -> Any:
    """Float ``[0, 1]`` to the SDK's internal 8-bit result."""
    if _is_cupy(xp):
        return _cupy_kernel(xp, "to_rgb8")(rgb)
    return xp.rint(xp.clip(rgb, 0.0, 1.0) * 255.0).astype(xp.uint8)


def to_rgb8_into(xp: Any, rgb: Any, dst: Any) -> None:
    """:func:`to_rgb8` written into ``dst`` (the SDK's internal 8-bit buffer); on CuPy, one kernel."""
    if _is_cupy(xp):
        _cupy_kernel(xp, "to_rgb8")(rgb, dst)
    else:
        dst[...] = to_rgb8(xp, rgb)


def copy_into(xp: Any, reads: Any, writes: Any) -> None:
    """The transfer stage: ``writes[0] = reads[0]``."""
    writes[0][...] = reads[0]


def assign(dst: Any, value: Any) -> None:
    """``dst[...] = value`` (a stage's result into its buffer)."""
    dst[...] = value


def pass_through(xp: Any, staged: Any) -> Any:
    """The inference of a filter the emulation does not know (an ``Effect`` subclass): its staged input as it is."""
    return staged[0]


def from_rgb8(xp: Any, u8: Any, out: Any) -> None:
    """The RGB8 output conversion (the stage that runs on stream 0): ``out = u8 / 255``."""
    if _is_cupy(xp):
        _cupy_kernel(xp, "from_rgb8")(u8, out)
        return
    out[...] = u8.astype(xp.float32) / xp.float32(255.0)


def pack_rgb10a2(xp: Any, rgb: Any, alpha: int = 3) -> Any:
    """``(3, H, W)`` float in ``[0, 1]`` to packed uint32 ``(H, W)``."""
    code = xp.rint(xp.clip(rgb, 0.0, 1.0) * 1023.0).astype(xp.uint32)
    return (code[0] | (code[1] << xp.uint32(10)) | (code[2] << xp.uint32(20)) | xp.uint32(alpha << 30)).astype(xp.uint32)


def unpack_rgb10a2(xp: Any, packed: Any) -> Any:
    """Packed uint32 ``(H, W)`` to ``(3, H, W)`` float32 in ``[0, 1]`` (alpha dropped)."""
    mask = xp.uint32(0x3FF)
    channels = [(packed >> xp.uint32(shift)) & mask for shift in (0, 10, 20)]
    return xp.stack(channels).astype(xp.float32) / xp.float32(1023.0)


def blend(xp: Any, previous: Any, current: Any, timestep: float, shot_change_detection: bool, shot_change: bool = False) -> Any:
    """Frame generation: ``(1 - t) * previous + t * current``.

    With shot-change detection, when the mean absolute difference of the two frames
    exceeds 0.25 (a cut), the nearer input frame is repeated instead of blending.
    Decided on the device: no host wait. ``shot_change`` (the caller says there is a cut)
    repeats the nearer frame whatever the frames hold.
    """
    if shot_change:
        return (current if timestep >= 0.5 else previous).astype(xp.float32)
    t = xp.float32(timestep)
    mixed = (xp.float32(1) - t) * previous + t * current
    if not shot_change_detection:
        return mixed.astype(xp.float32)
    cut = xp.abs(current - previous).mean() > xp.float32(0.25)
    nearest = current if timestep >= 0.5 else previous
    return xp.where(cut, nearest, mixed).astype(xp.float32)


def tone_map_hdr(
    xp: Any, rgb: Any, *, contrast: int, saturation: int, middle_gray: int, luminance: int
) -> Any:
    """The emulated TrueHDR curve: SDR ``(3, H, W)`` float in ``[0, 1]`` to PQ-coded RGB10A2.

    1. linearise: ``lin = rgb ** 2.2``
    2. saturation about luma (BT.709): ``lin = Y + (lin - Y) * saturation / 100``
    3. contrast and peak: ``nits = clip(lin, 0, 1) ** (contrast / 100) * luminance * middle_gray / 50``
    4. SMPTE ST 2084 (PQ) inverse EOTF of ``nits / 10000``, 10-bit, alpha 3.
    """
    f32 = xp.float32
    lin = xp.clip(rgb, 0.0, 1.0).astype(f32) ** f32(2.2)
    luma = f32(0.2126) * lin[0] + f32(0.7152) * lin[1] + f32(0.0722) * lin[2]
    lin = luma[None] + (lin - luma[None]) * f32(saturation / 100.0)
    lin = xp.clip(lin, 0.0, 1.0) ** f32(max(contrast, 1) / 100.0)
    nits = xp.clip(lin * f32(luminance * middle_gray / 50.0), 0.0, PQ_PEAK_NITS)
    y = nits / f32(PQ_PEAK_NITS)
    m1, m2 = f32(2610 / 16384), f32(2523 / 4096 * 128)
    c1, c2, c3 = f32(3424 / 4096), f32(2413 / 4096 * 32), f32(2392 / 4096 * 32)
    ym = y**m1
    pq = ((c1 + c2 * ym) / (f32(1) + c3 * ym)) ** m2
    return pack_rgb10a2(xp, pq)
