"""Speed in the plan (pure): the chosen config's tokens/s, the trade-off rows', and the speed of the
other offloads (findings.SpeedOption) — as data; plan_report writes the English."""

from __future__ import annotations

from dataclasses import replace

from ..memory.config import LaunchConfig
from ..findings import SpeedOption
from .search import Target, max_context, max_gpu_layers, streams
from .solver import Choice
from .speed import SpeedEstimate, SpeedInputs, estimate


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
