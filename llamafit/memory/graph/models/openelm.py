"""src/models/openelm.cpp: llama_model_openelm::graph (OpenELM)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T


def build(ctx: GraphContext) -> None:
    """A Llama-like layer with per-layer head counts and FFN widths (layer-wise scaling): the
    fused attn_qkv reshaped to heads and viewed as Q, K and V, Q and K RMS-normed per head,
    RoPE without factors; the last cb names the roped Q "Vcur" (openelm.cpp's own line); build_attn
    without wo's bias; in the last layer the residual's rows are taken before the attention's;
    a gated SiLU FFN; the output norm and the tied output."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        residual = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = _qkv(ctx, cur, il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur", il)
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur", il)
        q, k = b.rope(q, inp_pos, None), b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(q, "Vcur", il)
        cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        residual, cur = ctx.out_rows(il, out_ids, residual, cur)
        ffn_inp = ctx.cb(b.add(residual, cur), "ffn_inp", il)
        cur = ctx.cb(ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))


def _qkv(ctx: GraphContext, cur: T, il: int) -> tuple[T, T, T]:
    """The attn_qkv product ("wqkv") reshaped to (head, n_head + 2 n_head_kv, n_tokens), Q, K
    and V as 3-D views of it over its strides (openelm.cpp)."""
    b, f = ctx.b, ctx.f
    n_head, n_kv, head = f.n_head[il], f.n_head_kv[il], ctx.head_k(il)
    qkv = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_qkv.weight"), "attn_qkv"), cur), "wqkv", il)
    qkv = b.reshape(qkv, head, n_head + 2 * n_kv, ctx.c.n_tokens)
    nb = (qkv.nb[1], qkv.nb[2])
    out = []
    for name, heads, offs in (
        ("Qcur", n_head, 0),
        ("Kcur", n_kv, n_head),
        ("Vcur", n_kv, n_head + n_kv),
    ):
        t = b.view(qkv, (head, heads, ctx.c.n_tokens), nb, qkv.nb[1] * offs)
        out.append(ctx.cb(t, name, il))
    q, k, v = out
    return q, k, v
