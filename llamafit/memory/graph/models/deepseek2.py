"""src/models/deepseek2.cpp: llama_model_deepseek2::graph (MLA)."""

from __future__ import annotations

from ....builds import since
from ..build import GATING, GraphContext
from ..ggml import row_size
from ..params import GraphBuildError


def build(ctx: GraphContext) -> None:
    """src/models/deepseek2.cpp llama_model_deepseek2::graph (also mistral4's: models.h
    llama_model_mistral4::graph is it) with MLA (hparams.is_mla: the absorbed wk_b / wv_b
    path over build_attn_inp_k), Q through the q_a / q_b pair or wq (lite), dense lead
    layers, routed experts (the gating of expert_gating_func, softmax when unset; the merged
    ffn_gate_up_exps where the file has it) plus shared ones, attention temperature tuning
    (inp_attn_scale). Not modelled: the MHA path of GGUFs without wk_b. Before rule
    deepseek2_q_reshape q_nope and q_pe are views of the 2-D q (no RESHAPE)."""
    f, c, b = ctx.f, ctx.c, ctx.b
    mla = f.mla
    if mla is None or ctx.lw(0, "attn_k_b.weight") is None:
        raise GraphBuildError(f"{f.path}: deepseek2 without MLA (wkv_b) is not modelled")
    assert f.moe is not None
    n_tokens, n_head0 = c.n_tokens, f.n_head[0]
    head_k, rank = mla.key_length_mla, mla.kv_lora_rank
    n_rot = f.n_embd_head_k - rank  # the cache row: kv_lora_rank, then the RoPE part
    nope = head_k - n_rot
    inpL = ctx.inp_embd(1.0)
    temp = None
    if f.attn_temp_scale != 0.0:  # build_inp_attn_scale
        temp = ctx.b.new("f32", 1, 1, n_tokens, name="inp_attn_scale", inp=True)
    inp_pos = ctx.inp_pos()
    inp = ctx.inp_attn_kv(rotations=False)  # build_attn_inp_k
    out_ids = ctx.inp_out_ids()
    # llama_model_deepseek2::load_arch_hparams: unset is softmax (DeepSeek V2, V2.5) but
    # sigmoid for GLM 4.7 Lite (47 or 48 layers, 154880 tokens)
    glm_lite = ctx.n_layer in (47, 48) and f.n_vocab == 154880
    gating = GATING.get(f.expert_gating_func, "sigmoid" if glm_lite else "softmax")
    for il in ctx.layers():
        inpSA = inpL
        cur = ctx.attn_norm(inpL, il)
        wq = ctx.lw(il, "attn_q.weight")
        if wq is None:
            q = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_q_a.weight"), "q_a"), cur), "q", il)
            q = ctx.cb(ctx.norm(q, ctx.lw(il, "attn_q_a_norm.weight"), il), "q", il)
            q = ctx.cb(ctx.mm(ctx.need(ctx.lw(il, "attn_q_b.weight"), "q_b"), q), "q", il)
        else:
            q = ctx.cb(ctx.mm(wq, cur), "q", il)
        if since("deepseek2_q_reshape", c.build):
            q = ctx.cb(b.reshape(q, head_k, n_head0, n_tokens), "q", il)
            q_nbs = (q.nb[1], q.nb[2])
        else:  # before: q_nope and q_pe are views of the 2-D q
            q_nbs = (row_size(q.type, head_k), row_size(q.type, head_k) * n_head0)
        wkv_a = ctx.need(ctx.lw(il, "attn_kv_a_mqa.weight"), "attn_kv_a_mqa")
        kv_pe = ctx.cb(ctx.mm(wkv_a, cur), "kv_cmpr_pe", il)
        row = row_size(kv_pe.type, rank + n_rot)
        kv = ctx.cb(b.view(kv_pe, (rank, n_tokens), (row,), 0), "kv_cmpr", il)
        k_pe = b.view(kv_pe, (n_rot, 1, n_tokens), (row, row), row_size(kv_pe.type, rank))
        k_pe = ctx.cb(k_pe, "k_pe", il)
        k_pe = ctx.cb(b.rope(k_pe, inp_pos, None), "k_pe", il)
        kv = ctx.cb(ctx.norm(kv, ctx.lw(il, "attn_kv_a_norm.weight"), il), "kv_cmpr", il)
        q_nope = b.view(q, (nope, n_head0, n_tokens), q_nbs, 0)
        q_nope = ctx.cb(q_nope, "q_nope", il)
        q_pe = b.view(q, (n_rot, n_head0, n_tokens), q_nbs, row_size(q.type, nope))
        q_pe = ctx.cb(q_pe, "q_pe", il)
        q_pe = ctx.cb(b.rope(q_pe, inp_pos, None), "q_pe", il)
        q_nope = ctx.cb(b.permute(q_nope, 0, 2, 1, 3), "q_nope_perm", il)
        wk_b = ctx.need(ctx.lw(il, "attn_k_b.weight"), "attn_k_b")
        q_abs = ctx.cb(b.mul_mat(wk_b, q_nope), "q_nope_absorbed", il)
        q_abs = ctx.cb(b.permute(q_abs, 0, 2, 1, 3), "q_nope_absorbed_perm", il)
        q = ctx.cb(b.concat(q_abs, q_pe, 0), "Qcur", il)
        kv = ctx.cb(b.reshape(kv, rank, 1, n_tokens), "kv_cmpr_reshape", il)
        k = ctx.cb(b.concat(kv, k_pe, 0), "Kcur", il)
        v = ctx.cb(kv, "Vcur", il)
        if temp is not None:
            q = ctx.cb(b.mul(q, temp), "Qcur_attn_temp_scaled", il)
        wo = ctx.need(ctx.lw(il, "attn_output.weight"), "attn_output")
        wv_b = ctx.need(ctx.lw(il, "attn_v_b.weight"), "attn_v_b")
        cur = ctx.attn_k(inp, wo, q, k, v, wv_b, il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp, cur = ctx.ffn_inp(cur, inpSA, il)
        if il < f.moe.n_layer_dense_lead:
            cur = ctx.cb(ctx.ffn(cur, il, "silu", False), "ffn_out", il)
        else:
            routed = ctx.moe_ffn(
                cur,
                il,
                gating=gating,
                norm_w=f.expert_weights_norm,
                exp_probs_b=ctx.lw(il, "exp_probs_b.bias"),
                scale_w=ctx.hp.expert_weights_scale != 0.0,
                gate_up=True,  # ffn_gate_up_exps where the file has it (mistral4)
            )
            routed = ctx.cb(routed, "ffn_moe_out", il)
            shared = ctx.cb(ctx.ffn(cur, il, "silu", False, "_shexp"), "ffn_shexp", il)
            cur = ctx.cb(b.add(routed, shared), "ffn_out", il)
        inpL = ctx.cb(b.add(cur, ffn_inp), "l_out", il)
    ctx.finish(ctx.lm_head(inpL))  # h_nextn is result_norm
