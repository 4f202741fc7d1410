"""src/models/qwen35.cpp: llama_model_qwen35::graph, qwen35moe.cpp's with a dense FFN in every
layer (Qwen3.5 dense: 0.8B to 27B)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError
from . import qwen3next


def build(ctx: GraphContext) -> None:
    """qwen3next.graph for qwen35: qwen35moe's gated DeltaNet and gated attention layers (split
    beta/alpha projections, MRoPE over four positions a token), a dense SwiGLU FFN. The optional
    embedding projection (cls.output, cls_out: result_embd_proj) is not modelled."""
    if "cls.output.weight" in ctx.tensors:
        raise GraphBuildError(f"{ctx.f.path}: qwen35's embedding projection is not modelled")
    qwen3next.graph(ctx, q35=True, dense=True)
