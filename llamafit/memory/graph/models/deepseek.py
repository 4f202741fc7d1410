"""src/models/deepseek.cpp: llama_model_deepseek::graph (DeepSeek MoE, V1)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """A Llama layer (rope_freqs where the file has them, the attention output's bias where it
    has one, no "attn_out" name); a dense SwiGLU FFN in the leading layers
    (n_layer_dense_lead), then softmax experts (weights not normalised) beside the shared
    experts' FFN ("ffn_shexp"), added."""
    f, b = ctx.f, ctx.b
    n_dense = f.moe.n_layer_dense_lead if f.moe is not None else ctx.n_layer
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
        cur = llama.attention(ctx, inp, cur, inp_pos, il, factors=factors)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        if il < n_dense:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        else:
            moe = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False), "ffn_moe_out", il)
            shexp = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
            cur = ctx.cb(b.add(moe, shexp), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
