"""src/models/gemma-embedding.cpp: llama_model_gemma_embedding::graph (EmbeddingGemma)."""

from __future__ import annotations

import math

from ..build import GraphContext, NoCacheInput


def build(ctx: GraphContext) -> None:
    """Gemma 3's layer over the ubatch itself (build_attn_inp_no_cache; the SWA layers read the
    second mask): the scaled embeddings, Q/K RMS norms and RoPE, Q scaled, the post-attention
    and post-FFN norms around a GELU FFN; the output norm is "result_norm" (res->t_embd), which
    build_pooling and the dense layers (dense_2, dense_3) read with --embeddings."""
    f, b = ctx.f, ctx.b
    inpL = ctx.cb(ctx.inp_embd(math.sqrt(f.n_embd)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.qk_norm_rope(q, k, inp_pos, il)
        ctx.cb(v, "Vcur", il)
        q = b.scale(q)  # f_attention_scale
        cur = ctx.attn_no_cache(inp, ctx.wo(il), None, q, k, v, il)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        cur = ctx.norm(cur, ctx.lw(il, "post_attention_norm.weight"), il)
        ctx.cb(cur, "attn_post_norm", il)
        sa_out = ctx.cb(b.add(cur, inpL), "sa_out", il)
        cur = ctx.cb(ctx.norm(sa_out, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "gelu", False), "ffn_out", il)
        cur = ctx.cb(ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), -1), "ffn_post_norm", -1)
        inpL = ctx.cb(b.add(cur, sa_out), "l_out", il)
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    ctx.embd_out(cur, "result_norm")
