"""src/models/qwen35moe.cpp: llama_model_qwen35moe::graph, qwen3next.cpp's with separate beta and
alpha projections, weight scales, IMRoPE positions and no repeated heads."""

from __future__ import annotations

from ..build import GraphContext
from . import qwen3next


def build(ctx: GraphContext) -> None:
    """qwen3next.graph for qwen35moe."""
    qwen3next.graph(ctx, q35=True)
