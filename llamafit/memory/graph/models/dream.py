"""src/models/dream.cpp: llama_model_dream::graph (Dream 7B, a diffusion generator: qwen2.cpp's
graph without memory)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput


def build(ctx: GraphContext) -> None:
    """graph(ctx)."""
    graph(ctx)


def graph(ctx: GraphContext, wo_bias: bool = True) -> None:
    """qwen2.cpp's layer over the ubatch itself (build_attn_inp_no_cache: create_memory gives
    the diffusion models no cache): Q, K and V with their biases, RoPE without factors, build_attn
    with wo (and its bias where the file has one), the FFN norm and a SwiGLU FFN without biases;
    the logits without the output's bias (dream.cpp loads output.bias but does not add it);
    wo_bias False: build_attn without wo's bias even where the file has one (llada.cpp)."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        wo_b = ctx.lw(il, "attn_output.bias") if wo_bias else None
        cur = ctx.attn_no_cache(inp, ctx.wo(il), wo_b, q, k, v, il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
