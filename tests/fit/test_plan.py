"""The honest verdict: the smallest catalog GPU, the speed cost of CPU layers, bytes read per
token."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llamafit.findings import Notice
from llamafit.fit.explain import plan, smallest_gpu_for
from llamafit.fit.solver import Policy, solve
from llamafit.fit.speed import Efficiency, SpeedInputs, estimate
from llamafit.machine.rates import Rate
from llamafit.memory.config import LaunchConfig, with_given
from llamafit.memory.placement import CPU
from llamafit.report.check import notice_text
from llamafit.report.plan import verdict_text
from tests.support import FIXTURES, QWEN, target

GB_S = 10**9


def test_smallest_gpu_for_the_trained_context() -> None:
    t = target(QWEN, "16GiB")
    card, need = smallest_gpu_for(t, LaunchConfig(type_k="q8_0", type_v="q8_0"), 32768)
    assert card == "NVIDIA GeForce RTX 3090 Ti (24 GiB)"  # first 24 GiB card in the catalog
    assert 23 << 30 < need <= 24 << 30


# bytes over bandwidth, nothing else
ONE = {b: Efficiency(1.0, 1.0, "test") for b in ("cpu", "cuda")}


def inputs(gpu_bw: int | None, host_bw: int = 60 * GB_S) -> SpeedInputs:
    return SpeedInputs(
        (Rate(gpu_bw, "test") if gpu_bw else None,),
        (None,),
        Rate(host_bw, "test"),
        Rate(1e12, "test"),
        efficiency=ONE,
    )


def test_speed_estimate_is_bytes_over_bandwidth() -> None:
    """Time per token = Σ (weights + KV in use) / bandwidth per device, from an empty context (one
    256-cell block on a GPU; one cell on the CPU, whose flash attention skips masked cells) to a
    full slot; weights cross-checked against memory.py's own per-device sum."""
    t = target(QWEN, "16GiB")
    choice = solve(t, LaunchConfig(), Policy())
    lmap, facts = choice.breakdown.layer_devices, t.model.facts
    read = t.model.bytes_read_per_token(choice.rc, lmap, 1)
    est = estimate(t.model, choice.rc, lmap, t.gpus, inputs(288 * GB_S))
    assert est is not None
    assert [(d.device, d.weight_bytes) for d in est.devices] == [
        ("CUDA0", read[0]),
        ("CPU", read[CPU]),
    ]
    kv = [
        sum(layer_kv(facts, choice.rc, il) for il in range(facts.n_layer) if lmap.layers[il] == dev)
        for dev in (0, CPU)
    ]
    assert choice.rc.flash_attn
    for (n_gpu, n_cpu), which in (((256, 1), 1), ((choice.rc.n_ctx_seq,) * 2, 0)):
        expected = 1 / (
            (read[0] + kv[0] * n_gpu) / (288 * GB_S) + (read[CPU] + kv[1] * n_cpu) / (60 * GB_S)
        )
        assert est.generation_tps[which] == pytest.approx(expected, rel=1e-12)
    # no bandwidth known: no estimate
    assert estimate(t.model, choice.rc, lmap, t.gpus, inputs(None)) is None


def layer_kv(facts, rc, il: int) -> int:  # type: ignore[no-untyped-def]
    from llamafit.memory.kv import layer_cell_bytes

    return layer_cell_bytes(facts, il, rc.type_k, rc.type_v, flash_attn=rc.flash_attn)


def test_moe_tokens_read_only_the_active_experts() -> None:
    t = target(FIXTURES / "moe-qwen3.gguf", "8GiB")
    choice = solve(t, LaunchConfig(), Policy())
    read = t.model.bytes_read_per_token(choice.rc, choice.breakdown.layer_devices, 1)
    facts = t.model.facts
    experts = sum(tt.n_bytes for tt in facts.tensors if "_exps." in tt.name)
    embd = sum(tt.n_bytes for tt in facts.tensors if tt.name == "token_embd.weight")
    # 2 of 8 experts per token
    assert read[0] == facts.weights.total_bytes - embd - experts + experts * 2 // 8


