"""src/models/mistral3.cpp: llama_model_mistral3::graph (Ministral 3, Mistral Small 3.x and
Devstral converted as mistral3)."""

from __future__ import annotations

from ..build import GraphContext
from . import llama


def build(ctx: GraphContext) -> None:
    """llama.cpp's graph plus the attention temperature tuning (Llama 4 scaling: inp_attn_scale
    where {arch}.attention.temperature_scale is set, Q times it after RoPE)."""
    ctx.no_long_rope()
    llama.graph(ctx, temp=True)
