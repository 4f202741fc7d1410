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
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.cb(ctx.norm(inpL, ctx.lw(il, "attn_norm.weight"), il), "attn_norm", il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.qk_norm_rope(q, k, inp_pos, il)
        ctx.cb(v, "Vcur", il)
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        cur = ctx.attn(inp, wo, ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        if il == ctx.n_layer - 1:
            cur = b.get_rows(cur, out_ids)
            inpSA = b.get_rows(inpSA, out_ids)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        cur = ctx.cb(ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is not None:
            cur = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        else:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
