"""src/models/gemma3.cpp: llama_model_gemma3::graph."""

from __future__ import annotations

import math

from ..build import GraphContext
from ..kv_cache import has_swa


def build(ctx: GraphContext) -> None:
    """The scaled embeddings, iSWA attention where the model has SWA layers (else the one
    cache), Q/K RMS norms, Q scaled, post-attention and post-FFN norms around a GELU FFN, logit
    soft-capping."""
    f, b = ctx.f, ctx.b
    iswa = has_swa(f)
    inpL = ctx.cb(ctx.inp_embd(math.sqrt(f.n_embd)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    # build_attn_inp_kv / build_attn_inp_kv_iswa
    if iswa:
        base, swa = ctx.inp_iswa()
    else:
        base = swa = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.qk_norm_rope(q, k, inp_pos, il)
        ctx.cb(v, "Vcur", il)
        q = b.scale(q)  # f_attention_scale
        inp = swa if f.swa.is_swa[il] else base
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        cur = ctx.attn(inp, wo, None, q, k, v, il, iswa)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        cur = ctx.norm(cur, ctx.lw(il, "post_attention_norm.weight"), il)
        ctx.cb(cur, "attn_post_norm", il)
        sa_out = ctx.cb(b.add(cur, inpSA), "sa_out", il)
        cur = ctx.cb(ctx.norm(sa_out, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "gelu", False), "ffn_out", il)
        cur = ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), -1)
        ctx.cb(cur, "ffn_post_norm", il)
        inpL = ctx.cb(b.add(cur, sa_out), "l_out", il)
    ctx.finish(ctx.softcap(ctx.lm_head(inpL)))
