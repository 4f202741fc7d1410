"""src/models/qwen3next.cpp: llama_model_qwen3next::graph, with the gated DeltaNet of
src/models/delta-net-base.cpp; qwen35moe.cpp and qwen35.cpp (dense) build alike.
"""

from __future__ import annotations

from ....builds import since
from ....reader.ggml_types import GGML_TYPE_SIZES
from ..build import AttnInput, GraphContext
from ..ggml import T, row_size, set_output
from ..kv_cache import RecurrentState
from ..params import GraphBuildError
from . import delta_net_base


def graph(ctx: GraphContext, q35: bool, dense: bool = False) -> None:
    """src/models/qwen3next.cpp and qwen35moe.cpp llama_model_<arch>::graph
    (llm_build_delta_net_base, src/models/delta-net-base.cpp): per layer an RMS norm, a gated
    DeltaNet layer (is_recr) or a gated full-attention layer, the residual, the post-attention
    norm, the softmax experts beside the sigmoid-gated shared expert, the residual.
    build_inp_mem_hybrid (the recurrent inputs, then the KV cache's), then inp_pos (4 per
    token for qwen35moe's IMRoPE, llama_hparams::n_pos_per_embd) and out_ids. The output norm
    is h_nextn, an output, and the output rows are picked after it
    (cparams.embeddings_nextn_masked is false). dense: qwen35.cpp, a dense FFN (with its
    weights' scales) in every layer, its residual named "post_ffn"."""
    f, b, c = ctx.f, ctx.b, ctx.c
    inpL = ctx.cb(ctx.inp_embd(1.0), "model.input_embed" if q35 else "model.embed_tokens", -1)
    rs = ctx.inp_rs()
    inp = ctx.inp_attn_kv()
    n_pos = 4 if q35 else 1
    inp_pos = ctx.cb(b.new("i32", c.n_tokens * n_pos, inp=True), "inp_pos", -1)
    out_ids = ctx.inp_out_ids()
    nextn = since("qwen35_h_nextn" if q35 else "qwen3next_h_nextn", c.build)
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        b.expand(cur)
        if f.is_recurrent[il]:
            cur = _gdn_layer(ctx, rs, cur, il, q35)
        else:
            cur = _gated_attn(ctx, inp, cur, inp_pos, il, q35)
        if not nextn:  # before: the output rows picked in the last layer
            cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        cur = ctx.cb(b.add(cur, inpSA), "attn_residual", il)
        ffn_residual = cur
        post = ctx.lw(il, "post_attention_norm.weight")
        cur = ctx.cb(ctx.norm(cur, post, il), "attn_post_norm", il)
        if dense:  # qwen35.cpp build_layer_ffn: no experts (GGML_ASSERT)
            if ctx.lw(il, "ffn_gate_inp.weight") is not None:
                raise GraphBuildError(f"{f.path}: a qwen35 layer with experts")
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False, scales=True), "ffn_out", il)
        else:
            cur = ctx.cb(_ffn(ctx, cur, il, q35), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_residual), "post_ffn" if dense else "post_moe", il)
        inpL = ctx.cb(cur, "l_out", il)  # build_cvec: no control vector
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    if nextn:
        set_output(ctx.cb(cur, "h_nextn", -1))
        cur = b.get_rows(cur, out_ids)
    cur = ctx.cb(cur, "result_norm", -1)
    set_output(cur)
    output = ctx.w("output.weight", -2)
    if output is None:  # tied: token_embd again, in the output layer's buffer
        output = ctx.need(
            ctx.w("token_embd.weight", -2, as_name="token_embd.weight"), "token_embd.weight"
        )
    ctx.finish(ctx.mm_s(output, cur, ctx.w("output.scale", -2)))


