"""src/models/ernie4-5.cpp: llama_model_ernie4_5::graph (ERNIE 4.5 dense: 0.3B)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """A Llama layer: RoPE without factors, build_attn without wo's bias (loaded, not passed),
    its output unnamed, a SwiGLU FFN without biases."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        cur = llama.attention(ctx, inp, cur, inp_pos, il, wo_b=False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
