"""src/models/chatglm.cpp: llama_model_chatglm::graph (ChatGLM3, GLM-4-9B in its first, chatglm
format)."""

from __future__ import annotations

from ..build import GraphContext
from . import glm4


def build(ctx: GraphContext) -> None:
    """glm4.cpp's layer without its post norms: build_qkv (the fused attn_qkv with its bias),
    RoPE without factors, build_attn without wo's bias, the FFN norm and ggml_swiglu over a
    double-wide up projection (LLM_FFN_SWIGLU without ffn_gate)."""
    glm4.graph(ctx, post_norms=False)
