"""src/models/gemma3n-iswa.cpp: llama_model_gemma3n::graph (AltUp, LAuReL)."""

from __future__ import annotations

import math

from ....builds import since
from ..build import GraphContext
from ..ggml import T, row_size, set_output
from ..params import GraphBuildError
from .gemma4 import gemma_logits, inp_per_layer, slice_2d


def build(ctx: GraphContext) -> None:
    """src/models/gemma3n.cpp llama_model_gemma3n::graph: the scaled embeddings, the per-layer
    inputs (build_inp_per_layer, project_per_layer_inputs: as gemma4's), the embeddings
    projected to n_altup streams (altup_proj, magnitudes matched); per layer AltUp's predict,
    the active stream through the attention norm, LAuReL beside iSWA attention (Q/K norms, V
    RMS-normed; the layers from n_layer_kv_from_start read an earlier layer's cache, Q only),
    a GELU FFN whose gate goes through gaussian_topk in the first n_layer_sparsity (10)
    layers, AltUp's correct and the per-layer input added to every stream but the first; then
    the streams merged (altup_unembd_proj), the output rows picked, the output norm, the
    tied output a tensor of its own (made before token_embd, _sharing), logit soft-capping.
    n_altup is altup_proj's third dimension plus one; i_altup_act is 0 (llama_hparams'
    default; load_arch_hparams reads neither). Before rule gemma3n_ple_expand the per-layer
    token rows (get_per_layer_inputs) join the graph where layer 0 first reads them, and the
    three per-layer tensors live with the output layer (llama-arch.cpp LLM_TENSOR_LAYER_OUTPUT,
    0.3.17 and 0.3.20)."""
    f, b = ctx.f, ctx.b
    act, n_layer_sparsity = 0, 10  # i_altup_act, llama_model_gemma3n::graph::n_layer_sparsity
    n_embd, n_tokens = f.n_embd, ctx.c.n_tokens
    inpL = ctx.cb(ctx.inp_embd(math.sqrt(n_embd)), "inp_scaled", -1)
    inp_pos = ctx.inp_pos()
    base, swa = ctx.inp_iswa(reuse=True)
    expand = since("gemma3n_ple_expand", ctx.c.build)
    per_layer = inp_per_layer(ctx, inpL, expand, output_layer=not expand)
    altup_proj = ctx.need(ctx.w("altup_proj.weight", -2), "altup_proj")
    n_altup = altup_proj.ne[2] + 1
    target = _magnitude(ctx, inpL)
    added = b.mul_mat(altup_proj, b.repeat_4d(inpL, n_embd, n_tokens, n_altup - 1, 1))
    new = _magnitude(ctx, added)
    added = b.div(b.mul(added, target), new)
    inpL = ctx.cb(b.concat(inpL, added, 2), "inp_stacked", -1)
    for il in ctx.layers():
        head, n_head = ctx.head_k(il), f.n_head[il]
        pred = _predict(ctx, inpL, il, act)
        active = ctx.cb(slice_2d(ctx, pred, act), "active_prediction", il)
        cur = ctx.cb(ctx.norm(active, ctx.lw(il, "attn_norm.weight"), il), "attn_norm", il)
        laurel_out = _laurel(ctx, cur, il)
        inp = swa if f.swa.is_swa[il] else base
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        wo_s = ctx.lw(il, "attn_output.scale")
        if f.has_kv[il]:
            q, k, v = ctx.qkv(cur, il, scales=True)
            q = ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il)
            k = ctx.norm(k, ctx.lw(il, "attn_k_norm.weight"), il)
            v = b.rms_norm(v)
            ctx.cb(q, "Qcur_normed", il)
            ctx.cb(k, "Kcur_normed", il)
            ctx.cb(v, "Vcur_normed", il)
            q = ctx.cb(b.rope(q, inp_pos, None), "Qcur_pos", il)
            k = ctx.cb(b.rope(k, inp_pos, None), "Kcur_pos", il)
            cur = ctx.attn(inp, wo, None, q, k, v, il, True, wo_s=wo_s)
        else:
            if ctx.lw(il, "attn_qkv.weight") is not None:
                raise GraphBuildError(f"{f.path}: fused attn_qkv is not modelled")
            wq = ctx.need(ctx.lw(il, "attn_q.weight"), "attn_q")
            q = ctx.cb(ctx.mm(wq, cur), "Qcur", il)
            q = b.reshape(q, head, n_head, n_tokens)
            q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_norm.weight"), il), "Qcur_normed", il)
            q = ctx.cb(b.rope(q, inp_pos, None), "Qcur_pos", il)
            cur = ctx.attn(inp, wo, None, q, None, None, il, True, wo_s=wo_s)
        cur = ctx.norm(cur, ctx.lw(il, "post_attention_norm.weight"), il)
        cur = ctx.cb(cur, "attn_post_norm", il)
        cur = ctx.cb(b.add(cur, active), "attn_gated", il)
        attn_laurel = ctx.cb(b.scale(b.add(cur, laurel_out)), "attn_laurel", il)
        cur = ctx.norm(attn_laurel, ctx.lw(il, "ffn_norm.weight"), il)
        cur = ctx.cb(cur, "ffn_norm", il)
        up = ctx.mm(ctx.need(ctx.lw(il, "ffn_up.weight"), "ffn_up"), cur)
        gate = ctx.mm(ctx.need(ctx.lw(il, "ffn_gate.weight"), "ffn_gate"), cur)
        if il < n_layer_sparsity:
            gate = _gaussian_topk(ctx, gate)
        cur = b.mul(up, b.unary(gate, "GELU"))
        cur = ctx.mm(ctx.need(ctx.lw(il, "ffn_down.weight"), "ffn_down"), cur)
        cur = ctx.cb(cur, "ffn_out", il)
        cur = ctx.norm(cur, ctx.lw(il, "post_ffw_norm.weight"), -1)
        cur = ctx.cb(cur, "ffn_post_norm", il)
        gated = ctx.cb(b.add(cur, attn_laurel), "attn_ffw_laurel_gated", il)
        corrected = _correct(ctx, pred, gated, il, act)
        scale = ctx.need(ctx.lw(il, "altup_correct_scale.weight"), "altup_correct_scale")
        first = b.mul(slice_2d(ctx, corrected, act), scale)
        first = ctx.mm(ctx.need(ctx.lw(il, "inp_gate.weight"), "inp_gate"), first)
        first = ctx.cb(b.unary(first, "GELU"), "first_prediction_gated", il)
        first = b.mul(first, slice_2d(ctx, per_layer, il))
        first = ctx.cb(first, "first_prediction_scaled", il)
        first = ctx.mm(ctx.need(ctx.lw(il, "proj.weight"), "proj"), first)
        first = ctx.norm(first, ctx.lw(il, "post_norm.weight"), il)
        first = ctx.cb(first, "first_prediction_out", il)
        rest = b.add(_rest(ctx, corrected), first)
        corrected = b.concat(slice_2d(ctx, corrected, 0), rest, 2)
        inpL = ctx.cb(corrected, "l_out", il)
    cur = inpL
    target = _magnitude(ctx, slice_2d(ctx, cur, act))
    unembd_proj = ctx.need(ctx.w("altup_unembd_proj.weight", -2), "altup_unembd_proj")
    unembd = b.mul_mat(unembd_proj, _rest(ctx, cur))
    new = _magnitude(ctx, unembd)
    unembd = ctx.cb(b.div(b.mul(unembd, target), new), "altup_unembd", -1)
    cur = slice_2d(ctx, cur, 0)
    for i in range(n_altup - 1):
        cur = b.add(cur, slice_2d(ctx, unembd, i))
    cur = ctx.cb(b.scale(cur), "unembd_merged", -1)
    cur = b.get_rows(cur, ctx.inp_out_ids())
    cur = ctx.norm(cur, ctx.w("output_norm.weight", -2), -1)
    cur = ctx.cb(cur, "result_norm", -1)
    set_output(cur)
    gemma_logits(ctx, cur)


