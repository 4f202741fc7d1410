"""src/models/jais.cpp: llama_model_jais::graph (Jais)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from . import gpt2


def build(ctx: GraphContext) -> None:
    """No positions (ALiBi: the slopes are the softmax's and flash attention's max_bias, the
    graph's shapes are llama's), then gpt2.cpp's sequential blocks: LayerNorms with bias before
    the attention (build_qkv over the fused attn_qkv with its bias, the output projection's
    bias) and before a gated SiLU FFN with biases on up, gate and down; the output LayerNorm
    with bias and the output matrix."""
    inpL = ctx.inp_embd(1.0)
    inp = ctx.inp_attn_kv()
    gpt2.blocks(ctx, inpL, inp, _ffn)


def _ffn(ctx: GraphContext, cur: T, il: int) -> T:
    """build_ffn, LLM_FFN_SILU with a parallel gate, biases on up, gate and down."""
    return ctx.ffn(cur, il, "silu", True)
