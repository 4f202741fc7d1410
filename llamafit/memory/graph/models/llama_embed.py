"""src/models/llama-embed.cpp: llama_model_llama_embed::build_arch_graph, llama.cpp's
llama_model_llama::graph<true> (Llama Nemotron Embed: a Llama without causal attention or an
output layer)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput


def build(ctx: GraphContext) -> None:
    """llama.cpp's layers over the ubatch itself (graph<true>: build_attn_inp_no_cache; the
    model keeps its KV cache, which the graph does not read), RoPE with rope_freqs, the attention
    output's bias where the file has one ("attn_out"), the FFN's biases, routed experts where a
    layer has ffn_gate_inp; the output norm is "result_norm" (res->t_embd), no lm_head."""
    b = ctx.b
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il, factors)
        wo_b = ctx.lw(il, "attn_output.bias")
        cur = ctx.cb(ctx.attn_no_cache(inp, ctx.wo(il), wo_b, q, k, v, il), "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.ffn_or_moe(cur, il, True)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    ctx.embd_out(cur, "result_norm")
