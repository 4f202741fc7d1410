"""`llamafit plan` output: stable JSON and text (MiB only here)."""

from __future__ import annotations

from typing import Any

from ..facts.hparams import ModelFacts
from ..findings import SpeedOption, Verdict
from ..fit.explain import PlanResult, Tradeoff
from ..fit.mtp import MtpEffect
from ..fit.presets import PresetEffect
from ..fit.side_plan import SideCost
from ..fit.solver import KV_QUALITY
from ..fit.speed import SpeedBand, SpeedEstimate
from ..machine.devices import DeviceSpec
from ..safe_text import printable
from .check import notice_line, notices_json
from .json_parts import config_json, device_json, model_json, side_models_json
from .layout import LABEL, WIDTH, command_lines, wrap, wrap_text

SCHEMA = "llamafit.plan/2"


def _where(v: Verdict) -> str:
    on_cpu = v.n_layer - v.n_gpu_layers
    if v.placement == "cpu":
        return "everything on the CPU"
    if v.placement == "all_gpu":
        return "all layers on the GPU"
    if v.placement == "experts_on_cpu":
        return f"{on_cpu} of {v.n_layer} layers and the experts of {v.n_cpu_moe} blocks on the CPU"
    return f"{on_cpu} of {v.n_layer} layers on the CPU (slower)"


def _no_fit_text(v: Verdict) -> str:
    text = f"does not fit: no configuration fits {v.ctx_min:,} tokens per slot on this machine"
    if v.cause == "pinned_ngl":
        text += f", with -ngl {v.pinned_ngl} as pinned and the smallest KV cache"
    elif v.cause == "offloaded":
        text += ", even with layers on the CPU and the smallest KV cache"
    if v.smallest_gpu:
        text += (
            f"; the smallest GPU that holds {v.ctx_min:,} tokens with {_cache_text(v)} and every "
            f"layer is {v.smallest_gpu}"
        )
    return text


def _cache_text(v: Verdict) -> str:
    """`q8_0 KV`, or `K q8_0, V f16` where the caches differ (explain.smallest_gpu_any_kv)."""
    k, v_type = v.smallest_gpu_cache or ("q8_0", "q8_0")
    return f"{k} KV" if k == v_type else f"K {k}, V {v_type}"


def preset_text(e: PresetEffect) -> str:
    """`for agent (1 slot, at least 65,536 tokens per slot)`."""
    p = e.preset
    slots = f"{p.n_parallel} slot{'s' if p.n_parallel != 1 else ''}"
    floor = f"at least {e.min_ctx:,} tokens per slot"
    if e.min_ctx < p.min_ctx:
        floor += f" rather than {p.min_ctx:,}"  # the trained context is less, or --min-ctx said so
    if p.prefer == "context":
        floor = f"the trained maximum first, {floor}"
    return f"for {p.label} ({slots}, {floor})"


def _preset_tail(e: PresetEffect | None) -> str:
    """What the preset's -np saved (or cost) against llama-server's automatic slots."""
    if (
        e is None
        or e.saved_bytes is None
        or e.n_parallel_auto is None
        or e.n_parallel_auto == e.preset.n_parallel
    ):
        return ""
    mib = abs(e.saved_bytes) / 2**20
    if mib < 0.5:
        return ""
    what = "saves" if e.saved_bytes >= 0 else "costs"
    return (
        f"; -np {e.preset.n_parallel} instead of llama-server's {e.n_parallel_auto} automatic "
        f"slots {what} {mib:,.0f} MiB"
    )


