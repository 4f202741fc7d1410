"""src/models/gemma2.cpp: llama_model_gemma2::graph (Gemma 2)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """The embeddings scaled by sqrt(n_embd) (a SCALE node, "inp_scaled"), iSWA caches (every
    other layer sliding), RoPE, Q scaled, the attention logits soft-capped (attn_soft_cap:
    scale, tanh, scale before the soft max; a parameter of flash attention), post-attention and
    post-FFN norms around a GELU FFN, the logits soft-capped (always)."""
    f, b = ctx.f, ctx.b
    ctx.attn_soft_cap = True
    inpL = ctx.cb(b.scale(ctx.inp_embd(1.0)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_iswa()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        q = b.scale(q)  # f_attention_scale
        inp = swa if f.swa.is_swa[il] else base
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, True)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        cur = ctx.norm(cur, ctx.lw(il, "post_attention_norm.weight"), il)
        ctx.cb(cur, "attn_post_norm", il)
        sa_out = ctx.cb(b.add(cur, inpL), "sa_out", il)
        cur = ctx.cb(ctx.norm(sa_out, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "gelu", False), "ffn_out", il)
        cur = ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), -1)
        ctx.cb(cur, "ffn_post_norm", -1)
        inpL = ctx.cb(b.add(cur, sa_out), "l_out", il)
    logits = ctx.lm_head(inpL)
    ctx.finish(b.scale(b.unary(b.scale(logits), "TANH")))
