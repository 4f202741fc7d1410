"""`llamafit inspect`: exact text, the stable JSON keys, split models, --demo and `python -m`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from tests.support import FIXTURES


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_text_output_for_an_swa_model() -> None:
    path = FIXTURES / "swa-gemma3.gguf"
    result = run("inspect", str(path))
    assert result.exit_code == 0
    assert (
        result.stdout
        == f"""\
Model          {path}
Name           fixture swa gemma3
Architecture   gemma3, F16, 0.4 M parameters
Size           0.74 MiB in 1 file(s), 93 tensors
Layers         7
Heads          4 query, 2 KV, head dim 32 (K) / 32 (V), n_embd 64
Context        32,768 tokens trained
Vocabulary     512 tokens, tied embeddings
Note           sliding window (standard) of 128 tokens on 6 of 7 layers
Weights        token_embd 0.06 MiB, output tied to token_embd, attention 0.33 MiB, ffn 0.33 MiB, norms 0.01 MiB
KV cache per 1,000 tokens (one sequence, flash attention on):
  type     full attention            SWA    SWA at most
  f16            0.24 MiB       1.12 MiB       1.12 MiB
  q8_0           0.13 MiB       0.60 MiB       0.60 MiB
  q4_0           0.07 MiB       0.32 MiB       0.32 MiB
"""
    )


@pytest.mark.parametrize(
    ("name", "notes"),
    [
        (
            "mla-deepseek2.gguf",
            [
                "MLA: K-only cache, kv_lora_rank 32",
                "MoE: 4 experts, 2 used, 1 shared, expert FFN 32",
            ],
        ),
        (
            "hybrid-granite.gguf",
            ["recurrent state on 4 layers (F32, per sequence: 480 + 2048 floats per layer)"],
        ),
        (
            "nextn-glm4moe.gguf",
            [
                "MoE: 4 experts, 2 used, 1 shared, expert FFN 32",
                "1 NextN/MTP layer(s), not loaded by default",
            ],
        ),
        ("dense-llama.gguf", []),
    ],
)
def test_notes_per_model_class(name: str, notes: list[str]) -> None:
    out = run("inspect", str(FIXTURES / name)).stdout
    assert [line[15:] for line in out.splitlines() if line.startswith("Note ")] == notes


def test_json_for_the_real_gemma(demo_path: Path) -> None:
    result = run("inspect", str(demo_path), "--json")
    assert result.exit_code == 0
    d = json.loads(result.stdout)
    assert d["schema"] == "llamafit.inspect/1"
    assert (d["architecture"], d["n_layer_all"], d["n_vocab"], d["n_ctx_train"]) == (
        "gemma3",
        18,
        262144,
        32768,
    )
    assert d["swa"]["n_swa"] == 512 and d["swa"]["is_swa"].count(True) == 15
    # per token: 3 full layers x (256 K + 256 V) x 1 KV head x 2 bytes; 15 SWA layers likewise
    assert d["kv_cost_per_1000_tokens"]["f16"] == {
        "full_bytes": 3 * 512 * 2 * 1000,
        "swa_bytes": 15 * 512 * 2 * 1000,
        "swa_max_bytes": 15 * 512 * 2 * 1024,  # PAD(512 + 512, 256) cells
        "bytes_per_token_full": 3072,
        "bytes_per_token_swa": 15360,
    }
    # 8 blocks of 34 bytes
    assert d["kv_cost_per_1000_tokens"]["q8_0"]["bytes_per_token_full"] == 3 * 2 * 272
    assert d["weights"]["total_bytes"] == 246587904
    assert (
        sum(d["weights"]["by_role"].values())
        + d["weights"]["token_embd_bytes"]
        + d["weights"]["output_bytes"]
        + d["weights"]["other_bytes"]
        == d["weights"]["total_bytes"]
    )
    assert d["warnings"] == []


def test_demo_flag_and_demo_name(demo_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(demo_path.parent))
    by_flag, by_name = run("inspect", "--demo"), run("inspect", "demo")
    assert by_flag.exit_code == 0 and by_flag.stdout == by_name.stdout
    assert by_flag.stdout.startswith(f"Model          {demo_path}\n")


def test_any_shard_finds_the_whole_split_model() -> None:
    outputs = {run("inspect", str(p), "--json").stdout for p in FIXTURES.glob("split-llama-*.gguf")}
    assert len(outputs) == 1
    d = json.loads(outputs.pop())
    assert (d["n_shards"], d["n_tensors"]) == (3, 39)


def test_missing_shard_is_a_clear_error(tmp_path: Path) -> None:
    for n in (1, 3):
        shutil.copy(FIXTURES / f"split-llama-0000{n}-of-00003.gguf", tmp_path)
    result = run("inspect", str(tmp_path / "split-llama-00001-of-00003.gguf"))
    missing = tmp_path / "split-llama-00002-of-00003.gguf"
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: {missing}: shard of split model split-llama-00001-of-00003.gguf is missing\n",
    )


def test_renamed_shard_cannot_find_its_siblings(tmp_path: Path) -> None:
    renamed = tmp_path / "model.gguf"
    shutil.copy(FIXTURES / "split-llama-00001-of-00003.gguf", renamed)
    result = run("inspect", str(renamed))
    assert result.exit_code == 2
    assert result.stderr == (
        f"Error: {renamed}: is one shard of 3 but its name does not end in "
        "-NNNNN-of-NNNNN.gguf, so the other shards cannot be found\n"
    )


def test_python_dash_m_prints_what_the_command_prints() -> None:
    model = str(FIXTURES / "dense-llama.gguf")
    out = subprocess.run(
        [sys.executable, "-m", "llamafit", "inspect", model],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == run("inspect", model).stdout


def test_help_lists_every_command() -> None:
    result = run("--help")
    commands = result.stdout.split("Commands:\n")[1].splitlines()
    assert result.exit_code == 0
    names = ["calibration", "check", "gpus", "inspect", "ls", "plan", "run", "script"]
    assert [line.split()[0] for line in commands] == names


def test_a_fifo_is_not_a_model(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    result = run("inspect", str(fifo))
    assert (result.exit_code, result.stderr) == (
        2,
        f"Error: {fifo}: cannot open: not a regular file\n",
    )


def test_a_model_without_swa_shows_no_swa_columns_and_billions_of_parameters() -> None:
    """32.8 B parameters (it said 32,763.9 M), and no SWA columns of zeros."""
    from tests.support import QWEN

    lines = run("inspect", str(QWEN)).stdout.splitlines()
    assert lines[2] == "Architecture   qwen2, Q4_K_M, 32.8 B parameters"
    table = lines[lines.index("KV cache per 1,000 tokens (one sequence, flash attention on):") :]
    assert table[1:5] == [
        "  type     full attention",
        "  f16          250.00 MiB",
        "  q8_0         132.81 MiB",
        "  q4_0          70.31 MiB",
    ]