def verdict_text(v: Verdict, preset: PresetEffect | None = None) -> str:
    """The verdict as one sentence (the `Verdict` line of plan and run); with --for, naming the
    preset."""
    if preset is not None:
        return f"{preset_text(preset)}: {verdict_text(v)}{_preset_tail(preset)}"
    if not v.fits:
        return _no_fit_text(v)
    fa = "on" if v.flash_attn else "off"
    text = (
        f"fits {v.ctx_per_slot:,} tokens per slot with {_where(v)}, {v.type_k}/{v.type_v} KV"
        f"{_kv_cost(v.type_k, v.type_v)}, flash attention {fa}"
    )
    if v.ctx_per_slot is not None and v.ctx_per_slot >= v.ctx_wanted:
        text += " — the trained maximum" if v.trained_max else ""
    elif v.more_gpu_mib is not None and v.mib_per_layer is not None:
        text += f"; {v.ctx_wanted:,} would need about {v.more_gpu_mib:,.0f} MiB more GPU memory "
        blocks = f"{v.blocks_to_cpu} block{'s' if v.blocks_to_cpu != 1 else ''}"
        text += f"(each block moved to the CPU frees {v.mib_per_layer:,.0f} MiB: about {blocks})"
    if v.generation_tps is not None:
        text += "".join(_speed_cost(v.generation_tps[0], o) for o in v.speed_options)
    if v.smallest_gpu:
        text += (
            f"; the smallest GPU that holds all {v.ctx_wanted:,} tokens this way is "
            f"{v.smallest_gpu}"
        )
    return text


# What a K/V pair costs in quality (fit/solver.py KV_QUALITY: llama.cpp PR #7412's KL divergences)
KV_COST_WORDS = {
    "negligible_loss": "a negligible quality loss",
    "some_loss": "some quality loss: V in 4 bits",
    "most_loss": "the most quality loss: K and V in 4 bits",
}


def kv_quality(type_k: str | None, type_v: str | None) -> str | None:
    """KV_QUALITY's code for the pair: full, negligible_loss, some_loss, most_loss; None unknown."""
    if type_k is None or type_v is None:
        return None
    return KV_QUALITY.get((type_k, type_v))


def _kv_cost(type_k: str | None, type_v: str | None) -> str:
    """` (a negligible quality loss)` after a quantized cache in the verdict; nothing for f16."""
    words = KV_COST_WORDS.get(kv_quality(type_k, type_v) or "")
    return f" ({words})" if words else ""


def tps_text(x: float) -> str:
    """Tokens/s for people: one decimal below 10."""
    return f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def _speed_cost(now: float, o: SpeedOption) -> str:
    """One other offload's cost (or gain) in generation speed, each at its full context."""
    then = o.generation_tps[0]
    if o.code == "fewer_gpu_layers":
        trend = "drops" if then < now else "rises"
        return (
            f"; -ngl {o.n_gpu_layers} fits {o.ctx_per_slot:,} tokens but generation {trend} from "
            f"~{tps_text(now)} to ~{tps_text(then)} tokens/s"
        )
    return (
        f"; all layers on the GPU would generate ~{tps_text(then)} tokens/s (now ~{tps_text(now)}) "
        f"but fit only {o.ctx_per_slot:,} tokens"
    )


def _pair(p: tuple[float, float] | None) -> list[float] | None:
    return None if p is None else [round(p[0], 2), round(p[1], 2)]


def preset_json(e: PresetEffect | None) -> dict[str, Any] | None:
    """`preset`: --for's name, slots, floor per slot, -ub values tried, and the bytes its -np
    saved."""
    if e is None:
        return None
    p = e.preset
    return {
        "name": p.name,
        "n_parallel": p.n_parallel,
        "min_ctx": e.min_ctx,
        "ubatches": list(p.ubatches),
        "saved_bytes": e.saved_bytes,
        "n_parallel_auto": e.n_parallel_auto,
        "turn": {"context": p.turn.context, "prompt": p.turn.prompt, "generated": p.turn.generated},
    }


