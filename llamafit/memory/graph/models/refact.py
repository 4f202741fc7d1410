"""src/models/refact.cpp: llama_model_refact::graph (Refact 1.6B)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer without positions (ALiBi: load_arch_hparams sets f_max_alibi_bias 8,
    the softmax's max_bias; no inp_pos, no RoPE) and without biases (build_attn and build_ffn
    get none: the optional wo_b and FFN biases load_arch_tensors makes are not read), a SwiGLU
    FFN."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
