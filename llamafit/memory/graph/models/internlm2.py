"""src/models/internlm2.cpp: llama_model_internlm2::graph (InternLM2, InternLM2.5)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from . import llama


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without rope factors and the names "attn_out" and the second
    "ffn_out": RoPE, the attention output's bias where the file has one, a SwiGLU FFN."""

    def ffn(cur: T, il: int) -> T:
        return ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)

    llama.layers(ctx, ffn, factors=False)
