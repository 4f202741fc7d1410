"""src/models/bert.cpp: llama_model_bert::graph, the graph of bert and of the variants that share
it (nomic-bert, nomic-bert-moe, jina-bert-v2 and jina-bert-v3 build llama_model_bert::graph
too; src/models/models.h)."""

from __future__ import annotations

from ..build import GraphContext, NoCacheInput
from ..ggml import T
from ..params import GraphBuildError
from .phi2 import ffn_gelu

# the archs whose Q and K are rotated (bert.cpp: ggml_rope_ext for these; bert learns positions)
ROPE_ARCHS = frozenset({"nomic-bert", "nomic-bert-moe", "jina-bert-v3"})
# the archs whose dense FFN is the gate-less GELU one with biases (LLM_FFN_GELU, LLM_FFN_SEQ);
# nomic-bert's is a SwiGLU without biases (LLM_FFN_SILU, LLM_FFN_PAR)
GELU_ARCHS = frozenset({"bert", "nomic-bert-moe", "jina-bert-v3"})


def build(ctx: GraphContext) -> None:
    """Positions (none for jina-bert-v2), the token embeddings plus the first token type's row (token types are taken
    as 0, "Sentence A") and, for bert, the learned positions' rows (the sum named "inp_embd"),
    the embeddings' LayerNorm in layer 0 ("inp_norm"); post-norm layers over the ubatch itself
    (build_attn_inp_no_cache): Q/K/V with biases or the fused attn_qkv, Q/K LayerNorms where the
    layer has them, RoPE where the arch has it, the output projection's bias, the residual and
    attn_output_norm (and attn_norm_2 over the input re-added), the FFN, the residual and
    layer_output_norm; the last layer's output is "result_embd" (res->t_embd)."""
    b, f = ctx.b, ctx.f
    arch = f.architecture
    # jina-bert-v2 has no positions (ALiBi: a soft max / flash attention parameter)
    inp_pos = ctx.inp_pos() if arch != "jina-bert-v2" else None
    inpL = ctx.inp_embd(1.0)
    type_embd = ctx.w("token_types.weight", -1)
    if type_embd is not None:
        inpL = b.add(inpL, b.view(type_embd, (f.n_embd,), (), 0))
    if arch == "bert":
        assert inp_pos is not None
        pos_embd = ctx.need(ctx.w("position_embd.weight", -1), "position_embd.weight")
        inpL = b.add(b.get_rows(pos_embd, inp_pos), inpL)
    ctx.cb(inpL, "inp_embd", -1)
    # token_embd_norm: llm_tensor_info LLM_TENSOR_LAYER_REPEATING, made in layer 0's buffer
    norm_w, norm_b = ctx.w("token_embd_norm.weight", 0), ctx.w("token_embd_norm.bias", 0)
    inpL = ctx.cb(ctx.layer_norm(inpL, norm_w, norm_b, 0), "inp_norm", 0)
    inp = NoCacheInput(ctx)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        q, k, v = ctx.qkv(inpL, il)
        q = _head_norm(ctx, q, "attn_q_norm", il)
        k = _head_norm(ctx, k, "attn_k_norm", il)
        if arch in ROPE_ARCHS:
            assert inp_pos is not None
            q = b.rope(q, inp_pos, None)
            k = b.rope(k, inp_pos, None)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        wo_b = ctx.lw(il, "attn_output.bias")
        cur = ctx.attn_no_cache(inp, ctx.wo(il), wo_b, q, k, v, il)
        ctx.cb(cur, "kqv_out", il)
        cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        cur = b.add(cur, inpL)
        cur = _layer_norm(ctx, cur, "attn_output_norm", il)
        if ctx.lw(il, "attn_norm_2.weight") is not None:  # jina-bert-v2: the input re-added
            cur = _layer_norm(ctx, b.add(cur, inpL), "attn_norm_2", il)
        ffn_inp = ctx.cb(cur, "ffn_inp", il)
        cur = _ffn(ctx, cur, il)
        cur = b.add(cur, ffn_inp)
        inpL = _layer_norm(ctx, cur, "layer_output_norm", il)
    ctx.embd_out(inpL, "result_embd")


def _layer_norm(ctx: GraphContext, cur: T, part: str, il: int) -> T:
    """build_norm, LLM_NORM, with the layer's `part` weight and bias."""
    return ctx.layer_norm(cur, ctx.lw(il, f"{part}.weight"), ctx.lw(il, f"{part}.bias"), il)


def _head_norm(ctx: GraphContext, t: T, part: str, il: int) -> T:
    """jina-bert-v2's Q or K LayerNorm where the layer has one: over the whole row (reshaped to
    2-D and back)."""
    w = ctx.lw(il, f"{part}.weight")
    if w is None:
        return t
    b = ctx.b
    head, n_head, n_tokens = t.ne[0], t.ne[1], t.ne[2]
    cur = b.reshape(t, head * n_head, n_tokens)
    cur = ctx.layer_norm(cur, w, ctx.lw(il, f"{part}.bias"), il)
    return b.reshape(cur, head, n_head, n_tokens)


def _ffn(ctx: GraphContext, cur: T, il: int) -> T:
    """The layer's FFN: nomic-bert-moe's experts every moe_every_n_layers-th layer (the layers
    with a router: build_moe_ffn, GELU experts without a gate, softmax gating, weights not
    normalised, "ffn_moe_out"); else ("ffn_out") the GELU FFN of bert, nomic-bert-moe and
    jina-bert-v3; jina-bert-v2's GEGLU (LLM_FFN_PAR: over a gate beside ffn_up, or ggml_geglu
    of an ffn_up twice n_ff wide) with biases; nomic-bert's SwiGLU."""
    f = ctx.f
    if ctx.lw(il, "ffn_gate_inp.weight") is not None:
        if f.moe is None:
            raise GraphBuildError(f"{f.path}: a router without experts")
        return ctx.moe_ffn(cur, il, norm_w=False, act="gelu")
    if f.architecture in GELU_ARCHS:
        cur = ffn_gelu(ctx, cur, il)
    elif f.architecture == "jina-bert-v2":
        up = ctx.need(ctx.lw(il, "ffn_up.weight"), "ffn_up")
        geglu = ctx.lw(il, "ffn_gate.weight") is None and up.ne[1] != f.n_ff[il]
        cur = ffn_gelu(ctx, cur, il, geglu=True) if geglu else ctx.ffn(cur, il, "gelu", True)
    else:
        cur = ctx.ffn(cur, il, "silu", False)
    return ctx.cb(cur, "ffn_out", il)
