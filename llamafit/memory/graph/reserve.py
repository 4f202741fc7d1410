"""What llama_context::sched_reserve (src/llama-context.cpp) reserves: the ubatches, each one
graph_reserve(n_tokens, n_seqs, n_outputs): the prompt-sized graph ("pp"), the
one-token-per-sequence graph ("tg"), and the prompt-sized graph again (`reserves`), and each one's
GraphConfig for a resolved llama-server config (`reserve_configs`). Reserving sees the whole
cache: llama_kv_cache_context(kv) sets n_kv = the cache size (src/llama-kv-cache.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...reader.ggml_types import GGML_TYPE_NAMES
from .cparams import ResolvedConfig
from .params import GraphConfig


@dataclass(frozen=True, slots=True)
class Reserve:
    """One llama_context::graph_reserve call of sched_reserve."""

    kind: str  # "pp" (prompt-sized) or "tg" (one token per sequence)
    n_tokens: int
    n_seqs: int
    n_outputs: int


def reserves(n_ctx: int, n_ubatch: int, n_seq_max: int, n_outputs_max: int) -> tuple[Reserve, ...]:
    """The graphs llama_context::sched_reserve (src/llama-context.cpp) reserves, in order: pp with
    n_tokens = min(n_ctx, n_ubatch) and n_outputs = min(n_tokens, n_outputs_max), tg with
    n_seq_max tokens and outputs, then pp again; graph_reserve rounds n_tokens up to a multiple of
    n_seqs. llama-server's n_outputs_max is n_parallel without speculative decoding
    (server_output_limits, tools/server/server-context.cpp)."""
    n_tokens = min(n_ctx, n_ubatch)
    n_out_pp = min(n_tokens, n_outputs_max)

    def one(kind: str, n: int, n_out: int) -> Reserve:
        n = -(-n // n_seq_max) * n_seq_max
        return Reserve(kind, n, n_seq_max, n_out)

    pp = one("pp", n_tokens, n_out_pp)
    return (pp, one("tg", n_seq_max, n_seq_max), pp)


def reserve_configs(
    rc: ResolvedConfig, **buffers: object
) -> tuple[tuple[Reserve, GraphConfig], ...]:
    """The reserves of llama_context::sched_reserve for a resolved llama-server config, each with
    its GraphConfig: cache cells per stream (rc.kv_cells; the SWA cache's n_swa_cells), streams,
    flash attention, cache types, -nkvo, full offload (n_gpu_layers > n_layer_all is the caller's
    `full_offload`). `buffers` are GraphConfig's buffer fields (from the placement)."""
    out = []
    for r in reserves(rc.n_ctx, rc.n_ubatch, rc.n_seq_max, rc.n_outputs_max):
        config = GraphConfig(
            n_tokens=r.n_tokens,
            n_seqs=r.n_seqs,
            n_outputs=r.n_outputs,
            kv_size=rc.kv_cells,
            kv_size_swa=rc.n_swa_cells,
            n_seq_max=rc.n_seq_max,
            kv_unified=rc.kv_unified,
            flash_attn=rc.flash_attn,
            type_k=GGML_TYPE_NAMES[rc.type_k.id],
            type_v=GGML_TYPE_NAMES[rc.type_v.id],
            offload_kqv=rc.kv_offload,
            build=rc.build,
            embeddings=rc.embeddings,
            pooling=rc.pooling,
            # -fa auto turned off after the cache was made for flash attention: V untransposed
            v_trans=False if rc.fa_auto_off is not None else None,
            **buffers,  # type: ignore[arg-type]
        )
        out.append((r, config))
    return tuple(out)
