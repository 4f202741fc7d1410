"""src/models/seed-oss.cpp: llama_model_seed_oss::graph (Seed-OSS 36B)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """A Llama layer (Q/K/V biases where the file has them, RoPE without factors) whose FFN
    input is normed by attn_post_norm ("attn_post_norm"), a SwiGLU FFN without biases."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        cur = ctx.cb(llama.attention(ctx, inp, cur, inp_pos, il), "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        post = ctx.lw(il, "post_attention_norm.weight")
        cur = ctx.cb(ctx.norm(ffn_inp, post, il), "attn_post_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
