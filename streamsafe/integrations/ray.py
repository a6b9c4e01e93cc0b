"""One guarded decode -> effect pipeline per Ray worker (``pip install 'streamsafe[ray]'``).

:class:`UpscalePipeline` is a callable class for ``ray.data.Dataset.map_batches``: each Ray worker builds
one pipeline in ``__init__`` (its streams, ``VideoSuperRes`` and its guard, on the GPU Ray gave it) and
runs it for every batch of clip paths: decode (NVIDIA's decoder) -> conversion -> ``VideoSuperRes`` ->
copy out to the host, with streamsafe's fences between the stages. What it returns crosses Ray's object
store, so it is owned host memory only; a zero-copy view of an SDK buffer is refused
(:class:`ObjectStoreViewError`)::

    import ray
    from streamsafe.integrations.ray import UpscalePipeline

    ds = ray.data.from_items([{"path": p} for p in clips], override_num_blocks=len(clips))
    ds = ds.map_batches(UpscalePipeline, fn_constructor_kwargs={"scale": 2}, batch_size=1,
                        compute=ray.data.ActorPoolStrategy(size=4), num_gpus=1)
    for row in ds.iter_rows():      # one row a clip: "frames" (N, H, W, 3) uint8, and the worker's counters
        ...

With a GPU (torch with CUDA; the decoder from ``pip install 'streamsafe[pynvvideocodec]'``; ``nvvfx``,
else streamsafe's emulated effect on CUDA) the worker pins itself to the GPU Ray assigned
(:func:`assigned_gpu`) and puts the decoder, the conversion and the effect, and the copy out each on a
torch side stream of its own. Without one it runs the emulated decoder and effect on a CUDA ordering
model of its own (:class:`streamsafe.sim.SimBackend`, adversarial scheduler: a missing fence would show
as a wrong frame). The class works without Ray too (call it, or :meth:`UpscalePipeline.process`, in
your own process); this module imports ``ray`` only to ask which GPU Ray assigned.

Nothing is coordinated across workers: every SDK object, its buffers and its guard live in one worker
process, and only host copies leave it. A batch is Ray's unit of retry: a worker that dies mid-clip
loses that batch, and Ray runs it again from the start on a new worker (``docs/guide.md``, "Many GPUs
and many machines").
"""

from __future__ import annotations

import os
import socket
import sys
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Protocol

import numpy as np

import streamsafe as ss
from streamsafe._dlpack import CAPSULE
from streamsafe.errors import BackendUnavailableError, EffectStateError, StreamsafeError

__all__ = [
    "UpscalePipeline",
    "FrameSink",
    "ObjectStoreViewError",
    "require_owned",
    "assigned_gpu",
    "STAT_KEYS",
]

STAT_KEYS = ("fences", "host_waits", "device_syncs", "sdk_waits")
"""The counters each row reports, summed over the worker's decoder and effect contracts (their ``.stats``):
device-side fences, host waits and device syncs streamsafe made, and calls in which the SDK itself waited."""

Device = Literal["auto", "gpu", "model"]

_DLPACK_CPU = 1


class ObjectStoreViewError(StreamsafeError, TypeError):
    """A value a worker would return across Ray's object store is not owned host memory.

    ``value`` is the value's ``repr`` (the value itself stays in the worker: it may be unpicklable), ``where``
    the place it was found (a column and row), ``what`` what it is."""

    def __init__(self, value: str, where: str, what: str) -> None:
        self.value, self.where, self.what = value, where, what
        super().__init__(
            f"{where} is {value}: {what}. Rule: what a Ray worker returns crosses the object store and is read "
            "after the worker has gone on to its next frames, when the decoder or the effect has written that "
            "buffer again (and device memory is the worker's own), so only owned host memory may cross. Fix: copy "
            "it to the host first (frame.numpy(), out.numpy(), tensor.cpu().numpy(), np.array(x)) and return the copy"
        )

    def __reduce__(self) -> Any:  # (crosses back to the driver inside Ray's task error)
        return type(self), (self.value, self.where, self.what)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _not_owned(value: Any) -> str | None:
    """Why ``value`` may not cross the object store, or ``None`` (containers: see :func:`require_owned`)."""
    if isinstance(value, (ss.SafeFrame, ss.SafeOutput, ss.SafeImage)):
        return "a zero-copy view of an SDK buffer (a guarded decoder's frame or an effect's output)"
    if type(value) is CAPSULE:
        return "a DLPack capsule: a zero-copy view of memory the worker does not own"
    if isinstance(value, np.ndarray):
        base = value.base
        while isinstance(base, np.ndarray):
            base = base.base
        if base is not None and type(base) is CAPSULE:
            return "a NumPy view imported with DLPack (np.from_dlpack) of memory it does not own"
        return None
    if hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__"):
        try:
            device = int(value.__dlpack_device__()[0])
        except Exception:  # (no device to ask for: treated as device memory)
            device = -1
        where = "host memory of a framework's array" if device == _DLPACK_CPU else "device memory"
        return f"{where} ({type(value).__module__}.{type(value).__qualname__}), which another process cannot read"
    return None


