"""src/models/t5encoder.cpp: llama_model_t5encoder::graph, t5.cpp's encoder graph
(llama_model_t5::graph<true>: T5 and UMT5 encoders)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput
from ..ggml import T
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """RMS-normed pre-norm layers over the ubatch itself (build_attn_inp_no_cache): Q/K/V
    without biases, no positions but a relative-position bias added to KQ (build_pos_bias over
    the "pos_bucket_enc" input, the layer's attn_rel_b or layer 0's), the attention without a
    scale, the output projection; the gated GELU FFN (flan-T5, UMT5: ffn_gate; T5's ReLU FFN
    without it is declined); the last layer's output is "result_embd", its RMS norm
    "result_norm" (res->t_embd)."""
    b, c, f = ctx.b, ctx.c, ctx.f
    inpL = ctx.inp_embd(1.0)
    # build_inp_pos_bucket_enc: n_tokens x n_tokens bucket indexes
    pos_bucket = b.new("i32", c.n_tokens, c.n_tokens, name="pos_bucket_enc", inp=True)
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    head = f.n_embd_head_k
    for il in ctx.layers():

        def w(part: str, il: int = il) -> T:
            return ctx.need(ctx.w(f"enc.blk.{il}.{part}.weight", il), part)

        inpSA = inpL
        cur = ctx.cb(ctx.norm(inpL, w("attn_norm"), il), "attn_norm", il)
        q = ctx.cb(ctx.mm(w("attn_q"), cur), "Qcur", il)
        k = ctx.cb(ctx.mm(w("attn_k"), cur), "Kcur", il)
        v = ctx.cb(ctx.mm(w("attn_v"), cur), "Vcur", il)
        q = b.reshape(q, head, f.n_head[il], c.n_tokens)
        k = b.reshape(k, head, f.n_head_kv[il], c.n_tokens)
        v = b.reshape(v, head, f.n_head_kv[il], c.n_tokens)
        rel_b = ctx.w(f"enc.blk.{il}.attn_rel_b.weight", il) or w("attn_rel_b", 0)
        cur = _attn(ctx, inp, q, k, v, _pos_bias(ctx, pos_bucket, rel_b), il)
        cur = ctx.cb(ctx.mm(w("attn_o"), cur), "kqv_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        cur = ctx.cb(ctx.norm(ffn_inp, w("ffn_norm"), il), "ffn_norm", il)
        if ctx.w(f"enc.blk.{il}.ffn_gate.weight", il) is None:
            raise GraphBuildError(f"{f.path}: T5's ReLU FFN (no ffn_gate) is not modelled")
        up = ctx.cb(ctx.mm(w("ffn_up"), cur), "ffn_up", il)
        cur = ctx.cb(ctx.mm(w("ffn_gate"), cur), "ffn_gate", il)
        cur = ctx.cb(b.glu_split(cur, up, "GEGLU"), "ffn_geglu", il)
        cur = ctx.cb(ctx.mm(w("ffn_down"), cur), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    cur = ctx.cb(inpL, "result_embd", -1)
    cur = ctx.norm(cur, ctx.w("enc.output_norm.weight", -1), -1)
    ctx.embd_out(cur, "result_norm")


def _pos_bias(ctx: GraphContext, pos_bucket: T, rel_b: T) -> T:
    """build_pos_bias (src/llama-graph.cpp): the bias's rows for each bucket, as
    n_tokens x n_tokens x n_head, contiguous."""
    b = ctx.b
    flat = ctx.cb(b.reshape(pos_bucket, pos_bucket.ne[0] * pos_bucket.ne[1]), "pos_bucket_1d", -1)
    bias = b.get_rows(rel_b, flat)
    bias = b.reshape(bias, bias.ne[0], pos_bucket.ne[0], pos_bucket.ne[1])
    return ctx.cb(b.cont(b.permute(bias, 2, 0, 1, 3)), "pos_bias", -1)


def _attn(ctx: GraphContext, inp: NoCacheInput, q: T, k: T, v: T, kq_b: T, il: int) -> T:
    """build_attn over llm_graph_input_attn_no_cache with a KQ bias: build_attn_mha's path
    without flash attention whatever -fa says (use_flash_attn needs kq_b null), KQ plus the
    bias ("kq_plus_kq_b"), its soft max over the mask, KQV; "kqv_out"."""
    b = ctx.b
    for t in (q, k, v):
        b.expand(t)
    q = b.view(q, (q.ne[0], q.ne[1], q.ne[2], 1), (q.nb[1], q.nb[2], q.nb[2] * q.ne[2]), 0)
    q = b.permute(q, 0, 2, 1, 3)
    k = b.permute(k, 0, 2, 1, 3)
    v = b.permute(v, 0, 2, 1, 3)
    kq = ctx.cb(b.mul_mat(k, q), "kq", il)
    kq = ctx.cb(b.add(kq, kq_b), "kq_plus_kq_b", il)
    kq = ctx.cb(b.soft_max(kq, inp.mask), "kq_soft_max", il)
    v = ctx.cb(b.cont(b.transpose(v)), "v_cont", il)
    kqv = ctx.cb(b.mul_mat(v, kq), "kqv", il)
    cur = b.permute(kqv, 0, 2, 1, 3)
    cur = b.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
    b.expand(cur)
    return ctx.cb(cur, "kqv_out", il)
