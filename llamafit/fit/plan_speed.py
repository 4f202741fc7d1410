"""Speed in the plan (pure): the chosen config's tokens/s, the trade-off rows', and the speed of the
other offloads (findings.SpeedOption) — as data; plan_report writes the English."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..findings import SpeedOption
from ..machine.devices import DeviceSpec
from ..memory.config import LaunchConfig
from ..memory.resolve import ResolvedConfig
from .presets import Turn
from .search import Target, max_context, max_gpu_layers, streams
from .solver import Choice
from .speed import (
    PP_TOKENS,
    PROMPT_BAND,
    SpeedBand,
    SpeedEstimate,
    SpeedInputs,
    band,
    estimate,
    estimate_turn,
    with_rates,
)


def on_devices(
    target: Target, cfg: LaunchConfig, rc: ResolvedConfig, inputs: SpeedInputs
) -> tuple[tuple[DeviceSpec, ...], SpeedInputs]:
    """The GPUs `cfg` runs on and their inputs: those -dev names (Target.devices_of), and with -sm
    none the main GPU alone, which is then device 0 of the estimate (memory.model._active_gpus),
    so its rates go first."""
    kept = list(target.device_indices(cfg)) if cfg.devices else list(range(len(target.gpus)))
    gpus = tuple(target.gpus[i] for i in kept)
    if rc.split_mode == "none":
        kept = kept[rc.main_gpu : rc.main_gpu + 1]

    def pick(rates: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(rates[i] if i < len(rates) else None for i in kept)

    if kept == list(range(len(target.gpus))):
        return gpus, inputs
    return gpus, replace(
        inputs,
        gpu_bandwidth=pick(inputs.gpu_bandwidth),
        gpu_flops=pick(inputs.gpu_flops),
        gpu_bandwidth_range=pick(inputs.gpu_bandwidth_range) if inputs.gpu_bandwidth_range else (),
        gpu_flops_range=pick(inputs.gpu_flops_range) if inputs.gpu_flops_range else (),
    )


def speed_of(target: Target, cfg: LaunchConfig, inputs: SpeedInputs) -> SpeedEstimate | None:
    evaluated = target.evaluate(cfg)
    if evaluated is None:
        return None
    rc, breakdown = evaluated
    gpus, inputs = on_devices(target, cfg, rc, inputs)
    return estimate(target.model, rc, breakdown.layer_devices, gpus, inputs)


def choice_speed(target: Target, choice: Choice, inputs: SpeedInputs) -> SpeedEstimate | None:
    gpus, inputs = on_devices(target, choice.cfg, choice.rc, inputs)
    return estimate(target.model, choice.rc, choice.breakdown.layer_devices, gpus, inputs)


def speed_options(
    target: Target, choice: Choice, hi: int, inputs: SpeedInputs
) -> list[SpeedOption]:
    """With a GPU: the full context with fewer layers on the GPU (when the choice stops short of
    it), and all layers on the GPU at the context they allow (when the choice keeps some on the
    CPU)."""
    if not target.gpus:
        return []
    out = []
    mult = streams(target, choice.cfg)
    n_all = target.model.facts.n_layer_all + 1
    if choice.ctx < hi:
        ngl = max_gpu_layers(target, replace(choice.cfg, n_ctx=hi * mult))
        est = (
            speed_of(target, replace(choice.cfg, n_ctx=hi * mult, n_gpu_layers=ngl), inputs)
            if ngl
            else None
        )
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
    """The chosen config's speeds as [low, high] bands (speed.SpeedBand), and the seconds of one
    `turn`. Low: every assumed rate at the low end of its range and the model's error below; high:
    the other way. The choice only (no per-candidate work), its tensors read once
    (speed.estimate_turn)."""
    gpus, inputs = on_devices(target, choice.cfg, choice.rc, inputs)
    n = choice.rc.n_ctx_seq
    prompt_tokens = max(min(turn.prompt, n - 1), 1)
    context = max(min(turn.context, n - prompt_tokens - turn.generated), 0)
    generated = max(min(turn.generated, n - context - prompt_tokens), 0)
    # _prompt_tps adds half a pp512 batch
    depth = max(context + prompt_tokens // 2 - PP_TOKENS // 2, 0)
    ends = [with_rates(inputs, 0), with_rates(inputs, 1)]
    assumed = any(r is not None for r in inputs.gpu_bandwidth_range) or any(
        r is not None for r in inputs.gpu_flops_range
    )
    got = estimate_turn(
        target.model,
        choice.rc,
        choice.breakdown.layer_devices,
        gpus,
        ends if assumed else ends[:1],
        context + prompt_tokens + generated // 2,
        depth,
    )
    if any(g is None for g in got):
        return None
    lo, hi = (got[0], got[-1])
    assert lo is not None and hi is not None
    share = max(lo[0].band, hi[0].band)  # the model's error on these devices (Efficiency.band)
    seconds = None
    if (
        lo[2] is not None and hi[2] is not None
    ):  # fastest: the high end's rates with the model's error above
        seconds = (
            prompt_tokens / (hi[2] * (1 + PROMPT_BAND)) + generated / (hi[1] * (1 + share)),
            prompt_tokens / (lo[2] * (1 - PROMPT_BAND)) + generated / (lo[1] * (1 - share)),
        )
    low, high = lo[0], hi[0]
    prompt = (
        None
        if low.prompt_tps is None or high.prompt_tps is None
        else band(low.prompt_tps, high.prompt_tps, PROMPT_BAND)
    )
    return SpeedBand(
        band(low.generation_tps[1], high.generation_tps[1], share),
        band(low.generation_tps[0], high.generation_tps[0], share),
        prompt,
        seconds,
        (context, prompt_tokens, generated),
        any(r is not None for r in inputs.gpu_bandwidth_range),
        share,
        inputs.calibrated is not None,
    )
