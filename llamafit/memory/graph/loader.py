"""The model's tensors as llama_model_loader::create_tensor (src/llama-model-loader.cpp) makes them
for the graph: each one's buffer (weight_buffer; the KV cache's, kv_buffer), the RoPE factor
tensors made once per block (rope_factor_layers), and the tensor map of a ModelFacts.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...facts.hparams import ModelFacts
from ...reader.ggml_types import GGML_TYPE_NAMES
from .params import GraphConfig

# the RoPE factor tensors (llama_model::get_rope_factors) that these archs' load_arch_tensors create
# in every block (gemma4: every full-attention block) under one name, TENSOR_DUPLICATED after the
# first (src/models/<arch>.cpp at b11434: `i != 0 ? TENSOR_DUPLICATED : 0`, in the block loop,
# under conditions on the model only: LongRoPE, experts; gemma4.cpp: !hparams.is_swa(i))
ROPE_FACTORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
ROPE_PER_LAYER_ARCHS = frozenset(
    {
        "apertus",
        "arcee",
        "cogvlm",
        "deci",
        "exaone",
        "exaone-moe",
        "exaone4",
        "falcon-h1",
        "gemma4",
        "granite",
        "granite_swa",
        "granitehybrid",
        "granitemoe",
        "llada",
        "llama",
        "llama4",
        "minicpm",
        "minicpm3",
        "mistral3",
        "pangu-embedded",
        "phi3",
        "phimoe",
        "refact",
        "step35",
    }
)


def rope_factor_layers(facts: ModelFacts) -> tuple[int, ...]:
    """The blocks that create the RoPE factor tensors (ROPE_FACTORS) of this model, in order; ()
    for an arch that does not make them per block. llama_model_loader::create_tensor
    (src/llama-model-loader.cpp) puts each in its block's buffer type and, for a
    TENSOR_DUPLICATED one, returns the tensor already made in that buffer type's context: one
    copy per buffer type among these blocks."""
    if facts.architecture not in ROPE_PER_LAYER_ARCHS:
        return ()
    gemma4 = facts.architecture == "gemma4"
    return tuple(il for il in range(facts.n_layer) if not (gemma4 and facts.swa.is_swa[il]))


def rope_factors_name(facts: ModelFacts, kv_size: int) -> str | None:
    """The model tensor llama_model::get_rope_factors (src/llama-model.cpp) hands a block:
    rope_freqs where the file has it, else LongRoPE's rope_factors_long when the context per
    sequence (cparams.n_ctx_seq: the cache's cells per stream, kv_size) exceeds n_ctx_orig_yarn,
    else rope_factors_short; None where the file has none of them."""
    tensors = tensor_map(facts)
    if "rope_freqs.weight" in tensors:
        return "rope_freqs.weight"
    long = kv_size > facts.n_ctx_orig_yarn
    name = "rope_factors_long.weight" if long else "rope_factors_short.weight"
    return name if name in tensors else None


def weight_buffer(config: GraphConfig, overrides: Mapping[str, str], name: str, il: int) -> str:
    """The buffer of model tensor `name` made for layer il (-1: the input layer, -2: the output
    layer; llama_model_loader::create_tensor's buffer type list by llm_tensor_info layer)."""
    hit = overrides.get(name)
    if hit is not None:
        return hit
    if il >= 0:
        return config.layer_weights[il] if config.layer_weights else config.weights
    if il == -1:
        return config.input_weights or config.weights
    return config.output_weights or config.weights


def kv_buffer(config: GraphConfig, il: int) -> str:
    """The buffer of layer il's K and V cache (llama_kv_cache: the layer's device if offloaded)."""
    return config.layer_kv[il] if config.layer_kv else config.kv


_TENSORS: dict[int, tuple[ModelFacts, dict[str, tuple[str, tuple[int, ...]]]]] = {}


def tensor_map(facts: ModelFacts) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (ggml type name, shape), once per facts object."""
    hit = _TENSORS.get(id(facts))
    if hit is not None and hit[0] is facts:
        return hit[1]
    m = {t.name: (GGML_TYPE_NAMES[t.ggml_type], t.shape) for t in facts.tensors}
    if len(_TENSORS) > 16:
        _TENSORS.clear()
    _TENSORS[id(facts)] = (facts, m)
    return m
