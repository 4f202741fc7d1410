"""src/models/mpt.cpp: llama_model_mpt::graph (MPT)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError
from . import gpt2


def build(ctx: GraphContext) -> None:
    """Learned positions where the file has position_embd (else ALiBi: the softmax's max_bias,
    no positions), then gpt2.cpp's layers (LayerNorms, the fused attn_qkv, no RoPE, a gate-less
    GELU FFN; biases where the file has them), the output LayerNorm, the (tied) output. Not
    modelled (GraphBuildError): the Q/K LayerNorms, AWQ's ffn_act scales and clamp_kqv
    (build_qkv's ggml_clamp)."""
    f = ctx.f
    if f.clamp_kqv > 0.0:
        raise GraphBuildError(f"{f.path}: clamp_kqv is not modelled")
    for name in ("blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight", "blk.0.ffn_act.scales"):
        if name in ctx.tensors:
            raise GraphBuildError(f"{f.path}: {name} is not modelled for mpt")
    inpL = ctx.inp_embd(1.0)
    inp = ctx.inp_attn_kv()
    if "position_embd.weight" in ctx.tensors:
        inpL = gpt2.add_positions(ctx, inpL, ctx.inp_pos())
    gpt2.blocks(ctx, inpL, inp)
