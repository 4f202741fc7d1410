"""src/models/olmoe.cpp: llama_model_olmoe::graph (OLMoE)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """An input norm, Q, K and V as 2-D rows (build_qkv without reshape) RMS-normed over the
    whole row (attn_q_norm, attn_k_norm), reshaped, RoPE; build_attn without wo's bias; softmax
    experts whose weights are not normalised."""
    f, b, n_tokens = ctx.f, ctx.b, ctx.c.n_tokens
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
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
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False), "ffn_moe_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
