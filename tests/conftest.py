"""Shared fixtures. Tests marked ``gpu`` skip cleanly on machines without a CUDA GPU; the tests named in
:data:`SLOW` are marked ``slow`` (``make test-fast`` leaves them out, ``make test`` runs them). Hypothesis runs
with the ``ci`` profile where ``CI`` is set, else ``dev`` (``HYPOTHESIS_PROFILE`` chooses another)."""

from __future__ import annotations

import fnmatch
import importlib.util
import os

import pytest
from hypothesis import HealthCheck, settings

# CI (.ci/run sets CI=true): the same examples every run, so a run is reproducible and its time steady (a search
# that happened to miss cannot fail a submission), and a failure prints the blob that replays it. Locally: new
# examples each run, failures kept in .hypothesis/ and tried first next time. Both: no deadline (a shared machine's
# timing is noise) and no too-slow health check (the model's examples are slow by design). The tests' own
# max_examples stand in both: the profiles change which examples run, not how many.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

# Every replayed steady-state call is planned again and compared with its recipe (streamsafe.steady).
os.environ.setdefault("STREAMSAFE_CHECK_REPLAY", "1")

import streamsafe as ss
from streamsafe import steady

# (set again here: the pytest plugin that provides fake_nvvfx imports streamsafe before this file)
steady.check_replay = os.environ["STREAMSAFE_CHECK_REPLAY"] == "1"


def _gpu_reason() -> str | None:
    if importlib.util.find_spec("cuda.bindings") is None:
        return "cuda.bindings is not installed"
    from streamsafe.backend.cuda import CudaBackend

    return CudaBackend.probe()


_GPU_SKIP = _gpu_reason()


SLOW = (
    # (node id, or a file: every test of it; seconds of one test or all its cases, measured alone on the 2-core machine)
    "tests/test_ordering_machine.py::TestEffectLife",  # 18-29: 2,000 programs of the state machine
    "tests/test_ordering_machine.py::TestDecoderLife",  # 3
    "tests/test_fuzz_model.py::test_no_corrupt_frame_and_no_race",  # 15-23, 240 cases
    "tests/test_run_command.py",  # 20-32: a streamsafe run process each
    "tests/test_docs.py::test_api_reference_renders_every_public_name",  # 8-10: pdoc in a process
    "tests/test_sim_model.py::test_twenty_thousand_frames_run_in_bounded_memory",  # 6-8
    "tests/test_sim_model.py::test_pruned_histories_report_every_racing_access",  # 1.5-4
    "tests/test_sim_model.py::test_the_allocators_query_gives_the_program_no_ordering",  # 1.3
    "tests/test_bench.py::test_the_profile_benchmark_runs_on_any_machine",  # 6-7
    "tests/test_fake_nvvfx.py::test_fixture_leaves_a_session_wide_install_in_place",  # 5: pytest in a process, twice
    "tests/test_fake_nvvfx.py::test_fixture_shadows_a_real_module_for_one_test_only",  # 2.5-3.5
    "tests/test_fake_nvvfx.py::test_fixture_without_a_session_install_is_undone_after_the_test",  # 2.5
    "tests/test_typing.py::test_user_script_type_checks_strictly_and_misuse_is_rejected",  # 3-5: mypy
    "tests/test_invariant.py::test_the_invariant_holds_for_random_programs_that_follow_the_vendors_recipes",  # 5
    "tests/test_ordering_holes.py::test_blocks_and_decorators_that_are_never_closed_give_their_shadow_stream_back",  # 3.5
    "tests/test_ordering_holes.py::test_the_emulated_sdk_allocates_outside_the_programs_pools",  # 1.1
    "tests/test_replay.py::test_random_programs_give_the_same_results_either_way",  # 3.8
    "tests/test_replay.py::test_a_class_guards_effect_collected_during_its_call_still_gives_the_output",  # 1.2
    "tests/test_idiomatic_programs.py::test_a_ctrl_c_at_any_function_entry_of_a_guarded_call_leaves_every_later_frame_right",
    "tests/test_contract_properties.py::test_every_strategy_is_race_free_and_correct",  # 2.7
    "tests/test_contract_properties.py::test_the_same_generator_finds_races_without_fences",  # 1.5
    "tests/test_per_thread_fuzz.py::test_guarded_pipelines_around_per_thread_streams_give_every_frame",  # 1.8-2.2
    "tests/test_model_properties.py",  # 6.5: four generators of 200-300 programs
    "tests/test_model_many_threads.py::test_leaving_out_streams_with_nothing_new_changes_nothing",  # 2.1-2.6
    "tests/test_newcomer_fixes.py::test_the_guides_testing_snippet_runs",  # 1.7-2
    "tests/test_examples.py::test_decode_upscale_*",  # 4.6: the example in a process, four ways
    "tests/test_decoder.py::test_streamsafe_run_guards_a_program_of_the_decoder_alone",  # 1.3-3
    "tests/test_steady.py::test_replay_issues_exactly_what_planning_issues",  # 1
    "tests/test_issue39_fixes.py::test_a_gpu_program_names_its_cpu_twin_which_exists",  # 1.2: two processes each
    "tests/test_issue39_fixes.py::test_the_examples_readme_cpu_commands_run_on_a_cpu",  # 1.1
    "tests/test_issue39_fixes.py::test_run_reads_the_program_from_stdin_as_python_does",  # 0.7
    "tests/test_layers.py::test_no_module_takes_another_modules_private_names",  # 1-1.6: parses every module
    "tests/test_examples.py::test_without_a_gpu_the_program_says_so",  # 1: four processes
    "tests/test_multi_device.py::test_hazard_matrix_on_device_1_gives_device_0_verdicts",  # 0.6-1
    "tests/test_cli.py::test_progress_is_silent_in_a_pipe",  # 1: a process
    "tests/test_quickstart.py::test_readme_cpu_pipeline_runs_and_fails_without_the_contract",  # 0.9-1.6
    "tests/test_model_many_threads.py::test_the_generator_makes_legacy_work_after_other_threads_work",  # 0.9-1.2
    "tests/test_newcomer_fixes.py::test_streamsafe_sanitize_environment_variable_makes_every_model_raise",  # 0.9-2.6
    "tests/test_cli_errors.py::test_*_in_a_real_process",  # 2.1: a process each
    "tests/test_ray.py",  # 18-20: a local Ray cluster and its workers
    "tests/test_bench.py::test_the_strategies_script_runs_without_a_gpu",  # 2-3: the bench in a process
    "tests/test_fake_nvvfx.py::test_a_block_and_the_fixture_take_the_submodules_out_again",  # 1.3
    "tests/test_guide_own_sdk.py::test_the_guides_example_test_passes_as_written",  # 1.2: pytest in a process
    "tests/test_integrations.py::test_the_example_without_ray_checks_every_frame_and_the_check_can_fail",  # 1.1
)
"""The slowest tests (``--durations=30``), as patterns: marked ``slow``. Together they are most of the suite's time."""


