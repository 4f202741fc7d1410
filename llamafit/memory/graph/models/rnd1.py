"""src/models/rnd1.cpp: llama_model_rnd1::graph (RND1, a diffusion model converted from Qwen3
30B-A3B: qwen3moe.cpp's graph without memory)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput


def build(ctx: GraphContext) -> None:
    """qwen3moe.cpp's layer over the ubatch itself (build_attn_inp_no_cache: create_memory gives
    the diffusion models no cache): Q/K RMS norms before RoPE, build_attn with wo (and its bias
    where the file has one), routed experts in every layer (softmax gating, weights
    normalised)."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.qk_norm_rope(q, k, inp_pos, il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn_no_cache(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
