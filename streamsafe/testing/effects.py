"""Emulated nvvfx 0.2 effects: the SDK's API and, exactly, its stream behaviour.

What each ``run()`` does, in order (as the vendor's documentation describes the SDK):

1. takes each input with ``__dlpack__()`` and **no stream** (H1);
2. copies it into an internal buffer on ``stream_ptr`` (the "transfer" stage);
3. runs inference on ``stream_ptr``; the RGB8 path writes an internal 8-bit result,
   the RGB10A2 path writes the output buffer directly;
4. with ``non_blocking=False`` the host waits for ``stream_ptr`` (H2 is then closed);
5. RGB8 only: converts the 8-bit result to float32 into the output buffer on
   **stream 0** (the legacy stream), because ``get_output()`` gets no ``stream_ptr``;
6. returns a raw DLPack capsule of the **one SDK-owned output buffer**, which the next
   ``run()`` overwrites and ``close()``/an output-size or encoding change releases
   with no stream ordering.

``latency_us`` (per stage: ``transfer``, ``inference``, ``conversion``) spins the
stage's stream on a GPU first, to widen race windows. The arithmetic is simple but
real (see :mod:`streamsafe.testing._kernels`): bilinear resize, blend, a PQ tone curve.

Beyond the SDK's signature, each constructor takes ``backend=`` (default: the current
backend: the GPU if there is one, else the model) and ``latency_us=``.

The public surface (names, values, ranges) follows nvvfx 0.2 as its documentation and NVIDIA's
sample programs use it; where they say nothing the emulation chooses, and says so:

* ``QualityLevel``: the SDK's ``NVVFX_QUALITY_LEVEL`` values (0-4 upscaling, 8-11 denoise,
  12-15 deblur, 16-19 high bitrate, 21 and 23 streaming). Sources: the README of
  github.com/NVIDIA-Maxine/nvidia-vfx-python-samples (``STREAMING_MEDIUM`` (21),
  ``STREAMING_ULTRA`` (23), the DENOISE_/DEBLUR_ names) and the VFX SDK's VideoSuperRes sample
  (mode table 0-23).
* 1x (output size = input size) only with ``DENOISE_*``/``DEBLUR_*``, and those qualities only
  at 1x ("Upscaling is not supported in Denoise and Deblur"; the samples' ``--scale 1``).
  Every other quality upscales: output from 1x to 4x the input in each dimension, larger than
  the input in at least one.
* Input-size limit per scale, from the VFX SDK's Super Resolution table
  (docs.nvidia.com/maxine/vfx/latest/Filters/SuperResolution.html): up to 2x: 2160p, 3x: 720p,
  4x: 540p. The scale is the larger of the two output/input ratios, rounded up to a whole
  factor. Chosen here: "Np" means the frame fits an N*16/9 x N box in either orientation
  (portrait allowed), 1x (denoise/deblur) allows 2160p like 2x, and the minimum side is 16
  pixels (the SDK's table says 90), so tests on the model stay cheap.
* ``VideoFrameGeneration.frame_multiplier`` in [2, 8] and ``frame_index`` in [1, M - 1]
  (docs.nvidia.com/maxine/vfx/latest/Filters/VideoFrameGeneration.html); the C API's
  ``FrameMultiplier = 0`` (explicit timestep mode) is the Python ``run_at_timestep()``, so 0 is
  refused here with that fix. ``Mode``: LOW 0, MEDIUM 1, HIGH 2 (same page; samples' ``--mode``).
* TrueHDR tunables: contrast and saturation [0, 200], middle_gray [10, 100], luminance
  [400, 2000] nits, debanding_off 0 or 1 (the samples' README).
* Invalid values raise :class:`~streamsafe.EffectConfigError` (a ``ValueError``, as the wheel
  raises for out-of-range tunables); calls in the wrong state raise
  :class:`~streamsafe.EffectStateError` (a ``RuntimeError``). Each message names the value,
  the rule and the fix.
"""

from __future__ import annotations

import enum
import math
import numbers
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .. import hooks
from ..sim.backend import SimCapsule
from ..backend import Backend
from ..errors import EffectConfigError, EffectStateError
from . import _kernels as K
from ._engines import Engine, TakenInput, engine_for

__all__ = [
    "ImageEncoding",
    "QualityLevel",
    "Mode",
    "SAME_RESOLUTION_QUALITIES",
    "INPUT_LIMITS",
    "VideoSuperRes",
    "VideoFrameGeneration",
    "TrueHDR",
    "VideoSuperResOutput",
    "VideoFrameGenerationOutput",
    "TrueHDROutput",
    "STAGES",
]

STAGES = ("transfer", "inference", "conversion")


class ImageEncoding(enum.IntEnum):
    """RGB8: float32 ``(3, H, W)`` in [0, 1]. RGB10A2: uint32 ``(H, W)`` packed R10G10B10A2."""

    RGB8 = 0
    RGB10A2 = 1


class QualityLevel(enum.IntEnum):
    """``VideoSuperRes.QualityLevel``: the SDK's ``NVVFX_QUALITY_LEVEL`` values.

    0-4 upscale (``BICUBIC`` is the non-AI baseline), 8-11 denoise and 12-15 deblur (1x only),
    16-19 upscale for high-bitrate sources, 21 and 23 low-latency streaming upscale. Validated
    as the SDK does; the emulation's arithmetic (bilinear resize) ignores the level.
    """

    BICUBIC = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    ULTRA = 4
    DENOISE_LOW = 8
    DENOISE_MEDIUM = 9
    DENOISE_HIGH = 10
    DENOISE_ULTRA = 11
    DEBLUR_LOW = 12
    DEBLUR_MEDIUM = 13
    DEBLUR_HIGH = 14
    DEBLUR_ULTRA = 15
    HIGHBITRATE_LOW = 16
    HIGHBITRATE_MEDIUM = 17
    HIGHBITRATE_HIGH = 18
    HIGHBITRATE_ULTRA = 19
    STREAMING_MEDIUM = 21
    STREAMING_ULTRA = 23


