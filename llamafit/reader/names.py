"""Names the gguf package gives to header values, written out so that reading a model imports only
the standard library (tests/reader/test_ggml_types.py compares them with gguf 0.19's constants).

File names (split_info, quant_bits, shard_name): how llama.cpp reads a GGUF file's name, the
split suffix and the quantization tag (common/download.cpp get_gguf_split_info, extract_quant_bits;
src/llama.cpp llama_split_path and llama_split_prefix for the shards the loader opens).

FILE_TYPES: `general.file_type` (llama.cpp: include/llama.h enum llama_ftype), named as llama.cpp
prints them, without the MOSTLY_/ALL_ prefix. ARCH_NAMES: gguf's MODEL_ARCH_NAMES (llama.cpp:
src/llama-arch.cpp LLM_ARCH_NAMES).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# common/download.cpp get_gguf_split_info: re_split over the name less `.gguf`, re_tag over the
# prefix
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


@dataclass(frozen=True)
class SplitInfo:
    """llama.cpp's gguf_split_info: `dir/m-Q4_K_M-00002-of-00003.gguf` is (`dir/m-Q4_K_M`, `Q4_K_M`,
    2, 3)."""

    prefix: str  # the tag included
    index: int
    count: int
    tag: str = ""  # uppercased; "" when the name has none


def split_info(path: str) -> SplitInfo | None:
    """common/download.cpp get_gguf_split_info; None when the name does not end in `.gguf`."""
    if not path.endswith(".gguf"):
        return None
    prefix, index, count = path[: -len(".gguf")], 1, 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG.search(prefix)
    return SplitInfo(prefix, index, count, t.group(1).upper() if t else "")


def tag_bits(tag: str) -> int:
    """The number that starts at a tag's first digit: Q4_K_M → 4, F16 → 16, NVFP4 → 4, none → 0."""
    m = re.search(r"[0-9]+", tag)
    return int(m.group()) if m else 0


def quant_bits(path: str) -> int:
    """common/download.cpp extract_quant_bits: the bits of the file name's tag (0 without one)."""
    info = split_info(path)
    return tag_bits(info.tag) if info else 0


def shard_name(prefix: str, no: int, count: int) -> str:
    """src/llama.cpp llama_split_path: `prefix-%05d-of-%05d.gguf` (no counts from 1 here)."""
    return f"{prefix}-{no:05d}-of-{count:05d}.gguf"


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

ARCH_NAMES = frozenset(
    {
        "afmoe",
        "apertus",
        "arcee",
        "arctic",
        "arwkv7",
        "baichuan",
        "bailingmoe",
        "bailingmoe2",
        "bert",
        "bitnet",
        "bloom",
        "chameleon",
        "chatglm",
        "clip",
        "codeshell",
        "cogvlm",
        "cohere2",
        "command-r",
        "dbrx",
        "deci",
        "deepseek",
        "deepseek2",
        "deepseek2-ocr",
        "dots1",
        "dream",
        "ernie4_5",
        "ernie4_5-moe",
        "eurobert",
        "exaone",
        "exaone-moe",
        "exaone4",
        "falcon",
        "falcon-h1",
        "gemma",
        "gemma-embedding",
        "gemma2",
        "gemma3",
        "gemma3n",
        "gemma4",
        "glm-dsa",
        "glm4",
        "glm4moe",
        "gpt-oss",
        "gpt2",
        "gptj",
        "gptneox",
        "granite",
        "granitehybrid",
        "granitemoe",
        "grok",
        "grovemoe",
        "hunyuan-dense",
        "hunyuan-moe",
        "hunyuan_vl",
        "internlm2",
        "jais",
        "jais2",
        "jamba",
        "jina-bert-v2",
        "jina-bert-v3",
        "kimi-linear",
        "lfm2",
        "lfm2moe",
        "llada",
        "llada-moe",
        "llama",
        "llama-embed",
        "llama4",
        "maincoder",
        "mamba",
        "mamba2",
        "mimo2",
        "minicpm",
        "minicpm3",
        "minimax-m2",
        "mistral3",
        "mistral4",
        "modern-bert",
        "mpt",
        "nemotron",
        "nemotron_h",
        "nemotron_h_moe",
        "neo-bert",
        "nomic-bert",
        "nomic-bert-moe",
        "olmo",
        "olmo2",
        "olmoe",
        "openelm",
        "orion",
        "paddleocr",
        "pangu-embedded",
        "phi2",
        "phi3",
        "phimoe",
        "plamo",
        "plamo2",
        "plamo3",
        "plm",
        "qwen",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
        "qwen3vl",
        "qwen3vlmoe",
        "refact",
        "rnd1",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "seed_oss",
        "smallthinker",
        "smollm3",
        "stablelm",
        "starcoder",
        "starcoder2",
        "step35",
        "t5",
        "t5encoder",
        "wavtokenizer-dec",
        "xverse",
    }
)
