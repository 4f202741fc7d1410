"""src/models/codeshell.cpp: llama_model_codeshell::graph (CodeShell)."""

from __future__ import annotations

from ..build import GraphContext
from . import starcoder2


def build(ctx: GraphContext) -> None:
    """starcoder2.cpp's graph, op for op and name for name: LayerNorms with bias before the
    attention (build_qkv: CodeShell's files have the fused attn_qkv with its bias; RoPE, the
    output projection's bias) and before a gate-less GELU FFN with biases; the output
    LayerNorm with bias and the output matrix."""
    starcoder2.build(ctx)
