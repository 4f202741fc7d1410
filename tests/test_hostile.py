"""Hostile input (issue #16): each finding reproduced, each failure one line `Error: …` and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from gguf_patch import patch

from llamafit.cli import cli
from llamafit.gguf_reader import read_header
from llamafit.source import BytesSource

U32, I32, U64, I64 = 4, 5, 10, 11


def _header(name: str) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return data[: read_header(BytesSource(data)).data_offset]


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


# ---- facts: impossible counts name the key and the value ---------------------------------------

FACT_CASES = [
    ("nextn-glm4moe.gguf", "glm4moe.nextn_predict_layers", I32, -1, "key glm4moe.nextn_predict_layers = -1 is negative"),
    ("nextn-glm4moe.gguf", "glm4moe.nextn_predict_layers", U32, 4,
     "key glm4moe.nextn_predict_layers = 4 leaves no layer of block_count 4 to run"),
    ("dense-llama.gguf", "llama.nextn_predict_layers", I64, -(2**63), ("key llama.nextn_predict_layers = "
     "-9223372036854775808 is negative")),
    ("dense-llama.gguf", "llama.embedding_length", U32, 0, "key llama.embedding_length = 0 must be at least 1"),
    ("dense-llama.gguf", "llama.context_length", U64, 2**40, ("key llama.context_length = 1099511627776 is larger "
     "than a 32-bit count")),
    ("dense-llama.gguf", "llama.attention.head_count_kv", 9, (I32, [2, -1, 2, 2]),
     "key llama.attention.head_count_kv = -1 is negative"),
    ("moe-qwen3.gguf", "qwen3moe.expert_used_count", U32, 9, "key qwen3moe.expert_used_count = 9 must be 1..expert_count (8)"),
    ("moe-qwen3.gguf", "qwen3moe.expert_count", U32, 4096, "key qwen3moe.expert_count = 4096 exceeds LLAMA_MAX_EXPERTS (1024)"),
    ("swa-gemma3.gguf", "gemma3.attention.sliding_window", I32, -5, "key gemma3.attention.sliding_window = -5 is negative"),
]  # fmt: skip


@pytest.mark.parametrize(("fixture", "key", "vtype", "value", "message"), FACT_CASES, ids=[c[1] + "=" + str(c[3])[:12] for c in FACT_CASES])
@pytest.mark.parametrize("command", ["check", "plan", "inspect"])
def test_impossible_fact_is_one_line_naming_key_and_value(tmp_path: Path, command: str, fixture: str, key: str,
                                                           vtype: int, value: object, message: str) -> None:  # fmt: skip
    path = tmp_path / "bad.gguf"
    path.write_bytes(patch(_header(fixture), key, vtype, value))
    args = [command, str(path)] + (["--gpu", "8GiB"] if command != "inspect" else [])
    assert _invoke(*args) == (2, "", f"Error: {path}: {message}\n")


def test_good_fixture_beside_the_patched_ones(tmp_path: Path) -> None:
    path = tmp_path / "good.gguf"
    path.write_bytes(patch(_header("nextn-glm4moe.gguf"), "glm4moe.nextn_predict_layers", U32, 1))
    code, _out, err = _invoke("plan", str(path), "--gpu", "8GiB")
    assert (code, err) == (0, "")