def verdict_json(v: Verdict, preset: PresetEffect | None = None) -> dict[str, Any]:
    """The verdict's values (README: plan --json `verdict`) and its sentence."""
    flash_attn = None
    if v.fits:
        flash_attn = "on" if v.flash_attn else "off"
    return {
        "fits": v.fits,
        "context_per_slot": v.ctx_per_slot,
        "context_min": v.ctx_min,
        "context_wanted": v.ctx_wanted,
        "trained_max": v.trained_max,
        "placement": v.placement,
        "n_layer": v.n_layer,
        "n_gpu_layers": v.n_gpu_layers,
        "n_cpu_moe": v.n_cpu_moe,
        "type_k": v.type_k,
        "type_v": v.type_v,
        "flash_attn": flash_attn,
        "more_gpu_mib": v.more_gpu_mib,
        "blocks_to_cpu": v.blocks_to_cpu,
        "generation_tps": _pair(v.generation_tps),
        "speed_options": [
            {
                "code": o.code,
                "n_gpu_layers": o.n_gpu_layers,
                "context_per_slot": o.ctx_per_slot,
                "generation_tps": _pair(o.generation_tps),
            }
            for o in v.speed_options
        ],
        "smallest_gpu": v.smallest_gpu,
        "smallest_gpu_cache": list(v.smallest_gpu_cache) if v.smallest_gpu_cache else None,
        "cause": v.cause,
        "pinned_ngl": v.pinned_ngl,
        "preset": preset_json(preset),
        "text": verdict_text(v, preset),
    }


def hardware_json(gpus: tuple[DeviceSpec, ...], host: DeviceSpec) -> list[dict[str, Any]]:
    return [
        {
            "name": d.name,
            "kind": d.kind,
            "backend": d.backend,
            "total_bytes": d.total_bytes,
            "usable_bytes": d.usable_bytes,
        }
        for d in (*gpus, host)
    ]


def to_json(
    facts: ModelFacts,
    result: PlanResult,
    argv: list[str],
    hardware: list[dict[str, Any]],
    *,
    band: SpeedBand | None = None,
    preset: PresetEffect | None = None,
) -> dict[str, Any]:
    c = result.choice
    return {
        "schema": SCHEMA,
        "model": model_json(facts),
        "hardware": hardware,
        "config": config_json(c.rc) if c else None,
        "context_per_slot": c.ctx if c else None,
        "command": argv,
        "devices": [device_json(d) for d in c.breakdown.devices] if c else [],
        # GPUs the plan leaves out, where it is no better with them (solver.device_subsets)
        "gpus_left_out": gpus_left_out(result, hardware),
        "fits": c is not None,
        "tradeoffs": [
            {
                "flash_attn": t.flash_attn,
                "type_k": t.type_k,
                "type_v": t.type_v,
                "n_gpu_layers": t.n_gpu_layers,
                "n_cpu_moe": t.n_cpu_moe,
                "max_ctx": t.max_ctx,
                "generation_tps": _pair(t.generation_tps),
                "llama_cpp_aborts": t.llama_cpp_aborts,
                "vs_pick": vs_pick(t, result.verdict),
            }
            for t in result.tradeoffs
        ],
        "mib_per_1000_tokens": result.mib_per_1000_tokens,
        "mib_per_layer": result.mib_per_layer,
        "verdict": verdict_json(result.verdict, preset),
        "smallest_gpu": result.smallest_gpu,
        "speed": speed_json(result.speed, band),
        "preset": preset_json(preset),
        "warnings": notices_json(result.warnings),
        "side_models": side_models_json(c.breakdown) if c else [],
        "side_costs": [
            {"kind": sc.kind, "tokens": sc.tokens, "bytes": sc.bytes} for sc in result.side_costs
        ],
        "side_steps": list(result.side_steps),
        "mtp": mtp_json(result.mtp),
    }


def mtp_json(m: MtpEffect | None) -> dict[str, Any] | None:
    """`mtp`: MTP self-speculation's expected effect on generation (fit/mtp.py), with its inputs."""
    if m is None:
        return None
    return {
        "n_draft": m.n_draft,
        "acceptance": [m.acceptance[0], m.acceptance[1]],
        "generation_speedup": [round(m.speedup[0], 3), round(m.speedup[1], 3)],
        "target_bytes": m.target_bytes,
        "verify_bytes": m.verify_bytes,
        "draft_bytes": m.draft_bytes,
    }


def mtp_lines(m: MtpEffect | None) -> list[str]:
    if m is None:
        return []
    lo, hi = m.acceptance
    return [
        f"MTP        generation up to x{m.speedup[0]:.2f}-x{m.speedup[1]:.2f} at "
        f"{lo:.0%}-{hi:.0%} of {m.n_draft} drafted tokens accepted (a draft pass reads "
        f"{m.draft_bytes / 2**20:,.1f} MiB, the verify batch {m.verify_bytes / 2**20:,.1f} MiB, "
        f"one token {m.target_bytes / 2**20:,.1f} MiB)"
    ]


