"""The benchmark: sync strategies side by side, on the GPU or on the model (``streamsafe bench``)."""

from .harness import BenchResult, Pipeline, Samples, run_bench
from .pipelines import SCENARIOS, BenchScenario, gpu_factory, sim_factory
from .report import format_table, progress_bar, to_json, write_json, write_png

__all__ = [
    "BenchResult",
    "BenchScenario",
    "Pipeline",
    "SCENARIOS",
    "Samples",
    "format_table",
    "gpu_factory",
    "progress_bar",
    "run_bench",
    "sim_factory",
    "to_json",
    "write_json",
    "write_png",
]
