"""`llamafit check`: the per-device breakdown and verdict as stable JSON and as text (MiB here
only)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..facts.hparams import ModelFacts
from ..findings import Notice, WayOut, as_notice
from ..memory.model import COMPUTE_ESTIMATE, Breakdown, DeviceUsage
from ..memory.resolve import ResolvedConfig
from ..safe_text import printable
from ..units import MIB
from .bars import bar_lines
from .json_parts import config_json, device_json, model_json, side_models_json
from .layout import wrap, wrap_text

SCHEMA = "llamafit.check/2"


_SIDE_NAMES = {"draft": "draft model", "mtp": "MTP context", "mmproj": "projector"}


def side_lines(b: Breakdown) -> list[str]:
    """`Side       draft model x.gguf: CPU 285 MiB (weights 235 + KV 27 + compute 23 + output
    1)`."""
    lines = []
    for u in b.side_models:
        lines.append(
            f"Side       {_SIDE_NAMES.get(u.kind, u.kind)} {os.path.basename(u.path)} "
            f"({_mib(u.total_bytes)} MiB, in `used` above)"
        )
        for d in u.devices:
            if d.total_bytes:
                lines.append(
                    f"             {d.name}: weights {_mib(d.weights_bytes)} + KV "
                    f"{_mib(d.kv_bytes)} + compute {_mib(d.compute_bytes)} + output "
                    f"{_mib(d.output_bytes)} MiB"
                )
    return lines


_ROOM_FOR = {"model": "weights", "context": "KV", "compute": "compute"}


def _compute_differs_text(d: dict[str, Any]) -> str:
    """llama_compute_differs: llama.cpp's compute column against llamafit's for the same question."""
    if d["taken"] == "llama.cpp":
        tail = "planned with llama.cpp's larger figure"
    elif d["difference_bytes"] < 0:
        tail = "llamafit's larger figure kept"
    else:
        tail = "no room is kept on the host for it"
    what = "graph replay" if d["compute_source"] == "graph" else "estimate"
    return (
        f"{d['device']}: llama.cpp's dry run reserves {d['llama_mib']:,} MiB of compute, "
        f"llamafit's {what} {d['llamafit_bytes'] / MIB:,.1f} MiB for the same graph; {tail}"
    )


def _recorded_text(d: dict[str, Any]) -> str:
    """llama_cpp_recorded: what a plan took from llama.cpp's earlier estimate for this build."""
    parts = []
    if d.get("max_tensor_bytes"):
        parts.append(f"a {d['max_tensor_bytes'] // MIB:,} MiB tensor limit")
    if d.get("room_bytes"):
        what = " and ".join(_ROOM_FOR.get(k, k) for k in d["kinds"]) or "buffers"
        parts.append(f"{d['room_bytes'] / MIB:,.0f} MiB more room for {what}")
    tail = "" if d.get("checked") else "; llama.cpp not asked this time"
    return (
        f"{d['device']}: planned with {' and '.join(parts)}, as llama.cpp's own estimate for this "
        f"build showed before{tail}"
    )


_EXTRA_MODEL = {
    "mmproj": "a multimodal projector",
    "draft": "a draft model",
    "lora": "a LoRA adapter",
}

