"""src/models/falcon-h1.cpp: llama_model_falcon_h1::graph (Falcon-H1: attention and Mamba-2 in
parallel in every layer)."""

from __future__ import annotations

from ..build import GraphContext
from .mamba_base import mamba2_layer


def build(ctx: GraphContext) -> None:
    """inp_pos, then build_inp_mem_hybrid (the recurrent inputs, then the KV cache's), out_ids;
    per layer one RMS norm feeds an attention block (RoPE, build_attn with wo's bias where the
    file has one, "Qcur-post-rope") and, normed again, a Mamba-2 block (mamba-base.cpp); their
    sum plus the layer input is the FFN input (output rows picked after it in the last layer); a
    SwiGLU FFN with biases where the file has them."""
    b = ctx.b
    ctx.no_long_rope()
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    rs = ctx.inp_rs()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il, suffix="-post-rope")
        attn_out = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        ctx.cb(attn_out, "attn_out", il)
        cur = ctx.norm(inpL, ctx.lw(il, "attn_norm.weight"), il)
        cur = ctx.cb(cur, "ssm_in", il)
        ssm_out = ctx.cb(mamba2_layer(ctx, rs, cur, il), "ssm_out", il)
        cur = b.add(attn_out, ssm_out)
        inpSA = b.add(cur, inpSA)
        ctx.cb(cur, "layer_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(inpSA, "ffn_inp", il)
        cur = ctx.cb(ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, inpSA), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
