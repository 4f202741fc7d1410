"""src/models/llama.cpp: llama_model_llama::graph (dense or MoE FFN per layer)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """RoPE with rope_freqs (llama_model::get_rope_factors), attention biases where the file has
    them, FFN biases, routed experts where a layer has ffn_gate_inp."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        # llama_model::get_rope_factors: rope_freqs, one tensor per buffer type
        factors = ctx.w("rope_freqs.weight", il)
        q = ctx.cb(b.rope(q, inp_pos, factors), "Qcur", il)
        k = ctx.cb(b.rope(k, inp_pos, factors), "Kcur", il)
        ctx.cb(v, "Vcur", il)
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        cur = ctx.attn(inp, wo, ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.ffn_or_moe(cur, il, True)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
