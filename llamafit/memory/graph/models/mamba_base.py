"""src/models/mamba-base.cpp: llm_build_mamba_base::build_mamba_layer (Mamba-1: mamba, jamba) and
build_mamba2_layer (mamba2, granitehybrid, nemotron_h, falcon-h1).
"""

from __future__ import annotations

from ....builds import since
from ....reader.ggml_types import GGML_TYPE_SIZES
from ..build import GraphContext
from ..ggml import T, nelements, row_size
from ..kv_cache import RecurrentState


def mamba_layer(ctx: GraphContext, rs: RecurrentState, cur: T, il: int) -> T:
    """llm_build_mamba_base::build_mamba_layer (src/models/mamba-base.cpp): Mamba-1, one head of
    one channel per inner channel (n_head = d_inner, head_dim 1), no groups. ssm_in on 3D
    {n_embd, n_seq_tokens, n_seqs} rows split into x and z; the conv state, ssm_conv; x_proj
    (ssm_x) gives dt, B and C; dt_proj (ssm_dt) widens dt to d_inner; ssm_scan over the states
    (Mamba-1's A, {d_state, d_inner}); the conv and SSM states written back through 1D views of
    n_seqs states at every build; the D skip and the z gate. dt, B and C RMS-normed where the
    file says ssm.dt_b_c_rms (FalconMamba: no weights) or has all three of the layer's
    ssm_dt_norm, ssm_b_norm and ssm_c_norm (Jamba); else, from rule mamba_dt_cont, dt copied
    before ssm_dt multiplies it (before: the view of x_db itself)."""
    f, b, c = ctx.f, ctx.b, ctx.c
    rec = f.recurrent
    assert rec is not None
    d_conv, d_inner, d_state, dt_rank = rec.d_conv, rec.d_inner, rec.d_state, rec.dt_rank
    n_seqs = c.n_seqs
    n_seq_tokens = c.n_tokens // n_seqs
    conv_all, ssm_all = rs.r[il], rs.s[il]
    conv = ctx.build_rs(rs, conv_all, rec.n_embd_r)
    conv = b.reshape(conv, d_conv - 1, d_inner, n_seqs)
    cur = b.reshape(cur, cur.ne[0], n_seq_tokens, n_seqs)
    xz = ctx.mm(ctx.need(ctx.lw(il, "ssm_in.weight"), "ssm_in"), cur)
    e = xz.nb[0]
    x = b.view(xz, (d_inner, xz.ne[1], xz.ne[2]), (xz.nb[1], xz.nb[2]), 0)
    z = b.view(xz, (d_inner, xz.ne[1], xz.ne[2]), (xz.nb[1], xz.nb[2]), d_inner * e)
    conv_x = b.concat(conv, b.transpose(x), 0)
    last = b.view(
        conv_x,
        (d_conv - 1, d_inner, n_seqs),
        (conv_x.nb[1], conv_x.nb[2]),
        n_seq_tokens * conv_x.nb[0],
    )
    b.expand(b.cpy(last, b.view(conv_all, ((d_conv - 1) * d_inner * n_seqs,), (), 0)))
    x = b.ssm_conv(conv_x, ctx.need(ctx.lw(il, "ssm_conv1d.weight"), "ssm_conv1d"))
    x = b.add(x, ctx.need(ctx.lw(il, "ssm_conv1d.bias"), "ssm_conv1d.bias"))
    x = b.unary(x, "SILU")
    x_db = ctx.mm(ctx.need(ctx.lw(il, "ssm_x.weight"), "ssm_x"), x)
    e, n1, n2 = x_db.nb[0], x_db.nb[1], x_db.nb[2]
    dt = b.view(x_db, (dt_rank, n_seq_tokens, n_seqs), (n1, n2), 0)
    gb = (d_state, 1, n_seq_tokens, n_seqs)
    bm = b.view(x_db, gb, (d_state * e, n1, n2), dt_rank * e)
    cm = b.view(x_db, gb, (d_state * e, n1, n2), (dt_rank + d_state) * e)
    norms = [ctx.lw(il, f"ssm_{part}_norm.weight") for part in ("dt", "b", "c")]
    if rec.dt_b_c_rms or all(n is not None for n in norms):
        dt, bm, cm = (ctx.norm(t, n, il) for t, n in zip((dt, bm, cm), norms, strict=True))
    elif since("mamba_dt_cont", c.build):
        dt = b.cont(dt)
    dt = ctx.mm(ctx.need(ctx.lw(il, "ssm_dt.weight"), "ssm_dt"), dt)
    dt = b.add(dt, ctx.need(ctx.lw(il, "ssm_dt.bias"), "ssm_dt.bias"))
    skip = x
    x = b.reshape(x, 1, d_inner, n_seq_tokens, n_seqs)
    a = ctx.need(ctx.lw(il, "ssm_a"), "ssm_a")

    def ssm_rows(states: T, ids: T) -> T:
        ssm = b.reshape(states, d_state, 1, d_inner, rs.size)  # mctx_cur->get_size()
        return b.ssm_scan(ssm, x, dt, a, bm, cm, ids, 1)

    y_ssm = ctx.build_rs(rs, ssm_all, rec.n_embd_s, ssm_rows)
    n_state = d_state * d_inner * n_seqs
    src = b.view(y_ssm, (n_state,), (), x.nb[3] * x.ne[3])
    b.expand(b.cpy(src, b.view(ssm_all, (n_state,), (), 0)))
    y = b.view(y_ssm, (d_inner, n_seq_tokens, n_seqs), (x.nb[2], x.nb[3]), 0)
    y = b.add(y, b.mul(skip, ctx.need(ctx.lw(il, "ssm_d"), "ssm_d")))
    y = b.glu_split(b.cont(z), y, "SWIGLU")
    cur = ctx.mm(ctx.need(ctx.lw(il, "ssm_out.weight"), "ssm_out"), y)
    return b.reshape(cur, cur.ne[0], n_seq_tokens * n_seqs)


