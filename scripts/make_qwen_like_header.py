"""Write fixtures/header-only/qwen2.5-32b-like-q4_k_m.gguf: a header-only GGUF shaped like
Qwen2.5-32B-Instruct Q4_K_M (64 blocks, 40 heads, 8 KV heads, head dim 128, n_embd 5120, n_ff 27648,
vocab 152,064, context 32,768), with llama.cpp's Q4_K_M type mix (Q6_K for attn_v and ffn_down in
the layers llama-quant.cpp's use_more_bits picks, Q6_K output). No tensor data: only the header,
which is all llamafit reads (the way a remote read sees a model).

    python scripts/make_qwen_like_header.py [OUT]
"""

from __future__ import annotations

import sys
from pathlib import Path

from make_broken_fixtures import T_ARRAY, T_FLOAT32, T_STRING, T_UINT32, gguf, kv, tensor_info

Q4_K, Q6_K, F32 = 12, 14, 0
SIZES = {Q4_K: (256, 144), Q6_K: (256, 210), F32: (1, 4)}
N_LAYER, N_EMBD, N_FF, N_VOCAB, N_HEAD, N_HEAD_KV, HEAD = 64, 5120, 27648, 152064, 40, 8, 128


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp: the first and last eighth of the layers, and every third in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensors() -> list[tuple[str, list[int], int]]:
    kv_dim = N_HEAD_KV * HEAD
    out = [("token_embd.weight", [N_EMBD, N_VOCAB], Q4_K)]
    for i in range(N_LAYER):
        more = Q6_K if use_more_bits(i, N_LAYER) else Q4_K
        out += [
            (f"blk.{i}.attn_norm.weight", [N_EMBD], F32),
            (f"blk.{i}.attn_q.weight", [N_EMBD, N_EMBD], Q4_K),
            (f"blk.{i}.attn_q.bias", [N_EMBD], F32),
            (f"blk.{i}.attn_k.weight", [N_EMBD, kv_dim], Q4_K),
            (f"blk.{i}.attn_k.bias", [kv_dim], F32),
            (f"blk.{i}.attn_v.weight", [N_EMBD, kv_dim], more),
            (f"blk.{i}.attn_v.bias", [kv_dim], F32),
            (f"blk.{i}.attn_output.weight", [N_EMBD, N_EMBD], Q4_K),
            (f"blk.{i}.ffn_norm.weight", [N_EMBD], F32),
            (f"blk.{i}.ffn_gate.weight", [N_EMBD, N_FF], Q4_K),
            (f"blk.{i}.ffn_up.weight", [N_EMBD, N_FF], Q4_K),
            (f"blk.{i}.ffn_down.weight", [N_FF, N_EMBD], more),
        ]
    out += [("output_norm.weight", [N_EMBD], F32), ("output.weight", [N_EMBD, N_VOCAB], Q6_K)]
    return out


def nbytes(shape: list[int], t: int) -> int:
    n = 1
    for d in shape:
        n *= d
    block, size = SIZES[t]
    return n // block * size


def header() -> bytes:
    kvs = [
        kv("general.architecture", T_STRING, "qwen2"),
        kv("general.name", T_STRING, "Qwen2.5 32B Instruct (shape only)"),
        kv("general.file_type", T_UINT32, 15),  # MOSTLY_Q4_K_M
        kv("qwen2.block_count", T_UINT32, N_LAYER),
        kv("qwen2.context_length", T_UINT32, 32768),
        kv("qwen2.embedding_length", T_UINT32, N_EMBD),
        kv("qwen2.feed_forward_length", T_UINT32, N_FF),
        kv("qwen2.attention.head_count", T_UINT32, N_HEAD),
        kv("qwen2.attention.head_count_kv", T_UINT32, N_HEAD_KV),
        kv("qwen2.rope.freq_base", T_FLOAT32, 1000000.0),
        kv("qwen2.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-6),
        kv("qwen2.vocab_size", T_UINT32, N_VOCAB),
        kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        kv("tokenizer.ggml.token_type", T_ARRAY, (T_UINT32, [])),
    ]
    infos, offset = [], 0
    for name, shape, t in tensors():
        infos.append(tensor_info(name, shape, t, offset))
        offset += -(-nbytes(shape, t) // 32) * 32
    return gguf(kvs, infos)


if __name__ == "__main__":
    default = (
        Path(__file__).resolve().parent.parent
        / "fixtures"
        / "header-only"
        / "qwen2.5-32b-like-q4_k_m.gguf"
    )
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    out.write_bytes(header())
    print(out)
