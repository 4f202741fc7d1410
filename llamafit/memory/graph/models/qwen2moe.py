"""src/models/qwen2moe.cpp: llama_model_qwen2moe::graph (Qwen1.5-MoE, Qwen2-57B-A14B)."""

from __future__ import annotations

from ..build import GraphContext


def build(ctx: GraphContext) -> None:
    """qwen2.cpp's attention (Q/K/V biases, RoPE without factors, wo's bias where the file has
    one) and in every layer softmax experts (weights not normalised) plus the shared FFN times
    its one-row gate's sigmoid, computed as silu(x) / x ("ffn_shexp_gate")."""
    b = ctx.b
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        moe = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False), "ffn_moe_out", il)
        gate_w = ctx.need(ctx.lw(il, "ffn_gate_inp_shexp.weight"), "ffn_gate_inp_shexp")
        gate_inp = ctx.cb(ctx.mm(gate_w, cur), "ffn_shexp_gate_inp", il)
        gate = ctx.cb(b.div(b.unary(gate_inp, "SILU"), gate_inp), "ffn_shexp_gate", il)
        shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
        shared = ctx.cb(b.mul(shared, gate), "ffn_shexp_out", il)
        cur = ctx.cb(b.add(moe, shared), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
