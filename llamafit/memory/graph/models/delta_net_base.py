"""src/models/delta-net-base.cpp before the fused GATED_DELTA_NET op ran the gated DeltaNet:
llm_build_delta_net_base::build_delta_net_chunking (a prompt: until rule gdn_fused_ch, b8299)
and build_delta_net_autoregressive (one token a sequence: until rule gdn_fused_ar, b8233), on
the transposed state, as llama.cpp b8179 (node-llama-cpp 3.17.1's tree, whose real graphs
tests/memory/graph/test_build_b8179.py checks) builds them for Qwen3-Next and Qwen3.5.
"""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T, row_size
from ..params import GraphBuildError

CHUNK_SIZE = 64  # delta-net-base.cpp CHUNK_SIZE


def _slice_2d(ctx: GraphContext, t: T, c: int) -> T:
    """get_slice_2d: the c-th {x, y, 1, b} slice of t's third dimension."""
    return ctx.b.view(t, (t.ne[0], t.ne[1], 1, t.ne[3]), (t.nb[1], t.nb[2], t.nb[3]), t.nb[2] * c)


def _inputs(ctx: GraphContext, q: T, k: T, v: T, beta: T, g: T, il: int) -> None:
    """The cb names both paths give their inputs ("q_in" .. "g_in")."""
    for t, name in ((q, "q_in"), (k, "k_in"), (v, "v_in"), (beta, "b_in"), (g, "g_in")):
        ctx.cb(t, name, il)


