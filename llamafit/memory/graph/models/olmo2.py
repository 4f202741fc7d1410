"""src/models/olmo2.cpp: llama_model_olmo2::graph<iswa> (OLMo 2, and OLMo 3 with its sliding
window layers)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from ..kv_cache import has_swa


def build(ctx: GraphContext) -> None:
    """No input norm: Q, K and V as 2-D rows (build_qkv without reshape), RMS-normed over the
    whole row (attn_q_norm, attn_k_norm), reshaped, RoPE without factors; build_attn without
    wo's bias; the attention output normed (attn_post_norm) before the residual; a SwiGLU FFN
    over the residual, normed (ffn_post_norm, named without the layer) before the second
    residual. iSWA caches where the model has sliding-window layers (OLMo 3)."""
    f = ctx.f
    iswa = has_swa(f)
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_attn_maybe_iswa(iswa)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        q, k, v = row_normed_qkv(ctx, inpL, inp_pos, il)
        inp = swa if f.swa.is_swa[il] else base
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, iswa)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        inpL = ctx.cb(post_norm_ffn(ctx, cur, inpSA, il), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))


def row_normed_qkv(ctx: GraphContext, cur: T, inp_pos: T, il: int) -> tuple[T, T, T]:
    """Q, K and V as 2-D rows (build_qkv without reshape, named), Q and K RMS-normed over the
    whole row ("Qcur_normed", "Kcur_normed"), reshaped to heads, RoPE without factors
    (olmo2.cpp, olmoe.cpp, minimax-m2.cpp)."""
    f, b, n_tokens = ctx.f, ctx.b, ctx.c.n_tokens
    q, k, v = ctx.qkv_2d(cur, il)
    ctx.cb(q, "Qcur", il)
    ctx.cb(k, "Kcur", il)
    ctx.cb(v, "Vcur", il)
    q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
    k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
    head = ctx.head_k(il)
    q = b.reshape(q, head, f.n_head[il], n_tokens)
    k = b.reshape(k, head, f.n_head_kv[il], n_tokens)
    v = b.reshape(v, head, f.n_head_kv[il], n_tokens)
    q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
    return q, k, v


def post_norm_ffn(ctx: GraphContext, cur: T, inpSA: T, il: int) -> T:
    """The attention output normed (attn_post_norm) before the residual (ffn_inp), a SwiGLU FFN
    over the residual, normed (ffn_post_norm, named without the layer: build_norm with il -1)
    before the second residual, which is returned (olmo2.cpp, exaone4.cpp)."""
    b = ctx.b
    post = ctx.lw(il, "post_attention_norm.weight")
    cur = ctx.cb(ctx.norm(cur, post, il), "attn_post_norm", il)
    ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
    cur = ctx.cb(ctx.ffn(ffn_inp, il, "silu", False), "ffn_out", il)
    cur = ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), -1)
    ctx.cb(cur, "ffn_post_norm", -1)
    return b.add(cur, ffn_inp)
