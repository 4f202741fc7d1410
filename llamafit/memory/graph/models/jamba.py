"""src/models/jamba.cpp: llama_model_jamba::graph (Jamba: Mamba-1 and attention layers)."""

from __future__ import annotations

from ..build import GraphContext
from .mamba_base import mamba_layer


def build(ctx: GraphContext) -> None:
    """build_inp_mem_hybrid (the recurrent inputs, then the KV cache's); per layer an RMS norm,
    then Mamba-1 (mamba-base.cpp build_mamba_layer, with its dt, B and C norms) where n_head_kv
    is 0, else attention without RoPE (build_qkv, build_attn scaled by 1/sqrt(head), no wo
    bias); the residual inpL + cur, whose second operand jamba.cpp names "ffn_inp"; the FFN
    norm, a dense SiLU FFN or softmax experts whose weights are not normalised
    (expert_weights_scale, 0 in the files seen, scales them); the residual again."""
    f, b = ctx.f, ctx.b
    inpL = ctx.inp_embd(1.0)
    rs = ctx.inp_rs()
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        cur = ctx.attn_norm(inpL, il)
        if f.is_recurrent[il]:
            cur = mamba_layer(ctx, rs, cur, il)
        else:
            q, k, v = ctx.qkv(cur, il)
            cur = ctx.attn(inp, ctx.wo(il), None, q, k, v, il, False)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        ffn_inp = b.add(inpL, cur)
        ctx.cb(cur, "ffn_inp", il)
        cur = ctx.cb(ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is None:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
        else:
            cur = ctx.cb(ctx.moe_ffn(cur, il, norm_w=False), "ffn_moe_out", il)
        inpL = ctx.cb(b.add(ffn_inp, cur), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