def _gated_attn(ctx: GraphContext, inp: AttnInput, cur: T, inp_pos: T, il: int, q35: bool) -> T:
    """build_layer_attn of qwen3next.cpp / qwen35moe.cpp: one projection for the query and
    its gate (build_qkv without reshape), Q and K RMS-normed, (partial) RoPE (ggml_rope_ext;
    qwen35moe: ggml_rope_multi), attention without an output projection, the sigmoid gate,
    then wo."""
    f, b, c = ctx.f, ctx.b, ctx.c
    n_tokens = c.n_tokens
    head, n_head, n_head_kv = f.n_embd_head_v, f.n_head[il], f.n_head_kv[il]
    if ctx.lw(il, "attn_qkv.weight") is not None:
        raise GraphBuildError(f"{f.path}: fused attn_qkv is not modelled")
    if ctx.lw(il, "attn_q.bias") is not None:
        raise GraphBuildError(f"{f.path}: attention biases are not modelled here")
    q_full = ctx.mm_s(
        ctx.need(ctx.lw(il, "attn_q.weight"), "attn_q"), cur, ctx.lw(il, "attn_q.scale")
    )
    k = ctx.mm_s(ctx.need(ctx.lw(il, "attn_k.weight"), "attn_k"), cur, ctx.lw(il, "attn_k.scale"))
    v = ctx.mm_s(ctx.need(ctx.lw(il, "attn_v.weight"), "attn_v"), cur, ctx.lw(il, "attn_v.scale"))
    ctx.cb(q_full, "Qcur_full", il)
    ctx.cb(k, "Kcur", il)
    ctx.cb(v, "Vcur", il)
    q_norm, k_norm = ctx.lw(il, "attn_q_norm.weight"), ctx.lw(il, "attn_k_norm.weight")
    if q35:
        e = GGML_TYPE_SIZES[q_full.type][1]
        nbs3 = (e * head * 2, e * head * 2 * n_head)
        q = ctx.cb(b.view(q_full, (head, n_head, n_tokens), nbs3, 0), "Qcur_reshaped", il)
        q = ctx.cb(ctx.norm(q, q_norm, il), "Qcur_normed", il)
        k = b.reshape(k, head, n_head_kv, n_tokens)
        k = ctx.cb(ctx.norm(k, k_norm, il), "Kcur_normed", il)
        gate = b.view(q_full, (head, n_head, n_tokens), nbs3, e * head)
        gate = ctx.cb(b.cont(gate, head * n_head, n_tokens), "gate_reshaped", il)
        v = b.reshape(v, head, n_head_kv, n_tokens)
    else:
        q_full = b.reshape(q_full, head * 2, n_head, n_tokens, 1)
        nbs = (q_full.nb[1], q_full.nb[2], q_full.nb[3])
        shape = (head, n_head, n_tokens, 1)
        q = ctx.cb(b.view(q_full, shape, nbs, 0), "Qcur_view", il)
        gate = ctx.cb(b.view(q_full, shape, nbs, head * q_full.nb[0]), "gate", il)
        k = b.reshape(k, head, n_head_kv, n_tokens)
        v = b.reshape(v, head, n_head_kv, n_tokens)
        q = ctx.cb(ctx.norm(q, q_norm, il), "Qcur_normed", il)
        k = ctx.cb(ctx.norm(k, k_norm, il), "Kcur_normed", il)
    q = ctx.cb(b.rope(q, inp_pos, None), "Qcur", il)
    k = ctx.cb(b.rope(k, inp_pos, None), "Kcur", il)
    ctx.cb(v, "Vcur", il)
    cur = ctx.cb(ctx.attn(inp, None, None, q, k, v, il, False), "attn_pregate", il)
    if not q35:
        gate = b.cont(gate, head * n_head, n_tokens)
    gate = ctx.cb(b.unary(gate, "SIGMOID"), "gate_sigmoid", il)
    if not q35 and not since("qwen3next_h_nextn", c.build):  # before: reshaped to 2D again
        gate = b.reshape(gate, head * n_head, n_tokens)
    cur = ctx.cb(b.mul(cur, gate), "attn_gated", il)
    wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
    return ctx.cb(ctx.mm_s(wo, cur, ctx.lw(il, "attn_output.scale")), "attn_output", il)