_SIDE_STEP = {
    "mmproj_to_cpu": "the projector runs on the CPU (--no-mmproj-offload): nothing fits with it "
    "on the GPU",
    "drop_mmproj": "the projector is left out (--drop-side-models): nothing fits with it",
    "drop_draft": "the draft model is left out (--drop-side-models): nothing fits with it",
    "drop_mtp": "MTP is left out (--drop-side-models): nothing fits with it",
}
_SIDE_WHAT = {
    "drop_mmproj": "the projector",
    "drop_draft": "the draft model",
    "drop_mtp": "the MTP context",
}
NOTICE_TEXT: dict[str, Callable[[Any], str]] = {
    "unmodelled_model": lambda d: (
        f"{d['flag']}: {_EXTRA_MODEL.get(d['what'], d['what'])} is loaded too; "
        "its memory is not in this prediction"
    ),
    "devices_not_modelled": lambda d: (
        "--rpc among the llama-server flags is passed on but not modelled: "
        "describe the RPC servers to llamafit with its own --rpc"
    ),
    "ngl_without_gpu": lambda d: "--gpu cpu: -ngl has no effect without a GPU",
    "cc_unknown": lambda d: (
        f"{', '.join(d['devices'])}: compute capability unknown: the flash-attention F16 copies "
        "of the quantized cache are counted for every batch, the most llama.cpp allocates "
        "(name the card with --gpu)"
    ),
    "fa_auto_off": lambda d: (
        f"-fa auto runs with flash attention off: layer {d['layer']} is on {d['device']} but "
        f"its flash attention would run on {d['fa_device']} (no kernel there for its heads or "
        "cache types); the figures are without it"
    ),
    "unknown_flag": lambda d: (
        f"{d['flag']}: llama.cpp 0c1e570 has no such flag, so the command leaves it "
        "out (the build given by --llama-build may know it)"
    ),
    "from_environment": lambda d: f"from the environment: {', '.join(d['names'])}",
    "calibration_skipped": lambda d: (
        f"calibration: skipped {d['count']} damaged record(s) in {d['path']} ({d['reason']})"
    ),
    "calibration_unread": lambda d: f"calibration: {d['path']} not read: {d['reason']}",
    "calibration": lambda d: (
        f"compute buffers scaled by {d['compute_scale']:.3f}: the median of {d['runs']} earlier "
        f"run{'s' if d['runs'] != 1 else ''} of {d.get('architecture') or 'this'} models on "
        f"{', '.join(d.get('devices') or ['CPU'])} ({d.get('source')})"
    ),
    "small_reserve": lambda d: (
        f"the reserve per GPU is {d['reserve_bytes'] // MIB} MiB: below 512 MiB the CUDA "
        "context and memory pools may not fit"
    ),
    "draft_incompatible": lambda d: (
        f"draft model: llama-server loads it but will not speculate with it: {d['reason']}"
    ),
    "draft_without_spec_type": lambda d: (
        "-md without --spec-type draft-simple: llama-server loads the draft model "
        "(counted here) but does not speculate with it"
    ),
    "draft_ctx_ignored": lambda d: (
        "-cd/--ctx-size-draft: builds with a unified draft context ignore it (the draft "
        "context takes the target's n_ctx)"
    ),
    "side_step": lambda d: _SIDE_STEP.get(d["step"], d["step"]),
    "side_way_out": lambda d: (
        f"without {_SIDE_WHAT.get(d['step'], d['step'])}, {d['ctx']:,} tokens per slot fit "
        "(--drop-side-models)"
    ),
    "mmproj_offload_costs": lambda d: (
        f"with --no-mmproj-offload (the image encoder on the CPU) -ngl "
        f"{d['n_gpu_layers']} and {d['ctx']:,} tokens per slot fit"
    ),
    "mtp_auto": lambda d: (
        f"--prefer speed: MTP self-speculation is on (--spec-type draft-mtp, up to {d['n_draft']} "
        "tokens drafted a step by the model's NextN blocks); --spec-type none leaves it off"
    ),
    "mtp_no_room": lambda d: (
        "--prefer speed: MTP self-speculation stays off: "
        + (f"with it only -ngl {d['n_gpu_layers']}" if d else "nothing fits with it")
        + (f" --n-cpu-moe {d['n_cpu_moe']}" if d.get("n_cpu_moe") else "")
        + (" fits (fewer layers on the GPU)" if d else "")
    ),
    "mmproj_skipped": lambda d: f"a projector next to the model is not used: {d['reason']}",
    "mmproj_found": lambda d: f"--mmproj auto: {d['path']} ({d['why']})",
    "mmproj_warmup_small": lambda d: (
        f"the projector reserves its encoder buffer for {d['warmup_tokens']:,} image "
        f"tokens but takes images up to {d['max_tokens']:,} tokens: a large image "
        "grows it "
        "(the worst case is in side_models details)"
    ),
    "host_ram_short": lambda d: (
        f"host RAM: this plan uses {d['used_bytes'] // MIB:,} MiB on the host but "
        f"{d['usable_bytes'] // MIB:,} MiB is available; the CPU weights are memory-mapped "
        "and will page from disk (slow)"
    ),
    "llama_cpp_recorded": _recorded_text,
    "llama_compute_differs": _compute_differs_text,
    "gpu_in_use": lambda d: (
        f"{d['device']}: other processes use {d['used_bytes'] // MIB:,} MiB ("
        + ", ".join(f"{q['name']} {q['used_bytes'] // MIB:,}" for q in d["processes"][:3])
        + (", …" if len(d["processes"]) > 3 else "")
        + ")"
        + (
            f"; closing them would give about {d['tokens']:,} more tokens per slot"
            if d.get("tokens")
            else ""
        )
        + "; --use total plans for the idle card"
    ),
}


