"""src/models/plamo.cpp: llama_model_plamo::graph (PLaMo 13B)."""

from __future__ import annotations

from ..build import GraphContext
from .llama import attention


def build(ctx: GraphContext) -> None:
    """A parallel layer: the attention (RoPE, no rope factors, no output bias) and a SwiGLU FFN
    both read the layer's attn_norm (no ffn_norm); their outputs and the layer input summed. In
    the last layer the attention's output, the norm's output and the layer input keep the output
    rows (ggml_get_rows in that order)."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        cur = ctx.attn_norm(inpL, il)
        sa_inp = cur
        cur = attention(ctx, inp, cur, inp_pos, il, wo_b=False)
        cur, sa_inp, inpL = ctx.out_rows(il, out_ids, cur, sa_inp, inpL)
        sa_out = cur
        cur = ctx.cb(ctx.ffn(sa_inp, il, "silu", False), "ffn_out", il)
        cur = b.add(cur, sa_out)
        inpL = ctx.cb(b.add(cur, inpL), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
