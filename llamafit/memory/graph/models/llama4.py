"""src/models/llama4.cpp: llama_model_llama4::graph<iswa> (Llama 4 Scout and Maverick)."""

from __future__ import annotations

from ..build import GraphContext
from ..kv_cache import has_swa


def build(ctx: GraphContext) -> None:
    """The temperature input (build_inp_attn_scale, always), chunked-attention iSWA caches (3
    chunked layers of 4; one cache where the GGUF's window is 0); RoPE with the rope factors
    except in every n_no_rope_layer_step-th layer (4; every layer but the last without chunked
    attention), where Q is scaled by the temperature instead; Q and K RMS-normed without weights
    after RoPE unless Maverick (use_kq_norm: n_expert != 128); a dense FFN with biases or
    sigmoid-gated experts (weights not normalised, applied to the input: weight_before_ffn)
    plus the shared expert, whose layer names
    the attention output "ffn_norm" (llama4.cpp's cb(cur, ...))."""
    f, b = ctx.f, ctx.b
    assert f.moe is not None  # load_arch_tensors: llama4 cannot have zero experts
    iswa = has_swa(f)
    no_rope_step = 4 if iswa else ctx.n_layer
    use_kq_norm = f.moe.n_expert != 128
    inpL = ctx.inp_embd(1.0)
    inp_pos = ctx.inp_pos()
    temp = ctx.b.new("f32", 1, 1, ctx.c.n_tokens, name="inp_attn_scale", inp=True)
    base, swa = ctx.inp_attn_maybe_iswa(iswa)
    out_ids = ctx.inp_out_ids()
    for il in ctx.layers():
        inpSA = inpL
        use_rope = (il + 1) % no_rope_step != 0
        cur = ctx.attn_norm(inpL, il)
        q, k, v = ctx.qkv(cur, il)
        if use_rope:
            factors = ctx.w("rope_freqs.weight", il)  # llama_model::get_rope_factors
            q = b.rope(q, inp_pos, factors)
            k = b.rope(k, inp_pos, factors)
        else:
            q = b.mul(q, temp)
        ctx.cb(q, "Qcur", il)
        ctx.cb(k, "Kcur", il)
        ctx.cb(v, "Vcur", il)
        if use_rope and use_kq_norm:
            q = ctx.cb(b.rms_norm(q), "Qcur_normed", il)
            k = ctx.cb(b.rms_norm(k), "Kcur_normed", il)
        inp = swa if f.swa.is_swa[il] else base
        cur = ctx.attn(inp, ctx.wo(il), ctx.lw(il, "attn_output.bias"), q, k, v, il, iswa)
        cur = ctx.cb(cur, "attn_out", il)
        cur, inpSA = ctx.out_rows(il, out_ids, cur, inpSA)
        ffn_inp = ctx.cb(b.add(cur, inpSA), "ffn_inp", il)
        if ctx.lw(il, "ffn_gate_inp.weight") is None:
            cur = ctx.cb(ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), il), "ffn_norm", il)
            cur = ctx.cb(ctx.ffn(cur, il, "silu", True), "ffn_out", il)
        else:
            normed = ctx.norm(ffn_inp, ctx.lw(il, "ffn_norm.weight"), il)
            ctx.cb(cur, "ffn_norm", il)
            moe = ctx.moe_ffn(normed, il, gating="sigmoid", norm_w=False, weight_before=True)
            shared = ctx.ffn(normed, il, "silu", False, "_shexp")
            ctx.cb(shared, "ffn_moe_shexp", il)
            cur = ctx.cb(b.add(moe, shared), "ffn_moe_out_merged", il)
        cur = ctx.cb(b.add(cur, ffn_inp), "ffn_out", il)
        inpL = ctx.cb(cur, "l_out", il)
    ctx.finish(ctx.lm_head(inpL))
