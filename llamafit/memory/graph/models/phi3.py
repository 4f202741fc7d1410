"""src/models/phi3.cpp: llama_model_phi3::graph (Phi-3, Phi-3.5 and Phi-4 dense; PhiMoE's graph
too: src/models/models.h llama_model_phimoe::graph)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T, set_output


def build(ctx: GraphContext) -> None:
    """RMS norms with their biases where the file has them (PhiMoE), the fused or separate Q/K/V
    with biases (build_qkv), RoPE with llama_model::get_rope_factors' factors (LongRoPE's long or
    short ones by the context per sequence), Q scaled before build_attn, the output projection's
    bias, the residual, an FFN whose up projection holds gate and up (LLM_FFN_SWIGLU,
    LLM_FFN_SEQ: ggml_swiglu of one tensor) or routed experts where a layer has ffn_gate_inp, the
    output's bias where the file has one. Phi SWA is disabled by load_arch_hparams (one cache)."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        residual = inpL
        factors = ctx.rope_factors(il)
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(rms_norm(ctx, inpL, norm_w, norm_b, il), "attn_norm", il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il, factors)
        q = ctx.cb(b.scale(q), "Qcur", il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, residual = ctx.out_rows(il, out_ids, cur, residual)
        residual = b.add(cur, residual)
        norm_w, norm_b = ctx.lw(il, "ffn_norm.weight"), ctx.lw(il, "ffn_norm.bias")
        cur = ctx.cb(rms_norm(ctx, residual, norm_w, norm_b, il), "ffn_norm", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is not None:
            cur = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        else:
            cur = ctx.cb(ctx.ffn_swiglu(cur, il), "ffn_out", il)
        inpL = ctx.cb(b.add(residual, cur), "l_out", il)
    out_w, out_b = ctx.w("output_norm.weight", -2), ctx.w("output_norm.bias", -2)
    cur = ctx.cb(rms_norm(ctx, inpL, out_w, out_b, -1), "result_norm", -1)
    set_output(cur)
    logits = ctx.mm(ctx.output_weight(), cur)
    bias = ctx.w("output.bias", -2)
    if bias is not None:
        ctx.cb(logits, "result_output_no_bias", -1)
        logits = b.add(logits, bias)
    ctx.finish(logits)


def rms_norm(ctx: GraphContext, cur: T, mw: T | None, mb: T | None, il: int) -> T:
    """build_norm, LLM_NORM_RMS with the bias where there is one ("norm", "norm_w")."""
    if mb is None:
        return ctx.norm(cur, mw, il)
    b = ctx.b
    cur = ctx.cb(b.rms_norm(cur), "norm", il)
    if mw is not None:
        cur = ctx.cb(b.mul(cur, mw), "norm_w", il)
    return b.add(cur, mb)
