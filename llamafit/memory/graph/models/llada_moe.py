"""src/models/llada-moe.cpp: llama_model_llada_moe::graph (LLaDA-MoE 7B-A1B, a diffusion model:
an OLMoE-style MoE without memory)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput


def build(ctx: GraphContext) -> None:
    """rnd1.cpp's layer over the ubatch itself (build_attn_inp_no_cache) with three
    differences: Q and K are both RMS-normed before either is roped, build_attn ignores wo's
    bias, and the routed experts' weights are not normalised (build_moe_ffn's norm_w false;
    softmax gating)."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
        q, k = b.rope(q, inp_pos, None), b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn_no_cache(inp, ctx.wo(il), None, q, k, v, il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False), "ffn_moe_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