_SIDE = {"mmproj": "the projector", "draft": "the draft model", "mtp": "the MTP context"}


def side_cost_text(sc: SideCost) -> str:
    """`the projector costs 3,840 tokens of context (918 MiB)`."""
    what = f"{_SIDE.get(sc.kind, sc.kind)} ({sc.bytes / 2**20:,.0f} MiB)"
    if not sc.tokens:
        return f"{what} costs no context here (the context is at its limit without it too)"
    return f"{what} costs {sc.tokens:,} tokens of context per slot"


def band_json(band: SpeedBand | None) -> dict[str, Any]:
    """The bands of `speed` (README "plan --json"): [low, high] each; null without an estimate."""
    if band is None:
        return {
            "generation_tps_empty": None,
            "generation_tps_full": None,
            "prompt_tps_band": None,
            "turn": None,
            "assumed": False,
            "generation_band": None,
        }
    context, prompt, generated = band.turn
    return {
        "generation_tps_empty": _pair(band.generation_empty),
        "generation_tps_full": _pair(band.generation_full),
        "prompt_tps_band": _pair(band.prompt),
        "turn": {
            "context": context,
            "prompt": prompt,
            "generated": generated,
            "seconds": _pair(band.turn_seconds),
        },
        "assumed": band.assumed,
        "generation_band": band.share,
    }


def speed_json(est: SpeedEstimate | None, band: SpeedBand | None = None) -> dict[str, Any] | None:
    """`speed`: generation_tps [full context, empty context], prompt_tps (rough), their bands, one
    turn's seconds, and every input with its source."""
    if est is None:
        return None
    return {
        "generation_tps": _pair(est.generation_tps),
        "prompt_tps": None if est.prompt_tps is None else round(est.prompt_tps, 2),
        **band_json(band),
        "calibrated": est.calibrated,
        "inputs": {
            "bytes_per_token": list(est.bytes_per_token),
            "flops_per_token": est.flops_per_token,
            "n_ctx_seq": est.n_ctx_seq,
            "n_threads": est.n_threads,
            "prompt_source": est.prompt_source,
            "devices": [
                {
                    "device": d.device,
                    "backend": d.backend,
                    "weight_bytes": d.weight_bytes,
                    "kv_bytes_empty": d.kv_bytes_empty,
                    "kv_bytes_full": d.kv_bytes_full,
                    "bandwidth_bytes_per_s": round(d.bandwidth.value),
                    "bandwidth_source": d.bandwidth.source,
                    "efficiency": d.efficiency,
                    "efficiency_source": d.efficiency_source,
                    "fixed_seconds_per_token": round(d.fixed_seconds, 6),
                    "band": d.band,
                    "bound": d.bound,
                    "attention_flops_per_s": None
                    if d.attention_rate is None
                    else round(d.attention_rate),
                    "streamed_bytes": d.streamed_bytes,
                    "streamed_bytes_per_s": round(d.streamed_rate),
                }
                for d in est.devices
            ],
        },
    }


def _range(p: tuple[float, float]) -> str:
    return f"{tps_text(p[0])}-{tps_text(p[1])}"


def _seconds(x: float) -> str:
    if x < 1:
        return f"{x:.2f}"
    return f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def band_lines(band: SpeedBand | None, preset: PresetEffect | None = None) -> list[str]:
    """`           likely: …` and one turn's seconds, under the Speed line."""
    if band is None:
        return []
    prompt = f"; prompt {_range(band.prompt)} tokens/s" if band.prompt else ""
    # how wide, and why: the public results' spread until runs here calibrate it (docs/speed.md)
    why = "measured here" if band.calibrated else "not measured here yet"
    likely = (
        f"likely {_range(band.generation_full)} full, {_range(band.generation_empty)} empty "
        f"tokens/s (±{band.share:.0%}, {why}){prompt}"
    )
    if band.assumed:
        likely += " (assumed bandwidth)"
    texts = [likely]
    if band.turn_seconds is not None:
        context, prompt_tokens, generated = band.turn
        name = preset.preset.name if preset else "chat"
        texts.append(
            f"one {name} turn (read {prompt_tokens:,} tokens, write {generated:,}, after "
            f"{context:,}): {_seconds(band.turn_seconds[0])}-{_seconds(band.turn_seconds[1])} s"
        )
    return [line for t in texts for line in _indented(t)]


