"""`llamafit inspect`: model facts as a stable JSON object and as text (display edge: MiB here)."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from ..facts.hparams import ModelFacts
from ..facts.projector import ProjectorFacts
from ..memory.kv import kv_cell_cost, swa_cells
from ..memory.projector import encoder_compute
from ..reader.ggml_types import GGMLType
from ..safe_text import printable

SCHEMA = "llamafit.inspect/1"
KV_TYPES = ("f16", "q8_0", "q4_0")
TOKENS = 1000
DEFAULT_N_UBATCH = 512  # llama-server's -ub default (common/common.h)


def kv_cost(facts: ModelFacts, type_name: str) -> dict[str, int] | None:
    """Bytes per 1,000 tokens (K and V of one type, flash attention on, one sequence).

    The SWA part stops growing at the SWA cache size for one sequence at -ub 512; None when the
    type's block size does not divide a head (llama.cpp refuses such a cache).
    """
    t = GGMLType.named(type_name)
    try:
        cost = kv_cell_cost(facts, t, t, flash_attn=True)
    except ValueError:
        return None
    cap = swa_cells(1 << 62, facts.swa.n_swa, 1, DEFAULT_N_UBATCH, unified=True, swa_full=False)
    return {
        "full_bytes": cost.full_bytes * TOKENS,
        "swa_bytes": cost.swa_bytes * min(TOKENS, cap) if cost.swa_bytes else 0,
        "swa_max_bytes": cost.swa_bytes * cap if cost.swa_bytes else 0,
        "bytes_per_token_full": cost.full_bytes,
        "bytes_per_token_swa": cost.swa_bytes,
    }


def to_json(facts: ModelFacts) -> dict[str, Any]:
    """The documented `inspect --json` object (docs/inspect.md: "inspect --json")."""
    d = asdict(replace(facts, tensors=()))
    del d["tensors"]
    w = facts.weights
    d["schema"] = SCHEMA
    d["n_layer"] = facts.n_layer
    d["n_embd_v_gqa_max"] = facts.n_embd_v_gqa_max
    d["weights"] = {
        "total_bytes": w.total_bytes,
        "token_embd_bytes": w.token_embd_bytes,
        "output_bytes": w.output_bytes,
        "output_norm_bytes": w.output_norm_bytes,
        "other_bytes": w.other_bytes,
        "by_role": w.by_role(range(facts.n_layer_all)),
        "layers": [asdict(layer) for layer in w.layers],
    }
    d["kv_cost_per_1000_tokens"] = {t: kv_cost(facts, t) for t in KV_TYPES}
    d["warnings"] = list(facts.warnings) + ([facts.incomplete] if facts.incomplete else [])
    return d


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f} MiB"


def _params(n: int) -> str:
    """A parameter count as model cards say it: 32.8 B, 268.1 M."""
    return f"{n / 1e9:,.1f} B parameters" if n >= 1e9 else f"{n / 1e6:,.1f} M parameters"


def _uniform(values: tuple[int, ...]) -> str:
    return str(values[0]) if len(set(values)) == 1 else "per layer " + ",".join(map(str, values))


def _notes(f: ModelFacts) -> list[str]:
    notes = []
    if f.swa.swa_type != "none":
        notes.append(
            f"sliding window ({f.swa.swa_type}) of {f.swa.n_swa:,} tokens on {f.swa.n_swa_layers} "
            f"of {f.n_layer_all} layers"
        )
    if f.mla:
        notes.append(f"MLA: K-only cache, kv_lora_rank {f.mla.kv_lora_rank}")
    if f.recurrent:
        n = sum(f.is_recurrent)
        notes.append(
            f"recurrent state on {n} layers (F32, per sequence: {f.recurrent.n_embd_r} + "
            f"{f.recurrent.n_embd_s} floats per layer)"
        )
    if f.moe:
        m = f.moe
        notes.append(
            f"MoE: {m.n_expert} experts, {m.n_expert_used} used, {m.n_expert_shared} shared, "
            f"expert FFN {m.n_ff_exp}"
        )
    if f.n_layer_nextn:
        notes.append(f"{f.n_layer_nextn} NextN/MTP layer(s), not loaded by default")
    if f.n_layer_kv_from_start < f.n_layer_all:
        notes.append(f"layers from {f.n_layer_kv_from_start} reuse earlier layers' KV")
    if not f.causal:
        cache = "a KV cache all the same" if any(f.has_kv) else "no KV cache"
        notes.append(f"non-causal / embedding model: {cache}")
    return notes


def to_text(facts: ModelFacts) -> str:
    f, w = facts, facts.weights
    roles = w.by_role(range(f.n_layer_all))
    lines = [
        f"Model          {printable(f.path)}",
        f"Name           {printable(f.name) or '-'}",
        f"Architecture   {printable(f.architecture)}, {f.file_type}, {_params(f.n_params)}",
        f"Size           {_mib(f.file_size)} in {f.n_shards} file(s), {f.n_tensors} tensors",
        f"Layers         {f.n_layer_all}"
        + (f" ({f.n_layer} + {f.n_layer_nextn} NextN)" if f.n_layer_nextn else ""),
        f"Heads          {_uniform(f.n_head)} query, {_uniform(f.n_head_kv)} KV, "
        f"head dim {f.n_embd_head_k} (K) / {f.n_embd_head_v} (V), n_embd {f.n_embd}",
        f"Context        {f.n_ctx_train:,} tokens trained",
        f"Vocabulary     {f.n_vocab:,} tokens" + (", tied embeddings" if f.tied_embeddings else ""),
    ]
    lines += [f"Note           {n}" for n in _notes(f)]
    output = "tied to token_embd" if f.tied_embeddings else _mib(w.output_bytes)
    lines.append(
        f"Weights        token_embd {_mib(w.token_embd_bytes)}, output {output}, "
        + ", ".join(f"{r} {_mib(b)}" for r, b in roles.items() if b)
        + (f", other {_mib(w.other_bytes)}" if w.other_bytes else "")
    )
    lines.append("KV cache per 1,000 tokens (one sequence, flash attention on):")
    costs = {t: kv_cost(f, t) for t in KV_TYPES}
    # the SWA columns only for a model with a sliding-window cache
    swa = any(c is not None and c["swa_max_bytes"] for c in costs.values())
    head = f"  {'type':<6} {'full attention':>16}"
    lines.append(head + (f" {'SWA':>14} {'SWA at most':>14}" if swa else ""))
    for t, c in costs.items():
        if c is None:
            lines.append(f"  {t:<6} {'(block size does not divide the head size)':>46}")
            continue
        row = f"  {t:<6} {_mib(c['full_bytes']):>16}"
        if swa:
            row += f" {_mib(c['swa_bytes']):>14} {_mib(c['swa_max_bytes']):>14}"
        lines.append(row)
    lines += [
        f"Warning        {printable(msg)}"
        for msg in (*f.warnings, *([f.incomplete] if f.incomplete else []))
    ]
    return "\n".join(lines)


PROJECTOR_SCHEMA = "llamafit.inspect-projector/1"


def projector_json(p: ProjectorFacts) -> dict[str, Any]:
    """`inspect --json` of an mmproj file (docs/inspect.md: "inspect --json", projectors)."""
    return {
        "schema": PROJECTOR_SCHEMA,
        "path": p.path,
        "projector_type": p.projector_type,
        "modalities": list(p.modalities),
        "image_size": p.image_size,
        "patch_size": p.patch_size,
        "n_merge": p.n_merge,
        "projection_dim": p.projection_dim,
        "n_embd": p.n_embd,
        "n_ff": p.n_ff,
        "n_layer": p.n_layer,
        "n_head": p.n_head,
        "weights_bytes": p.weights_bytes,
        "n_tensors": p.n_tensors,
        "warmup_image_px": p.warmup_image_size(),
        "image_max_tokens": p.limits.max_tokens,
        "encoder_compute_bytes": {
            "flash_attn_on": encoder_compute(p, image_px=p.warmup_image_size(), flash_attn=True),
            "flash_attn_off": encoder_compute(p, image_px=p.warmup_image_size(), flash_attn=False),
        },
    }


def projector_text(p: ProjectorFacts) -> str:
    warm = p.warmup_image_size()
    tokens = (warm // max(p.patch_size * p.n_merge, 1)) ** 2
    lines = [
        f"Projector  {p.path} ({p.projector_type}, {'+'.join(p.modalities)})",
        f"Image      {p.image_size} px, patch {p.patch_size} px, merge {p.n_merge}: warmup {warm} "
        f"px = {tokens:,} tokens"
        + (f", up to {p.limits.max_tokens:,} tokens" if p.limits.max_tokens else ""),
        (
            f"Encoder    {p.n_layer} blocks, n_embd {p.n_embd}, n_ff {p.n_ff}, {p.n_head} heads; "
            f"projection dim {p.projection_dim} (the text model's n_embd)"
        ),
        f"Weights    {_mib(p.weights_bytes)} in {p.n_tensors} tensors",
        (
            f"Compute    {_mib(encoder_compute(p, image_px=warm, flash_attn=True))} at warmup "
            f"with flash attention, {_mib(encoder_compute(p, image_px=warm, flash_attn=False))} "
            "without"
        ),
    ]
    return "\n".join(lines)