SAME_RESOLUTION_QUALITIES = frozenset(q for q in QualityLevel if q.name.startswith(("DENOISE_", "DEBLUR_")))
"""The qualities that run at 1x only (output size = input size); no other quality runs at 1x."""

INPUT_LIMITS: dict[int, tuple[int, int]] = {1: (3840, 2160), 2: (3840, 2160), 3: (1280, 720), 4: (960, 540)}
"""Largest input per whole scale factor, as a (long side, short side) box: 2160p, 720p, 540p."""

MIN_SIDE = 16
"""The emulation's smallest input side (the SDK documents 90; kept small for cheap model tests)."""


class Mode(enum.IntEnum):
    """``VideoFrameGeneration.Mode``: the model mode (accepted; the emulation's arithmetic ignores it)."""

    LOW = 0
    MEDIUM = 1
    HIGH = 2


@dataclass(frozen=True)
class VideoSuperResOutput:
    image: Any
    """A raw DLPack capsule of the SDK-owned output buffer."""


@dataclass(frozen=True)
class VideoFrameGenerationOutput:
    image: Any
    """A raw DLPack capsule of the SDK-owned output buffer (the same buffer for every generated frame)."""


@dataclass(frozen=True)
class TrueHDROutput:
    image: Any
    """A raw DLPack capsule of the SDK-owned RGB10A2 output buffer."""


