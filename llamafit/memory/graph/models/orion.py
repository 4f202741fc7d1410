"""src/models/orion.cpp: llama_model_orion::graph (Orion)."""

from __future__ import annotations

from ..build import GraphContext
from .llama import attention
from .phi2 import layer_norm_head


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer with LayerNorms with bias (LLM_NORM) before the attention (RoPE, no
    rope factors, no output bias) and before a SwiGLU FFN; the output LayerNorm with bias."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        cur = attention(ctx, inp, cur, inp_pos, il, wo_b=False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        norm_w, norm_b = ctx.lw(il, "ffn_norm.weight"), ctx.lw(il, "ffn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(ffn_inp, norm_w, norm_b, il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
