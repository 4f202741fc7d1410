"""src/models/stablelm.cpp: llama_model_stablelm::graph (StableLM, StableLM 2)."""

from __future__ import annotations

from ..build import GraphContext
from .phi2 import layer_norm_head


def build(ctx: GraphContext) -> None:
    """LayerNorms with bias; Q/K/V (biases where the file has them), Q and K LayerNorm-ed per
    head where it has attn_q_norm / attn_k_norm, partial RoPE, the attention without wo's
    bias; a SwiGLU FFN over the FFN norm, or, without one, over the attention's norm (the
    parallel residual of StableLM 2 12B); the output LayerNorm with bias."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        inpSA = cur
        q, k, v = ctx.qkv(cur, il)
        q_norm, k_norm = ctx.lw(il, "attn_q_norm.weight"), ctx.lw(il, "attn_k_norm.weight")
        if q_norm is not None:
            q = ctx.cb(ctx.layer_norm(q, q_norm, None, il), "Qcur", il)
        if k_norm is not None:
            k = ctx.cb(ctx.layer_norm(k, k_norm, None, il), "Kcur", il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpL, inpSA = ctx.out_rows(il, out_ids, cur, inpL, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpL), "ffn_inp", il)
        ffn_w = ctx.lw(il, "ffn_norm.weight")
        if ffn_w is not None:
            ffn_b = ctx.lw(il, "ffn_norm.bias")
            cur = ctx.cb(ctx.layer_norm(ffn_inp, ffn_w, ffn_b, il), "ffn_norm", il)
        else:
            cur = inpSA
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