def require_owned(value: Any, where: str = "the value") -> None:
    """Raise :class:`ObjectStoreViewError` unless ``value`` is owned host memory: NumPy arrays (not imported
    with DLPack), numbers, strings, bytes and ``None``, also inside lists, tuples, dicts and object arrays.
    Refused: guarded frames and outputs (``ss.SafeFrame``, ``ss.SafeOutput``, ``ss.SafeImage``), DLPack
    capsules, and arrays of a framework (torch, CuPy, JAX, the model's). Does not block."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        for index, item in enumerate(value.flat):
            require_owned(item, f"{where}[{index}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            require_owned(item, f"{where}[{key!r}]")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            require_owned(item, f"{where}[{index}]")
        return
    why = _not_owned(value)
    if why is not None:
        raise ObjectStoreViewError(_show(value), where, why)


def assigned_gpu() -> tuple[int, tuple[str, ...]]:
    """The CUDA device index (in this process) of the GPU Ray assigned this worker, and Ray's ids of the GPUs it
    assigned; ``(0, ())`` outside a Ray worker or with no GPU assigned. Ray sets ``CUDA_VISIBLE_DEVICES`` to the
    ids it assigns, so the index is the first id's place in that list. Does not block."""
    ray = sys.modules.get("ray")  # (a Ray worker has imported it; elsewhere Ray assigned nothing)
    if ray is None or not ray.is_initialized():
        return 0, ()
    ids = tuple(str(i) for i in ray.get_gpu_ids())
    if not ids:
        return 0, ()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return (visible.index(ids[0]) if ids[0] in visible else 0), ids


class FrameSink(Protocol):
    """Where a clip's frames go inside the worker (an encoder, say): :meth:`UpscalePipeline.open_sink` makes one."""

    def write(self, frames: np.ndarray) -> None:
        """Take a batch of owned frames, ``(n, H, W, 3)`` uint8 RGB."""

    def close(self) -> Mapping[str, Any]:
        """The clip is complete: finish, and return the columns to add to its row."""


# -- where the pipeline runs: a GPU, or the model ------------------------------------------------------------


