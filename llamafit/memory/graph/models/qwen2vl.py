"""src/models/qwen2vl.cpp: llama_model_qwen2vl::graph (Qwen2-VL and Qwen2.5-VL's text model)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """qwen2.cpp's layer (Q/K/V biases) with M-RoPE: ggml_rope_multi over four positions a
    token (llama_hparams::n_pos_per_embd), no output bias."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs(4)
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