def mamba2_layer(ctx: GraphContext, rs: RecurrentState, cur: T, il: int) -> T:
    """llm_build_mamba_base::build_mamba2_layer (src/models/mamba-base.cpp), K = 1
    (cparams.n_rs_seq 0): the conv state, ssm_conv, ssm_scan over the states in place, the
    D skip, the z gate and the grouped RMS norm. Before rule ssm_state_slots the states are
    written back through 1D views of n_seqs states; before rule mamba2_proj_2d ssm_in and
    ssm_out multiply 3D {n_embd, n_seq_tokens, n_seqs} rows (reshaped to 2D after ssm_out)."""
    f, b, c = ctx.f, ctx.b, ctx.c
    rec = f.recurrent
    assert rec is not None
    d_conv, d_inner, d_state = rec.d_conv, rec.d_inner, rec.d_state
    n_head, n_group = rec.dt_rank, rec.n_group
    head_dim = d_inner // n_head
    n_seqs = c.n_seqs
    n_seq_tokens = c.n_tokens // n_seqs
    xbc_w = d_inner + 2 * n_group * d_state
    conv_all, ssm_all = rs.r[il], rs.s[il]
    slots = since("ssm_state_slots", c.build)  # else 1D views of n_seqs states each
    state_slots = ssm_all.ne[1] if slots else rs.size  # mctx_cur->get_size()
    proj_2d = since("mamba2_proj_2d", c.build)  # else the projections on 3D rows
    conv = ctx.build_rs(rs, conv_all, rec.n_embd_r)
    conv = b.reshape(conv, d_conv - 1, xbc_w, n_seqs)
    if not proj_2d:
        cur = b.reshape(cur, cur.ne[0], n_seq_tokens, n_seqs)
    zx = ctx.mm(ctx.need(ctx.lw(il, "ssm_in.weight"), "ssm_in"), cur)
    if proj_2d:
        zx = b.reshape(zx, zx.ne[0], n_seq_tokens, n_seqs)
    nb0, nb1, nb2 = zx.nb[0], zx.nb[1], zx.nb[2]
    z = b.view(zx, (head_dim, n_head, n_seq_tokens, n_seqs), (head_dim * nb0, nb1, nb2), 0)
    xbc = b.view(zx, (xbc_w, n_seq_tokens, n_seqs), (nb1, nb2), d_inner * nb0)
    dt = b.view(zx, (n_head, n_seq_tokens, n_seqs), (nb1, nb2), (d_inner + xbc_w) * nb0)
    conv_x = b.concat(conv, b.transpose(xbc), 0)
    row_count = (d_conv - 1) * xbc_w
    last = b.view(
        conv_x,
        (d_conv - 1, xbc_w, n_seqs),
        (conv_x.nb[1], conv_x.nb[2]),
        n_seq_tokens * conv_x.nb[0],
    )
    if slots:
        conv_dst = b.view(conv_all, (row_count, n_seqs), (conv_all.nb[1],), 0)
    else:
        conv_dst = b.view(conv_all, (row_count * n_seqs,), (), 0)
    b.expand(b.cpy(last, conv_dst))
    xbc = b.ssm_conv(conv_x, ctx.need(ctx.lw(il, "ssm_conv1d.weight"), "ssm_conv1d"))
    xbc = b.add(xbc, ctx.need(ctx.lw(il, "ssm_conv1d.bias"), "ssm_conv1d.bias"))
    xbc = b.unary(xbc, "SILU")
    e, n1, n2 = xbc.nb[0], xbc.nb[1], xbc.nb[2]
    x = b.view(xbc, (head_dim, n_head, n_seq_tokens, n_seqs), (head_dim * e, n1, n2), 0)
    gb = (d_state, n_group, n_seq_tokens, n_seqs)
    bm = b.view(xbc, gb, (d_state * e, n1, n2), d_inner * e)
    cm = b.view(xbc, gb, (d_state * e, n1, n2), (d_inner + n_group * d_state) * e)
    dt = b.add(b.cont(dt), ctx.need(ctx.lw(il, "ssm_dt.bias"), "ssm_dt.bias"))
    a = ctx.need(ctx.lw(il, "ssm_a"), "ssm_a")

    def ssm_rows(states: T, ids: T) -> T:
        ssm = b.reshape(states, d_state, head_dim, n_head, state_slots)
        return b.ssm_scan(ssm, x, dt, a, bm, cm, ids, 1)

    y_ssm = ctx.build_rs(rs, ssm_all, rec.n_embd_s, ssm_rows)
    big_d = d_state * d_inner
    y_row = row_size(y_ssm.type, big_d)
    s_row = row_size(ssm_all.type, big_d)
    offset = nelements(x) * GGML_TYPE_SIZES[x.type][1]
    if slots:
        src = b.view(y_ssm, (big_d, n_seqs, 1), (y_row, y_row * n_seqs), offset)
        dst = b.view(ssm_all, (big_d, n_seqs, 1), (ssm_all.nb[1], rs.size * s_row), 0)
    else:
        src = b.view(y_ssm, (big_d * n_seqs,), (), offset)
        dst = b.view(ssm_all, (big_d * n_seqs,), (), 0)
    b.expand(b.cpy(src, dst))
    xn1 = x.nb[1]
    y = b.view(
        y_ssm,
        (head_dim, n_head, n_seq_tokens, n_seqs),
        (xn1, n_head * xn1, n_seq_tokens * n_head * xn1),
        0,
    )
    y = b.add(y, b.mul(x, ctx.need(ctx.lw(il, "ssm_d"), "ssm_d")))
    ctx.cb(y, "mamba2_y_add_d", il)
    y = b.glu_split(b.cont(z), y, "SWIGLU")
    norm = ctx.lw(il, "ssm_norm.weight")
    if norm is not None:
        y = b.reshape(y, d_inner // n_group, n_group, n_seq_tokens, n_seqs)
        y = ctx.norm(y, norm, il)
    if proj_2d:
        y = b.reshape(y, d_inner, n_seq_tokens * n_seqs)
    else:
        y = b.reshape(y, d_inner, n_seq_tokens, n_seqs)
    cur = ctx.mm(ctx.need(ctx.lw(il, "ssm_out.weight"), "ssm_out"), y)
    if not proj_2d:
        cur = b.reshape(cur, cur.ne[0], n_seq_tokens * n_seqs)
    return ctx.cb(cur, "mamba_out", il)
