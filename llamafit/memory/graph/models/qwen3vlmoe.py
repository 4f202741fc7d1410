"""src/models/qwen3vlmoe.cpp: llama_model_qwen3vlmoe::graph (Qwen3-VL MoE's text model)."""

from __future__ import annotations

from ..build import GraphContext
from . import qwen3vl


def build(ctx: GraphContext) -> None:
    """qwen3vl.graph with softmax experts in every layer."""
    qwen3vl.graph(ctx, moe=True)
