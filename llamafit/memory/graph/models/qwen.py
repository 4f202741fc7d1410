"""src/models/qwen.cpp: llama_model_qwen::graph (Qwen, the first: QWenLMHeadModel)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from . import llama


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without rope factors: the fused attn_qkv with its bias (build_qkv), RoPE,
    no output bias, a SwiGLU FFN (qwen.cpp load_arch_tensors: n_ff / 2 wide)."""

    def ffn(cur: T, il: int) -> T:
        return ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)

    llama.layers(ctx, ffn, factors=False)
