"""Per-architecture rules on synthetic metadata (no tensors needed): SWA, recurrence, shared KV,
MLA."""

from __future__ import annotations

from typing import Any

import pytest

from llamafit.errors import ModelFactsError
from llamafit.facts.arch_rules import RECURRENT_DIVISORS
from llamafit.facts.hparams import ModelFacts, build_facts
from llamafit.reader.header import GGUFHeader
from llamafit.reader.model import GGUFModel


def facts(arch: str, n_layer: int = 8, **keys: Any) -> ModelFacts:
    kv: dict[str, Any] = {
        "general.architecture": arch,
        f"{arch}.block_count": n_layer,
        f"{arch}.context_length": 4096,
        f"{arch}.embedding_length": 256,
        f"{arch}.attention.head_count": 4,
    }
    if arch in RECURRENT_DIVISORS:  # the sizes llama.cpp requires of their recurrent layers
        kv.update(
            {
                f"{arch}.ssm.{k}": v
                for k, v in (
                    ("conv_kernel", 4),
                    ("inner_size", 128),
                    ("state_size", 16),
                    ("time_step_rank", 8),
                    ("group_count", 1),
                )
            }
        )
    kv.update({k.replace("__", ".").replace("ARCH", arch): v for k, v in keys.items()})
    return build_facts(GGUFModel("m.gguf", (GGUFHeader("m.gguf", 3, kv, {}, (), 32, 0, 0, 0),)))


def swa_layers(f: ModelFacts) -> list[int]:
    return [il for il, s in enumerate(f.swa.is_swa) if s]


@pytest.mark.parametrize(
    ("arch", "n_layer", "keys", "swa_type", "n_swa", "expected"),
    [
        (
            "gemma3",
            12,
            {"ARCH__attention__sliding_window": 512},
            "standard",
            512,
            [0, 1, 2, 3, 4, 6, 7, 8, 9, 10],
        ),
        ("gemma3", 12, {}, "none", 0, []),  # no window: gemma3.cpp turns SWA off
        ("gemma2", 4, {}, "standard", 4096, [0, 2]),  # default window 4096, period 2
        ("gpt-oss", 4, {"ARCH__attention__sliding_window": 128}, "standard", 128, [0, 2]),
        (
            "cohere2",
            8,
            {"ARCH__attention__sliding_window": 4096},
            "standard",
            4096,
            [0, 1, 2, 4, 5, 6],
        ),
        (
            "cohere2moe",
            8,
            {"ARCH__attention__sliding_window": 4096},
            "standard",
            4096,
            [1, 2, 3, 5, 6, 7],
        ),
        ("llama4", 8, {}, "chunked", 8192, [0, 1, 2, 4, 5, 6]),
        ("llama4", 8, {"ARCH__attention__sliding_window": 0}, "none", 0, []),
        (
            "phi3",
            4,
            {"ARCH__attention__sliding_window": 2047},
            "none",
            0,
            [],
        ),  # phi3.cpp ignores it
        (
            "gemma3",
            6,
            {"ARCH__attention__sliding_window": 64, "ARCH__attention__sliding_window_pattern": 3},
            "standard",
            64,
            [0, 1, 3, 4],
        ),
        (
            "gemma3",
            4,
            {
                "ARCH__attention__sliding_window": 64,
                "ARCH__attention__sliding_window_pattern": [True, False, False, True],
            },
            "standard",
            64,
            [0, 3],
        ),
        ("exaone4", 64, {}, "standard", 4096, [il for il in range(64) if il % 4 != 3]),
        ("exaone4", 30, {"ARCH__attention__sliding_window": 4096}, "none", 0, []),
    ],
)
def test_swa_rules(
    arch: str, n_layer: int, keys: dict, swa_type: str, n_swa: int, expected: list[int]
) -> None:
    f = facts(arch, n_layer, **keys)
    assert (f.swa.swa_type, f.swa.n_swa, swa_layers(f)) == (swa_type, n_swa, expected)


def test_nextn_layers_are_never_swa() -> None:
    f = facts("gemma3", 7, ARCH__attention__sliding_window=64, ARCH__nextn_predict_layers=1)
    assert swa_layers(f) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("arch", "keys", "recurrent", "kv"),
    [
        ("qwen3next", {}, [0, 1, 2, 4, 5, 6], [3, 7]),  # full_attention_interval defaults to 4
        ("qwen3next", {"ARCH__full_attention_interval": 2}, [0, 2, 4, 6], [1, 3, 5, 7]),
        (
            "jamba",
            {"ARCH__attention__head_count_kv": [0, 0, 0, 1, 0, 0, 0, 1]},
            [0, 1, 2, 4, 5, 6],
            [3, 7],
        ),
        (
            "nemotron_h",
            {
                "ARCH__attention__head_count_kv": [0, 0, 2, 0, 0, 0, 2, 0],
                "ARCH__feed_forward_length": [0, 64, 0, 0, 64, 0, 0, 64],
            },
            [0, 3, 5],
            [2, 6],
        ),  # create_memory's filter_attn: not recurrent and n_ff == 0 (MLP layers hold none)
        ("falcon-h1", {}, list(range(8)), list(range(8))),  # attention and SSM on every layer
        ("mamba2", {}, list(range(8)), []),
    ],
)
def test_recurrent_layer_rules(arch: str, keys: dict, recurrent: list[int], kv: list[int]) -> None:
    f = facts(arch, 8, **keys)
    assert [il for il, r in enumerate(f.is_recurrent) if r] == recurrent
    assert [il for il, h in enumerate(f.has_kv) if h] == kv


