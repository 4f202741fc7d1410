"""src/models/xverse.cpp: llama_model_xverse::graph (XVERSE 7B, 13B, 65B)."""

from __future__ import annotations

from ..build import GraphContext
from . import baichuan


def build(ctx: GraphContext) -> None:
    """Baichuan 7B's layer line for line (baichuan.cpp with RoPE, which xverse.cpp applies at
    every size): RoPE without factors, build_attn without wo's bias, a SwiGLU FFN without
    biases, an untied lm_head."""
    baichuan.graph(ctx, rope=True)
