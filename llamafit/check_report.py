"""`llamafit check`: the per-device breakdown and verdict as stable JSON and as text (MiB here only)."""

from __future__ import annotations

from typing import Any

from .facts import ModelFacts
from .memory import Breakdown, DeviceUsage
from .resolve import ResolvedConfig

SCHEMA = "llamafit.check/1"
MIB = 1 << 20


def config_json(rc: ResolvedConfig) -> dict[str, Any]:
    """The resolved values llama.cpp runs with (the `config` object of check and plan)."""
    return {
        "engine": rc.engine,
        "n_ctx": rc.n_ctx,
        "n_ctx_seq": rc.n_ctx_seq,
        "n_parallel": rc.n_seq_max,
        "n_stream": rc.n_stream,
        "kv_unified": rc.kv_unified,
        "flash_attn": "on" if rc.flash_attn else "off",
        "type_k": rc.type_k.name.lower(),
        "type_v": rc.type_v.name.lower(),
        "n_gpu_layers": rc.n_gpu_layers,
        "n_batch": rc.n_batch,
        "n_ubatch": rc.n_ubatch,
        "n_outputs_max": rc.n_outputs_max,
        "n_swa_cells": rc.n_swa_cells,
        "swa_full": rc.swa_full,
        "kv_offload": rc.kv_offload,
        "override_tensor": [f"{rx}={buft}" for rx, buft in rc.all_overrides],
        "tensor_split": list(rc.tensor_split),
        "split_mode": rc.split_mode,
        "main_gpu": rc.main_gpu,
        "load_mode": rc.load_mode,
        "cache_ram_bytes": rc.cache_ram_bytes,
    }


def device_json(d: DeviceUsage) -> dict[str, Any]:
    return {
        "name": d.name,
        "kind": d.kind,
        "total_bytes": d.total_bytes,
        "usable_bytes": d.usable_bytes,
        "weights_bytes": d.weights_bytes,
        "kv_bytes": d.kv_bytes,
        "recurrent_bytes": d.recurrent_bytes,
        "compute_bytes": d.compute_bytes,
        "output_bytes": d.output_bytes,
        "reserve_bytes": d.reserve_bytes,
        "used_bytes": d.used_bytes,
        "free_after_bytes": d.free_after_bytes,
    }


def model_json(facts: ModelFacts) -> dict[str, Any]:
    return {
        "path": facts.path,
        "architecture": facts.architecture,
        "name": facts.name,
        "file_type": facts.file_type,
        "n_ctx_train": facts.n_ctx_train,
        "n_layer_all": facts.n_layer_all,
        "file_size": facts.file_size,
    }


def to_json(facts: ModelFacts, rc: ResolvedConfig, b: Breakdown, *, warnings: list[str],
            ways_out: list[str], extra: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {
        "schema": SCHEMA,
        "model": model_json(facts),
        "config": config_json(rc),
        "devices": [device_json(d) for d in b.devices],
        "fits": b.fits,
        "host_weights_mapped": b.host_weights_mapped,
        "warnings": warnings,
        "ways_out": ways_out,
        **extra,
    }


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:,.0f}"


def device_lines(b: Breakdown) -> list[str]:
    head = f"{'device':<10}{'usable':>10}{'weights':>10}{'KV':>9}{'recur.':>8}{'compute':>9}{'output':>8}"
    head += f"{'reserve':>9}{'used':>10}{'left':>10}"
    lines = [head + "   (MiB)"]
    for d in b.devices:
        lines.append(
            f"{d.name:<10}{_mib(d.usable_bytes):>10}{_mib(d.weights_bytes):>10}{_mib(d.kv_bytes):>9}"
            f"{_mib(d.recurrent_bytes):>8}{_mib(d.compute_bytes):>9}{_mib(d.output_bytes):>8}"
            f"{_mib(d.reserve_bytes):>9}{_mib(d.used_bytes):>10}{_mib(d.free_after_bytes):>10}"
        )
    return lines


def verdict(b: Breakdown) -> str:
    short = b.short
    if not short:
        known = [d for d in b.devices if d.free_after_bytes is not None]
        margin = ", ".join(f"{d.name} {_mib(d.free_after_bytes)} MiB" for d in known)
        return "fits" + (f": left after loading {margin}" if margin else "")
    return "does not fit: " + ", ".join(f"{d.name} short by {_mib(n)} MiB" for d, n in short)


def to_text(facts: ModelFacts, rc: ResolvedConfig, b: Breakdown, *, warnings: list[str], ways_out: list[str]) -> str:
    slots = f"{rc.n_seq_max} slot(s), {'unified' if rc.kv_unified else 'per-slot'} KV"
    lines = [
        f"Model      {facts.path} ({facts.architecture}, {facts.file_type}, trained {facts.n_ctx_train:,} tokens)",
        f"Config     -c {rc.n_ctx} ({rc.n_ctx_seq:,} per slot, {slots}) -fa {'on' if rc.flash_attn else 'off'} "
        f"-ctk {rc.type_k.name.lower()} -ctv {rc.type_v.name.lower()} -ngl {rc.n_gpu_layers} "
        f"-b {rc.n_batch} -ub {rc.n_ubatch}",
        *device_lines(b),
        f"Verdict    {verdict(b)}",
    ]
    lines += [f"Way out    {w}" for w in ways_out]
    if b.cache_ram_bytes:
        lines.append(f"Note       llama-server's prompt cache may use up to {_mib(b.cache_ram_bytes)} MiB more host RAM (-cram)")
    lines += [f"Warning    {w}" for w in warnings]
    return "\n".join(lines)
