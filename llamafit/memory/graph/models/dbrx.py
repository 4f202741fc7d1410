"""src/models/dbrx.cpp: llama_model_dbrx::graph (DBRX)."""

from __future__ import annotations

from ....builds import since
from ..build import GraphContext
from ..ggml import T
from .phi2 import layer_norm_head


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer with LayerNorms without bias (LLM_NORM) before the attention and
    before the experts (attn_output_norm), the fused attn_qkv clamped (clamp_kqv), RoPE
    without factors, build_attn without wo's bias, routed experts in every layer (softmax
    gating, weights normalised); the output LayerNorm."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.layer_norm(inpL, ctx.lw(il, "attn_norm.weight"), None, il)
        cur = ctx.cb(cur, "attn_norm", il)
        q, k, v = _qkv_clamped(ctx, cur, il)
        q, k = b.rope(q, inp_pos, None), b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        cur = ctx.layer_norm(ffn_inp, ctx.lw(il, "attn_output_norm.weight"), None, il)
        cur = ctx.cb(cur, "attn_out_norm", il)
        cur = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))


def _qkv_clamped(ctx: GraphContext, cur: T, il: int) -> tuple[T, T, T]:
    """build_qkv's fused path with clamp_kqv (src/llama-graph.cpp; dbrx.cpp's own code before
    it, the same nodes): the attn_qkv product, ggml_clamp of it (in place before rule
    clamp_copy), Q, K and V as 3-D views of it."""
    b, f = ctx.b, ctx.f
    qkv = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_qkv.weight"), "attn_qkv"), cur), "wqkv", il)
    if f.clamp_kqv > 0.0:
        qkv = ctx.cb(b.clamp(qkv, not since("clamp_copy", ctx.c.build)), "wqkv_clamped", il)
    return ctx.qkv_views(qkv, il)