@pytest.mark.parametrize(
    ("arch", "n_layer", "keys", "kv_from_start"),
    [
        ("gemma3n", 30, {"ARCH__attention__sliding_window": 512}, 20),
        (
            "gemma4",
            35,
            {
                "ARCH__attention__shared_kv_layers": 15,
                "ARCH__attention__sliding_window": 512,
                "ARCH__attention__sliding_window_pattern": [True] * 35,
            },
            20,
        ),
        ("llama", 8, {}, 8),
    ],
)
def test_layers_without_their_own_kv(
    arch: str, n_layer: int, keys: dict, kv_from_start: int
) -> None:
    f = facts(arch, n_layer, **keys)
    assert f.n_layer_kv_from_start == kv_from_start
    assert sum(f.has_kv) == kv_from_start


def test_mla_and_legacy_mla() -> None:
    mla = facts(
        "deepseek2",
        4,
        ARCH__attention__kv_lora_rank=512,
        ARCH__attention__key_length=576,
        ARCH__attention__value_length=512,
        ARCH__attention__key_length_mla=192,
        ARCH__attention__value_length_mla=128,
        ARCH__attention__head_count_kv=1,
    )
    assert mla.mla is not None and mla.n_embd_k_gqa(0) == 576 and mla.warnings == ()
    legacy = facts(
        "deepseek2",
        4,
        ARCH__attention__kv_lora_rank=512,
        ARCH__attention__key_length=192,
        ARCH__attention__value_length=128,
    )
    assert legacy.mla is None
    assert legacy.n_embd_k_gqa(0) == 192 * 4
    assert "converted before llama.cpp's MLA support" in legacy.warnings[0]
    # minicpm3.cpp reads kv_lora_rank but never MLA's key lengths: a full cache, no warning
    minicpm3 = facts(
        "minicpm3",
        4,
        ARCH__attention__kv_lora_rank=256,
        ARCH__attention__key_length=96,
    )
    assert minicpm3.mla is None and minicpm3.warnings == ()
    assert (minicpm3.n_embd_k_gqa(0), minicpm3.n_embd_v_gqa(0)) == (96 * 4, 64 * 4)
    # plm.cpp too: kv_lora_rank read, the cache full multi-head whatever the key lengths
    plm = facts(
        "plm",
        4,
        ARCH__attention__kv_lora_rank=512,
        ARCH__attention__key_length=192,
        ARCH__attention__value_length=128,
    )
    assert plm.mla is None and plm.warnings == ()
    assert (plm.n_embd_k_gqa(0), plm.n_embd_v_gqa(0)) == (192 * 4, 128 * 4)


@pytest.mark.parametrize(
    ("keys", "eps"), [({}, 0.0), ({"ARCH__attention__layer_norm_rms_epsilon": 1e-5}, 1e-5)]
)
def test_rms_epsilon_is_zero_where_unset(keys: dict[str, float], eps: float) -> None:
    """llama_hparams::f_norm_rms_eps: cohere2moe.cpp's norms are LayerNorms where it is 0."""
    f = facts("cohere2moe", 4, ARCH__attention__sliding_window=4096, **keys)
    assert f.norm_rms_eps == pytest.approx(eps)


def test_embedding_models_have_no_kv() -> None:
    f = facts("bert", 4)
    assert not f.causal and not any(f.has_kv)


def test_unknown_architecture_gets_generic_facts_and_a_warning() -> None:
    f = facts("frobnicator", 4, ARCH__attention__head_count_kv=2)
    assert f.n_embd_k_gqa(0) == 128 and sum(f.has_kv) == 4
    assert f.warnings == (
        "architecture 'frobnicator' is unknown to this llamafit: facts come from the generic "
        "keys (full attention on every layer, no recurrent state)",
    )


def test_per_layer_value_widths_and_v_max() -> None:
    f = facts("llama", 4, ARCH__attention__head_count_kv=[8, 4, 2, 0])
    assert [f.n_embd_k_gqa(il) for il in range(4)] == [512, 256, 128, 0]
    assert f.n_embd_v_gqa_max == 512


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"ARCH__attention__head_count_kv": [1, 2]},
            "key llama.attention.head_count_kv has wrong array length; expected 4, got 2",
        ),
        (
            {"ARCH__nextn_predict_layers": 9},
            "key llama.nextn_predict_layers = 9 leaves no layer of block_count 4 to run",
        ),
        (
            {"ARCH__embedding_length": "wide"},
            "key llama.embedding_length has type str, expected int",
        ),
    ],
)
def test_bad_metadata(keys: dict, message: str) -> None:
    with pytest.raises(ModelFactsError, match=message):
        facts("llama", 4, **keys)


def test_unmodelled_special_caches_are_named() -> None:
    f = facts("deepseek4", 4)
    assert f.warnings[0] == (
        "the compressed per-sequence cache (llama_kv_cache_dsv4) of 'deepseek4' is not modelled: "
        "KV predictions are a lower bound"
    )
