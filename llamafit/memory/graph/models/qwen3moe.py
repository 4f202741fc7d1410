"""src/models/qwen3moe.cpp: llama_model_qwen3moe::graph, qwen3.cpp's layers with routed experts."""

from __future__ import annotations

from ..build import GraphContext
from . import qwen3


def build(ctx: GraphContext) -> None:
    """qwen3.build: its FFN takes the experts where a layer has ffn_gate_inp."""
    qwen3.build(ctx)
