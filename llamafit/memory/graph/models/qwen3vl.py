"""src/models/qwen3vl.cpp and qwen3vlmoe.cpp: llama_model_qwen3vl::graph and
llama_model_qwen3vlmoe::graph (Qwen3-VL's text model)."""

from __future__ import annotations

from ..build import GraphContext
from ..params import GraphBuildError


def graph(ctx: GraphContext, moe: bool) -> None:
    """qwen3.cpp's layer with IMRoPE (ggml_rope_multi over four positions a token): Q/K RMS
    norms, a dense SwiGLU FFN (qwen3vlmoe: softmax experts, weights normalised); after each of
    the first n_deepstack_layers layers, that layer's slice of the wider input embedding added
    ("deepstack_out"). The output pad of a codec head (n_vocab in above out: Qwen3-TTS) is not
    modelled."""
    f, b, n_tokens = ctx.f, ctx.b, ctx.c.n_tokens
    output = ctx.tensors.get("output.weight")
    tok_embd = ctx.tensors.get("token_embd.weight")
    if output is not None and tok_embd is not None and output[1][1] != tok_embd[1][1]:
        raise GraphBuildError(f"{f.path}: a padded codec head is not modelled")
    inpL = ctx.inp_embd(1.0)
    # None before inp_embd_both (PR #18898): qwen3vl.cpp added the deepstack slices only for an
    # embeddings batch (ubatch.embd), none in a text batch's graph
    t_inp_embd = ctx.t_inp_embd
    inp_pos = ctx.inp_pos(4)
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
        q = b.rope(q, inp_pos, None)
        k = ctx.cb(ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il), "Kcur_normed", il)
        k = b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        if moe:
            cur = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        else:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
        if t_inp_embd is not None and il < f.n_deepstack_layers:
            row = t_inp_embd.nb[1]
            ds = b.view(t_inp_embd, (f.n_embd, n_tokens), (row,), (il + 1) * f.n_embd * 4)
            cur = ctx.cb(b.add(cur, ds), "deepstack_out", il)
        inpL = cur
    ctx.finish(ctx.lm_head(inpL))


def build(ctx: GraphContext) -> None:
    """qwen3vl.cpp's graph."""
    graph(ctx, moe=False)