def _indented(text: str) -> list[str]:
    """A line under the label column, wrapped at 80 with its continuation indented two more."""
    return wrap(
        text,
        WIDTH,
        initial_indent=" " * LABEL,
        subsequent_indent=" " * (LABEL + 2),
        break_long_words=False,
        break_on_hyphens=False,
    )


def speed_lines(
    est: SpeedEstimate | None,
    band: SpeedBand | None = None,
    preset: PresetEffect | None = None,
) -> list[str]:
    if est is None:
        return []
    low, high = est.generation_tps
    prompt = (
        "" if est.prompt_tps is None else f"; prompt ~{tps_text(est.prompt_tps)} tokens/s (rough)"
    )
    lines = [
        f"Speed      generation ~{tps_text(low)}-{tps_text(high)} tokens/s (full to empty "
        f"context){prompt}"
    ]
    lines += band_lines(band, preset)
    for d in est.devices:
        read = (
            f"{(d.weight_bytes + d.kv_bytes_empty) / 2**20:,.0f}-"
            f"{(d.weight_bytes + d.kv_bytes_full) / 2**20:,.0f}"
        )
        rate = f"{d.bandwidth.value / 1e9:,.1f} GB/s x {d.efficiency:.2f}"
        if d.fixed_seconds:  # kernel launches and synchronisation per token (fit/speed.py)
            rate += f" + {d.fixed_seconds * 1e3:,.1f} ms"
        if d.streamed_bytes:  # the CPU's weights at llama.cpp's kernels streaming them
            n = est.n_threads
            lines += _indented(
                f"{d.device}: {read} MiB/token; weights through llama.cpp's kernels at "
                f"{d.streamed_rate / 1e9:,.1f} GB/s (kernel probe, {n} thread{'s' * (n != 1)}), "
                f"the rest {rate} ({_short(d.bandwidth.source)})"
            )
            continue
        lines += _indented(f"{d.device}: {read} MiB/token, {rate} ({_short(d.bandwidth.source)})")
    if est.calibrated:
        lines += _indented(f"calibrated: {est.calibrated}")
    return lines


def _short(source: str) -> str:
    if source.startswith("assumed: "):
        return "assumed; --bandwidth GB/s gives it"
    return (
        "host probe"
        if source.startswith("measured by the host probe")
        else source.removeprefix("catalog: ")
    )


def _tps(p: tuple[float, float] | None) -> str:
    if p is None:
        return "-"
    return f"{tps_text(p[0])}-{tps_text(p[1])}" if p[1] < 100 else f"{p[0]:,.0f}+"


def _hw_line(d: dict[str, Any]) -> str:
    size = "-" if d["usable_bytes"] is None else f"{d['usable_bytes'] / 2**20:,.0f} MiB usable"
    return f"{d['name']} ({d['backend']}) {size}"