def _positive_int(effect: str, name: str, value: Any, lo: int = 1, hi: int = 16384, fix: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise EffectConfigError(effect, name, value, f"must be an integer in [{lo}, {hi}]{fix}")
    return int(value)


def _members(enum_type: type[enum.IntEnum]) -> str:
    return ", ".join(f"{m.name} ({int(m)})" for m in enum_type)


_Encoding = ImageEncoding  # for annotations inside classes that re-export the enums as attributes
_Quality = QualityLevel
_Mode = Mode


class _Effect:
    """What the three effects share: life cycle, inputs, stages and the output buffer."""

    ImageEncoding: ClassVar[type[ImageEncoding]] = ImageEncoding
    _has_rgb8_conversion: ClassVar[bool] = True

    def __init__(
        self,
        *,
        device: int,
        image_encoding: _Encoding,
        backend: Backend | None,
        latency_us: float | Mapping[str, float] | None,
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        self._device = _positive_int(self._name, "device", device, 0, 1024)
        self._encoding = self._check_encoding(image_encoding)
        self._backend = backend
        self._engine: Engine | None = None
        self._loaded = False
        self._closed = False
        self._output: Any = None
        self._output_key: tuple[tuple[int, ...], str] | None = None
        self._internal: dict[str, tuple[Any, tuple[int, ...], str]] = {}
        self._own_work: list[Any] = []  # events after the SDK's own last stages
        self._own_graphs: tuple[Any, ...] = ()
        """The graphs of the last graph-mode run (``None`` for one it had not): each ends in a record of
        its own event."""
        self._output_runs = _OutputRuns(type(self).__name__)
        """The output's run count, which the model's views of it carry (H7 without streamsafe's guard too)."""
        self._steady: tuple[Any, ...] | None = None
        """The last graph-mode run's key, input layouts, staging buffers, output and graphs: a run with
        the same key and layouts reuses them with no look-up. Cleared by anything that changes a buffer,
        a latency or the encoding."""
        self.latency_us = latency_us  # type: ignore[assignment]
        self.runs = 0
        self.launch_mode = launch_mode
        self.host_cost_us = host_cost_us
        self._graphs: dict[Any, Any] = {}
        self._graph_warm: set[Any] = set()
        self._graph_memos: tuple[tuple[Any, ...], ...] = ()
        """The last few graph-mode runs' keys, buffers, latencies and graphs: a repeated run finds its graphs
        by identity, without building and hashing the full key (a few: the runs of a ``VideoFrameGeneration``
        with ``frame_multiplier`` above 2 take turns at their timesteps)."""

    @property
    def _name(self) -> str:
        return type(self).__name__

    # -- configuration ---------------------------------------------------------------------------

    @property
    def device(self) -> int:
        return self._device

    @property
    def image_encoding(self) -> _Encoding:
        return self._encoding

    @image_encoding.setter
    def image_encoding(self, value: _Encoding) -> None:
        value = self._check_encoding(value)
        if value != self._encoding:
            self._release_output("encoding change")
        self._encoding = value
        self._steady = None

    def _check_encoding(self, value: Any) -> _Encoding:
        try:
            return ImageEncoding(value)
        except ValueError:
            raise EffectConfigError(
                self._name, "image_encoding", value, f"must be an ImageEncoding value, one of {_members(ImageEncoding)}"
            ) from None

    @property
    def latency_us(self) -> dict[str, float]:
        """Per-stage spin in microseconds before each stage on the GPU (0 = none)."""
        return dict(self._latency)

    @latency_us.setter
    def latency_us(self, value: float | Mapping[str, float] | None) -> None:
        if value is None:
            value = 0.0
        if isinstance(value, (int, float)):
            value = {stage: float(value) for stage in STAGES}
        unknown = set(value) - set(STAGES)
        if unknown or any(v < 0 for v in value.values()):
            raise EffectConfigError(
                self._name, "latency_us", value, f"stages are {', '.join(STAGES)}; values >= 0 microseconds"
            )
        self._latency = {stage: float(value.get(stage, 0.0)) for stage in STAGES}
        self._steady = None

    @property
    def launch_mode(self) -> str:
        """How the stages reach the GPU: ``"eager"`` (each stage a CuPy launch, the default, widest race
        windows) or ``"graph"`` (CUDA graphs captured once, a few driver calls per ``run()``: the
        real SDK's host cost, for benchmarks). The model always runs stages one by one."""
        return self._launch_mode

    @launch_mode.setter
    def launch_mode(self, value: str) -> None:
        if value not in ("eager", "graph"):
            raise EffectConfigError(self._name, "launch_mode", value, 'one of "eager", "graph"')
        self._launch_mode = value

    @property
    def host_cost_us(self) -> float:
        """Host microseconds each ``run()`` spends on top of its launches (a busy wait that holds the GIL)."""
        return self._host_cost_us

    @host_cost_us.setter
    def host_cost_us(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
            raise EffectConfigError(self._name, "host_cost_us", value, "microseconds, from 0 to 1,000,000")
        self._host_cost_us = float(value)

    @property
    def is_loaded(self) -> bool:
        return self._loaded and not self._closed

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = engine_for(self._backend, self._device)
        return self._engine

    def load(self) -> None:
        """Validate the configuration and get ready to run. Does not block on GPU work."""
        if self._closed:
            raise EffectStateError(self._name, "load", "closed", "Create a new effect.")
        self._validate_config()
        _ = self.engine
        self._loaded = True

    def _validate_config(self) -> None:
        pass

    def close(self) -> None:
        """Release the SDK buffers. Blocks the host until the SDK's own work is done, but orders
        nothing after the consumer's work (as the vendor's documentation says). Idempotent."""
        if self._closed:
            return
        self._release_output("close")
        self._wait_own_work()
        self._drop_graphs()  # (the output's release cleared the memos; the internal buffers go next)
        for name in list(self._internal):
            buf = self._internal.pop(name)[0]
            self.engine.release(buf, f"{self._name}.release {name}")
        self._closed = True
        self._loaded = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> _Effect:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- inputs ------------------------------------------------------------------------------------

    def _check_ready(self, call: str) -> None:
        if self._closed:
            raise EffectStateError(self._name, call, "closed", "Create a new effect; a closed one cannot run.")
        if not self._loaded:
            raise EffectStateError(self._name, call, "not loaded", f"Call {self._name}.load() before {call}().")

    def _acquire(self, obj: Any, what: str) -> Any:
        """Take an input as the SDK does: ``__dlpack__()`` with no stream; then import it zero-copy
        (on the GPU, read in place until a stage runs eagerly)."""
        return self.engine.take(obj, what)

    def _check_image(self, what: str, array: Any, encoding: _Encoding) -> tuple[int, int]:
        shape, dtype = (array.shape, array.dtype) if type(array) is TakenInput else self.engine.shape_dtype(array)
        if encoding is ImageEncoding.RGB8:
            if len(shape) != 3 or shape[0] != 3 or dtype != np.float32:
                raise EffectConfigError(
                    self._name,
                    what,
                    f"shape {shape}, dtype {dtype}",
                    "RGB8 input must be float32 (3, H, W) in [0, 1]; convert it, e.g. x.permute(2, 0, 1).float() / 255",
                )
            h, w = shape[1], shape[2]
        else:
            if len(shape) != 2 or dtype != np.uint32:
                raise EffectConfigError(
                    self._name,
                    what,
                    f"shape {shape}, dtype {dtype}",
                    "RGB10A2 input must be uint32 (H, W), packed R10G10B10A2; pack it, or use ImageEncoding.RGB8",
                )
            h, w = shape
        if not (16 <= h <= 8192 and 16 <= w <= 8192):
            raise EffectConfigError(
                self._name,
                what,
                f"{w}x{h}",
                f"width and height must be in [{MIN_SIDE}, 8192]; resize the frame into that range",
            )
        return h, w

    # -- stages ------------------------------------------------------------------------------------

    def _internal_buffer(self, name: str, shape: tuple[int, ...], dtype: Any) -> Any:
        key = (tuple(shape), _dtype_str(dtype))
        held = self._internal.get(name)
        if held is not None and held[1:] == key:
            return held[0]
        self._steady = None
        if held is not None:
            self._wait_own_work()
            self._graph_memos = ()  # (they hold the buffers of the last graph-mode runs: let a released one go)
            self.engine.release(held[0], f"{self._name}.release {name}")
        buf = self.engine.empty(shape, dtype, f"{self._name} {name}")
        self._internal[name] = (buf, *key)
        return buf

    def _output_buffer(self, shape: tuple[int, ...], dtype: Any) -> Any:
        key = (tuple(shape), _dtype_str(dtype))
        if self._output is not None and self._output_key == key:
            return self._output
        self._release_output("output-size change")
        self._steady = None
        self._output = self.engine.empty(shape, dtype, f"{self._name} output")
        self._output_key = key
        return self._output

    def _wait_own_work(self) -> None:
        """Host-wait for the SDK's own last stages (not for anyone else's work), then forget them."""
        be = self.engine.backend
        for event in self._own_work:
            be.synchronize_event(event)
            be.release_event(event)
        self._own_work = []
        for graph in self._own_graphs:
            if graph is not None:
                graph.wait()
        self._own_graphs = ()

    def _drop_graphs(self) -> None:
        """Forget every captured graph, once its latest launch is done (the host waits for the SDK's own
        work only): the memory its temporaries hold goes back to the pool, and the driver's objects go."""
        for graphs in self._graphs.values():
            for graph in graphs:
                if graph is not None:
                    graph.wait()
        self._graphs.clear()
        self._graph_memos = ()
        self._own_graphs = ()
        self._steady = None

    def _mark_own_work(self, streams: Sequence[Any]) -> None:
        """Record where the SDK's own work ends on each of ``streams`` (the events it holds are
        recorded again when there are as many; pool traffic only when the count changes). Graph
        mode has no such call: its graphs end in records of their own events."""
        if len(self._own_work) == len(streams):
            be = self.engine.backend
            for event, stream in zip(self._own_work, streams):
                be.record(event, stream)
            return
        be = self.engine.backend
        for event in self._own_work:
            be.release_event(event)
        self._own_work = []
        for stream in streams:
            event = be.acquire_event(self._device)
            be.record(event, stream)
            self._own_work.append(event)

    def _release_output(self, why: str) -> None:
        if self._output is not None:
            self._wait_own_work()
            self._graph_memos = ()
            self._steady = None
            self.engine.release(self._output, f"{self._name}.release output ({why})")
            self._output = None
            self._output_key = None

    def _run_stages(
        self,
        inputs: Sequence[Any],
        infer: Any,
        out_shape: tuple[int, ...],
        *,
        stream_ptr: int,
        non_blocking: bool,
        graph_key: Any = None,
    ) -> Any:
        """Transfer, inference, host wait, conversion; returns the output capsule.

        ``infer(xp, staged_inputs) -> float32 (3, H, W)`` (RGB8 path) or packed uint32 (RGB10A2).
        ``graph_key`` names everything ``infer`` depends on besides its inputs: with it, and
        ``launch_mode="graph"`` on the GPU, the stages are replayed as CUDA graphs.
        """
        if type(stream_ptr) is not int and (isinstance(stream_ptr, bool) or not isinstance(stream_ptr, numbers.Integral)):
            raise EffectConfigError(
                self._name, "stream_ptr", stream_ptr,
                "must be the stream's handle as an int, as the SDK takes it (a stream object is not accepted); pass "
                "e.g. torch.cuda.current_stream().cuda_stream or cupy.cuda.get_current_stream().ptr",
            )
        eng = self.engine
        self._spend_host_cost()
        if graph_key is not None and self._launch_mode == "graph" and eng.supports_graphs and not hooks.observers:
            if graph_key in self._graph_warm:
                return self._run_graphed(inputs, infer, out_shape, eng.stream_cached(stream_ptr), non_blocking, graph_key)  # type: ignore[attr-defined]
            self._graph_warm.add(graph_key)  # the first run of a key is eager: kernels compiled, memory pooled
        s = eng.stream(stream_ptr)
        staged: list[Any] = []
        rgb8 = self._has_rgb8_conversion and self._encoding is ImageEncoding.RGB8
        try:
            for i, arr in enumerate(inputs):
                shape, dtype = eng.shape_dtype(arr)
                buf = self._internal_buffer(_INPUT_NAMES[i], shape, dtype)
                eng.delay(s, self._latency["transfer"])
                eng.launch(s, f"{self._name}.transfer", _copy, [eng.as_array(arr)], [buf])
                staged.append(buf)  # (from here on, the SDK stream has work of the SDK's own)
            eng.delay(s, self._latency["inference"])
            if rgb8:
                result = self._internal_buffer("rgb8 result", out_shape, np.uint8)
                eng.launch(s, f"{self._name}.inference", lambda xp, r, w: _to_rgb8_into(xp, infer(xp, r), w[0]), staged, [result])
                if not non_blocking:
                    eng.host_wait(s)
                out = self._output_buffer(out_shape, np.float32)
                legacy = eng.legacy()
                eng.delay(legacy, self._latency["conversion"])
                eng.launch(legacy, f"{self._name}.conversion", lambda xp, r, w: K.from_rgb8(xp, r[0], w[0]), [result], [out])
                self._mark_own_work([s, legacy] if s != legacy else [s])
            else:
                out = self._output_buffer(out_shape, np.uint32)
                eng.launch(s, f"{self._name}.inference", lambda xp, r, w: _assign(w[0], infer(xp, r)), staged, [out])
                if not non_blocking:
                    eng.host_wait(s)
                self._mark_own_work([s])
        except BaseException:
            if staged:  # what did launch on the SDK stream is the SDK's own work: a release waits for it
                self._mark_own_work([s])
            raise
        self.runs += 1
        capsule = eng.export(out)
        if type(capsule) is SimCapsule:  # on the model: a view of it is of this run's output (H7 once the next run writes)
            runs = self._output_runs
            runs.generation += 1
            capsule.view_of = (weakref.ref(runs), runs.generation)
        return capsule


    def _run_graphed(
        self, inputs: Sequence[Any], infer: Any, out_shape: tuple[int, ...], s: Any, non_blocking: bool, key: Any
    ) -> Any:
        """The stages of :meth:`_run_stages` with the emulator's host cost cut to a few driver calls:
        the inputs copied by one kernel launch, then two graphs captured once per key and buffers
        (delay + inference on the SDK stream; delay + conversion on stream 0), each ending in a record
        of its own event. The same streams, the same host wait, the same order; the inputs are read
        before the transfer delay."""
        eng: Any = self.engine
        steady = self._steady
        if steady is not None and steady[0] == key and _same_layouts(steady[1], inputs):
            staged, out, graphs = steady[2], steady[3], steady[4]  # nothing changed since: the same buffers and graphs
            eng.copy_inputs(s, inputs, staged)
        else:
            staged, out, graphs = self._stage_graphed(inputs, infer, out_shape, s, key)
            layouts = tuple((a.shape, a.dtype) if type(a) is TakenInput else None for a in inputs)
            self._steady = (key, layouts, staged, out, graphs) if None not in layouts else None
        self._own_graphs = graphs  # (before the launches: a release after a failure below waits for what did launch)
        eng.launch_graph(graphs[0], s)
        if not non_blocking:
            eng.host_wait(s)
        if graphs[1] is not None:
            eng.launch_graph(graphs[1], eng.stream_cached(0))
        self.runs += 1
        return eng.export(out)

    def _stage_graphed(self, inputs: Sequence[Any], infer: Any, out_shape: tuple[int, ...], s: Any, key: Any) -> tuple[Any, Any, Any]:
        """:meth:`_run_graphed`'s buffers and graphs, looked up (or made) and the inputs copied:
        ``(staging buffers, output, graphs)``."""
        eng: Any = self.engine
        staged = []
        for i, arr in enumerate(inputs):
            shape, dtype = eng.shape_dtype(arr)
            staged.append(self._internal_buffer(_INPUT_NAMES[i], shape, dtype))
        eng.copy_inputs(s, inputs, staged)
        rgb8 = self._has_rgb8_conversion and self._encoding is ImageEncoding.RGB8
        result = self._internal_buffer("rgb8 result", out_shape, np.uint8) if rgb8 else None
        out = self._output_buffer(out_shape, np.float32 if rgb8 else np.uint32)
        lat = self._latency
        infer_us, convert_us = lat["transfer"] * len(inputs) + lat["inference"], lat["conversion"]
        for memo in self._graph_memos:
            if (memo[0] == key and memo[1] is out and memo[2] is result and memo[3] == rgb8
                    and memo[4] == infer_us and memo[5] == convert_us and _same_objects(memo[6], staged)):
                graphs = memo[7]  # the same buffers (by identity, so at the same addresses) and settings as then
                break
        else:
            graphs = self._graphs_for(key, rgb8, staged, result, out, infer_us, convert_us, infer)
            self._graph_memos = ((key, out, result, rgb8, infer_us, convert_us, tuple(staged), graphs), *self._graph_memos[:_MEMOS - 1])
        return staged, out, graphs

    def _graphs_for(
        self, key: Any, rgb8: bool, staged: list[Any], result: Any, out: Any, infer_us: float, convert_us: float, infer: Any
    ) -> tuple[Any, Any]:
        """The graphs of a run with these buffers (by address, shape and dtype: a released buffer's address
        may come back for another size) and latencies: captured once, then kept (at most 17 sets an
        effect: more are dropped together)."""
        eng: Any = self.engine
        full_key = (key, rgb8, tuple((b.data.ptr, b.shape, b.dtype.str) for b in staged),
                    (result.data.ptr, result.shape) if result is not None else 0, (out.data.ptr, out.shape, out.dtype.str),
                    infer_us, convert_us)
        graphs = self._graphs.get(full_key)
        if graphs is not None:
            return graphs  # type: ignore[no-any-return]
        if len(self._graphs) > 16:
            self._drop_graphs()

        def inference(c: Any) -> None:
            eng.delay(c, infer_us)
            if result is not None:
                eng.launch(c, f"{self._name}.inference", lambda xp, r, w: _to_rgb8_into(xp, infer(xp, r), w[0]), staged, [result])
            else:
                eng.launch(c, f"{self._name}.inference", lambda xp, r, w: _assign(w[0], infer(xp, r)), staged, [out])

        def conversion(c: Any) -> None:
            eng.delay(c, convert_us)
            eng.launch(c, f"{self._name}.conversion", lambda xp, r, w: K.from_rgb8(xp, r[0], w[0]), [result], [out])

        graphs = self._graphs[full_key] = (eng.capture(inference), eng.capture(conversion) if rgb8 else None)
        return graphs

    def _spend_host_cost(self) -> None:
        """Busy-wait ``host_cost_us`` on the host, holding the GIL (what a slower SDK's enqueue costs)."""
        if self.host_cost_us > 0:
            end = time.perf_counter() + self.host_cost_us * 1e-6
            while time.perf_counter() < end:
                pass


_MEMOS = 4
"""Graph-mode runs an emulated effect remembers by the identity of their buffers (see ``_run_graphed``)."""

_INPUT_NAMES = ("input0", "input1")
"""The staging buffers' names, by input position (``_run_stages`` uses the same)."""


class _OutputRuns:
    """An emulated effect's output as the model's stale-view check reads it (as it reads a guarded
    effect's ledger): its ``name`` and the ``generation`` of its latest run."""

    __slots__ = ("name", "generation", "__weakref__")

    def __init__(self, name: str) -> None:
        self.name = name
        self.generation = 0


def _same_layouts(kept: tuple[Any, ...], inputs: Sequence[Any]) -> bool:
    """Whether ``inputs`` are taken inputs of the shapes and dtypes in ``kept``, in order."""
    if len(kept) != len(inputs):
        return False
    for (shape, dtype), a in zip(kept, inputs):
        if type(a) is not TakenInput or a.shape != shape or not (a.dtype is dtype or a.dtype == dtype):
            return False
    return True


def _same_objects(kept: tuple[Any, ...], now: list[Any]) -> bool:
    """Whether ``now`` holds the very objects of ``kept``, in order."""
    if len(kept) != len(now):
        return False
    for a, b in zip(kept, now):
        if a is not b:
            return False
    return True


_DTYPE_STRS: dict[Any, str] = {}


def _dtype_str(dtype: Any) -> str:
    """``np.dtype(dtype).str``, remembered (a buffer's key, checked every run)."""
    found = _DTYPE_STRS.get(dtype)
    if found is None:
        found = _DTYPE_STRS[dtype] = np.dtype(dtype).str
    return found


def _copy(xp: Any, reads: Sequence[Any], writes: Sequence[Any]) -> None:
    writes[0][...] = reads[0]


def _assign(dst: Any, value: Any) -> None:
    dst[...] = value


def _to_rgb8_into(xp: Any, rgb: Any, dst: Any) -> None:
    if getattr(xp, "__name__", "") == "cupy":
        K._cupy_kernel(xp, "to_rgb8")(rgb, dst)  # straight into the internal buffer: one kernel
    else:
        dst[...] = K.to_rgb8(xp, rgb)


class VideoSuperRes(_Effect):
    """Emulated ``nvvfx.VideoSuperRes``: bilinear upscaling with the SDK's stream behaviour."""

    QualityLevel: ClassVar[type[QualityLevel]] = QualityLevel

    def __init__(
        self,
        quality: _Quality = QualityLevel.HIGH,
        device: int = 0,
        strength: float = 1.0,
        image_encoding: _Encoding = ImageEncoding.RGB8,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        super().__init__(device=device, image_encoding=image_encoding, backend=backend, latency_us=latency_us,
                         launch_mode=launch_mode, host_cost_us=host_cost_us)
        self.quality = quality
        self.strength = strength
        self._in: list[int | None] = [None, None]
        self._out: list[int | None] = [None, None]
        self._scale_passed: tuple[Any, ...] | None = None
        """The last (w, h, ow, oh, quality) that passed :meth:`_check_scale`."""

    @property
    def quality(self) -> _Quality:
        return self._quality

    @quality.setter
    def quality(self, value: _Quality) -> None:
        """Changeable between runs; the scale rules are checked at ``load()`` and each ``run()``."""
        try:
            self._quality = QualityLevel(value)
        except ValueError:
            raise EffectConfigError(
                self._name,
                "quality",
                value,
                f"must be a QualityLevel value, one of {_members(QualityLevel)}; "
                "pass a member, e.g. VideoSuperRes.QualityLevel.HIGH or VideoSuperRes.QualityLevel['DENOISE_HIGH']",
            ) from None

    @property
    def strength(self) -> float:
        return self._strength

    @strength.setter
    def strength(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
            raise EffectConfigError(
                self._name, "strength", value, "must be a number in [0.0, 1.0]; 1.0 is the full effect, lower values weaken it"
            )
        self._strength = float(value)

    input_width = property(lambda self: self._in[0], lambda self, v: self._set_dim(self._in, 0, "input_width", v))
    input_height = property(lambda self: self._in[1], lambda self, v: self._set_dim(self._in, 1, "input_height", v))
    output_width = property(lambda self: self._out[0], lambda self, v: self._set_dim(self._out, 0, "output_width", v, True))
    output_height = property(lambda self: self._out[1], lambda self, v: self._set_dim(self._out, 1, "output_height", v, True))

    def _set_dim(self, dims: list[int | None], i: int, name: str, value: int, output: bool = False) -> None:
        value = _positive_int(self._name, name, value, MIN_SIDE, 16384, "; pass a pixel count in that range")
        if output and dims[i] is not None and dims[i] != value:
            self._release_output("output-size change")
        dims[i] = value

    def _validate_config(self) -> None:
        if self._out[0] is None or self._out[1] is None:
            raise EffectStateError(
                self._name, "load", "missing its output size", "Set output_width and output_height before load()."
            )
        if self._in[0] is not None and self._in[1] is not None:  # known early: check the scale rules now
            self._check_scale(self._in[0], self._in[1], self._out[0], self._out[1])

    def _check_scale(self, w: int, h: int, ow: int, oh: int) -> None:
        """The SDK's rules for an input of ``w x h`` and an output of ``ow x oh`` at this quality
        (the last sizes that passed are remembered: a video's frames repeat them)."""
        q = self._quality
        if self._scale_passed == (w, h, ow, oh, q):
            return
        size = f"{ow}x{oh}"
        if q in SAME_RESOLUTION_QUALITIES:
            if (ow, oh) != (w, h):
                raise EffectConfigError(
                    self._name,
                    "output size",
                    size,
                    f"{q.name} denoises or deblurs at 1x only, so the output must equal the input size {w}x{h}; "
                    f"set output_width={w} and output_height={h}, or choose an upscaling quality such as HIGH",
                )
        else:
            if not (w <= ow <= 4 * w and h <= oh <= 4 * h):
                raise EffectConfigError(
                    self._name,
                    "output size",
                    size,
                    f"must be 1x to 4x the input size {w}x{h} in each dimension; "
                    f"set output_width and output_height within [{w}, {4 * w}] x [{h}, {4 * h}]",
                )
            if (ow, oh) == (w, h):
                level = q.name.split("_")[-1] if q.name.endswith(("LOW", "MEDIUM", "HIGH", "ULTRA")) else "HIGH"
                raise EffectConfigError(
                    self._name,
                    "output size",
                    size,
                    f"equals the input size (1x), which only the DENOISE_* and DEBLUR_* qualities allow, not {q.name}; "
                    f"choose e.g. QualityLevel.DENOISE_{level} or QualityLevel.DEBLUR_{level}, "
                    "or set an output larger than the input",
                )
        factor = max(ow / w, oh / h)
        bucket = max(2, math.ceil(factor - 1e-9)) if factor > 1 else 1
        long_max, short_max = INPUT_LIMITS[bucket]
        if max(w, h) > long_max or min(w, h) > short_max:
            larger = [f"{k}x up to {v[0]}x{v[1]}" for k, v in INPUT_LIMITS.items() if k != 1 and v[0] > long_max]
            hint = f" ({', '.join(larger)})" if larger else ""
            raise EffectConfigError(
                self._name,
                "input size",
                f"{w}x{h}",
                f"at {factor:g}x (output {size}) the input must fit {long_max}x{short_max} ({short_max}p, either "
                f"orientation); use a smaller input or a lower scale{hint}",
            )
        self._scale_passed = (w, h, ow, oh, q)

    def run(self, input_array: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> VideoSuperResOutput:
        """Upscale one frame. Blocks the host only with ``non_blocking=False`` (until inference ends)."""
        self._check_ready("run")
        arr = self._acquire(input_array, "input_array")
        h, w = self._check_image("input_array", arr, self._encoding)
        if (self._in[0] is not None and self._in[0] != w) or (self._in[1] is not None and self._in[1] != h):
            raise EffectConfigError(
                self._name,
                "input_array",
                f"{w}x{h}",
                f"does not match input_width x input_height = {self._in[0]}x{self._in[1]}; "
                "pass frames of that size, or set input_width and input_height to the new size",
            )
        ow, oh = self._out[0], self._out[1]
        assert ow is not None and oh is not None
        self._check_scale(w, h, ow, oh)
        rgb10 = self._encoding is ImageEncoding.RGB10A2

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            src = K.unpack_rgb10a2(xp, staged[0]) if rgb10 else staged[0]
            up = K.resize_bilinear(xp, src, oh, ow)
            return K.pack_rgb10a2(xp, up) if rgb10 else up

        shape = (oh, ow) if rgb10 else (3, oh, ow)
        return VideoSuperResOutput(
            self._run_stages([arr], infer, shape, stream_ptr=stream_ptr, non_blocking=non_blocking, graph_key=("sr", rgb10, oh, ow))
        )


class VideoFrameGeneration(_Effect):
    """Emulated ``nvvfx.VideoFrameGeneration``: a blend of two frames at a timestep."""

    Mode: ClassVar[type[Mode]] = Mode

    def __init__(
        self,
        mode: _Mode = Mode.MEDIUM,
        automatic_shot_change_detection_enabled: bool = True,
        device: int = 0,
        image_encoding: _Encoding = ImageEncoding.RGB8,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        super().__init__(device=device, image_encoding=image_encoding, backend=backend, latency_us=latency_us,
                         launch_mode=launch_mode, host_cost_us=host_cost_us)
        self.mode = mode
        self.automatic_shot_change_detection_enabled = bool(automatic_shot_change_detection_enabled)
        self._in: list[int | None] = [None, None]
        self._multiplier = 2

    @property
    def mode(self) -> _Mode:
        return self._mode

    @mode.setter
    def mode(self, value: _Mode) -> None:
        try:
            self._mode = Mode(value)
        except ValueError:
            raise EffectConfigError(
                self._name,
                "mode",
                value,
                f"must be a Mode value, one of {_members(Mode)}; pass a member, e.g. VideoFrameGeneration.Mode.MEDIUM",
            ) from None

    @property
    def frame_multiplier(self) -> int:
        return self._multiplier

    @frame_multiplier.setter
    def frame_multiplier(self, value: int) -> None:
        """M in [2, 8]: ``run(frame_index=i)`` makes the frame at i / M, for i in [1, M - 1]."""
        self._multiplier = _positive_int(
            self._name,
            "frame_multiplier",
            value,
            2,
            8,
            "; M - 1 frames are generated between two inputs, at i / M. "
            "For other positions (the C API's FrameMultiplier = 0) call run_at_timestep() instead",
        )

    input_width = property(lambda self: self._in[0], lambda self, v: self._set_in(0, "input_width", v))
    input_height = property(lambda self: self._in[1], lambda self, v: self._set_in(1, "input_height", v))

    def _set_in(self, i: int, name: str, value: int) -> None:
        value = _positive_int(self._name, name, value, MIN_SIDE, 8192, "; pass a pixel count in that range")
        if self._in[i] is not None and self._in[i] != value:
            self._release_output("output-size change")
        self._in[i] = value

    def _validate_config(self) -> None:
        if self._in[0] is None or self._in[1] is None:
            raise EffectStateError(self._name, "load", "missing its frame size", "Set input_width and input_height before load().")

    def run(
        self, previous: Any, current: Any, *, frame_index: int, non_blocking: bool = False, stream_ptr: int = 0
    ) -> VideoFrameGenerationOutput:
        """Generate frame ``frame_index`` of ``frame_multiplier`` between two inputs (t = index / multiplier)."""
        self._check_ready("run")
        if isinstance(frame_index, bool) or not isinstance(frame_index, (int, np.integer)) or not 1 <= frame_index < self._multiplier:
            raise EffectConfigError(
                self._name,
                "frame_index",
                frame_index,
                f"must be an integer in [1, frame_multiplier - 1] = [1, {self._multiplier - 1}]; "
                "raise frame_multiplier first, or use run_at_timestep() for an explicit position",
            )
        return self._generate(previous, current, frame_index / self._multiplier, stream_ptr, non_blocking)

    def run_at_timestep(
        self, previous: Any, current: Any, timestep: float, *, non_blocking: bool = False, stream_ptr: int = 0
    ) -> VideoFrameGenerationOutput:
        """Generate the frame at ``timestep`` in the open interval (0, 1) between two inputs."""
        self._check_ready("run_at_timestep")
        if isinstance(timestep, bool) or not isinstance(timestep, (int, float)) or not 0.0 < float(timestep) < 1.0:
            raise EffectConfigError(
                self._name,
                "timestep",
                timestep,
                "must be a number in the open interval (0.0, 1.0) (0 is the previous frame, 1 the current one); "
                "pass a position strictly between them, e.g. 0.5",
            )
        return self._generate(previous, current, float(timestep), stream_ptr, non_blocking)

    def _generate(self, previous: Any, current: Any, t: float, stream_ptr: int, non_blocking: bool) -> VideoFrameGenerationOutput:
        prev = self._acquire(previous, "previous")
        cur = self._acquire(current, "current")
        hw_prev = self._check_image("previous", prev, self._encoding)
        hw_cur = self._check_image("current", cur, self._encoding)
        want = (self._in[1], self._in[0])
        if hw_prev != want or hw_cur != want:
            what, hw = ("previous", hw_prev) if hw_prev != want else ("current", hw_cur)
            raise EffectConfigError(
                self._name,
                what,
                f"{hw[1]}x{hw[0]}",
                f"does not match input_width x input_height = {want[1]}x{want[0]}; frame generation does not "
                "scale: pass two frames of that size, or set input_width and input_height to theirs",
            )
        rgb10 = self._encoding is ImageEncoding.RGB10A2
        detect = self.automatic_shot_change_detection_enabled

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            a, b = staged
            if rgb10:
                return K.pack_rgb10a2(xp, K.blend(xp, K.unpack_rgb10a2(xp, a), K.unpack_rgb10a2(xp, b), t, detect))
            return K.blend(xp, a, b, t, detect)

        h, w = hw_cur
        shape = (h, w) if rgb10 else (3, h, w)
        capsule = self._run_stages([prev, cur], infer, shape, stream_ptr=stream_ptr, non_blocking=non_blocking,
                                   graph_key=("vfg", rgb10, t, detect))
        return VideoFrameGenerationOutput(capsule)


class TrueHDR(_Effect):
    """Emulated ``nvvfx.TrueHDR``: SDR float RGB to PQ-coded RGB10A2; no RGB8 conversion stage."""

    _has_rgb8_conversion = False
    _RANGES: ClassVar[dict[str, tuple[int, int]]] = {
        "contrast": (0, 200),
        "saturation": (0, 200),
        "middle_gray": (10, 100),
        "luminance": (400, 2000),
        "debanding_off": (0, 1),
    }
    _MEANING: ClassVar[dict[str, str]] = {
        "contrast": "100 is neutral, higher steepens the tone curve",
        "saturation": "100 is neutral, 0 is gray",
        "middle_gray": "where SDR middle gray lands on the HDR curve; 50 is the default",
        "luminance": "the target display's peak in nits, e.g. 1000",
        "debanding_off": "1 skips the debanding pass, 0 keeps it",
    }

    def __init__(
        self,
        contrast: int = 100,
        saturation: int = 100,
        middle_gray: int = 50,
        luminance: int = 650,
        debanding_off: int = 0,
        device: int = 0,
        *,
        backend: Backend | None = None,
        latency_us: float | Mapping[str, float] | None = None,
        launch_mode: str = "eager",
        host_cost_us: float = 0.0,
    ) -> None:
        super().__init__(device=device, image_encoding=ImageEncoding.RGB10A2, backend=backend, latency_us=latency_us,
                         launch_mode=launch_mode, host_cost_us=host_cost_us)
        self.contrast = contrast
        self.saturation = saturation
        self.middle_gray = middle_gray
        self.luminance = luminance
        self.debanding_off = debanding_off

    @property
    def image_encoding(self) -> _Encoding:
        """Always RGB10A2: TrueHDR has no RGB8 output path."""
        return ImageEncoding.RGB10A2

    @image_encoding.setter
    def image_encoding(self, value: _Encoding) -> None:
        if self._check_encoding(value) is not ImageEncoding.RGB10A2:
            raise EffectConfigError(
                "TrueHDR", "image_encoding", value, "TrueHDR output is always RGB10A2 (its input is RGB8 float32); leave it"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        if name in TrueHDR._RANGES:
            lo, hi = TrueHDR._RANGES[name]
            if name == "debanding_off" and isinstance(value, bool):
                value = int(value)  # chosen: a bool is taken as 0/1 (the samples pass 0 or 1)
            value = _positive_int("TrueHDR", name, value, lo, hi, f"; {TrueHDR._MEANING[name]}")
        super().__setattr__(name, value)

    def run(self, rgb_input: Any, *, non_blocking: bool = False, stream_ptr: int = 0) -> TrueHDROutput:
        """Convert one SDR frame (float32 (3, H, W)) to packed RGB10A2 (H, W)."""
        self._check_ready("run")
        arr = self._acquire(rgb_input, "rgb_input")
        h, w = self._check_image("rgb_input", arr, ImageEncoding.RGB8)
        params = dict(contrast=self.contrast, saturation=self.saturation, middle_gray=self.middle_gray, luminance=self.luminance)

        def infer(xp: Any, staged: Sequence[Any]) -> Any:
            return K.tone_map_hdr(xp, staged[0], **params)

        return TrueHDROutput(self._run_stages([arr], infer, (h, w), stream_ptr=stream_ptr, non_blocking=non_blocking,
                                              graph_key=("hdr", *params.values())))
