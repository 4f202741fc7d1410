"""src/models/minimax-m2.cpp: llama_model_minimax_m2::graph (MiniMax-M2, M2.1)."""

from __future__ import annotations

from ..build import GATING, GraphContext
from ..params import GraphBuildError
from .olmo2 import row_normed_qkv


def build(ctx: GraphContext) -> None:
    """Q, K and V as 2-D rows (build_qkv without reshape), RMS-normed over the whole row
    (attn_q_norm, attn_k_norm), reshaped, RoPE; build_attn without wo's bias; experts in every
    layer, gated as {arch}.expert_gating_func says (sigmoid in the released GGUFs), selected
    with exp_probs_b, weights normalised."""
    f, b = ctx.f, ctx.b
    gating = GATING.get(f.expert_gating_func)
    if gating is None:  # LLAMA_EXPERT_GATING_FUNC_TYPE_NONE: build_moe_ffn aborts
        raise GraphBuildError(f"{f.path}: minimax-m2 without expert_gating_func")
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        q, k, v = row_normed_qkv(ctx, ctx.attn_norm(inpL, il), inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        probs_b = ctx.lw(il, "exp_probs_b.bias")
        cur = ctx.moe_ffn(cur, il, gating=gating, exp_probs_b=probs_b)
        cur = ctx.cb(cur, "ffn_moe_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
