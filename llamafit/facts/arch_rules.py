"""Per-architecture rules llama.cpp applies on top of the generic GGUF keys (llama.cpp 0c1e570).

Each table cites where llama.cpp keeps the rule; `facts.py` applies them.
"""

from __future__ import annotations

from dataclasses import dataclass

# src/llama-arch.cpp llm_arch_is_recurrent(): every layer is recurrent, no KV cache.
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})

# src/llama-arch.cpp llm_arch_is_hybrid(): attention KV + recurrent state (llama_memory_hybrid).
HYBRID_ARCHS = frozenset(
    {
        "jamba",
        "falcon-h1",
        "plamo2",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "qwen3next",
        "kimi-linear",
        "bailingmoe3",
        "kimi-k3",
        "glm5-next",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "deepseek4",
        "minimax-01",
    }
)

# How a hybrid marks its recurrent layers (src/models/<arch>.cpp load_arch_hparams).
RECR_IF_NO_KV_HEADS = frozenset(
    {
        "jamba",
        "granitehybrid",
        "lfm2",
        "lfm2moe",
        "plamo2",
        "kimi-linear",
        "bailingmoe3",
        "kimi-k3",
        "glm5-next",
    }
)
RECR_IF_NO_KV_HEADS_AND_NO_FFN = frozenset({"nemotron_h", "nemotron_h_moe"})  # nemotron-h.cpp
# default 4
RECR_BY_INTERVAL = frozenset({"qwen3next", "qwen35", "qwen35moe", "qwen4exp", "minimax-01"})
RECR_AND_ATTENTION_EVERY_LAYER = frozenset({"falcon-h1"})  # falcon-h1.cpp: is_recr on all layers

# text embedding models (and rerankers), which llama-server runs with --embedding (--rerank)
EMBEDDING_ARCHS = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "modern-bert",
        "gemma-embedding",
    }
)
# src/llama-model.cpp create_memory(): res = nullptr, no KV cache at all: the encoders, the
# diffusion generators (dream, llada, llada-moe, rnd1) and an audio decoder (wavtokenizer-dec)
NO_MEMORY_ARCHS = EMBEDDING_ARCHS | frozenset(
    {"wavtokenizer-dec", "dream", "llada", "llada-moe", "rnd1"}
)


@dataclass(frozen=True, slots=True)
class SWARule:
    """How an arch sets `swa_type`, `n_swa` and the per-layer SWA flags."""

    period: int | None  # default `sliding_window_pattern` period; None: the GGUF array is required
    dense_first: bool = False  # llama_hparams::set_swa_pattern(n, dense_first)
    needs_window: bool = False  # SWA only when `sliding_window` > 0, else none
    swa_type: str = "standard"
    default_window: int | None = None  # n_swa when the key is absent
    forced_window: int | None = None  # n_swa set by the arch whatever the GGUF says


# src/models/*.cpp load_arch_hparams (load_swa_pattern(ml, period, dense_first)).
SWA_RULES: dict[str, SWARule] = {
    "gemma2": SWARule(2, default_window=4096),
    "gemma3": SWARule(6, needs_window=True),
    "gemma3n": SWARule(5),
    "gemma4": SWARule(None),
    "gemma-embedding": SWARule(6, swa_type="symmetric"),
    "modern-bert": SWARule(3, dense_first=True, needs_window=True, swa_type="symmetric"),
    "gpt-oss": SWARule(2),
    "cohere2": SWARule(4),
    "cohere2moe": SWARule(4, dense_first=True),
    "llama4": SWARule(4, swa_type="chunked", forced_window=8192),  # 0 in the GGUF turns it off
    "exaone-moe": SWARule(4, default_window=128),
    "olmo2": SWARule(4, needs_window=True),
    "afmoe": SWARule(4, needs_window=True),
    "mellum": SWARule(4, needs_window=True),
    "muse-glimmer": SWARule(4),
    "smallthinker": SWARule(4, dense_first=True, needs_window=True, forced_window=4096),
    "laguna": SWARule(4, dense_first=True, needs_window=True),
    "plamo3": SWARule(8, needs_window=True),
    "granite_swa": SWARule(None),
    "mimo2": SWARule(None),
    "maple": SWARule(None),
    "dots3note": SWARule(None),
    "step35": SWARule(None),
    "spark2_5": SWARule(None),
}

