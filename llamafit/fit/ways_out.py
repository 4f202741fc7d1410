"""Ways out when a configuration does not fit: each one re-checked with the model.

Every suggestion is a concrete config that the memory model says fits (not a rule of thumb):
a quantized KV cache at the same context, the largest context with the current settings, the
largest -ngl at the current context.
"""

from __future__ import annotations

from dataclasses import replace

from ..findings import WayOut
from ..memory.config import LaunchConfig
from .search import Target, max_context, max_gpu_layers, streams


def suggestions(target: Target, cfg: LaunchConfig, *, n_ctx: int) -> list[WayOut]:
    """Ways to make `cfg` (which does not fit with -c n_ctx) fit, best first."""
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
        if target.fits(replace(quant, n_ctx=n_ctx)):
            out.append(WayOut("kv_full", type_kv=kv, n_ctx=n_ctx))
            break
        best = max_context(target, quant, ctx_max)
        if best:
            out.append(WayOut("kv", type_kv=kv, ctx_per_slot=best))
    best = max_context(target, cfg, per_slot)
    if best and best < per_slot:  # never the configuration already given
        out.append(WayOut("context", ctx_per_slot=best))
    if target.gpus:
        given = target.evaluate(replace(cfg, n_ctx=n_ctx))
        ngl = max_gpu_layers(target, replace(cfg, n_ctx=n_ctx))
        if ngl is not None and (given is None or ngl != given[0].n_gpu_layers):
            out.append(WayOut("gpu_layers", n_ctx=n_ctx, n_gpu_layers=ngl))
    return out
