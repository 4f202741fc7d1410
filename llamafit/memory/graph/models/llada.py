"""src/models/llada.cpp: llama_model_llada::graph (LLaDA 8B, a diffusion model: a Llama without
memory)."""

from __future__ import annotations

from ..build import GraphContext
from . import dream


def build(ctx: GraphContext) -> None:
    """dream.cpp's graph (a Llama layer over the ubatch itself, build_attn_inp_no_cache; RoPE
    without factors) with build_attn ignoring wo's bias (llada.cpp passes NULL though it loads
    attn_output.bias) and the FFN without its optional biases."""
    dream.graph(ctx, wo_bias=False)
