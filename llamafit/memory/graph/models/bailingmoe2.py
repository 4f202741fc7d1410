"""src/models/bailingmoe2.cpp: llama_model_bailingmoe2::graph (Ling 2.0, Ring 2.0)."""

from __future__ import annotations

from ..build import GATING, GraphContext
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """The fused attn_qkv viewed as Q, K and V, each of Q and K RMS-normed per head then roped,
    build_attn with wo's bias where the file has one ("sa_out" the residual); a dense FFN in the
    leading layers (n_layer_dense_lead: the ones without ffn_gate_inp), else the experts as
    {arch}.expert_gating_func gates them (sigmoid in Ling 2.0), selected with exp_probs_b within
    the top expert groups, weights normalised as expert_weights_norm says and scaled, plus the
    shared FFN. The MTP layers (nextn) are not part of the main graph."""
    f, b = ctx.f, ctx.b
    gating = GATING.get(f.expert_gating_func)
    if gating is None:  # LLAMA_EXPERT_GATING_FUNC_TYPE_NONE: build_moe_ffn aborts
        raise GraphBuildError(f"{f.path}: bailingmoe2 without expert_gating_func")
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
        q = b.rope(q, inp_pos, None)
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
        k = b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        sa_out = ctx.cb(b.add(cur, inpSA), "sa_out", il)
        cur = ctx.cb(ctx.norm(sa_out, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is None:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        else:
            probs_b = ctx.lw(il, "exp_probs_b.bias")
            moe = ctx.moe_ffn(
                cur,
                il,
                gating=gating,
                norm_w=f.expert_weights_norm,
                exp_probs_b=probs_b,
                scale_w=True,
            )
            moe = ctx.cb(moe, "ffn_moe_out", il)
            shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
            cur = ctx.cb(b.add(moe, shared), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, sa_out), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
