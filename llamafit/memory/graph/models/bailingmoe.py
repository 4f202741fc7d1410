"""src/models/bailingmoe.cpp: llama_model_bailingmoe::graph (Ling lite and plus, the first)."""

from __future__ import annotations

from ..build import GraphContext
from .llama import attention


def build(ctx: GraphContext) -> None:
    """A Llama attention (get_rope_factors' factors, the output projection's bias where the file
    has one) and in every layer softmax-gated experts (weights normalised as
    expert_weights_norm says) beside the shared experts' SwiGLU FFN."""
    b, f = ctx.b, ctx.f
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        cur = attention(ctx, inp, cur, inp_pos, il, factors=ctx.rope_factors(il))
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        routed = ctx.cb(
            ctx.moe_ffn(cur, il, norm_w=f.expert_weights_norm, scale_w=False), "ffn_moe_out", il
        )
        shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
        cur = ctx.cb(b.add(routed, shared), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
