"""src/models/qwen2.cpp: llama_model_qwen2::graph."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """Attention biases (Q, K, V, and the output's where the file has one), RoPE without
    factors, a dense FFN without biases (routed experts where a layer has ffn_gate_inp), the
    output's bias where the file has one."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(b.rope(q, inp_pos, None), "Qcur", il)
        k = ctx.cb(b.rope(k, inp_pos, None), "Kcur", il)
        ctx.cb(v, "Vcur", il)
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        cur = ctx.attn(inp, wo, ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.ffn_or_moe(cur, il, False)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    logits = ctx.lm_head(inpL)
    out_b = ctx.w("output.bias", -2)
    if out_b is not None:
        logits = b.add(logits, out_b)
    ctx.finish(logits)
