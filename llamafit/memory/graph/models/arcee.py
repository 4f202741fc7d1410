"""src/models/arcee.cpp: llama_model_arcee::graph (AFM)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """A Llama layer (rope_freqs where the file has them, the attention output's bias where it
    has one) whose FFN is gate-less ReLU² (LLM_FFN_RELU_SQR: up, RELU, SQR, down)."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
        cur = llama.attention(ctx, inp, cur, inp_pos, il, factors=factors)
        ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "relu_sqr", False), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
