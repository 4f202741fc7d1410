"""src/models/chatglm.cpp: llama_model_chatglm::graph (ChatGLM3, GLM-4-9B in its first, chatglm
format)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """A Llama layer over build_qkv (the fused attn_qkv with its bias), RoPE without factors,
    build_attn without wo's bias, the FFN norm and ggml_swiglu over a double-wide up projection
    (LLM_FFN_SWIGLU without ffn_gate); glm4.cpp's layer without its post norms."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn_swiglu(cur, il), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
