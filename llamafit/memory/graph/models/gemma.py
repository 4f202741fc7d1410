"""src/models/gemma.cpp: llama_model_gemma::graph (the first Gemma)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """The embeddings scaled by sqrt(n_embd) (a SCALE node, "inp_scaled", at every build), one
    KV cache, RoPE, Q scaled ("Qcur_scaled") before an attention of scale 1, a GEGLU FFN, no
    post norms, the tied output."""
    b = ctx.b
    inpL = ctx.cb(b.scale(ctx.inp_embd(1.0)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        q = ctx.cb(b.scale(q), "Qcur_scaled", il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        sa_out = ctx.cb(b.add(cur, inpL), "sa_out", il)
        cur = ctx.cb(ctx.norm(sa_out, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "gelu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, sa_out), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
