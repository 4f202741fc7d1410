"""src/models/granite-hybrid.cpp: llama_model_granite_hybrid::graph, granite.cpp's layers with
Mamba-2 layers where n_head_kv is 0."""

from __future__ import annotations

from ..build import GraphContext
from . import granite


def build(ctx: GraphContext) -> None:
    """granite.graph with the recurrent layers (build_inp_mem_hybrid)."""
    granite.graph(ctx, hybrid=True)