def test_verdicts() -> None:
    full = plan(target(QWEN, "24GiB"), LaunchConfig(), Policy())
    assert (
        verdict_text(full.verdict).endswith("— the trained maximum") and full.smallest_gpu is None
    )
    partial = plan(target(QWEN, "16GiB"), LaunchConfig(), Policy(), speed=inputs(288 * GB_S))
    assert partial.smallest_gpu == "NVIDIA GeForce RTX 3090 Ti (24 GiB)"
    assert partial.speed is not None and partial.verdict.placement == "layers_on_cpu"
    assert partial.verdict.generation_tps == partial.speed.generation_tps
    assert [o.code for o in partial.verdict.speed_options] == ["fewer_gpu_layers"]
    option = partial.verdict.speed_options[0]
    assert option.ctx_per_slot == 32768 and option.n_gpu_layers < partial.choice.rc.n_gpu_layers
    now, then = partial.speed.generation_tps[0], option.generation_tps[0]
    assert then < now
    assert (
        f"; -ngl {option.n_gpu_layers} fits 32,768 tokens but generation drops from ~{now:.1f} to "
        f"~{then:.1f} tokens/s"
    ) in verdict_text(partial.verdict)
    none = plan(
        target(QWEN, "4GiB"), with_given(LaunchConfig(), n_gpu_layers=65), Policy(min_ctx=8192)
    )
    assert none.choice is None
    assert (none.verdict.cause, none.verdict.pinned_ngl, none.verdict.ctx_min) == (
        "pinned_ngl",
        65,
        8192,
    )
    assert verdict_text(none.verdict) == (
        "does not fit: no configuration fits 8,192 tokens per slot on this machine, with -ngl 65 "
        "as pinned and the smallest KV cache; the smallest GPU that holds 8,192 tokens with q8_0 "
        "KV and every layer is NVIDIA GeForce RTX 3090 Ti (24 GiB)"
    )


def test_low_reserve_warning() -> None:
    t = replace(target(QWEN, "24GiB"), reserve_bytes=256 << 20)
    warnings = plan(t, LaunchConfig(), Policy()).warnings
    assert warnings == (Notice("small_reserve", {"reserve_bytes": 256 << 20}),)
    assert notice_text(warnings[0]) == (
        "the reserve per GPU is 256 MiB: below 512 MiB the CUDA context and memory "
        "pools may not fit"
    )


# Granite 3.0 1B-A400M (242 tensors: a scheduler hash set of 2053) has 2065 graph tensors with K and
# V both q8_0, where llama.cpp aborts (replay.scheduler_overflow); one of them f16 holds 1920
# (shape, the cache the smallest GPU is sized with, the verdict's words, whether a card holds both
# caches q8_0)
SMALLEST_CACHE = [
    ("granite3-1b-a400m", ("q8_0", "f16"), "with K q8_0, V f16 and every layer is", False),
    ("llama3.2-1b", ("q8_0", "q8_0"), "with q8_0 KV and every layer is", True),
]


@pytest.mark.parametrize(("key", "cache", "words", "both_q8"), SMALLEST_CACHE)
def test_smallest_gpu_skips_a_cache_llama_cpp_aborts_on(
    key: str, cache: tuple[str, str], words: str, both_q8: bool
) -> None:
    from tests.support.graph_build import model_file

    t = target(model_file(key), "64MiB")
    result = plan(t, LaunchConfig(), Policy(min_ctx=4096))
    assert result.choice is None
    assert result.verdict.smallest_gpu_cache == cache
    assert words in verdict_text(result.verdict)
    both = LaunchConfig(type_k="q8_0", type_v="q8_0", flash_attn="on")
    assert (smallest_gpu_for(t, both, 4096) is not None) is both_q8
