"""`llamafit plan`: the chosen command, the JSON shape, pinned flags, exit codes."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import FIXTURES

from llamafit.cli import cli

QWEN = str(FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")


def plan(*args: str):
    return CliRunner().invoke(cli, ["plan", *args])


def test_plan_json_for_qwen_32b_on_24gib() -> None:
    result = plan(QWEN, "--gpu", "24GiB", "--json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["schema"] == "llamafit.plan/2" and d["fits"] is True
    assert d["command"] == ["llama-server", "-m", QWEN, "-c", "32768", "-ngl", "65", "-fa", "on", "-ctk", "q8_0",
                            "-ctv", "q8_0", "-b", "2048", "-ub", "512", "--fit", "off"]  # fmt: skip
    assert d["config"]["n_ctx"] == 32768 and d["context_per_slot"] == 32768
    assert [h["name"] for h in d["hardware"]] == ["CUDA0", "CPU"]
    rows = {(t["flash_attn"], t["type_k"], t["type_v"]): t["max_ctx"] for t in d["tradeoffs"]}
    assert rows[("on", "f16", "f16")] == 19200 and rows[("on", "q8_0", "q8_0")] == 32768
    assert d["verdict"] == {
        "fits": True, "context_per_slot": 32768, "context_min": 4096, "context_wanted": 32768, "trained_max": True,
        "placement": "all_gpu", "n_layer": 65, "n_gpu_layers": 65, "n_cpu_moe": 0, "type_k": "q8_0", "type_v": "q8_0",
        "flash_attn": "on", "more_gpu_mib": None, "blocks_to_cpu": None, "speed_vs_full_gpu": None,
        "host_bandwidth_bytes_per_s": None, "smallest_gpu": None, "cause": None, "pinned_ngl": None,
        "text": "fits 32,768 tokens per slot with all layers on the GPU, q8_0/q8_0 KV, flash attention on — the "
                "trained maximum",
    }  # fmt: skip
    assert 130 < d["mib_per_1000_tokens"] < 140  # 136 KiB per token of q8_0 KV, plus the compute slope


def test_pinned_flags_after_double_dash_are_kept_and_passed_through() -> None:
    result = plan(QWEN, "--gpu", "24GiB", "--json", "--", "-ngl", "50", "--host", "0.0.0.0", "-np", "2")
    d = json.loads(result.stdout)
    assert d["config"]["n_gpu_layers"] == 50 and d["config"]["n_parallel"] == 2
    assert d["command"][-4:] == ["--fit", "off", "--host", "0.0.0.0"]
    assert "-np" in d["command"]


def test_nothing_fits_exits_1_with_a_verdict() -> None:
    result = plan(QWEN, "--gpu", "2GiB", "--min-ctx", "32768", "--", "-ngl", "65")
    assert result.exit_code == 1
    assert "Verdict    does not fit: no configuration fits 32,768 tokens per slot" in result.stdout


def test_bad_policy_input_is_exit_2() -> None:
    result = plan(QWEN, "--gpu", "24GiB", "--min-ctx", "65536", "--ctx-max", "8192")
    error = "Error: --min-ctx 65536 is larger than the largest context asked for (8192)\n"
    assert (result.exit_code, result.stderr) == (2, error)
