"""src/models/llama.cpp: llama_model_llama::graph (dense or MoE FFN per layer); `attention`, the
self-attention block the Llama-like src/models/*.cpp share."""

from __future__ import annotations

from collections.abc import Callable

from ..build import AttnInput, GraphContext
from ..ggml import T


def attention(
    ctx: GraphContext,
    inp: AttnInput,
    cur: T,
    inp_pos: T,
    il: int,
    *,
    factors: T | None = None,
    rope: bool = True,
    temp: T | None = None,
    wo_b: bool = True,
) -> T:
    """build_qkv, ggml_rope_ext of Q and K (with the rope factors; rope False: a NoPE layer),
    Q times the attention temperature (inp_attn_scale, "Qcur_attn_temp_scaled") where the model
    has one, build_attn with wo and, wo_b, its bias where the file has one."""
    b = ctx.b
    q, k, v = ctx.qkv(cur, il)
    if rope:
        q = b.rope(q, inp_pos, factors)
        k = b.rope(k, inp_pos, factors)
    ctx.cb(q, "Qcur", il)
    ctx.cb(k, "Kcur", il)
    ctx.cb(v, "Vcur", il)
    if temp is not None:
        q = ctx.cb(b.mul(q, temp), "Qcur_attn_temp_scaled", il)
    bias = ctx.lw(il, "attn_output.bias") if wo_b else None
    return ctx.attn(inp, ctx.wo(il), bias, q, k, v, il, False)


def inp_attn_scale(ctx: GraphContext) -> T | None:
    """build_inp_attn_scale where the model has a temperature scale (f_attn_temp_scale)."""
    if ctx.f.attn_temp_scale == 0.0:
        return None
    return ctx.b.new("f32", 1, 1, ctx.c.n_tokens, name="inp_attn_scale", inp=True)


def graph(ctx: GraphContext, temp: bool = False) -> None:
    """llama.cpp's graph; temp: the temperature tuning mistral3.cpp adds (inp_attn_scale after
    inp_pos)."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    scale = inp_attn_scale(ctx) if temp else None
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        # llama_model::get_rope_factors: rope_freqs, one tensor per buffer type
        factors = ctx.w("rope_freqs.weight", il)
        cur = attention(ctx, inp, cur, inp_pos, il, factors=factors, temp=scale)
        ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.ffn_or_moe(cur, il, True)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))


def build(ctx: GraphContext) -> None:
    """RoPE with rope_freqs (llama_model::get_rope_factors), attention biases where the file has
    them, FFN biases, routed experts where a layer has ffn_gate_inp."""
    graph(ctx)


def layers(
    ctx: GraphContext,
    ffn: Callable[[T, int], T],
    *,
    factors: bool = True,
    attn_out: bool = False,
    sum_name: bool = False,
) -> None:
    """The Llama-like graphs that differ from llama.cpp's only by the FFN and a few names
    (exaone.cpp, arcee.cpp, deepseek.cpp, internlm2.cpp): ffn(ffn_norm output, il) is the FFN
    (named by the caller); factors: rope_freqs (llama_model::get_rope_factors); attn_out: the
    attention output named "attn_out"; sum_name: the FFN residual named "ffn_out" too."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        rope_factors = ctx.w("rope_freqs.weight", il) if factors else None
        cur = attention(ctx, inp, cur, inp_pos, il, factors=rope_factors)
        if attn_out:
            ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = b.add(ffn(cur, il), ffn_inp)
        if sum_name:
            ctx.cb(cur, "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
