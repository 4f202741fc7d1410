"""Speed in the plan (pure): the chosen config's tokens/s, the trade-off rows', and the speed of the
other offloads (findings.SpeedOption) — as data; plan_report writes the English."""

from __future__ import annotations

from dataclasses import replace

from ..memory.config import LaunchConfig
from ..findings import SpeedOption
from .search import Target, max_context, max_gpu_layers, streams
from .solver import Choice
from .presets import Turn
from .speed import (GENERATION_BAND, PP_TOKENS, PROMPT_BAND, SpeedBand, SpeedEstimate, SpeedInputs, band, estimate,
                    estimate_at, with_rates)  # fmt: skip


def speed_of(target: Target, cfg: LaunchConfig, inputs: SpeedInputs) -> SpeedEstimate | None:
    evaluated = target.evaluate(cfg)
    if evaluated is None:
        return None
    rc, breakdown = evaluated
    return estimate(target.model, rc, breakdown.layer_devices, target.gpus, inputs)


def choice_speed(target: Target, choice: Choice, inputs: SpeedInputs) -> SpeedEstimate | None:
    return estimate(target.model, choice.rc, choice.breakdown.layer_devices, target.gpus, inputs)


def speed_options(target: Target, choice: Choice, hi: int, inputs: SpeedInputs) -> list[SpeedOption]:
    """With a GPU: the full context with fewer layers on the GPU (when the choice stops short of it),
    and all layers on the GPU at the context they allow (when the choice keeps some on the CPU)."""
    if not target.gpus:
        return []
    out = []
    mult = streams(target, choice.cfg)
    n_all = target.model.facts.n_layer_all + 1
    if choice.ctx < hi:
        ngl = max_gpu_layers(target, replace(choice.cfg, n_ctx=hi * mult))
        est = speed_of(target, replace(choice.cfg, n_ctx=hi * mult, n_gpu_layers=ngl), inputs) if ngl else None
        if ngl is not None and est is not None and ngl < choice.rc.n_gpu_layers:
            out.append(SpeedOption("fewer_gpu_layers", ngl, hi, est.generation_tps))
    if choice.rc.n_gpu_layers < n_all:
        full = replace(choice.cfg, n_gpu_layers=n_all, n_cpu_moe=0, cpu_moe=False)
        ctx = max_context(target, full, hi)
        est = speed_of(target, replace(full, n_ctx=ctx * mult), inputs) if ctx else None
        if ctx and est is not None:
            out.append(SpeedOption("all_gpu", n_all, ctx, est.generation_tps))
    return out


def speed_band(target: Target, choice: Choice, inputs: SpeedInputs, turn: Turn) -> SpeedBand | None:
    """The chosen config's speeds as [low, high] bands (speed.SpeedBand), and the seconds of one `turn`.
    Low: every assumed rate at the low end of its range and the model's error below; high: the other
    way. Three estimates of the choice only (no per-candidate work)."""
    lmap = choice.breakdown.layer_devices
    ends = [with_rates(inputs, 0), with_rates(inputs, 1)]
    ests = [estimate(target.model, choice.rc, lmap, target.gpus, i) for i in ends]
    lo, hi = ests
    if lo is None or hi is None:
        return None
    n = choice.rc.n_ctx_seq
    prompt_tokens = max(min(turn.prompt, n - 1), 1)
    context = max(min(turn.context, n - prompt_tokens - turn.generated), 0)
    generated = max(min(turn.generated, n - context - prompt_tokens), 0)
    depth = max(context + prompt_tokens // 2 - PP_TOKENS // 2, 0)  # estimate_at adds half a pp512 batch
    seconds = []
    for i, share in ((1, 1 + GENERATION_BAND), (0, 1 - GENERATION_BAND)):  # fastest first: the low seconds
        at = estimate_at(target.model, choice.rc, target.gpus, ends[i], context + prompt_tokens + generated // 2, lmap)
        prompt_at = estimate_at(target.model, choice.rc, target.gpus, ends[i], depth, lmap)
        if at is None or prompt_at is None or prompt_at[1] is None:
            break
        p_share = 1 + PROMPT_BAND if i else 1 - PROMPT_BAND
        pp = prompt_at[1] * p_share
        seconds.append(prompt_tokens / pp + generated / (at[0] * share))
    prompt = None if lo.prompt_tps is None or hi.prompt_tps is None else band(lo.prompt_tps, hi.prompt_tps, PROMPT_BAND)
    return SpeedBand(band(lo.generation_tps[1], hi.generation_tps[1], GENERATION_BAND),
                     band(lo.generation_tps[0], hi.generation_tps[0], GENERATION_BAND), prompt,
                     (seconds[0], seconds[1]) if len(seconds) == 2 else None, (context, prompt_tokens, generated),
                     any(r is not None for r in inputs.gpu_bandwidth_range))  # fmt: skip
