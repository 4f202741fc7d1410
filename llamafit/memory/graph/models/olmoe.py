"""src/models/olmoe.cpp: llama_model_olmoe::graph (OLMoE)."""

from __future__ import annotations

from ..build import GraphContext
from .olmo2 import row_normed_qkv


def build(ctx: GraphContext) -> None:
    """An input norm, Q, K and V as 2-D rows (build_qkv without reshape) RMS-normed over the
    whole row (attn_q_norm, attn_k_norm), reshaped, RoPE; build_attn without wo's bias; softmax
    experts whose weights are not normalised."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        q, k, v = row_normed_qkv(ctx, ctx.attn_norm(inpL, il), inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False), "ffn_moe_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
