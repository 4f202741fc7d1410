"""src/models/cohere2moe.cpp: llama_model_cohere2moe::graph (North Mini Code, Command A+)."""

from __future__ import annotations

from ..build import GATING, GraphContext
from ..ggml import T, set_output
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """src/models/cohere2moe.cpp llama_model_cohere2moe::graph: cohere2's parallel block (one
    norm feeds the attention and the FFN, both added to the layer input) over the iSWA caches,
    LayerNorms where the file has no RMS epsilon (f_norm_rms_eps 0) and RMS norms where it has
    one, RoPE (get_rope_factors' factors) in the sliding-window layers and the dense lead ones,
    a SwiGLU FFN in the dense lead layers and sigmoid-gated experts (the gating func where the
    file sets one) beside the shared ones, averaged (times 0.5), elsewhere; the output norm is
    h_nextn, an output, the output rows picked after it (cparams.embeddings_nextn_masked is
    false), the logits scaled by f_logit_scale. MTP layers are not in this graph."""
    f, b = ctx.f, ctx.b
    moe = f.moe
    if moe is None:
        raise GraphBuildError(f"{f.path}: cohere2moe without experts")
    rms = f.norm_rms_eps != 0.0
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_iswa()  # build_attn_inp_kv_iswa
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        is_swa = f.swa.is_swa[il]
        cur = ctx.cb(_norm(ctx, inpL, ctx.lw(il, "attn_norm.weight"), il, rms), "attn_norm", il)
        ffn_inp = cur
        q, k, v = ctx.qkv(cur, il)
        if is_swa or il < moe.n_layer_dense_lead:
            factors = ctx.rope_factors(il)
            q = b.rope(q, inp_pos, factors)
            k = b.rope(k, inp_pos, factors)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        inp = swa if is_swa else base
        wo_b = ctx.lw(il, "attn_output.bias")
        attn_out = ctx.attn(inp, ctx.wo(il), wo_b, q, k, v, il, True)
        cur = _ffn(ctx, ffn_inp, il)
        cur = b.add(cur, inpL)
        cur = b.add(cur, attn_out)
        inpL = ctx.cb(cur, "l_out", il)
    cur = _norm(ctx, inpL, ctx.w("output_norm.weight", -2), -1, rms)
    set_output(ctx.cb(cur, "h_nextn", -1))
    cur = ctx.cb(b.get_rows(cur, out_ids), "result_norm", -1)
    set_output(cur)
    logits = ctx.mm(ctx.output_weight(), cur)
    if f.logit_scale:
        logits = b.scale(logits)
    ctx.finish(logits)


def _norm(ctx: GraphContext, cur: T, w: T | None, il: int, rms: bool) -> T:
    """build_norm with cohere2moe_norm_type: LLM_NORM_RMS, or LLM_NORM (no bias)."""
    return ctx.norm(cur, w, il) if rms else ctx.layer_norm(cur, w, None, il)


def _ffn(ctx: GraphContext, cur: T, il: int) -> T:
    """The dense lead layers' SwiGLU FFN, or build_moe_ffn (sigmoid unless the file sets the
    gating; weights normalised as expert_weights_norm says, scaled by expert_weights_scale)
    plus, where the layer has them, the shared experts, the two averaged."""
    f, b = ctx.f, ctx.b
    if ctx.lw(il, "ffn_gate_inp.weight") is None:
        return ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
    gating = GATING.get(f.expert_gating_func, "sigmoid")  # load_arch_hparams: NONE is SIGMOID
    routed = ctx.moe_ffn(cur, il, gating=gating, norm_w=f.expert_weights_norm, gate_up=True)
    routed = ctx.cb(routed, "ffn_moe_out", il)
    if ctx.lw(il, "ffn_up_shexp.weight") is None:
        return routed
    shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
    return ctx.cb(b.scale(b.add(routed, shared)), "ffn_out", il)