def to_text(
    facts: ModelFacts,
    result: PlanResult,
    argv: list[str],
    hardware: list[dict[str, Any]],
    device_lines: list[str],
    *,
    band: SpeedBand | None = None,
    preset: PresetEffect | None = None,
) -> str:
    lines = [
        # the path alone: the wrapping of what follows never depends on it
        f"Model      {printable(facts.path)}",
        f"           {printable(facts.architecture)}, {facts.file_type}, trained "
        f"{facts.n_ctx_train:,} tokens",
        "Hardware   " + "; ".join(_hw_line(d) for d in hardware),
    ]
    if argv:
        lines += command_lines("Command", [printable(a) for a in argv])
    lines += device_lines
    lines += _tradeoff_lines(result, gpus=any(d["kind"] == "gpu" for d in hardware))
    per_tokens, per_layer = result.mib_per_1000_tokens, result.mib_per_layer
    if per_tokens is not None:
        line = f"Marginal   {per_tokens:,.1f} MiB per 1,000 tokens per slot"
        if (
            per_layer and round(per_layer, 1) > 0 and per_tokens > 0
        ):  # a block that frees under 0.05 MiB: no advice
            tokens = per_layer / per_tokens * 1000
            line += (
                f"; {per_layer:,.1f} MiB per block on the GPU: each block moved to the CPU buys "
            )
            line += (
                f"about {tokens:,.0f} tokens"
                if tokens <= facts.n_ctx_train
                else f"more than the trained {facts.n_ctx_train:,} tokens"
            )
        lines.append(line)
    lines += [f"Side       {side_cost_text(sc)}" for sc in result.side_costs]
    lines += speed_lines(result.speed, band, preset)
    lines += mtp_lines(result.mtp)
    lines += left_out_lines(result, hardware)
    lines.append(f"Verdict    {verdict_text(result.verdict, preset)}")
    lines += [printable(notice_line(w)) for w in result.warnings]
    return wrap_text("\n".join(lines))


def gpus_left_out(result: PlanResult, hardware: list[dict[str, Any]]) -> list[str]:
    """The GPUs of `hardware` the chosen plan does not run on (plan --json `gpus_left_out`)."""
    c = result.choice
    if c is None or c.cfg.devices == ("none",):
        return []
    used = {d.name for d in c.breakdown.devices}
    return [d["name"] for d in hardware if d["kind"] == "gpu" and d["name"] not in used]


def left_out_lines(result: PlanResult, hardware: list[dict[str, Any]]) -> list[str]:
    """`Devices    CUDA1 left out: …` where the solver planned without some of the GPUs
    (solver.device_subsets), and how the command says it."""
    c = result.choice
    out = gpus_left_out(result, hardware)
    if c is None or not out:
        return []
    how = "-sm none -mg " + str(c.rc.main_gpu) if c.rc.split_mode == "none" else "-dev"
    kept = ", ".join(d.name for d in c.breakdown.devices if d.kind == "gpu")
    names = ", ".join(printable(n) for n in out)
    return [
        f"Devices    {names} left out: the plan is no better with "
        f"{'it' if len(out) == 1 else 'them'} ({how} runs on {printable(kept)} alone)"
    ]


def _tradeoff_lines(result: PlanResult, *, gpus: bool) -> list[str]:
    """The trade-off table: -ngl/cpu-moe columns only with a GPU, tokens/s where bandwidths are
    known; when every row reaches the same context at the same offload and speed, one row says it
    for all; rows that print the same as an earlier one (but for their settings) are folded into
    one line under it; then what the quality words and a `+` mean."""
    rows = list(result.tradeoffs)
    speed = any(t.generation_tps for t in rows)  # the column only where bandwidths are known
    same = len(rows) > 1 and len({_shown(t) for t in rows}) == 1
    why = not same and result.choice is not None
    lines = [
        "Trade-offs (largest context per slot" + (" at this offload):" if gpus else "):"),
        f"  {'fa':<4}{'K':<6}{'V':<6}"
        + (f"{'-ngl':>5}{'cpu-moe':>8}" if gpus else "")
        + f"{'max context':>13}"
        + ("  tokens/s" * speed)
        + ("  vs the pick" * why),
    ]
    for t, folded in _folded(rows[:1] if same else rows, result.verdict if why else None):
        lines.append(_row_line(t, result.verdict if why else None, gpus=gpus, speed=speed))
        if folded:
            lines += _indented_by(4, "the same with " + "; ".join(_settings(f) for f in folded))
    if same:
        lines.append(
            f"  (the {len(rows) - 1} other KV types and flash-attention settings: the same)"
        )
    pick = result.verdict if why else None
    return lines + _tradeoff_notes(rows if not same else rows[:1], pick, speed=speed)