def chunking(ctx: GraphContext, q: T, k: T, v: T, g: T, beta: T, s: T, il: int) -> tuple[T, T]:
    """build_delta_net_chunking (GDA: one gate a head): the tokens in chunks of 64 (padded),
    the decay mask, the triangular solve, then per chunk the state's update, each chunk's
    output set into v in place; the output a permuted view of v, the new state a transposed
    view. The per-head key gate (KDA, Kimi Linear) is not built."""
    b = ctx.b
    s_k, h_k, n_tokens, n_seqs = q.ne
    s_v, h_v = v.ne[0], v.ne[1]
    if g.ne[0] == s_k and g.ne[1] == h_k:
        raise GraphBuildError(f"{ctx.f.path}: the per-key gated DeltaNet (KDA) is not modelled")
    q = b.scale(q)
    _inputs(ctx, q, k, v, beta, g, il)
    q = b.permute(q, 0, 2, 1, 3)
    k = b.permute(k, 0, 2, 1, 3)
    v = b.permute(v, 0, 2, 1, 3)
    g = b.permute(g, 0, 2, 1, 3)
    beta = b.permute(beta, 0, 2, 1, 3)
    cs = CHUNK_SIZE
    pad = (cs - n_tokens % cs) % cs
    n_chunks = (n_tokens + pad) // cs
    q = b.pad(q, 0, pad)
    k = b.pad(k, 0, pad)
    v = b.pad(v, 0, pad)
    g = b.pad(g, 0, pad)
    beta = b.pad(beta, 0, pad)
    v_b = ctx.cb(b.mul(v, beta), "v_b", il)
    k_b = ctx.cb(b.mul(k, beta), "k_b", il)
    hk, hv = h_k * n_seqs, h_v * n_seqs
    q = b.reshape(q, s_k, cs, n_chunks, hk)
    k = b.reshape(k, s_k, cs, n_chunks, hk)
    k_b = b.reshape(k_b, s_k, cs, n_chunks, hv)
    v = b.reshape(v, s_v, cs, n_chunks, hv)
    v_b = b.reshape(v_b, s_v, cs, n_chunks, hv)
    g = b.reshape(g, g.ne[0], cs, n_chunks, hv)
    beta = b.reshape(beta, 1, cs, n_chunks, hv)
    g_cs = ctx.cb(b.cumsum(b.cont(b.transpose(g))), "g_cs", il)
    g_cs_j = b.reshape(g_cs, 1, cs, n_chunks, hv)
    g_cs_j = b.repeat_4d(g_cs_j, cs, cs, n_chunks, hv)
    decay = b.unary(b.tri(b.sub(g_cs_j, g_cs)), "EXP")
    ctx.cb(decay, "decay_mask", il)
    kb = b.mul(b.mul_mat(k, k_b), decay)
    kq = b.mul(b.mul_mat(k, q), decay)
    kq = ctx.cb(b.tri(kq), "kq", il)
    attn = ctx.cb(b.tri(kb), "attn", il)
    identity = b.diag(b.fill(b.view(attn, (cs,), (), 0)))
    lhs = ctx.cb(b.add(attn, identity), "dnet_add_ch_lhs", il)
    attn = ctx.cb(b.unary(attn, "NEG"), "attn_pre_solve", il)
    attn = b.add(b.solve_tri(lhs, attn), identity)
    ctx.cb(attn, "dnet_add_ch_attn_solved", il)
    v = b.mul_mat(b.cont(b.transpose(v_b)), attn)
    g_exp = b.unary(g_cs, "EXP")
    k_b = b.cont(b.transpose(k_b))
    kbg = ctx.cb(b.mul(k_b, g_exp), "k_beta_g_exp", il)
    k_cd = ctx.cb(b.mul_mat(kbg, attn), "k_cumdecay", il)
    q_g_exp = b.mul(q, b.cont(b.transpose(g_exp)))
    g_last = b.view(
        g_cs,
        (1, g_cs.ne[1], g_cs.ne[2], g_cs.ne[3]),
        (g_cs.nb[1], g_cs.nb[2], g_cs.nb[3]),
        row_size(g_cs.type, g_cs.ne[0] - 1),
    )
    ctx.cb(g_last, "g_last", il)
    g_last = b.cont(g_last)
    g_last_exp_t = ctx.cb(b.transpose(b.unary(g_last, "EXP")), "g_last_exp_t", il)
    g_diff = ctx.cb(b.unary(b.sub(g_cs, g_last), "NEG"), "g_diff", il)
    g_diff_exp_t = b.cont(b.transpose(b.unary(g_diff, "EXP")))
    kg = ctx.cb(b.mul(k, g_diff_exp_t), "key_gdiff", il)
    kg_t = ctx.cb(b.cont(b.transpose(kg)), "key_gdiff_t", il)
    s_t = b.cont(b.transpose(s), s_v, s_v, 1, hv)
    ctx.cb(s_t, "dnet_add_ch_state", il)
    v_t = b.cont(b.transpose(v))
    for chunk in range(n_chunks):
        ch_k_cd = _slice_2d(ctx, k_cd, chunk)
        ch_v_t = _slice_2d(ctx, v_t, chunk)
        ch_kq = _slice_2d(ctx, kq, chunk)
        ch_q_g_exp = _slice_2d(ctx, q_g_exp, chunk)
        ch_kg_t = _slice_2d(ctx, kg_t, chunk)
        v_t_p = ctx.cb(b.mul_mat(ch_k_cd, s_t), "v_prime", il)
        v_t_new = ctx.cb(b.sub(ch_v_t, v_t_p), "v_t_new", il)
        v_attn = ctx.cb(b.mul_mat(v_t_new, ch_kq), "v_attn", il)
        attn_inter = ctx.cb(b.mul_mat(s_t, ch_q_g_exp), "attn_inter", il)
        o_ch = ctx.cb(b.add(attn_inter, v_attn), "dnet_add_ch_attn_out", il)
        v = b.set_inplace(v, o_ch)
        kgv = b.mul_mat(ch_kg_t, v_t_new)
        ch_g_last_exp_t = _slice_2d(ctx, g_last_exp_t, chunk)
        s_t = b.add(b.mul(s_t, ch_g_last_exp_t), kgv)
        ctx.cb(s_t, "dnet_add_ch_state", il)
    s_t = b.reshape(s_t, s_v, s_v, h_v, n_seqs)
    o = b.view(
        v,
        (s_v, n_tokens, h_v, n_seqs),
        (
            row_size(v.type, s_v),
            row_size(v.type, s_v * cs * n_chunks),
            row_size(v.type, s_v * cs * n_chunks * h_v),
        ),
        0,
    )
    o = b.permute(o, 0, 2, 1, 3)
    s = ctx.cb(b.transpose(s_t), "output_state", il)
    return o, s


def autoregressive(
    ctx: GraphContext, q: T, k: T, v: T, g: T, beta: T, s: T, il: int
) -> tuple[T, T]:
    """build_delta_net_autoregressive (one token a sequence): the state decayed, the delta
    rule on its transpose (sums over rows), the output summed the same way."""
    b = ctx.b
    h_v, n_seqs = v.ne[1], q.ne[3]
    q = b.scale(q)
    q = b.permute(q, 0, 2, 1, 3)
    k = b.permute(k, 0, 2, 1, 3)
    v = b.permute(v, 0, 2, 1, 3)
    _inputs(ctx, q, k, v, beta, g, il)
    g = b.reshape(g, 1, g.ne[0], h_v, n_seqs)
    beta = b.reshape(beta, 1, 1, h_v, n_seqs)
    s = b.mul(s, b.unary(g, "EXP"))
    s_t = b.cont(b.transpose(s))
    sk = b.sum_rows(b.mul(s_t, k))
    d_t = b.transpose(b.mul(b.sub(v, b.transpose(sk)), beta))
    kd = b.mul(b.repeat(k, s), d_t)
    s_t = ctx.cb(b.add(s_t, kd), "dnet_add_ar_state", il)
    o = b.sum_rows(b.mul(s_t, q))
    return b.permute(o, 2, 0, 1, 3), b.transpose(s_t)
