"""src/models/modern-bert.cpp: llama_model_modern_bert::graph (ModernBERT)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput
from ..params import GraphBuildError

# llama-model.cpp LLM_FFN_OP_TYPES_FROM_STRING (an unknown name falls back to GEGLU) -> the
# gate-less GLU build_ffn makes of the double-wide ffn_up
GLU_OF_ACTIVATION = {"gelu": "GEGLU", "geglu": "GEGLU", "silu": "SWIGLU", "swish": "SWIGLU"}
GLU_OF_ACTIVATION |= {"swiglu": "SWIGLU", "reglu": "REGLU"}


def build(ctx: GraphContext) -> None:
    """The embeddings' LayerNorm without bias in layer 0 ("inp_norm"); pre-norm layers over the
    ubatch itself (build_attn_inp_no_cache, made after the output ids; the SWA layers on the
    second mask): a LayerNorm without bias (none in layer 0), the fused attn_qkv, RoPE, the
    attention ("kqv_out"), the residual ("ffn_inp"), the FFN's LayerNorm and a gate-less GEGLU
    over the double-wide ffn_up (LLM_FFN_GEGLU, LLM_FFN_SEQ: ggml_geglu; the GLU that
    <arch>.hidden_activation names, b11311 on: before, GEGLU, of the same shapes), the residual;
    the output LayerNorm is "final_norm_out" (res->t_embd). Not modelled: a ReLU FFN
    (hidden_activation relu) and the decision head (<arch>.decision.block_count)."""
    f, b = ctx.f, ctx.b
    if f.n_layer_decision or f.hidden_activation == "relu":
        raise GraphBuildError(f"{f.path}: ModernBERT's decision head or ReLU FFN")
    glu = GLU_OF_ACTIVATION.get(f.hidden_activation, "GEGLU")
    inp_pos = ctx.inp_pos()
    inpL = ctx.cb(ctx.inp_embd(1.0), "inp_embd", -1)
    norm_w = ctx.w("token_embd_norm.weight", 0)  # LLM_TENSOR_LAYER_REPEATING: layer 0's buffer
    inpL = ctx.cb(ctx.layer_norm(inpL, norm_w, None, 0), "inp_norm", 0)
    out_ids = ctx.inp_out_ids()
    inp = NoCacheInput(ctx)
    for il in ctx.layers():
        cur = inpL
        attn_norm = ctx.lw(il, "attn_norm.weight")
        if attn_norm is not None:
            cur = ctx.cb(ctx.layer_norm(inpL, attn_norm, None, il), "attn_norm", il)
        q, k, v = ctx.qkv(cur, il)
        q, k = ctx.rope_qkv(q, k, v, inp_pos, il)
        cur = ctx.cb(ctx.attn_no_cache(inp, ctx.wo(il), None, q, k, v, il), "kqv_out", il)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        ffn_inp = ctx.cb(b.add(cur, inpL), "ffn_inp", il)
        cur = ctx.layer_norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), None, il)
        cur = ctx.cb(cur, "ffn_norm", il)
        up = ctx.need(ctx.lw(il, "ffn_up.weight"), "ffn_up")
        down = ctx.need(ctx.lw(il, "ffn_down.weight"), "ffn_down")
        cur = ctx.cb(ctx.mm(up, cur), "ffn_up", il)
        cur = ctx.cb(b.glu(cur, glu), "ffn_" + glu.lower(), il)
        inpL = b.add(ctx.mm(down, cur), ffn_inp)
    cur = ctx.layer_norm(inpL, ctx.w("output_norm.weight", -2), None, -1)
    ctx.embd_out(cur, "final_norm_out")