def _shown(t: Tradeoff) -> tuple[Any, ...]:
    """What a row prints besides its settings."""
    return (t.n_gpu_layers, t.n_cpu_moe, t.max_ctx, _tps(t.generation_tps), t.llama_cpp_aborts)


def _folded(rows: list[Tradeoff], v: Verdict | None) -> list[tuple[Tradeoff, list[Tradeoff]]]:
    """Each row to print with the later rows that would print the same but for their settings
    (fa, K, V) folded under it; the pick is never folded."""
    out: list[tuple[Tradeoff, list[Tradeoff]]] = []
    seen: dict[str, list[Tradeoff]] = {}
    for t in rows:
        d = vs_pick(t, v) if v is not None else None
        rest = _row_line(t, v, gpus=True, speed=True)[18:]  # past the fa, K and V columns
        if rest in seen and not (d and d["pick"]):
            seen[rest].append(t)
            continue
        out.append((t, []))
        if not (d and d["pick"]):
            seen[rest] = out[-1][1]
    return out


def _settings(t: Tradeoff) -> str:
    return f"{t.type_k}/{t.type_v}" + (" fa off" if t.flash_attn == "off" else "")


def _row_line(t: Tradeoff, v: Verdict | None, *, gpus: bool, speed: bool) -> str:
    ctx = "-" if t.max_ctx is None else f"{t.max_ctx:,}"
    offload = f"{t.n_gpu_layers:>5}{t.n_cpu_moe:>8}" if gpus else ""
    line = f"  {t.flash_attn:<4}{t.type_k:<6}{t.type_v:<6}{offload}{ctx:>13}" + (
        f"{_tps(t.generation_tps):>10}" if speed else ""
    )
    if v is None:
        return line
    return line + f"  {vs_pick_text(vs_pick(t, v), 80 - len(line) - 2)}"


def _indented_by(n: int, text: str) -> list[str]:
    return wrap(
        text, WIDTH, initial_indent=" " * n, subsequent_indent=" " * (n + 2), break_long_words=False
    )


def _tradeoff_notes(rows: list[Tradeoff], v: Verdict | None, *, speed: bool) -> list[str]:
    """What the table's words mean: better/worse KV (where a row says it) and a tokens/s figure
    with `+` (where one is printed)."""
    notes = []
    if v is not None and any(_says_quality(vs_pick(t, v)) for t in rows):
        notes.append(
            "better/worse KV: the cache's quality against the pick's, by llama.cpp's measured "
            "KL divergence (PR #7412): q8_0 loses a negligible amount, a 4-bit V some, a 4-bit "
            "K and V the most"
        )
    plus = next((_tps(t.generation_tps) for t in rows if _tps(t.generation_tps).endswith("+")), "")
    if speed and plus:
        notes.append(
            f"{plus}: at least {plus[:-1]} tokens/s (at a full context), more while it is emptier"
        )
    return [line for n in notes for line in _indented_by(2, n)]


def vs_pick(t: Tradeoff, v: Verdict) -> dict[str, Any] | None:
    """What a trade-off row changes against the pick (`tradeoffs[].vs_pick`): `pick` (this row is
    the choice), `context_delta` (tokens per slot; null when either reaches none),
    `generation_tps_delta` (at each one's full context; null without speeds), and the settings that
    differ (null: the same)."""
    if not v.fits or v.ctx_per_slot is None:
        return None
    fa = "on" if v.flash_attn else "off"
    pick = (t.flash_attn, t.type_k, t.type_v, t.n_gpu_layers, t.n_cpu_moe) == (
        fa,
        v.type_k,
        v.type_v,
        v.n_gpu_layers,
        v.n_cpu_moe,
    )
    tps = None
    if t.generation_tps is not None and v.generation_tps is not None:
        tps = round(t.generation_tps[0] - v.generation_tps[0], 2)
    row_quality, pick_quality = kv_quality(t.type_k, t.type_v), kv_quality(v.type_k, v.type_v)
    return {
        "pick": pick,
        "llama_cpp_aborts": t.llama_cpp_aborts,
        "context_delta": None if t.max_ctx is None else t.max_ctx - v.ctx_per_slot,
        "generation_tps_delta": tps,
        "flash_attn": None if t.flash_attn == fa else t.flash_attn,
        "type_k": None if t.type_k == v.type_k else t.type_k,
        "type_v": None if t.type_v == v.type_v else t.type_v,
        "n_gpu_layers_delta": t.n_gpu_layers - v.n_gpu_layers or None,
        # the row's KV quality (KV_QUALITY's code) where it differs from the pick's
        "quality": row_quality if row_quality != pick_quality else None,
        "pick_quality": pick_quality,
    }


