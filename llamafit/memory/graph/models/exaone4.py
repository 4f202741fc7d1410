"""src/models/exaone4.cpp: llama_model_exaone4::graph<iswa> (EXAONE 4.0 1.2B and 32B)."""

from __future__ import annotations

from ..build import GraphContext
from ..kv_cache import has_swa
from . import olmo2


def build(ctx: GraphContext) -> None:
    """No input norm; Q and K RMS-normed per head (attn_q_norm, attn_k_norm), RoPE (with the
    rope factors) in the sliding-window layers only, or in every layer of a model without
    them; build_attn without wo's bias; the attention output normed (attn_post_norm) before the
    residual, a SwiGLU FFN over the residual, normed (ffn_post_norm, named without the layer)
    before the second residual. iSWA caches for the 32B (the 64-layer model's SWA)."""
    f, b = ctx.f, ctx.b
    ctx.no_long_rope()
    iswa = has_swa(f)
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_attn_maybe_iswa(iswa)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        is_swa = f.swa.is_swa[il]
        q, k, v = ctx.qkv(inpL, il)
        q = ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il)
        k = ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il)
        ctx.cb(q, "Qcur_normed", il)
        ctx.cb(k, "Kcur_normed", il)
        if is_swa or not iswa:
            factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
            q = b.rope(q, inp_pos, factors)
            k = b.rope(k, inp_pos, factors)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        inp = swa if is_swa else base
        cur = ctx.cb(ctx.attn(inp, ctx.wo(il), None, q, k, v, il, iswa), "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        inpL = ctx.cb(olmo2.post_norm_ffn(ctx, cur, inpSA, il), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
