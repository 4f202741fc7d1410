"""src/models/gemma4.cpp: llama_model_gemma4::graph, and the per-layer inputs and lm_head
gemma3n.cpp builds alike.
"""

from __future__ import annotations

import math

from ....builds import since
from ..build import GraphContext
from ..ggml import T, row_size, set_output
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """src/models/gemma4.cpp llama_model_gemma4::graph: the scaled embeddings and (E2B, E4B)
    the per-layer inputs; iSWA attention with Q/K norms, V RMS-normed, RoPE with rope_freqs in
    the full-attention layers, V = K where the file has no attn_v (attention_k_eq_v); the
    layers from n_layer_kv_from_start read an earlier layer's cache (Q only); a GELU FFN and,
    where ffn_gate_inp is, routed experts beside it (the router's logits from its own norm,
    merged gate_up experts); the per-layer embedding and the layer's output scale; the output
    rows picked after the output norm (h_nextn, an output: cparams.embeddings_nextn_masked
    is false), the tied output a tensor of its own (_sharing), logit soft-capping.
    Before rule gemma4_out_rows_norm the output rows are picked in the last layer (after the
    attention, with its residual and its per-layer input); before gemma4_ple_expand the
    per-layer token rows join the graph where layer 0 first reads them (gemma4-iswa.cpp
    get_per_layer_inputs; llama-cpp-python 0.3.20's source, the graphs of b8660 and b8683)."""
    f, b = ctx.f, ctx.b
    rows_norm = since("gemma4_out_rows_norm", ctx.c.build)
    inpL = ctx.cb(ctx.inp_embd(math.sqrt(f.n_embd)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_iswa(reuse=True)
    out_ids = ctx.inp_out_ids()
    per_layer = None
    if "per_layer_token_embd.weight" in ctx.tensors:
        expand = since("gemma4_ple_expand", ctx.c.build)
        per_layer = inp_per_layer(ctx, inpL, expand, output_layer=not expand)
    n_tokens = ctx.c.n_tokens

    def scale(il: int, part: str) -> T | None:
        return ctx.lw(il, f"{part}.scale")

    def mm(il: int, part: str, cur: T) -> T:
        w = ctx.need(ctx.lw(il, f"{part}.weight"), part)
        return ctx.mm_s(w, cur, scale(il, part))

    for il in ctx.layers():
        head, n_head, n_head_kv = ctx.head_k(il), f.n_head[il], f.n_head_kv[il]
        cur = ctx.attn_norm(inpL, il)
        factors = None if f.swa.is_swa[il] else ctx.w("rope_freqs.weight", il)
        if ctx.lw(il, "attn_qkv.weight") is not None:
            raise GraphBuildError(f"{f.path}: fused attn_qkv is not modelled")
        q = ctx.cb(mm(il, "attn_q", cur), "Qcur", il)
        q = b.reshape(q, head, n_head, n_tokens)
        q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
        q = ctx.cb(b.rope(q, inp_pos, factors), "Qcur_pos", il)
        inp = swa if f.swa.is_swa[il] else base
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        wo_s = scale(il, "attn_output")
        if f.has_kv[il]:
            k = ctx.cb(mm(il, "attn_k", cur), "Kcur", il)
            v = mm(il, "attn_v", cur) if ctx.lw(il, "attn_v.weight") is not None else k
            ctx.cb(v, "Vcur", il)
            k = b.reshape(k, head, n_head_kv, n_tokens)
            v = b.reshape(v, head, n_head_kv, n_tokens)
            k = ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il)
            v = b.rms_norm(v)
            ctx.cb(k, "Kcur_normed", il)
            ctx.cb(v, "Vcur_normed", il)
            k = ctx.cb(b.rope(k, inp_pos, factors), "Kcur_pos", il)
            cur = ctx.attn(inp, wo, None, q, k, v, il, True, wo_s=wo_s)
        else:
            cur = ctx.attn(inp, wo, None, q, None, None, il, True, wo_s=wo_s)
        if not rows_norm:
            cur, inpL = ctx.out_rows(il, out_ids, cur, inpL)
        cur = ctx.norm(cur, ctx.lw(il, "post_attention_norm.weight"), il)
        cur = ctx.cb(cur, "attn_post_norm", il)
        attn_out = ctx.cb(b.add(cur, inpL), "attn_out", il)
        cur = _ffn(ctx, attn_out, il)
        cur = ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), -1)
        cur = ctx.cb(cur, "ffn_post_norm", il)
        cur = b.add(cur, attn_out)
        if per_layer is not None:
            cur = _per_layer_embd(ctx, cur, per_layer, il, None if rows_norm else out_ids)
        out_scale = ctx.lw(il, "layer_output_scale.weight")
        if out_scale is not None:
            cur = ctx.cb(b.mul(cur, out_scale), "out_scaled", il)
        inpL = ctx.cb(cur, "l_out", il)
    _output(ctx, inpL, out_ids if rows_norm else None)


