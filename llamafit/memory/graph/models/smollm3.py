"""src/models/smollm3.cpp: llama_model_smollm3::graph."""

from __future__ import annotations

from ..build import GraphContext
from . import llama

# llama_model_smollm3::load_arch_hparams: n_no_rope_layer_step = 4, whatever the file says
NO_ROPE_LAYER_STEP = 4


def build(ctx: GraphContext) -> None:
    """A Llama layer without rope factors whose every fourth layer has no RoPE (NoPE: use_rope
    is (il + 1) % n_no_rope_layer_step != 0), FFN biases where the file has them."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        rope = (il + 1) % NO_ROPE_LAYER_STEP != 0
        cur = ctx.cb(llama.attention(ctx, inp, cur, inp_pos, il, rope=rope), "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
