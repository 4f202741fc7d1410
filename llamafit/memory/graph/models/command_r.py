"""src/models/command-r.cpp and cohere2.cpp: llama_model_command_r::graph and
llama_model_cohere2::graph (Command R, Command R+, Command R7B, Command A)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T, set_output
from ..params import GraphBuildError


def graph(ctx: GraphContext, cohere2: bool) -> None:
    """A parallel block: one LayerNorm (LLM_NORM) feeds the attention and the SwiGLU FFN, whose
    outputs are added to the layer input; Q and K LayerNorm-ed where the file has attn_q_norm /
    attn_k_norm (Command R+; command-r.cpp); the logits scaled by f_logit_scale where set.
    cohere2: iSWA caches and RoPE only in the sliding-window layers (with the rope factors)."""
    f, b = ctx.f, ctx.b
    if cohere2:
        ctx.no_long_rope()
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_attn_maybe_iswa(cohere2)
    iswa = cohere2  # build_attn_inp_kv_iswa: cohere2's swa_type is always standard
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        if ctx.lw(il, "attn_norm.bias") is not None:
            raise GraphBuildError(f"{f.path}: a LayerNorm bias is not modelled for this arch")
        cur = ctx.layer_norm(inpL, ctx.lw(il, "attn_norm.weight"), None, il)
        cur = ctx.cb(cur, "attn_norm", il)
        ffn_inp = cur
        q, k, v = ctx.qkv(cur, il)
        if cohere2:
            if f.swa.is_swa[il]:
                factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
                q = b.rope(q, inp_pos, factors)
                k = b.rope(k, inp_pos, factors)
        else:
            q_norm = ctx.lw(il, "attn_q_norm.weight")
            if q_norm is not None:
                q = ctx.cb(ctx.layer_norm(q, q_norm, None, il), "Qcur", il)
            q = b.rope(q, inp_pos, None)
            k_norm = ctx.lw(il, "attn_k_norm.weight")
            if k_norm is not None:
                k = ctx.cb(ctx.layer_norm(k, k_norm, None, il), "Kcur", il)
            k = b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        inp = swa if cohere2 and f.swa.is_swa[il] else base
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, iswa)
        cur, inpL, ffn_inp = ctx.out_rows(il, out_ids, cur, inpL, ffn_inp)
        attn_out = cur
        cur = ctx.cb(ctx.ffn(ffn_inp, il, "silu", False), "ffn_out", il)
        cur = b.add(cur, inpL)
        cur = b.add(cur, attn_out)
        inpL = ctx.cb(cur, "l_out", il)
    cur = ctx.layer_norm(inpL, ctx.w("output_norm.weight", -2), None, -1)
    logits = _lm_head(ctx, cur)
    if f.logit_scale:
        logits = b.scale(logits)
    ctx.finish(logits)


def _lm_head(ctx: GraphContext, cur: T) -> T:
    """result_norm (an output) and the logits over the (tied) output."""
    cur = ctx.cb(cur, "result_norm", -1)
    set_output(cur)
    output = ctx.output_weight()
    return ctx.mm(output, cur)


def build(ctx: GraphContext) -> None:
    """command-r.cpp's graph."""
    graph(ctx, cohere2=False)
