"""src/models/exaone.cpp: llama_model_exaone::graph (EXAONE 3.0 and 3.5)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without the "attn_out" name: RoPE with rope_freqs (the llama3 scaling
    of the 3.5 models), the attention output's bias where the file has one, a SwiGLU FFN
    without biases."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
        cur = llama.attention(ctx, inp, cur, inp_pos, il, factors=factors)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
