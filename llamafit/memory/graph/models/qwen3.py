"""src/models/qwen3.cpp: llama_model_qwen3::graph (qwen3moe.cpp builds alike, with experts)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """Q/K RMS norms before RoPE, no biases; routed experts where a layer has ffn_gate_inp
    (qwen3moe)."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.qk_norm_rope(q, k, inp_pos, il)
        ctx.cb(v, "Vcur", il)
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        cur = ctx.attn(inp, wo, ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.ffn_or_moe(cur, il, False)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
