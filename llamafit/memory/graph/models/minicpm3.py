"""src/models/minicpm3.cpp: llama_model_minicpm3::graph (MLA-style attention, MiniCPM scales)."""

from __future__ import annotations

from ....builds import since
from ..build import GraphContext
from ..ggml import T, row_size, set_output


def build(ctx: GraphContext) -> None:
    """src/models/minicpm3.cpp llama_model_minicpm3::graph: the embeddings scaled by 12 (its
    hard-coded scale_embd), Q through the q_a / q_b pair, K and V decompressed from kv_a_mqa by
    kv_b (no absorption: an ordinary K/V cache, n_embd_head_k wide keys, n_embd_head_v wide
    values), one RoPE key (k_pe) repeated to every head, get_rope_factors' LongRoPE factors, the
    residuals scaled by 1.4 / sqrt(n_layer) (scale_depth), a SwiGLU FFN, and the output norm
    scaled by 256 / n_embd (n_embd_base) before lm_head. From rule rope_set_offset the whole q
    is roped from offset n_embd_head_qk_nope; before it q_nope and q_pe were views, q_pe roped
    and the two concatenated."""
    b = ctx.b
    inpL = ctx.cb(b.scale(ctx.inp_embd(1.0)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        factors = ctx.rope_factors(il)
        cur = ctx.attn_norm(inpL, il)
        q, k, v = _qkv(ctx, cur, inp_pos, factors, il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        cur = ctx.cb(b.scale(cur), "hidden_scaled", il)  # scale_depth / sqrt(n_layer)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        cur = ctx.cb(b.scale(cur), "hidden_scaled_ffn", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    cur = ctx.cb(cur, "result_norm", -1)
    set_output(cur)  # res->t_embd
    cur = ctx.cb(b.scale(cur), "lmhead_scaling", -1)  # n_embd_base / n_embd
    ctx.finish(ctx.mm(ctx.output_weight(), cur))


def _qkv(ctx: GraphContext, cur: T, inp_pos: T, factors: T | None, il: int) -> tuple[T, T, T]:
    """minicpm3.cpp's self-attention up to build_attn: q_states, k_states and v_states."""
    f, b, n_tokens = ctx.f, ctx.b, ctx.c.n_tokens
    n_head, head_k, head_v = f.n_head[il], ctx.head_k(il), ctx.head_v(il)
    # load_arch_tensors: attn_kv_a_norm {kv_lora_rank}, attn_kv_a_mqa {n_embd, kv_lora_rank +
    # n_rot} (the facts keep no rope dimension)
    rank = ctx.need(ctx.lw(il, "attn_kv_a_norm.weight"), "attn_kv_a_norm").ne[0]
    wkv_a = ctx.need(ctx.lw(il, "attn_kv_a_mqa.weight"), "attn_kv_a_mqa")
    n_rot = wkv_a.ne[1] - rank
    nope = head_k - n_rot
    q = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_q_a.weight"), "attn_q_a"), cur), "q", il)
    q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_a_norm.weight"), il), "q", il)
    q = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_q_b.weight"), "attn_q_b"), q), "q", il)
    offset = since("rope_set_offset", ctx.c.build)
    q_nope = q_pe = None
    if offset:
        q = ctx.cb(b.reshape(q, head_k, n_head, n_tokens), "q", il)
    else:  # views of the 2-D q
        nbs = (row_size(q.type, head_k), row_size(q.type, head_k * n_head))
        q_nope = ctx.cb(b.view(q, (nope, n_head, n_tokens), nbs, 0), "q_nope", il)
        q_pe = b.view(q, (n_rot, n_head, n_tokens), nbs, row_size(q.type, nope))
        q_pe = ctx.cb(q_pe, "q_pe", il)
    kv_pe = ctx.cb(ctx.mm(wkv_a, cur), "kv_pe_compresseed", il)
    row = kv_pe.nb[1]
    kv = ctx.cb(b.view(kv_pe, (rank, n_tokens), (row,), 0), "kv_compressed", il)
    k_pe = b.view(kv_pe, (n_rot, 1, n_tokens), (row, row), row_size(kv_pe.type, rank))
    k_pe = ctx.cb(k_pe, "k_pe", il)
    kv = ctx.cb(ctx.norm(kv, ctx.lw(il, "attn_kv_a_norm.weight"), il), "kv_compressed", il)
    kv = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_kv_b.weight"), "attn_kv_b"), kv), "kv", il)
    nb1 = row_size(kv.type, nope + head_v)
    nbs = (nb1, nb1 * n_head)
    k_nope = ctx.cb(b.view(kv, (nope, n_head, n_tokens), nbs, 0), "k_nope", il)
    v = b.view(kv, (head_v, n_head, n_tokens), nbs, row_size(kv.type, nope))
    ctx.cb(v, "v_states", il)
    v = ctx.cb(b.cont(v), "v_states", il)
    if q_pe is None:  # ggml_rope_set_offset(q, n_embd_head_qk_nope): the op's parameters only
        q = ctx.cb(b.rope(q, inp_pos, factors), "q_rope", il)
    else:
        q_pe = ctx.cb(b.rope(q_pe, inp_pos, factors), "q_pe", il)
    k_pe = ctx.cb(b.rope(k_pe, inp_pos, factors), "k_pe", il)
    if q_nope is None or q_pe is None:
        q = ctx.cb(q, "q_states", il)
        k_pe = b.repeat_4d(k_pe, n_rot, n_head, n_tokens, 1)
    else:
        q = ctx.cb(b.concat(q_nope, q_pe, 0), "q_states", il)
        k_pe = b.repeat(k_pe, q_pe)
    k = ctx.cb(b.concat(k_nope, k_pe, 0), "k_states", il)
    return q, k, v