def _gdn_layer(ctx: GraphContext, rs: RecurrentState, cur: T, il: int, q35: bool) -> T:
    """build_layer_attn_linear of qwen3next.cpp / qwen35moe.cpp, cparams.n_rs_seq 0: the
    qkv and z projections (qwen3next: or the legacy fused ssm_in), beta and alpha
    (qwen3next: one ssm_ba projection split in views), the conv state (build_conv_state),
    ssm_conv, the L2 norms of q and k (build_gdn_l2_norm: RMS norm, scale), the heads
    repeated for qwen3next (qwen35moe: not with the fused op), the fused GATED_DELTA_NET (K
    1): llama_context sets cparams.fused_gdn_ar and fused_gdn_ch and auto_fgdn false, so
    build_delta_net_chunking / _autoregressive are never built in b11434 (before rule
    gdn_chunked_fused a prompt builds build_delta_net_chunking, before gdn_fused_ar one token
    build_delta_net_autoregressive: delta_net_base.py); the new state copied back, the gated
    RMS norm and ssm_out."""
    f, b, c = ctx.f, ctx.b, ctx.c
    rec = f.recurrent
    assert rec is not None
    d_conv, d_inner, head_k = rec.d_conv, rec.d_inner, rec.d_state
    n_k, n_v = rec.n_group, rec.dt_rank
    head_v = d_inner // n_v
    n_seqs = c.n_seqs
    n_st = c.n_tokens // n_seqs
    qkv, z = _qkvz(ctx, cur, il, q35)
    ssm_dt = ctx.need(ctx.lw(il, "ssm_dt.bias"), "ssm_dt.bias")
    ssm_a = ctx.need(ctx.lw(il, "ssm_a"), "ssm_a")
    beta, alpha = _beta_alpha(ctx, cur, il, q35)
    alpha = ctx.cb(b.unary(b.add(alpha, ssm_dt), "SOFTPLUS"), "a_softplus", il)
    gate = ctx.cb(b.mul(alpha, ssm_a), "gate", il)
    if not q35:
        beta = b.reshape(beta, 1, n_v, n_st, n_seqs)
    gate = b.reshape(gate, 1, n_v, n_st, n_seqs)
    conv_all, ssm_all = rs.r[il], rs.s[il]
    kernel = ctx.need(ctx.lw(il, "ssm_conv1d.weight"), "ssm_conv1d")
    channels = d_inner + 2 * n_k * head_k
    # build_conv_state (delta-net-base.cpp), n_rs_seq 0
    conv = ctx.cb(ctx.build_rs(rs, conv_all, rec.n_embd_r), "conv_states", il)
    conv = ctx.cb(b.reshape(conv, d_conv - 1, channels, n_seqs), "conv_states_reshaped", il)
    qkv_t = ctx.cb(b.transpose(qkv), "qkv_mixed_transposed", il)
    conv_in = ctx.cb(b.concat(conv, qkv_t, 0), "conv_input", il)
    last = b.view(
        conv_in,
        (d_conv - 1, channels, n_seqs),
        (conv_in.nb[1], conv_in.nb[2]),
        row_size(conv_in.type, conv_in.ne[0] - conv.ne[0]),
    )
    ctx.cb(last, "conv_state_last", il)
    row_count = (d_conv - 1) * channels
    if since("rs_state_2d", c.build):
        update = b.view(conv_all, (row_count, n_seqs), (conv_all.nb[1],), 0)
    else:  # before: ggml_view_1d of n_seqs states
        update = b.view(conv_all, (row_count * n_seqs,), (), 0)
    b.expand(b.cpy(last, ctx.cb(update, "conv_state_update", il)))
    state = ctx.build_rs(rs, ssm_all, rec.n_embd_s)
    state = ctx.cb(b.reshape(state, head_v, head_v, n_v, n_seqs), "state_predelta", il)
    conv_out = ctx.cb(b.ssm_conv(conv_in, kernel), "conv_output_raw", il)
    mix = ctx.cb(b.unary(conv_out, "SILU"), "conv_output_silu", il)
    e = GGML_TYPE_SIZES[mix.type][1]
    nb1 = row_size(mix.type, head_k * n_k * 2 + head_v * n_v)
    qk_shape = (head_k, n_k, n_st, n_seqs)
    qk_nbs = (row_size(mix.type, head_k), nb1, nb1 * n_st)
    q = ctx.cb(b.view(mix, qk_shape, qk_nbs, 0), "q_conv", il)
    k = ctx.cb(b.view(mix, qk_shape, qk_nbs, head_k * n_k * e), "k_conv", il)
    v_nbs = (row_size(mix.type, head_v), nb1, nb1 * n_st)
    v_off = row_size(mix.type, 2 * head_k * n_k)
    v = ctx.cb(b.view(mix, (head_v, n_v, n_st, n_seqs), v_nbs, v_off), "v_conv", il)
    if since("qkv_heads", c.build):  # build_gdn_l2_norm
        q = b.scale(b.rms_norm(q))
        k = b.scale(b.rms_norm(k))
    else:  # before: ggml_l2_norm
        q = b.l2_norm(q)
        k = b.l2_norm(k)
    q, k = _repeat_heads(ctx, q, k, q35)
    ctx.cb(q, "q_conv_predelta", il)
    ctx.cb(k, "k_conv_predelta", il)
    ctx.cb(v, "v_conv_predelta", il)
    # build_delta_net: the fused op for one token from rule gdn_fused_ar, for a prompt from
    # gdn_chunked_fused; before, the unfused paths of delta-net-base.cpp (rule gdn_chunking)
    if since("gdn_fused_ar" if n_st == 1 else "gdn_chunked_fused", c.build):
        out, new_state = _fused(ctx, q, k, v, gate, beta, state)
    elif n_st == 1:
        out, new_state = delta_net_base.autoregressive(ctx, q, k, v, gate, beta, state, il)
    else:
        out, new_state = delta_net_base.chunking(ctx, q, k, v, gate, beta, state, il)
    ctx.cb(out, "attn_output", il)
    ctx.cb(new_state, "new_state", il)
    if since("rs_state_2d", c.build):
        dst = b.view(ssm_all, (rec.n_embd_s, n_seqs), (ssm_all.nb[1],), 0)
    else:
        dst = b.view(ssm_all, (rec.n_embd_s * n_seqs,), (), 0)
    b.expand(b.cpy(new_state, dst))
    z = b.reshape(z, head_v, n_v, n_st, n_seqs)
    norm_w = ctx.need(ctx.lw(il, "ssm_norm.weight"), "ssm_norm")
    y = b.mul(ctx.norm(out, norm_w, il), b.unary(z, "SILU"))  # build_norm_gated
    y = ctx.cb(b.reshape(y, head_v * n_v, n_st, n_seqs), "final_output", il)
    w_out = ctx.need(ctx.lw(il, "ssm_out.weight"), "ssm_out")
    cur = ctx.mm_s(w_out, y, ctx.lw(il, "ssm_out.scale") if q35 else None)
    cur = ctx.cb(cur, "linear_attn_out", il)
    return b.reshape(cur, f.n_embd, n_st * n_seqs)


