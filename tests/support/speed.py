"""Speed inputs for a CPU of given rates (the speed model's tests)."""

from __future__ import annotations

from llamafit.fit.speed import Efficiency, SpeedInputs
from llamafit.machine.rates import Rate


def cpu(
    bw: float, flops: float, decode: float | None = None, attention: float | None = None
) -> SpeedInputs:
    eff = {"cpu": Efficiency(1.0, 1.0, "test", decode, attention)}
    return SpeedInputs((), (), Rate(bw, "test"), Rate(flops, "test"), efficiency=eff)