class _Gpu:
    """torch side streams on the GPU Ray assigned; NVIDIA's decoder; nvvfx (else streamsafe's emulated effect)."""

    kind = "gpu"

    def __init__(self, index: int) -> None:
        import torch

        try:
            import PyNvVideoCodec as nvc
        except ImportError as e:
            raise BackendUnavailableError(
                "GPU pipeline", f"NVIDIA's decoder does not import ({e})",
                "pip install 'streamsafe[pynvvideocodec]', or run on the model (device='model')") from e
        try:
            from nvvfx import VideoSuperRes

            self.effects = "nvvfx"
        except ImportError:
            from streamsafe.testing import VideoSuperRes

            self.effects = "streamsafe's emulated nvvfx (CUDA)"
        self.torch, self.nvc, self.VideoSuperRes, self.index = torch, nvc, VideoSuperRes, index
        torch.cuda.set_device(index)
        self.D, self.U, self.C = (torch.cuda.Stream(device=index) for _ in range(3))
        self.name = f"cuda:{index} ({torch.cuda.get_device_name(index)})"

    def scope(self) -> Any:
        return self.torch.cuda.device(self.index)  # (the current device is per thread)

    def decoder(self, path: str) -> Any:
        return self.nvc.SimpleDecoder(path, gpu_id=self.index, cuda_stream=self.D.cuda_stream, use_device_memory=True,
                                      output_color_type=self.nvc.OutputColorType.RGBP)

    def effect(self, quality: Any) -> Any:
        return self.VideoSuperRes(device=self.index) if quality is None else self.VideoSuperRes(quality, device=self.index)

    def convert(self, frame: Any) -> Any:
        """On U: the frame's planes as float32 in [0, 1] (a copy: the next decode waits for that copy only)."""
        with self.torch.cuda.stream(self.U):
            return frame.torch().float().div_(255)

    def upscale(self, contract: Any, x: Any) -> Any:
        with self.torch.cuda.stream(self.U):
            return contract.run(x, stream_ptr=self.U.cuda_stream)

    def copy_out(self, out: Any) -> Any:
        """On C: the output copied and made 8-bit ``(H, W, 3)`` (the effect's next run waits for the copy)."""
        torch = self.torch
        with torch.cuda.stream(self.C):
            y = out.torch()
            return y.clamp_(0, 1).mul_(255).add_(0.5).to(torch.uint8).permute(1, 2, 0)

    def to_host(self, copies: list[Any]) -> np.ndarray:
        """One host copy of a batch's frames; blocks the host until C has made it."""
        with self.torch.cuda.stream(self.C):
            return self.torch.stack(copies).cpu().numpy()  # type: ignore[no-any-return]


class _Model:
    """The emulated decoder and effect on a model of this worker's own (adversarial scheduler)."""

    kind = "model"
    effects = "streamsafe's emulated nvvfx (model)"
    name = "the CUDA ordering model (no GPU)"

    def __init__(self) -> None:
        from streamsafe.sim import SimBackend
        from streamsafe.testing import VideoSuperRes
        from streamsafe.testing.fake_pynvvideocodec import OutputColorType, SimpleDecoder

        self.sim = sim = SimBackend(scheduler="adversarial")
        self.VideoSuperRes, self.SimpleDecoder, self.RGBP = VideoSuperRes, SimpleDecoder, OutputColorType.RGBP
        self.D, self.U, self.C = (sim.create_stream(non_blocking=True) for _ in range(3))

    def scope(self) -> Any:
        return ss.use_backend(self.sim)

    def decoder(self, path: str) -> Any:
        return self.SimpleDecoder(path, cuda_stream=self.D.handle, output_color_type=self.RGBP)

    def effect(self, quality: Any) -> Any:
        return self.VideoSuperRes(backend=self.sim) if quality is None else self.VideoSuperRes(quality, backend=self.sim)

    def convert(self, frame: Any) -> Any:
        sim, U = self.sim, self.U
        planes = frame.copy(U)
        out = sim.empty(planes.shape, np.float32, stream=U)
        src, dst = planes.buffer, out.buffer
        sim.launch(U, "to float", lambda: np.divide(src.data, 255, out=dst.data, dtype=np.float32),
                   reads=[planes], writes=[out])
        return out

    def upscale(self, contract: Any, x: Any) -> Any:
        with self.sim.use_stream(self.U):
            return contract.run(x, stream_ptr=self.U.ptr)

    def copy_out(self, out: Any) -> Any:
        with self.sim.use_stream(self.C):
            return self.sim.copy(self.sim.from_dlpack(out.image), self.C)

    def to_host(self, copies: list[Any]) -> np.ndarray:
        hosts = [np.nan_to_num(self.sim.download(y, self.C), nan=0.0) for y in copies]  # (poison reads as 0)
        return (np.clip(np.stack(hosts), 0, 1) * 255 + 0.5).astype(np.uint8).transpose(0, 2, 3, 1).copy()


