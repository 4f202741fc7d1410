"""Graph terms per architecture family: real llama.cpp compute buffers vs llamafit's prediction.

    python scripts/audit/audit_families.py  # tiny real models in a temp dir, each on the CPU
    # the same, and writes fixtures/calibration/families-0c1e570-cpu.json:
    python scripts/audit/audit_families.py --write

For each family whose graph differs from the llama-style block the compute model was fitted on
(FFN without a gate, fused QKV, parallel attention/FFN, gate fused into up, ...), a tiny real model
is written with scripts/fixtures/make_fixtures.py's building blocks (random weights, a real
tokenizer) and loaded with llama-cpp-python (llama.cpp 0c1e570, CPU backend: one buffer holds the
whole graph) over a few settings chosen so the FFN or the attention sets the peak (n_outputs_max 1:
the logits stay small). It prints llama.cpp's compute buffer next to predict_compute's and the
error.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

from scripts.fixtures.make_fixtures import (  # noqa: E402
    Fixture,
    attention,
    dense_ffn,
    embeddings,
    transformer_keys,
)

N_VOCAB = 320
SETTINGS = [  # (n_ctx, flash_attn, n_ubatch)
    (512, True, 512),
    (2048, True, 512),
    (512, False, 512),
    (2048, False, 128),
]


def _norm_b(f: Fixture, name: str, n: int) -> None:
    f.norm(name + ".weight", n)
    f.tensor(name + ".bias", (n,))


def gptneox(n_embd: int = 256, n_ff: int = 2048, n_head: int = 4, n_layer: int = 2) -> Fixture:
    """src/models/gptneox.cpp: LayerNorm with bias, fused attn_qkv, GELU FFN without a gate,
    parallel residual (use_parallel_residual)."""
    f = Fixture("audit-gptneox.gguf", "gptneox", 101)
    f.general("audit gptneox", gguf.LlamaFileType.MOSTLY_F16, N_VOCAB, 4096)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head,
        rope_dim=n_embd // n_head // 4,
    )
    f.w.add_bool("gptneox.use_parallel_residual", True)
    f.w.add_layer_norm_eps(1e-5)
    f.tensor("token_embd.weight", (n_embd, N_VOCAB))
    _norm_b(f, "output_norm", n_embd)
    f.tensor("output.weight", (n_embd, N_VOCAB))
    for i in range(n_layer):
        p = f"blk.{i}."
        _norm_b(f, p + "attn_norm", n_embd)
        f.tensor(p + "attn_qkv.weight", (n_embd, 3 * n_embd))
        f.tensor(p + "attn_qkv.bias", (3 * n_embd,))
        f.tensor(p + "attn_output.weight", (n_embd, n_embd))
        f.tensor(p + "attn_output.bias", (n_embd,))
        _norm_b(f, p + "ffn_norm", n_embd)
        f.tensor(p + "ffn_up.weight", (n_embd, n_ff))
        f.tensor(p + "ffn_up.bias", (n_ff,))
        f.tensor(p + "ffn_down.weight", (n_ff, n_embd))
        f.tensor(p + "ffn_down.bias", (n_embd,))
    return f


def gpt2(n_embd: int = 256, n_ff: int = 2048, n_head: int = 4, n_layer: int = 2) -> Fixture:
    """src/models/gpt2.cpp: learned positions, LayerNorm with bias, fused attn_qkv, sequential
    residual (ffn_inp = attn_out + inpL), GELU FFN without a gate."""
    f = Fixture("audit-gpt2.gguf", "gpt2", 103)
    f.general("audit gpt2", gguf.LlamaFileType.MOSTLY_F16, N_VOCAB, 4096)
    transformer_keys(f, n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=n_head)
    f.w.add_layer_norm_eps(1e-5)
    f.tensor("token_embd.weight", (n_embd, N_VOCAB))
    f.tensor("position_embd.weight", (n_embd, 4096))
    _norm_b(f, "output_norm", n_embd)
    f.tensor("output.weight", (n_embd, N_VOCAB))
    for i in range(n_layer):
        p = f"blk.{i}."
        _norm_b(f, p + "attn_norm", n_embd)
        f.tensor(p + "attn_qkv.weight", (n_embd, 3 * n_embd))
        f.tensor(p + "attn_qkv.bias", (3 * n_embd,))
        f.tensor(p + "attn_output.weight", (n_embd, n_embd))
        f.tensor(p + "attn_output.bias", (n_embd,))
        _norm_b(f, p + "ffn_norm", n_embd)
        f.tensor(p + "ffn_up.weight", (n_embd, n_ff))
        f.tensor(p + "ffn_up.bias", (n_ff,))
        f.tensor(p + "ffn_down.weight", (n_ff, n_embd))
        f.tensor(p + "ffn_down.bias", (n_embd,))
    return f


def starcoder2(n_embd: int = 256, n_ff: int = 2048, n_head: int = 4, n_layer: int = 2) -> Fixture:
    """src/models/starcoder2.cpp: LayerNorm with bias, separate Q/K/V with biases, RoPE, sequential
    residual, GELU FFN without a gate."""
    f = Fixture("audit-starcoder2.gguf", "starcoder2", 104)
    f.general("audit starcoder2", gguf.LlamaFileType.MOSTLY_F16, N_VOCAB, 4096)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head,
        rope_dim=n_embd // n_head,
    )
    f.w.add_layer_norm_eps(1e-5)
    f.tensor("token_embd.weight", (n_embd, N_VOCAB))
    _norm_b(f, "output_norm", n_embd)
    f.tensor("output.weight", (n_embd, N_VOCAB))
    for i in range(n_layer):
        p = f"blk.{i}."
        _norm_b(f, p + "attn_norm", n_embd)
        for w in ("attn_q", "attn_k", "attn_v", "attn_output"):
            f.tensor(p + w + ".weight", (n_embd, n_embd))
            f.tensor(p + w + ".bias", (n_embd,))
        _norm_b(f, p + "ffn_norm", n_embd)
        f.tensor(p + "ffn_up.weight", (n_embd, n_ff))
        f.tensor(p + "ffn_up.bias", (n_ff,))
        f.tensor(p + "ffn_down.weight", (n_ff, n_embd))
        f.tensor(p + "ffn_down.bias", (n_embd,))
    return f


def command_r(n_embd: int = 256, n_ff: int = 2048, n_head: int = 4, n_layer: int = 2) -> Fixture:
    """src/models/command-r.cpp: one LayerNorm feeds attention and a gated FFN in parallel (no
    ffn_norm), tied output."""
    f = Fixture("audit-command-r.gguf", "command-r", 105)
    f.general("audit command-r", gguf.LlamaFileType.MOSTLY_F16, N_VOCAB, 4096)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head,
        rope_dim=n_embd // n_head,
    )
    f.w.add_layer_norm_eps(1e-5)
    f.w.add_logit_scale(0.0625)
    embeddings(f, n_embd, N_VOCAB, tied=True)
    for i in range(n_layer):
        attention(f, i, n_embd, n_head, n_head, n_embd // n_head)
        dense_ffn(f, i, n_embd, n_ff, QT.F16, norm=False)
    return f


def llama(n_embd: int = 256, n_ff: int = 2048, n_head: int = 4, n_layer: int = 2) -> Fixture:
    """The reference block (gated SwiGLU FFN, separate Q/K/V), same sizes."""
    f = Fixture("audit-llama.gguf", "llama", 102)
    f.general("audit llama", gguf.LlamaFileType.MOSTLY_F16, N_VOCAB, 4096)
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head,
        rope_dim=n_embd // n_head,
    )
    embeddings(f, n_embd, N_VOCAB, tied=False)
    for i in range(n_layer):
        attention(f, i, n_embd, n_head, n_head, n_embd // n_head)
        dense_ffn(f, i, n_embd, n_ff, QT.F16)
    return f


def glm4(n_embd: int = 256, n_ff: int = 2048, n_head: int = 4, n_layer: int = 2) -> Fixture:
    """src/models/glm4.cpp: the gate fused into ffn_up (2 x n_ff wide, no ffn_gate; build_ffn with
    LLM_FFN_SWIGLU splits it), post-attention and post-FFN norms, half-rotary Q/K."""
    f = Fixture("audit-glm4.gguf", "glm4", 106)
    f.general("audit glm4", gguf.LlamaFileType.MOSTLY_F16, N_VOCAB, 4096)
    head = n_embd // n_head
    transformer_keys(
        f,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head,
        key_len=head,
        value_len=head,
        rope_dim=head // 2,
    )
    embeddings(f, n_embd, N_VOCAB, tied=False)
    for i in range(n_layer):
        p = f"blk.{i}."
        attention(f, i, n_embd, n_head, n_head, head)
        f.norm(p + "post_attention_norm.weight", n_embd)
        f.norm(p + "ffn_norm.weight", n_embd)
        f.tensor(p + "ffn_up.weight", (n_embd, 2 * n_ff))
        f.tensor(p + "ffn_down.weight", (n_ff, n_embd))
        f.norm(p + "post_ffw_norm.weight", n_embd)
    return f


FAMILIES: dict[str, Callable[[], Fixture]] = {
    "llama (gated FFN)": llama,
    "gptneox (GELU, parallel)": gptneox,
    "gpt2 (GELU, sequential)": gpt2,
    "starcoder2 (GELU, q/k/v)": starcoder2,
    "command-r (parallel, GLU)": command_r,
    "glm4 (gate fused into up)": glm4,
}


def measure(path: Path) -> list[tuple[tuple[int, bool, int], float]]:
    from scripts.calibration.calibrate import parse_log, run_child

    configs = [
        {
            "n_ctx": c,
            "flash_attn": fa,
            "type_k": "f16",
            "type_v": "f16",
            "n_ubatch": ub,
            "n_seq_max": 1,
            "kv_unified": False,
            "swa_full": True,
            "n_outputs_max": 1,
        }
        for c, fa, ub in SETTINGS
    ]
    out = []
    for setting, log in zip(SETTINGS, run_child(str(path), configs), strict=True):
        if log is None:
            continue
        _, measured = parse_log(log)
        out.append((setting, measured["compute_buffers"]["CPU"]))
    return out


def predicted(path: Path, n_ctx: int, fa: bool, ub: int) -> int:
    from llamafit.facts.hparams import build_facts
    from llamafit.memory.compute import ComputeSettings, predict_compute
    from llamafit.reader.model import read_model

    f = build_facts(read_model(path))
    # 0c1e570: b11312
    s = ComputeSettings(n_ctx_seq=n_ctx, n_ubatch=ub, n_outputs=1, flash_attn=fa, mixed_input=False)
    return predict_compute(f, s).device


OUT = ROOT / "fixtures" / "calibration" / "families-0c1e570-cpu.json"


def main() -> None:
    rows = []
    print(
        f"{'family':<28}{'n_ctx':>7}{'fa':>4}{'ub':>5}{'llama.cpp MiB':>15}{'predicted':>11}"
        f"{'error':>9}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in FAMILIES.items():
            (path,) = build().write(Path(tmp))
            for (c, fa, ub), mib in measure(path):
                pred = predicted(path, c, fa, ub) / (1 << 20)
                print(
                    f"{name:<28}{c:>7}{int(fa):>4}{ub:>5}{mib:>15.2f}{pred:>11.2f}"
                    f"{pred / mib - 1:>+9.1%}"
                )
                rows.append(
                    {
                        "family": name,
                        "builder": build.__name__,
                        "n_ctx": c,
                        "flash_attn": fa,
                        "n_ubatch": ub,
                        "n_outputs_max": 1,
                        "compute_mib": mib,
                    }
                )
    if "--write" in sys.argv:
        doc = {
            "llama_cpp_commit": "0c1e57098bba43ac29e6e3b677cdceebdd22334f",
            "backend": "CPU (llama-cpp-python 0.3.36)",
            "notes": "CPU compute buffer (MiB, as llama.cpp prints it) of tiny real models "
            "built by scripts/audit/audit_families.py, one per graph family",
            "rows": rows,
        }
        OUT.write_text(json.dumps(doc, indent=1) + "\n")
        print(OUT)


if __name__ == "__main__":
    main()