def _output(ctx: GraphContext, inpL: T, out_ids: T | None) -> None:
    """The output norm; out_ids: the output rows picked after it, the normed rows of every
    token an output too (h_nextn; from rule gemma4_out_rows_norm); the lm_head."""
    cur = ctx.norm(inpL, ctx.w("output_norm.weight", -2), -1)
    if out_ids is not None:
        set_output(ctx.cb(cur, "h_nextn", -1))
        cur = ctx.b.get_rows(cur, out_ids)
    cur = ctx.cb(cur, "result_norm", -1)
    set_output(cur)
    gemma_logits(ctx, cur)


def _ffn(ctx: GraphContext, attn_out: T, il: int) -> T:
    """The layer's FFN: a GELU FFN, or where the layer has a router, _ffn_moe."""
    if ctx.lw(il, "ffn_gate_inp.weight") is not None:
        return _ffn_moe(ctx, attn_out, il)
    cur = ctx.cb(ctx.norm(attn_out, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
    return ctx.cb(ctx.ffn(cur, il, "gelu", False, scales=True), "ffn_out", il)


def _ffn_moe(ctx: GraphContext, attn_out: T, il: int) -> T:
    """A MoE layer's FFN: the dense GELU FFN (its own norms) beside the routed experts, whose
    router reads attn_out RMS-normed, scaled and times ffn_gate_inp.scale."""
    b = ctx.b
    mlp = ctx.norm(attn_out, ctx.lw(il, "ffn_norm.weight"), il)
    mlp = ctx.ffn(ctx.cb(mlp, "ffn_norm_1", il), il, "gelu", False, scales=True)
    mlp = ctx.norm(mlp, ctx.lw(il, "post_ffw_norm_1.weight"), il)
    mlp = ctx.cb(mlp, "ffn_mlp", il)
    moe = ctx.norm(attn_out, ctx.lw(il, "pre_ffw_norm_2.weight"), il)
    moe = ctx.cb(moe, "ffn_norm_2", il)
    tmp = b.scale(b.rms_norm(attn_out))
    tmp = b.mul(tmp, ctx.need(ctx.lw(il, "ffn_gate_inp.scale"), "ffn_gate_inp.scale"))
    router = ctx.need(ctx.lw(il, "ffn_gate_inp.weight"), "ffn_gate_inp")
    logits = ctx.cb(ctx.mm(router, tmp), "ffn_moe_logits", il)
    moe = ctx.moe_ffn(moe, il, act="gelu", probs_in=logits, w_scale=1.0, gate_up=True, scales=True)
    moe = ctx.norm(moe, ctx.lw(il, "post_ffw_norm_2.weight"), il)
    moe = ctx.cb(moe, "ffn_moe", il)
    return ctx.cb(b.add(mlp, moe), "ffn_moe_combined", il)


def _per_layer_embd(ctx: GraphContext, cur: T, per_layer: T, il: int, out_ids: T | None) -> T:
    """The layer's per-layer embedding: its gate (GELU) times its slice of the per-layer
    inputs, projected, normed, added to the layer's output; out_ids: the last layer's slice is
    cut to the output rows first (before rule gemma4_out_rows_norm)."""
    b = ctx.b
    pe_in = ctx.cb(cur, "pe_in", il)
    gate = ctx.need(ctx.lw(il, "inp_gate.weight"), "inp_gate")
    cur = b.unary(ctx.mm(gate, cur), "GELU")
    this = slice_2d(ctx, per_layer, il)
    if out_ids is not None:
        (this,) = ctx.out_rows(il, out_ids, this)
    cur = ctx.mm(ctx.need(ctx.lw(il, "proj.weight"), "proj"), b.mul(cur, this))
    cur = ctx.norm(cur, ctx.lw(il, "post_norm.weight"), il)
    cur = ctx.cb(cur, "per_layer_embd_out", il)
    return b.add(pe_in, cur)


def inp_per_layer(ctx: GraphContext, inpL: T, expand: bool = True, output_layer: bool = False) -> T:
    """llama_model_gemma4::graph's build_inp_per_layer and project_per_layer_inputs: the
    per-layer token rows (their own token input), plus the projection of the scaled
    embeddings, normed; [n_embd_per_layer, n_tokens, n_layer]. expand: the token rows are
    expanded into the graph first (before rules gemma3n_ple_expand and gemma4_ple_expand: not).
    output_layer: the three per-layer tensors live with the output layer (LLM_TENSOR_LAYER_OUTPUT
    in LLM_TENSOR_INFOS, llama-arch.cpp of llama-cpp-python 0.3.17 and 0.3.20; 0.3.21's has the
    token rows an input-layer tensor and the projection and its norm layer 0's: LAYER_INPUT,
    LAYER_REPEATING made with block 0), before those rules (b8739, the same change)."""
    b, n_tokens = ctx.b, ctx.c.n_tokens
    lay_in, lay_0 = (-2, -2) if output_layer else (-1, 0)
    table = ctx.need(ctx.w("per_layer_token_embd.weight", lay_in), "per_layer_token_embd")
    n_per_layer = table.ne[0] // ctx.n_layer
    tokens = b.new("i32", n_tokens, inp=True)
    sel = b.reshape(b.get_rows(table, tokens), n_per_layer, ctx.n_layer, n_tokens)
    sel = ctx.cb(b.scale(sel), "inp_per_layer_selected", -1)
    if expand:
        b.expand(sel)
    # per_layer_model_proj / _proj_norm: LLM_TENSOR_LAYER_REPEATING, made for layer 0
    proj_w = ctx.need(ctx.w("per_layer_model_proj.weight", lay_0), "per_layer_model_proj")
    proj = b.scale(ctx.mm(proj_w, inpL))
    proj = b.reshape(proj, n_per_layer, ctx.n_layer, n_tokens)
    proj = ctx.norm(proj, ctx.w("per_layer_proj_norm.weight", lay_0), -1)
    proj = ctx.cb(proj, "per_layer_proj", -1)
    out = ctx.cb(b.scale(b.add(proj, sel)), "inp_per_layer", -1)
    return b.cont(b.permute(out, 0, 2, 1, 3))


def gemma_logits(ctx: GraphContext, cur: T) -> None:
    """The lm_head of gemma4.cpp and gemma3n.cpp: the tied output a tensor of its own (made
    before token_embd, _sharing), its scale for an NVFP4 output (llama_model::load_tensors
    loads output.scale for that type only), logit soft-capping."""
    output = ctx.w("output.weight", -2)
    if output is None:
        output = ctx.w("token_embd.weight", -2, as_name="token_embd.weight", own=True)
    output = ctx.need(output, "token_embd.weight")
    out_s = ctx.w("output.scale", -2) if output.type == "nvfp4" else None
    cur = ctx.mm_s(output, cur, out_s)
    ctx.finish(ctx.softcap(cur))


def slice_2d(ctx: GraphContext, x: T, idx: int) -> T:
    """gemma3n_view_2d_slice: the idx-th [ne0, ne1] matrix of a 3-D tensor, as a view (gemma4's
    per-layer input of layer idx is the same view)."""
    ne0, ne1 = x.ne[0], x.ne[1]
    row = row_size(x.type, ne0)
    return ctx.b.view(x, (ne0, ne1), (row,), idx * ne1 * row)
