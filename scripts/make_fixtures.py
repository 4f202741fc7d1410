#!/usr/bin/env python3
"""Generate tiny, deterministic GGUF model fixtures for llamafit's tests.

Every fixture is a real (random-weight) model that llama.cpp can load: the
GGUF keys and tensor names/shapes follow what llama.cpp 0c1e570 (the commit
vendored by llama-cpp-python 0.3.36) requires for each architecture.  The
weights are small pseudo-random values from fixed seeds, so running the script
twice gives byte-identical files.

Usage:
    python scripts/make_fixtures.py [OUT_DIR]            # default: <repo>/fixtures
    python scripts/make_fixtures.py [OUT_DIR] --verify   # also load each fixture
                                                         # with llama-cpp-python

`write_all(out_dir)` is the importable entry point.  It writes the .gguf files
and a README.md whose hyper-parameter table is read back from the written files.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "fixtures"

WEIGHT_SCALE = 0.02  # std-dev of the random weights (keeps logits finite)


# --------------------------------------------------------------------------
# Tokenizer: byte-level BPE ("gpt2" model, "gpt-2" pre-tokenizer)
# --------------------------------------------------------------------------

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
_MERGE_LEFT = "Ġetaoinsh"  # "Ġ" is the byte-level spelling of a space
_MERGE_RIGHT = "etaoinsh"
N_MERGES = 62
MIN_VOCAB = 256 + N_MERGES + 2  # bytes + merges + bos/eos = 320


def _byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode table: one printable symbol per byte value."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def add_tokenizer(w: gguf.GGUFWriter, n_vocab: int) -> None:
    """256 byte tokens, 62 merges, bos/eos, then reserved control tokens up to n_vocab."""
    if n_vocab < MIN_VOCAB:
        raise ValueError(f"n_vocab must be >= {MIN_VOCAB}")
    merges = [f"{a} {b}" for a in _MERGE_LEFT for b in _MERGE_RIGHT][:N_MERGES]
    tokens = _byte_symbols() + [m.replace(" ", "") for m in merges] + [BOS_TOKEN, EOS_TOKEN]
    types = [gguf.TokenType.NORMAL] * (256 + N_MERGES) + [gguf.TokenType.CONTROL] * 2
    for i in range(n_vocab - len(tokens)):
        tokens.append(f"<|reserved_{i}|>")
        types.append(gguf.TokenType.CONTROL)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(BOS_TOKEN))
    w.add_eos_token_id(tokens.index(EOS_TOKEN))
    w.add_add_bos_token(False)


# --------------------------------------------------------------------------
# Model writer helper
# --------------------------------------------------------------------------


@dataclass
class Fixture:
    """A GGUF being built: GGUFWriter plus deterministic tensor data and layer notes."""

    file_name: str
    arch: str
    seed: int
    split_max_tensors: int = 0
    # facts that need llama.cpp's per-arch logic; shown in the README
    swa_layers: list[int] | None = None
    recurrent_layers: list[int] | None = None
    kv_layers: list[int] = field(default_factory=list)
    notes: str = ""
    w: gguf.GGUFWriter = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.w = gguf.GGUFWriter(None, self.arch, split_max_tensors=self.split_max_tensors)

    # ---- metadata ----------------------------------------------------------
    def general(self, name: str, file_type: gguf.LlamaFileType, n_vocab: int, ctx: int) -> None:
        self.w.add_name(name)
        self.w.add_file_type(int(file_type))
        self.w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        self.w.add_context_length(ctx)
        add_tokenizer(self.w, n_vocab)

    def key(self, suffix: str, value) -> None:
        """Add `{arch}.{suffix}` with the natural GGUF type of value."""
        name = f"{self.arch}.{suffix}"
        if isinstance(value, bool):
            self.w.add_bool(name, value)
        elif isinstance(value, int):
            self.w.add_uint32(name, value)
        elif isinstance(value, float):
            self.w.add_float32(name, value)
        else:
            self.w.add_array(name, list(value))

    # ---- tensors -------------------------------------------------------------
    def tensor(
        self, name: str, ne: tuple[int, ...], qtype: QT = QT.F16, fill: str = "rand"
    ) -> None:
        """Add tensor `name` with ggml shape `ne` (ne[0] = row length).

        fill: "rand" (N(0, WEIGHT_SCALE)), "ones", "zeros" or "neg" (negative, for ssm_a).
        1-D tensors are always F32, as the converters write them.
        """
        if len(ne) == 1:
            qtype = QT.F32
        shape = tuple(reversed(ne))  # numpy order
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        if fill == "ones":
            data = np.ones(shape, dtype=np.float32)
        elif fill == "zeros":
            data = np.zeros(shape, dtype=np.float32)
        elif fill == "neg":
            data = -rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
        else:
            data = (rng.standard_normal(shape) * WEIGHT_SCALE).astype(np.float32)
        if qtype == QT.F32:
            self.w.add_tensor(name, data)
        elif qtype == QT.F16:
            self.w.add_tensor(name, data.astype(np.float16))
        else:
            self.w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    def norm(self, name: str, n: int) -> None:
        self.tensor(name, (n,), fill="ones")

    def write(self, out_dir: Path) -> list[Path]:
        path = out_dir / self.file_name
        self.w.write_header_to_file(path)
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        paths = self.w.format_shard_names(path)
        self.w.close()
        return paths


# --------------------------------------------------------------------------
# Shared building blocks (tensor groups)
# --------------------------------------------------------------------------


def embeddings(
    f: Fixture,
    n_embd: int,
    n_vocab: int,
    *,
    tied: bool,
    embd_type: QT = QT.F16,
    out_type: QT = QT.F16,
) -> None:
    f.tensor("token_embd.weight", (n_embd, n_vocab), embd_type)
    f.norm("output_norm.weight", n_embd)
    if not tied:
        f.tensor("output.weight", (n_embd, n_vocab), out_type)


def attention(
    f: Fixture,
    i: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    head_k: int,
    head_v: int | None = None,
    qtype: QT = QT.F16,
    bias: bool = False,
) -> None:
    """attn_norm + separate Q/K/V/O projections."""
    head_v = head_k if head_v is None else head_v
    p = f"blk.{i}."
    f.norm(p + "attn_norm.weight", n_embd)
    f.tensor(p + "attn_q.weight", (n_embd, n_head * head_k), qtype)
    f.tensor(p + "attn_k.weight", (n_embd, n_head_kv * head_k), qtype)
    f.tensor(p + "attn_v.weight", (n_embd, n_head_kv * head_v), qtype)
    f.tensor(p + "attn_output.weight", (n_head * head_v, n_embd), qtype)
    if bias:
        f.tensor(p + "attn_q.bias", (n_head * head_k,))
        f.tensor(p + "attn_k.bias", (n_head_kv * head_k,))
        f.tensor(p + "attn_v.bias", (n_head_kv * head_v,))


def dense_ffn(
    f: Fixture, i: int, n_embd: int, n_ff: int, qtype: QT = QT.F16, norm: bool = True
) -> None:
    p = f"blk.{i}."
    if norm:
        f.norm(p + "ffn_norm.weight", n_embd)
    f.tensor(p + "ffn_gate.weight", (n_embd, n_ff), qtype)
    f.tensor(p + "ffn_up.weight", (n_embd, n_ff), qtype)
    f.tensor(p + "ffn_down.weight", (n_ff, n_embd), qtype)


def moe_ffn(
    f: Fixture,
    i: int,
    n_embd: int,
    n_ff_exp: int,
    n_expert: int,
    qtype: QT = QT.F16,
    bias: bool = False,
) -> None:
    """Router + stacked experts (ffn_{gate,up,down}_exps); no ffn_norm."""
    p = f"blk.{i}."
    f.tensor(p + "ffn_gate_inp.weight", (n_embd, n_expert), QT.F32)
    f.tensor(p + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), qtype)
    f.tensor(p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), qtype)
    f.tensor(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), qtype)
    if bias:
        f.tensor(p + "ffn_gate_inp.bias", (n_expert,))
        f.tensor(p + "ffn_gate_exps.bias", (n_ff_exp, n_expert), QT.F32)
        f.tensor(p + "ffn_up_exps.bias", (n_ff_exp, n_expert), QT.F32)
        f.tensor(p + "ffn_down_exps.bias", (n_embd, n_expert), QT.F32)


def shared_expert(f: Fixture, i: int, n_embd: int, n_ff_shexp: int, qtype: QT = QT.F16) -> None:
    p = f"blk.{i}."
    f.tensor(p + "ffn_gate_shexp.weight", (n_embd, n_ff_shexp), qtype)
    f.tensor(p + "ffn_up_shexp.weight", (n_embd, n_ff_shexp), qtype)
    f.tensor(p + "ffn_down_shexp.weight", (n_ff_shexp, n_embd), qtype)


def mamba2_mixer(
    f: Fixture,
    i: int,
    n_embd: int,
    d_inner: int,
    d_state: int,
    n_group: int,
    n_ssm_head: int,
    d_conv: int,
) -> None:
    """Mamba-2 SSM block tensors (as in llama.cpp's mamba2 / granitehybrid loaders)."""
    p = f"blk.{i}."
    conv_dim = d_inner + 2 * n_group * d_state
    f.tensor(p + "ssm_in.weight", (n_embd, d_inner + conv_dim + n_ssm_head))
    f.tensor(p + "ssm_conv1d.weight", (d_conv, conv_dim), QT.F32)
    f.tensor(p + "ssm_conv1d.bias", (conv_dim,))
    f.tensor(p + "ssm_dt.bias", (n_ssm_head,))
    f.tensor(p + "ssm_a", (1, n_ssm_head), QT.F32, fill="neg")
    f.tensor(p + "ssm_d", (1, n_ssm_head), QT.F32, fill="ones")
    f.tensor(p + "ssm_norm.weight", (d_inner // n_group, n_group), QT.F32, fill="ones")
    f.tensor(p + "ssm_out.weight", (d_inner, n_embd))


def ssm_keys(
    f: Fixture, d_conv: int, d_inner: int, d_state: int, n_ssm_head: int, n_group: int
) -> None:
    f.key("ssm.conv_kernel", d_conv)
    f.key("ssm.inner_size", d_inner)
    f.key("ssm.state_size", d_state)
    f.key("ssm.time_step_rank", n_ssm_head)
    f.key("ssm.group_count", n_group)


def transformer_keys(
    f: Fixture,
    *,
    n_layer: int,
    n_embd: int,
    n_ff,
    n_head,
    n_head_kv,
    key_len: int | None = None,
    value_len: int | None = None,
    rope_dim: int | None = None,
    eps: float = 1e-5,
) -> None:
    f.w.add_block_count(n_layer)
    f.w.add_embedding_length(n_embd)
    f.w.add_feed_forward_length(n_ff)
    f.w.add_head_count(n_head)
    f.w.add_head_count_kv(n_head_kv)
    if key_len is not None:
        f.w.add_key_length(key_len)
    if value_len is not None:
        f.w.add_value_length(value_len)
    if rope_dim is not None:
        f.w.add_rope_dimension_count(rope_dim)
    f.w.add_rope_freq_base(10000.0)
    f.w.add_layer_norm_rms_eps(eps)


# --------------------------------------------------------------------------
# Fixtures (one function each)
# --------------------------------------------------------------------------


def _llama(
    file_name: str,
    name: str,
    *,
    seed: int,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    n_vocab: int,
    ctx: int,
    tied: bool,
    ffn_type: QT,
    embd_type: QT,
    split_max_tensors: int = 0,
) -> Fixture:
    """Plain Llama (dense GQA), shared by dense-llama, tied-llama and split-llama."""
    f = Fixture(
        file_name,
        "llama",
        seed,
        split_max_tensors=split_max_tensors,
        kv_layers=list(range(n_layer)),
    )
    ftype = (
        gguf.LlamaFileType.MOSTLY_Q8_0
        if QT.Q8_0 in (ffn_type, embd_type)
        else gguf.LlamaFileType.MOSTLY_F16
    )
    f.general(name, ftype, n_vocab, ctx)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        rope_dim=n_embd // n_head,
    )
    f.w.add_vocab_size(n_vocab)
    embeddings(f, n_embd, n_vocab, tied=tied, embd_type=embd_type, out_type=ffn_type)
    for i in range(n_layer):
        attention(f, i, n_embd, n_head, n_head_kv, n_embd // n_head)
        dense_ffn(f, i, n_embd, n_ff, ffn_type)
    return f


def dense_llama() -> Fixture:
    return _llama(
        "dense-llama.gguf",
        "fixture dense llama",
        seed=1,
        n_layer=4,
        n_embd=64,
        n_head=4,
        n_head_kv=2,
        n_ff=128,
        n_vocab=320,
        ctx=4096,
        tied=False,
        ffn_type=QT.Q8_0,
        embd_type=QT.F16,
    )


def tied_llama() -> Fixture:
    return _llama(
        "tied-llama.gguf",
        "fixture tied llama",
        seed=10,
        n_layer=3,
        n_embd=96,
        n_head=6,
        n_head_kv=6,
        n_ff=256,
        n_vocab=320,
        ctx=2048,
        tied=True,
        ffn_type=QT.F16,
        embd_type=QT.Q8_0,
    )


def split_llama() -> Fixture:
    # 4 layers x 9 tensors + 3 = 39 tensors -> 13 per shard -> exactly 3 shards
    return _llama(
        "split-llama.gguf",
        "fixture split llama",
        seed=11,
        n_layer=4,
        n_embd=64,
        n_head=4,
        n_head_kv=4,
        n_ff=192,
        n_vocab=320,
        ctx=16384,
        tied=False,
        ffn_type=QT.F16,
        embd_type=QT.F16,
        split_max_tensors=13,
    )


def per_layer_kv() -> Fixture:
    """deci (Nemotron-NAS style): per-layer n_head / n_head_kv / n_ff arrays.

    Layer 4 has n_head_kv = 0 with n_head > 0: llama.cpp treats it as a
    "linear attention" layer (attn_output only, no K/V, no KV cache).
    """
    n_layer, n_embd, head = 5, 64, 16
    n_head = [4, 4, 2, 4, 4]
    n_head_kv = [2, 1, 2, 4, 0]
    n_ff = [128, 96, 128, 64, 128]
    f = Fixture(
        "per-layer-kv.gguf",
        "deci",
        seed=2,
        kv_layers=list(range(n_layer)),
        notes="layer 4: n_head_kv=0 -> 'linear attention' (attn_output only, no K/V "
        "projections); it is still a KV-cache layer with 0-wide K (and V padded "
        "to the widest layer when FA is off; with FA on V = 147456 B at n_ctx 512)",
    )
    f.general("fixture per-layer kv deci", gguf.LlamaFileType.MOSTLY_Q4_0, 384, 8192)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        rope_dim=head,
    )
    f.w.add_vocab_size(384)
    embeddings(f, n_embd, 384, tied=False)
    for i in range(n_layer):
        if n_head_kv[i] > 0:
            attention(f, i, n_embd, n_head[i], n_head_kv[i], head)
        else:
            f.norm(f"blk.{i}.attn_norm.weight", n_embd)
            f.tensor(f"blk.{i}.attn_output.weight", (n_embd, n_embd))
        dense_ffn(f, i, n_embd, n_ff[i], QT.Q4_0)
    return f


def swa_gemma3() -> Fixture:
    """gemma3 with sliding_window and the default pattern period 6 (5 SWA : 1 full)."""
    n_layer, n_embd, n_head, n_head_kv, head, n_ff = 7, 64, 4, 2, 32, 128
    f = Fixture(
        "swa-gemma3.gguf",
        "gemma3",
        seed=3,
        kv_layers=list(range(n_layer)),
        swa_layers=[i for i in range(n_layer) if i % 6 < 5],
    )
    f.general("fixture swa gemma3", gguf.LlamaFileType.MOSTLY_F16, 512, 32768)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_len=head,
        value_len=head,
        eps=1e-6,
    )
    f.w.add_sliding_window(128)
    f.w.add_rope_freq_base_swa(10000.0)
    embeddings(f, n_embd, 512, tied=True)
    for i in range(n_layer):
        p = f"blk.{i}."
        attention(f, i, n_embd, n_head, n_head_kv, head)
        f.norm(p + "attn_q_norm.weight", head)
        f.norm(p + "attn_k_norm.weight", head)
        f.norm(p + "post_attention_norm.weight", n_embd)
        dense_ffn(f, i, n_embd, n_ff)
        f.norm(p + "post_ffw_norm.weight", n_embd)
    return f


def swa_gptoss() -> Fixture:
    """gpt-oss: MoE (MXFP4 experts, biases), attention sinks, SWA period 2."""
    n_layer, n_embd, n_head, n_head_kv, head = 4, 64, 4, 2, 32
    n_expert, n_expert_used, n_ff_exp = 4, 2, 64
    f = Fixture(
        "swa-gptoss.gguf",
        "gpt-oss",
        seed=4,
        kv_layers=list(range(n_layer)),
        swa_layers=[i for i in range(n_layer) if i % 2 == 0],
    )
    f.general("fixture swa gpt-oss", gguf.LlamaFileType.MOSTLY_MXFP4_MOE, 448, 131072)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff_exp,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_len=head,
        value_len=head,
    )
    f.w.add_sliding_window(128)
    f.w.add_expert_count(n_expert)
    f.w.add_expert_used_count(n_expert_used)
    f.w.add_expert_feed_forward_length(n_ff_exp)
    embeddings(f, n_embd, 448, tied=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        attention(f, i, n_embd, n_head, n_head_kv, head, bias=True)
        f.tensor(p + "attn_output.bias", (n_embd,))
        f.tensor(p + "attn_sinks.weight", (n_head,))
        f.norm(p + "post_attention_norm.weight", n_embd)
        moe_ffn(f, i, n_embd, n_ff_exp, n_expert, QT.MXFP4, bias=True)
    return f


def mla_deepseek2() -> Fixture:
    """deepseek2 with MLA keys as the current converter writes them (MQA view)."""
    n_layer, n_embd, n_head = 3, 64, 4
    q_lora, kv_lora, rope, nope, v_head = 32, 32, 16, 32, 32
    n_ff, n_expert, n_expert_used, n_ff_exp = 128, 4, 2, 32
    f = Fixture(
        "mla-deepseek2.gguf",
        "deepseek2",
        seed=5,
        kv_layers=list(range(n_layer)),
        notes="layer 0 dense FFN, layers 1-2 MoE + 1 shared expert",
    )
    f.general("fixture mla deepseek2", gguf.LlamaFileType.MOSTLY_Q8_0, 352, 163840)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=1,
        key_len=kv_lora + rope,
        value_len=kv_lora,
        rope_dim=rope,
        eps=1e-6,
    )
    f.w.add_key_length_mla(nope + rope)
    f.w.add_value_length_mla(v_head)
    f.w.add_q_lora_rank(q_lora)
    f.w.add_kv_lora_rank(kv_lora)
    f.w.add_leading_dense_block_count(1)
    f.w.add_expert_count(n_expert)
    f.w.add_expert_used_count(n_expert_used)
    f.w.add_expert_shared_count(1)
    f.w.add_expert_feed_forward_length(n_ff_exp)
    f.w.add_expert_weights_scale(2.5)
    f.w.add_expert_weights_norm(True)
    f.w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    f.w.add_vocab_size(352)
    embeddings(f, n_embd, 352, tied=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        f.norm(p + "attn_norm.weight", n_embd)
        f.tensor(p + "attn_q_a.weight", (n_embd, q_lora))
        f.norm(p + "attn_q_a_norm.weight", q_lora)
        f.tensor(p + "attn_q_b.weight", (q_lora, n_head * (nope + rope)))
        f.tensor(p + "attn_kv_a_mqa.weight", (n_embd, kv_lora + rope))
        f.norm(p + "attn_kv_a_norm.weight", kv_lora)
        f.tensor(p + "attn_k_b.weight", (nope, kv_lora, n_head))
        f.tensor(p + "attn_v_b.weight", (kv_lora, v_head, n_head))
        f.tensor(p + "attn_output.weight", (n_head * v_head, n_embd))
        if i == 0:
            dense_ffn(f, i, n_embd, n_ff)
        else:
            f.norm(p + "ffn_norm.weight", n_embd)
            moe_ffn(f, i, n_embd, n_ff_exp, n_expert, QT.Q8_0)
            f.tensor(p + "exp_probs_b.bias", (n_expert,), fill="zeros")
            shared_expert(f, i, n_embd, n_ff_exp)
    return f


def hybrid_granite() -> Fixture:
    """granitehybrid (Granite-4.0-H style): Mamba-2 layers where head_count_kv[il] == 0."""
    n_layer, n_embd, n_head, n_ff = 6, 64, 4, 128
    n_head_kv = [0, 0, 2, 0, 0, 2]
    d_conv, d_inner, d_state, n_group, n_ssm_head = 4, 2 * n_embd, 16, 1, 8
    attn = [i for i in range(n_layer) if n_head_kv[i] > 0]
    f = Fixture(
        "hybrid-granite.gguf",
        "granitehybrid",
        seed=6,
        kv_layers=attn,
        recurrent_layers=[i for i in range(n_layer) if n_head_kv[i] == 0],
    )
    f.general("fixture hybrid granite", gguf.LlamaFileType.MOSTLY_F16, 320, 524288)
    transformer_keys(
        f, n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv
    )
    ssm_keys(f, d_conv, d_inner, d_state, n_ssm_head, n_group)
    f.w.add_rope_scaling_finetuned(False)  # Granite-4.0-H: no RoPE
    f.w.add_embedding_scale(12.0)
    f.w.add_residual_scale(0.22)
    f.w.add_logit_scale(6.0)
    f.w.add_attention_scale(0.0078125)
    embeddings(f, n_embd, 320, tied=True)
    for i in range(n_layer):
        if i in attn:
            attention(f, i, n_embd, n_head, n_head_kv[i], n_embd // n_head)
        else:
            f.norm(f"blk.{i}.attn_norm.weight", n_embd)
            mamba2_mixer(f, i, n_embd, d_inner, d_state, n_group, n_ssm_head, d_conv)
        dense_ffn(f, i, n_embd, n_ff)
    return f


def recurrent_mamba2() -> Fixture:
    """Pure Mamba-2: no attention (head_count = 0), tied embeddings."""
    n_layer, n_embd = 3, 64
    d_conv, d_inner, d_state, n_group, n_ssm_head = 4, 128, 32, 2, 4
    f = Fixture("recurrent-mamba2.gguf", "mamba2", seed=7, recurrent_layers=list(range(n_layer)))
    f.general("fixture recurrent mamba2", gguf.LlamaFileType.MOSTLY_F16, 336, 1048576)
    f.w.add_embedding_length(n_embd)
    f.w.add_feed_forward_length(0)
    f.w.add_head_count(0)
    f.w.add_block_count(n_layer)
    ssm_keys(f, d_conv, d_inner, d_state, n_ssm_head, n_group)
    f.w.add_layer_norm_rms_eps(1e-5)
    embeddings(f, n_embd, 336, tied=True)
    for i in range(n_layer):
        f.norm(f"blk.{i}.attn_norm.weight", n_embd)
        mamba2_mixer(f, i, n_embd, d_inner, d_state, n_group, n_ssm_head, d_conv)
    return f


def moe_qwen3() -> Fixture:
    """qwen3moe: 8 experts, 2 used, explicit head dim (n_head * head_dim != n_embd)."""
    n_layer, n_embd, n_head, n_head_kv, head = 4, 64, 4, 2, 32
    n_expert, n_expert_used, n_ff_exp = 8, 2, 32
    f = Fixture("moe-qwen3.gguf", "qwen3moe", seed=8, kv_layers=list(range(n_layer)))
    f.general("fixture moe qwen3", gguf.LlamaFileType.MOSTLY_Q8_0, 416, 40960)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=192,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_len=head,
        value_len=head,
        eps=1e-6,
    )
    f.w.add_expert_count(n_expert)
    f.w.add_expert_used_count(n_expert_used)
    f.w.add_expert_feed_forward_length(n_ff_exp)
    embeddings(f, n_embd, 416, tied=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        attention(f, i, n_embd, n_head, n_head_kv, head)
        f.norm(p + "attn_q_norm.weight", head)
        f.norm(p + "attn_k_norm.weight", head)
        f.norm(p + "ffn_norm.weight", n_embd)
        moe_ffn(f, i, n_embd, n_ff_exp, n_expert, QT.Q8_0)
    return f


def nextn_glm4moe() -> Fixture:
    """glm4moe with one NextN/MTP block appended (block_count = 3 trunk + 1 NextN)."""
    n_trunk, n_embd, n_head, n_head_kv, head, rope = 3, 64, 4, 2, 32, 16
    n_ff, n_expert, n_expert_used, n_ff_exp, n_vocab = 128, 4, 2, 32, 400
    n_layer = n_trunk + 1
    f = Fixture(
        "nextn-glm4moe.gguf",
        "glm4moe",
        seed=9,
        kv_layers=list(range(n_trunk)),
        notes=f"layer 0 dense FFN, layers 1-{n_layer - 1} MoE + 1 shared expert; "
        f"blk.{n_trunk} is the NextN block (skipped unless MTP is loaded)",
    )
    f.general("fixture nextn glm4moe", gguf.LlamaFileType.MOSTLY_Q4_0, n_vocab, 65536)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        key_len=head,
        value_len=head,
        rope_dim=rope,
    )
    f.w.add_nextn_predict_layers(1)
    f.w.add_leading_dense_block_count(1)
    f.w.add_expert_count(n_expert)
    f.w.add_expert_used_count(n_expert_used)
    f.w.add_expert_shared_count(1)
    f.w.add_expert_feed_forward_length(n_ff_exp)
    f.w.add_expert_weights_scale(1.0)
    f.w.add_expert_weights_norm(True)
    f.w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    embeddings(f, n_embd, n_vocab, tied=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        attention(f, i, n_embd, n_head, n_head_kv, head, bias=True)
        f.norm(p + "post_attention_norm.weight", n_embd)
        if i == 0:
            dense_ffn(f, i, n_embd, n_ff, norm=False)
        else:
            moe_ffn(f, i, n_embd, n_ff_exp, n_expert, QT.Q4_0)
            f.tensor(p + "exp_probs_b.bias", (n_expert,), fill="zeros")
            shared_expert(f, i, n_embd, n_ff_exp)
    p = f"blk.{n_trunk}.nextn."
    f.tensor(p + "eh_proj.weight", (2 * n_embd, n_embd))
    f.norm(p + "enorm.weight", n_embd)
    f.norm(p + "hnorm.weight", n_embd)
    f.norm(p + "shared_head_norm.weight", n_embd)
    f.tensor(p + "embed_tokens.weight", (n_embd, n_vocab))
    f.tensor(p + "shared_head_head.weight", (n_embd, n_vocab))
    return f


FIXTURES: list[Callable[[], Fixture]] = [
    dense_llama,
    per_layer_kv,
    swa_gemma3,
    swa_gptoss,
    mla_deepseek2,
    hybrid_granite,
    recurrent_mamba2,
    moe_qwen3,
    nextn_glm4moe,
    tied_llama,
    split_llama,
]


# --------------------------------------------------------------------------
# llama.cpp load results, observed with llama-cpp-python 0.3.36 (llama.cpp
# 0c1e570, CPU) and Llama(model_path, n_ctx=512, verbose=True): flash attention
# off, f16 K/V, 1 sequence, swa_full on (libllama default).  Byte counts are
# exact; the log prints them in MiB with two decimals.  --verify renders the
# log lines from these numbers (same printf formats as llama.cpp) and checks
# that they appear on stderr.
# --------------------------------------------------------------------------


def _mib(n: int) -> float:
    return float(np.float32(n) / np.float32(1024 * 1024))  # llama.cpp prints (float)bytes / MiB


@dataclass(frozen=True)
class KVCache:
    """One `llama_kv_cache` (f16 K/V)."""

    cells: int
    layers: int
    k_bytes: int
    v_bytes: int
    label: str = "KV cache"

    def line(self) -> str:
        return (
            f"llama_kv_cache: size = {_mib(self.k_bytes + self.v_bytes):7.2f} MiB "
            f"({self.cells:6d} cells, {self.layers:3d} layers,  1/1 seqs), "
            f"K (f16): {_mib(self.k_bytes):7.2f} MiB, V (f16): {_mib(self.v_bytes):7.2f} MiB"
        )

    def describe(self) -> str:
        return (
            f"{self.label}: {self.cells} cells, {self.layers} layers, "
            f"K {self.k_bytes} B, V {self.v_bytes} B"
        )


@dataclass(frozen=True)
class RSCache:
    """One `llama_memory_recurrent` (f32 R/S state, 1 sequence); `layers` = n_layer as logged."""

    layers: int
    r_bytes: int
    s_bytes: int

    def line(self) -> str:
        return (
            f"llama_memory_recurrent: size = {_mib(self.r_bytes + self.s_bytes):7.2f} MiB "
            f"({1:6d} cells, {self.layers:3d} layers,  1 seqs  0 rs_seq), "
            f"R (f32): {_mib(self.r_bytes):7.2f} MiB, S (f32): {_mib(self.s_bytes):7.2f} MiB, "
            f"P (f32): {0.0:7.2f} MiB"
        )

    def describe(self) -> str:
        return f"recurrent state: 1 cell (1 seq), R {self.r_bytes} B, S {self.s_bytes} B"


ISWA_FULL = (
    "llama_kv_cache_iswa: using full-size SWA cache "
    "(ref: https://github.com/ggml-org/llama.cpp/pull/13194#issuecomment-2868343055)"
)
ISWA_BASE = "llama_kv_cache_iswa: creating non-SWA KV cache, size = 512 cells"
ISWA_SWA = "llama_kv_cache_iswa: creating     SWA KV cache, size = 512 cells"


def _v_pad(width: int) -> str:
    return (
        "llama_kv_cache: the V embeddings have different sizes across layers and FA is not "
        f"enabled - padding V cache to {width}"
    )


# K bytes = sum over cache layers of n_head_kv*head_k * 2 B * 512 cells (V likewise).
EXPECTED: dict[str, list[KVCache | RSCache | str]] = {
    "dense-llama.gguf": [KVCache(512, 4, 131072, 131072)],
    # K: (32+16+32+64+0)*2*512; V padded to 64 wide for all 5 layers (FA off)
    "per-layer-kv.gguf": [_v_pad(64), KVCache(512, 5, 147456, 327680)],
    "swa-gemma3.gguf": [
        ISWA_FULL,
        ISWA_BASE,
        KVCache(512, 1, 65536, 65536, "non-SWA KV cache"),
        ISWA_SWA,
        KVCache(512, 6, 393216, 393216, "SWA KV cache"),
    ],
    "swa-gptoss.gguf": [
        ISWA_FULL,
        ISWA_BASE,
        KVCache(512, 2, 131072, 131072, "non-SWA KV cache"),
        ISWA_SWA,
        KVCache(512, 2, 131072, 131072, "SWA KV cache"),
    ],
    # MLA: K row = kv_lora + rope = 48, no V
    "mla-deepseek2.gguf": [KVCache(512, 3, 147456, 0)],
    # R = 3*(128+2*1*16)*4 B, S = 16*128*4 B, per recurrent layer (4 of them)
    "hybrid-granite.gguf": [_v_pad(32), KVCache(512, 2, 65536, 65536), RSCache(6, 7680, 32768)],
    # R = 3*(128+2*2*32)*4 B, S = 32*128*4 B, 3 layers
    "recurrent-mamba2.gguf": [RSCache(3, 9216, 49152)],
    "moe-qwen3.gguf": [KVCache(512, 4, 262144, 262144)],
    "nextn-glm4moe.gguf": [KVCache(512, 3, 196608, 196608)],  # NextN block has no KV
    "tied-llama.gguf": [KVCache(512, 3, 294912, 294912)],
    "split-llama-00001-of-00003.gguf": [KVCache(512, 4, 262144, 262144)],
}


def expected_lines(file_name: str) -> list[str]:
    return [e if isinstance(e, str) else e.line() for e in EXPECTED.get(file_name, [])]


# --------------------------------------------------------------------------
# README (table read back from the written files)
# --------------------------------------------------------------------------


def _read_fixture(paths: list[Path]) -> tuple[dict, list, list[int]]:
    """KV dict (first shard), tensors (all shards) and tensor count per shard."""
    kv: dict = {}
    tensors: list = []
    shard_sizes = []
    for n, path in enumerate(paths):
        r = gguf.GGUFReader(path)
        if n == 0:
            kv = {name: fld.contents() for name, fld in r.fields.items()}
        tensors.extend(r.tensors)
        shard_sizes.append(len(r.tensors))
    return kv, tensors, shard_sizes


def _fmt(v) -> str:
    if isinstance(v, list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return "–" if v is None else str(v)


def _layers(v: list[int] | None) -> str:
    return "none" if not v else ",".join(map(str, v))


def _head_dims(k: Callable[[str], object]) -> str:
    """`key_length/value_length`; `*` marks the default n_embd/n_head(layer 0)."""
    n_head = k("attention.head_count")
    h0 = n_head[0] if isinstance(n_head, list) else n_head
    default = f"{k('embedding_length') // h0}*" if h0 else "–"
    kl, vl = k("attention.key_length"), k("attention.value_length")
    return f"{default if kl is None else kl}/{default if vl is None else vl}"


def _ffn(k: Callable[[str], object]) -> str:
    text = f"n_ff {_fmt(k('feed_forward_length'))}"
    if k("expert_count"):
        text += (
            f"; experts {k('expert_count')} used {k('expert_used_count')} "
            f"shared {k('expert_shared_count') or 0}, n_ff_exp {k('expert_feed_forward_length')}"
        )
        if k("leading_dense_block_count"):
            text += f", dense lead {k('leading_dense_block_count')}"
    return text


def _special(
    f: Fixture, k: Callable[[str], object], paths: list[Path], shard_sizes: list[int]
) -> str:
    """SWA / MLA / SSM / rope / split details of one fixture."""
    parts = []
    if k("attention.sliding_window") is not None:
        parts.append(
            f"SWA window {k('attention.sliding_window')}, SWA layers {_layers(f.swa_layers)}"
        )
    if k("attention.key_length_mla") is not None:
        parts.append(
            f"MLA kv_lora_rank {k('attention.kv_lora_rank')}, q_lora_rank "
            f"{k('attention.q_lora_rank')}, key_length_mla {k('attention.key_length_mla')}, "
            f"value_length_mla {k('attention.value_length_mla')}"
        )
    if k("ssm.inner_size") is not None:
        parts.append(
            f"SSM d_conv {k('ssm.conv_kernel')}, d_inner {k('ssm.inner_size')}, "
            f"d_state {k('ssm.state_size')}, n_group {k('ssm.group_count')}, "
            f"dt_rank {k('ssm.time_step_rank')}; recurrent layers {_layers(f.recurrent_layers)}"
        )
    if k("rope.dimension_count") is not None:
        parts.append(f"rope dim {k('rope.dimension_count')}")
    if len(paths) > 1:
        parts.append("tensors per shard " + "/".join(map(str, shard_sizes)))
    if f.notes:
        parts.append(f.notes)
    return "; ".join(parts) or "–"


def _row(f: Fixture, paths: list[Path]) -> str:
    kv, tensors, shard_sizes = _read_fixture(paths)

    def k(suffix: str):
        return kv.get(f"{f.arch}.{suffix}")

    names = {t.name for t in tensors}
    types = ", ".join(
        f"{t} ×{c}" for t, c in sorted(Counter(t.tensor_type.name for t in tensors).items())
    )
    ftype = gguf.LlamaFileType(kv["general.file_type"]).name
    nextn = f" (nextn {k('nextn_predict_layers')})" if k("nextn_predict_layers") else ""
    cells = [
        " + ".join(f"`{p.name}`" for p in paths),
        f"`{f.arch}`",
        f"{k('block_count')}{nextn}",
        str(k("embedding_length")),
        _fmt(k("attention.head_count")),
        _fmt(k("attention.head_count_kv")),
        _head_dims(k),
        _ffn(k),
        _special(f, k, paths, shard_sizes),
        str(len(kv["tokenizer.ggml.tokens"])),
        str(k("context_length")),
        "untied" if "output.weight" in names else "tied",
        str(len(tensors)),
        f"{ftype}: {types}",
        str(sum(int(t.n_bytes) for t in tensors)),
        _layers(f.kv_layers),
    ]
    return "| " + " | ".join(cells) + " |"


def _load_detail(file_name: str) -> str:
    lines = [f"- `{file_name}`:"]
    for e in EXPECTED.get(file_name, []):
        lines.append(
            f"  - `{e}`" if isinstance(e, str) else f"  - {e.describe()}:\n    `{e.line()}`"
        )
    return "\n".join(lines) + "\n"


README_HEAD = """\
# GGUF fixtures

Tiny random-weight models, one per architecture class that llamafit must size.
Regenerate them (byte-identical) with:

    python scripts/make_fixtures.py            # writes fixtures/*.gguf and this README
    python scripts/make_fixtures.py --verify   # also loads each one in llama-cpp-python

Do not edit by hand: the table is read back from the written files by
`scripts/make_fixtures.py`.

Columns: `k/v len` = `{arch}.attention.key_length`/`value_length` (`*` = key absent,
default n_embd/n_head); `n_head`/`n_head_kv` show the per-layer array when the GGUF
stores an array (`–` = key absent); `FFN` = `feed_forward_length` and the expert keys;
`tensor types` = `general.file_type` and tensor count per ggml type; `tensor bytes` = sum
of tensor data sizes (no alignment padding); `KV layers` = layers that own a K/V cache
in the main llama.cpp context (NextN/MTP and recurrent layers excluded). Layer indices
are 0-based.
All fixtures use a byte-level BPE tokenizer (`tokenizer.ggml.model = gpt2`, pre `gpt-2`,
256 byte tokens + 62 merges + `<|bos|>`/`<|eos|>` + `<|reserved_N|>` padding).

| file | arch | block_count | n_embd | n_head | n_head_kv | k/v len | FFN | SWA / MLA / SSM / notes | n_vocab | n_ctx_train | output | tensors | tensor types | tensor bytes | KV layers |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
"""

README_LOAD = """
## llama.cpp load results

llama-cpp-python 0.3.36 (llama.cpp 0c1e570, CPU build):
`Llama(model_path, n_ctx=512, verbose=True)` (flash attention off, f16 K/V,
1 sequence, `swa_full` = libllama default true), then a 2-token completion.
Every fixture loads and generates. Below: the exact cache bytes and the log lines
llama.cpp prints for them (MiB with two decimals; `--verify` checks these lines).
Model-buffer lines are not listed: on CPU they depend on the host (`CPU_REPACK`
repacking of Q4_0/Q8_0/MXFP4 tensors).

"""


def write_readme(out_dir: Path, built: list[tuple[Fixture, list[Path]]]) -> Path:
    rows = [_row(f, paths) for f, paths in built]
    details = [_load_detail(paths[0].name) for _, paths in built]
    text = README_HEAD + "\n".join(rows) + "\n" + README_LOAD + "".join(details)
    path = out_dir / "README.md"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------


def write_all(out_dir: Path) -> list[Path]:
    """Write every fixture (and README.md) into out_dir; return the .gguf paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = []
    for make in FIXTURES:
        f = make()
        built.append((f, f.write(out_dir)))
    write_readme(out_dir, built)
    return [p for _, paths in built for p in paths]


_LOAD_SCRIPT = """
import sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=True, seed=0)
out = llm.create_completion("hi", max_tokens=2, temperature=0.0)
print("COMPLETION_OK", repr(out["choices"][0]["text"]))
"""

_LOG_PREFIXES = ("llama_kv_cache", "llama_memory_recurrent", "llama_kv_cache_iswa")


def verify(paths: list[Path]) -> bool:
    """Load each fixture in a fresh llama-cpp-python process, run a 2-token completion
    and check that the expected KV/RS log lines appear on stderr."""
    ok = True
    for path in paths:
        if "-of-" in path.name and "-00001-of-" not in path.name:
            continue  # later shards are loaded through the first one
        proc = subprocess.run(
            [sys.executable, "-c", _LOAD_SCRIPT, str(path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        seen = [ln.strip() for ln in proc.stderr.splitlines() if ln.startswith(_LOG_PREFIXES)]
        loaded = proc.returncode == 0 and "COMPLETION_OK" in proc.stdout
        missing = [ln for ln in expected_lines(path.name) if ln not in seen]
        good = loaded and not missing and path.name in EXPECTED
        ok &= good
        print(f"{'ok' if good else 'FAIL'}: {path.name}")
        for ln in seen:
            if " size = " in ln or "padding" in ln:
                print(f"    {ln}")
        for ln in missing:
            print(f"    MISSING expected: {ln}")
        if not loaded:
            print("    " + "\n    ".join(proc.stderr.strip().splitlines()[-15:]))
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", type=Path, default=DEFAULT_OUT_DIR)
    ap.add_argument(
        "--verify",
        action="store_true",
        help="load every fixture with llama-cpp-python and check the KV/RS log lines",
    )
    args = ap.parse_args(argv)
    paths = write_all(args.out_dir)
    for p in paths:
        print(f"wrote {p} ({p.stat().st_size} bytes)")
    if args.verify:
        return 0 if verify(paths) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