def _in_ray_actor() -> bool:
    """Whether this code runs in a Ray actor (a Ray Data worker of a callable class)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def _machine(device: Device, index: int, assigned: bool) -> _Gpu | _Model:
    if device not in ("auto", "gpu", "model"):
        raise ss.errors.ArgumentError(f"device={device!r}: expected 'auto', 'gpu' or 'model'")
    if device == "model" or (device == "auto" and not assigned and _in_ray_actor()):
        return _Model()  # (a Ray worker given no GPU stays off the GPUs Ray gives to others)
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
    except ImportError:
        cuda = False
    if cuda:
        return _Gpu(index)
    if device == "gpu":
        raise BackendUnavailableError("GPU pipeline", "torch with CUDA is not available in this worker",
                                      "Install torch with CUDA on the GPU nodes, or pass device='model' (or 'auto')")
    return _Model()


# -- the pipeline ---------------------------------------------------------------------------------------------


class _Resources:
    """What the worker must close: the effect's and the decoder's contracts (and through them the SDK objects)."""

    def __init__(self, machine: _Gpu | _Model) -> None:
        self.machine = machine
        self.effect: Any = None
        self.effect_contract: Any = None
        self.decoder: Any = None
        self.decoder_contract: Any = None
        self.retired = dict.fromkeys(("calls", *STAT_KEYS), 0)  # (counters of decoder contracts replaced)
        self.closed = False

    def close(self) -> None:
        """Wait for the copies still in flight, close the effect, end the decoder's guard. Blocks the host."""
        if self.closed:
            return
        self.closed = True
        with self.machine.scope():
            try:
                if self.decoder_contract is not None:
                    self.decoder_contract.close()
            finally:
                if self.effect_contract is not None:
                    self.effect_contract.close()  # (closes the effect itself after its copies)
        self.decoder = self.decoder_contract = None


