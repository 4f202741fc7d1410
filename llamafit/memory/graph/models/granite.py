"""src/models/granite.cpp, granite-moe.cpp and granite-hybrid.cpp: Granite's graph."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import T
from ..params import GraphBuildError
from .mamba_base import mamba2_layer


def graph(ctx: GraphContext, hybrid: bool) -> None:
    """src/models/granite.cpp llama_model_granite::graph (granite; granitemoe's graph is this
    class, granite-moe.cpp) and src/models/granite-hybrid.cpp (granitehybrid): Granite's
    embedding, residual and logit scales around a llama layer with a dense or MoE FFN (shared
    experts when n_ff_shexp). The hybrid has Mamba-2 layers where n_head_kv is 0
    (build_inp_mem_hybrid: the recurrent inputs, then the KV cache's, then inp_pos); RoPE when
    llama_hparams::has_rope (granite and granitehybrid: rope.scaling.finetuned, default true;
    granitemoe: always); Granite Vision's deepstack inputs (dense granite only) are not. minicpm
    (minicpm.cpp: this graph class) ropes every layer with get_rope_factors' LongRoPE factors."""
    f, b = ctx.f, ctx.b
    minicpm = f.architecture == "minicpm"
    if not minicpm:
        ctx.no_long_rope()
    if f.n_deepstack_layers:  # granite.cpp's deepstack_in (Granite Vision 4.1)
        raise GraphBuildError(f"{f.path}: Granite Vision's deepstack inputs are not modelled")
    # llama_hparams::has_rope: granite.cpp and granite-hybrid.cpp fill rope_pattern with
    # rope.scaling.finetuned (default true); granite-moe.cpp leaves it set
    rope = f.architecture in ("granitemoe", "minicpm") or f.rope_finetuned is not False
    inpL = ctx.inp_embd(1.0, f.embedding_scale or (12.0 if minicpm else 0.0))
    inp_pos = ctx.inp_pos() if rope and not hybrid else None
    rs = ctx.inp_rs() if hybrid else None
    inp = ctx.inp_attn_kv()
    out_ids = ctx.inp_out_ids()
    if rope and hybrid:
        inp_pos = ctx.inp_pos()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        if rs is not None and f.is_recurrent[il]:
            cur = mamba2_layer(ctx, rs, cur, il)
        else:
            q, k, v = ctx.qkv(cur, il)
            if inp_pos is not None:
                factors = ctx.rope_factors(il)
                q = b.rope(q, inp_pos, factors)
                k = b.rope(k, inp_pos, factors)
            ctx.cb(q, "Qcur", il)
            ctx.cb(k, "Kcur", il)
            ctx.cb(v, "Vcur", il)
            wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
            cur = ctx.attn(inp, wo, ctx.lw(il, "attn_output.bias"), q, k, v, il, False)
            cur = ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        cur = _ffn(ctx, cur, inpSA, il, minicpm)
        inpL = ctx.cb(cur, "l_out", il)
    logits = ctx.lm_head(inpL)
    if f.logit_scale or not hybrid:  # granite.cpp scales by 1/f_logit_scale always
        logits = b.scale(logits)
    ctx.finish(logits)


def _ffn(ctx: GraphContext, cur: T, inpSA: T, il: int, minicpm: bool) -> T:
    """granite.cpp build_layer_ffn: the residual (scaled by f_residual_scale; minicpm.cpp
    load_arch_hparams defaults it to 1.4 / sqrt(n_layer)), the FFN norm, a dense FFN or routed
    experts (plus shared ones when n_ff_shexp), the scaled residual again."""
    f, b = ctx.f, ctx.b
    residual_scale = f.residual_scale or minicpm
    if residual_scale:
        cur = b.scale(cur)
    ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
    if ctx.lw(il, "ffn_gate_inp.weight") is None:
        cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
    else:
        moe = ctx.cb(ctx.moe_ffn(cur, il), "ffn_moe_out", il)
        if f.moe is not None and f.moe.n_ff_shexp > 0:
            shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
            cur = ctx.cb(b.add(moe, shared), "ffn_out", il)
        else:
            cur = moe
    if residual_scale:
        cur = b.scale(cur)
    return ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)


def build(ctx: GraphContext) -> None:
    """granite, granitemoe and minicpm: granite.cpp's graph (granite-moe.cpp, minicpm.cpp)."""
    graph(ctx, hybrid=False)
