"""Rebuild a public log's model shape as a header-only GGUF (no tensor data, as a remote read sees
it).

Specs live in fixtures/calibration/gpu-shapes.json: one entry per model of the GPU corpus
(fixtures/calibration/gpu-corpus.jsonl), with the hyperparameters the log's print_info lines show
(completed from the model's published config where the excerpt cut them) and the tensor type when
the log pins it (`type`; else F16 and the corpus row does not check weights).

    python scripts/make_shape_header.py NAME [OUT]     # one spec
    python scripts/make_shape_header.py --all DIR      # every spec into DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from make_broken_fixtures import (
    T_ARRAY,
    T_FLOAT32,
    T_STRING,
    T_UINT32,
    gguf,
    kv,
    tensor_info,
)

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "fixtures" / "calibration" / "gpu-shapes.json"
# ggml type id: (block elements, bytes per block) — ggml/src/ggml.c type_traits
TYPES = {
    "f32": (0, 1, 4),
    "f16": (1, 1, 2),
    "q4_0": (2, 32, 18),
    "q8_0": (8, 32, 34),
    "q3_k": (11, 256, 110),
    "q4_k": (12, 256, 144),
    "q6_k": (14, 256, 210),
    "mxfp4": (39, 32, 17),
}


def load_specs() -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in json.loads(SHAPES.read_text())["shapes"]}


def _attention(s: dict[str, Any], i: int) -> list[tuple[str, list[int], str]]:
    e, t = s["n_embd"], s.get("type", "f16")
    hk, hv, nh, nkv = s["head_k"], s["head_v"], s["n_head"], s["n_head_kv"]
    p = f"blk.{i}."
    if s["arch"] == "deepseek2":  # src/models/deepseek2.cpp, pre-MLA conversion (no wk_b / wv_b)
        rope, lora, qlora = s["rope_dim"], s["kv_lora_rank"], s["q_lora_rank"]
        return [
            (p + "attn_q_a.weight", [e, qlora], t),
            (p + "attn_q_a_norm.weight", [qlora], "f32"),
            (p + "attn_q_b.weight", [qlora, nh * hk], t),
            (p + "attn_kv_a_mqa.weight", [e, lora + rope], t),
            (p + "attn_kv_a_norm.weight", [lora], "f32"),
            (p + "attn_kv_b.weight", [lora, nh * (hk - rope + hv)], t),
            (p + "attn_output.weight", [nh * hv, e], t),
        ]
    if s.get(
        "fused_qkv"
    ):  # gptneox, phi2, bloom...: one attn_qkv matrix (build_qkv splits it in views)
        width = nh * hk + 2 * nkv * hk
        out = [(p + "attn_qkv.weight", [e, width], t), (p + "attn_output.weight", [nh * hv, e], t)]
        if s.get("biases"):
            out += [(p + "attn_qkv.bias", [width], "f32"), (p + "attn_output.bias", [e], "f32")]
        return out
    out = [
        (p + "attn_q.weight", [e, nh * hk], t),
        (p + "attn_k.weight", [e, nkv * hk], t),
        (p + "attn_v.weight", [e, nkv * hv], t),
        (p + "attn_output.weight", [nh * hv, e], t),
    ]
    if s.get("qkv_bias"):
        out += [
            (p + "attn_q.bias", [nh * hk], "f32"),
            (p + "attn_k.bias", [nkv * hk], "f32"),
            (p + "attn_v.bias", [nkv * hv], "f32"),
        ]
    if s.get("qk_norm"):
        out += [(p + "attn_q_norm.weight", [hk], "f32"), (p + "attn_k_norm.weight", [hk], "f32")]
    return out


def _ffn(s: dict[str, Any], i: int) -> list[tuple[str, list[int], str]]:
    e, t, p = s["n_embd"], s.get("type", "f16"), f"blk.{i}."
    moe = s.get("moe")
    if moe and i >= moe.get("lead_dense", 0):
        n, ff, x = (
            moe["n_expert"],
            moe["n_ff_exp"],
            moe.get("exps_type", t),
        )  # gpt-oss: MXFP4 experts
        out = [
            (p + "ffn_gate_inp.weight", [e, n], "f32"),
            (p + "ffn_gate_exps.weight", [e, ff, n], x),
            (p + "ffn_up_exps.weight", [e, ff, n], x),
            (p + "ffn_down_exps.weight", [ff, e, n], x),
        ]
        if moe.get("n_shared"):
            sh = ff * moe["n_shared"]
            out += [
                (p + "ffn_gate_shexp.weight", [e, sh], t),
                (p + "ffn_up_shexp.weight", [e, sh], t),
                (p + "ffn_down_shexp.weight", [sh, e], t),
            ]
        return out
    ff = s["n_ff"]
    if s.get(
        "fused_up"
    ):  # glm4, phi3: the gate fused into ffn_up, 2 x n_ff wide (src/models/glm4.cpp)
        return [(p + "ffn_up.weight", [e, 2 * ff], t), (p + "ffn_down.weight", [ff, e], t)]
    out = (
        [] if s.get("no_gate") else [(p + "ffn_gate.weight", [e, ff], t)]
    )  # gptneox, gpt2, phi2...: GELU(up)
    out += [(p + "ffn_up.weight", [e, ff], t), (p + "ffn_down.weight", [ff, e], t)]
    if s.get("biases"):
        out += [(p + "ffn_up.bias", [ff], "f32"), (p + "ffn_down.bias", [e], "f32")]
    return out


def tensors(s: dict[str, Any]) -> list[tuple[str, list[int], str]]:
    e, v, t = s["n_embd"], s["n_vocab"], s.get("type", "f16")
    out = [("token_embd.weight", [e, v], s.get("embd_type", t))]
    norms = (
        ("weight", "bias") if s.get("norm_bias") else ("weight",)
    )  # LayerNorm models carry a bias
    for i in range(s["n_layer"]):
        out += [(f"blk.{i}.attn_norm.{k}", [e], "f32") for k in norms]
        out += _attention(s, i)
        if s.get("post_norms"):  # glm4: RMS norms after attention and after the FFN
            out.append((f"blk.{i}.post_attention_norm.weight", [e], "f32"))
        if not s.get(
            "parallel_block"
        ):  # command-r: attention and FFN read the same attn_norm output
            out += [(f"blk.{i}.ffn_norm.{k}", [e], "f32") for k in norms]
        out += _ffn(s, i)
        if s.get("post_norms"):
            out.append((f"blk.{i}.post_ffw_norm.weight", [e], "f32"))
    out += [(f"output_norm.{k}", [e], "f32") for k in norms]
    if not s.get("tied"):
        out.append(("output.weight", [e, v], s.get("output_type", t)))
    return out


def nbytes(shape: list[int], t: str) -> int:
    _, block, size = TYPES[t]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def header(s: dict[str, Any]) -> bytes:
    a = s["arch"]
    kvs = [
        kv("general.architecture", T_STRING, a),
        kv("general.name", T_STRING, f"{s['name']} (shape only)"),
        kv(f"{a}.block_count", T_UINT32, s["n_layer"]),
        kv(f"{a}.context_length", T_UINT32, s["n_ctx_train"]),
        kv(f"{a}.embedding_length", T_UINT32, s["n_embd"]),
        kv(f"{a}.feed_forward_length", T_UINT32, s["n_ff"]),
        kv(f"{a}.attention.head_count", T_UINT32, s["n_head"]),
        kv(f"{a}.attention.head_count_kv", T_UINT32, s["n_head_kv"]),
        kv(f"{a}.attention.key_length", T_UINT32, s["head_k"]),
        kv(f"{a}.attention.value_length", T_UINT32, s["head_v"]),
        kv(f"{a}.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-6),
        kv(f"{a}.vocab_size", T_UINT32, s["n_vocab"]),
        kv("tokenizer.ggml.model", T_STRING, "gpt2"),
        kv("tokenizer.ggml.token_type", T_ARRAY, (T_UINT32, [])),
    ]
    moe = s.get("moe")
    if moe:
        kvs += [
            kv(f"{a}.expert_count", T_UINT32, moe["n_expert"]),
            kv(f"{a}.expert_used_count", T_UINT32, moe["n_used"]),
            kv(f"{a}.expert_feed_forward_length", T_UINT32, moe["n_ff_exp"]),
        ]
        if moe.get("n_shared"):
            kvs.append(kv(f"{a}.expert_shared_count", T_UINT32, moe["n_shared"]))
        if moe.get("lead_dense"):
            kvs.append(kv(f"{a}.leading_dense_block_count", T_UINT32, moe["lead_dense"]))
    if s.get(
        "sliding_window"
    ):  # SWA archs (gemma2/3, gpt-oss): the window; the pattern is the arch's default
        kvs.append(kv(f"{a}.attention.sliding_window", T_UINT32, s["sliding_window"]))
    if a == "deepseek2":
        kvs += [
            kv(f"{a}.attention.q_lora_rank", T_UINT32, s["q_lora_rank"]),
            kv(f"{a}.attention.kv_lora_rank", T_UINT32, s["kv_lora_rank"]),
            kv(f"{a}.rope.dimension_count", T_UINT32, s["rope_dim"]),
        ]
    infos, offset = [], 0
    for name, shape, t in tensors(s):
        infos.append(tensor_info(name, shape, TYPES[t][0], offset))
        offset += -(-nbytes(shape, t) // 32) * 32
    return gguf(kvs, infos)


def write(name: str, out: Path) -> Path:
    out.write_bytes(header(load_specs()[name]))
    return out


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--all":
        target = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(".")
        for spec_name in load_specs():
            print(write(spec_name, target / f"{spec_name}.gguf"))
    elif len(sys.argv) >= 2:
        print(
            write(
                sys.argv[1], Path(sys.argv[2]) if len(sys.argv) > 2 else Path(f"{sys.argv[1]}.gguf")
            )
        )
    else:
        sys.exit(__doc__)
