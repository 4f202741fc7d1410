"""The first hour (issue #10): the usual mistakes get one-line errors, never a wrong answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from llamafit.cli import cli

DENSE = str(FIXTURES / "dense-llama.gguf")


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner(env=env).invoke(cli, list(args))


# ---- 1. --gpu numbers without a unit, zero and tiny sizes ----


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ("24", "--gpu 24 has no unit; did you mean 24GiB?"),
        ("3090", "--gpu 3090 has no unit; did you mean rtx3090?"),
        ("24000", "--gpu 24000 has no unit; did you mean 24000MiB?"),
        ("24GiB,12", "--gpu 12 has no unit; did you mean 12GiB?"),
        ("0GiB", "--gpu 0GiB: a GPU needs at least 1 MiB (e.g. 24GiB)"),
        ("0.0000001GiB", "--gpu 0.0000001GiB: a GPU needs at least 1 MiB (e.g. 24GiB)"),
        ("2x0G", "--gpu 0G: a GPU needs at least 1 MiB (e.g. 24GiB)"),
    ],
)
@pytest.mark.parametrize("command", ["check", "plan", "script"])
def test_gpu_without_unit_or_size_is_exit_2(command: str, gpu: str, message: str) -> None:
    result = invoke(command, DENSE, "--gpu", gpu)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"Error: {message}\n")


# ---- 2. mistyped llamafit options; flags llama-server would refuse ----


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "24GiB"], "no such option --gpus; did you mean --gpu? (llama-server flags go after --)"),
        (["-c", "8192"], "no such option -c (llama-server flags go after --)"),
        (["--", "-ctx", "8192"], "llama-server would not start: it has no flag -ctx; did you mean -c (--ctx-size)?"),
        (["--", "--ctx-size=8192"], "llama-server would not start: it has no flag --ctx-size=8192; write "
                                    "--ctx-size 8192"),
        (["--", "-fa", "on", "--flash-atention", "on"], "llama-server would not start: it has no flag "
                                                         "--flash-atention; did you mean -fa (--flash-attn)?"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["check", "plan"])
def test_unknown_flags_are_exit_2_without_a_verdict(command: str, args: list[str], message: str) -> None:
    result = invoke(command, DENSE, "--gpu", "8GiB", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"Error: {message}\n")


def test_flags_after_double_dash_still_work() -> None:
    result = invoke("check", DENSE, "--gpu", "8GiB", "--", "-c", "4096", "--alias", "chat")
    assert result.exit_code == 0, result.output
    assert "kept, not passed on" not in result.output


# ---- 5. script -o into a missing directory ----


@pytest.mark.parametrize("kind", ["sh", "systemd", "llama-swap", "models-ini", "docker"])
@pytest.mark.parametrize("where", ["no-such-dir/start.sh", "README/x"])
def test_script_output_into_a_missing_directory(tmp_path: Path, kind: str, where: str) -> None:
    (tmp_path / "README").write_text("a file, not a directory\n")
    out = tmp_path / where
    result = invoke("script", DENSE, "--gpu", "8GiB", "--format", kind, "-o", str(out))
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: -o {out}: no such directory {out.parent}\n"
    assert not out.exists()
