"""src/models/hunyuan-vl.cpp: llama_model_hunyuan_vl::graph, which hunyuan-dense.cpp reuses
(llama_model_hunyuan_dense::graph: Hunyuan 0.5B to 7B, Hy-MT; HunyuanOCR)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """A Llama layer whose Q and K are RMS-normed per head after RoPE (with the rope factors;
    K first, "Kcur_norm" / "Qcur_norm"), the output's bias where the file has one, a SwiGLU FFN
    without biases. HunyuanOCR's XD-RoPE (hunyuan_vl with rope sections: ggml_rope_multi, a
    ROPE node as ggml_rope_ext's) reads four positions a token (llama_model_rope_type gives
    LLAMA_ROPE_TYPE_MROPE, llama_hparams::n_pos_per_embd 4); hunyuan-dense's rope type is
    NEOX whatever the sections, a file of it with sections is declined."""
    f, b = ctx.f, ctx.b
    if f.use_mrope and f.architecture != "hunyuan_vl":
        raise GraphBuildError(f"{f.path}: M-RoPE sections outside hunyuan_vl are not modelled")
    ctx.no_long_rope()
    inpL, inp_pos, inp, out_ids = ctx.inputs(4 if f.use_mrope else 1)
    for il in ctx.layers():
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