def _rest(ctx: GraphContext, x: T) -> T:
    """The view of every stream but the first (ggml_view_3d, skipping slice 0)."""
    ne0, ne1, ne2 = x.ne[0], x.ne[1], x.ne[2]
    row = row_size(x.type, ne0)
    return ctx.b.view(x, (ne0, ne1, ne2 - 1), (row, row * ne1), ne1 * row)


def _magnitude(ctx: GraphContext, x: T) -> T:
    """calc_magnitude: sqrt(sum_rows(x^2))."""
    b = ctx.b
    return b.sqrt(b.sum_rows(b.sqr(x)))


def _router(ctx: GraphContext, x: T, il: int) -> T:
    """altup_compute_router_modalities: normed, scaled, the router's matrix, TANH."""
    b = ctx.b
    cur = b.scale(ctx.norm(x, ctx.lw(il, "altup_router_norm.weight"), il))
    router = ctx.need(ctx.lw(il, "altup_router.weight"), "altup_router")
    return b.unary(b.mul_mat(router, cur), "TANH")


def _predict(ctx: GraphContext, cur: T, il: int, act: int) -> T:
    """altup_predict: the streams mixed by the per-token coefficients the router picks, plus
    themselves; [n_embd, n_tokens, n_altup]."""
    b = ctx.b
    n_altup, n_tokens = cur.ne[2], cur.ne[1]
    modalities = ctx.cb(_router(ctx, slice_2d(ctx, cur, act), il), "modalities", il)
    coef = ctx.need(ctx.lw(il, "altup_predict_coef.weight"), "altup_predict_coef")
    coefs = ctx.cb(ctx.mm(coef, modalities), "all_coefs", il)
    coefs = b.reshape(coefs, n_altup, n_altup, n_tokens)
    permuted = b.cont(b.permute(cur, 1, 2, 0, 3))
    pred = b.cont(b.permute(b.mul_mat(permuted, coefs), 0, 2, 1, 3))
    return ctx.cb(b.add(pred, cur), "predictions", il)


