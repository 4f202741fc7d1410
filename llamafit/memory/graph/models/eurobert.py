"""src/models/eurobert.cpp: llama_model_eurobert::graph (EuroBERT)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput


def build(ctx: GraphContext) -> None:
    """A Llama layer over the ubatch itself (build_attn_inp_no_cache): the input RMS norm (not
    named "attn_norm"), Q/K/V with RoPE, the attention ("kqv_out"), the residual ("ffn_inp"),
    the FFN's RMS norm and a SwiGLU FFN, the residual; the output RMS norm is "result_embd"
    (res->t_embd)."""
    b = ctx.b
    inp_pos = ctx.inp_pos()
    inpL = ctx.cb(ctx.inp_embd(1.0), "inp_embd", -1)
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        cur = ctx.norm(inpL, ctx.lw(il, "attn_norm.weight"), il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.cb(ctx.attn_no_cache(inp, ctx.wo(il), None, q, k, v, il), "kqv_out", il)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        ffn_inp = ctx.cb(b.add(cur, inpL), "ffn_inp", il)
        cur = ctx.cb(ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = b.add(cur, ffn_inp)
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    ctx.embd_out(cur, "result_embd")