# information, not a risk: printed as `Note`
NOTE_CODES = frozenset(
    {"calibration", "from_environment", "mtp_auto", "mtp_no_room", "gpu_in_use", "server_devices"}
)
NOTE_CODES |= {"llama_cpp_recorded"}


def notice_line(warning: Notice | str) -> str:
    """One output line: `Note` for information, `Warning` for a risk."""
    label = "Note" if as_notice(warning).code in NOTE_CODES else "Warning"
    return f"{label:<11}{notice_text(warning)}"


def notice_text(warning: Notice | str) -> str:
    n = as_notice(warning)
    render = NOTICE_TEXT.get(n.code)
    return render(n.data) if render else str(n.data.get("message", n.code))


def notices_json(warnings: Sequence[Notice | str]) -> list[dict[str, Any]]:
    """Each warning as {code, its values…, text}."""
    out = []
    for w in warnings:
        n = as_notice(w)
        out.append({"code": n.code, **n.data, "text": notice_text(n)})
    return out


def way_out_text(w: WayOut) -> str:
    if w.code == "kv_full":
        return (
            f"-ctk {w.type_kv} -ctv {w.type_kv} (flash attention on) fits the full -c {w.n_ctx:,}"
        )
    if w.code == "kv":
        return f"-ctk {w.type_kv} -ctv {w.type_kv} fits {w.ctx_per_slot:,} tokens per slot"
    if w.code == "context":
        return f"{w.ctx_per_slot:,} tokens per slot fit with the current settings"
    return f"-ngl {w.n_gpu_layers} fits -c {w.n_ctx:,} (the other layers run on the CPU)"


def ways_out_json(ways_out: Sequence[WayOut]) -> list[dict[str, Any]]:
    """Each way out as {code, type_k/type_v, n_ctx, context_per_slot, n_gpu_layers (those that
    apply), text}."""
    out = []
    for w in ways_out:
        d: dict[str, Any] = {"code": w.code}
        if w.type_kv is not None:
            d["type_k"] = d["type_v"] = w.type_kv
        if w.n_ctx is not None:
            d["n_ctx"] = w.n_ctx
        if w.ctx_per_slot is not None:
            d["context_per_slot"] = w.ctx_per_slot
        if w.n_gpu_layers is not None:
            d["n_gpu_layers"] = w.n_gpu_layers
        out.append(d | {"text": way_out_text(w)})
    return out


def to_json(
    facts: ModelFacts,
    rc: ResolvedConfig,
    b: Breakdown,
    *,
    warnings: Sequence[Notice | str],
    ways_out: Sequence[WayOut],
    extra: dict[str, Any],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "model": model_json(facts),
        "config": config_json(rc),
        "devices": [device_json(d) for d in b.devices],
        "side_models": side_models_json(b),
        "fits": b.fits,
        "host_weights_mapped": b.host_weights_mapped,
        "warnings": notices_json(warnings),
        "ways_out": ways_out_json(ways_out),
        **extra,
    }


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:,.0f}"