# phi3.cpp: a GGUF sliding_window is ignored (full cache on every layer).
SWA_DISABLED_ARCHS = frozenset({"phi3"})

# exaone4.cpp: only the 64-layer (32B) model uses SWA (period 4, window 4096 unless the GGUF says).
EXAONE4_SWA_LAYERS = 64

# Archs that hard-code how many leading layers own a KV cache (src/models/gemma3n.cpp).
KV_FROM_START_FIXED = {"gemma3n": 20}
# gemma4.cpp: n_layer_kv_from_start = block_count - attention.shared_kv_layers
KV_FROM_START_SHARED_KEY = frozenset({"gemma4"})

# MLA archs whose cache is K-only when key_length_mla/value_length_mla are present
# (src/models/deepseek2.cpp and relatives; src/llama-kv-cache.cpp has_v = !is_mla). Not minicpm3
# nor plm: their load_arch_hparams read kv_lora_rank but no MLA key lengths, their K/V always
# decompressed (src/models/minicpm3.cpp, src/models/plm.cpp).
MLA_CAPABLE_ARCHS = frozenset(
    {
        "deepseek2",
        "deepseek32",
        "glm-dsa",
        "kimi-k2",
        "mistral4",
        "hy_v4",
        "glm5-next",
    }
)


# Caches beyond MLA/KV/recurrent state that llamafit does not model (src/llama-kv-cache-dsa.cpp,
# llama-kv-cache-dsv4.cpp, llama-kv-cache-msa.cpp): their KV predictions are lower bounds.
UNMODELLED_CACHES = {
    "deepseek32": "DSA indexer-key cache",
    "glm-dsa": "DSA indexer-key cache",
    "hy_v4": "DSA indexer-key cache",
    "dots3note": "DSA indexer-key cache",
    "deepseek4": "compressed per-sequence cache (llama_kv_cache_dsv4)",
    "minimax-m3": "MSA indexer-key cache",
}


def is_swa_layer(il: int, period: int, dense_first: bool) -> bool:
    """llama_hparams::set_swa_pattern (src/llama-hparams.cpp) for one layer below n_layer."""
    if period == 0:
        return True
    if dense_first:
        return il % period != 0
    return il % period < period - 1


# the recurrent sizes each arch's layers divide (facts/hparams.py _check_recurrent): the Mamba-2
# layer (src/models/mamba-base.cpp build_mamba2_layer: head_dim = d_inner / ssm_dt_rank, the
# grouped RMS norm over d_inner / ssm_n_group) and the gated DeltaNet (src/models/qwen3next.cpp:
# head_v_dim = d_inner / num_v_heads, num_v_heads / num_k_heads repeats; num_v_heads =
# ssm_dt_rank, num_k_heads = ssm_n_group), as (numerator, denominator) fields of RecurrentFacts
_MAMBA2_DIVISORS = (("d_inner", "dt_rank"), ("d_inner", "n_group"))
_DELTA_NET_DIVISORS = (("d_inner", "dt_rank"), ("dt_rank", "n_group"))
RECURRENT_DIVISORS: dict[str, tuple[tuple[str, str], ...]] = {
    **dict.fromkeys(
        ("mamba2", "granitehybrid", "nemotron_h", "nemotron_h_moe", "falcon-h1"), _MAMBA2_DIVISORS
    ),
    **dict.fromkeys(("qwen3next", "qwen35", "qwen35moe"), _DELTA_NET_DIVISORS),
}
