"""src/models/cohere2.cpp: llama_model_cohere2::graph (Command R7B, Command A)."""

from __future__ import annotations

from ..build import GraphContext
from . import command_r


def build(ctx: GraphContext) -> None:
    """command_r.graph with cohere2's iSWA caches and RoPE in the sliding-window layers only."""
    command_r.graph(ctx, cohere2=True)
