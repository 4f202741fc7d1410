"""src/models/nemotron-h.cpp: llama_model_nemotron_h::graph (nemotron_h, and nemotron_h_moe's
trunk)."""

from __future__ import annotations

from ....builds import since
from ..build import GraphContext
from ..ggml import T, set_output
from ..params import GraphBuildError
from .mamba_base import mamba2_layer


def build(ctx: GraphContext) -> None:
    """src/models/nemotron-h.cpp llama_model_nemotron_h::graph, the class nemotron_h_moe's
    trunk builds too (nemotron-h-moe.cpp: `using graph = llama_model_nemotron_h::graph`; its
    graph_mtp is the MTP draft's). Per layer an RMS norm, then a Mamba-2 layer (is_recr), an
    attention layer (n_ff 0: no RoPE) or an FFN layer (build_ffn_layer: the router's logits,
    sigmoid-gated experts with exp_probs_b, RELU_SQR without gate, weights normalised and
    scaled by expert_weights_scale, then the shared experts), then the residual
    (nemotron_h_block_out). build_inp_mem_hybrid: the recurrent inputs, then the
    KV cache's; no positions. The output norm is h_nextn, an output, and the output rows are
    picked after it (cparams.embeddings_nextn_masked is false; before rule
    nemotron_h_rows_last in the last layer, before its residual); no latent MoE projections
    (ffn_latent_down / _up), nor MLP biases: GraphBuildError. nemotron_h's dense MLP layers
    (no router): up, RELU_SQR, down with their scales."""
    f, b = ctx.f, ctx.b
    inpL = ctx.inp_embd(1.0)
    rs = ctx.inp_rs()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    rows_last = since("nemotron_h_rows_last", ctx.c.build)
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        if f.is_recurrent[il]:
            cur = mamba2_layer(ctx, rs, cur, il)
        elif f.n_ff[il] == 0:
            q, k, v = ctx.qkv(cur, il)
            wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
            wo_b, wo_s = ctx.lw(il, "attn_output.bias"), ctx.lw(il, "attn_output.scale")
            cur = ctx.attn(inp, wo, wo_b, q, k, v, il, False, wo_s=wo_s)
            cur = ctx.cb(cur, "attn_out", il)
        else:
            cur = _ffn(ctx, cur, il)
        if not rows_last:  # the last layer's output rows, before its residual
            cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        inpL = ctx.cb(b.add(cur, inpSA), "nemotron_h_block_out", il)
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    if rows_last:
        set_output(ctx.cb(cur, "h_nextn", -1))
        cur = b.get_rows(cur, out_ids)
    cur = ctx.cb(cur, "result_norm", -1)
    set_output(cur)
    output = ctx.need(ctx.w("output.weight", -2), "output.weight")
    ctx.finish(ctx.mm_s(output, cur, ctx.w("output.scale", -2)))


def _ffn(ctx: GraphContext, cur: T, il: int) -> T:
    """llama_model_nemotron_h::graph::build_ffn_layer (nemotron-h.cpp)."""
    f, b = ctx.f, ctx.b
    router = ctx.lw(il, "ffn_gate_inp.weight")
    if router is None:  # a dense MLP layer (nemotron_h): up, RELU_SQR, down, with their scales
        if ctx.lw(il, "ffn_up.bias") is not None or ctx.lw(il, "ffn_down.bias") is not None:
            raise GraphBuildError(f"{f.path}: Nemotron-H MLP biases are not modelled")
        cur = ctx.cb(ctx.ffn(cur, il, "relu_sqr", False, scales=True), "ffn_out", il)
        return ctx.cb(cur, "l_out", il)  # build_cvec: no control vector
    if ctx.lw(il, "ffn_latent_down.weight") is not None:
        raise GraphBuildError(f"{f.path}: latent MoE projections are not modelled")
    logits = ctx.cb(ctx.mm(router, cur), "ffn_moe_logits", il)
    moe = ctx.moe_ffn(
        cur,
        il,
        gating="sigmoid",
        norm_w=f.expert_weights_norm,
        act="relu_sqr",
        exp_probs_b=ctx.lw(il, "exp_probs_b.bias"),
        probs_in=logits,
        scale_w=True,
        scales=True,
    )
    moe = ctx.cb(moe, "ffn_moe_out", il)
    shared = ctx.ffn(cur, il, "relu_sqr", False, "_shexp", scales=True)
    shared = ctx.cb(shared, "ffn_shexp", il)
    cur = ctx.cb(b.add(moe, shared), "ffn_out", il)
    return ctx.cb(cur, "l_out", il)  # build_cvec: no control vector
