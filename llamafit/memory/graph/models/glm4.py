"""src/models/glm4.cpp: llama_model_glm4::graph (GLM-4-0414, GLM-Z1)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """graph(ctx)."""
    graph(ctx)


def graph(ctx: GraphContext, post_norms: bool = True) -> None:
    """A Llama-like layer with post norms: RoPE without factors (M-RoPE's ggml_rope_multi where
    the file has rope sections, GLM-4.1V and later: not modelled), build_attn without wo's
    bias, the attention output normed ("post_attn_norm") before the residual, the FFN norm,
    ggml_swiglu over a double-wide up projection (LLM_FFN_SWIGLU), the FFN output normed
    ("post_mlp_norm"); post_norms False: without the two post norms (chatglm.cpp)."""
    f, b = ctx.f, ctx.b
    if f.use_mrope:
        raise GraphBuildError(f"{f.path}: glm4's M-RoPE is not modelled")
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        if post_norms:
            post = ctx.lw(il, "post_attention_norm.weight")
            cur = ctx.cb(ctx.norm(cur, post, il), "post_attn_norm", il)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn_swiglu(cur, il), "ffn_out", il)
        if post_norms:
            cur = ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), il)
            cur = ctx.cb(cur, "post_mlp_norm", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
