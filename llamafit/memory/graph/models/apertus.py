"""src/models/apertus.cpp: llama_model_apertus::graph (Apertus)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """A Llama layer with per-head Q/K RMS norms before RoPE (get_rope_factors: the llama3
    scaling's rope_freqs, or LongRoPE's factors), "Qcur_pos" names, the attention output's bias
    where the file has one, and a gate-less FFN with the xIELU activation (ggml_xielu: up, xIELU,
    down); the residual named "ffn_out", then "l_out"."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        factors = ctx.rope_factors(il)
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il, factors, "_pos")
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        up = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "ffn_up.weight"), "ffn_up"), cur), "ffn_up", il)
        cur = ctx.cb(b.unary(up, "XIELU"), "ffn_xielu", il)
        down = ctx.need(ctx.lw(il, "ffn_down.weight"), "ffn_down")
        cur = ctx.cb(ctx.mm(down, cur), "ffn_down", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
