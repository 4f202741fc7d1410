"""Ways out when a configuration does not fit: each one re-checked with the model.

Every suggestion is a concrete config that the memory model says fits (not a rule of thumb):
a quantized KV cache at the same context, the largest context with the current settings, the
largest -ngl at the current context. Given the exact figures of the config asked about (check's
breakdown: the graph replay), the searches run on the hand-derived peaks scaled per device by
their ratio to the replay there, and each way out is confirmed by replay (issue #36: what a
user is told fits is what the exact figures say fits).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import InputError
from ..findings import WayOut
from ..memory.config import LaunchConfig
from ..memory.model import Breakdown, SchedulerOverflowError
from ..memory.resolve import resolve
from .search import STEP, Target, max_context, max_gpu_layers, streams

# -ngl steps below the scaled proxy's most that a gpu_layers way out tries by replay
LAYER_STEPS = 4


def suggestions(
    target: Target, cfg: LaunchConfig, *, n_ctx: int, exact: Breakdown | None = None
) -> list[WayOut]:
    """Ways to make `cfg` (which does not fit with -c n_ctx) fit, best first. `exact`: the
    exact figures of `cfg` at n_ctx; each way out is then one the replay confirms."""
    scaled = _scaled(target, cfg, n_ctx, exact) if exact is not None else target
    confirm = exact is not None
    facts = target.model.facts
    per_slot = n_ctx // streams(target, cfg)
    ctx_max = max(per_slot, facts.n_ctx_train)
    out: list[WayOut] = []
    for kv in ("q8_0", "q4_0"):
        quant = replace(
            cfg,
            type_k=kv,
            type_v=kv,
            flash_attn="on" if cfg.flash_attn == "off" else cfg.flash_attn,
        )
        at_full = replace(quant, n_ctx=n_ctx)
        if scaled.fits(at_full) and (not confirm or _fits_exactly(scaled, at_full)):
            out.append(WayOut("kv_full", type_kv=kv, n_ctx=n_ctx))
            break
        best = _largest_context(scaled, quant, ctx_max, confirm)
        if best:
            out.append(WayOut("kv", type_kv=kv, ctx_per_slot=best))
    best = _largest_context(scaled, cfg, per_slot, confirm)
    if best and best < per_slot:  # never the configuration already given
        out.append(WayOut("context", ctx_per_slot=best))
    if target.gpus:
        given = target.evaluate(replace(cfg, n_ctx=n_ctx))
        ngl = _most_layers(scaled, replace(cfg, n_ctx=n_ctx), confirm)
        if ngl is not None and (given is None or ngl != given[0].n_gpu_layers):
            out.append(WayOut("gpu_layers", n_ctx=n_ctx, n_gpu_layers=ngl))
    return out


def _scaled(target: Target, cfg: LaunchConfig, n_ctx: int, exact: Breakdown) -> Target:
    """`target` with the hand-derived compute scaled per device to the replay's at `cfg`
    (solver._compute_ratios); itself where the two agree or do not compare."""
    from .solver import _compute_ratios

    hand = target.evaluate(replace(cfg, n_ctx=n_ctx))
    ratios = _compute_ratios(hand[1], exact) if hand is not None else None
    if ratios is None:
        return target
    old = target.compute_scales or (1.0,) * len(ratios)
    return replace(target, compute_scales=tuple(a * b for a, b in zip(old, ratios, strict=True)))


def _fits_exactly(target: Target, cfg: LaunchConfig) -> bool:
    """Whether `cfg`'s exact figures (the replay, where it covers) fit."""
    try:
        rc = resolve(cfg, target.model.facts, engine=target.engine, build=target.build)
        rc = target.model.settle_flash_attn(rc, target.devices_of(cfg), target.host)
        return target.breakdown(cfg, rc).fits
    except (InputError, SchedulerOverflowError):
        return False


def _largest_context(target: Target, cfg: LaunchConfig, ctx_max: int, confirm: bool) -> int | None:
    """The largest context per slot of `cfg` that fits: by the (scaled) proxy, then, with
    `confirm`, at the exact boundary near it (solver._exact_boundary: a few replays)."""
    best = max_context(target, cfg, ctx_max)
    if not best or not confirm:
        return best
    from .solver import Choice, _exact_boundary

    mult = streams(target, cfg)
    start = replace(cfg, n_ctx=best * mult)
    evaluated = target.evaluate(start)
    if evaluated is None:
        return None
    # the context is what is searched here, whoever pinned -c
    free = replace(cfg, given=cfg.given - {"n_ctx"})
    try:
        found = _exact_boundary(target, free, Choice(start, best, *evaluated), STEP, ctx_max)
    except SchedulerOverflowError:
        return None
    return found.ctx if found is not None else None


def _most_layers(target: Target, cfg: LaunchConfig, confirm: bool) -> int | None:
    """The most -ngl of `cfg` that fits: by the (scaled) proxy, then, with `confirm`, the most
    at or a few below it whose exact figures fit."""
    ngl = max_gpu_layers(target, cfg)
    if ngl is None or not confirm:
        return ngl
    for k in range(ngl, max(ngl - LAYER_STEPS, 0) - 1, -1):
        if _fits_exactly(target, replace(cfg, n_gpu_layers=k)):
            return k
    return None
