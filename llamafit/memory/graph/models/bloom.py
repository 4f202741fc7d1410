"""src/models/bloom.cpp: llama_model_bloom::graph (BLOOM)."""

from __future__ import annotations

from ..build import GraphContext
from . import gpt2


def build(ctx: GraphContext) -> None:
    """No positions (ALiBi: the slopes are the softmax's and flash attention's max_bias, the
    graph's shapes are llama's): the token rows LayerNormed with token_embd_norm (made for layer
    0: "inp_norm-0"), then gpt2.cpp's layers (LayerNorms with bias, the fused attn_qkv with its
    bias, the output projection's bias, a gate-less GELU FFN with biases), the output LayerNorm
    with bias, the (tied) output."""
    inpL = ctx.inp_embd(1.0)
    inp = ctx.inp_attn_kv()
    norm_w = ctx.w("token_embd_norm.weight", 0)
    norm_b = ctx.w("token_embd_norm.bias", 0)
    inpL = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, 0), "inp_norm", 0)
    gpt2.blocks(ctx, inpL, inp)
