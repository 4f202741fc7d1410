"""src/models/glm4-moe.cpp: llama_model_glm4_moe::graph."""

from __future__ import annotations

from ..build import GATING, GraphContext
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """src/models/glm4-moe.cpp llama_model_glm4_moe::graph: the trunk's layers (the NextN
    ones are graph_mtp's), optional Q/K norms, a post-attention norm, dense lead layers, then
    routed (sigmoid gating, exp_probs_b) plus shared experts; the output norm is h_nextn, an
    output too (cparams.embeddings_nextn is false: rows picked in the last layer)."""
    f, b = ctx.f, ctx.b
    if f.use_mrope:
        raise GraphBuildError(f"{f.path}: M-RoPE (rope_sections) is not modelled")
    assert f.moe is not None
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    gating = GATING.get(f.expert_gating_func, "sigmoid")
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q_norm, k_norm = ctx.lw(il, "attn_q_norm.weight"), ctx.lw(il, "attn_k_norm.weight")
        if q_norm is not None:
            q = ctx.cb(ctx.norm(q, q_norm, il), "Qcur_normed", il)
        if k_norm is not None:
            k = ctx.cb(ctx.norm(k, k_norm, il), "Kcur_normed", il)
        q = ctx.cb(b.rope(q, inp_pos, None), "Qcur", il)
        k = ctx.cb(b.rope(k, inp_pos, None), "Kcur", il)
        ctx.cb(v, "Vcur", il)
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        cur = ctx.attn(inp, wo, None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        cur = ctx.norm(ffn_inp, ctx.lw(il, "post_attention_norm.weight"), il)
        cur = ctx.cb(cur, "post_attn_norm", il)
        if il < f.moe.n_layer_dense_lead:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        else:
            routed = ctx.moe_ffn(
                cur,
                il,
                gating=gating,
                norm_w=f.expert_weights_norm,
                exp_probs_b=ctx.lw(il, "exp_probs_b.bias"),
                scale_w=True,
            )
            routed = ctx.cb(routed, "ffn_moe_out", il)
            shared = ctx.ffn(cur, il, "silu", False, "_shexp")
            shared = ctx.cb(shared, "ffn_shexp_out", il)
            cur = ctx.cb(b.add(routed, shared), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))  # h_nextn is result_norm: set_output(t_h_nextn) again