NAME_WIDTH = 9  # a longer device name (RPC0[host:port]) gets its own row, its numbers the next


def device_lines(b: Breakdown) -> list[str]:
    """The breakdown as a table of MiB, one row per device, within 80 columns."""
    head = (
        f"{'(MiB)':<{NAME_WIDTH}}{'usable':>8}{'weights':>8}{'KV':>8}{'RS':>7}{'compute':>8}"
        f"{'output':>8}"
    )
    lines = [head + f"{'reserve':>8}{'used':>8}{'left':>8}"]
    for d in b.devices:
        name = d.name
        if len(name) >= NAME_WIDTH:
            lines.append(name)
            name = ""
        lines.append(
            f"{name:<{NAME_WIDTH}}{_mib(d.usable_bytes):>8}{_mib(d.weights_bytes):>8}"
            f"{_mib(d.kv_bytes):>8}{_mib(d.recurrent_bytes):>7}{_compute_cell(d):>8}"
            f"{_mib(d.output_bytes):>8}{_mib(d.reserve_bytes):>8}{_mib(d.used_bytes):>8}"
            f"{_mib(d.free_after_bytes):>8}"
        )
    return lines + side_used_lines(b) + estimated_lines(b)


def _compute_cell(d: DeviceUsage) -> str:
    """The compute figure, `~` before it where it is the estimate's (DeviceUsage.compute_source)."""
    return ("~" if d.compute_source == COMPUTE_ESTIMATE else "") + _mib(d.compute_bytes)


def estimated_lines(b: Breakdown) -> list[str]:
    """What the `~` of the compute column means, where a device has one."""
    if all(d.compute_source != COMPUTE_ESTIMATE for d in b.devices):
        return []
    return ["Compute    ~ estimated: llama.cpp's graph is not replayed for this setup"]


def side_used_lines(b: Breakdown) -> list[str]:
    """What of each device's `used` the side models take (a draft model, the MTP context, the
    projector): no other column shows it. `Side       in used: CUDA0 6 MiB (projector)`."""
    parts = []
    for d in b.devices:
        kinds = [_SIDE_NAMES.get(u.kind, u.kind) for u in b.side_models if u.on(d.name)]
        if kinds:
            total = sum(u.on(d.name) for u in b.side_models)
            parts.append(f"{d.name} {_mib(total)} MiB ({', '.join(kinds)})")
    return [f"Side       in used: {', '.join(parts)}"] if parts else []


def verdict(b: Breakdown) -> str:
    short = b.short
    if not short:
        known = [d for d in b.devices if d.free_after_bytes is not None]
        margin = ", ".join(f"{d.name} {_mib(d.free_after_bytes)} MiB" for d in known)
        return "fits" + (f": left after loading {margin}" if margin else "")
    return "does not fit: " + ", ".join(f"{d.name} short by {_mib(n)} MiB" for d, n in short)