def _repeat_heads(ctx: GraphContext, q: T, k: T, q35: bool) -> tuple[T, T]:
    """q and k repeated from the key heads to the value heads where they differ: qwen3next
    whatever the op (an interleaved repeat through a reshape); qwen35moe only before rule
    gdn_chunked_fused (one ggml_repeat_4d each; the fused op broadcasts them itself)."""
    b, c = ctx.b, ctx.c
    rec = ctx.f.recurrent
    assert rec is not None
    head_k, n_k, n_v = rec.d_state, rec.n_group, rec.dt_rank
    n_seqs = c.n_seqs
    n_st = c.n_tokens // n_seqs
    if n_k == n_v:
        return q, k
    if q35:
        if since("gdn_chunked_fused", c.build):
            return q, k
        return b.repeat_4d(q, head_k, n_v, n_st, n_seqs), b.repeat_4d(k, head_k, n_v, n_st, n_seqs)
    rf = n_v // n_k
    if since("qwen3next_repeat_4d", c.build):
        q = b.reshape(q, head_k, 1, n_k, n_st * n_seqs)
        k = b.reshape(k, head_k, 1, n_k, n_st * n_seqs)
        q = b.repeat_4d(q, head_k, rf, n_k, n_st * n_seqs)
        k = b.repeat_4d(k, head_k, rf, n_k, n_st * n_seqs)
    else:  # before: over one dimension of heads x tokens
        q = b.reshape(q, head_k, 1, n_k * n_st * n_seqs)
        k = b.reshape(k, head_k, 1, n_k * n_st * n_seqs)
        q = b.repeat_4d(q, head_k, rf, n_k * n_st * n_seqs, 1)
        k = b.repeat_4d(k, head_k, rf, n_k * n_st * n_seqs, 1)
    return b.reshape(q, head_k, n_k * rf, n_st, n_seqs), b.reshape(
        k, head_k, n_k * rf, n_st, n_seqs
    )


