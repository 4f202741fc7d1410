"""src/models/bloom.cpp: llama_model_bloom::graph (BLOOM)."""

from __future__ import annotations

from ..build import GraphContext
from .phi2 import ffn_gelu, layer_norm_head


def build(ctx: GraphContext) -> None:
    """No positions (ALiBi: the slopes are the softmax's and flash attention's max_bias, the
    graph's shapes are llama's): the token rows LayerNormed with token_embd_norm (made for layer
    0, "inp_norm-0"), a sequential block of LayerNorms with bias, the fused attn_qkv with its
    bias, the output projection's bias, a gate-less GELU FFN with biases; the output LayerNorm
    with bias, the (tied) output."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp = ctx.inp_attn_kv()
    norm_w = ctx.w("token_embd_norm.weight", 0)
    norm_b = ctx.w("token_embd_norm.bias", 0)
    inpL = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, 0), "inp_norm", 0)
    out_ids = ctx.inp_out_ids()
    for il in range(ctx.n_layer):
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        q, k, v = ctx.qkv(cur, il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        ffn_inp = ctx.cb(b.add(cur, inpL), "ffn_inp", il)
        norm_w, norm_b = ctx.lw(il, "ffn_norm.weight"), ctx.lw(il, "ffn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(ffn_inp, norm_w, norm_b, il), "ffn_norm", il)
        cur = ctx.cb(ffn_gelu(ctx, cur, il), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
