"""src/models/gptneox.cpp: llama_model_gptneox::graph (GPT-NeoX, Pythia)."""

from __future__ import annotations

from ..build import GraphContext
from .phi2 import ffn_gelu, layer_norm_head


def build(ctx: GraphContext) -> None:
    """LayerNorms with bias, the fused attn_qkv with its bias, (partial) RoPE, the output
    projection's bias, a gate-less GELU FFN with biases; with use_parallel_residual the FFN reads
    its own LayerNorm of the layer input and both branches are added to it, else the FFN follows
    the attention's residual; the output LayerNorm with bias."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        norm_w, norm_b = ctx.lw(il, "ffn_norm.weight"), ctx.lw(il, "ffn_norm.bias")
        if ctx.f.parallel_residual:  # x + attn(ln1(x)) + ffn(ln2(x))
            attn_out = cur
            cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "ffn_norm", il)
            cur = ctx.cb(ffn_gelu(ctx, cur, il), "ffn_out", il)
            cur = ctx.cb(b.add(cur, inpL), "ffn_out", il)
            cur = b.add(cur, attn_out)
        else:
            ffn_inp = ctx.cb(b.add(cur, inpL), "ffn_inp", il)
            cur = ctx.cb(ctx.layer_norm(ffn_inp, norm_w, norm_b, il), "ffn_norm", il)
            cur = ctx.cb(ffn_gelu(ctx, cur, il), "ffn_out", il)
            cur = b.add(cur, ffn_inp)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
