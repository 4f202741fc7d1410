"""src/models/afmoe.cpp: llama_model_afmoe::graph (Arcee's AFMoE: Trinity)."""

from __future__ import annotations

from ..build import GATING, GraphContext
from ..kv_cache import has_swa
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """The token rows scaled by sqrt(n_embd) ("inp_embd_scaled"), the iSWA caches
    (build_attn_inp_kv_iswa), per-head Q/K RMS norms, RoPE except in every fourth layer
    (n_no_rope_layer_step), the attention output gated by the sigmoid of a projection of the
    layer input (attn_gate) before wo, post norms after the attention and the FFN, dense lead
    layers, then experts ({arch}.expert_gating_func, default sigmoid; exp_probs_b) beside the
    shared experts. A file without a sliding window is refused (llama.cpp builds the iSWA input
    over a plain cache)."""
    f, b = ctx.f, ctx.b
    assert f.moe is not None
    if not has_swa(f):
        raise GraphBuildError(f"{f.path}: afmoe without a sliding window is not modelled")
    gating = GATING.get(f.expert_gating_func, "sigmoid")
    inpL = ctx.cb(b.scale(ctx.inp_embd(1.0)), "inp_embd_scaled", -1)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_iswa()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        attn_inp = cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        gate_w = ctx.need(ctx.lw(il, "attn_gate.weight"), "attn_gate")
        gate = ctx.cb(ctx.mm(gate_w, attn_inp), "attn_gate_proj", il)
        q = ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il)
        k = ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il)
        ctx.cb(q, "Qcur_normed", il)
        ctx.cb(k, "Kcur_normed", il)
        if (il + 1) % 4 != 0:  # llama_hparams::n_no_rope_layer_step (4)
            q = ctx.cb(b.rope(q, inp_pos, None), "Qcur_rope", il)
            k = ctx.cb(b.rope(k, inp_pos, None), "Kcur_rope", il)
        inp = swa if f.swa.is_swa[il] else base
        cur = ctx.cb(ctx.attn(inp, None, None, q, k, v, il, True), "attn_out", il)
        gate = ctx.cb(b.unary(gate, "SIGMOID"), "attn_gate_sig", il)
        cur = ctx.cb(b.mul(cur, gate), "attn_gated", il)
        cur = ctx.cb(ctx.mm(ctx.wo(il), cur), "attn_o_proj", il)
        post = ctx.lw(il, "post_attention_norm.weight")
        cur = ctx.cb(ctx.norm(cur, post, il), "attn_post_norm", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        if il >= f.moe.n_layer_dense_lead:
            routed = ctx.moe_ffn(
                cur,
                il,
                gating=gating,
                norm_w=f.expert_weights_norm,
                exp_probs_b=ctx.need(ctx.lw(il, "exp_probs_b.bias"), "exp_probs_b"),
                scale_w=ctx.hp.expert_weights_scale != 0.0,
            )
            routed = ctx.cb(routed, "ffn_moe_out", il)
            if f.moe.n_expert_shared > 0:
                shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
                cur = ctx.cb(b.add(routed, shared), "ffn_out", il)
            else:
                cur = routed
        else:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        post = ctx.lw(il, "post_ffw_norm.weight")
        cur = ctx.cb(ctx.norm(cur, post, il), "ffn_post_norm", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