def to_text(
    facts: ModelFacts,
    rc: ResolvedConfig,
    b: Breakdown,
    *,
    warnings: Sequence[Notice | str],
    ways_out: Sequence[WayOut],
) -> str:
    if rc.n_seq_max <= 1:
        slots = f"{rc.n_ctx:,} tokens, 1 request at a time"
    elif rc.kv_unified:
        slots = f"{rc.n_ctx:,} tokens shared by up to {rc.n_seq_max} parallel requests"
    else:
        slots = f"{rc.n_seq_max} slots of {rc.n_ctx_seq:,} tokens"
    if not any(facts.has_kv):
        # llama_model::create_memory: no memory for the non-causal archs (encoders, diffusion)
        slots += "; no KV cache (" + ("recurrent" if facts.causal else "non-causal") + ")"
    lines = [
        # the path alone: the wrapping of what follows never depends on it
        f"Model      {printable(facts.path)}",
        f"           {printable(facts.architecture)}, {facts.file_type}, trained "
        f"{facts.n_ctx_train:,} tokens",
        f"Config     -c {rc.n_ctx} ({slots}) -fa {rc.fa_flag} "
        f"-ctk {rc.type_k.name.lower()} -ctv {rc.type_v.name.lower()} -ngl {rc.n_gpu_layers} "
        f"-b {rc.n_batch} -ub {rc.n_ubatch}"
        + (f" --embedding --pooling {rc.pooling}" if rc.embeddings else ""),
        *device_lines(b),
        *bar_lines(b),
        *side_lines(b),
        f"Verdict    {verdict(b)}",
    ]
    lines += [f"Way out    {way_out_text(w)}" for w in ways_out]
    if b.cache_ram_bytes:
        cram = _mib(b.cache_ram_bytes)
        lines.append(
            f"Note       llama-server's prompt cache may use up to {cram} MiB more host RAM (-cram)"
        )
    lines += [notice_line(w) for w in warnings]
    return wrap_text("\n".join(lines))


def check_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """`llamafit run`'s table of predicted vs reported MiB (cmd_run.actual_vs_predicted rows),
    non-zero rows."""
    lines = [f"{'Check':<11}{'device':<10}{'buffer':<9}{'predicted':>11}{'reported':>11}   (MiB)"]
    for r in rows:
        if r["predicted_mib"] or r["actual_mib"]:
            estimated = r["kind"] == "compute" and r.get("compute_source") == COMPUTE_ESTIMATE
            lines.append(
                f"{'':<11}{r['device']:<10}{r['kind']:<9}{r['predicted_mib']:>11,.2f}"
                f"{r['actual_mib']:>11,.2f}" + ("   estimated" if estimated else "")
            )
    return lines


def llama_check_lines(data: dict[str, Any] | None) -> list[str]:
    """The `llama.cpp` lines: llama.cpp's own estimate per device beside llamafit's (issue #28)."""
    if not data:
        return []
    if data.get("skipped"):
        return wrap(
            f"check skipped: {data['skipped']}",
            80,
            initial_indent=f"{'llama.cpp':<11}",
            subsequent_indent=" " * 11,
        )
    lines = []
    for i, d in enumerate(data["devices"]):
        head = f"{'llama.cpp':<11}{data['tool']}: " if i == 0 else " " * 11
        verdict = "host: shown, not judged"
        if d["judged"]:
            verdict = "agrees" if d["agrees"] else "DIFFERS"
        if d.get("logits_quirk_mib") and d["judged"]:  # fit/llama_check.py logits_quirk_bytes
            verdict = f"agrees less its {d['logits_quirk_mib']:,.0f} MiB of worst-case logits"
        lines += wrap(
            f"{head}{d['device']} {d['mib']:,.0f} MiB, llamafit {d['llamafit_mib']:,.1f} "
            f"({verdict})",
            80,
            subsequent_indent=" " * 13,
        )
    if data.get("compute"):  # its compute column against llamafit's for the same graph
        shown = "; ".join(
            f"{c['device']} {c['mib']:,} MiB, llamafit {c['llamafit_bytes'] / MIB:,.1f}"
            + ("" if c["agrees"] else " (DIFFERS)")
            for c in data["compute"]
        )
        lines += wrap(
            f"compute at its own graph: {shown}",
            80,
            initial_indent=" " * 11,
            subsequent_indent=" " * 13,
        )
    lines += [
        w
        for n in data.get("notes", [])
        for w in wrap(n, 80, initial_indent=" " * 11, subsequent_indent=" " * 11)
    ]
    if data["agrees"] is False:
        lines.append(
            f"{'Warning':<11}llama.cpp's own estimate differs from llamafit's: a real "
            "start decides (llamafit run)"
        )
    return lines
