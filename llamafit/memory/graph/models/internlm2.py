"""src/models/internlm2.cpp: llama_model_internlm2::graph (InternLM2, InternLM2.5)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without rope factors and the names "attn_out" and the second
    "ffn_out": RoPE, the attention output's bias where the file has one, a SwiGLU FFN."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        cur = llama.attention(ctx, inp, cur, inp_pos, il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
