"""src/models/falcon.cpp: llama_model_falcon::graph (Falcon 7B and 40B)."""

from __future__ import annotations

from ..build import GraphContext
from .phi2 import ffn_gelu, layer_norm_head


def build(ctx: GraphContext) -> None:
    """A parallel block: a LayerNorm with bias feeds the gate-less GELU FFN and, where the layer
    has no attn_norm_2 (Falcon-7B), the attention too; Falcon-40B's attention reads its own
    LayerNorm (attn_norm_2). The fused attn_qkv without bias, RoPE, no output bias; both branches
    added to the layer input; the output LayerNorm with bias, the (tied) output."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        attn_norm = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        norm2_w = ctx.lw(il, "attn_norm_2.weight")
        if norm2_w is not None:  # Falcon-40B
            norm2_b = ctx.lw(il, "attn_norm_2.bias")
            cur = ctx.cb(ctx.layer_norm(inpL, norm2_w, norm2_b, il), "attn_norm_2", il)
        else:
            cur = attn_norm
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpL, attn_norm = ctx.out_rows(il, out_ids, cur, inpL, attn_norm)
        ffn_inp = cur
        cur = ctx.cb(ffn_gelu(ctx, attn_norm, il), "ffn_out", il)
        cur = b.add(b.add(cur, ffn_inp), inpL)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
