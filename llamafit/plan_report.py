"""`llamafit plan` output: stable JSON and text (MiB only here)."""

from __future__ import annotations

from typing import Any

from .check_report import config_json, device_json, model_json
from .command import display
from .devices import DeviceSpec
from .facts import ModelFacts
from .plan import PlanResult, tps_text
from .speed import SpeedEstimate

SCHEMA = "llamafit.plan/1"


def hardware_json(gpus: tuple[DeviceSpec, ...], host: DeviceSpec) -> list[dict[str, Any]]:
    return [{"name": d.name, "kind": d.kind, "backend": d.backend, "total_bytes": d.total_bytes,
             "usable_bytes": d.usable_bytes} for d in (*gpus, host)]  # fmt: skip


def to_json(facts: ModelFacts, result: PlanResult, argv: list[str], hardware: list[dict[str, Any]]) -> dict[str, Any]:
    c = result.choice
    return {
        "schema": SCHEMA,
        "model": model_json(facts),
        "hardware": hardware,
        "config": config_json(c.rc) if c else None,
        "context_per_slot": c.ctx if c else None,
        "command": argv,
        "devices": [device_json(d) for d in c.breakdown.devices] if c else [],
        "fits": c is not None,
        "tradeoffs": [{"flash_attn": t.flash_attn, "type_k": t.type_k, "type_v": t.type_v,
                       "n_gpu_layers": t.n_gpu_layers, "n_cpu_moe": t.n_cpu_moe, "max_ctx": t.max_ctx,
                       "generation_tps": _pair(t.generation_tps)} for t in result.tradeoffs],  # fmt: skip
        "mib_per_1000_tokens": result.mib_per_1000_tokens,
        "mib_per_layer": result.mib_per_layer,
        "verdict": result.verdict,
        "smallest_gpu": result.smallest_gpu,
        "speed": speed_json(result.speed, result),
        "warnings": list(result.warnings),
    }


def _pair(p: tuple[float, float] | None) -> list[float] | None:
    return None if p is None else [round(p[0], 2), round(p[1], 2)]


def speed_json(est: SpeedEstimate | None, result: PlanResult | None = None) -> dict[str, Any] | None:
    """`speed`: generation_tps [full context, empty context], prompt_tps (rough), and every input with its source."""
    if est is None:
        return None
    return {
        "generation_tps": _pair(est.generation_tps),
        "prompt_tps": None if est.prompt_tps is None else round(est.prompt_tps, 2),
        "calibrated": est.calibrated,
        "inputs": {
            "bytes_per_token": list(est.bytes_per_token),
            "flops_per_token": est.flops_per_token,
            "n_ctx_seq": est.n_ctx_seq,
            "prompt_source": est.prompt_source,
            "devices": [{"device": d.device, "backend": d.backend, "weight_bytes": d.weight_bytes,
                         "kv_bytes_empty": d.kv_bytes_empty, "kv_bytes_full": d.kv_bytes_full,
                         "bandwidth_bytes_per_s": round(d.bandwidth.value), "bandwidth_source": d.bandwidth.source,
                         "efficiency": d.efficiency, "efficiency_source": d.efficiency_source} for d in est.devices],
        },
        "ways_out": [{"kind": w.kind, "n_gpu_layers": w.n_gpu_layers, "context_per_slot": w.ctx,
                      "generation_tps": _pair(w.generation_tps)} for w in (result.ways_out if result else ())],
    }  # fmt: skip


def speed_lines(est: SpeedEstimate | None) -> list[str]:
    if est is None:
        return []
    low, high = est.generation_tps
    prompt = "" if est.prompt_tps is None else f"; prompt ~{est.prompt_tps:,.0f} tokens/s (rough)"
    lines = [f"Speed      generation ~{tps_text(low)}-{tps_text(high)} tokens/s (full to empty context){prompt}"]
    for d in est.devices:
        lines.append(f"           {d.device}: {(d.weight_bytes + d.kv_bytes_empty) / 2**20:,.0f}-"
                     f"{(d.weight_bytes + d.kv_bytes_full) / 2**20:,.0f} MiB per token at "
                     f"{d.bandwidth.value / 1e9:,.1f} GB/s x {d.efficiency:.2f} ({_short(d.bandwidth.source)})")  # fmt: skip
    if est.calibrated:
        lines.append(f"           {est.calibrated}")
    return lines


def _short(source: str) -> str:
    return "host probe" if source.startswith("measured by the host probe") else source.removeprefix("catalog: ")


def _tps(p: tuple[float, float] | None) -> str:
    return "-" if p is None else f"{tps_text(p[0])}-{tps_text(p[1])}" if p[1] < 100 else f"{p[0]:,.0f}+"


def _hw_line(d: dict[str, Any]) -> str:
    size = "-" if d["usable_bytes"] is None else f"{d['usable_bytes'] / 2**20:,.0f} MiB usable"
    return f"{d['name']} ({d['backend']}) {size}"


def to_text(facts: ModelFacts, result: PlanResult, argv: list[str], hardware: list[dict[str, Any]],
            device_lines: list[str]) -> str:  # fmt: skip
    lines = [
        f"Model      {facts.path} ({facts.architecture}, {facts.file_type}, trained {facts.n_ctx_train:,} tokens)",
        "Hardware   " + "; ".join(_hw_line(d) for d in hardware),
    ]
    if argv:
        lines.append(f"Command    {display(argv)}")
    lines += device_lines
    lines.append("Trade-offs (largest context per slot at this offload):")
    lines.append(f"  {'fa':<4}{'K':<6}{'V':<6}{'-ngl':>5}{'cpu-moe':>8}{'max context':>13}{'tokens/s':>10}")
    for t in result.tradeoffs:
        ctx = "-" if t.max_ctx is None else f"{t.max_ctx:,}"
        lines.append(f"  {t.flash_attn:<4}{t.type_k:<6}{t.type_v:<6}{t.n_gpu_layers:>5}{t.n_cpu_moe:>8}{ctx:>13}"
                     f"{_tps(t.generation_tps):>10}")  # fmt: skip
    per_tokens, per_layer = result.mib_per_1000_tokens, result.mib_per_layer
    if per_tokens is not None:
        line = f"Marginal   {per_tokens:,.1f} MiB per 1,000 tokens per slot"
        if per_layer and per_tokens > 0:
            line += f"; {per_layer:,.1f} MiB per block on the GPU: each block moved to the CPU buys "
            line += f"about {per_layer / per_tokens * 1000:,.0f} tokens"
        lines.append(line)
    lines += speed_lines(result.speed)
    lines.append(f"Verdict    {result.verdict}")
    lines += [f"Warning    {w}" for w in result.warnings]
    return "\n".join(lines)
