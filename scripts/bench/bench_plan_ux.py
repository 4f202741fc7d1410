"""What issue #25's additions cost a plan, side by side in one run: the solver's plan() alone, then
the speed band and a turn (speed_band), the preset's -np comparison (preset_effect), and the
--html page's curves (plan_curves.curves, only with --html).

    python scripts/bench/bench_plan_ux.py [--repeat N]

Best of N, milliseconds, for the Qwen2.5-32B header on an RTX 4080 (a partial offload), on 24 GiB
given by size (an assumed bandwidth) and on 24 GiB with --for agent.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from llamafit.commands.plan import with_preset  # noqa: E402
from llamafit.commands.plan_curves import curves  # noqa: E402
from llamafit.commands.prepare import prepare  # noqa: E402
from llamafit.commands.prepared import ModelRef, Request  # noqa: E402
from llamafit.fit.explain import plan  # noqa: E402
from llamafit.fit.plan_speed import speed_band  # noqa: E402
from llamafit.fit.presets import DEFAULT_TURN, preset_effect, preset_named  # noqa: E402
from llamafit.fit.solver import Policy  # noqa: E402
from llamafit.machine.pick import MachineSpec  # noqa: E402

QWEN = str(ROOT / "fixtures" / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    repeat = ap.parse_args().repeat
    env = {
        **os.environ,
        "LLAMAFIT_HOST_BANDWIDTH": os.environ.get("LLAMAFIT_HOST_BANDWIDTH", "50e9"),
    }
    print(
        f"{'case':<22}{'plan()':>9}{'+band':>9}{'+preset':>9}{'--html':>9}  (ms, best of {repeat})"
    )
    for label, gpu, preset in (
        ("rtx4080", "rtx4080", None),
        ("24GiB", "24GiB", None),
        ("24GiB --for agent", "24GiB", "agent"),
    ):
        print(f"{label:<22}" + "".join(f"{t:>9.1f}" for t in case(gpu, preset, env, repeat)))


def case(gpu: str, preset: str | None, env: dict[str, str], repeat: int) -> list[float]:
    """[plan(), speed_band, preset_effect, curves] in ms for one machine and preset."""
    p0 = prepare(Request(ModelRef(QWEN), MachineSpec(gpu), env=env))
    chosen = preset_named(preset) if preset else None
    policy0 = Policy(
        preset=chosen,
        ubatches=chosen.ubatches if chosen else None,
        prefer=chosen.prefer if chosen else "speed",
    )
    p, policy = with_preset(p0, policy0)
    result = plan(p.target, p.parsed.config, policy, speed=p.speed)
    c, speed = result.choice, p.speed
    assert c is not None and speed is not None
    times = [
        best(lambda: plan(p.target, p.parsed.config, policy, speed=speed), repeat),
        best(lambda: speed_band(p.target, c, speed, DEFAULT_TURN), repeat),
        0.0,
        best(lambda: curves(p, result, policy), repeat),
    ]
    if chosen is not None:
        times[2] = best(
            lambda: preset_effect(
                chosen, policy.min_ctx or 0, c.cfg, p0.parsed.config, p.target.evaluate, c.breakdown
            ),
            repeat,
        )
    return times


if __name__ == "__main__":
    main()