def _beta_alpha(ctx: GraphContext, cur: T, il: int, q35: bool) -> tuple[T, T]:
    """beta (sigmoid) and alpha of build_layer_attn_linear: qwen35moe's ssm_beta and ssm_alpha
    projections (alpha reshaped from rule qwen35_alpha_reshape, a contiguous copy before);
    qwen3next's one ssm_ba projection viewed as b and a, each made contiguous."""
    f, b, c = ctx.f, ctx.b, ctx.c
    rec = f.recurrent
    assert rec is not None
    n_k, n_v = rec.n_group, rec.dt_rank
    n_seqs = c.n_seqs
    n_st = c.n_tokens // n_seqs
    if q35:
        wb = ctx.need(ctx.lw(il, "ssm_beta.weight"), "ssm_beta")
        beta = ctx.mm_s(wb, cur, ctx.lw(il, "ssm_beta.scale"))
        beta = ctx.cb(b.reshape(beta, 1, n_v, n_st, n_seqs), "beta", il)
        beta = ctx.cb(b.unary(beta, "SIGMOID"), "beta_sigmoid", il)
        wa = ctx.need(ctx.lw(il, "ssm_alpha.weight"), "ssm_alpha")
        alpha = ctx.mm_s(wa, cur, ctx.lw(il, "ssm_alpha.scale"))
        if since("qwen35_alpha_reshape", c.build):
            alpha = b.reshape(alpha, n_v, n_st, n_seqs)
        else:  # before: a contiguous copy
            alpha = b.cont(alpha, n_v, n_st, n_seqs)
        alpha = ctx.cb(alpha, "alpha", il)
    else:
        wba = ctx.need(ctx.lw(il, "ssm_ba.weight"), "ssm_ba")
        ba = ctx.cb(ctx.mm(wba, cur), "linear_attn_mixed_ba", il)
        ba = b.reshape(ba, 2 * n_v // n_k, n_k, n_st, n_seqs)
        nbs = (ba.nb[1], ba.nb[2], ba.nb[3])
        shape = (n_v // n_k, n_k, n_st, n_seqs)
        beta = ctx.cb(b.view(ba, shape, nbs, 0), "b", il)
        a = ctx.cb(b.view(ba, shape, nbs, (n_v // n_k) * ba.nb[0]), "a", il)
        beta = b.unary(b.cont(beta), "SIGMOID")
        alpha = b.cont(a, n_v, n_st, n_seqs)
    return beta, alpha


def _qkvz(ctx: GraphContext, cur: T, il: int, q35: bool) -> tuple[T, T]:
    """build_qkvz: the qkv rows (3-D, by sequence) and z from attn_qkv and attn_gate (with
    their scales for qwen35moe), or qwen3next's legacy ssm_in."""
    b, c = ctx.b, ctx.c
    wqkv = ctx.lw(il, "attn_qkv.weight")
    if wqkv is None and not q35:  # qwen3next.cpp build_qkvz's legacy path
        return _qkvz_legacy(ctx, cur, il)
    wqkv = ctx.need(wqkv, "attn_qkv")
    qkv = ctx.mm_s(wqkv, cur, ctx.lw(il, "attn_qkv.scale") if q35 else None)
    n_st = c.n_tokens // c.n_seqs
    qkv = ctx.cb(b.reshape(qkv, qkv.ne[0], n_st, c.n_seqs), "linear_attn_qkv_mixed", il)
    wz = ctx.need(ctx.lw(il, "attn_gate.weight"), "attn_gate")
    z = ctx.cb(ctx.mm_s(wz, cur, ctx.lw(il, "attn_gate.scale") if q35 else None), "z", il)
    return qkv, z


def _qkvz_legacy(ctx: GraphContext, cur: T, il: int) -> tuple[T, T]:
    """build_qkvz's legacy path (qwen3next.cpp, the same from b8179 to b11434): one ssm_in
    projection of older GGUFs, viewed per key head as q, k, v and z (z made contiguous), q, k
    and v made contiguous rows and concatenated into the conv input."""
    f, b, c = ctx.f, ctx.b, ctx.c
    rec = f.recurrent
    assert rec is not None
    head_k, n_k, n_v = rec.d_state, rec.n_group, rec.dt_rank
    head_v = rec.d_inner // n_v
    n_seqs = c.n_seqs
    n_st = c.n_tokens // n_seqs
    w = ctx.need(ctx.lw(il, "ssm_in.weight"), "ssm_in")
    mixed = ctx.cb(ctx.mm(w, cur), "linear_attn_mixed_qkvz", il)
    vz = head_v * n_v // n_k
    mixed = b.reshape(mixed, 2 * head_k + 2 * vz, n_k, n_st, n_seqs)
    nbs = (mixed.nb[1], mixed.nb[2], mixed.nb[3])
    e = GGML_TYPE_SIZES[mixed.type][1]
    query = ctx.cb(b.view(mixed, (head_k, n_k, n_st, n_seqs), nbs, 0), "q", il)
    key = ctx.cb(b.view(mixed, (head_k, n_k, n_st, n_seqs), nbs, head_k * e), "k", il)
    value = ctx.cb(b.view(mixed, (vz, n_k, n_st, n_seqs), nbs, 2 * head_k * e), "v", il)
    z = b.view(mixed, (vz, n_k, n_st, n_seqs), nbs, (2 * head_k + vz) * e)
    z = ctx.cb(b.cont(z), "z", il)
    q_flat = ctx.cb(b.cont(query, head_k * n_k, n_st, n_seqs), "query_flat", il)
    k_flat = ctx.cb(b.cont(key, head_k * n_k, n_st, n_seqs), "key_flat", il)
    v_flat = ctx.cb(b.cont(value, head_v * n_v, n_st, n_seqs), "value_flat", il)
    qkv = ctx.cb(b.concat(b.concat(q_flat, k_flat, 0), v_flat, 0), "qkv_mixed", il)
    return qkv, z


def _fused(ctx: GraphContext, q: T, k: T, v: T, gate: T, beta: T, state: T) -> tuple[T, T]:
    """build_delta_net_fused (src/models/delta-net-base.cpp): one GATED_DELTA_NET (K 1), the
    output and the new state views of its result (before rule gdn_state_4d, from gdn_state_3d:
    the state given as 3-D rows)."""
    b, c = ctx.b, ctx.c
    s_v, h_v, n_seqs = state.ne[0], state.ne[2], state.ne[3]
    n_st = q.ne[2]
    s_in = state
    if since("gdn_state_3d", c.build) and not since("gdn_state_4d", c.build):
        s_in = b.reshape(state, s_v * s_v * h_v, 1, n_seqs)  # the state as 3-D rows
    res = b.gated_delta_net(q, k, v, gate, beta, s_in, 1)
    out = b.view(
        res,
        (s_v, h_v, n_st, n_seqs),
        (
            row_size(res.type, s_v),
            row_size(res.type, s_v * h_v),
            row_size(res.type, s_v * h_v * n_st),
        ),
        0,
    )
    new_state = b.view(
        res,
        (s_v, s_v, h_v, n_seqs),
        (
            row_size(res.type, s_v),
            row_size(res.type, s_v * s_v),
            row_size(res.type, s_v * s_v * h_v),
        ),
        row_size(res.type, s_v * h_v * n_st * n_seqs),
    )
    return out, new_state


def _ffn(ctx: GraphContext, cur: T, il: int, q35: bool) -> T:
    """build_layer_ffn of qwen3next.cpp / qwen35moe.cpp: softmax experts (weights
    normalised), the shared expert times the sigmoid of its one-row gate
    (ffn_gate_inp_shexp); qwen3next's dense FFN where a layer has no router."""
    b = ctx.b
    if ctx.lw(il, "ffn_gate_inp.weight") is None:
        if q35:
            raise GraphBuildError(f"{ctx.f.path}: a qwen35moe layer without experts")
        return ctx.ffn(cur, il, "silu", False)
    moe = ctx.cb(ctx.moe_ffn(cur, il, scales=True), "ffn_moe_out", il)
    if ctx.lw(il, "ffn_up_shexp.weight") is None:
        return moe
    shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp", scales=True), "ffn_shexp", il)
    gate_w = ctx.need(ctx.lw(il, "ffn_gate_inp_shexp.weight"), "ffn_gate_inp_shexp")
    gate = ctx.cb(ctx.mm(gate_w, cur), "shared_expert_gate", il)
    gate = ctx.cb(b.unary(gate, "SIGMOID"), "shared_expert_gate_sigmoid", il)
    shared = ctx.cb(b.mul(shared, gate), "ffn_shexp_gated", il)
    return ctx.cb(b.add(moe, shared), "ffn_out", il)


def build(ctx: GraphContext) -> None:
    """qwen3next.cpp's graph."""
    graph(ctx, q35=False)
