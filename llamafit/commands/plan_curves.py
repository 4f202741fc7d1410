"""The data behind `plan --html`'s curves (only when a page is asked for: this is extra solver
work).

- context against layers on the GPU: for each K/V type (flash attention on where the type needs it,
  the chosen -ub, experts as chosen), the largest context per slot at up to `POINTS` -ngl values
  and the chosen one;
- speed against context: the chosen config's generation tokens/s at fills from empty to full, with
  the band (speed.SpeedBand's rule: assumed rates at their ends, the model's error around them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from ..fit.explain import PlanResult, learned_target
from ..fit.search import Target, max_context
from ..fit.solver import KV_PAIRS, Policy, bounds
from ..fit.speed import GENERATION_BAND, estimate, estimate_at, with_rates
from ..memory.config import LaunchConfig
from .prepared import Prepared

# -ngl values and fills per curve: enough for a curve, bounded work for a 100-layer model
POINTS = 12


def _spread(n: int, points: int = POINTS) -> list[int]:
    """Up to `points` integers from 0 to n, both ends included, evenly spread."""
    if n <= points - 1:
        return list(range(n + 1))
    return sorted({round(i * n / (points - 1)) for i in range(points)})


def _ctx_at(target: Target, base: LaunchConfig, hi: int, n_gpu_layers: int) -> int | None:
    return max_context(target, replace(base, n_gpu_layers=n_gpu_layers), hi)


def _curve(
    ctx_at: Callable[[int], int | None], layers: list[int], hi: int
) -> list[list[int | None]]:
    """[[n_gpu_layers, largest context]…], from the most layers down: fewer layers on the GPU leave
    it more room, so once one reaches the most asked for (`hi`), every smaller count does too."""
    out: list[list[int | None]] = []
    reached = False
    for k in sorted(layers, reverse=True):
        ctx = hi if reached else ctx_at(k)
        reached = reached or ctx == hi
        out.append([k, ctx])
    return out[::-1]


def curves(p: Prepared, result: PlanResult, policy: Policy) -> dict[str, Any]:
    """{"context_by_layers": [{type_k, type_v, flash_attn, points: [[n_gpu_layers, context or
    null]…]}…], "speed_by_context": [[fill, low, estimate, high]…]} (empty lists where they do not
    apply)."""
    c = result.choice
    out: dict[str, Any] = {"context_by_layers": [], "speed_by_context": []}
    if c is None:
        return out
    target = learned_target(p.target, c)  # as the trade-off rows: near the exact figures
    _, hi = bounds(target, c.cfg, replace(policy, ctx=None))
    n_all = target.model.facts.n_layer_all + 1
    if target.gpus:
        for type_k, type_v in KV_PAIRS:
            fa = (
                "on"
                if type_v not in ("f16", "f32", "bf16") or c.cfg.flash_attn == "on"
                else c.cfg.flash_attn
            )
            base = replace(c.cfg, type_k=type_k, type_v=type_v, flash_attn=fa)
            if target.evaluate(replace(base, n_ctx=256)) is None:
                continue  # llama.cpp refuses this type for this model
            # the curves pass through the pick
            layers = sorted({*_spread(n_all), c.rc.n_gpu_layers})
            points = _curve(partial(_ctx_at, target, base, hi), layers, hi)
            pick = (c.rc.type_k.name.lower(), c.rc.type_v.name.lower(), c.rc.flash_attn)
            # -fa auto's curve is the pick's where the pick's KV is (settled either way)
            if (type_k, type_v, c.rc.flash_attn if fa == "auto" else fa == "on") == pick:
                # the pick's own point: its exact figure (explain.exact_choice)
                points = [[k, c.ctx if k == c.rc.n_gpu_layers else x] for k, x in points]
            out["context_by_layers"].append(
                {"type_k": type_k, "type_v": type_v, "flash_attn": fa, "points": points}
            )
    if p.speed is not None:
        lmap = c.breakdown.layer_devices
        est = estimate(target.model, c.rc, lmap, target.gpus, p.speed)
        share = est.band if est is not None else GENERATION_BAND
        ends = (with_rates(p.speed, 0), p.speed, with_rates(p.speed, 1))
        for fill in _spread(c.rc.n_ctx_seq):
            tps = [estimate_at(target.model, c.rc, target.gpus, i, fill, lmap) for i in ends]
            if any(t is None for t in tps):
                break
            lo, mid, high = (t[0] for t in tps if t is not None)
            out["speed_by_context"].append(
                [
                    fill,
                    round(lo * (1 - share), 2),
                    round(mid, 2),
                    round(high * (1 + share), 2),
                ]
            )
    return out
