"""src/models/jais.cpp: llama_model_jais::graph (Jais)."""

from __future__ import annotations

from ..build import GraphContext
from .phi2 import layer_norm_head


def build(ctx: GraphContext) -> None:
    """No positions (ALiBi: the slopes are the softmax's and flash attention's max_bias, the
    graph's shapes are llama's); gpt2.cpp's sequential block: LayerNorms with bias before the
    attention (build_qkv over the fused attn_qkv with its bias, the output projection's bias)
    and before a gated SiLU FFN with biases on up, gate and down; the output LayerNorm with
    bias and the output matrix."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp = ctx.inp_attn_kv()
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
        cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
