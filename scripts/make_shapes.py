#!/usr/bin/env python3
"""Write sparse, full-size GGUFs in the shapes of well-known models (zero weights, no download).

llama.cpp does not validate tensor data when it loads a model (unless --check-tensors). A GGUF
whose header and tensor infos describe a real model, with a tokenizer llama.cpp accepts (the
byte-level BPE of scripts/make_fixtures.py), extended to its full size with zeros by
os.truncate (a sparse file: no disk used), loads and allocates exactly like the real model on the
CPU, a Vulkan device or RPC workers.

The shapes come from fixtures/shapes/shapes.json (hyper-parameters, tiny, committed). The
tensor set per family reuses make_fixtures.py's building blocks (the names and shapes that
llama.cpp 0c1e570's loaders require); the quantization mix follows llama-quant.cpp's
llama_tensor_get_type for Q4_K_M (use_more_bits, the Q6_K output, the fallback of k-quants for
rows that are not a multiple of 256).

    python scripts/make_shapes.py OUT_DIR [KEY ...]      # all shapes, or the given keys
    python scripts/make_shapes.py --list

llama.cpp maps a model with MAP_POPULATE (src/llama-mmap.cpp), which reads the holes into the page
cache too; preload scripts/no_populate/no_populate.c (LD_PRELOAD) to load a large shape without that.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_fixtures import (
    Fixture,
    add_tokenizer,
    attention,
    dense_ffn,
    embeddings,
    mamba2_mixer,
    moe_ffn,
    shared_expert,
    ssm_keys,
    transformer_keys,
)

SPECS = Path(__file__).resolve().parent.parent / "fixtures" / "shapes" / "shapes.json"

# llama-quant.cpp, llama_tensor_get_type: a k-quant whose row is not a multiple of QK_K falls back.
_FALLBACK = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}


def load_specs(path: Path = SPECS) -> dict[str, dict[str, Any]]:
    return {m["key"]: m for m in json.loads(path.read_text(encoding="utf-8"))["models"]}


def use_more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp: the first and last eighth of the layers, and every third in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _layer(name: str) -> int:
    return int(name.split(".")[1]) if name.startswith("blk.") else -1


@dataclass
class ShapeFixture(Fixture):
    """A Fixture that records tensor infos only; write() extends the file to full size with zeros."""

    mix: str = "q4_k_m"
    n_layer: int = 0
    tied: bool = False
    data_bytes: int = field(default=0, init=False)

    def _more_bits(self, name: str, role: str) -> bool:
        """The tensors Q4_K_M keeps at Q6_K (llama.cpp: src/llama-quant.cpp llama_tensor_get_type)."""
        if name == "output.weight" or (self.tied and name in ("token_embd.weight", "per_layer_token_embd.weight")):
            return True  # tensor_name_match_token_embd: the per-layer table is a token embedding too
        return role in ("attn_v", "ffn_down", "ffn_down_exps") and use_more_bits(_layer(name), self.n_layer)

    def qtype(self, name: str, ne: tuple[int, ...]) -> QT:
        role = name.rsplit(".", 1)[0].split(".")[-1]
        if self.mix == "q4_k_m" and "per_layer_model_proj" in name:
            return QT.F16  # tensor_allows_quantization keeps it as converted (the q8_0 shapes predate this)
        if self.mix == "q8_0":
            t = QT.Q8_0
        elif self.mix == "mxfp4":
            t = QT.MXFP4 if role.endswith("_exps") else QT.Q8_0
        elif self._more_bits(name, role):
            t = QT.Q6_K
        else:
            t = QT.Q4_K
        block, _ = gguf.GGML_QUANT_SIZES[t]
        if ne[0] % block:
            t = _FALLBACK.get(t, QT.F16)
            if ne[0] % gguf.GGML_QUANT_SIZES[t][0]:
                t = QT.F16
        return t

    def tensor(self, name: str, ne: tuple[int, ...], qtype: QT = QT.F16, fill: str = "rand") -> None:
        t = QT.F32 if len(ne) == 1 or qtype == QT.F32 else self.qtype(name, ne)
        block, size = gguf.GGML_QUANT_SIZES[t]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // block * size
        import numpy as np

        self.w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=t)
        self.data_bytes += gguf.GGUFWriter.ggml_pad(nbytes, self.w.data_alignment)

    def write(self, out_dir: Path) -> list[Path]:
        path = Path(out_dir) / self.file_name
        self.w.write_header_to_file(path)
        self.w.write_kv_data_to_file()
        self.w.write_ti_data_to_file()
        self.w.close()
        head = gguf.GGUFWriter.ggml_pad(path.stat().st_size, self.w.data_alignment)
        os.truncate(path, head + self.data_bytes)
        return [path]


def build(spec: dict[str, Any]) -> ShapeFixture:
    fam, arch = spec["family"], spec["arch"]
    n_layer, n_embd, n_vocab = spec["n_layer"], spec["n_embd"], spec["n_vocab"]
    f = ShapeFixture(f"{spec['key']}.gguf", arch, 0, mix=spec["mix"], n_layer=n_layer, tied=spec["tied"])
    ftype = {"q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "mxfp4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE}[spec["mix"]]  # fmt: skip
    f.w.add_name(spec["name"])
    f.w.add_file_type(int(ftype))
    f.w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    f.w.add_context_length(spec["ctx"])
    add_tokenizer(f.w, n_vocab)
    n_head = spec["n_head"]
    head = spec.get("head_dim", n_embd // n_head)
    explicit_head = "head_dim" in spec
    if fam == "deepseek2":
        _deepseek2(f, spec)
    elif fam == "granitehybrid":
        _granitehybrid(f, spec)
    elif fam == "gemma3n":
        _gemma3n(f, spec)
    elif fam == "qwen3next":
        _qwen3next(f, spec)
    elif fam == "nemotron_h_moe":
        _nemotron_h_moe(f, spec)
    elif fam == "gemma4":
        _gemma4(f, spec)
    else:
        n_kv = spec["n_head_kv"]
        transformer_keys(f, n_layer=n_layer, n_embd=n_embd, n_ff=spec["n_ff"], n_head=n_head, n_head_kv=n_kv,
                         key_len=head if explicit_head else None, value_len=head if explicit_head else None,
                         rope_dim=None if explicit_head else head, eps=1e-6)  # fmt: skip
        f.w.kv_data[0].pop(f"{arch}.rope.freq_base", None)  # transformer_keys wrote the default
        f.w.add_rope_freq_base(spec["rope_theta"])
        if "sliding_window" in spec:
            f.w.add_sliding_window(spec["sliding_window"])
        if spec.get("granite_scales"):  # granite / granitemoe (llama-model.cpp load_hparams)
            f.w.add_embedding_scale(12.0)
            f.w.add_residual_scale(0.22)
            f.w.add_logit_scale(6.0)
            f.w.add_attention_scale(0.015625)
        if "n_expert" in spec:
            f.w.add_expert_count(spec["n_expert"])
            f.w.add_expert_used_count(spec["n_expert_used"])
            f.w.add_expert_feed_forward_length(spec["n_ff_exp"])
        f.w.add_vocab_size(n_vocab)
        embeddings(f, n_embd, n_vocab, tied=spec["tied"])
        for i in range(n_layer):
            p = f"blk.{i}."
            attention(f, i, n_embd, n_head, n_kv, head, bias=spec.get("qkv_bias", False) or fam == "gptoss")
            if spec.get("qk_norm") or fam == "gemma3":
                f.norm(p + "attn_q_norm.weight", head)
                f.norm(p + "attn_k_norm.weight", head)
            if fam == "llama":
                dense_ffn(f, i, n_embd, spec["n_ff"])
            elif fam == "moe":
                f.norm(p + "ffn_norm.weight", n_embd)
                moe_ffn(f, i, n_embd, spec["n_ff_exp"], spec["n_expert"])
            elif fam == "gemma3":
                f.norm(p + "post_attention_norm.weight", n_embd)
                dense_ffn(f, i, n_embd, spec["n_ff"])
                f.norm(p + "post_ffw_norm.weight", n_embd)
            elif fam == "gptoss":
                f.tensor(p + "attn_output.bias", (n_embd,))
                f.tensor(p + "attn_sinks.weight", (n_head,))
                f.norm(p + "post_attention_norm.weight", n_embd)
                moe_ffn(f, i, n_embd, spec["n_ff_exp"], spec["n_expert"], bias=True)
            else:
                raise ValueError(f"unknown family {fam}")
    return f


def _deepseek2(f: ShapeFixture, s: dict[str, Any]) -> None:
    """DeepSeek-V2(-Lite): MLA as the current converter writes it (MQA view: attn_k_b / attn_v_b)."""
    n_layer, n_embd, n_head, n_vocab = s["n_layer"], s["n_embd"], s["n_head"], s["n_vocab"]
    q_lora, kv_lora, rope = s["q_lora_rank"], s["kv_lora_rank"], s["rope_dim"]
    nope, v_head = s["nope_dim"], s["v_head_dim"]
    transformer_keys(f, n_layer=n_layer, n_embd=n_embd, n_ff=s["n_ff"], n_head=n_head, n_head_kv=1,
                     key_len=kv_lora + rope, value_len=kv_lora, rope_dim=rope, eps=1e-6)  # fmt: skip
    f.w.add_key_length_mla(nope + rope)
    f.w.add_value_length_mla(v_head)
    if q_lora:
        f.w.add_q_lora_rank(q_lora)
    f.w.add_kv_lora_rank(kv_lora)
    f.w.add_leading_dense_block_count(s["n_dense_lead"])
    f.w.add_expert_count(s["n_expert"])
    f.w.add_expert_used_count(s["n_expert_used"])
    f.w.add_expert_shared_count(s["n_expert_shared"])
    f.w.add_expert_feed_forward_length(s["n_ff_exp"])
    f.w.add_expert_weights_scale(1.0)
    f.w.add_vocab_size(n_vocab)
    embeddings(f, n_embd, n_vocab, tied=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        f.norm(p + "attn_norm.weight", n_embd)
        if q_lora:
            f.tensor(p + "attn_q_a.weight", (n_embd, q_lora))
            f.norm(p + "attn_q_a_norm.weight", q_lora)
            f.tensor(p + "attn_q_b.weight", (q_lora, n_head * (nope + rope)))
        else:
            f.tensor(p + "attn_q.weight", (n_embd, n_head * (nope + rope)))
        f.tensor(p + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope))
        f.norm(p + "attn_kv_a_norm.weight", kv_lora)
        f.tensor(p + "attn_k_b.weight", (nope, kv_lora, n_head))
        f.tensor(p + "attn_v_b.weight", (kv_lora, v_head, n_head))
        f.tensor(p + "attn_output.weight", (n_head * v_head, n_embd))
        if i < s["n_dense_lead"]:
            dense_ffn(f, i, n_embd, s["n_ff"])
        else:
            f.norm(p + "ffn_norm.weight", n_embd)
            moe_ffn(f, i, n_embd, s["n_ff_exp"], s["n_expert"])
            shared_expert(f, i, n_embd, s["n_ff_exp"] * s["n_expert_shared"])


def _granitehybrid(f: ShapeFixture, s: dict[str, Any]) -> None:
    """Granite-4.0-H: Mamba-2 layers where head_count_kv[il] == 0, attention elsewhere, no RoPE."""
    n_layer, n_embd, n_head, n_vocab = s["n_layer"], s["n_embd"], s["n_head"], s["n_vocab"]
    attn = set(s["attn_layers"])
    n_head_kv = [s["n_head_kv_attn"] if i in attn else 0 for i in range(n_layer)]
    transformer_keys(f, n_layer=n_layer, n_embd=n_embd, n_ff=s["n_ff"], n_head=n_head, n_head_kv=n_head_kv)
    ssm_keys(f, s["d_conv"], s["d_inner"], s["d_state"], s["n_ssm_head"], s["n_group"])
    f.w.add_rope_scaling_finetuned(False)
    f.w.add_embedding_scale(12.0)
    f.w.add_residual_scale(0.22)
    f.w.add_logit_scale(8.0)
    f.w.add_attention_scale(0.0078125)
    embeddings(f, n_embd, n_vocab, tied=s["tied"])
    for i in range(n_layer):
        if i in attn:
            attention(f, i, n_embd, n_head, n_head_kv[i], n_embd // n_head)
        else:
            f.norm(f"blk.{i}.attn_norm.weight", n_embd)
            mamba2_mixer(f, i, n_embd, s["d_inner"], s["d_state"], s["n_group"], s["n_ssm_head"], s["d_conv"])
        dense_ffn(f, i, n_embd, s["n_ff"])


def _gemma3n(f: ShapeFixture, s: dict[str, Any]) -> None:
    """Gemma 3n (src/models/gemma3n.cpp load_arch_tensors): per-layer inputs, AltUp, LAuReL. llama.cpp reads
    n_altup, laurel_rank and n_embd_altup from no key (llama_hparams defaults 4, 64, 256, which the real
    checkpoints use); the SWA pattern defaults to 5 and the first 20 layers own the KV cache (hard-coded)."""
    n_layer, n_embd, n_head, n_vocab = s["n_layer"], s["n_embd"], s["n_head"], s["n_vocab"]
    n_kv, head, n_ff = s["n_head_kv"], s["head_dim"], s["n_ff"]
    altup, laurel, n_altup = 256, 64, 4
    transformer_keys(f, n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=n_kv,
                     key_len=head, value_len=head, eps=1e-6)  # fmt: skip
    f.w.kv_data[0].pop("gemma3n.rope.freq_base", None)
    f.w.add_rope_freq_base(s["rope_theta"])
    f.w.add_sliding_window(s["sliding_window"])
    f.w.add_final_logit_softcapping(30.0)
    f.w.add_vocab_size(n_vocab)
    embeddings(f, n_embd, n_vocab, tied=True)
    f.tensor("altup_proj.weight", (n_embd, n_embd, n_altup - 1))
    f.tensor("altup_unembd_proj.weight", (n_embd, n_embd, n_altup - 1))
    f.tensor("per_layer_token_embd.weight", (altup * n_layer, n_vocab))
    f.tensor("per_layer_model_proj.weight", (n_embd, altup * n_layer))
    f.norm("per_layer_proj_norm.weight", altup)
    for i in range(n_layer):
        p = f"blk.{i}."
        attention(f, i, n_embd, n_head, n_kv, head)
        for norm, n in (("attn_q_norm", head), ("attn_k_norm", head), ("post_attention_norm", n_embd),
                        ("ffn_norm", n_embd), ("post_ffw_norm", n_embd), ("post_norm", n_embd),
                        ("altup_correct_scale", n_embd), ("altup_router_norm", n_embd),
                        ("laurel_post_norm", n_embd)):  # fmt: skip
            f.norm(f"{p}{norm}.weight", n)
        f.tensor(p + "ffn_gate.weight", (n_embd, n_ff))
        f.tensor(p + "ffn_up.weight", (n_embd, n_ff))
        f.tensor(p + "ffn_down.weight", (n_ff, n_embd))
        f.tensor(p + "inp_gate.weight", (n_embd, altup))
        f.tensor(p + "proj.weight", (altup, n_embd))
        f.tensor(p + "altup_correct_coef.weight", (n_altup, n_altup))
        f.tensor(p + "altup_predict_coef.weight", (n_altup, n_altup * n_altup))
        f.tensor(p + "altup_router.weight", (n_embd, n_altup))
        f.tensor(p + "laurel_l.weight", (n_embd, laurel))
        f.tensor(p + "laurel_r.weight", (laurel, n_embd))


def _qwen3next(f: ShapeFixture, s: dict[str, Any]) -> None:
    """Qwen3-Next / Qwen3.5 MoE (src/models/qwen3next.cpp, qwen35moe.cpp load_arch_tensors): gated
    DeltaNet layers except every full_attention_interval-th, a routed MoE with a gated shared expert in
    every layer. The keys are those conversion/qwen.py (Qwen3NextModel, Qwen3_5MoeTextModel) writes; no
    MTP block (nextn_predict_layers absent, as in GGUFs converted without it)."""
    arch, n_layer, n_embd, n_vocab = s["arch"], s["n_layer"], s["n_embd"], s["n_vocab"]
    n_head, n_kv, head = s["n_head"], s["n_head_kv"], s["head_dim"]
    d_conv, d_state, n_group, n_v_heads = s["d_conv"], s["d_state"], s["n_group"], s["n_v_heads"]
    n_expert, n_ff_exp, n_ff_shexp = s["n_expert"], s["n_ff_exp"], s["n_ff_shexp"]
    interval = s["full_attention_interval"]
    key_dim, value_dim = d_state * n_group, d_state * n_v_heads
    f.w.add_block_count(n_layer)
    f.w.add_embedding_length(n_embd)
    if "n_ff" in s:
        f.w.add_feed_forward_length(s["n_ff"])
    f.w.add_head_count(n_head)
    f.w.add_head_count_kv(n_kv)
    f.w.add_key_length(head)
    f.w.add_value_length(head)
    f.w.add_rope_dimension_count(int(head * s["partial_rotary_factor"]))
    f.w.add_rope_freq_base(s["rope_theta"])
    if "rope_sections" in s:
        f.key("rope.dimension_sections", s["rope_sections"])
    f.w.add_layer_norm_rms_eps(1e-6)
    f.w.add_expert_count(n_expert)
    f.w.add_expert_used_count(s["n_expert_used"])
    f.w.add_expert_feed_forward_length(n_ff_exp)
    f.w.add_expert_shared_feed_forward_length(n_ff_shexp)
    ssm_keys(f, d_conv, value_dim, d_state, n_v_heads, n_group)
    f.key("full_attention_interval", interval)
    f.w.add_vocab_size(n_vocab)
    embeddings(f, n_embd, n_vocab, tied=s["tied"])
    for i in range(n_layer):
        p = f"blk.{i}."
        f.norm(p + "attn_norm.weight", n_embd)
        f.norm(p + "post_attention_norm.weight", n_embd)
        if (i + 1) % interval == 0:  # full attention: Q carries the output gate (n_head * head * 2)
            f.tensor(p + "attn_q.weight", (n_embd, n_head * head * 2))
            f.tensor(p + "attn_k.weight", (n_embd, n_kv * head))
            f.tensor(p + "attn_v.weight", (n_embd, n_kv * head))
            f.tensor(p + "attn_output.weight", (n_head * head, n_embd))
            f.norm(p + "attn_q_norm.weight", head)
            f.norm(p + "attn_k_norm.weight", head)
        else:
            f.tensor(p + "attn_qkv.weight", (n_embd, key_dim * 2 + value_dim))
            f.tensor(p + "attn_gate.weight", (n_embd, value_dim))
            f.tensor(p + "ssm_conv1d.weight", (d_conv, key_dim * 2 + value_dim), QT.F32)
            f.tensor(p + "ssm_dt.bias", (n_v_heads,))
            f.tensor(p + "ssm_a", (n_v_heads,))
            if arch == "qwen3next":
                f.tensor(p + "ssm_ba.weight", (n_embd, n_v_heads * 2))
            else:
                f.tensor(p + "ssm_beta.weight", (n_embd, n_v_heads))
                f.tensor(p + "ssm_alpha.weight", (n_embd, n_v_heads))
            f.norm(p + "ssm_norm.weight", d_state)
            f.tensor(p + "ssm_out.weight", (value_dim, n_embd))
        moe_ffn(f, i, n_embd, n_ff_exp, n_expert)
        f.tensor(p + "ffn_gate_inp_shexp.weight", (n_embd,))
        shared_expert(f, i, n_embd, n_ff_shexp)


def _nemotron_h_moe(f: ShapeFixture, s: dict[str, Any]) -> None:
    """Nemotron-H MoE (src/models/nemotron-h.cpp load_arch_tensors): the hybrid_override_pattern's M
    (Mamba-2), * (attention, no RoPE) and E (MoE: ReLU^2 up/down experts with a selection bias and one
    shared expert) layers. A layer is recurrent where head_count_kv[il] == 0 and feed_forward_length[il]
    == 0; attention where only feed_forward_length[il] == 0 (conversion/nemotron.py NemotronHModel)."""
    n_layer, n_embd, n_vocab, pattern = s["n_layer"], s["n_embd"], s["n_vocab"], s["pattern"]
    n_head, n_kv, head = s["n_head"], s["n_head_kv"], s["head_dim"]
    d_conv, d_inner, d_state = s["d_conv"], s["d_inner"], s["d_state"]
    n_group, n_ssm_head = s["n_group"], s["n_ssm_head"]
    n_expert, n_ff_exp, n_ff_shexp = s["n_expert"], s["n_ff_exp"], s["n_ff_shexp"]
    if len(pattern) != n_layer:
        raise ValueError(f"pattern has {len(pattern)} layers, n_layer is {n_layer}")
    f.w.add_block_count(n_layer)
    f.w.add_embedding_length(n_embd)
    f.w.add_feed_forward_length([n_ff_exp if c == "E" else 0 for c in pattern])
    f.w.add_head_count(n_head)
    f.w.add_head_count_kv([n_kv if c == "*" else 0 for c in pattern])
    f.w.add_key_length(head)
    f.w.add_value_length(head)
    f.w.add_layer_norm_eps(s["norm_eps"])
    f.w.add_layer_norm_rms_eps(s["norm_eps"])
    ssm_keys(f, d_conv, d_inner, d_state, n_ssm_head, n_group)
    f.w.add_expert_count(n_expert)
    f.w.add_expert_used_count(s["n_expert_used"])
    f.w.add_expert_feed_forward_length(n_ff_exp)
    f.w.add_expert_shared_feed_forward_length(n_ff_shexp)
    f.w.add_expert_shared_count(1)
    f.w.add_expert_weights_norm(True)
    f.w.add_expert_weights_scale(s["routed_scaling_factor"])
    f.w.add_vocab_size(n_vocab)
    embeddings(f, n_embd, n_vocab, tied=s["tied"])
    for i, kind in enumerate(pattern):
        p = f"blk.{i}."
        f.norm(p + "attn_norm.weight", n_embd)
        if kind == "M":
            mamba2_mixer(f, i, n_embd, d_inner, d_state, n_group, n_ssm_head, d_conv)
        elif kind == "*":
            f.tensor(p + "attn_q.weight", (n_embd, n_head * head))
            f.tensor(p + "attn_k.weight", (n_embd, n_kv * head))
            f.tensor(p + "attn_v.weight", (n_embd, n_kv * head))
            f.tensor(p + "attn_output.weight", (n_head * head, n_embd))
        elif kind == "E":
            f.tensor(p + "ffn_gate_inp.weight", (n_embd, n_expert), QT.F32)
            f.tensor(p + "exp_probs_b.bias", (n_expert,))
            f.tensor(p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert))
            f.tensor(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert))
            f.tensor(p + "ffn_up_shexp.weight", (n_embd, n_ff_shexp))
            f.tensor(p + "ffn_down_shexp.weight", (n_ff_shexp, n_embd))
        else:
            raise ValueError(f"unknown layer kind {kind!r} in the pattern")


def _gemma4(f: ShapeFixture, s: dict[str, Any]) -> None:
    """Gemma 4 (src/models/gemma4.cpp load_arch_tensors): sliding layers with head_dim and n_head_kv,
    full layers with global_head_dim and n_head_kv_full (attention_k_eq_v: no V projection there, V
    is K), a dense FFN in every layer and, for the MoE checkpoints, routed experts beside it; E2B/E4B
    add per-layer token embeddings, and their last n_kv_shared layers reuse earlier layers' KV (no K/V
    projections: has_kv(il) is false) with a double-wide FFN. Keys as conversion/gemma.py Gemma4Model
    writes them (per-layer head_count_kv and feed_forward_length, the SWA pattern as bools)."""
    n_layer, n_embd, n_vocab = s["n_layer"], s["n_embd"], s["n_vocab"]
    n_head, head, head_full = s["n_head"], s["head_dim"], s["head_dim_full"]
    swa = [t == "sliding_attention" for t in s["layer_types"]]
    n_kv = [s["n_head_kv"] if w else s.get("n_head_kv_full", s["n_head_kv"]) for w in swa]
    n_expert, n_ff_exp = s.get("n_expert", 0), s.get("n_ff_exp", 0)
    n_shared, n_ple = s.get("n_kv_shared", 0), s.get("n_embd_per_layer", 0)
    first_shared = n_layer - n_shared
    wide = s.get("double_wide_mlp", False)
    n_ff = [s["n_ff"] * (2 if wide and il >= first_shared else 1) for il in range(n_layer)]
    if len(swa) != n_layer:
        raise ValueError(f"layer_types has {len(swa)} entries, n_layer is {n_layer}")
    f.w.add_block_count(n_layer)
    f.w.add_embedding_length(n_embd)
    f.w.add_feed_forward_length(n_ff if wide else s["n_ff"])
    f.w.add_head_count(n_head)
    f.w.add_head_count_kv(n_kv if "n_head_kv_full" in s else s["n_head_kv"])
    f.w.add_key_length(head_full)
    f.w.add_value_length(head_full)
    f.key("attention.key_length_swa", head)
    f.key("attention.value_length_swa", head)
    f.w.add_layer_norm_rms_eps(1e-6)
    f.w.add_rope_freq_base(s["rope_theta"])
    f.key("rope.freq_base_swa", s["rope_theta_swa"])
    f.w.add_rope_dimension_count(head_full)
    f.key("rope.dimension_count_swa", head)
    f.w.add_sliding_window(s["sliding_window"])
    f.key("attention.sliding_window_pattern", swa)
    f.key("attention.shared_kv_layers", n_shared)
    f.key("embedding_length_per_layer_input", n_ple)
    f.w.add_final_logit_softcapping(30.0)
    if n_expert:
        f.w.add_expert_count(n_expert)
        f.w.add_expert_used_count(s["n_expert_used"])
        f.w.add_expert_feed_forward_length(n_ff_exp)
    f.w.add_vocab_size(n_vocab)
    embeddings(f, n_embd, n_vocab, tied=s["tied"])
    f.tensor("rope_freqs.weight", (head_full // 2,))
    if n_ple:
        f.tensor("per_layer_token_embd.weight", (n_ple * n_layer, n_vocab))
        f.tensor("per_layer_model_proj.weight", (n_embd, n_ple * n_layer))
        f.norm("per_layer_proj_norm.weight", n_ple)
    for i in range(n_layer):
        p = f"blk.{i}."
        h = head if swa[i] else head_full
        has_kv = i < first_shared
        f.norm(p + "attn_norm.weight", n_embd)
        f.tensor(p + "attn_q.weight", (n_embd, n_head * h))
        if has_kv:
            f.tensor(p + "attn_k.weight", (n_embd, n_kv[i] * h))
        if has_kv and (swa[i] or not s["k_eq_v"]):
            f.tensor(p + "attn_v.weight", (n_embd, n_kv[i] * h))
        f.tensor(p + "attn_output.weight", (n_head * h, n_embd))
        f.norm(p + "attn_q_norm.weight", h)
        if has_kv:
            f.norm(p + "attn_k_norm.weight", h)
        f.norm(p + "post_attention_norm.weight", n_embd)
        f.tensor(p + "layer_output_scale.weight", (1,))
        f.norm(p + "ffn_norm.weight", n_embd)
        f.tensor(p + "ffn_gate.weight", (n_embd, n_ff[i]))
        f.tensor(p + "ffn_up.weight", (n_embd, n_ff[i]))
        f.tensor(p + "ffn_down.weight", (n_ff[i], n_embd))
        f.norm(p + "post_ffw_norm.weight", n_embd)
        if n_expert:
            f.tensor(p + "ffn_gate_inp.weight", (n_embd, n_expert), QT.F32)
            f.tensor(p + "ffn_gate_inp.scale", (n_embd,))
            for norm in ("pre_ffw_norm_2", "post_ffw_norm_1", "post_ffw_norm_2"):
                f.norm(f"{p}{norm}.weight", n_embd)
            f.tensor(p + "ffn_gate_up_exps.weight", (n_embd, n_ff_exp * 2, n_expert))
            f.tensor(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert))
            f.tensor(p + "ffn_down_exps.scale", (n_expert,))
        if n_ple:
            f.tensor(p + "inp_gate.weight", (n_embd, n_ple))
            f.tensor(p + "proj.weight", (n_ple, n_embd))
            f.norm(p + "post_norm.weight", n_embd)

def write_shape(key: str, out_dir: Path, specs: dict[str, dict[str, Any]] | None = None) -> Path:
    """Write one shape (idempotent: an existing file of the right size is kept)."""
    spec = (specs or load_specs())[key]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return build(spec).write(out_dir)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", type=Path)
    ap.add_argument("keys", nargs="*")
    ap.add_argument("--list", action="store_true", help="list the shape keys")
    args = ap.parse_args(argv)
    specs = load_specs()
    if args.list or args.out_dir is None:
        for key, spec in specs.items():
            print(f"{key:20} {spec['name']}")
        return 0
    for key in args.keys or list(specs):
        path = write_shape(key, args.out_dir, specs)
        print(f"wrote {path} ({path.stat().st_size} bytes, {path.stat().st_blocks * 512} on disk)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
