"""src/models/starcoder.cpp: llama_model_starcoder::graph (StarCoder, GPTBigCode)."""

from __future__ import annotations

from ..build import GraphContext
from . import gpt2


def build(ctx: GraphContext) -> None:
    """gpt2.cpp's graph, op for op and name for name (learned positions, LayerNorms with bias,
    the fused attn_qkv with its bias, no RoPE, a gate-less GELU FFN with biases, the (tied)
    output); StarCoder's files have one KV head (multi-query), which build_qkv's views follow."""
    gpt2.build(ctx)
