"""src/models/ernie4-5-moe.cpp: llama_model_ernie4_5_moe::graph (ERNIE 4.5 21B-A3B, 300B-A47B)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """ernie4-5.cpp's layer ("attn_out" named) with a dense FFN in the leading layers and, in
    the MoE layers (the ones with ffn_gate_inp: il >= n_layer_dense_lead and (il + 1) %
    n_moe_layer_step == 0, as load_arch_tensors makes them), softmax experts (weights
    normalised, the router's exp_probs_b) plus the shared FFN when n_ff_shexp."""
    f, b = ctx.f, ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        cur = ctx.cb(llama.attention(ctx, inp, cur, inp_pos, il, wo_b=False), "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        if ctx.lw(il, "ffn_gate_inp.weight") is None:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        else:
            probs_b = ctx.lw(il, "exp_probs_b.bias")
            moe = ctx.cb(ctx.moe_ffn(cur, il, exp_probs_b=probs_b), "ffn_moe_out", il)
            if f.moe is not None and f.moe.n_ff_shexp > 0:
                shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
                moe = b.add(moe, shared)
            cur = ctx.cb(moe, "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
