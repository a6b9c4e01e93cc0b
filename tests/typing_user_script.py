"""A user's pipeline on the simulated backend, written the way the README shows.

tests/test_typing.py type-checks it with ``mypy --strict`` (the package ships ``py.typed``) and runs it.
The ``assert_type`` lines are what a user's type checker must conclude; they do nothing at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

import streamsafe as ss

if TYPE_CHECKING:
    from typing_extensions import assert_type
else:
    _T = TypeVar("_T")

    def assert_type(value: _T, typ: Any, /) -> _T:
        return value
from streamsafe.testing import VideoSuperRes


def make_effect(sim: ss.sim.SimBackend) -> VideoSuperRes:
    sr = VideoSuperRes(backend=sim)
    sr.output_width, sr.output_height = 64, 64
    sr.load()
    return sr


def grey(sim: ss.sim.SimBackend, stream: ss.Stream, level: int) -> object:
    frame = sim.empty((3, 32, 32), np.float32, stream=stream)
    sim.fill(frame, np.float32(level / 255), stream=stream)
    return frame


def check(image: np.ndarray, level: int) -> None:
    assert np.all(np.round(image * 255) == level), level


def main() -> None:
    sim = ss.sim.SimBackend(scheduler="adversarial")
    producer: ss.Stream = sim.create_stream(non_blocking=True)
    sdk = sim.create_stream(non_blocking=True)
    strategy: ss.StrategyName = "auto"

    # 1. a block
    sr = make_effect(sim)
    with sim.use_stream(sdk), ss.stream_contract(sr, sdk, strategy=strategy, input_stream=producer) as c:
        assert_type(c, ss.StreamContract)
        out = c.run(grey(sim, producer, 40))
        assert_type(out, ss.SafeOutput)
        image: np.ndarray = out.numpy()
        check(image, 40)
    plan: ss.FencePlan = c.plan
    print(plan)
    sr.close()

    # 2. a decorator: the function keeps its own type
    sr2 = make_effect(sim)

    @ss.stream_safe(sr2, strategy="event", input_stream=producer)
    def upscale(frame: object, level: int) -> np.ndarray:
        out = sr2.run(frame)  # guarded inside the function: a SafeOutput
        assert isinstance(out, ss.SafeOutput)  # the effect's run() is typed as the SDK's raw output
        host: np.ndarray = out.numpy()
        check(host, level)
        return host

    with sim.use_stream(sdk):
        result = upscale(grey(sim, producer, 80), 80)
    assert_type(result, np.ndarray)
    sr2.close()

    # 3. the contract itself
    contract = ss.StreamContract(make_effect(sim), sdk, strategy=ss.Strategy.ASYNC, input_stream=producer)
    safe = contract.run(grey(sim, producer, 120))
    check(safe.numpy(), 120)
    stats: dict[str, int] = contract.stats
    contract.close()

    # a class guard: every instance's plain run() goes through its own contract
    with ss.guard(VideoSuperRes, strategy="event") as g:
        assert_type(g, ss.ClassGuard)
        sr3 = make_effect(sim)
        with sim.use_stream(sdk):
            guarded = sr3.run(grey(sim, sdk, 160))
            assert isinstance(guarded, ss.SafeOutput)
            check(guarded.numpy(), 160)
        contracts: list[ss.StreamContract] = g.contracts
        sr3.close()

    races: list[ss.sim.Race] = sim.races
    assert races == [], [str(r) for r in races]
    print(f"ok: {stats['runs']} run(s) through the contract, {len(contracts)} guarded effect(s), no race")


if __name__ == "__main__":
    main()