def _slow(nodeid: str) -> str | None:
    """The entry of :data:`SLOW` (a pattern, as :mod:`fnmatch` reads it) that names ``nodeid``: the test, a case of
    it (``[...]``), or what it holds (a file's or a class's tests), if any."""
    return next((e for e in SLOW if any(fnmatch.fnmatchcase(nodeid, p) for p in (e, e + "[[]*", e + "::*"))), None)


@pytest.hookimpl(tryfirst=True)  # (before -m "not slow" deselects)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    named = set()
    for item in items:
        entry = _slow(item.nodeid)
        if entry is not None:
            item.add_marker(pytest.mark.slow)
            named.add(entry)
    if config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.getoption("deselect"):
        stale = [e for e in SLOW if e not in named]  # (the whole suite was collected: every entry must name a test)
        if stale:
            raise pytest.UsageError(f"tests/conftest.py's SLOW names tests that do not exist: {stale}")
    if _GPU_SKIP is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {_GPU_SKIP}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the tests skipped for want of a GPU (and one a reason for any other skip), not a line each."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    gpu = 0
    for report in skipped:
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if "gpu" in getattr(report, "keywords", {}) or reason.startswith("needs a CUDA GPU"):
            gpu += 1
        else:
            reasons[reason] = reasons.get(reason, 0) + 1
    if gpu:
        terminalreporter.write_line(f"{gpu} GPU tests skipped: {f'needs a CUDA GPU: {_GPU_SKIP}' if _GPU_SKIP else 'see -rs'}")
    for reason, n in sorted(reasons.items()):
        terminalreporter.write_line(f"{n} skipped: {reason}")


@pytest.fixture
def sim() -> ss.sim.SimBackend:
    """A SimBackend whose scheduler runs newest-ready-first and only when the host waits."""
    return ss.sim.SimBackend(scheduler="adversarial")
