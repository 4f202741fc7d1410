"""src/models/nemotron.cpp: llama_model_nemotron::graph (Nemotron-4, Minitron, Nemotron Mini)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError
from .llama import attention
from .phi2 import layer_norm_head


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer with LayerNorms with bias (LLM_NORM) before the attention (partial
    RoPE: n_rot, no rope factors; wo's bias where the file has one) and before a gate-less
    FFN, LLM_FFN_RELU_SQR (up, RELU, SQR, down); the output LayerNorm with bias. The FFN's
    optional biases (ffn_up_b, ffn_down_b) are not modelled: a file with them is declined."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        if ctx.lw(il, "ffn_up.bias") is not None or ctx.lw(il, "ffn_down.bias") is not None:
            raise GraphBuildError(f"{ctx.f.path}: nemotron's FFN biases are not modelled")
        inpSA = inpL
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        cur = attention(ctx, inp, cur, inp_pos, il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        norm_w, norm_b = ctx.lw(il, "ffn_norm.weight"), ctx.lw(il, "ffn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(ffn_inp, norm_w, norm_b, il), "ffn_norm", il)
        cur = ctx.ffn(cur, il, "relu_sqr", False)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
