"""src/models/hunyuan-vl.cpp: llama_model_hunyuan_vl::graph, which hunyuan-dense.cpp reuses
(llama_model_hunyuan_dense::graph: Hunyuan 0.5B to 7B, Hy-MT)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """A Llama layer whose Q and K are RMS-normed per head after RoPE (with the rope factors;
    K first, "Kcur_norm" / "Qcur_norm"), the output's bias where the file has one, a SwiGLU FFN
    without biases. M-RoPE (ggml_rope_multi, HunyuanOCR's rope sections) is not modelled."""
    f, b = ctx.f, ctx.b
    if f.use_mrope:
        raise GraphBuildError(f"{f.path}: hunyuan's M-RoPE is not modelled")
    ctx.no_long_rope()
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in range(ctx.n_layer):
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        # llama_model::get_rope_factors: rope_freqs, one tensor per buffer type
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il, ctx.w("rope_freqs.weight", il))
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_norm", il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_norm", il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur = ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
