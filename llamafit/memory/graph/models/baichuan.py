"""src/models/baichuan.cpp: llama_model_baichuan::graph (Baichuan, Baichuan 2)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without rope factors or attention biases, a SwiGLU FFN; RoPE (and
    inp_pos) only where load_arch_hparams names the model LLM_TYPE_7B (32 layers): the 13B (40
    layers) and the others use ALiBi (f_max_alibi_bias 8 for the 13B: the softmax's max_bias,
    the same graph)."""
    graph(ctx, rope=ctx.n_layer == 32)


def graph(ctx: GraphContext, *, rope: bool) -> None:
    """The layers with RoPE or without positions (refact.cpp's graph is the latter)."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos() if rope else None
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        if inp_pos is not None:
            q, k = b.rope(q, inp_pos, None), b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
