"""The pipeline fuzzer on the model: seeded random programs (tests/fuzzing) under every strategy.

Each program is run on a SimBackend with the adversarial scheduler and with two seeded random
schedules; a frame is corrupt when its copy differs from the NumPy reference, and every race
the model reports counts too. The ``none`` control shows that the same programs do corrupt
frames when nothing is fenced, so a pass means the fences, not the programs, are right.

Sizes: ``STREAMSAFE_FUZZ_MODEL_PROGRAMS`` (default 200) programs of
``STREAMSAFE_FUZZ_MODEL_FRAMES`` (default 10) frames, plus ``LONG_SEEDS`` of 40 frames.
A failure prints each failing run with its program, so ``generate(seed)`` replays it.
"""

from __future__ import annotations

import os

import pytest

from tests.fuzzing import STRATEGIES, Result, generate, run_model

PROGRAMS = int(os.environ.get("STREAMSAFE_FUZZ_MODEL_PROGRAMS", "200"))
FRAMES = int(os.environ.get("STREAMSAFE_FUZZ_MODEL_FRAMES", "10"))
SCHEDULES = (("adversarial", 0), ("random", 1), ("random", 2))
LONG_SEEDS = range(1000, 1008)
"""A few long programs (allocator reuse and resizes over many frames), adversarial schedule only."""

CONTROL_SEEDS = (0, 2, 3, 4, 5, 6, 7, 8, 16, 17, 19, 21, 27, 31)
"""Programs whose unfenced run corrupts frames or races (every effect, fresh and in-place inputs,
every kind of guard; hazards H1, H2, H4, H5, H6, H12 among them)."""


def _report(results: list[Result]) -> str:
    return "\n".join(str(r) + ("\n    " + "\n    ".join(r.race_samples) if r.race_samples else "") for r in results)


@pytest.mark.parametrize("seed", CONTROL_SEEDS)
def test_unfenced_control_fails(seed: int) -> None:
    """Strategy ``none`` places no fence: the fuzzer must see the damage (or the model the race)."""
    result = run_model(generate(seed, frames=FRAMES), "none")
    assert result.error is None, str(result)
    assert result.corrupt > 0 or result.races > 0, f"the unfenced program ran clean: {result}"


def test_unfenced_control_fails_on_most_programs() -> None:
    results = [run_model(generate(seed, frames=FRAMES), "none") for seed in range(min(PROGRAMS, 40))]
    failing = [r for r in results if r.corrupt or r.races]
    assert len(failing) >= 0.6 * len(results), f"only {len(failing)} of {len(results)} unfenced programs failed"
    assert sum(r.corrupt for r in results) > 0


def test_programs_are_reproducible() -> None:
    assert generate(7, frames=FRAMES) == generate(7, frames=FRAMES)
    assert generate(7, frames=FRAMES).describe() != generate(8, frames=FRAMES).describe()
    a, b = run_model(generate(7, frames=FRAMES), "none"), run_model(generate(7, frames=FRAMES), "none")
    assert (a.corrupt, a.corrupt_frames, a.races) == (b.corrupt, b.corrupt_frames, b.races)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_no_corrupt_frame_and_no_race(seed: int, strategy: str) -> None:
    program = generate(seed, frames=FRAMES)
    results = [run_model(program, strategy, scheduler=name, seed=s) for name, s in SCHEDULES]
    failed = [r for r in results if not r.ok]
    assert not failed, "\n" + _report(failed)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seed", LONG_SEEDS)
def test_long_programs(seed: int, strategy: str) -> None:
    result = run_model(generate(seed, frames=40), strategy)
    assert result.ok, "\n" + _report([result])


@pytest.mark.parametrize("args,says", [
    (["--scheduler", "bogus"], "invalid choice: 'bogus'"),
    (["--strategies", "bogus"], "unknown strategy 'bogus'"),
    (["--frames", "0"], "0 is not a positive count"),
    (["--programs", "0"], "0 is not a positive count"),
    (["--schedule-seeds", "0"], "0 is not a positive count"),
])
def test_the_fuzzers_command_line_refuses_what_would_prove_nothing(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad name raised a traceback or became a table row; a zero count ran nothing and passed (found by a
    review helper)."""
    from tests.fuzzing import main

    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2 and says in capsys.readouterr().err


def test_the_fuzzers_command_line_takes_names_in_any_case_once(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fuzzing import main

    assert main(["--programs", "2", "--frames", "2", "--strategies", "Auto,auto", "--scheduler", "Adversarial"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("auto ")]
    assert len(rows) == 1 and rows[0].split()[1] == "2"