def _correct(ctx: GraphContext, pred: T, activated: T, il: int, act: int) -> T:
    """altup_correct: the innovation (activated minus the active prediction) times 1 plus
    the router's coefficients, added to every stream's prediction."""
    b = ctx.b
    n_embd, n_tokens, n_altup = pred.ne[0], pred.ne[1], pred.ne[2]
    modalities = ctx.cb(_router(ctx, activated, il), "modalities", il)
    innovation = b.sub(activated, slice_2d(ctx, pred, act))
    innovation = ctx.cb(innovation, "innovation", il)
    coef = ctx.need(ctx.lw(il, "altup_correct_coef.weight"), "altup_correct_coef")
    coefs = ctx.cb(b.scale(ctx.mm(coef, modalities)), "all_coefs", il)  # ggml_scale_bias
    coefs = b.cont(b.transpose(coefs), 1, n_tokens, n_altup)
    innovation = b.repeat_4d(innovation, n_embd, n_tokens, n_altup, 1)
    return ctx.cb(b.add(b.mul(innovation, coefs), pred), "corrected", il)


def _laurel(ctx: GraphContext, cur: T, il: int) -> T:
    """laurel: a rank-laurel_rank low-rank update, normed, plus its input."""
    b = ctx.b
    tmp = ctx.mm(ctx.need(ctx.lw(il, "laurel_l.weight"), "laurel_l"), cur)
    tmp = ctx.mm(ctx.need(ctx.lw(il, "laurel_r.weight"), "laurel_r"), tmp)
    tmp = ctx.norm(tmp, ctx.lw(il, "laurel_post_norm.weight"), il)
    return ctx.cb(b.add(tmp, cur), "laurel_out", il)


def _gaussian_topk(ctx: GraphContext, x: T) -> T:
    """gaussian_topk: RELU(x - (mean + std_mul * std)) over each row."""
    b = ctx.b
    mean = b.mean(x)
    std = b.sqrt(b.scale(b.sum_rows(b.sqr(b.sub(x, mean)))))
    return b.unary(b.sub(x, b.add(mean, b.scale(std))), "RELU")
