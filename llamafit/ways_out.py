"""Plain-language ways out when a configuration does not fit: each one re-checked with the model.

Every suggestion is a concrete config that the memory model says fits (not a rule of thumb):
a quantized KV cache at the same context, the largest context with the current settings, the
largest -ngl at the current context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from .config import LaunchConfig
from .devices import DeviceSpec
from .errors import InputError
from .facts import ModelFacts
from .memory import MemoryModel
from .resolve import resolve

STEP = 256  # llama.cpp pads the context to 256 cells


def _fits(model: MemoryModel, cfg: LaunchConfig, engine: str, build: int | None,
          gpus: Sequence[DeviceSpec], host: DeviceSpec, reserve: int) -> bool:  # fmt: skip
    try:
        rc = resolve(cfg, model.facts, engine=engine, build=build)
        return model.estimate(rc, gpus, host, reserve_bytes=reserve).fits
    except InputError:
        return False


def largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest x in [lo, hi] with ok(x), for ok monotone (true then false); None if none."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def max_context(model: MemoryModel, cfg: LaunchConfig, engine: str, build: int | None,
                gpus: Sequence[DeviceSpec], host: DeviceSpec, reserve: int, ctx_max: int) -> int | None:  # fmt: skip
    """Largest -c (multiple of 256) that fits with everything else as in cfg."""
    best = largest(1, ctx_max // STEP, lambda k: _fits(model, replace(cfg, n_ctx=k * STEP), engine, build,
                                                       gpus, host, reserve))  # fmt: skip
    return None if best is None else best * STEP


def suggestions(model: MemoryModel, cfg: LaunchConfig, *, engine: str, build: int | None,
                gpus: Sequence[DeviceSpec], host: DeviceSpec, reserve: int, n_ctx: int) -> list[str]:  # fmt: skip
    """Ways to make `cfg` (which does not fit at n_ctx cells) fit, best first."""
    facts: ModelFacts = model.facts
    args = (engine, build, gpus, host, reserve)
    ctx_max = max(n_ctx, facts.n_ctx_train)
    out = []
    for kv in ("q8_0", "q4_0"):
        quant = replace(cfg, type_k=kv, type_v=kv, flash_attn="on" if cfg.flash_attn == "off" else cfg.flash_attn)
        if _fits(model, replace(quant, n_ctx=n_ctx), *args):
            out.append(f"-ctk {kv} -ctv {kv} (flash attention on) fits the full {n_ctx:,} tokens")
            break
        best = max_context(model, quant, *args, ctx_max)
        if best:
            out.append(f"-ctk {kv} -ctv {kv} fits -c {best:,}")
    best = max_context(model, cfg, *args, n_ctx)
    if best:
        out.append(f"-c {best:,} fits with the current settings")
    if gpus:
        ngl = largest(0, facts.n_layer_all + 1, lambda n: _fits(model, replace(cfg, n_ctx=n_ctx, n_gpu_layers=n), *args))
        if ngl is not None:
            out.append(f"-ngl {ngl} fits -c {n_ctx:,} (the other layers run on the CPU)")
    return out
