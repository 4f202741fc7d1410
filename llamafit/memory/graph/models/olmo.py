"""src/models/olmo.cpp: llama_model_olmo::graph (OLMo, the first)."""

from __future__ import annotations

from ..build import GraphContext
from ..ggml import set_output
from ..params import GraphBuildError
from .llama import attention


def build(ctx: GraphContext) -> None:
    """llama.cpp's layer with LayerNorms that have neither weight nor bias (ggml_norm alone, the
    output's too), no attention biases, a SwiGLU FFN and the residual named "ffn_out" again; the
    (tied) output. Not modelled (GraphBuildError): clamp_kqv (build_qkv's ggml_clamp)."""
    b, f = ctx.b, ctx.f
    if f.clamp_kqv > 0.0:
        raise GraphBuildError(f"{f.path}: clamp_kqv is not modelled")
    inpL, inp_pos, inp, out_ids = ctx.inputs()
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.cb(ctx.layer_norm(inpL, None, None, il), "attn_norm", il)
        cur = attention(ctx, inp, cur, inp_pos, il, wo_b=False)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        cur = ctx.cb(ctx.layer_norm(ffn_inp, None, None, il), "ffn_norm", il)
        cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    cur = ctx.cb(ctx.layer_norm(inpL, None, None, -1), "result_norm", -1)
    set_output(cur)
    ctx.finish(ctx.mm(ctx.output_weight(), cur))
