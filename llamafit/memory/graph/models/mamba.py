"""src/models/mamba.cpp: llama_model_mamba::graph for LLM_ARCH_MAMBA and LLM_ARCH_MAMBA2."""

from __future__ import annotations

from ..build import GraphContext
from .mamba_base import mamba2_layer, mamba_layer


def build(ctx: GraphContext) -> None:
    """src/models/mamba.cpp llama_model_mamba::graph: RMS norm, the Mamba-2 layer (mamba2) or the
    Mamba-1 one (mamba), the residual; no attention, no positions."""
    f, b = ctx.f, ctx.b
    inpL = ctx.inp_embd(1.0)
    rs = ctx.inp_rs(list(range(f.n_layer_all)))
    out_ids = ctx.inp_out_ids()
    layer = mamba2_layer if f.architecture == "mamba2" else mamba_layer
    for il in ctx.layers():
        cur = ctx.attn_norm(inpL, il)
        cur = layer(ctx, rs, cur, il)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        inpL = ctx.cb(b.add(cur, inpL), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
