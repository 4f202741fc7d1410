"""src/models/deepseek.cpp: llama_model_deepseek::graph (DeepSeek MoE, V1)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from . import llama


def build(ctx: GraphContext) -> None:
    """A Llama layer (rope_freqs where the file has them, the attention output's bias where it
    has one, no "attn_out" name); a dense SwiGLU FFN in the leading layers
    (n_layer_dense_lead), then softmax experts (weights not normalised) beside the shared
    experts' FFN ("ffn_shexp"), added."""
    f, b = ctx.f, ctx.b
    n_dense = f.moe.n_layer_dense_lead if f.moe is not None else ctx.n_layer

    def ffn(cur: T, il: int) -> T:
        if il < n_dense:
            return ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        moe = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False, scale_w=False), "ffn_moe_out", il)
        shexp = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
        return ctx.cb(b.add(moe, shexp), "ffn_out", il)

    llama.layers(ctx, ffn)
