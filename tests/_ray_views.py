"""A pipeline that gets the copy-out wrong, for tests/test_ray.py: Ray's workers import it (the test cluster puts
this folder on their ``PYTHONPATH``)."""

from __future__ import annotations

from typing import Any

from streamsafe.integrations.ray import UpscalePipeline


class ReturnsOutputs(UpscalePipeline):
    """Returns the effect's outputs as they are (zero-copy views of its one reused buffer), not host copies."""

    def copy_out(self, output: Any) -> Any:
        return output.image

    def to_host(self, copies: list[Any]) -> Any:
        return copies
