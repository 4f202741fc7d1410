"""src/models/exaone.cpp: llama_model_exaone::graph (EXAONE 3.0 and 3.5)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from . import llama


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without the "attn_out" name: RoPE with rope_freqs (the llama3 scaling
    of the 3.5 models), the attention output's bias where the file has one, a SwiGLU FFN
    without biases."""

    def ffn(cur: T, il: int) -> T:
        return ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)

    llama.layers(ctx, ffn, sum_name=True)
