"""src/models/openai-moe-iswa.cpp: llama_model_openai_moe::graph (gpt-oss)."""

from __future__ import annotations

from ....builds import since
from ..build import GraphContext
from ..ggml import set_output


def build(ctx: GraphContext) -> None:
    """src/models/openai-moe.cpp llama_model_openai_moe::graph: iSWA attention with biases
    and sinks, a post-attention norm, the biased softmax-weight MoE with SWIGLU_OAI; the
    output rows picked after the last layer (cparams.embeddings_nextn_masked is false), whose
    input is an output too (t_h_nextn, llm_graph_result::set_outputs); before rule
    gptoss_out_rows_last inside the last layer, after the attention (openai-moe-iswa.cpp)."""
    f, b = ctx.f, ctx.b
    rows_last = since("gptoss_out_rows_last", ctx.c.build)
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_iswa()
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        q = ctx.cb(b.rope(q, inp_pos, None), "Qcur", il)
        k = ctx.cb(b.rope(k, inp_pos, None), "Kcur", il)
        ctx.cb(v, "Vcur", il)
        inp = swa if f.swa.is_swa[il] else base
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        wo_b = ctx.lw(il, "attn_output.bias")
        sinks = ctx.lw(il, "attn_sinks.weight")
        cur = ctx.attn(inp, wo, wo_b, q, k, v, il, True, sinks)
        cur = ctx.cb(cur, "attn_out", il)
        if not rows_last:
            cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        cur = ctx.norm(ffn_inp, ctx.lw(il, "post_attention_norm.weight"), il)
        cur = ctx.cb(cur, "attn_post_norm", il)
        cur = ctx.moe_ffn(
            cur, il, gating="softmax_weight", norm_w=False, act="swiglu_oai", biases=True
        )
        cur = ctx.cb(cur, "ffn_moe_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    if not rows_last:
        ctx.finish(ctx.lm_head(inpL))
        return
    set_output(inpL)  # res->t_h_nextn
    ctx.finish(ctx.lm_head(b.get_rows(inpL, out_ids)))
