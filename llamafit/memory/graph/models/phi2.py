"""src/models/phi2.cpp: llama_model_phi2::graph (Phi-2)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T, set_output


def build(ctx: GraphContext) -> None:
    """A parallel block: one LayerNorm with bias feeds the attention (Q/K/V with biases or the
    fused attn_qkv, partial RoPE, Q scaled, the output projection's bias) and a GELU FFN without
    a gate (up and down with biases, LLM_FFN_SEQ), both added to the layer input; the output
    LayerNorm with bias and the logits' bias ("result_output_no_bias")."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        attn_norm = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        q, k, v = ctx.qkv(attn_norm, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        q = b.scale(q)
        wo_b = ctx.lw(il, "attn_output.bias")
        cur = ctx.attn(inp, ctx.wo(il), wo_b, q, k, v, il, False)
        cur, inpL, attn_norm = ctx.out_rows(il, out_ids, cur, inpL, attn_norm)
        ffn_out = ctx.cb(ffn_gelu(ctx, attn_norm, il), "ffn_out", il)
        cur = b.add(b.add(cur, ffn_out), inpL)
        inpL = ctx.cb(cur, "l_out", il)
    logits = ctx.cb(layer_norm_head(ctx, inpL), "result_output_no_bias", -1)
    ctx.finish(b.add(logits, ctx.need(ctx.w("output.bias", -2), "output.bias")))


def layer_norm_head(ctx: GraphContext, inpL: T) -> T:
    """The output LayerNorm with its bias ("result_norm", an output) and the logits over the
    output matrix (phi2.cpp, starcoder2.cpp, gpt2.cpp)."""
    out_w, out_b = ctx.w("output_norm.weight", -2), ctx.w("output_norm.bias", -2)
    cur = ctx.cb(ctx.layer_norm(inpL, out_w, out_b, -1), "result_norm", -1)
    set_output(cur)
    return ctx.mm(ctx.output_weight(), cur)


def ffn_gelu(ctx: GraphContext, cur: T, il: int, geglu: bool = False) -> T:
    """build_ffn, LLM_FFN_GELU without a gate: up (+ bias), GELU, down (+ bias); geglu:
    LLM_FFN_GEGLU, ggml_geglu of the two halves of a double-wide ffn_up (jina-bert-v2)."""
    b = ctx.b
    up = ctx.need(ctx.lw(il, "ffn_up.weight"), "ffn_up")
    down = ctx.need(ctx.lw(il, "ffn_down.weight"), "ffn_down")
    up_b, down_b = ctx.lw(il, "ffn_up.bias"), ctx.lw(il, "ffn_down.bias")
    cur = ctx.cb(ctx.mm(up, cur), "ffn_up", il)
    if up_b is not None:
        cur = ctx.cb(b.add(cur, up_b), "ffn_up_b", il)
    if geglu:
        cur = ctx.cb(b.glu(cur, "GEGLU"), "ffn_geglu", il)
    else:
        cur = ctx.cb(b.unary(cur, "GELU"), "ffn_gelu", il)
    cur = ctx.mm(down, cur)
    if down_b is not None:
        ctx.cb(cur, "ffn_down", il)
        cur = b.add(cur, down_b)
    return cur
