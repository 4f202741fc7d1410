"""Store references in every command: ollama:, lmstudio:, hf: (local cache first, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import needs_llama_server


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub is unreachable: a closed loopback port (a network attempt would fail the command)."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


@pytest.mark.parametrize(
    "ref, path_end",
    [
        ("ollama:moe:tiny", "blobs/sha256-"),
        ("ollama:registry.ollama.ai/library/moe:tiny", "blobs/sha256-"),
        ("lmstudio:lmstudio-community/gemma-GGUF", "gemma-GGUF/gemma-F16.gguf"),
        ("lmstudio:lmstudio-community/gemma-GGUF:F16", "gemma-GGUF/gemma-F16.gguf"),
        ("hf:acme/tiny-GGUF:Q8_0", "/tiny-Q8_0.gguf"),
        ("hf:acme/tiny-GGUF", "/tiny-Q8_0.gguf"),
        ("hf:acme/tiny-GGUF:llama", "/split-llama-00001-of-00003.gguf"),
    ],
)
def test_references_resolve_to_local_files(
    ref: str, path_end: str, home: Path, offline: None
) -> None:
    result = CliRunner().invoke(cli, ["plan", ref, "--gpu", "8GiB", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    model_path = data["command"][data["command"].index("-m") + 1]
    assert path_end in model_path and str(home) in model_path


@pytest.mark.parametrize(
    "command",
    [
        ["inspect"],
        ["check", "--gpu", "8GiB"],
        ["script", "--gpu", "8GiB"],
        pytest.param(
            ["run", "--dry-run", "--gpu", "8GiB", "--port", "18700"], marks=needs_llama_server
        ),
    ],
)
def test_every_command_takes_a_reference(command: list[str], home: Path, offline: None) -> None:
    result = CliRunner().invoke(cli, [*command, "ollama:moe:tiny"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "ref, message",
    [
        (
            "ollama:nope:1b",
            (
                "ollama:nope:1b: no such model in {home}/.ollama/models or "
                "/usr/share/ollama/.ollama/models (models there: moe:tiny)"
            ),
        ),
        (
            "ollama:gone",
            "ollama:gone: the manifest names a blob that is missing "
            "({home}/.ollama/models/blobs/sha256-",
        ),
        (
            "lmstudio:acme/nothing",
            (
                "lmstudio:acme/nothing: no folder acme/nothing in {home}/.lmstudio/models or "
                "{home}/.cache/lm-studio/models"
            ),
        ),
        (
            "lmstudio:lmstudio-community/gemma-GGUF:Q2_K",
            "lmstudio-community/gemma-GGUF: no GGUF file matching the tag 'Q2_K' (GGUF files: "
            "gemma-F16.gguf)",
        ),
    ],
)
def test_bad_references_are_one_line(ref: str, message: str, home: Path, offline: None) -> None:
    result = CliRunner().invoke(cli, ["inspect", ref])
    assert result.exit_code == 2
    assert result.output.startswith("Error: " + message.format(home=home)), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_hf_reference_not_cached_goes_to_the_hub(home: Path, offline: None) -> None:
    result = CliRunner().invoke(cli, ["inspect", "hf:acme/other-GGUF"])
    assert result.exit_code == 2
    assert (
        "cannot connect to 127.0.0.1:9" in result.output or "cannot reach the Hub" in result.output
    )


def test_hf_flag_among_the_server_flags_reads_the_local_cache(home: Path, offline: None) -> None:
    result = CliRunner().invoke(
        cli, ["check", "--gpu", "8GiB", "--json", "--", "-hf", "acme/tiny-GGUF:Q8_0"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["model"]["path"].endswith("/tiny-Q8_0.gguf")
