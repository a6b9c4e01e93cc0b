"""The benchmark: sync strategies side by side, on the GPU or on the model (``streamsafe bench``)."""

from .hand import HandRunner, RawFences, SimFences
from .harness import HAND_ROWS, BenchResult, Hand, Pipeline, Samples, run_bench
from .pipelines import SCENARIOS, SERVER_SIZES, BenchScenario, gpu_factory, sim_factory
from .report import format_table, progress_bar, to_json, write_json, write_png
from .server import ServerPipeline

__all__ = [
    "BenchResult",
    "BenchScenario",
    "HAND_ROWS",
    "Hand",
    "HandRunner",
    "Pipeline",
    "RawFences",
    "SCENARIOS",
    "SERVER_SIZES",
    "Samples",
    "ServerPipeline",
    "SimFences",
    "format_table",
    "gpu_factory",
    "progress_bar",
    "run_bench",
    "sim_factory",
    "to_json",
    "write_json",
    "write_png",
]
