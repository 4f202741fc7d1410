"""src/models/arcee.cpp: llama_model_arcee::graph (AFM)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from . import llama


def build(ctx: GraphContext) -> None:
    """A Llama layer (rope_freqs where the file has them, the attention output's bias where it
    has one) whose FFN is gate-less ReLU² (LLM_FFN_RELU_SQR: up, RELU, SQR, down)."""

    def ffn(cur: T, il: int) -> T:
        return ctx.cb(ctx.ffn(cur, il, "relu_sqr", False), "ffn_out", il)

    llama.layers(ctx, ffn, attn_out=True, sum_name=True)
