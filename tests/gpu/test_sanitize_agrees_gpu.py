"""Sanitize mode on the GPU gives the model's verdict: every hazard scenario, every strategy.

The same scenario runs twice: on the model (SimLab; its happens-before report) and with real
kernels on the GPU inside ``ss.sanitize()`` (the shadow model fed only by what streamsafe, the
emulated effects and the lab issue). Row by row: a race on the GPU exactly where the model has
one (no false positive under any strategy, no race missed under ``none``), and every hazard the
model names is named on the GPU too. The GPU may name more: there, a released buffer's address
is handed out again, so an unfenced H6 also shows as H5 on the next effect's buffer.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from _lane import lane_output

pytestmark = pytest.mark.gpu


def test_sanitize_on_the_gpu_agrees_with_the_model(torch_cuda) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("cupy")
    from streamsafe import hooks
    from streamsafe.sim import mirror
    from streamsafe.tools.hazards import SCENARIOS, STRATEGIES, classify, contract_wrap, run_scenario
    from streamsafe.testing.labs import GpuLab, SimLab

    rows, disagree = [], []
    for strategy in STRATEGIES:
        wrap = contract_wrap(strategy)
        for sc in SCENARIOS:
            quick = dataclasses.replace(sc, delays_us={})  # the verdict does not depend on timing
            model = run_scenario(quick, SimLab(), frames=3, strategy=strategy, wrap=wrap)
            shadow = mirror.Mirror()
            shadow.sim.on_race = "record"
            hooks.register(shadow)
            try:
                real = run_scenario(quick, GpuLab(), frames=3, size=(32, 32), strategy=strategy, wrap=wrap)
            finally:
                hooks.unregister(shadow)
            gpu_hazards = sorted({classify(r) for r in shadow.races})
            row = {
                "strategy": strategy, "scenario": sc.id, "model": model.hazards_reported, "gpu_sanitize": gpu_hazards,
                "gpu_races": [str(r) for r in shadow.races[:3]], "gpu_corrupt": real.corrupt_frames,
            }
            rows.append(row)
            if bool(model.hazards_reported) != bool(gpu_hazards) or not set(model.hazards_reported) <= set(gpu_hazards):
                disagree.append(row)
    out = lane_output("sanitize-agreement.json")
    if out is not None:
        out.write_text(json.dumps({"rows": rows, "disagree": disagree}, indent=1))
    print(f"sanitize agreement: {len(rows) - len(disagree)}/{len(rows)} rows agree")
    assert disagree == [], json.dumps(disagree, indent=1)[:4000]
    assert any(r["model"] for r in rows if r["strategy"] == "none")  # the control: races are found at all
