"""The honest verdict: the smallest catalog GPU, the speed cost of CPU layers, bytes read per token."""

from __future__ import annotations

from dataclasses import replace

from conftest import FIXTURES, QWEN, target

from llamafit.config import LaunchConfig, with_given
from llamafit.placement import CPU
from llamafit.check_report import notice_text
from llamafit.findings import Notice
from llamafit.plan import plan, smallest_gpu_for, speed_vs_full_gpu
from llamafit.plan_report import verdict_text
from llamafit.solver import Policy, solve

GB_S = 10**9


def test_smallest_gpu_for_the_trained_context() -> None:
    t = target(QWEN, "16GiB")
    card, need = smallest_gpu_for(t, LaunchConfig(type_k="q8_0", type_v="q8_0"), 32768)
    assert card == "NVIDIA GeForce RTX 3090 Ti (24 GiB)"  # first 24 GiB card in the catalog
    assert 23 << 30 < need <= 24 << 30


def test_speed_estimate_is_bytes_over_bandwidth() -> None:
    t = target(QWEN, "16GiB")
    choice = solve(t, LaunchConfig(), Policy())
    read = t.model.bytes_read_per_token(choice.rc, choice.breakdown.layer_devices, 1)
    gpu_bw, host_bw = 288 * GB_S, 60 * GB_S
    expected = (sum(read.values()) / gpu_bw) / (read[0] / gpu_bw + read[CPU] / host_bw)
    assert speed_vs_full_gpu(t, choice, (gpu_bw,), host_bw) == expected
    assert 0.5 < expected < 0.6  # 12 of 65 layers read at a fifth of the speed
    assert speed_vs_full_gpu(t, choice, (None,), host_bw) is None  # no bandwidth known: no estimate


def test_moe_tokens_read_only_the_active_experts() -> None:
    t = target(FIXTURES / "moe-qwen3.gguf", "8GiB")
    choice = solve(t, LaunchConfig(), Policy())
    read = t.model.bytes_read_per_token(choice.rc, choice.breakdown.layer_devices, 1)
    facts = t.model.facts
    experts = sum(tt.n_bytes for tt in facts.tensors if "_exps." in tt.name)
    embd = sum(tt.n_bytes for tt in facts.tensors if tt.name == "token_embd.weight")
    assert read[0] == facts.weights.total_bytes - embd - experts + experts * 2 // 8  # 2 of 8 experts per token


def test_verdicts() -> None:
    full = plan(target(QWEN, "24GiB"), LaunchConfig(), Policy())
    assert verdict_text(full.verdict).endswith("— the trained maximum") and full.smallest_gpu is None
    partial = plan(target(QWEN, "16GiB"), LaunchConfig(), Policy(), bandwidths=(288 * GB_S,))
    assert partial.smallest_gpu == "NVIDIA GeForce RTX 3090 Ti (24 GiB)"
    assert "generation runs at about 57% of the all-GPU speed" in verdict_text(partial.verdict)
    assert partial.verdict.placement == "layers_on_cpu"
    assert partial.verdict.speed_vs_full_gpu == partial.speed_vs_full_gpu
    none = plan(target(QWEN, "4GiB"), with_given(LaunchConfig(), n_gpu_layers=65), Policy(min_ctx=8192))
    assert none.choice is None
    assert (none.verdict.cause, none.verdict.pinned_ngl, none.verdict.ctx_min) == ("pinned_ngl", 65, 8192)
    assert verdict_text(none.verdict) == (
        "does not fit: no configuration fits 8,192 tokens per slot on this machine, with -ngl 65 as pinned and the "
        "smallest KV cache; the smallest GPU that holds 8,192 tokens with q8_0 KV and every layer is NVIDIA GeForce "
        "RTX 3090 Ti (24 GiB)")


def test_low_reserve_warning() -> None:
    t = replace(target(QWEN, "24GiB"), reserve_bytes=256 << 20)
    warnings = plan(t, LaunchConfig(), Policy()).warnings
    assert warnings == (Notice("small_reserve", {"reserve_bytes": 256 << 20}),)
    assert notice_text(warnings[0]) == ("the reserve per GPU is 256 MiB: below 512 MiB the CUDA context and memory "
                                        "pools may not fit")
