"""src/models/deci.cpp: llama_model_deci::graph."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """src/models/deci.cpp llama_model_deci::graph: per-layer heads and FFN widths, layers
    without attention (n_head 0: the FFN norm over the layer's input, no residual add before
    it), "linear attention" (n_head_kv 0: wo alone) or without FFN (n_ff 0)."""
    f, b = ctx.f, ctx.b
    ctx.no_long_rope()
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        n_head, n_head_kv, n_ff = f.n_head[il], f.n_head_kv[il], f.n_ff[il]
        if n_head == 0:
            cur = inpL
        else:
            cur = ctx.norm(inpL, ctx.lw(il, "attn_norm.weight"), il)
            cur = ctx.cb(cur, "attn_norm", il)
        if n_head > 0 and n_head_kv == 0:
            wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
            cur = ctx.cb(ctx.mm(wo, cur), "wo", il)
        elif n_head > 0:
            factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
            q, k, v = ctx.qkv(cur, il)
            q = ctx.cb(b.rope(q, inp_pos, factors), "Qcur", il)
            k = ctx.cb(b.rope(k, inp_pos, factors), "Kcur", il)
            ctx.cb(v, "Vcur", il)
            wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
            cur = ctx.attn(inp, wo, ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        if n_ff == 0:
            continue
        ffn_inp = cur
        if n_head > 0:
            ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        else:  # an attention-free layer: its FFN norm over the layer's input itself
            cur = ctx.cb(ctx.norm(cur, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
