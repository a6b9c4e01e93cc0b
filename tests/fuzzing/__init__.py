"""A randomized pipeline fuzzer: seeded programs that use an effect as users do, run under a strategy.

:func:`generate` draws one :class:`Program` from a seed: the effect (VideoSuperRes RGB8 or
RGB10A2, VideoFrameGeneration, TrueHDR), the kinds of the producer stream P, the SDK stream S,
the consumer stream C and a second consumer stream C2 (legacy, per-thread, blocking,
non-blocking; P and C may also be S itself), fresh inputs every frame that the program drops
after ``run()`` (an allocator recycles them) or surfaces rewritten in place, ``run()`` inside
or outside the framework's current-stream context, how the guard is made (a contract, a
``with`` block, the decorator, a ``with`` block per frame) and a second guard on the same
effect, and per frame: which guard runs it, configuration changes (output size, encoding,
input size, parameters), how the output is consumed (a copy helper or a raw
``from_dlpack(out.image)`` and copy; at once, after other work on C, or deferred until the
next frame; on C or on C2 after the program made C2 wait on C), and per-stream delays.

Every program is valid by the rules streamsafe states: each output is consumed before the
next ``run()`` of the effect, configuration changes go through a guard, and the input's
producer stream is S, declared (``input_stream=``) or current at ``run()``.

Two runners execute a program under one strategy and count corrupted frames (each copy
compared with a NumPy reference computed from the known input data):

* :func:`run_model`: on a :class:`~streamsafe.SimBackend` (``adversarial`` or seeded
  ``random`` scheduler), which also reports every race it found.
* :class:`GpuRunner`: on a GPU, with torch tensors from torch's caching allocator, CuPy
  arrays from CuPy's pool, spin-kernel delays on P, S, the conversion and C, and torch,
  CuPy, JAX and NumPy consumers.

Both run the same executor; only the primitives (make a stream, write an input, import,
copy, delay, synchronise) differ. Only streamsafe's public API is used.

``PYTHONPATH=. python -m tests.fuzzing --programs 40`` (from the repository root) runs the model
runner from the command line.

A test tool of streamsafe itself (not part of the package): :mod:`.program` draws the programs,
:mod:`.frames` holds the input frames and what each output frame must be, :mod:`.results` counts
and sums up, the executor (:mod:`.executor`) runs a program on a world of primitives, :mod:`.model`
and :mod:`.gpu` are the two worlds, :mod:`.cli` is the command line.
"""

from __future__ import annotations

from .cli import main
from .frames import frame_data, reference
from .gpu import GpuRunner
from .model import run_model
from .program import EFFECTS, FRAMEWORKS, KINDS, STRATEGIES, Consume, Program, State, Step, generate, programs
from .results import Result, summarize

__all__ = [
    "EFFECTS",
    "KINDS",
    "STRATEGIES",
    "FRAMEWORKS",
    "State",
    "Consume",
    "Step",
    "Program",
    "Result",
    "generate",
    "programs",
    "frame_data",
    "reference",
    "run_model",
    "GpuRunner",
    "summarize",
    "main",
]
