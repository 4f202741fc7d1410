"""`llamafit plan`: the chosen command, the JSON shape, pinned flags, exit codes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.fit.speed import EFFICIENCY
from tests.support import FIXTURES

QWEN = str(FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")


def plan(*args: str):
    return CliRunner().invoke(cli, ["plan", *args])


def test_plan_json_for_qwen_32b_on_24gib() -> None:
    result = plan(QWEN, "--gpu", "24GiB", "--json")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["schema"] == "llamafit.plan/2" and d["fits"] is True
    assert d["command"] == [
        "llama-server",
        "-m",
        QWEN,
        "-c",
        "32768",
        "-ngl",
        "65",
        "-fa",
        "on",
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "-b",
        "2048",
        "-ub",
        "512",
        "--fit",
        "off",
    ]
    assert d["config"]["n_ctx"] == 32768 and d["context_per_slot"] == 32768
    assert [h["name"] for h in d["hardware"]] == ["CUDA0", "CPU"]
    rows = {(t["flash_attn"], t["type_k"], t["type_v"]): t["max_ctx"] for t in d["tradeoffs"]}
    assert rows[("on", "f16", "f16")] == 19200 and rows[("on", "q8_0", "q8_0")] == 32768
    assert d["verdict"] == {
        "fits": True,
        "context_per_slot": 32768,
        "context_min": 4096,
        "context_wanted": 32768,
        "trained_max": True,
        "placement": "all_gpu",
        "n_layer": 65,
        "n_gpu_layers": 65,
        "n_cpu_moe": 0,
        "type_k": "q8_0",
        "type_v": "q8_0",
        "flash_attn": "on",
        "more_gpu_mib": None,
        "blocks_to_cpu": None,
        "generation_tps": [22.27, 27.07],
        "speed_options": [],
        "smallest_gpu": None,
        "smallest_gpu_cache": None,
        "cause": None,
        "pinned_ngl": None,
        "preset": None,
        "text": "fits 32,768 tokens per slot with all layers on the GPU, q8_0/q8_0 KV (a "
        "negligible quality loss), flash "
        "attention on — the trained maximum",
    }
    # 136 KiB per token of q8_0 KV, plus the compute slope
    assert 130 < d["mib_per_1000_tokens"] < 140


def test_pinned_flags_after_double_dash_are_kept_and_passed_through() -> None:
    result = plan(
        QWEN, "--gpu", "24GiB", "--json", "--", "-ngl", "50", "--host", "0.0.0.0", "-np", "2"
    )
    d = json.loads(result.stdout)
    assert d["config"]["n_gpu_layers"] == 50 and d["config"]["n_parallel"] == 2
    assert d["command"][-4:] == ["--fit", "off", "--host", "0.0.0.0"]
    assert "-np" in d["command"]


def test_nothing_fits_exits_1_with_a_verdict() -> None:
    result = plan(QWEN, "--gpu", "2GiB", "--min-ctx", "32768", "--", "-ngl", "65")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-4:] == [
        "Verdict    does not fit: no configuration fits 32,768 tokens per slot on this",
        "           machine, with -ngl 65 as pinned and the smallest KV cache; the",
        "           smallest GPU that holds 32,768 tokens with q8_0 KV and every layer is",
        "           NVIDIA GeForce RTX 3090 Ti (24 GiB)",
    ]


def test_bad_policy_input_is_exit_2() -> None:
    result = plan(QWEN, "--gpu", "24GiB", "--min-ctx", "65536", "--ctx-max", "8192")
    error = "Error: --min-ctx 65536 is larger than the largest context asked for (8192)\n"
    assert (result.exit_code, result.stderr) == (2, error)


def test_plan_json_speed_for_a_catalog_card() -> None:
    """A catalog card has a bandwidth: speed.generation_tps [full, empty], prompt_tps, inputs with
    sources."""
    d = json.loads(plan(QWEN, "--gpu", "rtx4090", "--json").stdout)
    speed = d["speed"]
    low, high = speed["generation_tps"]
    assert 0 < low < high and speed["prompt_tps"] > 0 and speed["calibrated"] is None
    gpu = speed["inputs"]["devices"][0]
    assert (gpu["device"], gpu["bandwidth_bytes_per_s"], gpu["bandwidth_source"]) == (
        "CUDA0",
        1008 * 10**9,
        "catalog: NVIDIA GeForce RTX 4090",
    )
    cuda = EFFICIENCY["cuda"]
    assert gpu["efficiency"] == cuda.generation
    assert gpu["efficiency_source"].startswith("CUDA, GDDR: public")
    # 64 layers: kernel launches and synchronisation (speed.Efficiency.layer_seconds)
    fixed = 64 * cuda.layer_seconds
    assert (gpu["fixed_seconds_per_token"], gpu["band"]) == (round(fixed, 6), cuda.band)
    assert gpu["attention_flops_per_s"] is None  # a GPU is memory-bound only
    empty, full = speed["inputs"]["bytes_per_token"]
    assert (
        gpu["weight_bytes"] + gpu["kv_bytes_empty"],
        gpu["weight_bytes"] + gpu["kv_bytes_full"],
    ) == (empty, full)
    assert high == round(1 / (empty / (1008e9 * cuda.generation) + fixed), 2)
    assert low == round(1 / (full / (1008e9 * cuda.generation) + fixed), 2)
    assert d["verdict"]["generation_tps"] == [low, high]
    assert all(t["generation_tps"] for t in d["tradeoffs"])  # the trade-off column


def test_a_pinned_combination_llama_cpp_rejects_is_bad_input() -> None:
    result = plan(QWEN, "--gpu", "24GiB", "--", "-ctv", "q8_0", "-fa", "off")
    error = "Error: quantized V cache requires flash_attn to be enabled; add -fa on\n"
    assert (result.exit_code, result.stderr) == (2, error)


def test_cpu_only_plans_emit_ngl_0() -> None:
    d = json.loads(plan(str(FIXTURES / "dense-llama.gguf"), "--gpu", "cpu", "--json").stdout)
    assert d["command"][d["command"].index("-ngl") + 1] == "0"


def test_the_whole_text_of_a_partial_offload(fixed_host) -> None:
    result = plan(QWEN, "--gpu", "rtx4080")
    assert result.exit_code == 0
    assert (
        result.stdout
        == f"""\
