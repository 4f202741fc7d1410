"""src/models/hunyuan-moe.cpp: llama_model_hunyuan_moe::graph (Hunyuan-A13B)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """A Llama layer whose Q is roped and named before K is (K's "Kcur" is its unroped rows), K
    then Q RMS-normed per head after RoPE (with the rope factors); the shared FFN ("ffn_mlp")
    and softmax experts (weights normalised) side by side on the FFN norm, added."""
    b = ctx.b
    ctx.no_long_rope()
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(b.rope(q, inp_pos, factors), "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        k = b.rope(k, inp_pos, factors)
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_norm", il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_norm", il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur = ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        mlp = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_mlp", il)
        moe = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        ffn_out = ctx.cb(b.add(moe, mlp), "ffn_out", il)
        inpL = ctx.cb(b.add(ffn_out, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
