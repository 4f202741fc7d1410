"""src/models/phi3.cpp: llama_model_phi3::graph (Phi-3, Phi-3.5 and Phi-4 dense)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """The fused or separate Q/K/V (build_qkv), RoPE, Q scaled before build_attn, the residual,
    an FFN whose up projection holds gate and up (LLM_FFN_SWIGLU, LLM_FFN_SEQ: ggml_swiglu of
    one tensor), routed experts where a layer has ffn_gate_inp, the output's bias where the file
    has one. Phi SWA is disabled by load_arch_hparams (one cache); LongRoPE factors
    (rope_factors_long / _short, picked by the context size) are not modelled."""
    f, b = ctx.f, ctx.b
    ctx.no_long_rope()
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        if ctx.lw(il, "attn_norm.bias") is not None or ctx.lw(il, "ffn_norm.bias") is not None:
            raise GraphBuildError(f"{f.path}: Phi-3 norm biases are not modelled")
        residual = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        q = ctx.cb(b.scale(q), "Qcur", il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, residual = ctx.out_rows(il, out_ids, cur, residual)
        residual = b.add(cur, residual)
        cur = ctx.cb(ctx.norm(residual, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is not None:
            cur = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        else:
            cur = ctx.cb(ctx.ffn_swiglu(cur, il), "ffn_out", il)
        inpL = ctx.cb(b.add(residual, cur), "l_out", il)
    logits = ctx.lm_head(inpL)
    out_b = ctx.w("output.bias", -2)
    if out_b is not None:
        ctx.cb(logits, "result_output_no_bias", -1)
        logits = b.add(logits, out_b)
    ctx.finish(logits)