Model      {QWEN}
           qwen2, Q4_K_M, trained 32,768 tokens
Hardware   CUDA0 (cuda) 16,384 MiB usable; CPU (cpu) 49,152 MiB usable
Command    llama-server \\
           -m {QWEN} \\
           -c 7424 -ngl 52 -fa on -ctk q4_0 -ctv q4_0 -b 2048 -ub 128 \\
           --fit off
(MiB)      usable weights      KV     RS compute  output reserve    used    left
CUDA0      16,384  14,782     416      0     151       0   1,024  16,373      11
CPU        49,152   4,144     106      0      12       2       0   4,264  44,888
Memory     W weights  K KV  C compute  R reserve  . free
CUDA0      [WWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWWKCRRR.] 16,373/16,384 MiB
CPU        [WWWWKC......................................] 4,264/49,152 MiB
Trade-offs (largest context per slot at this offload):
  fa  K     V      -ngl cpu-moe  max context  tokens/s  vs the pick
  on  f16   f16      52       0        2,048   4.9-5.7  -5,376 ctx, better KV
  off f16   f16      52       0        2,048   4.9-5.6  -5,376 ctx, better KV
  on  f16   q8_0     52       0        2,560   4.7-5.7  -4,864 ctx, better KV
  on  q8_0  q8_0     52       0        3,840   4.3-5.7  -3,584 ctx, better KV
  on  f16   q4_0     52       0        3,328   4.5-5.7  -4,096 ctx, better KV
  on  q8_0  q4_0     52       0        5,120   4.0-5.7  -2,304 ctx, better KV
  on  q4_0  q4_0     52       0        7,424   3.5-5.7  the pick
  better/worse KV: the cache's quality against the pick's, by llama.cpp's
    measured KL divergence (PR #7412): q8_0 loses a negligible amount, a 4-bit V
    some, a 4-bit K and V the most
Marginal   56.0 MiB per 1,000 tokens per slot; 305.9 MiB per block on the GPU:
           each block moved to the CPU buys about 5,459 tokens
Speed      generation ~3.5-5.7 tokens/s (full to empty context); prompt ~424
           tokens/s (rough)
           likely 2.6-4.4 full, 4.3-7.2 empty tokens/s (±25%, not measured here
             yet); prompt 254-594 tokens/s
           one chat turn (read 200 tokens, write 400, after 4,096): 78-129 s
           CUDA0: 14,797-15,198 MiB/token, 716.8 GB/s x 0.79 + 2.2 ms (NVIDIA
             GeForce RTX 4080)
           CPU: 3,726-3,832 MiB/token, 50.0 GB/s x 0.54
             ($LLAMAFIT_HOST_BANDWIDTH)
Verdict    fits 7,424 tokens per slot with 13 of 65 layers on the CPU (slower),
           q4_0/q4_0 KV (the most quality loss: K and V in 4 bits), flash
           attention on; 32,768 would need about 1,420 MiB more GPU memory (each
           block moved to the CPU frees 306 MiB: about 5 blocks); -ngl 47 fits
           32,768 tokens but generation drops from ~3.5 to ~1.1 tokens/s; the
           smallest GPU that holds all 32,768 tokens this way is NVIDIA GeForce
           RTX 3090 Ti (24 GiB)
"""
    )


def test_a_small_second_gpu_is_left_out_and_said_so() -> None:
    """Issue #37: 24 GiB and 4 GiB plan as the 24 GiB card alone (all 65 layers, 32,768 tokens),
    and the text says which card is left out and how the command does it."""
    text = plan(QWEN, "--gpu", "24GiB,4GiB").stdout
    assert "-c 32768 -ngl 65 -fa on -ctk q8_0 -ctv q8_0 -b 2048 -ub 512 \\\n" in text
    assert "           -sm none -mg 0 --fit off\n" in text
    assert (
        "Devices    CUDA1 left out: the plan is no better with it (-sm none -mg 0 runs on\n"
        "           CUDA0 alone)\n"
        "Verdict    fits 32,768 tokens per slot with all layers on the GPU, q8_0/q8_0 KV\n"
    ) in text


def test_dev_names_the_devices_planned() -> None:
    """-dev after `--` is modelled (common/arg.cpp parse_device_list): the plan is for CUDA0 alone,
    the devices it names are the only ones in the table; an unknown name is llama.cpp's error."""
    both = json.loads(plan(QWEN, "--gpu", "24GiB,4GiB", "--json").stdout)
    assert both["gpus_left_out"] == ["CUDA1"]
    d = json.loads(plan(QWEN, "--gpu", "24GiB,4GiB", "--json", "--", "-dev", "CUDA0").stdout)
    assert d["gpus_left_out"] == []  # the user's -dev: the devices planned are those it names
    assert [x["name"] for x in d["devices"]] == ["CUDA0", "CPU"]
    assert [x["name"] for x in d["hardware"]] == ["CUDA0", "CPU"]
    assert d["command"][-4:] == ["-dev", "CUDA0", "--fit", "off"]
    assert d["warnings"] == []
    cpu = json.loads(plan(QWEN, "--gpu", "24GiB", "--json", "--", "-dev", "none").stdout)
    assert cpu["hardware"][0]["name"] == "CPU" and cpu["fits"] is False
    bad = plan(QWEN, "--gpu", "24GiB", "--", "-dev", "Vulkan0")
    assert bad.exit_code == 2
    assert bad.output == (
        "Error: -dev: invalid device: Vulkan0 (this machine's GPUs: CUDA0; `llamafit gpus` lists "
        "them by the names llama-server uses)\n"
    )


def test_a_cpu_plan_keeps_the_server_off_the_gpu() -> None:
    d = json.loads(plan(str(FIXTURES / "dense-llama.gguf"), "--gpu", "cpu", "--json").stdout)
    command = d["command"]
    assert command[command.index("-ngl") + 1] == "0"
    assert command[command.index("-dev") + 1] == "none"


def test_device_and_its_variable_are_dev_too() -> None:
    """--device and LLAMA_ARG_DEVICE name the devices as -dev does (common/arg.cpp: one option);
    `cuda1` is CUDA1 (ggml_backend_dev_by_name is case-insensitive)."""
    by_flag = json.loads(
        plan(QWEN, "--gpu", "24GiB,4GiB", "--json", "--", "--device", "cuda1").stdout
    )
    by_env = json.loads(
        CliRunner(env={"LLAMA_ARG_DEVICE": "cuda1"})
        .invoke(cli, ["plan", QWEN, "--gpu", "24GiB,4GiB", "--json"])
        .stdout
    )
    for d in (by_flag, by_env):
        assert [x["name"] for x in d["devices"]] == ["CUDA1", "CPU"]
        assert d["context_per_slot"] == by_flag["context_per_slot"]
