"""src/models/lfm2.cpp: llama_model_lfm2::graph<iswa> (LFM2, LFM2.5: short convolution and
attention layers in one hybrid memory), which lfm2moe.cpp builds too (LFM2 8B-A1B, 24B-A2B)."""

from __future__ import annotations

from ....builds import since
from ..build import GATING, AttnInput, GraphContext
from ..ggml import T, set_output
from ..kv_cache import RecurrentState, has_swa
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """build_inp_mem_hybrid (the recurrent inputs, then the KV cache's), inp_pos, out_ids; per
    layer the operator norm, a short-convolution block (is_recr: n_head_kv 0) or an attention
    block (per-head Q/K norms, RoPE), the residual, the FFN norm and a SwiGLU FFN (lfm2: every
    layer, n_layer_dense_lead = n_layer) or, from n_layer_dense_lead on (lfm2moe), the experts
    as {arch}.expert_gating_func gates them, with exp_probs_b, weights normalised, the residual. The output norm is
    token_embd_norm. Not modelled: the iSWA variant (a sliding window), LFM2-ColBert's
    dense_2 projection."""
    f, b = ctx.f, ctx.b
    gating = GATING.get(f.expert_gating_func, "softmax")
    if f.moe is not None and f.expert_gating_func not in GATING:  # build_moe_ffn aborts
        raise GraphBuildError(f"{f.path}: lfm2moe without expert_gating_func")
    if has_swa(f):
        raise GraphBuildError(f"{f.path}: lfm2's sliding-window variant is not modelled")
    if "dense_2.weight" in ctx.tensors:
        raise GraphBuildError(f"{f.path}: LFM2-ColBert's dense_2 output is not modelled")
    cur = ctx.cb(ctx.inp_embd(1.0), "model.embed_tokens", -1)
    b.expand(cur)
    rs = ctx.inp_rs()
    inp = ctx.inp_attn_kv()
    inp_pos = ctx.inp_pos()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        prev = cur
        cur = ctx.norm(cur, ctx.lw(il, "attn_norm.weight"), il)
        cur = ctx.cb(cur, "model.layers.{}.operator_norm", il)
        if f.is_recurrent[il]:
            cur = _shortconv(ctx, rs, cur, il)
        else:
            cur = _attention(ctx, inp, cur, inp_pos, il)
        cur, prev = ctx.out_rows(il, out_ids, cur, prev)
        cur = b.add(prev, cur)
        normed = ctx.norm(cur, ctx.lw(il, "ffn_norm.weight"), il)
        ctx.cb(normed, "model.layers.{}.ffn_norm", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is None:  # dense: il < n_layer_dense_lead
            ffn_out = ctx.ffn(normed, il, "silu", False)
        else:  # lfm2moe: build_moe_feed_forward
            probs_b = ctx.lw(il, "exp_probs_b.bias")
            ffn_out = ctx.moe_ffn(normed, il, gating=gating, exp_probs_b=probs_b)
        ctx.cb(normed, "model.layers.{}.ffn_out", il)  # lfm2.cpp names the norm's output
        cur = ctx.cb(b.add(cur, ffn_out), "l_out", il)
    cur = ctx.cb(ctx.norm(cur, ctx.w("token_embd_norm.weight", -2), -1), "result_norm", -1)
    set_output(cur)
    output = ctx.output_weight()
    ctx.finish(ctx.mm(output, cur))


def _attention(ctx: GraphContext, inp: AttnInput, cur: T, inp_pos: T, il: int) -> T:
    """build_attn_block: build_qkv, Q/K RMS norms per head, RoPE, build_attn without wo's
    bias."""
    b = ctx.b
    q, k, v = ctx.qkv(cur, il)
    q = ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il)
    ctx.cb(q, "model.layers.{}.self_attn.q_layernorm", il)
    k = ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il)
    ctx.cb(k, "model.layers.{}.self_attn.k_layernorm", il)
    q = b.rope(q, inp_pos, None)
    k = b.rope(k, inp_pos, None)
    cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
    return ctx.cb(cur, "model.layers.{}.self_attn.out_proj", il)


def _shortconv(ctx: GraphContext, rs: RecurrentState, cur: T, il: int) -> T:
    """build_shortconv_block for a reserve (kv_head 0, causal, n_rs_seq 0: one conv state row
    written): in_proj split into B, C and x, B*x transposed after the conv state, the state's
    new rows copied back (into a 2D view of n_seqs rows; before rule conv_state_slots a 1D
    one), ssm_conv, C times it, out_proj."""
    f, b, c = ctx.f, ctx.b, ctx.c
    rec = f.recurrent
    assert rec is not None
    n_seqs = c.n_seqs
    n_seq_tokens = c.n_tokens // n_seqs
    n_embd = f.n_embd
    d_conv = rec.n_embd_r // n_embd
    cur = b.reshape(cur, cur.ne[0], n_seq_tokens, n_seqs)
    in_proj = ctx.need(ctx.lw(il, "shortconv.in_proj.weight"), "shortconv.in_proj")
    bcx = ctx.cb(ctx.mm(in_proj, cur), "model.layers.{}.conv.in_proj", il)
    chunk = bcx.ne[0] // 3
    es = 4  # F32
    nbs = (bcx.nb[1], bcx.nb[2])
    shape = (chunk, bcx.ne[1], bcx.ne[2])
    bb = b.view(bcx, shape, nbs, 0)
    cc = b.view(bcx, shape, nbs, chunk * es)
    x = b.view(bcx, shape, nbs, 2 * chunk * es)
    bx = b.transpose(b.mul(bb, x))
    conv_state = rs.r[il]
    conv_rs = ctx.build_rs(rs, conv_state, rec.n_embd_r)
    conv = b.reshape(conv_rs, d_conv, n_embd, n_seqs)
    bx = b.concat(conv, bx, 0)
    snap = b.view(bx, (d_conv, bx.ne[1], bx.ne[2]), (bx.nb[1], bx.nb[2]), (bx.ne[0] - d_conv) * es)
    if since("conv_state_slots", c.build):
        dest = b.view(conv_state, (d_conv * n_embd, n_seqs), (conv_state.nb[1],), 0)
    else:  # a ggml_view_1d of the new state's elements
        dest = b.view(conv_state, (d_conv * n_embd * n_seqs,), (), 0)
    b.expand(b.cpy(snap, dest))
    kernel = ctx.need(ctx.lw(il, "shortconv.conv.weight"), "shortconv.conv")
    conv_out = ctx.cb(b.ssm_conv(bx, kernel), "model.layers.{}.conv.conv", il)
    y = b.mul(cc, conv_out)
    out_proj = ctx.need(ctx.lw(il, "shortconv.out_proj.weight"), "shortconv.out_proj")
    y = ctx.cb(ctx.mm(out_proj, y), "model.layers.{}.conv.out_proj", il)
    return b.reshape(y, y.ne[0], n_seq_tokens * n_seqs)
