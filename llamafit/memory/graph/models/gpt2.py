"""src/models/gpt2.cpp: llama_model_gpt2::graph (GPT-2)."""

from __future__ import annotations

from collections.abc import Callable

from ..build import AttnInput, GraphContext
from ..ggml import T
from .phi2 import ffn_gelu, layer_norm_head


def build(ctx: GraphContext) -> None:
    """Learned positions (position_embd rows by inp_pos, added: "pos_embd", "inpL"), a
    sequential block: LayerNorms with bias before the attention (the fused attn_qkv with its
    bias, no RoPE, the output projection's bias) and before a gate-less GELU FFN with biases;
    the output LayerNorm with bias, the (tied) output."""
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv()
    inpL = add_positions(ctx, inpL, inp_pos)
    blocks(ctx, inpL, inp)


def add_positions(ctx: GraphContext, inpL: T, inp_pos: T) -> T:
    """The learned positions' rows (position_embd by inp_pos, "pos_embd") added to the token
    rows ("inpL"): gpt2.cpp, starcoder.cpp, mpt.cpp."""
    pos_embd = ctx.need(ctx.w("position_embd.weight", -1), "position_embd.weight")
    pos = ctx.cb(ctx.b.get_rows(pos_embd, inp_pos), "pos_embd", -1)
    return ctx.cb(ctx.b.add(inpL, pos), "inpL", -1)


def blocks(
    ctx: GraphContext,
    inpL: T,
    inp: AttnInput,
    ffn: Callable[[GraphContext, T, int], T] = ffn_gelu,
) -> None:
    """build_inp_out_ids, then the layers of gpt2.cpp, starcoder.cpp, bloom.cpp, mpt.cpp and
    jais.cpp: a LayerNorm (bias where the file has one) before the attention (the fused
    attn_qkv and its bias, no RoPE, the output projection's bias) and before the FFN (a
    gate-less GELU one; jais: a gated SiLU one), each added to its input; the output LayerNorm
    and the logits."""
    b = ctx.b
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        norm_w, norm_b = ctx.lw(il, "attn_norm.weight"), ctx.lw(il, "attn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, il), "attn_norm", il)
        q, k, v = ctx.qkv(cur, il)
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        ffn_inp = ctx.cb(b.add(cur, inpL), "ffn_inp", il)
        norm_w, norm_b = ctx.lw(il, "ffn_norm.weight"), ctx.lw(il, "ffn_norm.bias")
        cur = ctx.cb(ctx.layer_norm(ffn_inp, norm_w, norm_b, il), "ffn_norm", il)
        cur = ctx.cb(ffn(ctx, cur, il), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(layer_norm_head(ctx, inpL))