class UpscalePipeline:
    """A Ray Data callable class: one guarded decode -> conversion -> ``VideoSuperRes`` -> copy-out pipeline per
    worker, made once in ``__init__`` (see the module docstring).

    ``scale``: output size / input size (1 to 4). ``frames_per_call``: frames a decoder call hands out (the host
    copy is made once per call). ``strategy``: the contracts' (``"none"``, no fences at all, only to see the races;
    it corrupts frames). ``device``: ``"auto"`` (the GPU Ray assigned if torch sees CUDA, else the model), ``"gpu"``
    or ``"model"`` (a Ray worker given no GPU runs on the model under ``"auto"``); ``gpu_index`` overrides the
    CUDA device. ``quality``: ``VideoSuperRes``'s
    (default: its own). ``column``: the batch column of clip paths. ``return_frames``: put each clip's frames in
    its row (``"frames"``: ``(N, H, W, 3)`` uint8), default: when :meth:`open_sink` makes no sink.

    Making one builds the streams, the effect and its contract on the worker's GPU (the decoder comes with the
    first clip: it needs a source; later clips reconfigure it). Does not block on GPU work.
    """

    def __init__(self, *, scale: int = 2, frames_per_call: int = 8, strategy: ss.StrategyName = "auto",
                 device: Device = "auto", gpu_index: int | None = None, quality: Any = None, column: str = "path",
                 return_frames: bool | None = None) -> None:
        if scale not in (1, 2, 3, 4):
            raise ss.errors.ArgumentError(f"scale={scale!r}: VideoSuperRes scales by 1 to 4; pass an int in 1..4")
        if int(frames_per_call) < 1:
            raise ss.errors.ArgumentError(f"frames_per_call={frames_per_call!r}: a decoder call hands out at least 1 frame")
        started = time.perf_counter()
        index, self.gpu_ids = assigned_gpu()
        self.scale, self.frames_per_call, self.column = scale, int(frames_per_call), column
        self.strategy, self.return_frames = strategy, return_frames
        machine = _machine(device, index if gpu_index is None else gpu_index, bool(self.gpu_ids))
        self._res = res = _Resources(machine)
        self._finalizer = weakref.finalize(self, _Resources.close, res)
        self.allow_none = strategy == "none"
        with machine.scope():
            res.effect = machine.effect(quality)
            res.effect_contract = ss.StreamContract(res.effect, machine.U, strategy, input_stream=machine.U,
                                                    allow_none=self.allow_none)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        """This worker: host and process id (a worker Ray restarts gets a new one)."""
        self.totals: dict[str, float] = dict.fromkeys(("clips", "frames", "seconds", *STAT_KEYS), 0)
        """The worker's counters so far: clips, frames, seconds in :meth:`process`, and :data:`STAT_KEYS`."""
        self.setup_seconds = time.perf_counter() - started
        """The time ``__init__`` took (streams, effect, contract; CUDA's start on a GPU)."""

    # -- what Ray calls -------------------------------------------------------------------------------------

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Run every clip of ``batch[column]``; returns one row per clip (see :meth:`process`), each value checked
        to be owned host memory (:func:`require_owned`). Blocks the host until the batch is done."""
        rows = [self.process(str(path)) for path in batch[self.column]]
        out: dict[str, np.ndarray] = {}
        for key in rows[0] if rows else ():
            values = [row[key] for row in rows]
            if isinstance(values[0], np.ndarray):  # (one array a clip: an object column, as shapes may differ)
                column = np.empty(len(values), dtype=object)
                for index, value in enumerate(values):
                    column[index] = value
                out[key] = column
            else:
                out[key] = np.array(values)
        require_owned(out, "the returned batch")
        return out

    def process(self, path: str) -> dict[str, Any]:
        """Decode ``path``, upscale every frame, copy it out; returns the clip's row: ``path``, ``frames``
        (``(N, H, W, 3)`` uint8, when returned), ``num_frames``, ``width``, ``height``, ``worker``, ``gpu`` (Ray's
        ids), ``device``, ``setup_seconds`` (the worker's ``__init__``), ``started``/``finished`` (epoch seconds),
        ``seconds``, ``decoder_calls``, ``effect_runs`` and :data:`STAT_KEYS`, plus the sink's columns. Blocks the host: once per decoder call
        (the host copy) and at the end of the clip."""
        res = self._res
        if res.closed:
            raise EffectStateError("UpscalePipeline", "process", "closed", "Make a new UpscalePipeline.")
        machine = res.machine
        started, t0 = time.time(), time.perf_counter()
        with machine.scope():
            before = self._counters()
            meta = self._open(path)
            width, height = meta.width * self.scale, meta.height * self.scale
            sink = self.open_sink(path, width, height, float(getattr(meta, "average_fps", 0) or 30))
            keep = self.return_frames if self.return_frames is not None else sink is None
            kept: list[np.ndarray] = []
            count = 0
            try:
                for frames in self._batches():
                    count += len(frames)
                    if sink is not None:
                        sink.write(frames)
                    if keep:
                        kept.append(frames)
                columns = dict(sink.close()) if sink is not None else {}
            except BaseException:
                abort = getattr(sink, "abort", None)
                if callable(abort):
                    abort()
                raise
            after = self._counters()
        seconds = time.perf_counter() - t0
        row: dict[str, Any] = {"path": path}
        if keep:
            row["frames"] = np.concatenate(kept) if kept else np.zeros((0, height, width, 3), np.uint8)
        row.update(num_frames=count, width=width, height=height, worker=self.worker, gpu=",".join(self.gpu_ids),
                   device=machine.kind, setup_seconds=self.setup_seconds, started=started, finished=time.time(), seconds=seconds,
                   decoder_calls=after["calls"] - before["calls"], effect_runs=after["runs"] - before["runs"],
                   **{k: after[k] - before[k] for k in STAT_KEYS}, **columns)
        totals = self.totals
        totals["clips"] += 1
        totals["frames"] += count
        totals["seconds"] += seconds
        for k in STAT_KEYS:
            totals[k] += row[k]
        return row

    def frames(self, path: str) -> Iterator[np.ndarray]:
        """The upscaled frames of ``path``, a decoder call's worth at a time: owned ``(n, H, W, 3)`` uint8 arrays
        (no sink, no row). Blocks the host once per decoder call."""
        res = self._res
        if res.closed:
            raise EffectStateError("UpscalePipeline", "frames", "closed", "Make a new UpscalePipeline.")
        with res.machine.scope():
            self._open(path)
            yield from self._batches()

    # -- what a subclass may change ----------------------------------------------------------------------------

    def open_sink(self, path: str, width: int, height: int, fps: float) -> FrameSink | None:
        """Where the clip's frames go in the worker, or ``None`` (the default: they go in the row). Called at
        the start of each clip (and again when Ray retries it on a new worker); the sink's ``write`` is called with
        each decoder call's frames, so whatever it blocks on holds up the pipeline."""
        return None

    def copy_out(self, output: Any) -> Any:
        """The copy of one effect output (a :class:`~streamsafe.SafeOutput`) on the copy stream, made 8-bit
        ``(H, W, 3)``; the effect's next run waits for it on the device. Does not block."""
        return self._res.machine.copy_out(output)

    def to_host(self, copies: list[Any]) -> Any:
        """The host copy of one decoder call's frames (``copies``: what :meth:`copy_out` returned), as
        ``(n, H, W, 3)`` uint8. What it returns is checked with :func:`require_owned`. Blocks the host."""
        return self._res.machine.to_host(copies)

    def close(self) -> None:
        """Close the SDK objects: wait for the copies in flight, close the effect, end the decoder's guard.
        Blocks the host for those copies. Idempotent; also done when the object is collected (Ray drops it when
        the worker shuts down) and at interpreter exit."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._res.closed

    @property
    def device(self) -> str:
        """Where the pipeline runs: ``"gpu"`` or ``"model"``."""
        return self._res.machine.kind

    @property
    def description(self) -> str:
        """The device and the effects, in words."""
        machine = self._res.machine
        return f"{machine.name}; effects: {machine.effects}"

    @property
    def contracts(self) -> tuple[Any, Any]:
        """The decoder's contract (``None`` before the first clip) and the effect's: their ``plan`` and ``stats``."""
        return self._res.decoder_contract, self._res.effect_contract

    # -- the steps ---------------------------------------------------------------------------------------------

    def _counters(self) -> dict[str, int]:
        res = self._res
        dc, ec = res.decoder_contract, res.effect_contract
        counters = dict(res.retired)
        counters["calls"] += dc.stats["runs"] if dc is not None else 0
        counters["runs"] = ec.stats["runs"]
        for k in STAT_KEYS:
            counters[k] += ec.stats[k] + (dc.stats[k] if dc is not None else 0)
        return counters

    def _open(self, path: str) -> Any:
        """The decoder on ``path`` (made, or reconfigured for the new source) and the effect sized for it."""
        res, machine = self._res, self._res.machine
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no such clip (a path in column {self.column!r} of the batch)")
        if res.decoder is not None:
            try:
                res.decoder_contract.reconfigure_decoder(path)
            except Exception:  # (this decoder cannot take that source: a new decoder, as for the first clip)
                self._retire_decoder()
        if res.decoder is None:
            res.decoder = machine.decoder(path)
            res.decoder_contract = ss.PoolContract(res.decoder, machine.D, self.strategy, allow_none=self.allow_none)
        meta = res.decoder.get_stream_metadata()
        width, height = meta.width * self.scale, meta.height * self.scale
        effect = res.effect
        if (getattr(effect, "output_width", None), getattr(effect, "output_height", None)) != (width, height) \
                or not effect.is_loaded:
            res.effect_contract.configure(output_width=width, output_height=height)
            effect.load()
        return meta

    def _retire_decoder(self) -> None:
        res = self._res
        dc = res.decoder_contract
        res.retired["calls"] += dc.stats["runs"]
        for k in STAT_KEYS:
            res.retired[k] += dc.stats[k]
        dc.close()
        res.decoder = res.decoder_contract = None

    def _batches(self) -> Iterator[np.ndarray]:
        res = self._res
        machine, dc, ec = res.machine, res.decoder_contract, res.effect_contract
        while frames := dc.get_batch_frames(self.frames_per_call):
            copies = [self.copy_out(machine.upscale(ec, machine.convert(frame))) for frame in frames]
            host = self.to_host(copies)
            require_owned(host, f"{type(self).__name__}.to_host()'s result")
            yield host

    def __repr__(self) -> str:
        return f"UpscalePipeline(scale={self.scale}, worker={self.worker}, {self.description})"

