"""Where streamsafe's host time per steady-state frame goes: each part of the replay and the import.

    PYTHONPATH=. python3 benchmarks/hot_path_parts.py [auto|event ...] [--stub] [--in-frame] [--json PATH]

A frame is ``contract.run(x)`` then the import of ``out.image``, in steady state (the replay). Each
part is the call streamsafe makes there, timed alone in the same state with the same arguments
(best of several rounds of many calls); ``the replay's own lines`` is the whole frame, timed the
same way, less the parts: the lines of ``_replay``, ``_call`` and ``SafeImage.__dlpack__`` that
call no function (attribute reads, tuple building, counters), plus what timing each part alone
misses (caches shared between the parts).

On a GPU machine (torch, ``CudaBackend``) the effect is ``contract_overhead.py``'s null effect and
the streams are bench scenario (a)'s; the rows marked ``hand pays it too`` are what a loop with
hand-written fences pays as well; the rest is streamsafe's. ``--stub`` (any machine, no GPU):
``python_overhead.py``'s stub backend and torch stand-in, whose fences and torch calls cost nothing.

The parts are those of the Python frame (:meth:`StreamContract._replay` and ``SafeImage.__dlpack__``):
the script switches the C extension's ``replay`` and ``import_output`` off for its run, since a part
inside them cannot be timed alone. They make the same calls in the same order, in C; what that saves
is ``contract_overhead.py``'s Python-replay row beside the C one's.

``--in-frame`` times the parts inside real frames instead: each part's function is wrapped by a
timer for the run (its own time, less the time of wrapped calls inside it, less the timer's own
cost, measured first), so what a part costs amid the rest of the frame (caches, the driver's state
after the frame's other calls) shows; ``the frame's other lines`` is then what no wrapped function
took. On a GPU machine it also times torch's steps of ``torch.from_dlpack(out.image)``: its
``torch.cuda.current_stream()`` and its import of the returned capsule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _interleave import best_us  # noqa: E402
from _timers import OwnTimers, patch_all  # noqa: E402
from contract_overhead import python_replay  # noqa: E402


def _setup(strategy: str, *, stub: bool) -> tuple[Any, ...]:
    """A guarded null effect in bench scenario (a)'s streams (or the stub's), and its frame."""
    import streamsafe as ss

    if stub:
        import python_overhead as po

        po._install_fake_torch()
        be: Any = po.StubBackend()
        fx: Any = po.NullSuperRes()
        x: Any = po.FakeTensor()
        c = ss.StreamContract(fx, be.sdk, strategy=strategy, backend=be)
        consumer_handle = 0x1000

        def frame() -> None:
            c.run(x).image.__dlpack__(stream=consumer_handle)

        def sync() -> None:
            pass

        where = "stub backend and torch stand-in: no driver calls, no torch"
        from_dlpack = None
    else:
        import torch
        from contract_overhead import NullSuperRes

        torch.cuda.set_device(0)
        side = torch.cuda.Stream()
        torch.cuda.set_stream(side)  # scenario (a): the side stream produces, runs the SDK and imports
        x = torch.zeros(3, 16, 16, device="cuda")
        fx = NullSuperRes(torch.zeros(3, 32, 32, device="cuda"))
        c = ss.StreamContract(fx, side, strategy=strategy)
        from_dlpack = torch.from_dlpack
        consumer_handle = side.cuda_stream

        def frame() -> None:
            from_dlpack(c.run(x).image)

        sync = torch.cuda.synchronize
        where = f"CudaBackend on {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    return c, fx, x, frame, sync, where, from_dlpack, consumer_handle


def measure(strategy: str, *, stub: bool) -> dict[str, Any]:
    """The frame's host time and each part's, in microseconds (see the module docstring)."""
    from streamsafe import contract, guarding, ledger, occupancy, outputs, steady

    note_run = occupancy.note_run
    c, fx, x, frame, sync, where, from_dlpack, consumer_handle = _setup(strategy, stub=stub)
    for _ in range(500):
        frame()
    frame_us = best_us(frame, sync)
    replays = steady.replays
    frame()
    if steady.replays != replays + 1:
        raise RuntimeError("the frame did not take the steady-state replay: nothing to break down")

    # the state of a steady frame, and the arguments its calls get
    lg = c.ledger
    args, dev = (x,), c.device
    shared = False
    facts = c._facts("run", args, {}, shared)
    recipe = next(r for r in c._recipes if r.facts == facts)
    stats = c.stats
    run_stream = recipe.run_stream
    out = c.run(x)
    raw = out.raw
    capsule = raw.image
    consumer = lg.known.get(consumer_handle) or out.image._default_consumer
    key = outputs.capsule_data_key(capsule)
    raw_run = guarding._raw_cache[(type(fx), "run")]
    run_kw = {"stream_ptr": recipe.run_ptr, "non_blocking": recipe.non_blocking}
    generation = lg.generation
    out.image.__dlpack__(stream=consumer_handle)  # (the frame's import: the import program exists now)
    import_program = lg.import_programs.get(consumer)

    def programs() -> None:
        if recipe.before.fences:
            recipe.before(stats)
        if recipe.protect and recipe.after.fences:
            recipe.after(stats)
        if import_program is not None and import_program.fences:
            import_program(lg.out_stats)

    def lock() -> None:
        lg.let_go(lg.try_hold())
        lg.let_go(lg.try_hold())

    def import_bookkeeping() -> None:
        lg.import_output(generation, consumer, escapes=True, key=key)

    def fresh_capsule() -> None:
        raw_run(fx, x, **run_kw)

    def fresh_capsule_imported() -> None:
        assert from_dlpack is not None
        from_dlpack(raw_run(fx, x, **run_kw).image)

    parts: dict[str, float] = {}
    parts["thread check (note_run)"] = best_us(lambda: note_run(dev), sync)
    parts["call facts (_facts) and recipe lookup"] = best_us(
        lambda: next(r for r in c._recipes if r.facts == c._facts("run", args, {}, shared)), sync)
    parts["effect lock (try_hold, let_go), run and import"] = best_us(lock, sync)
    parts["config read and state match (_config, Recipe.matches)"] = best_us(lambda: recipe.matches(lg, c._config()), sync)
    parts["fence programs (bound driver calls)"] = best_us(programs, sync)
    parts["input views (_read_views)"] = best_us(lambda: c._read_views(args, run_stream) if ledger.views_exist() else None, sync)
    effect_us = best_us(lambda: raw_run(fx, x, **run_kw), sync)
    parts["calling the effect (call_raw, over the effect's run)"] = (
        best_us(lambda: guarding.call_raw(fx, "run", x, **run_kw), sync) - effect_us)
    parts["the effect's own run() (hand pays it too)"] = effect_us
    parts["input protection (record_stream)"] = best_us(lambda: c._protect_inputs(args, run_stream) if recipe.protect else None, sync)
    parts["output objects (SafeOutput, SafeImage)"] = best_us(
        lambda: contract.SafeOutput(raw, contract.SafeImage(lg, capsule, generation, dev, recipe.default_consumer, fx)), sync)
    parts["capsule key (capsule_data_key)"] = best_us(lambda: outputs.capsule_data_key(capsule), sync)
    program_us = best_us(lambda: import_program(lg.out_stats) if import_program is not None and import_program.fences else None, sync)
    parts["import bookkeeping (import_output, less its fences)"] = best_us(import_bookkeeping, sync) - program_us
    parts["view registry (add_view)"] = best_us(lambda: lg.add_view(key, generation), sync)
    # (after_run last: it starts a new output generation, which the calls above must not see)
    parts["ledger update (after_run)"] = best_us(
        lambda: lg.after_run(recipe.plan, recipe.shapes, stats, recipe.default_consumer), sync)
    if from_dlpack is not None:
        parts["torch.from_dlpack of the capsule (hand pays it too)"] = (
            best_us(fresh_capsule_imported, sync) - best_us(fresh_capsule, sync))
    for _ in range(50):  # back to a steady frame
        frame()
    parts["the replay's own lines (the frame less the parts)"] = frame_us - sum(parts.values())
    theirs = sum(v for n, v in parts.items() if "hand pays" in n)
    return {
        "strategy": strategy,
        "where": where,
        "frame_us": frame_us,
        "parts_us": parts,
        "streamsafe_us": frame_us - theirs,
        "plan": str(c.plan),
    }


def measure_in_frame(strategy: str, *, stub: bool, frames: int = 20000) -> dict[str, Any]:
    """Each part's own time inside real steady frames, in microseconds per frame (``--in-frame``)."""
    from streamsafe import contract, guarding, occupancy, outputs, program, steady

    c, fx, x, frame, sync, where, from_dlpack, _ = _setup(strategy, stub=stub)
    for _ in range(500):
        frame()
    frame_us = best_us(frame, sync)
    timers = OwnTimers()
    timers.calibrate()
    lg = c.ledger
    sites: list[tuple[Any, str, str]] = [
        (c, "run", "contract.run() and _call's own lines"),
        (c, "_replay", "the replay's own lines (_replay)"),
        (occupancy, "note_run", "thread check (note_run)"),
        (c, "_facts", "call facts (_facts)"),
        (lg, "try_hold", "effect lock (try_hold, let_go), run and import"),
        (lg, "let_go", "effect lock (try_hold, let_go), run and import"),
        (c, "_config", "config read and state match (_config, Recipe.matches)"),
        (steady.Recipe, "matches", "config read and state match (_config, Recipe.matches)"),
        (program.FenceProgram, "__call__", "fence programs (bound driver calls)"),
        (c, "_read_views", "input views (_read_views)"),
        (contract, "call_raw", "calling the effect (call_raw, over the effect's run)"),
        (lg, "after_run", "ledger update (after_run)"),
        (c, "_protect_inputs", "input protection (record_stream)"),
        (contract, "SafeOutput", "output objects (SafeOutput, SafeImage)"),
        (contract, "SafeImage", "output objects (SafeOutput, SafeImage)"),
        (outputs.SafeImage, "__dlpack__", "SafeImage.__dlpack__'s own lines"),
        (outputs.SafeImage, "__dlpack_device__", "SafeImage.__dlpack_device__"),
        (outputs, "capsule_data_key", "capsule key (capsule_data_key)"),
        (lg, "import_output", "import bookkeeping (import_output, less its fences)"),
        (lg, "add_view", "view registry (add_view)"),
    ]
    if from_dlpack is not None:
        import torch
        import torch.utils.dlpack as torch_dlpack

        sites.append((torch.cuda, "current_stream", "torch: current_stream() in from_dlpack (torch's own)"))
        if hasattr(torch_dlpack, "_from_dlpack"):
            sites.append((torch_dlpack, "_from_dlpack", "torch: import of the capsule (hand pays it too)"))
    key = (type(fx), "run")
    raw_run = guarding._raw_cache[key]
    guarding._raw_cache[key] = timers.wrap("the effect's own run() (hand pays it too)", raw_run)
    try:
        with patch_all(timers, sites):
            wall_ns = timers.run_frames(frame, sync, frames)
    finally:
        guarding._raw_cache[key] = raw_run
    parts, instrumented_us = timers.parts_us(wall_ns, frames, "the frame's other lines (no wrapped function)")
    theirs = sum(v for n, v in parts.items() if "hand pays" in n or "torch's own" in n)
    return {
        "strategy": strategy,
        "where": where,
        "mode": "in-frame",
        "frame_us": frame_us,
        "instrumented_frame_us": instrumented_us,
        "timer_overhead_ns": timers.overhead_ns,
        "wrapped_calls_per_frame": sum(timers.calls.values()) / frames,
        "parts_us": parts,
        "streamsafe_us": instrumented_us - theirs,
        "plan": str(c.plan),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("strategies", nargs="*", default=["auto", "event"])
    parser.add_argument("--stub", action="store_true", help="no GPU: the stub backend and a torch stand-in")
    parser.add_argument("--in-frame", action="store_true", help="time the parts inside real frames")
    parser.add_argument("--json")
    args = parser.parse_args()
    with python_replay():  # (the Python frame's parts: see the module docstring)
        results = [(measure_in_frame if args.in_frame else measure)(s, stub=args.stub) for s in args.strategies]
    for r in results:
        print(f"strategy {r['strategy']} ({r['where']}): {r['frame_us']:.2f} us per frame (run + out.image import), "
              f"streamsafe's {r['streamsafe_us']:.2f} us")
        if "instrumented_frame_us" in r:
            print(f"  in frame: {r['instrumented_frame_us']:.2f} us per instrumented frame less the timers "
                  f"({r['wrapped_calls_per_frame']:.0f} timed calls a frame at {r['timer_overhead_ns']:.0f} ns each); "
                  f"{r['instrumented_frame_us'] - r['frame_us']:.2f} us of it is the timers' residue, which lands in "
                  "the parts that call timed functions")
        for name, us in sorted(r["parts_us"].items(), key=lambda kv: -kv[1]):
            print(f"  {name:<62} {us:>7.2f} us")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results}, indent=1))

if __name__ == "__main__":
    main()