# KV_QUALITY's codes, best first: a row's quality against the pick's, in words
QUALITY_ORDER = ("full", "negligible_loss", "some_loss", "most_loss")


def vs_pick_text(d: dict[str, Any] | None, width: int) -> str:
    """`pick`, or what the row changes: `-8,192 ctx, worse KV, +33 t/s` (as much as fits
    `width`)."""
    if d is None:
        return ""
    if d["pick"]:
        return "the pick"
    return _fitting(_vs_pick_parts(d) or ["the same"], width)


def _vs_pick_parts(d: dict[str, Any]) -> list[str]:
    # the quality before the speed: the tokens/s column shows the speed, nothing else the quality
    parts = [_context_part(d)]
    if d.get("llama_cpp_aborts") or d["context_delta"] is None:
        return parts
    parts.append(_quality_part(d))
    tps = d["generation_tps_delta"]
    if tps is not None and abs(tps) >= 0.05:
        parts.append(f"{'+' if tps > 0 else '-'}{tps_text(abs(tps))} t/s")
    if d["flash_attn"] is not None:
        parts.append(f"fa {d['flash_attn']}")
    if d["n_gpu_layers_delta"]:
        parts.append(f"{d['n_gpu_layers_delta']:+} layers")
    return [p for p in parts if p]


def _quality_part(d: dict[str, Any]) -> str:
    """`better KV` / `worse KV`: the row's KV cache quality against the pick's (KV_QUALITY)."""
    row, pick = d.get("quality"), d.get("pick_quality")
    if row is None or pick is None or row not in QUALITY_ORDER or pick not in QUALITY_ORDER:
        return ""
    return "better KV" if QUALITY_ORDER.index(row) < QUALITY_ORDER.index(pick) else "worse KV"


def _says_quality(d: dict[str, Any] | None) -> bool:
    """Whether the row's vs-pick text has better/worse KV (_vs_pick_parts)."""
    if d is None or d["pick"] or d.get("llama_cpp_aborts") or d["context_delta"] is None:
        return False
    return bool(_quality_part(d))


def _context_part(d: dict[str, Any]) -> str:
    if d.get("llama_cpp_aborts"):
        return "llama.cpp aborts"
    if d["context_delta"] is None:
        return "no fit"
    return f"{d['context_delta']:+,} ctx" if d["context_delta"] else ""


def _fitting(parts: list[str], width: int) -> str:
    """The parts joined with commas, as many as fit `width`."""
    text = ""
    for part in parts:
        candidate = f"{text}, {part}" if text else part
        if len(candidate) > width:
            break
        text = candidate
    return text


def serving_line(
    model: str,
    *,
    n_ctx: int,
    n_seq: int,
    kv_unified: bool,
    gpu_weights_bytes: int,
    cpu_weights_bytes: int,
    url: str,
) -> str:
    """`run`'s one line after Ready, like `ollama ps`: model, context and slots, where the weights
    are, URL."""
    if n_seq <= 1:
        ctx = f"{n_ctx:,} tokens, 1 request at a time"
    elif kv_unified:
        ctx = f"{n_ctx:,} tokens shared by up to {n_seq} parallel requests"
    else:
        ctx = f"{n_seq} slots of {n_ctx // n_seq:,} tokens"
    total = gpu_weights_bytes + cpu_weights_bytes
    gpu = round(100 * gpu_weights_bytes / total) if total else 0
    where = f"{gpu}%/{100 - gpu}% GPU/CPU"
    if gpu in (0, 100):
        where = "100% GPU" if gpu == 100 else "100% CPU"
    return f"Serving    {model}, {ctx}, {where}, {url}"
