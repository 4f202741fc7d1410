"""src/models/smallthinker.cpp: llama_model_smallthinker::graph<iswa> (SmallThinker)."""

from __future__ import annotations

from ..build import GATING, GraphContext
from ..kv_cache import has_swa


def build(ctx: GraphContext) -> None:
    """The router's logits from the layer input, before the attention (ffn_gate_inp over inpL,
    their output rows picked in the last layer), a Llama attention with RoPE except, with
    sliding-window layers, in every fourth (the full ones: n_no_rope_layer_step 4, else
    n_layer), iSWA caches where the model has them, then experts over those logits
    ({arch}.expert_gating_func, weights normalised) with a gated ReLU (ReGLU)."""
    f, b = ctx.f, ctx.b
    iswa = has_swa(f)
    step = 4 if iswa else ctx.n_layer
    gating = GATING.get(f.expert_gating_func, "sigmoid")
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_attn_maybe_iswa(iswa)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        use_rope = step == ctx.n_layer or il % step != 0
        router = ctx.need(ctx.lw(il, "ffn_gate_inp.weight"), "gate_inp")
        probs = ctx.cb(ctx.mm(router, inpL), "ffn_moe_logits", il)
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        if use_rope:
            q, k = b.rope(q, inp_pos, None), b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        inp = swa if f.swa.is_swa[il] else base
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, iswa)
        cur, inpSA, probs = ctx.out_rows(il, out_ids, cur, inpSA, probs)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        cur = ctx.moe_ffn(cur, il, gating=gating, act="relu", probs_in=probs)
        cur = ctx.cb(cur, "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
