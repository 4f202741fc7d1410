"""Names the gguf package gives to header values, written out so that reading a model imports only
the standard library (tests/reader/test_ggml_types.py compares them with gguf 0.19's constants).

FILE_TYPES: `general.file_type` (llama.cpp: include/llama.h enum llama_ftype), named as llama.cpp
prints them, without the MOSTLY_/ALL_ prefix. ARCH_NAMES: gguf's MODEL_ARCH_NAMES (llama.cpp:
src/llama-arch.cpp LLM_ARCH_NAMES).
"""

from __future__ import annotations

FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
    40: "Q1_0",
    1024: "GUESSED",
}

ARCH_NAMES = frozenset({
    "afmoe", "apertus", "arcee", "arctic", "arwkv7", "baichuan", "bailingmoe", "bailingmoe2", "bert", "bitnet",
    "bloom", "chameleon", "chatglm", "clip", "codeshell", "cogvlm", "cohere2", "command-r", "dbrx", "deci",
    "deepseek", "deepseek2", "deepseek2-ocr", "dots1", "dream", "ernie4_5", "ernie4_5-moe", "eurobert",
    "exaone", "exaone-moe", "exaone4", "falcon", "falcon-h1", "gemma", "gemma-embedding", "gemma2", "gemma3",
    "gemma3n", "gemma4", "glm-dsa", "glm4", "glm4moe", "gpt-oss", "gpt2", "gptj", "gptneox", "granite",
    "granitehybrid", "granitemoe", "grok", "grovemoe", "hunyuan-dense", "hunyuan-moe", "hunyuan_vl",
    "internlm2", "jais", "jais2", "jamba", "jina-bert-v2", "jina-bert-v3", "kimi-linear", "lfm2", "lfm2moe",
    "llada", "llada-moe", "llama", "llama-embed", "llama4", "maincoder", "mamba", "mamba2", "mimo2", "minicpm",
    "minicpm3", "minimax-m2", "mistral3", "mistral4", "modern-bert", "mpt", "nemotron", "nemotron_h",
    "nemotron_h_moe", "neo-bert", "nomic-bert", "nomic-bert-moe", "olmo", "olmo2", "olmoe", "openelm", "orion",
    "paddleocr", "pangu-embedded", "phi2", "phi3", "phimoe", "plamo", "plamo2", "plamo3", "plm", "qwen",
    "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen35", "qwen35moe", "qwen3moe", "qwen3next", "qwen3vl",
    "qwen3vlmoe", "refact", "rnd1", "rwkv6", "rwkv6qwen2", "rwkv7", "seed_oss", "smallthinker", "smollm3",
    "stablelm", "starcoder", "starcoder2", "step35", "t5", "t5encoder", "wavtokenizer-dec", "xverse"
})
