"""Exact model facts for every fixture class and for the real Gemma 3 270M."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llamafit.facts.hparams import MLAFacts, ModelFacts, MoEFacts, build_facts
from llamafit.reader.model import read_model
from tests.support import FIXTURES
from tests.support.scripts import script


def facts_of(path: Path | str) -> ModelFacts:
    return build_facts(read_model(path))


def layers(flags: tuple[bool, ...]) -> list[int]:
    return [il for il, f in enumerate(flags) if f]


# Each fixture's facts by name: layer lists are the layers with that property (SWA, recurrent, KV).
FIXTURE_FACTS = json.loads((FIXTURES / "facts" / "fixture-facts.json").read_text())


@pytest.mark.parametrize(("name", "expected"), FIXTURE_FACTS.items(), ids=list(FIXTURE_FACTS))
def test_fixture_facts(name: str, expected: dict[str, Any]) -> None:
    f = facts_of(FIXTURES / name)
    got = {
        "architecture": f.architecture,
        "n_layer_all": f.n_layer_all,
        "n_layer_nextn": f.n_layer_nextn,
        "n_embd": f.n_embd,
        "n_vocab": f.n_vocab,
        "n_ctx_train": f.n_ctx_train,
        "n_head": list(f.n_head),
        "n_head_kv": list(f.n_head_kv),
        "n_embd_head_k_v": [f.n_embd_head_k, f.n_embd_head_v],
        "n_ff": list(f.n_ff),
        "swa_layers": layers(f.swa.is_swa),
        "n_swa": f.swa.n_swa,
        "recurrent_layers": layers(f.is_recurrent),
        "kv_layers": layers(f.has_kv),
        "tied_embeddings": f.tied_embeddings,
        "n_tensors": f.n_tensors,
        "weight_bytes": f.weights.total_bytes,
        "file_type": f.file_type,
    }
    assert got == expected
    assert f.warnings == ()
    assert f.n_merges == 62


def test_gemma3_270m_real_model(demo_path: Path) -> None:
    f = facts_of(demo_path)
    assert (f.architecture, f.name, f.file_type) == ("gemma3", "Gemma 3 270m", "Q4_K_M")
    assert (f.n_layer_all, f.n_layer, f.n_embd, f.n_vocab, f.n_ctx_train) == (
        18,
        18,
        640,
        262144,
        32768,
    )
    assert f.n_head == (4,) * 18 and f.n_head_kv == (1,) * 18
    assert (f.n_embd_head_k, f.n_embd_head_v) == (256, 256)
    assert (f.swa.swa_type, f.swa.n_swa) == ("standard", 512)
    assert layers(f.swa.is_swa) == [il for il in range(18) if il % 6 != 5]  # 5 SWA : 1 full
    assert f.tied_embeddings and f.n_tensors == 236 and f.n_shards == 1
    assert (f.n_params, f.file_size, f.weights.total_bytes) == (268098176, 253113024, 246587904)
    assert f.weights.token_embd_bytes == 262144 * 640 * 34 // 32  # token_embd is Q8_0 in this file
    assert f.mla is None and f.moe is None and f.recurrent is None


def test_split_model_sums_all_shards() -> None:
    shards = sorted(FIXTURES.glob("split-llama-*.gguf"))
    f = facts_of(shards[2])
    assert f.path == str(shards[0])
    assert f.n_shards == 3
    assert f.file_size == sum(p.stat().st_size for p in shards)


@pytest.mark.parametrize(
    ("name", "mla", "moe"),
    [
        ("mla-deepseek2.gguf", MLAFacts(32, 48, 32, q_lora_rank=32), MoEFacts(4, 2, 1, 32, 0, 1)),
        ("moe-qwen3.gguf", None, MoEFacts(8, 2, 0, 32, 0, 0)),
        ("nextn-glm4moe.gguf", None, MoEFacts(4, 2, 1, 32, 0, 1)),
        ("swa-gptoss.gguf", None, MoEFacts(4, 2, 0, 64, 0, 0)),
    ],
)
def test_mla_and_moe(name: str, mla: MLAFacts | None, moe: MoEFacts) -> None:
    f = facts_of(FIXTURES / name)
    assert (f.mla, f.moe) == (mla, moe)


@pytest.mark.parametrize(
    ("name", "n_embd_r", "n_embd_s"),
    [
        # (d_conv-1) * (d_inner + 2*n_group*d_state), d_state * d_inner  (llama_hparams::n_embd_r/s)
        ("hybrid-granite.gguf", 3 * (128 + 2 * 1 * 16), 16 * 128),
        ("recurrent-mamba2.gguf", 3 * (128 + 2 * 2 * 32), 32 * 128),
    ],
)
def test_recurrent_state_sizes(name: str, n_embd_r: int, n_embd_s: int) -> None:
    r = facts_of(FIXTURES / name).recurrent
    assert r is not None and (r.n_embd_r, r.n_embd_s) == (n_embd_r, n_embd_s)


def test_weights_by_role_add_up() -> None:
    f = facts_of(FIXTURES / "moe-qwen3.gguf")
    w = f.weights
    roles = w.by_role(range(f.n_layer_all))
    assert (
        sum(roles.values()) + w.token_embd_bytes + w.output_bytes + w.other_bytes == w.total_bytes
    )
    assert roles["experts"] > roles["attention"] > 0
    assert roles["recurrent"] == 0


def test_nextn_block_is_counted_but_not_a_kv_layer() -> None:
    f = facts_of(FIXTURES / "nextn-glm4moe.gguf")
    assert (f.n_layer_all, f.n_layer) == (4, 3)
    assert f.has_kv == (True, True, True, False)
    assert f.weights.layers[3].total > 0


def test_fixtures_regenerate_byte_identical(tmp_path: Path) -> None:
    write_all = script("make_fixtures").write_all

    written = [p for p in write_all(tmp_path) if p.suffix == ".gguf"]
    assert sorted(p.name for p in written) == sorted(p.name for p in FIXTURES.glob("*.gguf"))
    for p in written:
        assert p.read_bytes() == (FIXTURES / p.name).read_bytes(), p.name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nextn-glm4moe.gguf", (1.0, True, 2, False)),
        ("mla-deepseek2.gguf", (2.5, True, 2, False)),
        ("moe-qwen3.gguf", (0.0, False, 0, False)),
        ("swa-gptoss.gguf", (0.0, False, 0, False)),
    ],
)
def test_moe_graph_facts(name: str, expected: tuple[float, bool, int, bool]) -> None:
    """The keys build_moe_ffn's shape reads: expert_weights_scale, expert_weights_norm,
    expert_gating_func (0: unset, the arch's default), and rope.dimension_sections (M-RoPE)."""
    f = facts_of(FIXTURES / name)
    assert (f.expert_weights_scale, f.expert_weights_norm, f.expert_gating_func, f.use_mrope) == (
        expected
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("hybrid-granite.gguf", (12.0, 0.22, 6.0, False)),
        ("dense-llama.gguf", (0.0, 0.0, 0.0, None)),
    ],
)
def test_granite_graph_facts(name: str, expected: tuple[float, float, float, bool | None]) -> None:
    """Granite's embedding, residual and logit scales and rope.scaling.finetuned (unset: None)."""
    f = facts_of(FIXTURES / name)
    got = (f.embedding_scale, round(f.residual_scale, 6), f.logit_scale, f.rope_finetuned)
    assert got == expected
